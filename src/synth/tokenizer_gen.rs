//! A small byte-level BPE vocabulary with real merges, trained
//! deterministically on a built-in English sample.
//!
//! Layout of ids: the 256 byte tokens (GPT-2 byte↔unicode mapping), then the
//! merged tokens, then filler normal tokens, then the special tokens starting
//! at `special_base` (248044 for the real 248320 vocabulary, so that
//! `<|endoftext|>` = 248044, `<|im_end|>` = 248046 and the pad token = 248055
//! as in the real files), then reserved control tokens up to the vocab size.

use std::collections::{BTreeMap, HashMap, HashSet};

/// The training text (written for this project).
const CORPUS: &str = include_str!("corpus.txt");

/// llama.cpp's token types.
pub const TOKEN_NORMAL: i32 = 1;
pub const TOKEN_CONTROL: i32 = 3;
pub const TOKEN_USER_DEFINED: i32 = 4;

/// The real vocabulary size and the id of its first special token.
pub const REAL_VOCAB: usize = 248320;
pub const REAL_SPECIAL_BASE: usize = 248044;

/// The special tokens, by offset from `special_base`.
const SPECIALS: [(&str, i32); 12] = [
    ("<|endoftext|>", TOKEN_CONTROL),
    ("<|im_start|>", TOKEN_CONTROL),
    ("<|im_end|>", TOKEN_CONTROL),
    ("<|mask|>", TOKEN_CONTROL),
    ("<think>", TOKEN_USER_DEFINED),
    ("</think>", TOKEN_USER_DEFINED),
    ("<|reserved_0|>", TOKEN_CONTROL),
    ("<|reserved_1|>", TOKEN_CONTROL),
    ("<|reserved_2|>", TOKEN_CONTROL),
    ("<|reserved_3|>", TOKEN_CONTROL),
    ("<|reserved_4|>", TOKEN_CONTROL),
    ("<|pad|>", TOKEN_CONTROL),
];
const OFF_ENDOFTEXT: usize = 0;
const OFF_IM_END: usize = 2;
const OFF_MASK: usize = 3;
const OFF_PAD: usize = 11;

/// The smallest vocabulary that holds the bytes and the specials.
pub const MIN_VOCAB: usize = 256 + SPECIALS.len();

/// A ChatML template (written for this project).
pub const CHAT_TEMPLATE: &str = "{%- for message in messages -%}\n\
{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}\n\
{%- endfor -%}\n\
{%- if add_generation_prompt -%}\n\
{{- '<|im_start|>assistant\\n' -}}\n\
{%- endif -%}\n";

/// A complete vocabulary, ready for the `tokenizer.ggml.*` keys.
#[derive(Clone, Debug, PartialEq)]
pub struct Vocab {
    pub tokens: Vec<String>,
    pub token_types: Vec<i32>,
    /// "left right" pairs, highest priority first.
    pub merges: Vec<String>,
    pub bos: u32,
    pub eos: u32,
    pub pad: u32,
    pub mask: u32,
}

/// GPT-2's reversible byte → printable character mapping.
pub fn byte_to_char_table() -> [char; 256] {
    let mut table = ['\0'; 256];
    let mut extra = 0u32;
    for b in 0..256u32 {
        let printable =
            (0x21..=0x7E).contains(&b) || (0xA1..=0xAC).contains(&b) || (0xAE..=0xFF).contains(&b);
        table[b as usize] = if printable {
            char::from_u32(b).unwrap_or('\0')
        } else {
            let c = char::from_u32(256 + extra).unwrap_or('\0');
            extra += 1;
            c
        };
    }
    table
}

/// The id of the first special token in a vocabulary of `n_vocab`.
pub fn special_base(n_vocab: usize) -> usize {
    if n_vocab >= REAL_SPECIAL_BASE + SPECIALS.len() {
        REAL_SPECIAL_BASE
    } else {
        n_vocab - SPECIALS.len()
    }
}

