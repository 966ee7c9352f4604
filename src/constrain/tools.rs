//! Forced tool calls (`tool_choice: "required"` or a named function; Anthropic's
//! `any` / `tool`): the reply must be one call in the Qwen tool-call format,
//!
//! ```text
//! <tool_call>
//! {"name": "NAME", "arguments": ARGS}
//! </tool_call>
//! ```
//!
//! then end-of-generation. NAME is one of the offered functions, and ARGS
//! follows that function's JSON schema as far as [`Shape`] reads it: an
//! object's properties are all written, in the order of their names (JSON
//! objects are unordered; the request's map comes sorted); strings,
//! numbers, integers, booleans, null, `enum` values and arrays of any of
//! these are followed exactly; anything else (`anyOf`, a list of types, an
//! object without properties) is any JSON value of the right kind. The text
//! is written as Python's `json.dumps` writes it (`", "` and `": "`), the
//! spacing the format's examples use.
//!
//! [`CallPrefix`] recognises prefixes of such replies byte by byte with an
//! explicit stack, so checking a token is a clone and a walk over its bytes;
//! [`ToolGuard`] applies it to a model's tokens (a control token such as
//! `<tool_call>` may stand for its text).

use std::sync::Arc;

use serde_json::Value;

use super::{Guard, JsonPrefix, Num, Recognizer};

/// Deepest schema nesting followed (deeper is any JSON value).
const MAX_SCHEMA_DEPTH: usize = 16;

/// What a schema asks of a value.
#[derive(Clone, Debug, PartialEq)]
pub enum Shape {
    /// Every property, in order.
    Object(Vec<(String, Shape)>),
    Array(Box<Shape>),
    /// A string of at most `max` characters (`maxLength`).
    Str {
        max: Option<u32>,
    },
    Num {
        integer: bool,
    },
    /// One of these JSON texts (`true`/`false`, `null`, an `enum`).
    OneOf(Vec<Vec<u8>>),
    /// Any JSON value; `object`: it must be an object.
    Any {
        object: bool,
    },
}

impl Shape {
    /// The shape of a JSON schema.
    pub fn of(schema: &Value) -> Shape {
        Shape::at(schema, 0)
    }

    fn at(schema: &Value, depth: usize) -> Shape {
        let any = Shape::Any { object: false };
        if depth > MAX_SCHEMA_DEPTH {
            return any;
        }
        if let Some(Value::Array(values)) = schema.get("enum") {
            if !values.is_empty() {
                return Shape::OneOf(values.iter().map(|v| v.to_string().into_bytes()).collect());
            }
        }
        if let Some(c) = schema.get("const") {
            return Shape::OneOf(vec![c.to_string().into_bytes()]);
        }
        match schema.get("type").and_then(Value::as_str) {
            Some("object") => match schema.get("properties") {
                Some(Value::Object(props)) if !props.is_empty() => Shape::Object(
                    props
                        .iter()
                        .map(|(k, v)| (k.clone(), Shape::at(v, depth + 1)))
                        .collect(),
                ),
                _ => Shape::Any { object: true },
            },
            Some("array") => match schema.get("items") {
                Some(items @ Value::Object(_)) => {
                    Shape::Array(Box::new(Shape::at(items, depth + 1)))
                }
                _ => Shape::Array(Box::new(any)),
            },
            Some("string") => Shape::Str {
                max: schema
                    .get("maxLength")
                    .and_then(Value::as_u64)
                    .map(|m| m.min(u32::MAX as u64) as u32),
            },
            Some("number") => Shape::Num { integer: false },
            Some("integer") => Shape::Num { integer: true },
            Some("boolean") => Shape::OneOf(vec![b"true".to_vec(), b"false".to_vec()]),
            Some("null") => Shape::OneOf(vec![b"null".to_vec()]),
            _ => any,
        }
    }

    /// Whether `v` has this shape (for tests and for checking a parsed call).
    pub fn admits(&self, v: &Value) -> bool {
        match self {
            Shape::Object(props) => v.as_object().is_some_and(|o| {
                props
                    .iter()
                    .all(|(k, s)| o.get(k).is_some_and(|x| s.admits(x)))
            }),
            Shape::Array(item) => v
                .as_array()
                .is_some_and(|a| a.iter().all(|x| item.admits(x))),
            Shape::Str { max } => v
                .as_str()
                .is_some_and(|s| max.is_none_or(|m| s.chars().count() <= m as usize)),
            Shape::Num { integer } => {
                v.is_number() && (!integer || v.as_i64().is_some() || v.as_u64().is_some())
            }
            Shape::OneOf(texts) => texts.iter().any(|t| v.to_string().as_bytes() == t),
            Shape::Any { object } => !object || v.is_object(),
        }
    }
}

