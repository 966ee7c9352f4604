use super::*;
use tokenizers::{OffsetReferential, OffsetType, PreTokenizedString, PreTokenizer};

/// GPT-2's table, written out independently of `byte_to_char_table`: the 188 printable bytes
/// keep their code point, the rest take U+0100, U+0101, ... in byte order.
fn gpt2_char(b: u8) -> char {
    let printable = |x: u8| matches!(x, 33..=126 | 161..=172 | 174..=255);
    if printable(b) {
        return b as char;
    }
    let rank = (0..b).filter(|&x| !printable(x)).count() as u32;
    char::from_u32(256 + rank).unwrap()
}

/// Merges in rank order; the merged tokens get ids 256, 257, ... in this order.
const MERGES: &[&str] = &[
    "Ġ t",   // 256 Ġt
    "h e",   // 257 he
    "Ġt he", // 258 Ġthe
    "n '",   // 259 n'
    "' t",   // 260 't
    "1 2",   // 261 12
    "a b",   // 262 ab
    "b c",   // 263 bc
    "ab c",  // 264 abc
    "a a",   // 265 aa
    "aa aa", // 266 aaaa
    "Ċ Ċ",   // 267 ĊĊ (two newlines)
    "Ã ©",   // 268 Ã© (é = C3 A9)
    "l l",   // 269 ll
    "Ġ w",   // 270 Ġw
];
const ENDOFTEXT: u32 = 271;
const IM_START: u32 = 272;
const IM_END: u32 = 273;
const THINK: u32 = 274;
const THINK_END: u32 = 275;
const MASK: u32 = 276;

/// 256 byte tokens (id = byte value), the merged tokens, then specials.
fn spec_with_merges(merges: &[&str]) -> TokenizerSpec {
    let mut tokens: Vec<String> = (0..=255u8).map(|b| gpt2_char(b).to_string()).collect();
    let mut types = vec![token_type::NORMAL; 256];
    for m in MERGES {
        tokens.push(m.replace(' ', ""));
        types.push(token_type::NORMAL);
    }
    for (t, ty) in [
        ("<|endoftext|>", token_type::CONTROL),
        ("<|im_start|>", token_type::CONTROL),
        ("<|im_end|>", token_type::CONTROL),
        ("<think>", token_type::USER_DEFINED),
        ("</think>", token_type::USER_DEFINED),
        ("<|mask|>", token_type::CONTROL),
    ] {
        tokens.push(t.to_owned());
        types.push(ty);
    }
    TokenizerSpec {
        model: "gpt2".into(),
        pre: "qwen35".into(),
        tokens,
        token_types: types,
        merges: merges.iter().map(|s| s.to_string()).collect(),
        bos: None,
        eos: Some(ENDOFTEXT),
        pad: Some(ENDOFTEXT),
        add_bos: false,
    }
}

fn tok() -> Tokenizer {
    Tokenizer::new(&spec_with_merges(MERGES)).unwrap()
}

fn ids(s: &str) -> Vec<u32> {
    s.bytes().map(u32::from).collect()
}

fn regex_splits(pattern: &str, text: &str) -> Vec<String> {
    let split = Split::new(
        SplitPattern::Regex(pattern.to_owned()),
        SplitDelimiterBehavior::Isolated,
        false,
    )
    .unwrap();
    let mut pts = PreTokenizedString::from(text);
    split.pre_tokenize(&mut pts).unwrap();
    pts.get_splits(OffsetReferential::Original, OffsetType::Byte)
        .into_iter()
        .map(|(s, _, _)| s.to_owned())
        .collect()
}

#[test]
fn byte_table_matches_gpt2_landmarks() {
    let t = byte_to_char_table();
    assert_eq!(t[b' ' as usize], 'Ġ');
    assert_eq!(t[b'\n' as usize], 'Ċ');
    assert_eq!(t[b'\r' as usize], 'č');
    assert_eq!(t[0], 'Ā');
    assert_eq!(t[127], 'ġ');
    assert_eq!(t[173], 'Ń');
    assert_eq!(t[b'a' as usize], 'a');
    for b in 0..=255u8 {
        assert_eq!(t[b as usize], gpt2_char(b));
    }
}

#[test]
fn qwen35_regex_splits_words_contractions_digits_and_newlines() {
    assert_eq!(
        regex_splits(QWEN35_PATTERN, "don't stop 42!\n\nok"),
        ["don", "'t", " stop", " ", "4", "2", "!\n\n", "ok"]
    );
    assert_eq!(regex_splits(QWEN35_PATTERN, "a  b"), ["a", " ", " b"]);
    assert_eq!(regex_splits(QWEN35_PATTERN, "a\r\nb"), ["a", "\r\n", "b"]);
    assert_eq!(regex_splits(QWEN35_PATTERN, "IT'S"), ["IT", "'S"]);
}