/// Splits text into pre-tokens, approximating the qwen35 regex: contractions,
/// an optional leading non-letter before a letter run, single digits,
/// punctuation runs with an optional leading space, whitespace runs.
pub fn pre_tokenize(text: &str) -> Vec<&str> {
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let end_of = |i: usize| chars.get(i).map_or(text.len(), |c| c.0);
    let is_letter = |c: char| c.is_alphabetic();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i].1;
        let next = chars.get(i + 1).map(|x| x.1);
        let start = i;
        if c == '\'' && next.is_some_and(|n| "stmdSTMD".contains(n)) {
            i += 2;
        } else if is_letter(c)
            || (c != '\r' && c != '\n' && !c.is_numeric() && next.is_some_and(is_letter))
        {
            i += 1;
            while i < chars.len() && is_letter(chars[i].1) {
                i += 1;
            }
        } else if c.is_numeric() {
            i += 1;
        } else if !c.is_whitespace() || (c == ' ' && next.is_some_and(|n| !n.is_whitespace())) {
            i += 1;
            while i < chars.len()
                && !chars[i].1.is_whitespace()
                && !is_letter(chars[i].1)
                && !chars[i].1.is_numeric()
            {
                i += 1;
            }
            while i < chars.len() && (chars[i].1 == '\r' || chars[i].1 == '\n') {
                i += 1;
            }
        } else {
            i += 1;
            while i < chars.len() && chars[i].1.is_whitespace() {
                i += 1;
            }
            // `\s+(?!\S)`: leave the last space to lead the next word.
            if i < chars.len() && i - start > 1 && chars[i - 1].1 == ' ' {
                i -= 1;
            }
        }
        out.push(&text[end_of(start)..end_of(i)]);
    }
    out
}

/// Learns up to `max_merges` merges from `text`. Ties are broken by the
/// smaller pair of token ids, so the result is fully deterministic.
/// Returns (merged token strings in order, merges as "left right").
pub fn train_bpe(text: &str, max_merges: usize) -> (Vec<String>, Vec<String>) {
    let table = byte_to_char_table();
    let mut strings: Vec<String> = table.iter().map(|c| c.to_string()).collect();
    let mut ids: HashMap<String, u32> = strings
        .iter()
        .enumerate()
        .map(|(i, s)| (s.clone(), i as u32))
        .collect();
    let mut counts: BTreeMap<&str, u64> = BTreeMap::new();
    for w in pre_tokenize(text) {
        *counts.entry(w).or_default() += 1;
    }
    let mut words: Vec<(Vec<u32>, u64)> = counts
        .into_iter()
        .map(|(w, n)| (w.bytes().map(u32::from).collect(), n))
        .collect();
    let mut new_tokens = Vec::new();
    let mut merges = Vec::new();
    while merges.len() < max_merges {
        let mut pairs: HashMap<(u32, u32), u64> = HashMap::new();
        for (w, n) in &words {
            for p in w.windows(2) {
                *pairs.entry((p[0], p[1])).or_default() += n;
            }
        }
        // Like HF's trainer with min_frequency 0: merge until every
        // pre-token is one token (or the cap is reached).
        let best = pairs
            .into_iter()
            .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)));
        let Some(((a, b), _)) = best else { break };
        let merged = format!("{}{}", strings[a as usize], strings[b as usize]);
        let id = match ids.get(&merged) {
            Some(&id) => id,
            None => {
                let id = strings.len() as u32;
                strings.push(merged.clone());
                ids.insert(merged.clone(), id);
                new_tokens.push(merged);
                id
            }
        };
        merges.push(format!("{} {}", strings[a as usize], strings[b as usize]));
        for (w, _) in &mut words {
            let mut j = 0;
            let mut out = Vec::with_capacity(w.len());
            while j < w.len() {
                if j + 1 < w.len() && w[j] == a && w[j + 1] == b {
                    out.push(id);
                    j += 2;
                } else {
                    out.push(w[j]);
                    j += 1;
                }
            }
            *w = out;
        }
    }
    (new_tokens, merges)
}

