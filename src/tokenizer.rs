//! Byte-level BPE tokenizer (GGUF `tokenizer.ggml.model = "gpt2"`), built from plain vocab data.
//!
//! Encoding, as llama.cpp does it:
//! 1. Special-token partition: the text is cut at every occurrence of a special token's text
//!    (token types 3 control, 4 user-defined, 2 unknown), longest token texts first. User-defined
//!    tokens are always cut out; control and unknown tokens only when `parse_special` is set.
//! 2. Each remaining piece is split by the pre-tokenizer regex (`qwen35` or `qwen2`), every
//!    split's bytes are mapped to characters by GPT-2's byte↔unicode table, and BPE merges them
//!    by rank (the index in the merge list; lowest first, leftmost among equals).
//!
//! Steps 2 runs in the `tokenizers` crate (Split + ByteLevel pre-tokenizers, BPE model);
//! step 1 is here, because `tokenizers` cannot switch control tokens on and off per call.
//!
//! Decoding maps normal tokens' characters back to bytes, `<0xNN>` byte tokens to their byte,
//! and every other token type to its text as written, then reads the bytes as UTF-8
//! (invalid sequences become U+FFFD). [`StreamDecoder`] does the same incrementally.

use std::collections::HashMap;

use thiserror::Error;
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::SplitDelimiterBehavior;

/// The `qwen35` pre-tokenizer regex (docs/DESIGN.md §1.1; llama.cpp `LLAMA_VOCAB_PRE_TYPE_QWEN35`).
pub const QWEN35_PATTERN: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// The `qwen2` pre-tokenizer regex (llama.cpp `LLAMA_VOCAB_PRE_TYPE_QWEN2`).
pub const QWEN2_PATTERN: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// llama.cpp token types (`tokenizer.ggml.token_type`).
pub mod token_type {
    pub const NORMAL: i32 = 1;
    pub const UNKNOWN: i32 = 2;
    pub const CONTROL: i32 = 3;
    pub const USER_DEFINED: i32 = 4;
    pub const UNUSED: i32 = 5;
    pub const BYTE: i32 = 6;
}

/// Everything the tokenizer needs, as read from the GGUF metadata.
#[derive(Clone, Debug, Default)]
pub struct TokenizerSpec {
    /// `tokenizer.ggml.model`; only `"gpt2"` (byte-level BPE) is supported.
    pub model: String,
    /// `tokenizer.ggml.pre`: `"qwen35"` or `"qwen2"`.
    pub pre: String,
    pub tokens: Vec<String>,
    /// One per token (1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte);
    /// empty means all normal.
    pub token_types: Vec<i32>,
    /// `"left right"`, in rank order.
    pub merges: Vec<String>,
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub pad: Option<u32>,
    pub add_bos: bool,
}

#[derive(Debug, Error)]
pub enum TokenizerError {
    #[error("unsupported tokenizer model {0:?} (only \"gpt2\" byte-level BPE is supported)")]
    UnsupportedModel(String),
    #[error("unsupported pre-tokenizer {0:?} (supported: \"qwen35\", \"qwen2\")")]
    UnsupportedPre(String),
    #[error("the vocabulary is empty")]
    EmptyVocab,
    #[error("vocabulary of {0} tokens does not fit 32-bit token ids")]
    VocabTooLarge(usize),
    #[error("{tokens} tokens but {types} token types")]
    TypeCountMismatch { tokens: usize, types: usize },
    #[error("merge {index} ({text:?}) is not two tokens separated by a space")]
    BadMerge { index: usize, text: String },
    #[error("{which} token id {id} is outside the vocabulary of {n_vocab}")]
    SpecialOutOfRange {
        which: &'static str,
        id: u32,
        n_vocab: usize,
    },
    #[error("token id {id} is outside the vocabulary of {n_vocab}")]
    UnknownId { id: u32, n_vocab: usize },
    #[error("the vocabulary has no token for byte 0x{0:02X}, which the text contains")]
    MissingByte(u8),
    #[error("tokenizer backend: {0}")]
    Backend(String),
}

