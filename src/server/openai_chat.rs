//! OpenAI's `POST /v1/chat/completions`: the messages rendered with the
//! chat template; the reply is a `chat.completion` (content, reasoning,
//! tool calls, log-probabilities) or a stream of `chat.completion.chunk`s
//! ([`super::stream`]).

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::api::{self, ApiError};
use super::app::{App, AppState, Ready};
use super::fields::{parse, Field, Int};
use super::generate::{generate, Collected, Reply, Whole};
use super::logprobs::{chat_logprobs, ChatLogprobs};
use super::request::Kind;
use super::request::{chat_prompt, check, finish, ChatFields, Parts, Prepared};
use super::sampling::Sampling;

pub(crate) async fn handle(State(app): AppState, headers: HeaderMap, body: Body) -> Response {
    let reply = Reply::new(Kind::Chat, prepare, response);
    generate(app, reply, headers, body).await
}

/// A chat request: the shared fields, the messages and tools, and chat's
/// log-probabilities (`logprobs`: a boolean, `top_logprobs`: 0–20).
#[derive(Deserialize, Default)]
#[serde(default)]
pub(crate) struct ChatRequest {
    #[serde(flatten)]
    sampling: Sampling,
    #[serde(flatten)]
    chat: ChatFields,
    logprobs: Field<bool>,
    top_logprobs: Field<Int>,
}

impl ChatRequest {
    /// The internal request (`kind`: chat, or the Anthropic request that
    /// became this one).
    pub(crate) fn prepare(self, app: &App, r: &Ready, kind: Kind) -> Result<Prepared, ApiError> {
        let (logprobs, top) = (self.logprobs, self.top_logprobs);
        let (checked, logprobs) = check(r, &self.sampling, || api::chat_logprobs(logprobs, top))?;
        let p = chat_prompt(app, r, &self.chat)?;
        let parts = Parts {
            kind,
            prompts: vec![p.ids],
            texts: vec![p.text],
            echo: false,
            starts_thinking: p.starts_thinking,
            tools: p.tools,
            logprobs,
            tool_call: p.tool_call,
        };
        finish(app, checked, parts)
    }
}

fn prepare(app: &App, r: &Ready, body: &[u8]) -> Result<Prepared, ApiError> {
    parse::<ChatRequest>(body)?.prepare(app, r, Kind::Chat)
}

/// A `chat.completion`.

#[derive(Serialize)]
struct Choice {
    index: usize,
    message: Message,
    logprobs: Option<ChatLogprobs>,
    finish_reason: &'static str,
}

#[derive(Serialize)]
struct Message {
    role: &'static str,
    content: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_calls: Option<Vec<Value>>,
}

fn choice(w: &Whole<'_>, index: usize, c: Collected) -> Choice {
    let logprobs =
        w.p.logprobs
            .map(|_| chat_logprobs(&w.model.tokenizer, &c.logprobs));
    Choice {
        index,
        message: Message {
            role: "assistant",
            content: c.content,
            reasoning_content: (!c.reasoning.is_empty()).then_some(c.reasoning),
            tool_calls: (!c.calls.is_empty()).then_some(c.calls),
        },
        logprobs,
        finish_reason: c.finish,
    }
}

/// The whole response: every choice, usage summed over them, the first's
/// `timings`.
pub(crate) fn response(id: String, model: String, w: Whole<'_>) -> Response {
    w.openai([id, model], "chat.completion", choice)
}