#[test]
fn qwen35_keeps_combining_marks_with_letters_unlike_qwen2() {
    // qwen2 has no \p{M} in its letter runs: a mark after a letter starts a new split (as the
    // optional non-letter prefix of the next word, or as punctuation at the end).
    let text = "e\u{301}x";
    assert_eq!(regex_splits(QWEN35_PATTERN, text), ["e\u{301}x"]);
    assert_eq!(regex_splits(QWEN2_PATTERN, text), ["e", "\u{301}x"]);
    let text = "xe\u{301}";
    assert_eq!(regex_splits(QWEN35_PATTERN, text), ["xe\u{301}"]);
    assert_eq!(regex_splits(QWEN2_PATTERN, text), ["xe", "\u{301}"]);
}

#[test]
fn merges_apply_in_rank_order() {
    let t = tok();
    assert_eq!(t.encode("the", false).unwrap(), [116, 257]);
    assert_eq!(t.encode(" the", false).unwrap(), [258]);
    assert_eq!(
        t.encode("the cat", false).unwrap(),
        [116, 257, 32, 99, 97, 116]
    );
    assert_eq!(t.encode("abc", false).unwrap(), [264]);
    // Leftmost first among equal ranks: aa·aa·a, then aaaa·a.
    assert_eq!(t.encode("aaaaa", false).unwrap(), [266, 97]);
    assert_eq!(
        t.encode("Hello world", false).unwrap(),
        [72, 101, 269, 111, 270, 111, 114, 108, 100]
    );
    assert_eq!(t.encode("é", false).unwrap(), [268]);
    assert_eq!(t.encode("a\n\nb", false).unwrap(), [97, 267, 98]);
}

#[test]
fn swapping_two_merge_ranks_changes_the_result() {
    let mut merges = MERGES.to_vec();
    merges.swap(6, 7); // "b c" now outranks "a b": abc → a·bc, and ab·c never forms.
    let mut spec = spec_with_merges(&merges);
    // Keep token ids as before: ids follow the token list, not the merge list.
    spec.tokens = spec_with_merges(MERGES).tokens;
    let t = Tokenizer::new(&spec).unwrap();
    assert_eq!(t.encode("abc", false).unwrap(), [97, 263]);
}

#[test]
fn digits_are_split_one_by_one_despite_a_merge() {
    assert_eq!(tok().encode("123", false).unwrap(), ids("123"));
}

#[test]
fn contractions_are_split_before_merging() {
    // Without the split, "n '" (rank 3) would beat "' t" (rank 4).
    assert_eq!(tok().encode("don't", false).unwrap(), [100, 111, 110, 260]);
}

#[test]
fn decode_inverts_encode_on_varied_text() {
    let t = tok();
    for s in [
        "",
        "Hello, world! It's 2024.",
        "naïve café résumé Ünïcödé",
        "日本語のテキストと中文",
        "emoji 🦀🎉👩‍👩‍👧 mixed",
        "line1\nline2\r\nline3\n\n\n",
        "  leading and trailing  ",
        "tabs\tand\u{a0}nbsp",
        "'S 'LL 'd they'RE we've",
        "x = 12345; y=-0.5e10",
        "e\u{301} combining",
        "<|im_start|> written but not parsed",
    ] {
        let enc = t.encode(s, false).unwrap();
        assert_eq!(t.decode(&enc).unwrap(), s, "{s:?} → {enc:?}");
        let enc = t.encode(s, true).unwrap();
        assert_eq!(t.decode(&enc).unwrap(), s, "{s:?} → {enc:?}");
    }
}

#[test]
fn control_tokens_are_parsed_only_with_parse_special() {
    let t = tok();
    let text = "<|im_start|>user\nhi<|im_end|>";
    assert_eq!(
        t.encode(text, true).unwrap(),
        [IM_START, 117, 115, 101, 114, 10, 104, 105, IM_END]
    );
    let plain = t.encode(text, false).unwrap();
    assert!(!plain.contains(&IM_START) && !plain.contains(&IM_END));
    assert_eq!(t.decode(&plain).unwrap(), text);
}

#[test]
fn user_defined_tokens_are_always_parsed() {
    let t = tok();
    for parse_special in [false, true] {
        assert_eq!(
            t.encode("<think>x</think>", parse_special).unwrap(),
            [THINK, 120, THINK_END]
        );
    }
}

#[test]
fn add_bos_prepends_the_bos_token() {
    let mut spec = spec_with_merges(MERGES);
    spec.bos = Some(ENDOFTEXT);
    spec.add_bos = true;
    let t = Tokenizer::new(&spec).unwrap();
    assert_eq!(t.encode("a", false).unwrap(), [ENDOFTEXT, 97]);
}

