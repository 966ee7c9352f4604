//! Chat templates: the GGUF's `tokenizer.chat_template` (Jinja) rendered with minijinja, set up
//! the way Hugging Face `apply_chat_template` sets up Jinja2:
//! - `trim_blocks` and `lstrip_blocks` on;
//! - Python string/dict/list methods (`.startswith`, `.strip`, `.split`, `.items`, ...) through
//!   minijinja-contrib's pycompat callback;
//! - `raise_exception(msg)` fails the render with `msg`;
//! - `tojson` behaves like Python's `json.dumps(x, ensure_ascii=False)`: `", "` and `": "`
//!   separators, keys in insertion order, optional `indent`, `sort_keys`, `ensure_ascii`;
//! - context: `messages` (maps with `role`, `content` and, when present, `reasoning_content`),
//!   `add_generation_prompt`, `bos_token`, `eos_token`, and `enable_thinking` only when given.
//!
//! [`CHATML_TEMPLATE`] is our own ChatML template with Qwen3-style thinking, for files that
//! carry none.
//!
//! A template is code from the model file, so every render runs under three limits, and
//! breaking one fails the render with a [`ChatError::Limit`] ("the model's chat template
//! exceeded ..."):
//! - work: [`FUEL`] units of minijinja fuel (one per instruction, one per 64 bytes of data the
//!   template creates, copies or outputs; our `tojson` pays for what it visits and writes).
//!   Since data costs fuel, this also bounds memory: about `FUEL × 64` bytes (≈ 320 MB at
//!   most, reached only by a template that does nothing but build strings), and it stops
//!   `{% set s = s ~ s %}` doubling before the allocation that would pass the budget;
//! - output: [`output_limit`] bytes, 1 MiB plus 8× the bytes of the messages;
//! - nesting: minijinja's recursion limit (macros, recursive loops, parsing), and [`JSON_DEPTH`]
//!   levels of `tojson`;
//! - value nesting: a namespace attribute may hold only plain values (no namespace or other
//!   map object, at most [`NAMESPACE_VALUE_DEPTH`] levels deep); the template source is
//!   rewritten so every `{% set ns.attr = value %}` passes `value` through that check. Without
//!   it, `{% set ns.me = ns %}{{ ns }}` (a cycle) or `{% set ns.l = [ns.l] %}` in a loop (a
//!   list a million deep) makes minijinja's `Display` / comparison recurse past the stack, which
//!   aborts the process: minijinja 3.1 has no depth guard there and no hook on assignment.
//!
//! Not bounded: nesting written out in the source itself (thousands of
//! `{% set x = [[[x]]] %}` statements in a megabyte-long template) still builds a value deep
//! enough to overflow the stack when printed. Bounding it needs a depth limit in minijinja.

use std::io;

use minijinja::syntax::SyntaxConfig;
use minijinja::value::{Kwargs, ValueKind};
use minijinja::{Environment, Error as JinjaError, ErrorKind, State, Value};
use thiserror::Error;

/// Work budget of one render, in minijinja fuel. A long real conversation (200 turns, 1.2 MB
/// of text, with reasoning and tool responses) through the Qwen-style template in
/// `chat_tests.rs` uses about 76,000 fuel (`a_long_conversation_uses_a_small_share_of_the_fuel`
/// keeps it under a twentieth of this, 65× headroom); an endless loop runs out in about 0.15 s (optimised build).
pub const FUEL: u64 = 5_000_000;

/// Deepest nesting `tojson` serialises (Python's `json` stops near 1000 on recursion; real
/// tool schemas nest a handful of levels).
pub const JSON_DEPTH: usize = 128;

/// Deepest value a namespace attribute may hold.
pub const NAMESPACE_VALUE_DEPTH: usize = 64;

/// The filter every namespace assignment's value is passed through (see the module docs).
const NAMESPACE_VALUE_FILTER: &str = "__clover_namespace_value";

