//! Anthropic's Messages API, as llama-server also serves it:
//! `POST /v1/messages` and `POST /v1/messages/count_tokens`. A request is
//! rewritten into the OpenAI chat request it means
//! ([`super::anthropic_request`]) and runs as one; the reply is rendered as
//! Anthropic's message object, or its event stream. Errors are Anthropic's
//! error object ([`super::error::Dialect::Anthropic`]).

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::Event;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::{Map, Value};

use super::api::{self, ApiError};
use super::app::{authorize, check_text_size, off_runtime, read_body, ready, App, AppState, Ready};
use super::error::{shutting_down, Dialect};
use super::fields::parse;
use super::generate::{generate, Reply, Whole};
use super::openai_chat::ChatRequest;
use super::parts::Part;
use super::request::{message_text_bytes, ChatFields, Kind, Prepared};
use super::slots::Msg;
use super::stream::{sse, Streaming};

use super::anthropic_request::MessagesRequest;

/// `POST /v1/messages`.
pub(crate) async fn messages(State(app): AppState, headers: HeaderMap, body: Body) -> Response {
    let reply = Reply {
        stream: Some(stream),
        ..Reply::new(Kind::Anthropic, prepare, response)
    };
    generate(app, reply, headers, body).await
}

/// The Messages request, rewritten into the chat request it means, then
/// checked and rendered as one.
fn prepare(app: &App, r: &Ready, body: &[u8]) -> Result<Prepared, ApiError> {
    let chat = parse::<MessagesRequest>(body)?.into_chat()?;
    let chat: ChatRequest =
        serde_json::from_value(Value::Object(chat)).map_err(|e| ApiError::bad(e.to_string()))?;
    chat.prepare(app, r, Kind::Anthropic)
}

/// A `message` (whole, or empty in `message_start`).
#[derive(Serialize)]
struct Message {
    id: String,
    #[serde(rename = "type")]
    kind: &'static str,
    role: &'static str,
    model: String,
    content: Vec<Block>,
    stop_reason: Option<&'static str>,
    stop_sequence: Value,
    usage: MessageUsage,
}

#[derive(Serialize)]
struct MessageUsage {
    input_tokens: usize,
    output_tokens: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    cache_read_input_tokens: Option<usize>,
}

/// A content block.
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Block {
    Thinking {
        thinking: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        signature: Option<String>,
    },
    Text {
        text: String,
    },
    ToolUse {
        id: Value,
        name: Value,
        input: Value,
    },
}

/// A content block's delta.
#[derive(Serialize)]
#[serde(tag = "type")]
enum BlockDelta {
    #[serde(rename = "text_delta")]
    Text { text: String },
    #[serde(rename = "thinking_delta")]
    Thinking { thinking: String },
    #[serde(rename = "input_json_delta")]
    InputJson { partial_json: String },
}

/// One event of the Messages stream (its `type` is also the event's name).
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum StreamEvent {
    MessageStart {
        message: Message,
    },
    ContentBlockStart {
        index: usize,
        content_block: Block,
    },
    ContentBlockDelta {
        index: usize,
        delta: BlockDelta,
    },
    ContentBlockStop {
        index: usize,
    },
    MessageDelta {
        delta: StopDelta,
        usage: OutputUsage,
    },
    MessageStop,
}

#[derive(Serialize)]
struct StopDelta {
    stop_reason: &'static str,
    stop_sequence: Value,
}

#[derive(Serialize)]
struct OutputUsage {
    output_tokens: usize,
}

impl StreamEvent {
    fn name(&self) -> &'static str {
        match self {
            StreamEvent::MessageStart { .. } => "message_start",
            StreamEvent::ContentBlockStart { .. } => "content_block_start",
            StreamEvent::ContentBlockDelta { .. } => "content_block_delta",
            StreamEvent::ContentBlockStop { .. } => "content_block_stop",
            StreamEvent::MessageDelta { .. } => "message_delta",
            StreamEvent::MessageStop => "message_stop",
        }
    }
}

/// The whole reply: its blocks (thinking, text, tool uses), why it stopped,
/// the usage.
pub(crate) fn response(id: String, model: String, mut w: Whole<'_>) -> Response {
    let c = w.choices.remove(0);
    let mut blocks = Vec::new();
    if !c.reasoning.is_empty() {
        blocks.push(Block::Thinking {
            thinking: c.reasoning,
            signature: Some(String::new()),
        });
    }
    if !c.content.is_empty() || c.calls.is_empty() {
        blocks.push(Block::Text { text: c.content });
    }
    blocks.extend(c.calls.iter().map(tool_use_block));
    let word = c.done.stopping_word.as_deref();
    let (reason, seq) = stop(!c.calls.is_empty(), c.done.length, word);
    axum::Json(Message {
        id,
        kind: "message",
        role: "assistant",
        model,
        content: blocks,
        stop_reason: Some(reason),
        stop_sequence: seq,
        usage: MessageUsage {
            input_tokens: c.done.prompt_n,
            output_tokens: c.done.predicted_n,
            cache_read_input_tokens: Some(c.done.cached_n),
        },
    })
    .into_response()
}