#[test]
fn vocabulary_lookups_and_end_of_generation() {
    let t = tok();
    assert_eq!(t.vocab_size(), 277);
    assert_eq!(t.token_to_id("Ġthe"), Some(258));
    assert_eq!(t.id_to_token(258), Some("Ġthe"));
    assert_eq!(t.id_to_token(277), None);
    assert!(t.is_eog(ENDOFTEXT));
    assert!(t.is_eog(IM_END));
    assert!(!t.is_eog(IM_START));
    assert!(!t.is_eog(97));
    assert_eq!(t.mask_token(), Some(MASK));
    assert!(t.is_control(IM_START) && !t.is_control(THINK) && !t.is_control(97));
}

#[test]
fn mask_token_can_be_overridden_within_the_vocabulary() {
    let mut t = tok();
    t.set_mask_token(5).unwrap();
    assert_eq!(t.mask_token(), Some(5));
    assert!(t.set_mask_token(277).is_err());
}

#[test]
fn decode_rejects_unknown_ids() {
    let t = tok();
    assert!(matches!(
        t.decode(&[97, 277]),
        Err(TokenizerError::UnknownId { id: 277, .. })
    ));
    assert!(t.stream_decoder().push(9999).is_err());
}

#[test]
fn stream_decoder_matches_decode_when_split_at_every_byte() {
    let t = tok();
    let text = "aé日🦀\n€x";
    let per_byte = ids(text);
    let mut sd = t.stream_decoder();
    let mut out = String::new();
    let mut pushed = Vec::new();
    for &id in &per_byte {
        let piece = sd.push(id).unwrap();
        pushed.push(id);
        out.push_str(&piece);
        // What came out so far is exactly the complete characters pushed so far.
        let complete = String::from_utf8_lossy(&text.as_bytes()[..pushed.len()]);
        let complete = complete.trim_end_matches(char::REPLACEMENT_CHARACTER);
        assert_eq!(out, complete);
    }
    out.push_str(&sd.finish());
    assert_eq!(out, t.decode(&per_byte).unwrap());
    assert_eq!(out, text);

    // Same with real multi-byte tokens.
    let enc = t.encode(text, false).unwrap();
    let mut sd = t.stream_decoder();
    let mut out = String::new();
    for &id in &enc {
        out.push_str(&sd.push(id).unwrap());
    }
    out.push_str(&sd.finish());
    assert_eq!(out, text);
}

#[test]
fn stream_decoder_replaces_invalid_and_truncated_sequences_like_decode() {
    let t = tok();
    for seq in [
        vec![0xE6, b'A' as u32],
        vec![0xF0, 0x9F],
        vec![0xFF, 0x80, 0x41],
    ] {
        let mut sd = t.stream_decoder();
        let mut out = String::new();
        for &id in &seq {
            out.push_str(&sd.push(id).unwrap());
        }
        out.push_str(&sd.finish());
        assert_eq!(out, t.decode(&seq).unwrap(), "{seq:?}");
        assert!(out.contains(char::REPLACEMENT_CHARACTER));
    }
}

#[test]
fn encoding_a_byte_missing_from_the_vocabulary_is_an_error() {
    let spec = TokenizerSpec {
        model: "gpt2".into(),
        pre: "qwen35".into(),
        tokens: vec!["a".into(), "b".into()],
        ..TokenizerSpec::default()
    };
    let t = Tokenizer::new(&spec).unwrap();
    assert_eq!(t.encode("ab", false).unwrap(), [0, 1]);
    assert!(matches!(
        t.encode("abc", false),
        Err(TokenizerError::MissingByte(b'c'))
    ));
}

#[test]
fn rejects_bad_specs() {
    let good = spec_with_merges(MERGES);
    let check = |f: &dyn Fn(&mut TokenizerSpec)| {
        let mut s = good.clone();
        f(&mut s);
        Tokenizer::new(&s).unwrap_err()
    };
    assert!(matches!(
        check(&|s| s.model = "llama".into()),
        TokenizerError::UnsupportedModel(_)
    ));
    assert!(matches!(
        check(&|s| s.pre = "gpt-9".into()),
        TokenizerError::UnsupportedPre(_)
    ));
    assert!(matches!(
        check(&|s| s.tokens.clear()),
        TokenizerError::EmptyVocab | TokenizerError::TypeCountMismatch { .. }
    ));
    assert!(matches!(
        check(&|s| {
            s.token_types.pop();
        }),
        TokenizerError::TypeCountMismatch { .. }
    ));
    assert!(matches!(
        check(&|s| s.merges.push("ab".into())),
        TokenizerError::BadMerge { .. }
    ));
    assert!(matches!(
        check(&|s| s.merges.push("q z".into())),
        TokenizerError::Backend(_)
    ));
    assert!(matches!(
        check(&|s| s.eos = Some(277)),
        TokenizerError::SpecialOutOfRange { which: "eos", .. }
    ));
}

#[test]
fn tokenizer_can_be_shared_across_threads() {
    fn shared<T: Send + Sync>() {}
    shared::<Tokenizer>();
    let t = std::sync::Arc::new(tok());
    let t2 = t.clone();
    let h = std::thread::spawn(move || t2.encode(" the", false).unwrap());
    assert_eq!(h.join().unwrap(), [258]);
}
