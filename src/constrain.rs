//! Constrained sampling: JSON mode (OpenAI's `response_format: {"type":
//! "json_object"}`).
//!
//! A [`Constraint`] says which tokens may come next and follows the ones
//! emitted. [`crate::sample::Sampler::sample`] draws as usual and keeps the
//! draw when the constraint allows it; otherwise it masks every token the
//! constraint refuses and draws again (llama.cpp's order for grammars). For
//! greedy decoding that is exactly the most likely allowed token.
//!
//! [`JsonPrefix`] is a byte-level recogniser of JSON (RFC 8259) prefixes:
//! every state is a prefix some bytes complete into one JSON text. Its
//! nesting is a bit stack, so the whole state is `Copy` and checking a token
//! costs a copy and a walk over its bytes. [`JsonGuard`] applies it to a
//! model's tokens: the text must be one JSON object; end-of-generation is
//! allowed only once it is complete, and nothing but end-of-generation after
//! that.

pub mod tools;

use std::sync::Arc;

use crate::tokenizer::Tokenizer;

/// What a [`Guard`] reads of a model: its tokenizer (each token's text,
/// which tokens end generation or are control tokens) and the id of
/// `</think>`. The engine's loaded model provides it; constraints stay
/// below the engine.
pub trait Vocab: Send + Sync + std::fmt::Debug {
    fn tokenizer(&self) -> &Tokenizer;
    /// The id of `</think>`, when the vocabulary has `<think>` and `</think>`.
    fn think_end(&self) -> Option<u32>;
}

/// Which tokens may come next, for [`crate::sample::Sampler`].
pub trait Constraint: Send + Sync + std::fmt::Debug {
    /// Whether `id` may be emitted now.
    fn allows(&self, id: u32) -> bool;
    /// `id` was emitted.
    fn accept(&mut self, id: u32);
    fn box_clone(&self) -> Box<dyn Constraint>;
}

impl Clone for Box<dyn Constraint> {
    fn clone(&self) -> Self {
        self.box_clone()
    }
}

/// The deepest nesting [`JsonPrefix`] follows (one bit per level).
pub const MAX_DEPTH: u8 = 64;

/// The longest run of whitespace between tokens (llama.cpp's JSON grammar
/// allows a newline and twenty more): a model cannot fill its reply with
/// indentation.
pub const MAX_WS_RUN: u8 = 21;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum St {
    /// A value must start (whitespace first is fine).
    Value,
    /// After `[`: a value or `]`.
    ValueOrClose,
    /// After `{`: a key or `}`.
    KeyOrClose,
    /// After `,` in an object: a key.
    Key,
    /// After a key: `:`.
    Colon,
    /// After a value inside a container: `,` or its close.
    After,
    Str {
        key: bool,
    },
    Esc {
        key: bool,
    },
    Hex {
        key: bool,
        left: u8,
    },
    Num(Num),
    Lit {
        word: u8,
        at: u8,
    },
    /// The text is complete: whitespace only.
    Done,
}

/// Where a JSON number stands in RFC 8259's grammar; both recognisers
/// ([`JsonPrefix`] and [`tools::CallPrefix`]) follow numbers with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Num {
    /// Nothing read yet.
    Start,
    Minus,
    /// A leading zero: no digit may follow it.
    Zero,
    Int,
    Dot,
    Frac,
    Exp,
    ExpSign,
    ExpInt,
}

impl Num {
    /// The state after `b`, or `None` when `b` does not continue the number;
    /// `integer` refuses a fraction and an exponent.
    pub(crate) fn next(self, b: u8, integer: bool) -> Option<Num> {
        use Num::*;
        Some(match (self, b) {
            (Start, b'-') => Minus,
            (Start | Minus, b'0') => Zero,
            (Start | Minus, b'1'..=b'9') => Int,
            (Int, b'0'..=b'9') => Int,
            (Zero | Int, b'.') if !integer => Dot,
            (Dot | Frac, b'0'..=b'9') => Frac,
            (Zero | Int | Frac, b'e' | b'E') if !integer => Exp,
            (Exp, b'+' | b'-') => ExpSign,
            (Exp | ExpSign | ExpInt, b'0'..=b'9') => ExpInt,
            _ => return None,
        })
    }

