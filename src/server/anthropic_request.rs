//! Anthropic's Messages request in OpenAI's words: `system`, `messages`
//! (text, `tool_use`, `tool_result` and earlier `thinking` blocks), `tools`
//! (`input_schema`), `tool_choice`, `stop_sequences` and the sampling
//! fields become the OpenAI chat request they mean, which then runs as one.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::api::ApiError;

/// The text of a string or of a list of `{"type": "text"}` blocks.
fn text_of(v: &Value, what: &str) -> Result<String, ApiError> {
    match v {
        Value::Null => Ok(String::new()),
        Value::String(s) => Ok(s.clone()),
        Value::Array(blocks) => {
            let mut out = String::new();
            for b in blocks {
                match (b.get("type").and_then(Value::as_str), b.get("text")) {
                    (Some("text"), Some(Value::String(t))) => out.push_str(t),
                    _ => {
                        return Err(ApiError::field(
                            "messages",
                            format!("{what}: only text blocks are supported here"),
                        ))
                    }
                }
            }
            Ok(out)
        }
        _ => Err(ApiError::field(
            "messages",
            format!("{what}: content must be a string or a list of blocks"),
        )),
    }
}

/// An OpenAI chat message, as the conversion writes it.
#[derive(Serialize)]
struct ChatMessage {
    role: &'static str,
    content: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<ToolCall>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_call_id: Option<String>,
}

impl ChatMessage {
    fn new(role: &'static str, content: String) -> ChatMessage {
        ChatMessage {
            role,
            content,
            tool_calls: Vec::new(),
            tool_call_id: None,
        }
    }
}

/// One of an assistant message's `tool_calls`.
#[derive(Serialize)]
struct ToolCall {
    id: String,
    #[serde(rename = "type")]
    kind: &'static str,
    function: CalledFunction,
}

#[derive(Serialize)]
struct CalledFunction {
    name: String,
    /// The input object as JSON text.
    arguments: String,
}

/// One of the request's `tools`.
#[derive(Serialize)]
struct Tool {
    #[serde(rename = "type")]
    kind: &'static str,
    function: ToolFunction,
}

#[derive(Serialize)]
struct ToolFunction {
    name: String,
    description: Value,
    parameters: Value,
}