/// GPT-2's byte → character table: printable Latin-1 bytes map to themselves, the other 68
/// bytes to U+0100 onwards in byte order.
fn byte_to_char_table() -> [char; 256] {
    let mut table = ['\0'; 256];
    let mut next = 256u32;
    for (b, slot) in table.iter_mut().enumerate() {
        let b = b as u32;
        let printable =
            (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
        let code = if printable {
            b
        } else {
            next += 1;
            next - 1
        };
        *slot = char::from_u32(code).unwrap_or('\0');
    }
    table
}

/// A byte-level BPE tokenizer.
pub struct Tokenizer {
    hf: tokenizers::Tokenizer,
    tokens: Vec<String>,
    /// Decoded bytes of token i: `piece_bytes[piece_start[i]..piece_start[i + 1]]`.
    piece_bytes: Vec<u8>,
    piece_start: Vec<usize>,
    /// Specials as (id, always): `always` for user-defined tokens, which are cut out even
    /// without `parse_special`. Longest text first.
    specials: Vec<(u32, bool)>,
    is_control: Vec<bool>,
    byte_token: [Option<u32>; 256],
    eog: Vec<u32>,
    bos: Option<u32>,
    eos: Option<u32>,
    pad: Option<u32>,
    add_bos: bool,
    mask: Option<u32>,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("n_vocab", &self.tokens.len())
            .field("n_specials", &self.specials.len())
            .field("bos", &self.bos)
            .field("eos", &self.eos)
            .finish_non_exhaustive()
    }
}

fn backend(context: &str, e: impl std::fmt::Display) -> TokenizerError {
    TokenizerError::Backend(format!("{context}: {e}"))
}

fn pre_tokenizer(pattern: &str) -> Result<PreTokenizerWrapper, TokenizerError> {
    let split = Split::new(
        SplitPattern::Regex(pattern.to_owned()),
        SplitDelimiterBehavior::Isolated,
        false,
    )
    .map_err(|e| backend("compiling the pre-tokenizer regex", e))?;
    let bytes = ByteLevel::new(false, false, false);
    Ok(Sequence::new(vec![split.into(), bytes.into()]).into())
}

/// Splits `"left right"` at the first space after the first character (llama.cpp's rule).
fn split_merge(index: usize, text: &str) -> Result<(String, String), TokenizerError> {
    let bad = || TokenizerError::BadMerge {
        index,
        text: text.to_owned(),
    };
    let first = text.chars().next().ok_or_else(bad)?.len_utf8();
    let space = text[first..].find(' ').ok_or_else(bad)? + first;
    let (l, r) = (&text[..space], &text[space + 1..]);
    if r.is_empty() {
        return Err(bad());
    }
    Ok((l.to_owned(), r.to_owned()))
}

/// The bytes a token decodes to (see the module doc).
fn piece_of(text: &str, ty: i32, char_to_byte: &HashMap<char, u8>, out: &mut Vec<u8>) {
    match ty {
        token_type::NORMAL => {
            for c in text.chars() {
                match char_to_byte.get(&c) {
                    Some(&b) => out.push(b),
                    None => out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
                }
            }
        }
        token_type::BYTE => {
            let hex = text.strip_prefix("<0x").and_then(|t| t.strip_suffix('>'));
            match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                Some(b) => out.push(b),
                None => out.extend_from_slice(text.as_bytes()),
            }
        }
        _ => out.extend_from_slice(text.as_bytes()),
    }
}