/// Output cap for a render of messages totalling `input_bytes`: 1 MiB plus 8× the input, so a
/// template may wrap every message in tags and repeat it several times, but not loop.
pub fn output_limit(input_bytes: usize) -> usize {
    (1 << 20) + input_bytes.saturating_mul(8)
}

/// ChatML with thinking. Assistant turns after the last user message carry their reasoning as
/// `<think>\n…\n</think>\n\n` before the answer (earlier turns drop it, as Qwen3 does);
/// `enable_thinking = false` appends an empty think block to the generation prompt.
pub const CHATML_TEMPLATE: &str = r#"{%- set ns = namespace(last_user=-1) %}
{%- for m in messages %}
    {%- if m.role == 'user' %}
        {%- set ns.last_user = loop.index0 %}
    {%- endif %}
{%- endfor %}
{%- for m in messages %}
    {%- if m.role == 'assistant' %}
        {{- '<|im_start|>assistant\n' }}
        {%- if loop.index0 > ns.last_user and m.reasoning_content %}
            {{- '<think>\n' + m.reasoning_content.strip('\n') + '\n</think>\n\n' }}
        {%- endif %}
        {{- m.content + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>' + m.role + '\n' + m.content + '<|im_end|>\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- endif %}
{%- endif %}
"#;

const TEMPLATE_NAME: &str = "chat_template";

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
    pub reasoning_content: Option<String>,
}

impl ChatMessage {
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> ChatMessage {
        ChatMessage {
            role: role.into(),
            content: content.into(),
            reasoning_content: None,
        }
    }

    pub fn system(content: impl Into<String>) -> ChatMessage {
        ChatMessage::new("system", content)
    }

    pub fn user(content: impl Into<String>) -> ChatMessage {
        ChatMessage::new("user", content)
    }

    pub fn assistant(content: impl Into<String>) -> ChatMessage {
        ChatMessage::new("assistant", content)
    }

    pub fn with_reasoning(mut self, reasoning: impl Into<String>) -> ChatMessage {
        self.reasoning_content = Some(reasoning.into());
        self
    }

    fn to_value(&self) -> Value {
        let mut fields = vec![
            ("role", Value::from(self.role.as_str())),
            ("content", Value::from(self.content.as_str())),
        ];
        if let Some(r) = &self.reasoning_content {
            fields.push(("reasoning_content", Value::from(r.as_str())));
        }
        Value::from_pairs(fields)
    }
}

/// A JSON value as a template value (objects keep their key order).
fn json_value(v: &serde_json::Value) -> Value {
    use serde_json::Value as J;
    match v {
        J::Null => Value::from(()),
        J::Bool(b) => Value::from(*b),
        J::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => Value::from(i),
            (None, Some(f)) => Value::from(f),
            _ => Value::from(n.to_string()),
        },
        J::String(s) => Value::from(s.as_str()),
        J::Array(a) => a.iter().map(json_value).collect(),
        J::Object(o) => Value::from_pairs(o.iter().map(|(k, v)| (k.as_str(), json_value(v)))),
    }
}

#[derive(Debug, Error)]
pub enum ChatError {
    #[error("chat template does not compile: {0}")]
    Syntax(String),
    #[error("chat template failed: {0}")]
    Render(String),
    /// A limit on work, output or nesting; the text says which.
    #[error("the model's chat template exceeded {0}")]
    Limit(String),
}

/// An `io::Write` into a buffer that refuses to grow past `cap` bytes.
struct CappedWriter {
    buf: Vec<u8>,
    cap: usize,
    overflowed: bool,
}

impl io::Write for CappedWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        if self.buf.len().saturating_add(data.len()) > self.cap {
            self.overflowed = true;
            return Err(io::Error::other("chat template output limit"));
        }
        self.buf.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Maps a failed render to our error, naming the limit when one was hit.
