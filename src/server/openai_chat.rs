//! OpenAI's `POST /v1/chat/completions`: the messages rendered with the
//! chat template; the reply is a `chat.completion` (content, reasoning,
//! tool calls, log-probabilities) or a stream of `chat.completion.chunk`s
//! ([`super::stream`]).

use axum::body::Body;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::Value;

use super::app::{now_secs, AppState};
use super::done::{Timings, Usage};
use super::generate::{generate, Collected, Whole};
use super::logprobs::chat_logprobs;
use super::request::Kind;

pub(crate) async fn handle(
    axum::extract::State(app): AppState,
    headers: HeaderMap,
    body: Body,
) -> Response {
    generate(app, Kind::Chat, headers, body).await
}

/// A `chat.completion`.
#[derive(Serialize)]
struct ChatCompletion {
    id: String,
    object: &'static str,
    created: u64,
    model: String,
    choices: Vec<Choice>,
    usage: Usage,
    timings: Timings,
}

#[derive(Serialize)]
struct Choice {
    index: usize,
    message: Message,
    logprobs: Value,
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
    let logprobs = match w.p.logprobs {
        Some(_) => chat_logprobs(&w.model.tokenizer, &c.logprobs),
        None => Value::Null,
    };
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
pub(crate) fn response(id: String, model: String, mut w: Whole<'_>) -> Response {
    let usage = w.total().usage();
    let timings = w.choices[0].done.timings();
    let collected = std::mem::take(&mut w.choices);
    let choices = collected
        .into_iter()
        .enumerate()
        .map(|(i, c)| choice(&w, i, c))
        .collect();
    axum::Json(ChatCompletion {
        id,
        object: "chat.completion",
        created: now_secs(),
        model,
        choices,
        usage,
        timings,
    })
    .into_response()
}