impl Tokenizer {
    pub fn new(spec: &TokenizerSpec) -> Result<Tokenizer, TokenizerError> {
        if spec.model != "gpt2" {
            return Err(TokenizerError::UnsupportedModel(spec.model.clone()));
        }
        let pattern = match spec.pre.as_str() {
            "qwen35" => QWEN35_PATTERN,
            "qwen2" => QWEN2_PATTERN,
            other => return Err(TokenizerError::UnsupportedPre(other.to_owned())),
        };
        let n = spec.tokens.len();
        if n == 0 {
            return Err(TokenizerError::EmptyVocab);
        }
        if n > u32::MAX as usize {
            return Err(TokenizerError::VocabTooLarge(n));
        }
        if !spec.token_types.is_empty() && spec.token_types.len() != n {
            return Err(TokenizerError::TypeCountMismatch {
                tokens: n,
                types: spec.token_types.len(),
            });
        }
        for (which, id) in [("bos", spec.bos), ("eos", spec.eos), ("padding", spec.pad)] {
            if let Some(id) = id.filter(|&id| id as usize >= n) {
                return Err(TokenizerError::SpecialOutOfRange {
                    which,
                    id,
                    n_vocab: n,
                });
            }
        }
        let ty = |i: usize| {
            spec.token_types
                .get(i)
                .copied()
                .unwrap_or(token_type::NORMAL)
        };

        // Later duplicates win, as in llama.cpp's token_to_id map.
        let mut vocab = Vocab::with_capacity(n);
        for (i, t) in spec.tokens.iter().enumerate() {
            vocab.insert(t.clone(), i as u32);
        }
        let merges = spec
            .merges
            .iter()
            .enumerate()
            .map(|(i, m)| split_merge(i, m))
            .collect::<Result<Vec<_>, _>>()?;
        let bpe = BPE::builder()
            .vocab_and_merges(vocab, merges)
            .build()
            .map_err(|e| backend("building the BPE model", e))?;
        let mut hf = tokenizers::Tokenizer::new(bpe);
        hf.with_pre_tokenizer(Some(pre_tokenizer(pattern)?));

        let byte_char = byte_to_char_table();
        let char_to_byte: HashMap<char, u8> = byte_char
            .iter()
            .enumerate()
            .map(|(b, &c)| (c, b as u8))
            .collect();
        let mut byte_token = [None; 256];
        for (b, slot) in byte_token.iter_mut().enumerate() {
            *slot = hf.token_to_id(byte_char[b].encode_utf8(&mut [0; 4]));
        }

        let mut piece_bytes = Vec::new();
        let mut piece_start = Vec::with_capacity(n + 1);
        let mut is_control = Vec::with_capacity(n);
        let mut specials = Vec::new();
        for (i, t) in spec.tokens.iter().enumerate() {
            piece_start.push(piece_bytes.len());
            piece_of(t, ty(i), &char_to_byte, &mut piece_bytes);
            let kind = ty(i);
            is_control.push(kind == token_type::CONTROL);
            let special = matches!(
                kind,
                token_type::CONTROL | token_type::USER_DEFINED | token_type::UNKNOWN
            );
            if special && !t.is_empty() {
                specials.push((i as u32, kind == token_type::USER_DEFINED));
            }
        }
        piece_start.push(piece_bytes.len());
        specials.sort_by(|a, b| {
            let (la, lb) = (
                spec.tokens[a.0 as usize].len(),
                spec.tokens[b.0 as usize].len(),
            );
            lb.cmp(&la).then(a.0.cmp(&b.0))
        });

        let mut eog: Vec<u32> = spec.eos.into_iter().collect();
        for name in ["<|im_end|>", "<|endoftext|>"] {
            if let Some(id) = spec.tokens.iter().position(|t| t == name) {
                let id = id as u32;
                if !eog.contains(&id) {
                    eog.push(id);
                }
            }
        }
        let mask = spec
            .tokens
            .iter()
            .position(|t| t == "<|mask|>")
            .map(|i| i as u32);

        Ok(Tokenizer {
            hf,
            tokens: spec.tokens.clone(),
            piece_bytes,
            piece_start,
            specials,
            is_control,
            byte_token,
            eog,
            bos: spec.bos,
            eos: spec.eos,
            pad: spec.pad,
            add_bos: spec.add_bos,
            mask,
        })
    }

    /// Text to token ids. With `parse_special`, control tokens written in the text (such as
    /// `<|im_start|>`) become their ids; user-defined tokens always do. A BOS is prepended
    /// when the spec's `add_bos` is set.
    pub fn encode(&self, text: &str, parse_special: bool) -> Result<Vec<u32>, TokenizerError> {
        let mut ids = Vec::with_capacity(text.len() / 3 + 2);
        if self.add_bos {
            ids.extend(self.bos);
        }
        for frag in self.partition(text, parse_special) {
            match frag {
                Fragment::Special(id) => ids.push(id),
                Fragment::Text(s, e) => self.encode_plain(&text[s..e], &mut ids)?,
            }
        }
        Ok(ids)
    }

    fn encode_plain(&self, text: &str, ids: &mut Vec<u32>) -> Result<(), TokenizerError> {
        if let Some(&b) = text
            .as_bytes()
            .iter()
            .find(|&&b| self.byte_token[b as usize].is_none())
        {
            return Err(TokenizerError::MissingByte(b));
        }
        let enc = self
            .hf
            .encode_fast(text, false)
            .map_err(|e| backend("encoding", e))?;
        ids.extend_from_slice(enc.get_ids());
        Ok(())
    }

    /// Cuts the text at special tokens, longest token texts first (llama.cpp's
    /// `tokenizer_st_partition`).
    fn partition(&self, text: &str, parse_special: bool) -> Vec<Fragment> {
        let mut frags = vec![Fragment::Text(0, text.len())];
        if text.is_empty() {
            return Vec::new();
        }
        for &(id, always) in &self.specials {
            if !(parse_special || always) {
                continue;
            }
            let pat = self.tokens[id as usize].as_str();
            if !text.contains(pat) {
                continue;
            }
            let mut out = Vec::with_capacity(frags.len() + 2);
            for f in frags {
                let Fragment::Text(start, end) = f else {
                    out.push(f);
                    continue;
                };
                let mut pos = start;
                while let Some(m) = text[pos..end].find(pat) {
                    let m = pos + m;
                    if m > pos {
                        out.push(Fragment::Text(pos, m));
                    }
                    out.push(Fragment::Special(id));
                    pos = m + pat.len();
                }
                if pos < end {
                    out.push(Fragment::Text(pos, end));
                }
            }
            frags = out;
        }
        frags
    }

