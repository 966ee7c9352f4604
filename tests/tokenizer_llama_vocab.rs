//! Parity with llama.cpp's tokenizer on its own test vectors: `models/ggml-vocab-qwen35.gguf`
//! (a vocab-only GGUF with `tokenizer.ggml.pre = "qwen35"`) with the `.inp` texts and the `.out`
//! token ids that llama.cpp's `test-tokenizer-0` checks.
//!
//! The files live in the llama.cpp source tree: set `CLOVER_LLAMA_MODELS` to its `models/`
//! folder, or the default below is used. A test that finds no files prints one `SKIPPED` line
//! (`.ci/run` fetches them, and there a missing file is a failure).
//!
//! The GGUF is read by a minimal parser here (metadata only), so this test does not depend on
//! the engine's reader.

use std::path::PathBuf;

use clover::tokenizer::{Tokenizer, TokenizerSpec};

mod skip;

const DEFAULT_MODELS: &str = "/work/llama/llama_cpp_python-0.3.36/vendor/llama.cpp/models";

fn models_dir() -> PathBuf {
    std::env::var_os("CLOVER_LLAMA_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_MODELS))
}

/// A metadata value, reduced to what the tokenizer needs.
#[derive(Debug)]
enum Meta {
    Str(String),
    Int(i64),
    Strs(Vec<String>),
    Ints(Vec<i64>),
    Other,
}

struct Cursor<'a> {
    b: &'a [u8],
    pos: usize,
}

impl Cursor<'_> {
    fn take(&mut self, n: usize) -> &[u8] {
        let s = &self.b[self.pos..self.pos + n];
        self.pos += n;
        s
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.take(4).try_into().unwrap())
    }
    fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.take(8).try_into().unwrap())
    }
    fn string(&mut self) -> String {
        let n = self.u64() as usize;
        String::from_utf8(self.take(n).to_vec()).unwrap()
    }
    /// Scalar of GGUF type `ty` as an integer where it is one (strings handled by callers).
    fn scalar(&mut self, ty: u32) -> Option<i64> {
        Some(match ty {
            0 => self.take(1)[0] as i64,
            1 => self.take(1)[0] as i8 as i64,
            2 => u16::from_le_bytes(self.take(2).try_into().unwrap()) as i64,
            3 => i16::from_le_bytes(self.take(2).try_into().unwrap()) as i64,
            4 => self.u32() as i64,
            5 => self.u32() as i32 as i64,
            6 => {
                self.take(4);
                return None;
            }
            7 => self.take(1)[0] as i64,
            10 => self.u64() as i64,
            11 => self.u64() as i64,
            12 => {
                self.take(8);
                return None;
            }
            other => panic!("unexpected GGUF value type {other}"),
        })
    }
    fn value(&mut self, ty: u32) -> Meta {
        match ty {
            8 => Meta::Str(self.string()),
            9 => {
                let ety = self.u32();
                let n = self.u64() as usize;
                if ety == 8 {
                    Meta::Strs((0..n).map(|_| self.string()).collect())
                } else {
                    let v: Vec<Option<i64>> = (0..n).map(|_| self.scalar(ety)).collect();
                    v.into_iter()
                        .collect::<Option<Vec<_>>>()
                        .map_or(Meta::Other, Meta::Ints)
                }
            }
            t => self.scalar(t).map_or(Meta::Other, Meta::Int),
        }
    }
}

fn read_spec(path: &std::path::Path) -> TokenizerSpec {
    read_gguf(path).0
}

/// The tokenizer spec and the chat template, if any.
fn read_gguf(path: &std::path::Path) -> (TokenizerSpec, Option<String>) {
    let bytes = std::fs::read(path).unwrap();
    let mut c = Cursor { b: &bytes, pos: 0 };
    assert_eq!(c.take(4), b"GGUF");
    let _version = c.u32();
    let _n_tensors = c.u64();
    let n_kv = c.u64();
    let mut spec = TokenizerSpec::default();
    let mut template = None;
    for _ in 0..n_kv {
        let key = c.string();
        let ty = c.u32();
        let v = c.value(ty);
        match (key.as_str(), v) {
            ("tokenizer.ggml.model", Meta::Str(s)) => spec.model = s,
            ("tokenizer.ggml.pre", Meta::Str(s)) => spec.pre = s,
            ("tokenizer.ggml.tokens", Meta::Strs(v)) => spec.tokens = v,
            ("tokenizer.ggml.merges", Meta::Strs(v)) => spec.merges = v,
            ("tokenizer.ggml.token_type", Meta::Ints(v)) => {
                spec.token_types = v.into_iter().map(|x| x as i32).collect()
            }
            ("tokenizer.ggml.bos_token_id", Meta::Int(i)) => spec.bos = Some(i as u32),
            ("tokenizer.ggml.eos_token_id", Meta::Int(i)) => spec.eos = Some(i as u32),
            ("tokenizer.ggml.padding_token_id", Meta::Int(i)) => spec.pad = Some(i as u32),
            ("tokenizer.ggml.add_bos_token", Meta::Int(i)) => spec.add_bos = i != 0,
            ("tokenizer.chat_template", Meta::Str(s)) => template = Some(s),
            _ => {}
        }
    }
    (spec, template)
}