fn render_error(e: &JinjaError, out: &CappedWriter) -> ChatError {
    if out.overflowed {
        return ChatError::Limit(format!("its output limit of {} bytes", out.cap));
    }
    if e.kind() == ErrorKind::OutOfFuel {
        return ChatError::Limit(format!(
            "its work limit of {FUEL} fuel (does it loop or recurse without end?)"
        ));
    }
    let text = describe(e);
    if ["recursion limit", "maximum recursion", "namespace can hold"]
        .iter()
        .any(|needle| text.contains(needle))
    {
        return ChatError::Limit(format!("its nesting limit: {text}"));
    }
    ChatError::Render(text)
}

/// The error and its causes on one line.
fn describe(e: &JinjaError) -> String {
    let mut s = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(cause) = src {
        s.push_str(": ");
        s.push_str(&cause.to_string());
        src = cause.source();
    }
    s
}

/// A compiled chat template.
#[derive(Debug)]
pub struct ChatTemplate {
    env: Environment<'static>,
}

impl ChatTemplate {
    pub fn new(source: &str, bos_token: &str, eos_token: &str) -> Result<ChatTemplate, ChatError> {
        let mut env = Environment::new();
        let syntax = SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()
            .map_err(|e| ChatError::Syntax(describe(&e)))?;
        env.set_syntax(syntax);
        env.set_fuel(Some(FUEL));
        minijinja_contrib::add_to_environment(&mut env);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_filter("tojson", tojson);
        env.add_filter(NAMESPACE_VALUE_FILTER, namespace_value);
        env.add_global("bos_token", bos_token.to_owned());
        env.add_global("eos_token", eos_token.to_owned());
        env.add_template_owned(TEMPLATE_NAME, guard_namespace_assignments(source))
            .map_err(|e| {
                let text = describe(&e);
                if text.contains("recursion limit") {
                    ChatError::Limit(format!("its nesting limit: {text}"))
                } else {
                    ChatError::Syntax(text)
                }
            })?;
        Ok(ChatTemplate { env })
    }

    /// Renders the conversation. `enable_thinking` is passed to the template only when given
    /// (templates test it with `is defined`).
    pub fn render(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
        enable_thinking: Option<bool>,
    ) -> Result<String, ChatError> {
        self.render_measured(messages, add_generation_prompt, enable_thinking)
            .map(|(text, _)| text)
    }

    /// [`render`](Self::render), also returning the fuel the render used.
    pub fn render_measured(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
        enable_thinking: Option<bool>,
    ) -> Result<(String, u64), ChatError> {
        let input_bytes: usize = messages
            .iter()
            .map(|m| {
                m.role.len() + m.content.len() + m.reasoning_content.as_ref().map_or(0, String::len)
            })
            .sum();
        let messages = Value::from(
            messages
                .iter()
                .map(ChatMessage::to_value)
                .collect::<Vec<_>>(),
        );
        self.render_value(
            messages,
            None,
            add_generation_prompt,
            enable_thinking,
            input_bytes,
        )
    }

    /// Renders messages given as JSON, as an OpenAI client sends them (tool
    /// calls, tool results), with the request's `tools` when it has some.
    pub fn render_json(
        &self,
        messages: &serde_json::Value,
        tools: Option<&serde_json::Value>,
        add_generation_prompt: bool,
    ) -> Result<String, ChatError> {
        let input_bytes = messages.to_string().len() + tools.map_or(0, |t| t.to_string().len());
        self.render_value(
            json_value(messages),
            tools.map(json_value),
            add_generation_prompt,
            None,
            input_bytes,
        )
        .map(|(text, _)| text)
    }

    fn render_value(
        &self,
        messages: Value,
        tools: Option<Value>,
        add_generation_prompt: bool,
        enable_thinking: Option<bool>,
        input_bytes: usize,
    ) -> Result<(String, u64), ChatError> {
        let tmpl = self
            .env
            .get_template(TEMPLATE_NAME)
            .map_err(|e| ChatError::Render(describe(&e)))?;
        let mut ctx = vec![
            ("messages", messages),
            ("add_generation_prompt", Value::from(add_generation_prompt)),
        ];
        if let Some(t) = tools {
            ctx.push(("tools", t));
        }
        if let Some(t) = enable_thinking {
            ctx.push(("enable_thinking", Value::from(t)));
        }
        let mut out = CappedWriter {
            buf: Vec::new(),
            cap: output_limit(input_bytes),
            overflowed: false,
        };
        let fuel = match tmpl.render_captured_to(Value::from_pairs(ctx), &mut out) {
            Ok(captured) => captured.state().fuel_levels().map_or(0, |(used, _)| used),
            Err(e) => return Err(render_error(&e, &out)),
        };
        let text = String::from_utf8(out.buf)
            .map_err(|_| ChatError::Render("the output is not UTF-8".into()))?;
        Ok((text, fuel))
    }
}