/// One step of a sequence: a literal, or a value of a shape.
#[derive(Clone, Debug)]
enum Item {
    Lit(Vec<u8>),
    Value(Shape),
}

/// The items of an object of these properties.
fn object_items(props: &[(String, Shape)]) -> Vec<Item> {
    let mut items = Vec::new();
    for (i, (k, s)) in props.iter().enumerate() {
        let open = if i == 0 { "{" } else { ", " };
        let key = Value::String(k.clone()).to_string();
        items.push(Item::Lit(format!("{open}{key}: ").into_bytes()));
        items.push(Item::Value(s.clone()));
    }
    items.push(Item::Lit(b"}".to_vec()));
    items
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StrSt {
    Open,
    In,
    Esc,
    Hex(u8),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ArrSt {
    Open,
    /// After `[`: an item or `]`.
    First,
    /// After an item: `, ` or `]`.
    After,
    /// After `,`: the space.
    Comma,
    /// After `, `: an item.
    Item,
}

/// One level of the recogniser's stack.
#[derive(Clone, Debug)]
enum Frame {
    Seq {
        items: Arc<[Item]>,
        at: usize,
    },
    Lit {
        text: Arc<[u8]>,
        at: usize,
    },
    Str {
        st: StrSt,
        /// Characters so far, and the most allowed.
        n: u32,
        max: u32,
        /// UTF-8 continuation bytes the current character still needs.
        cont: u8,
    },
    Num {
        st: Num,
        integer: bool,
        /// Digits in the current part (integer, fraction or exponent).
        digits: u8,
    },
    OneOf {
        texts: Arc<[Vec<u8>]>,
        got: Vec<u8>,
    },
    Arr {
        item: Arc<Shape>,
        st: ArrSt,
    },
    Any(JsonPrefix),
    /// The function's name, then its arguments.
    Call {
        names: Arc<[(Vec<u8>, Shape)]>,
        got: Vec<u8>,
    },
}

/// What a frame did with a byte.
enum Step {
    /// Took it; more may follow.
    Took,
    /// Took it, and is complete: pop.
    Closed,
    /// Did not take it but is complete: pop and give the byte to the frame below.
    Ended,
    Bad,
}

impl Frame {
    fn of(shape: &Shape) -> Frame {
        match shape {
            Shape::Object(props) => Frame::Seq {
                items: object_items(props).into(),
                at: 0,
            },
            Shape::Array(item) => Frame::Arr {
                item: Arc::new((**item).clone()),
                st: ArrSt::Open,
            },
            Shape::Str { max } => Frame::Str {
                st: StrSt::Open,
                n: 0,
                max: max.unwrap_or(u32::MAX),
                cont: 0,
            },
            Shape::Num { integer } => Frame::Num {
                st: Num::Start,
                integer: *integer,
                digits: 0,
            },
            Shape::OneOf(texts) => Frame::OneOf {
                texts: texts.clone().into(),
                got: Vec::new(),
            },
            Shape::Any { object } => Frame::Any(JsonPrefix::new(*object)),
        }
    }

    fn lit(text: &[u8]) -> Frame {
        Frame::Lit {
            text: text.into(),
            at: 0,
        }
    }
}

/// Prefixes of one forced tool call (see the module docs).
#[derive(Clone, Debug)]
pub struct CallPrefix {
    stack: Vec<Frame>,
}

/// What comes before the name.
const HEAD: &[u8] = b"<tool_call>\n{\"name\": ";
/// Between the name and the arguments.
const MID: &[u8] = b", \"arguments\": ";
/// After the arguments.
const TAIL: &[u8] = b"}\n</tool_call>";

impl CallPrefix {
    /// A call of one of `tools` (name, argument shape).
    pub fn new(tools: &[(String, Shape)]) -> CallPrefix {
        let names: Arc<[(Vec<u8>, Shape)]> = tools
            .iter()
            .map(|(n, s)| (Value::String(n.clone()).to_string().into_bytes(), s.clone()))
            .collect();
        let items: Arc<[Item]> = vec![Item::Lit(HEAD.to_vec())].into();
        CallPrefix {
            // Popped from the end: the head first, then the call.
            stack: vec![
                Frame::lit(TAIL),
                Frame::Call {
                    names,
                    got: Vec::new(),
                },
                Frame::Seq { items, at: 0 },
            ],
        }
    }

    /// Whether the call is complete.
    pub fn complete(&self) -> bool {
        self.stack.is_empty()
    }

    /// Takes `bytes`; `false` when no call continues the prefix with them.
    pub fn feed(&mut self, bytes: &[u8]) -> bool {
        bytes.iter().all(|&b| self.step(b))
    }

    fn step(&mut self, b: u8) -> bool {
        loop {
            let Some(top) = self.stack.last_mut() else {
                return false;
            };
            // A sequence hands its next item to a frame of its own.
            if let Frame::Seq { items, at } = top {
                if *at == items.len() {
                    self.stack.pop();
                    continue;
                }
                let next = match &items[*at] {
                    Item::Lit(t) => Frame::lit(t),
                    Item::Value(s) => Frame::of(s),
                };
                *at += 1;
                self.stack.push(next);
                continue;
            }
            // So does an array, for each item.
            if let Frame::Arr { item, st } = top {
                if *st == ArrSt::Item || (*st == ArrSt::First && b != b']') {
                    *st = ArrSt::After;
                    let next = Frame::of(item);
                    self.stack.push(next);
                    continue;
                }
            }
            match Self::take(top, b) {
                Step::Took => return true,
                Step::Closed => {
                    let done = self.stack.pop();
                    if let Some(Frame::Call { names, got }) = done {
                        // The name is known: its arguments, then the tail.
                        let shape = &names.iter().find(|(n, _)| *n == got).expect("a name").1;
                        let mut items = vec![Item::Lit(MID.to_vec())];
                        items.push(Item::Value(shape.clone()));
                        self.stack.push(Frame::Seq {
                            items: items.into(),
                            at: 0,
                        });
                    }
                    return true;
                }
                Step::Ended => {
                    self.stack.pop();
                }
                Step::Bad => return false,
            }
        }
    }

    fn take(f: &mut Frame, b: u8) -> Step {
        match f {
            // (Expanded by `step` before a byte reaches them.)
            Frame::Seq { .. } => Step::Bad,
            Frame::Lit { text, at } => {
                if text.get(*at) != Some(&b) {
                    return Step::Bad;
                }
                *at += 1;
                if *at == text.len() {
                    Step::Closed
                } else {
                    Step::Took
                }
            }
            Frame::Str { st, n, max, cont } => {
                if *st == StrSt::In {
                    // Well-formed UTF-8, counted in characters.
                    let is_cont = (0x80..0xc0).contains(&b);
                    if *cont > 0 {
                        if !is_cont {
                            return Step::Bad;
                        }
                        *cont -= 1;
                        return Step::Took;
                    }
                    if b != b'"' {
                        *cont = match b {
                            0x00..=0x7f => 0,
                            0xc2..=0xdf => 1,
                            0xe0..=0xef => 2,
                            0xf0..=0xf4 => 3,
                            _ => return Step::Bad,
                        };
                        if *n == *max {
                            return Step::Bad;
                        }
                        *n += 1;
                    }
                }
                string_step(st, b)
            }
            Frame::Num {
                st,
                integer,
                digits,
            } => number_step(st, *integer, digits, b),
            Frame::OneOf { texts, got } => one_of_step(texts, got, b),
            Frame::Call { names, got } => {
                got.push(b);
                let live = names.iter().filter(|(n, _)| n.starts_with(got)).count();
                match live {
                    0 => Step::Bad,
                    // Names are JSON strings: none is a prefix of another.
                    _ if names.iter().any(|(n, _)| n == got) => Step::Closed,
                    _ => Step::Took,
                }
            }
            Frame::Arr { st, .. } => match (*st, b) {
                (ArrSt::Open, b'[') => {
                    *st = ArrSt::First;
                    Step::Took
                }
                (ArrSt::First | ArrSt::After, b']') => Step::Closed,
                (ArrSt::After, b',') => {
                    *st = ArrSt::Comma;
                    Step::Took
                }
                (ArrSt::Comma, b' ') => {
                    *st = ArrSt::Item;
                    Step::Took
                }
                _ => Step::Bad,
            },
            Frame::Any(j) => {
                let mut next = *j;
                if next.step(b) {
                    *j = next;
                    Step::Took
                } else if j.complete() {
                    Step::Ended
                } else {
                    Step::Bad
                }
            }
        }
    }
}

fn string_step(st: &mut StrSt, b: u8) -> Step {
    match (*st, b) {
        (StrSt::Open, b'"') => *st = StrSt::In,
        (StrSt::Open, _) => return Step::Bad,
        (StrSt::In, b'"') => return Step::Closed,
        (StrSt::In, b'\\') => *st = StrSt::Esc,
        (StrSt::In, c) if c < 0x20 => return Step::Bad,
        (StrSt::In, _) => {}
        (StrSt::Esc, b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => *st = StrSt::In,
        (StrSt::Esc, b'u') => *st = StrSt::Hex(4),
        (StrSt::Esc, _) => return Step::Bad,
        (StrSt::Hex(n), c) if c.is_ascii_hexdigit() => {
            *st = if n == 1 { StrSt::In } else { StrSt::Hex(n - 1) }
        }
        (StrSt::Hex(_), _) => return Step::Bad,
    }
    Step::Took
}

/// The most digits a number's integer or fraction part may have (JSON
/// numbers past 16 digits are beyond an f64), and its exponent.
const MAX_DIGITS: u8 = 16;
const MAX_EXP_DIGITS: u8 = 3;

fn number_step(st: &mut Num, integer: bool, digits: &mut u8, b: u8) -> Step {
    let Some(next) = st.next(b, integer) else {
        return match st.complete() {
            true => Step::Ended,
            false => Step::Bad,
        };
    };
    if b.is_ascii_digit() {
        *digits = if next == *st { *digits + 1 } else { 1 };
        let max = if next == Num::ExpInt {
            MAX_EXP_DIGITS
        } else {
            MAX_DIGITS
        };
        if *digits > max {
            return Step::Bad;
        }
    }
    *st = next;
    Step::Took
}

fn one_of_step(texts: &[Vec<u8>], got: &mut Vec<u8>, b: u8) -> Step {
    got.push(b);
    if texts.iter().any(|t| t.starts_with(got)) {
        return Step::Took;
    }
    got.pop();
    if texts.iter().any(|t| t == got) {
        Step::Ended
    } else {
        Step::Bad
    }
}

impl Recognizer for CallPrefix {
    /// `<tool_call>` may be one control token of the vocabulary.
    const CONTROL_AS_TEXT: bool = true;

    fn feed(&mut self, bytes: &[u8]) -> bool {
        CallPrefix::feed(self, bytes)
    }

    fn complete(&self) -> bool {
        CallPrefix::complete(self)
    }
}

/// A forced tool call on a model's tokens ([`Guard`]).
pub type ToolGuard = Guard<CallPrefix>;

impl ToolGuard {
    pub fn tool_call(
        model: Arc<dyn super::Vocab>,
        tools: &[(String, Shape)],
        starts_thinking: bool,
    ) -> ToolGuard {
        Guard::new(model, CallPrefix::new(tools), starts_thinking)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn weather() -> Vec<(String, Shape)> {
        let schema = json!({"type": "object", "properties": {
            "city": {"type": "string"},
            "days": {"type": "integer"},
            "unit": {"enum": ["c", "f"]},
            "hourly": {"type": "boolean"},
            "at": {"type": "array", "items": {"type": "number"}},
            "extra": {"anyOf": [{"type": "string"}, {"type": "null"}]},
        }, "required": ["city"]});
        let time = json!({"type": "object", "properties": {}});
        vec![
            ("get_weather".into(), Shape::of(&schema)),
            ("get_time".into(), Shape::of(&time)),
        ]
    }

    fn takes(text: &str) -> Option<CallPrefix> {
        let mut c = CallPrefix::new(&weather());
        c.feed(text.as_bytes()).then_some(c)
    }

    #[test]
    fn calls_in_the_format_are_taken_whole_and_every_prefix_is_live() {
        let calls = [
            "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"at\": [1.5e3, -0, 7], \"city\": \"Par\\\"is \\u00e9\", \"days\": -12, \"extra\": null, \"hourly\": false, \"unit\": \"f\"}}\n</tool_call>",
            "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"at\": [], \"city\": \"\", \"days\": 0, \"extra\": {\"k\": [1]}, \"hourly\": true, \"unit\": \"c\"}}\n</tool_call>",
            "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>",
            "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": \"UTC\"}}\n</tool_call>",
        ];
        let tools = weather();
        for t in calls {
            let c = takes(t).unwrap_or_else(|| panic!("refused {t}"));
            assert!(c.complete(), "{t}");
            // The text is a call a parser reads, with arguments of the shape.
            let body = &t["<tool_call>\n".len()..t.len() - "\n</tool_call>".len()];
            let v: Value = serde_json::from_str(body).unwrap();
            let (_, shape) = tools.iter().find(|(n, _)| v["name"] == n.as_str()).unwrap();
            assert!(shape.admits(&v["arguments"]), "{t}");
            for cut in 0..t.len() {
                let c = takes(&t[..cut]).unwrap_or_else(|| panic!("{t} at {cut}"));
                assert!(!c.complete(), "{t} at {cut}");
            }
            // Nothing after the end.
            assert!(takes(&format!("{t}\n")).is_none());
        }
    }

    #[test]
    fn what_the_schema_or_the_format_refuses_is_refused() {
        let head = "<tool_call>\n{\"name\": ";
        let w = format!("{head}\"get_weather\", \"arguments\": ");
        let bad = [
            "<tool_call>{".to_string(),
            format!("{head}\"get_wea\""),
            format!("{head}\"other\""),
            format!("{w}[]"),
            // Every property, in the order of their names.
            format!("{w}{{\"city\": \"x\""),
            format!("{w}{{\"at\": []}}"),
            format!("{w}{{\"at\": [\"s\""),
            format!("{w}{{\"at\": [1,2"),
            format!("{w}{{\"at\": [], \"city\": 5"),
            format!("{w}{{\"at\": [], \"city\": \"tab\there\""),
            format!("{w}{{\"at\": [], \"city\": \"\\q\""),
            format!("{w}{{\"at\": [], \"city\": \"x\", \"days\": 1.5"),
            format!("{w}{{\"at\": [], \"city\": \"x\", \"days\": 1e3"),
            format!("{w}{{\"at\": [], \"city\": \"x\", \"days\": 01"),
            format!("{w}{{\"at\": [], \"city\": \"x\", \"days\": 1, \"extra\": 1, \"hourly\": 1"),
            format!("{w}{{\"at\": [], \"city\": \"x\", \"days\": 1, \"extra\": 1, \"hourly\": true, \"unit\": \"k\""),
        ];
        for t in &bad {
            assert!(takes(t).is_none(), "took {t}");
        }
    }

    #[test]
    fn strings_stop_at_max_length_and_numbers_at_sixteen_digits() {
        let shape = Shape::of(&json!({"type": "object", "properties": {
            "s": {"type": "string", "maxLength": 3}, "n": {"type": "number"}}}));
        let tools = [("f".to_string(), shape)];
        let w = "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"n\": ";
        let take = |t: &str| CallPrefix::new(&tools).feed(t.as_bytes());
        let sixteen = "1234567890123456";
        assert!(take(&format!(
            "{w}{sixteen}.{sixteen}e+123, \"s\": \"é\\n\\u0041\"}}}}"
        )));
        assert!(!take(&format!("{w}{sixteen}7")));
        assert!(!take(&format!("{w}1.{sixteen}7")));
        assert!(!take(&format!("{w}1e1234")));
        assert!(!take(&format!("{w}1, \"s\": \"abcd")));
        assert!(take(&format!("{w}1, \"s\": \"abc\"")));
        // Only well-formed UTF-8 (a stray continuation byte, a lead byte
        // without its continuation).
        let bytes = |tail: &[u8]| {
            let mut t = format!("{w}1, \"s\": \"").into_bytes();
            t.extend_from_slice(tail);
            CallPrefix::new(&tools).feed(&t)
        };
        assert!(bytes("é".as_bytes()) && bytes("✓".as_bytes()));
        assert!(!bytes(&[0x80]) && !bytes(&[0xc3, b'"']) && !bytes(&[0xff]));
    }

    #[test]
    fn schemas_read_as_shapes_and_shapes_judge_values() {
        let (_, s) = &weather()[0];
        let good = json!({"city": "x", "days": 2, "unit": "c", "hourly": true, "at": [1, 2.5], "extra": "e"});
        assert!(s.admits(&good));
        for bad in [
            json!({"city": "x"}),
            json!({"city": 1, "days": 2, "unit": "c", "hourly": true, "at": [], "extra": 1}),
            json!({"city": "x", "days": 2.5, "unit": "c", "hourly": true, "at": [], "extra": 1}),
            json!({"city": "x", "days": 2, "unit": "k", "hourly": true, "at": [], "extra": 1}),
        ] {
            assert!(!s.admits(&bad), "{bad}");
        }
        let short = Shape::of(&json!({"type": "string", "maxLength": 3}));
        assert!(short.admits(&json!("abé")) && !short.admits(&json!("abcd")));
        assert_eq!(Shape::of(&json!({})), Shape::Any { object: false });
        assert_eq!(
            Shape::of(&json!({"type": "object"})),
            Shape::Any { object: true }
        );
    }
}