/// Outside-oracle data is optional on a developer machine, mandatory in CI
/// (`.ci/run` sets `CLOVER_REQUIRE_ORACLES=1`).
fn skip_unless_required(test: &str, why: &str) {
    if std::env::var_os("CLOVER_REQUIRE_ORACLES").is_some() {
        panic!("oracle data required but missing: {why}");
    }
    skip::skipped(
        test,
        why,
        "set CLOVER_LLAMA_MODELS to llama.cpp's models/ folder \
         (.ci/run unpacks it from the llama-cpp-python 0.3.36 source package)",
    );
}

fn check_vectors(test: &str, name: &str, pre: &str) {
    let dir = models_dir();
    let gguf = dir.join(format!("ggml-vocab-{name}.gguf"));
    let (Ok(inp), Ok(out)) = (
        std::fs::read_to_string(dir.join(format!("ggml-vocab-{name}.gguf.inp"))),
        std::fs::read_to_string(dir.join(format!("ggml-vocab-{name}.gguf.out"))),
    ) else {
        skip_unless_required(
            test,
            &format!("no ggml-vocab-{name}.gguf.inp/.out in {}", dir.display()),
        );
        return;
    };
    let spec = read_spec(&gguf);
    assert_eq!(spec.pre, pre);
    let t0 = std::time::Instant::now();
    let tok = Tokenizer::new(&spec).unwrap();
    let built = t0.elapsed();

    // Same splitting as llama.cpp's test-tokenizer-0.
    let mut texts: Vec<&str> = inp.split("\n__ggml_vocab_test__\n").collect();
    if texts.last() == Some(&"") {
        texts.pop();
    }
    let expected: Vec<Vec<u32>> = out
        .lines()
        .map(|l| l.split_whitespace().map(|t| t.parse().unwrap()).collect())
        .collect();
    assert_eq!(texts.len(), expected.len());

    let mut failures = Vec::new();
    for (text, want) in texts.iter().zip(&expected) {
        let got = tok.encode(text, false).unwrap();
        if &got != want {
            failures.push(format!("{text:?}: got {got:?}, llama.cpp {want:?}"));
        }
        assert_eq!(tok.decode(&got).unwrap(), *text);
    }
    assert!(
        failures.is_empty(),
        "{} of {} differ:\n{}",
        failures.len(),
        texts.len(),
        failures.join("\n")
    );
    let t0 = std::time::Instant::now();
    let long = texts.join(" ").repeat(20);
    let n = tok.encode(&long, false).unwrap().len();
    eprintln!(
        "{name}: {} llama.cpp vectors match; {} tokens built in {built:?}; \
         {} bytes → {n} tokens in {:?}",
        texts.len(),
        tok.vocab_size(),
        long.len(),
        t0.elapsed()
    );
}

#[test]
fn qwen35_encoding_matches_llama_cpp_test_vectors() {
    check_vectors(
        "qwen35_encoding_matches_llama_cpp_test_vectors",
        "qwen35",
        "qwen35",
    );
}

#[test]
fn qwen2_encoding_matches_llama_cpp_test_vectors() {
    check_vectors(
        "qwen2_encoding_matches_llama_cpp_test_vectors",
        "qwen2",
        "qwen2",
    );
}

#[test]
fn real_vocab_parses_specials_and_renders_its_chat_template() {
    let gguf = models_dir().join("ggml-vocab-qwen35.gguf");
    if !gguf.exists() {
        skip_unless_required(
            "real_vocab_parses_specials_and_renders_its_chat_template",
            &format!("no {}", gguf.display()),
        );
        return;
    }
    let (spec, template) = read_gguf(&gguf);
    let tok = Tokenizer::new(&spec).unwrap();
    let start = tok.token_to_id("<|im_start|>").unwrap();
    let end = tok.token_to_id("<|im_end|>").unwrap();
    assert!(tok.is_control(start) && tok.is_eog(end));
    assert!(tok.is_eog(tok.token_to_id("<|endoftext|>").unwrap()));

    // The GGUF's own template (ChatML with a default system prompt), rendered and tokenised.
    let t = clover::chat::ChatTemplate::new(&template.unwrap(), "", "<|im_end|>").unwrap();
    let text = t
        .render(&[clover::chat::ChatMessage::user("Hi there")], true, None)
        .unwrap();
    assert_eq!(
        text,
        "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n\
         <|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n"
    );
    let ids = tok.encode(&text, true).unwrap();
    assert_eq!(ids.iter().filter(|&&i| i == start).count(), 3);
    assert_eq!(ids.iter().filter(|&&i| i == end).count(), 2);
    assert_eq!(tok.decode(&ids).unwrap(), text);
    // Between the specials, plain text is encoded exactly as on its own.
    let user_turn = tok.encode("user\nHi there", false).unwrap();
    let i = ids.iter().rposition(|&x| x == end).unwrap();
    assert_eq!(&ids[i - user_turn.len()..i], user_turn.as_slice());
    assert_eq!(ids[i - user_turn.len() - 1], start);
    // Without parse_special no control token appears.
    let plain = tok.encode(&text, false).unwrap();
    assert!(plain.iter().all(|&x| !tok.is_control(x)));
}