/// Builds a vocabulary of exactly `n_vocab` tokens, or says why it cannot.
pub fn build_vocab(n_vocab: usize) -> Result<Vocab, String> {
    if n_vocab < MIN_VOCAB {
        return Err(format!(
            "vocabulary of {n_vocab} is smaller than the minimum {MIN_VOCAB}"
        ));
    }
    let base = special_base(n_vocab);
    // Every merge can add at most one token; cap so that the tokens fit.
    let (merged, merges) = train_bpe(CORPUS, base - 256);
    let mut tokens: Vec<String> = byte_to_char_table().iter().map(|c| c.to_string()).collect();
    tokens.extend(merged);
    let mut token_types = vec![TOKEN_NORMAL; tokens.len()];
    while tokens.len() < base {
        tokens.push(format!("[filler{}]", tokens.len()));
        token_types.push(TOKEN_NORMAL);
    }
    for (s, ty) in SPECIALS {
        tokens.push(s.to_string());
        token_types.push(ty);
    }
    while tokens.len() < n_vocab {
        tokens.push(format!("<|reserved_{}|>", tokens.len()));
        token_types.push(TOKEN_CONTROL);
    }
    let mut seen = HashSet::new();
    if let Some(dup) = tokens.iter().find(|t| !seen.insert(t.as_str())) {
        return Err(format!("token {dup:?} appears twice in the vocabulary"));
    }
    Ok(Vocab {
        tokens,
        token_types,
        merges,
        bos: (base + OFF_ENDOFTEXT) as u32,
        eos: (base + OFF_IM_END) as u32,
        pad: (base + OFF_PAD) as u32,
        mask: (base + OFF_MASK) as u32,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_table_is_a_bijection_that_maps_space_to_g_dot() {
        let t = byte_to_char_table();
        let set: HashSet<char> = t.iter().copied().collect();
        assert_eq!(set.len(), 256);
        assert_eq!(t[b' ' as usize], 'Ġ');
        assert_eq!(t[b'\n' as usize], 'Ċ');
        assert_eq!(t[b'a' as usize], 'a');
    }

    #[test]
    fn pre_tokenizer_keeps_leading_spaces_on_words_and_splits_digits() {
        assert_eq!(
            pre_tokenize("Hello world, 42!"),
            vec!["Hello", " world", ",", " ", "4", "2", "!"]
        );
        assert_eq!(
            pre_tokenize("it's  ok\n\nyes"),
            vec!["it", "'s", " ", " ok", "\n\n", "yes"]
        );
    }

    #[test]
    fn first_merges_of_english_text_are_frequent_pairs() {
        let (tokens, merges) = train_bpe(CORPUS, 50);
        assert_eq!(merges.len(), 50);
        // " the" is the most common word in the sample: Ġ t, then h e, then Ġt he.
        assert!(tokens.iter().any(|t| t == "Ġthe"), "{tokens:?}");
        for m in &merges {
            assert_eq!(m.split(' ').count(), 2, "{m}");
        }
    }

    #[test]
    fn real_size_vocab_puts_specials_at_the_real_ids() {
        let v = build_vocab(REAL_VOCAB).unwrap();
        assert_eq!(v.tokens.len(), REAL_VOCAB);
        assert_eq!(v.token_types.len(), REAL_VOCAB);
        assert_eq!((v.bos, v.eos, v.pad), (248044, 248046, 248055));
        assert_eq!(v.tokens[248044], "<|endoftext|>");
        assert_eq!(v.tokens[248046], "<|im_end|>");
        assert_eq!(v.tokens[v.mask as usize], "<|mask|>");
    }

    #[test]
    fn small_vocab_has_exact_size_and_merges_that_build_its_tokens() {
        let v = build_vocab(512).unwrap();
        assert_eq!(v.tokens.len(), 512);
        let set: HashSet<&str> = v.tokens.iter().map(|s| s.as_str()).collect();
        for m in &v.merges {
            let (a, b) = m.split_once(' ').unwrap();
            assert!(
                set.contains(a) && set.contains(b) && set.contains(format!("{a}{b}").as_str()),
                "{m}"
            );
        }
        assert!(build_vocab(100).is_err());
    }
}