/// OpenAI's `tool_choice`: a mode, or one named function.
#[derive(Serialize)]
#[serde(untagged)]
enum ToolChoice {
    Mode(&'static str),
    Named {
        #[serde(rename = "type")]
        kind: &'static str,
        function: Named,
    },
}

#[derive(Serialize)]
struct Named {
    name: String,
}

/// A typed piece of the chat request as JSON.
fn to_value(v: impl Serialize) -> Value {
    serde_json::to_value(v).unwrap_or_default()
}

/// An empty JSON object (a tool's input or schema when none is given).
fn empty_object() -> Value {
    Value::Object(Map::new())
}

/// One Anthropic message as OpenAI chat messages: text, the assistant's
/// `tool_use` blocks as `tool_calls`, the user's `tool_result` blocks as
/// `tool` messages (before the user's own text).
fn message(i: usize, m: &Value) -> Result<Vec<ChatMessage>, ApiError> {
    let what = format!("message {i}");
    let role = match m.get("role").and_then(Value::as_str) {
        Some("user") => "user",
        Some("assistant") => "assistant",
        _ => {
            return Err(ApiError::field(
                "messages",
                format!("{what}: 'role' must be \"user\" or \"assistant\""),
            ))
        }
    };
    let blocks = match m.get("content") {
        Some(Value::Array(b)) => b.clone(),
        Some(Value::String(c)) => return Ok(vec![ChatMessage::new(role, c.clone())]),
        _ => {
            return Err(ApiError::field(
                "messages",
                format!("{what}: content must be a string or a list of blocks"),
            ))
        }
    };
    let (mut text, mut calls, mut results) = (String::new(), Vec::new(), Vec::new());
    for b in &blocks {
        match b.get("type").and_then(Value::as_str) {
            Some("text") => match b.get("text") {
                Some(Value::String(t)) => text.push_str(t),
                _ => {
                    return Err(ApiError::field(
                        "messages",
                        format!("{what}: a text block needs a 'text' string"),
                    ))
                }
            },
            // Earlier reasoning is not sent back to the template.
            Some("thinking" | "redacted_thinking") => {}
            Some("tool_use") if role == "assistant" => {
                let (Some(id), Some(name)) = (
                    b.get("id").and_then(Value::as_str),
                    b.get("name").and_then(Value::as_str),
                ) else {
                    return Err(ApiError::field(
                        "messages",
                        format!("{what}: a tool_use block needs 'id' and 'name'"),
                    ));
                };
                let input = b.get("input").cloned().unwrap_or_else(empty_object);
                calls.push(ToolCall {
                    id: id.to_string(),
                    kind: "function",
                    function: CalledFunction {
                        name: name.to_string(),
                        arguments: input.to_string(),
                    },
                });
            }
            Some("tool_result") if role == "user" => {
                let Some(id) = b.get("tool_use_id").and_then(Value::as_str) else {
                    return Err(ApiError::field(
                        "messages",
                        format!("{what}: a tool_result block needs 'tool_use_id'"),
                    ));
                };
                let content = text_of(b.get("content").unwrap_or(&Value::Null), &what)?;
                results.push(ChatMessage {
                    tool_call_id: Some(id.to_string()),
                    ..ChatMessage::new("tool", content)
                });
            }
            _ => {
                return Err(ApiError::field(
                    "messages",
                    format!(
                        "{what}: unsupported content block {}",
                        b.get("type").unwrap_or(&Value::Null)
                    ),
                ))
            }
        }
    }
    let mut out = results;
    if !text.is_empty() || !calls.is_empty() || out.is_empty() {
        out.push(ChatMessage {
            tool_calls: calls,
            ..ChatMessage::new(role, text)
        });
    }
    Ok(out)
}

/// Anthropic's Messages request: the fields clover reads (others are
/// ignored). The sampling fields pass on to the chat request as they are,
/// and are checked there.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct MessagesRequest {
    system: Option<Value>,
    messages: Option<Value>,
    tools: Option<Value>,
    tool_choice: Option<Value>,
    stop_sequences: Option<Value>,
    max_tokens: Option<Value>,
    temperature: Option<Value>,
    top_p: Option<Value>,
    top_k: Option<Value>,
    stream: Option<Value>,
    model: Option<Value>,
}

/// The OpenAI chat request an Anthropic Messages request (a JSON object)
/// means.
#[cfg(test)]
pub(crate) fn to_chat(o: &Map<String, Value>) -> Result<Map<String, Value>, ApiError> {
    let r: MessagesRequest = serde_json::from_value(Value::Object(o.clone()))
        .map_err(|e| ApiError::bad(e.to_string()))?;
    r.into_chat()
}