    /// Whether the number may end here.
    pub(crate) fn complete(self) -> bool {
        matches!(self, Num::Zero | Num::Int | Num::Frac | Num::ExpInt)
    }
}

const WORDS: [&[u8]; 3] = [b"true", b"false", b"null"];

/// A JSON prefix recogniser (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JsonPrefix {
    st: St,
    /// Bit d: the container at depth d is an object.
    stack: u64,
    depth: u8,
    /// The text must be an object (OpenAI's JSON mode), not any value.
    object_only: bool,
    /// Whitespace bytes in a row outside strings.
    ws_run: u8,
}

fn ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

impl JsonPrefix {
    /// The empty prefix; `object_only`: the text must be an object.
    pub fn new(object_only: bool) -> JsonPrefix {
        JsonPrefix {
            st: St::Value,
            stack: 0,
            depth: 0,
            object_only,
            ws_run: 0,
        }
    }

    /// Whether the bytes so far are one whole JSON text (a trailing number
    /// counts: nothing but its end is missing).
    pub fn complete(&self) -> bool {
        match self.st {
            St::Done => true,
            St::Num(n) => n.complete() && self.depth == 0,
            _ => false,
        }
    }

    /// Takes `b`; `false` (and no change worth keeping) when no JSON text
    /// continues the prefix with it.
    pub fn step(&mut self, b: u8) -> bool {
        let in_string = matches!(self.st, St::Str { .. } | St::Esc { .. } | St::Hex { .. });
        if !in_string && ws(b) {
            if self.ws_run == MAX_WS_RUN {
                return false;
            }
            self.ws_run += 1;
        } else {
            self.ws_run = 0;
        }
        self.take(b)
    }

    fn take(&mut self, b: u8) -> bool {
        match self.st {
            St::Value | St::ValueOrClose => {
                if ws(b) {
                    true
                } else if self.st == St::ValueOrClose && b == b']' {
                    self.close(false)
                } else if self.depth == 0 && self.object_only && b != b'{' {
                    false
                } else {
                    self.start_value(b)
                }
            }
            St::KeyOrClose | St::Key => match b {
                _ if ws(b) => true,
                b'"' => {
                    self.st = St::Str { key: true };
                    true
                }
                b'}' if self.st == St::KeyOrClose => self.close(true),
                _ => false,
            },
            St::Colon => match b {
                _ if ws(b) => true,
                b':' => {
                    self.st = St::Value;
                    true
                }
                _ => false,
            },
            St::After => {
                let object = self.top_is_object();
                match b {
                    _ if ws(b) => true,
                    b',' => {
                        self.st = if object { St::Key } else { St::Value };
                        true
                    }
                    b'}' if object => self.close(true),
                    b']' if !object => self.close(false),
                    _ => false,
                }
            }
            St::Str { key } => match b {
                b'"' => {
                    if key {
                        self.st = St::Colon;
                    } else {
                        self.value_done();
                    }
                    true
                }
                b'\\' => {
                    self.st = St::Esc { key };
                    true
                }
                0..=0x1f => false,
                _ => true,
            },
            St::Esc { key } => match b {
                b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => {
                    self.st = St::Str { key };
                    true
                }
                b'u' => {
                    self.st = St::Hex { key, left: 4 };
                    true
                }
                _ => false,
            },
            St::Hex { key, left } => {
                if !b.is_ascii_hexdigit() {
                    return false;
                }
                self.st = if left == 1 {
                    St::Str { key }
                } else {
                    St::Hex {
                        key,
                        left: left - 1,
                    }
                };
                true
            }
            St::Num(n) => match n.next(b, false) {
                Some(n) => self.to(St::Num(n)),
                None => n.complete() && self.end_number(b),
            },
            St::Lit { word, at } => {
                let w = WORDS[word as usize];
                if w[at as usize] != b {
                    return false;
                }
                if at as usize + 1 == w.len() {
                    self.value_done();
                } else {
                    self.st = St::Lit { word, at: at + 1 };
                }
                true
            }
            St::Done => ws(b),
        }
    }

