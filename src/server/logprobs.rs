//! Log-probabilities as each dialect writes them: OpenAI's chat
//! `logprobs.content`, the completions' legacy arrays (with an echoed
//! prompt's scores), llama-server's `completion_probabilities`.

use serde_json::{json, Map, Value};

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

/// A token as OpenAI's `logprobs` give it: its text, its log-probability
/// and its bytes.
pub(crate) fn token_json(tok: &Tokenizer, id: u32, logprob: f32) -> Value {
    let bytes = tok.piece(id).unwrap_or(&[]);
    json!({"token": String::from_utf8_lossy(bytes), "logprob": finite_lp(logprob), "bytes": bytes})
}

/// A chat choice's `logprobs`: `{"content": [...]}`, each token with its
/// `top_logprobs`.
pub(crate) fn chat_logprobs(tok: &Tokenizer, lps: &[TokenLogprob]) -> Value {
    let content: Vec<Value> = lps
        .iter()
        .map(|r| {
            let mut v = token_json(tok, r.id, r.logprob);
            let top = r.top.iter().map(|&(i, l)| token_json(tok, i, l));
            v["top_logprobs"] = Value::Array(top.collect());
            v
        })
        .collect();
    json!({"content": content, "refusal": null})
}

/// A completion choice's `logprobs` (the legacy shape): `tokens`,
/// `token_logprobs`, `top_logprobs` (text → log-probability) and
/// `text_offset`, counted in characters from the choice's start; `offset`
/// is where these tokens start, and moves past them. A token without a
/// record (an echoed prompt's first) gets nulls.
pub(crate) fn legacy_logprobs<'a>(
    tok: &Tokenizer,
    entries: impl Iterator<Item = (u32, Option<&'a TokenLogprob>)>,
    offset: &mut usize,
) -> Value {
    let text = |id: u32| String::from_utf8_lossy(tok.piece(id).unwrap_or(&[])).into_owned();
    let (mut tokens, mut lp, mut top, mut at) = (vec![], vec![], vec![], vec![]);
    for (id, r) in entries {
        let t = text(id);
        at.push(*offset);
        *offset += t.chars().count();
        tokens.push(t);
        lp.push(r.map_or(Value::Null, |r| json!(finite_lp(r.logprob))));
        top.push(r.map_or(Value::Null, |r| {
            let alts: Map<String, Value> = r
                .top
                .iter()
                .map(|&(i, l)| (text(i), json!(finite_lp(l))))
                .collect();
            Value::Object(alts)
        }));
    }
    json!({"tokens": tokens, "token_logprobs": lp, "top_logprobs": top, "text_offset": at})
}

/// [`legacy_logprobs`] of generated tokens.
pub(crate) fn completion_logprobs(
    tok: &Tokenizer,
    lps: &[TokenLogprob],
    offset: &mut usize,
) -> Value {
    legacy_logprobs(tok, lps.iter().map(|r| (r.id, Some(r))), offset)
}

/// [`legacy_logprobs`] of an echoed prompt: its first token has none, each
/// other one the record `scored` holds for it.
pub(crate) fn echoed_logprobs(
    tok: &Tokenizer,
    prompt: &[u32],
    scored: Option<&[TokenLogprob]>,
    offset: &mut usize,
) -> Value {
    let records = std::iter::once(None).chain(scored.unwrap_or(&[]).iter().map(Some));
    let entries = prompt
        .iter()
        .zip(records.chain(std::iter::repeat(None)))
        .map(|(&id, r)| (id, r));
    legacy_logprobs(tok, entries, offset)
}

/// llama-server's `completion_probabilities`: each token with its id,
/// text, log-probability, bytes and alternatives.
pub(crate) fn native_probs(tok: &Tokenizer, lps: &[TokenLogprob]) -> Value {
    let entry = |id: u32, lp: f32| {
        let mut v = token_json(tok, id, lp);
        v["id"] = json!(id);
        v
    };
    let list: Vec<Value> = lps
        .iter()
        .map(|r| {
            let mut v = entry(r.id, r.logprob);
            let top = r.top.iter().map(|&(i, l)| entry(i, l));
            v["top_logprobs"] = Value::Array(top.collect());
            v
        })
        .collect();
    Value::Array(list)
}