impl MessagesRequest {
    /// The OpenAI chat request this means, as the chat request's body.
    pub(crate) fn into_chat(self) -> Result<Map<String, Value>, ApiError> {
        let Some(Value::Array(msgs)) = &self.messages else {
            return Err(ApiError::field(
                "messages",
                "'messages' must be a list of messages",
            ));
        };
        let mut messages = Vec::new();
        if let Some(s) = &self.system {
            let system = text_of(s, "system")?;
            if !system.is_empty() {
                messages.push(ChatMessage::new("system", system));
            }
        }
        for (i, m) in msgs.iter().enumerate() {
            messages.extend(message(i, m)?);
        }
        let mut out = Map::new();
        out.insert("messages".into(), to_value(messages));
        for (k, v) in [
            ("max_tokens", self.max_tokens),
            ("temperature", self.temperature),
            ("top_p", self.top_p),
            ("top_k", self.top_k),
            ("stream", self.stream),
            ("model", self.model),
            ("stop", self.stop_sequences),
        ] {
            if let Some(v) = v {
                out.insert(k.into(), v);
            }
        }
        match &self.tools {
            None | Some(Value::Null) => {}
            Some(Value::Array(tools)) => {
                let mut list = Vec::new();
                for t in tools {
                    let Some(name) = t.get("name").and_then(Value::as_str) else {
                        return Err(ApiError::field("tools", "every tool needs a 'name'"));
                    };
                    list.push(Tool {
                        kind: "function",
                        function: ToolFunction {
                            name: name.to_string(),
                            description: t.get("description").cloned().unwrap_or(Value::Null),
                            parameters: t.get("input_schema").cloned().unwrap_or_else(empty_object),
                        },
                    });
                }
                out.insert("tools".into(), to_value(list));
            }
            Some(_) => return Err(ApiError::field("tools", "'tools' must be a list")),
        }
        // Anthropic's tool_choice in OpenAI's words.
        match &self.tool_choice {
            None | Some(Value::Null) => {}
            Some(c) => {
                let bad = || {
                    ApiError::field(
                        "tool_choice",
                        "'tool_choice' must be {\"type\": \"auto\"}, {\"type\": \"any\"}, \
                         {\"type\": \"tool\", \"name\": …} or {\"type\": \"none\"}",
                    )
                };
                let choice = match c.get("type").and_then(Value::as_str) {
                    Some("auto") => ToolChoice::Mode("auto"),
                    Some("any") => ToolChoice::Mode("required"),
                    Some("none") => ToolChoice::Mode("none"),
                    Some("tool") => {
                        let name = c.get("name").and_then(Value::as_str).ok_or_else(bad)?;
                        ToolChoice::Named {
                            kind: "function",
                            function: Named {
                                name: name.to_string(),
                            },
                        }
                    }
                    _ => return Err(bad()),
                };
                out.insert("tool_choice".into(), to_value(choice));
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_messages_request_becomes_the_chat_request_it_means() {
        let o = json!({
            "model": "m", "max_tokens": 64, "system": [{"type": "text", "text": "Be brief."}],
            "stop_sequences": ["\n\n"], "temperature": 0.2,
            "tools": [{"name": "get_verse", "description": "Look up", "input_schema": {"type": "object"}}],
            "messages": [
                {"role": "user", "content": "Find John 1:5."},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "hm", "signature": ""},
                    {"type": "text", "text": "Looking."},
                    {"type": "tool_use", "id": "t1", "name": "get_verse", "input": {"ref": "John 1:5"}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "And the light"}]},
                    {"type": "text", "text": "Thanks."}]},
            ],
        });
        let c = Value::Object(to_chat(o.as_object().unwrap()).unwrap());
        let m = c["messages"].as_array().unwrap();
        assert_eq!(m.len(), 5, "{c}");
        assert_eq!(m[0], json!({"role": "system", "content": "Be brief."}));
        assert_eq!(m[2]["content"], "Looking.");
        let call = &m[2]["tool_calls"][0];
        assert_eq!(
            (call["id"].as_str(), call["function"]["name"].as_str()),
            (Some("t1"), Some("get_verse"))
        );
        let args: Value =
            serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
        assert_eq!(args, json!({"ref": "John 1:5"}));
        assert_eq!(
            m[3],
            json!({"role": "tool", "tool_call_id": "t1", "content": "And the light"})
        );
        assert_eq!(m[4], json!({"role": "user", "content": "Thanks."}));
        assert_eq!(c["stop"], json!(["\n\n"]));
        assert_eq!(
            c["tools"][0]["function"]["parameters"],
            json!({"type": "object"})
        );
        assert_eq!(
            (c["max_tokens"].as_u64(), c["temperature"].as_f64()),
            (Some(64), Some(0.2))
        );

        for bad in [
            json!({"messages": [{"role": "system", "content": "x"}]}),
            json!({"messages": [{"role": "user", "content": [{"type": "image"}]}]}),
            json!({"messages": [{"role": "user", "content": [{"type": "tool_use", "id": "a", "name": "b"}]}]}),
            json!({"messages": "hi"}),
        ] {
            let e = to_chat(bad.as_object().unwrap()).unwrap_err();
            assert_eq!(e.status, 400, "{bad}");
        }
    }
}