    /// Takes every byte of `bytes`; `false` at the first that does not fit.
    pub fn feed(&mut self, bytes: &[u8]) -> bool {
        bytes.iter().all(|&b| self.step(b))
    }

    fn to(&mut self, st: St) -> bool {
        self.st = st;
        true
    }

    fn top_is_object(&self) -> bool {
        self.depth > 0 && self.stack >> (self.depth - 1) & 1 == 1
    }

    fn start_value(&mut self, b: u8) -> bool {
        match b {
            b'{' | b'[' => {
                if self.depth == MAX_DEPTH {
                    return false;
                }
                let object = b == b'{';
                self.stack = self.stack & !(1 << self.depth) | (object as u64) << self.depth;
                self.depth += 1;
                self.to(if object {
                    St::KeyOrClose
                } else {
                    St::ValueOrClose
                })
            }
            b'"' => self.to(St::Str { key: false }),
            b'-' | b'0'..=b'9' => match Num::Start.next(b, false) {
                Some(n) => self.to(St::Num(n)),
                None => false,
            },
            b't' => self.to(St::Lit { word: 0, at: 1 }),
            b'f' => self.to(St::Lit { word: 1, at: 1 }),
            b'n' => self.to(St::Lit { word: 2, at: 1 }),
            _ => false,
        }
    }

    /// Closes the innermost container (an object when `object`).
    fn close(&mut self, object: bool) -> bool {
        if self.depth == 0 || self.top_is_object() != object {
            return false;
        }
        self.depth -= 1;
        self.value_done();
        true
    }

    fn value_done(&mut self) {
        self.st = if self.depth == 0 { St::Done } else { St::After };
    }

    /// A number ends at `b`, which then goes where the number leaves off.
    fn end_number(&mut self, b: u8) -> bool {
        self.value_done();
        self.take(b)
    }
}

/// A byte-level recogniser of a reply's prefixes, applied to tokens by
/// [`Guard`].
pub trait Recognizer: Clone + Send + Sync + std::fmt::Debug + 'static {
    /// Whether a control token may be taken for its text (else refused).
    const CONTROL_AS_TEXT: bool = false;
    /// Takes `bytes`; `false` when no reply continues the prefix with them.
    fn feed(&mut self, bytes: &[u8]) -> bool;
    /// Whether the bytes so far are a whole reply.
    fn complete(&self) -> bool;
}

impl Recognizer for JsonPrefix {
    fn feed(&mut self, bytes: &[u8]) -> bool {
        JsonPrefix::feed(self, bytes)
    }

    fn complete(&self) -> bool {
        JsonPrefix::complete(self)
    }
}

/// A [`Recognizer`] on a model's tokens: a token is allowed when its text
/// continues the prefix, end-of-generation only once the reply is complete.
/// With a prompt that opens `<think>`, the reasoning is free and the reply
/// starts after `</think>`.
#[derive(Clone, Debug)]
pub struct Guard<R> {
    model: Arc<dyn Vocab>,
    rec: R,
    thinking: bool,
}

impl<R: Recognizer> Guard<R> {
    pub fn new(model: Arc<dyn Vocab>, rec: R, starts_thinking: bool) -> Guard<R> {
        let thinking = starts_thinking && model.think_end().is_some();
        Guard {
            model,
            rec,
            thinking,
        }
    }
}

/// JSON mode (see the module docs): the reply is one JSON object.
pub type JsonGuard = Guard<JsonPrefix>;

impl JsonGuard {
    pub fn json(model: Arc<dyn Vocab>, starts_thinking: bool) -> JsonGuard {
        Guard::new(model, JsonPrefix::new(true), starts_thinking)
    }
}

impl<R: Recognizer> Constraint for Guard<R> {
    fn allows(&self, id: u32) -> bool {
        if self.thinking {
            return true;
        }
        let tok = self.model.tokenizer();
        if tok.is_eog(id) {
            return self.rec.complete();
        }
        if self.rec.complete() || (!R::CONTROL_AS_TEXT && tok.is_control(id)) {
            return false;
        }
        match tok.piece(id) {
            Ok(bytes) if !bytes.is_empty() => self.rec.clone().feed(bytes),
            _ => false,
        }
    }