/// Wraps the value of every `{% set name.attr = value %}` tag as `(value)|NAMESPACE_VALUE_FILTER`.
/// Quotes are honoured when looking for the tag's end; the rest of the source is unchanged.
fn guard_namespace_assignments(source: &str) -> String {
    let mut out = String::with_capacity(source.len() + 64);
    let mut rest = source;
    while let Some(i) = rest.find("{%") {
        out.push_str(&rest[..i]);
        let tag = &rest[i..];
        match namespace_assignment(tag) {
            Some((head, expr_end, end)) => {
                out.push_str(&tag[..head]);
                out.push_str(" (");
                out.push_str(&tag[head..expr_end]);
                out.push_str(")|");
                out.push_str(NAMESPACE_VALUE_FILTER);
                out.push(' ');
                out.push_str(&tag[expr_end..end]);
                rest = &tag[end..];
            }
            None => {
                out.push_str("{%");
                rest = &tag[2..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// For `tag` starting with `{%`: when it is `{% set name.attr = value %}` (with optional
/// whitespace control), the byte offsets just after `=`, at the end of `value`, and just after
/// the closing `%}`.
fn namespace_assignment(tag: &str) -> Option<(usize, usize, usize)> {
    let b = tag.as_bytes();
    let skip_ws = |mut i: usize| {
        while b.get(i).is_some_and(u8::is_ascii_whitespace) {
            i += 1;
        }
        i
    };
    let ident = |i: usize| {
        let mut j = i;
        while b
            .get(j)
            .is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_')
        {
            j += 1;
        }
        (j > i && !b[i].is_ascii_digit()).then_some(j)
    };
    let mut i = 2;
    if matches!(b.get(i), Some(b'-' | b'+')) {
        i += 1;
    }
    i = skip_ws(i);
    if !tag[i..].starts_with("set") || !b.get(i + 3).is_some_and(u8::is_ascii_whitespace) {
        return None;
    }
    i = skip_ws(ident(skip_ws(i + 3))?);
    if b.get(i) != Some(&b'.') {
        return None;
    }
    i = skip_ws(ident(skip_ws(i + 1))?);
    if b.get(i) != Some(&b'=') || b.get(i + 1) == Some(&b'=') {
        return None;
    }
    let head = i + 1;
    let mut quote = None;
    let mut j = head;
    while j < b.len() {
        let c = b[j];
        match quote {
            Some(_) if c == b'\\' => j += 1,
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == b'\'' || c == b'"' => quote = Some(c),
            None if b[j..].starts_with(b"%}") => {
                let mut expr_end = j;
                if expr_end > head && matches!(b[expr_end - 1], b'-' | b'+') {
                    expr_end -= 1;
                }
                return Some((head, expr_end, j + 2));
            }
            None => {}
        }
        j += 1;
    }
    None
}

/// Passes `value` through when it may be stored in a namespace: no map but plain dicts (so no
/// namespace, hence no cycle) and at most [`NAMESPACE_VALUE_DEPTH`] levels.
fn namespace_value(state: &State, value: Value) -> Result<Value, JinjaError> {
    check_namespace_value(state, &value, 0)?;
    Ok(value)
}

fn check_namespace_value(state: &State, v: &Value, depth: usize) -> Result<(), JinjaError> {
    if depth > NAMESPACE_VALUE_DEPTH {
        return Err(JinjaError::new(
            ErrorKind::InvalidOperation,
            format!("recursion limit: a namespace value nests deeper than {NAMESPACE_VALUE_DEPTH} levels"),
        ));
    }
    match v.kind() {
        ValueKind::Map => {
            if v.downcast_object_ref::<indexmap::IndexMap<Value, Value>>()
                .is_none()
            {
                return Err(JinjaError::new(
                    ErrorKind::InvalidOperation,
                    "a namespace can hold plain values only, not a namespace or other object",
                ));
            }
            for k in collect_paid(state, v)? {
                check_namespace_value(state, &v.get_item(&k)?, depth + 1)?;
            }
        }
        ValueKind::Seq => {
            for item in collect_paid(state, v)? {
                check_namespace_value(state, &item, depth + 1)?;
            }
        }
        _ => {}
    }
    Ok(())
}

fn raise_exception(message: String) -> Result<Value, JinjaError> {
    Err(JinjaError::new(ErrorKind::InvalidOperation, message))
}

/// Widest numeric `tojson` indent.
const MAX_INDENT: usize = 64;

/// Python `json.dumps` options the filter honours.
struct JsonStyle {
    indent: Option<String>,
    sort_keys: bool,
    ensure_ascii: bool,
    item_sep: String,
    key_sep: String,
}

fn tojson(state: &State, value: &Value, kwargs: Kwargs) -> Result<Value, JinjaError> {
    let indent: Option<Value> = kwargs.get("indent")?;
    let sort_keys: Option<bool> = kwargs.get("sort_keys")?;
    let ensure_ascii: Option<bool> = kwargs.get("ensure_ascii")?;
    let separators: Option<Vec<String>> = kwargs.get("separators")?;
    kwargs.assert_all_used()?;
    let indent = match indent {
        None => None,
        Some(v) if v.is_none() => None,
        Some(v) => Some(match v.as_str() {
            Some(s) => s.to_owned(),
            None => {
                let n = usize::try_from(v)?;
                if n > MAX_INDENT {
                    return Err(JinjaError::new(
                        ErrorKind::InvalidOperation,
                        format!("tojson indent {n} is over {MAX_INDENT}"),
                    ));
                }
                " ".repeat(n)
            }
        }),
    };
    let (item_sep, key_sep) = match separators {
        Some(s) if s.len() == 2 => (s[0].clone(), s[1].clone()),
        Some(_) => {
            return Err(JinjaError::new(
                ErrorKind::InvalidOperation,
                "tojson separators must be a pair",
            ))
        }
        None if indent.is_some() => (",".to_owned(), ": ".to_owned()),
        None => (", ".to_owned(), ": ".to_owned()),
    };
    let style = JsonStyle {
        indent,
        sort_keys: sort_keys.unwrap_or(false),
        ensure_ascii: ensure_ascii.unwrap_or(false),
        item_sep,
        key_sep,
    };
    let mut out = String::new();
    write_json(state, value, &style, 0, &mut out)?;
    Ok(Value::from_safe_string(out))
}

fn newline(style: &JsonStyle, level: usize, out: &mut String) {
    if let Some(ind) = &style.indent {
        out.push('\n');
        for _ in 0..level {
            out.push_str(ind);
        }
    }
}

/// Appends `v` as JSON. Every value visited costs one fuel and every 64 bytes written another,
/// paid before writing, so a small value that expands hugely (one long string listed a
/// million times) runs out of fuel instead of memory.
fn write_json(
    state: &State,
    v: &Value,
    style: &JsonStyle,
    level: usize,
    out: &mut String,
) -> Result<(), JinjaError> {
    if level > JSON_DEPTH {
        return Err(JinjaError::new(
            ErrorKind::InvalidOperation,
            format!("tojson nests deeper than {JSON_DEPTH} levels"),
        ));
    }
    let indent_bytes = style.indent.as_ref().map_or(0, |i| i.len() * (level + 1));
    let sep_bytes = style.item_sep.len() + style.key_sep.len();
    state.consume_fuel(1 + (indent_bytes + sep_bytes) as u64 / 64)?;
    match v.kind() {
        ValueKind::Undefined | ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
        ValueKind::Number if v.is_integer() => out.push_str(&v.to_string()),
        ValueKind::Number => {
            let f = f64::try_from(v.clone())?;
            if f.is_nan() {
                out.push_str("NaN");
            } else if f.is_infinite() {
                out.push_str(if f > 0.0 { "Infinity" } else { "-Infinity" });
            } else if f.fract() == 0.0 && f.abs() < 1e16 {
                out.push_str(&format!("{f:.1}"));
            } else {
                out.push_str(&format!("{f}"));
            }
        }
        ValueKind::String => write_json_str(state, v.as_str().unwrap_or_default(), style, out)?,
        ValueKind::Map => {
            let mut keys = collect_paid(state, v)?;
            if keys.is_empty() {
                out.push_str("{}");
                return Ok(());
            }
            if style.sort_keys {
                keys.sort();
            }
            out.push('{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push_str(&style.item_sep);
                }
                newline(style, level + 1, out);
                match k.as_str() {
                    Some(s) => write_json_str(state, s, style, out)?,
                    None => write_json_str(state, &k.to_string(), style, out)?,
                }
                out.push_str(&style.key_sep);
                write_json(state, &v.get_item(k)?, style, level + 1, out)?;
            }
            newline(style, level, out);
            out.push('}');
        }
        ValueKind::Seq | ValueKind::Iterable => {
            let items = collect_paid(state, v)?;
            if items.is_empty() {
                out.push_str("[]");
                return Ok(());
            }
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(&style.item_sep);
                }
                newline(style, level + 1, out);
                write_json(state, item, style, level + 1, out)?;
            }
            newline(style, level, out);
            out.push(']');
        }
        other => {
            return Err(JinjaError::new(
                ErrorKind::InvalidOperation,
                format!("tojson cannot serialise a value of kind {other}"),
            ))
        }
    }
    Ok(())
}

/// The items (or keys) of `v`, one fuel each, so an endless iterable runs out of fuel.
fn collect_paid(state: &State, v: &Value) -> Result<Vec<Value>, JinjaError> {
    let mut items = Vec::new();
    for item in v.try_iter()? {
        state.consume_fuel(1)?;
        items.push(item);
    }
    Ok(items)
}

fn write_json_str(
    state: &State,
    s: &str,
    style: &JsonStyle,
    out: &mut String,
) -> Result<(), JinjaError> {
    // An escape writes at most 12 bytes for a 4-byte char: pay for the worst case.
    state.consume_fuel((s.len() as u64).saturating_mul(3) / 64)?;
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || (style.ensure_ascii && !c.is_ascii()) => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    Ok(())
}

#[cfg(test)]
#[path = "chat_tests.rs"]
mod tests;

/// Marks around message text in a rendered conversation (two private-use
/// code points), so that the tokenizer can tell the template's text, whose
/// special-token texts become control tokens, from the messages' text,
/// which is plain text: a user who writes `<|im_end|>` writes characters,
/// not a turn boundary ([`split_marked`]).
pub const TEXT_OPEN: char = '\u{F8F0}';
pub const TEXT_CLOSE: char = '\u{F8F1}';

/// `s` with its leading and trailing whitespace left outside the marks (a
/// template's `trim` or `strip('\n')` still sees it) and any mark characters
/// in it removed.
pub fn mark_text(s: &str) -> String {
    let core = s.trim();
    if core.is_empty() {
        return s.to_string();
    }
    let start = s.len() - s.trim_start().len();
    let end = start + core.len();
    let clean: String = core
        .chars()
        .filter(|&c| c != TEXT_OPEN && c != TEXT_CLOSE)
        .collect();
    format!("{}{TEXT_OPEN}{clean}{TEXT_CLOSE}{}", &s[..start], &s[end..])
}

/// [`mark_text`] on every message text of OpenAI-style JSON messages: a
/// string `content`, the `text` of content parts, `reasoning_content`. With
/// `assistant` false, assistant messages are left alone.
pub fn mark_json_messages(messages: &mut serde_json::Value, assistant: bool) {
    let Some(list) = messages.as_array_mut() else {
        return;
    };
    for m in list {
        let Some(obj) = m.as_object_mut() else {
            continue;
        };
        if !assistant && obj.get("role").and_then(|r| r.as_str()) == Some("assistant") {
            continue;
        }
        for key in ["content", "reasoning_content"] {
            match obj.get_mut(key) {
                Some(serde_json::Value::String(s)) => *s = mark_text(s),
                Some(serde_json::Value::Array(parts)) => {
                    for p in parts {
                        if let Some(serde_json::Value::String(t)) = p.get_mut("text") {
                            *t = mark_text(t);
                        }
                    }
                }
                _ => {}
            }
        }
    }
}

/// [`mark_text`] on the messages' texts (assistant messages too when
/// `assistant`).
pub fn mark_messages(messages: &[ChatMessage], assistant: bool) -> Vec<ChatMessage> {
    messages
        .iter()
        .map(|m| {
            if !assistant && m.role == "assistant" {
                return m.clone();
            }
            ChatMessage {
                role: m.role.clone(),
                content: mark_text(&m.content),
                reasoning_content: m.reasoning_content.as_deref().map(mark_text),
            }
        })
        .collect()
}

/// A rendered, marked conversation as pieces `(text, from a message)`, in
/// order; `None` when the marks do not pair up (a template that cut a
/// message's text, as one that keeps only what follows `</think>`).
pub fn split_marked(s: &str) -> Option<Vec<(&str, bool)>> {
    let mut out = Vec::new();
    let mut rest = s;
    loop {
        match rest.find([TEXT_OPEN, TEXT_CLOSE]) {
            None => {
                out.push((rest, false));
                return Some(out);
            }
            Some(i) if rest[i..].starts_with(TEXT_CLOSE) => return None,
            Some(i) => {
                out.push((&rest[..i], false));
                let inner = &rest[i + TEXT_OPEN.len_utf8()..];
                let j = inner.find([TEXT_OPEN, TEXT_CLOSE])?;
                if !inner[j..].starts_with(TEXT_CLOSE) {
                    return None;
                }
                out.push((&inner[..j], true));
                rest = &inner[j + TEXT_CLOSE.len_utf8()..];
            }
        }
    }
}

/// `s` without the marks.
pub fn strip_marks(s: &str) -> String {
    s.chars()
        .filter(|&c| c != TEXT_OPEN && c != TEXT_CLOSE)
        .collect()
}

#[cfg(test)]
mod mark_tests {
    use super::*;

    #[test]
    fn marks_wrap_the_text_but_not_its_edge_whitespace_and_split_back() {
        let m = mark_text("\n hi <|x|> \n");
        assert_eq!(m, format!("\n {TEXT_OPEN}hi <|x|>{TEXT_CLOSE} \n"));
        assert_eq!(mark_text("  "), "  ");
        let r = format!("<a>{m}<b>{}", mark_text("yo"));
        let pieces = split_marked(&r).unwrap();
        assert_eq!(
            pieces,
            vec![
                ("<a>\n ", false),
                ("hi <|x|>", true),
                (" \n<b>", false),
                ("yo", true),
                ("", false)
            ]
        );
        assert_eq!(strip_marks(&r), "<a>\n hi <|x|> \n<b>yo");
        // A text cannot forge marks of its own.
        assert_eq!(
            mark_text(&format!("a{TEXT_CLOSE}b")),
            format!("{TEXT_OPEN}ab{TEXT_CLOSE}")
        );
    }

    #[test]
    fn marks_that_do_not_pair_up_are_refused() {
        assert!(split_marked(&format!("x{TEXT_CLOSE}")).is_none());
        assert!(split_marked(&format!("{TEXT_OPEN}x")).is_none());
        assert!(split_marked(&format!("{TEXT_OPEN}{TEXT_OPEN}x{TEXT_CLOSE}")).is_none());
    }
}
