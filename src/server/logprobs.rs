//! Log-probabilities as each dialect writes them: OpenAI's chat
//! `logprobs.content`, the completions' legacy arrays (with an echoed
//! prompt's scores), llama-server's `completion_probabilities`.

use serde::Serialize;
use serde_json::{Map, Value};

use crate::sample::TokenLogprob;
use crate::tokenizer::Tokenizer;

/// A log-probability as JSON can carry it: −9999 for an impossible token, as
/// OpenAI writes it.
pub(crate) fn finite_lp(logprob: f32) -> f64 {
    if logprob.is_finite() {
        logprob as f64
    } else {
        -9999.0
    }
}

/// A token as OpenAI's `logprobs` give it: its text, its log-probability,
/// its bytes, and (for the emitted token) its most likely alternatives;
/// llama-server's entries carry the id too.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct TokenEntry {
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<u32>,
    token: String,
    logprob: f64,
    bytes: Vec<u8>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_logprobs: Option<Vec<TokenEntry>>,
}

impl TokenEntry {
    fn new(tok: &Tokenizer, id: u32, logprob: f32, with_id: bool) -> TokenEntry {
        let bytes = tok.piece(id).unwrap_or(&[]);
        TokenEntry {
            id: with_id.then_some(id),
            token: String::from_utf8_lossy(bytes).into_owned(),
            logprob: finite_lp(logprob),
            bytes: bytes.to_vec(),
            top_logprobs: None,
        }
    }

    /// The emitted token's entry with its alternatives'.
    fn with_top(tok: &Tokenizer, r: &TokenLogprob, with_id: bool) -> TokenEntry {
        let top = r
            .top
            .iter()
            .map(|&(i, l)| TokenEntry::new(tok, i, l, with_id));
        TokenEntry {
            top_logprobs: Some(top.collect()),
            ..TokenEntry::new(tok, r.id, r.logprob, with_id)
        }
    }
}

/// A chat choice's `logprobs`: `{"content": [...], "refusal": null}`.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct ChatLogprobs {
    content: Vec<TokenEntry>,
    refusal: Option<String>,
}

/// A chat choice's `logprobs`, each token with its `top_logprobs`.
pub(crate) fn chat_logprobs(tok: &Tokenizer, lps: &[TokenLogprob]) -> ChatLogprobs {
    ChatLogprobs {
        content: lps
            .iter()
            .map(|r| TokenEntry::with_top(tok, r, false))
            .collect(),
        refusal: None,
    }
}

/// A completion choice's `logprobs` (the legacy shape): `tokens`,
/// `token_logprobs`, `top_logprobs` (text → log-probability) and
/// `text_offset`, counted in characters from the choice's start. A token
/// without a record (an echoed prompt's first) gets nulls.
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct LegacyLogprobs {
    tokens: Vec<String>,
    token_logprobs: Vec<Option<f64>>,
    top_logprobs: Vec<Option<Map<String, Value>>>,
    text_offset: Vec<usize>,
}

impl LegacyLogprobs {
    /// `other`'s tokens after these.
    pub fn extend(&mut self, other: LegacyLogprobs) {
        self.tokens.extend(other.tokens);
        self.token_logprobs.extend(other.token_logprobs);
        self.top_logprobs.extend(other.top_logprobs);
        self.text_offset.extend(other.text_offset);
    }
}

/// [`LegacyLogprobs`] of `entries`; `offset` is where these tokens start,
/// and moves past them.
fn legacy_logprobs<'a>(
    tok: &Tokenizer,
    entries: impl Iterator<Item = (u32, Option<&'a TokenLogprob>)>,
    offset: &mut usize,
) -> LegacyLogprobs {
    let text = |id: u32| String::from_utf8_lossy(tok.piece(id).unwrap_or(&[])).into_owned();
    let mut out = LegacyLogprobs::default();
    for (id, r) in entries {
        let t = text(id);
        out.text_offset.push(*offset);
        *offset += t.chars().count();
        out.tokens.push(t);
        out.token_logprobs.push(r.map(|r| finite_lp(r.logprob)));
        out.top_logprobs.push(r.map(|r| {
            r.top
                .iter()
                .map(|&(i, l)| (text(i), Value::from(finite_lp(l))))
                .collect()
        }));
    }
    out
}

/// [`LegacyLogprobs`] of generated tokens.
pub(crate) fn completion_logprobs(
    tok: &Tokenizer,
    lps: &[TokenLogprob],
    offset: &mut usize,
) -> LegacyLogprobs {
    legacy_logprobs(tok, lps.iter().map(|r| (r.id, Some(r))), offset)
}

/// [`LegacyLogprobs`] of an echoed prompt: its first token has none, each
/// other one the record `scored` holds for it.
pub(crate) fn echoed_logprobs(
    tok: &Tokenizer,
    prompt: &[u32],
    scored: Option<&[TokenLogprob]>,
    offset: &mut usize,
) -> LegacyLogprobs {
    let records = std::iter::once(None).chain(scored.unwrap_or(&[]).iter().map(Some));
    let entries = prompt
        .iter()
        .zip(records.chain(std::iter::repeat(None)))
        .map(|(&id, r)| (id, r));
    legacy_logprobs(tok, entries, offset)
}

/// llama-server's `completion_probabilities`: each token with its id,
/// text, log-probability, bytes and alternatives.
pub(crate) fn native_probs(tok: &Tokenizer, lps: &[TokenLogprob]) -> Vec<TokenEntry> {
    lps.iter()
        .map(|r| TokenEntry::with_top(tok, r, true))
        .collect()
}