    /// Token ids to text; every token is rendered, control tokens included.
    pub fn decode(&self, ids: &[u32]) -> Result<String, TokenizerError> {
        let mut bytes = Vec::with_capacity(ids.len() * 4);
        for &id in ids {
            bytes.extend_from_slice(self.piece(id)?);
        }
        Ok(match String::from_utf8(bytes) {
            Ok(s) => s,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        })
    }

    /// The bytes token `id` decodes to.
    pub fn piece(&self, id: u32) -> Result<&[u8], TokenizerError> {
        let i = id as usize;
        if i >= self.tokens.len() {
            return Err(TokenizerError::UnknownId {
                id,
                n_vocab: self.tokens.len(),
            });
        }
        Ok(&self.piece_bytes[self.piece_start[i]..self.piece_start[i + 1]])
    }

    pub fn vocab_size(&self) -> usize {
        self.tokens.len()
    }

    pub fn token_to_id(&self, s: &str) -> Option<u32> {
        self.hf.token_to_id(s)
    }

    /// The token's text as stored in the vocabulary (byte-level characters for normal tokens).
    pub fn id_to_token(&self, id: u32) -> Option<&str> {
        self.tokens.get(id as usize).map(String::as_str)
    }

    /// End of generation: eos, `<|im_end|>`, `<|endoftext|>`.
    pub fn is_eog(&self, id: u32) -> bool {
        self.eog.contains(&id)
    }

    /// The end-of-generation ids, eos first.
    pub fn eog_tokens(&self) -> &[u32] {
        &self.eog
    }

    /// Whether `id` is a control token (type 3), e.g. `<|im_start|>`.
    pub fn is_control(&self, id: u32) -> bool {
        self.is_control.get(id as usize).copied().unwrap_or(false)
    }

    /// The diffusion mask token: the one set by [`Tokenizer::set_mask_token`]
    /// (`tokenizer.ggml.mask_token_id`), else the token whose text is `<|mask|>`.
    pub fn mask_token(&self) -> Option<u32> {
        self.mask
    }

    /// Overrides the mask token (from `tokenizer.ggml.mask_token_id`).
    pub fn set_mask_token(&mut self, id: u32) -> Result<(), TokenizerError> {
        if id as usize >= self.tokens.len() {
            return Err(TokenizerError::SpecialOutOfRange {
                which: "mask",
                id,
                n_vocab: self.tokens.len(),
            });
        }
        self.mask = Some(id);
        Ok(())
    }

    pub fn bos(&self) -> Option<u32> {
        self.bos
    }

    pub fn eos(&self) -> Option<u32> {
        self.eos
    }

    pub fn pad(&self) -> Option<u32> {
        self.pad
    }

    pub fn add_bos(&self) -> bool {
        self.add_bos
    }

    /// An incremental decoder over this tokenizer.
    pub fn stream_decoder(&self) -> StreamDecoder<'_> {
        StreamDecoder::new(self)
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Fragment {
    /// Byte range of raw text.
    Text(usize, usize),
    Special(u32),
}

/// Incremental detokenizer: each [`StreamDecoder::push`] returns the text that became complete,
/// holding back the start of a UTF-8 sequence split across tokens. The concatenation of all
/// pushes and [`StreamDecoder::finish`] equals [`Tokenizer::decode`] of the same ids.
#[derive(Debug)]
pub struct StreamDecoder<'a> {
    tok: &'a Tokenizer,
    pending: Vec<u8>,
}

impl<'a> StreamDecoder<'a> {
    pub fn new(tok: &'a Tokenizer) -> StreamDecoder<'a> {
        StreamDecoder {
            tok,
            pending: Vec::new(),
        }
    }

    /// Adds one token; returns the newly complete text (possibly empty).
    pub fn push(&mut self, id: u32) -> Result<String, TokenizerError> {
        self.pending.extend_from_slice(self.tok.piece(id)?);
        let mut out = String::new();
        let mut start = 0;
        loop {
            match std::str::from_utf8(&self.pending[start..]) {
                Ok(s) => {
                    out.push_str(s);
                    start = self.pending.len();
                    break;
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    out.push_str(&String::from_utf8_lossy(
                        &self.pending[start..start + valid],
                    ));
                    match e.error_len() {
                        Some(bad) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            start += valid + bad;
                        }
                        None => {
                            start += valid;
                            break;
                        }
                    }
                }
            }
        }
        self.pending.drain(..start);
        Ok(out)
    }

    /// Whether bytes of an incomplete character are held back.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Flushes what is held back (an incomplete sequence becomes U+FFFD).
    pub fn finish(&mut self) -> String {
        let out = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        out
    }
}

#[cfg(test)]
#[path = "tokenizer_tests.rs"]
mod tests;