/// Anthropic's error object.
fn error_body(e: ApiError) -> Value {
    e.in_dialect(Dialect::Anthropic).body()
}

/// An OpenAI tool call (`text::tool_call_json`) as a `tool_use` block.
fn tool_use_block(call: &Value) -> Block {
    let f = &call["function"];
    let input = f["arguments"]
        .as_str()
        .and_then(|a| serde_json::from_str::<Value>(a).ok())
        .filter(Value::is_object)
        .unwrap_or_else(|| Value::Object(Map::new()));
    Block::ToolUse {
        id: call["id"].clone(),
        name: f["name"].clone(),
        input,
    }
}

/// [`tool_use_block`] as JSON.
pub fn tool_use(call: &Value) -> Value {
    serde_json::to_value(tool_use_block(call)).unwrap_or_default()
}

/// `stop_reason` and `stop_sequence` of a finished reply.
pub fn stop(tool_calls: bool, length: bool, word: Option<&str>) -> (&'static str, Value) {
    match (tool_calls, length, word) {
        (true, _, _) => ("tool_use", Value::Null),
        (false, true, _) => ("max_tokens", Value::Null),
        (false, false, Some(w)) => ("stop_sequence", Value::from(w)),
        (false, false, None) => ("end_turn", Value::Null),
    }
}

/// The Messages API's content-block events for one piece of a reply:
/// `open` is the open block (index, type), `next` the next block's index.
fn block_events(
    part: Part,
    open: &mut Option<(usize, &'static str)>,
    next: &mut usize,
) -> Vec<StreamEvent> {
    let mut ev = Vec::new();
    let close = |open: &mut Option<(usize, &'static str)>, ev: &mut Vec<_>| {
        if let Some((index, _)) = open.take() {
            ev.push(StreamEvent::ContentBlockStop { index });
        }
    };
    let (kind, delta) = match part {
        Part::Content(t, _) if t.is_empty() => return ev,
        Part::Content(text, _) => ("text", BlockDelta::Text { text }),
        Part::Reasoning(t) if t.is_empty() => return ev,
        Part::Reasoning(thinking) => ("thinking", BlockDelta::Thinking { thinking }),
        Part::Call(c) => {
            close(open, &mut ev);
            let Block::ToolUse { id, name, input } = tool_use_block(&c) else {
                unreachable!("a tool call is a tool_use block")
            };
            let index = *next;
            *next += 1;
            let content_block = Block::ToolUse {
                id,
                name,
                input: Value::Object(Map::new()),
            };
            ev.push(StreamEvent::ContentBlockStart {
                index,
                content_block,
            });
            let partial_json = input.to_string();
            ev.push(StreamEvent::ContentBlockDelta {
                index,
                delta: BlockDelta::InputJson { partial_json },
            });
            ev.push(StreamEvent::ContentBlockStop { index });
            return ev;
        }
    };
    if open.is_none_or(|(_, k)| k != kind) {
        close(open, &mut ev);
        let content_block = match kind {
            "text" => Block::Text {
                text: String::new(),
            },
            _ => Block::Thinking {
                thinking: String::new(),
                signature: None,
            },
        };
        ev.push(StreamEvent::ContentBlockStart {
            index: *next,
            content_block,
        });
        *open = Some((*next, kind));
        *next += 1;
    }
    let index = open.map_or(0, |(i, _)| i);
    ev.push(StreamEvent::ContentBlockDelta { index, delta });
    ev
}

/// The Messages API's event stream: `message_start`, content blocks
/// (`content_block_start`, deltas, `content_block_stop`), `message_delta`
/// with the stop reason and usage, `message_stop`.
pub(crate) fn stream(s: Streaming) -> Response {
    let model = s.app.cfg.model_name.clone();
    let input_tokens = s.p.prompts[0].len();
    let (mut rx, mut asm, id) = (s.rx, s.asm, s.id);
    sse(move |tx| async move {
        let send = |name: &'static str, v: Value| {
            let tx = tx.clone();
            async move {
                tx.send(Event::default().event(name).data(v.to_string()))
                    .await
            }
        };
        let event = |e: StreamEvent| (e.name(), serde_json::to_value(&e).unwrap_or_default());
        let start = StreamEvent::MessageStart {
            message: Message {
                id,
                kind: "message",
                role: "assistant",
                model,
                content: Vec::new(),
                stop_reason: None,
                stop_sequence: Value::Null,
                usage: MessageUsage {
                    input_tokens,
                    output_tokens: 0,
                    cache_read_input_tokens: None,
                },
            },
        };
        let (name, v) = event(start);
        if !send(name, v).await {
            return;
        }
        let (mut open, mut next) = (None, 0);
        let done = loop {
            let parts = match rx.recv().await {
                Some(Msg::Text {
                    text,
                    thinking,
                    logprobs,
                }) => asm.text(text, thinking, logprobs),
                Some(Msg::Scored(_) | Msg::Started) => continue,
                Some(Msg::Shutdown) => {
                    let _ = send("error", error_body(shutting_down())).await;
                    return;
                }
                Some(Msg::Done(d)) => break d,
                Some(Msg::Error(e)) => {
                    let _ = send("error", error_body(ApiError::status(500, e))).await;
                    return;
                }
                None => return,
            };
            for part in parts {
                for e in block_events(part, &mut open, &mut next) {
                    let (name, v) = event(e);
                    if !send(name, v).await {
                        return;
                    }
                }
            }
        };
        let mut tail = Vec::new();
        for part in asm.finish() {
            tail.extend(block_events(part, &mut open, &mut next));
        }
        if let Some((index, _)) = open {
            tail.push(StreamEvent::ContentBlockStop { index });
        }
        let word = done.stopping_word.as_deref();
        let (stop_reason, stop_sequence) = stop(asm.n_calls > 0, done.length, word);
        tail.push(StreamEvent::MessageDelta {
            delta: StopDelta {
                stop_reason,
                stop_sequence,
            },
            usage: OutputUsage {
                output_tokens: done.predicted_n,
            },
        });
        tail.push(StreamEvent::MessageStop);
        for (name, v) in tail.into_iter().map(event) {
            if !send(name, v).await {
                return;
            }
        }
    })
}