    fn accept(&mut self, id: u32) {
        if self.thinking {
            if self.model.think_end() == Some(id) {
                self.thinking = false;
            }
            return;
        }
        if let Ok(bytes) = self.model.tokenizer().piece(id) {
            self.rec.feed(bytes);
        }
    }

    fn box_clone(&self) -> Box<dyn Constraint> {
        Box::new(self.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn takes(text: &str, object_only: bool) -> Option<JsonPrefix> {
        let mut j = JsonPrefix::new(object_only);
        j.feed(text.as_bytes()).then_some(j)
    }

    #[test]
    fn whole_json_texts_are_complete_and_serde_agrees() {
        let texts = [
            r#"{}"#,
            r#" { "a" : 1 , "b":[true,false,null,-0.5e+3,2E7,0], "c":{"d":"\"\\\/\b\f\n\r\t\u00e9x"} } "#,
            r#"{"k":[[],[{}],[[1]]],"s":"ünïcode ✓"}"#,
            r#"{"n":-12.25e-2}"#,
        ];
        for t in texts {
            assert!(serde_json::from_str::<serde_json::Value>(t).is_ok(), "{t}");
            let j = takes(t, true).unwrap_or_else(|| panic!("refused {t}"));
            assert!(j.complete(), "{t}");
            // Every proper prefix is a prefix, and none but those ending
            // after the object's close is complete.
            let close = t.rfind('}').unwrap();
            for cut in 0..t.len() {
                if t.is_char_boundary(cut) {
                    let j = takes(&t[..cut], true).unwrap_or_else(|| panic!("{t} at {cut}"));
                    assert_eq!(j.complete(), cut > close, "{t} at {cut}");
                }
            }
        }
        // Any value at the top when objects are not required.
        for t in ["[1, 2]", "\"x\"", "17", "-0.5", "true", "null"] {
            assert!(takes(t, false).is_some_and(|j| j.complete()), "{t}");
            assert!(takes(t, true).is_none() || t.starts_with('{'), "{t}");
        }
    }

    #[test]
    fn what_no_json_text_continues_is_refused() {
        // JSON, but not an object.
        assert!(takes("[]", true).is_none() && takes("[]", false).is_some());
        let bad = [
            "x",
            "{,",
            "{\"a\" 1",
            "{\"a\":}",
            "{\"a\":1,}",
            "{\"a\":1]",
            "{\"a\":[1}",
            "{\"a\":01",
            "{\"a\":1.}",
            "{\"a\":-}",
            "{\"a\":1e}",
            "{\"a\":tru}",
            "{\"a\":nul1",
            "{\"a\":\"\\x\"}",
            "{\"a\":\"\\u12g4\"}",
            "{\"a\":\"tab\there\"}",
            "{\"a\":1}}",
            "{\"a\":1} x",
            "{\"a\" :: 1}",
            "{'a':1}",
        ];
        for t in bad {
            assert!(
                serde_json::from_str::<serde_json::Value>(t).is_err(),
                "the test's own case is valid JSON: {t}"
            );
            assert!(takes(t, true).is_none(), "took {t}");
        }
    }

    #[test]
    fn whitespace_runs_are_bounded() {
        let run = |n: usize| " ".repeat(n);
        let ok = format!(
            "{}{{{}\"a\"{}:{}1{}}}",
            run(21),
            run(21),
            run(21),
            run(21),
            run(21)
        );
        assert!(takes(&ok, true).is_some_and(|j| j.complete()), "{ok:?}");
        assert!(takes(&run(22), true).is_none());
        assert!(takes(&format!("{{\"a\":1{}", run(22)), true).is_none());
        // Inside a string whitespace is text.
        assert!(takes(&format!("{{\"{}", run(100)), true).is_some());
    }

    #[test]
    fn nesting_stops_at_the_depth_limit() {
        let deep = "{\"a\":".to_string() + &"[".repeat(MAX_DEPTH as usize - 1);
        let j = takes(&deep, true).expect("64 levels");
        let (mut deeper, mut closed) = (j, j);
        assert!(!deeper.step(b'['), "a 65th level");
        assert!(closed.step(b']'));
    }
}
