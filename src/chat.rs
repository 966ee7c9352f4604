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

use minijinja::syntax::SyntaxConfig;
use minijinja::value::{Kwargs, ValueKind};
use minijinja::{Environment, Error as JinjaError, ErrorKind, Value};
use thiserror::Error;

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

#[derive(Debug, Error)]
pub enum ChatError {
    #[error("chat template does not compile: {0}")]
    Syntax(String),
    #[error("chat template failed: {0}")]
    Render(String),
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
        minijinja_contrib::add_to_environment(&mut env);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_filter("tojson", tojson);
        env.add_global("bos_token", bos_token.to_owned());
        env.add_global("eos_token", eos_token.to_owned());
        env.add_template_owned(TEMPLATE_NAME, source.to_owned())
            .map_err(|e| ChatError::Syntax(describe(&e)))?;
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
        let tmpl = self
            .env
            .get_template(TEMPLATE_NAME)
            .map_err(|e| ChatError::Render(describe(&e)))?;
        let mut ctx = vec![
            (
                "messages",
                Value::from(
                    messages
                        .iter()
                        .map(ChatMessage::to_value)
                        .collect::<Vec<_>>(),
                ),
            ),
            ("add_generation_prompt", Value::from(add_generation_prompt)),
        ];
        if let Some(t) = enable_thinking {
            ctx.push(("enable_thinking", Value::from(t)));
        }
        tmpl.render(Value::from_pairs(ctx))
            .map_err(|e| ChatError::Render(describe(&e)))
    }
}

fn raise_exception(message: String) -> Result<Value, JinjaError> {
    Err(JinjaError::new(ErrorKind::InvalidOperation, message))
}

/// Python `json.dumps` options the filter honours.
struct JsonStyle {
    indent: Option<String>,
    sort_keys: bool,
    ensure_ascii: bool,
    item_sep: String,
    key_sep: String,
}

fn tojson(value: &Value, kwargs: Kwargs) -> Result<Value, JinjaError> {
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
            None => " ".repeat(usize::try_from(v)?),
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
    write_json(value, &style, 0, &mut out)?;
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

fn write_json(
    v: &Value,
    style: &JsonStyle,
    level: usize,
    out: &mut String,
) -> Result<(), JinjaError> {
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
        ValueKind::String => write_json_str(v.as_str().unwrap_or_default(), style, out),
        ValueKind::Map => {
            let mut keys: Vec<Value> = v.try_iter()?.collect();
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
                    Some(s) => write_json_str(s, style, out),
                    None => write_json_str(&k.to_string(), style, out),
                }
                out.push_str(&style.key_sep);
                write_json(&v.get_item(k)?, style, level + 1, out)?;
            }
            newline(style, level, out);
            out.push('}');
        }
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = v.try_iter()?.collect();
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
                write_json(item, style, level + 1, out)?;
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

fn write_json_str(s: &str, style: &JsonStyle, out: &mut String) {
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
}

#[cfg(test)]
#[path = "chat_tests.rs"]
mod tests;