/// Anthropic's `POST /v1/messages/count_tokens`: the prompt tokens the
/// request would take (`{"input_tokens": n}`).
pub(crate) async fn count_tokens(State(app): AppState, headers: HeaderMap, body: Body) -> Response {
    let result = async {
        authorize(&app, &headers)?;
        ready(&app)?;
        let bytes = read_body(&app, body).await?;
        let worker = Arc::clone(&app);
        off_runtime(move || {
            let app = &*worker;
            let r = ready(app)?;
            let o = parse::<MessagesRequest>(&bytes)?.into_chat()?;
            let c: ChatFields = serde_json::from_value(Value::Object(o))
                .map_err(|e| ApiError::bad(e.to_string()))?;
            let messages = api::messages(c.messages.as_ref())?;
            let tools = api::tools(c.tools.as_ref())?;
            check_text_size(app, r, message_text_bytes(&messages))?;
            let (_, ids) = r
                .model
                .chat_prompt_json(&messages, tools.as_ref(), true)
                .map_err(|e| ApiError::bad(format!("chat template: {e}")))?;
            Ok(TokenCount {
                input_tokens: ids.len(),
            })
        })
        .await
    }
    .await;
    match result {
        Ok(v) => axum::Json(v).into_response(),
        Err(e) => e.in_dialect(Dialect::Anthropic).into_response(),
    }
}

/// `count_tokens`' answer.
#[derive(Serialize)]
struct TokenCount {
    input_tokens: usize,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tool_calls_become_tool_use_blocks_and_stop_reasons_follow_the_end() {
        let call = super::super::text::tool_call_json("x", 0, "get_verse", r#"{"ref":"Gen 1:1"}"#);
        let b = tool_use(&call);
        assert_eq!(b["input"], json!({"ref": "Gen 1:1"}));
        assert_eq!(
            (b["type"].as_str(), b["name"].as_str()),
            (Some("tool_use"), Some("get_verse"))
        );
        let broken = super::super::text::tool_call_json("x", 1, "f", "not json");
        assert_eq!(tool_use(&broken)["input"], json!({}));
        assert_eq!(stop(true, true, None).0, "tool_use");
        assert_eq!(stop(false, true, Some("w")).0, "max_tokens");
        assert_eq!(stop(false, false, Some("w")), ("stop_sequence", json!("w")));
        assert_eq!(stop(false, false, None).0, "end_turn");
    }
}
