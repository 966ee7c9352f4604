//! OpenAI's `POST /v1/completions`: raw prompts (text, token ids, or a list
//! of up to 64 of either, one choice each), `echo` (the prompt scored with
//! `logprobs`); the reply is a `text_completion` with the legacy
//! log-probability arrays, or its stream ([`super::stream`]).

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
use super::logprobs::{completion_logprobs, echoed_logprobs, LegacyLogprobs};
use super::request::{raw_request, Kind, Prepared};
use super::sampling::Sampling;

pub(crate) async fn handle(State(app): AppState, headers: HeaderMap, body: Body) -> Response {
    let reply = Reply::new(Kind::Completion, prepare, response);
    generate(app, reply, headers, body).await
}

/// A completions request: the shared fields, `prompt`, `echo` and the
/// legacy `logprobs` (an integer, 0–20 alternatives).
#[derive(Deserialize, Default)]
#[serde(default)]
struct CompletionRequest {
    #[serde(flatten)]
    sampling: Sampling,
    prompt: Option<Value>,
    echo: Field<bool>,
    logprobs: Field<Int>,
}

fn prepare(app: &App, r: &Ready, body: &[u8]) -> Result<Prepared, ApiError> {
    let q: CompletionRequest = parse(body)?;
    let (lp, echo) = (q.logprobs, q.echo);
    let logprobs = || api::completion_logprobs(lp);
    let echo = || Ok(echo.get("echo", "a boolean")?.unwrap_or(false));
    let kind = Kind::Completion;
    raw_request(app, r, kind, &q.sampling, q.prompt.as_ref(), logprobs, echo)
}

/// A `text_completion`.

#[derive(Serialize)]
struct Choice {
    index: usize,
    text: String,
    logprobs: Option<LegacyLogprobs>,
    finish_reason: &'static str,
}

fn choice(w: &Whole<'_>, index: usize, c: Collected) -> Choice {
    let p = w.p;
    let tok = &w.model.tokenizer;
    let echoed = p.echo.then(|| p.texts[index].as_str());
    let mut offset = 0;
    let mut logprobs = None;
    if p.logprobs.is_some() {
        let mut v = match echoed {
            Some(_) => echoed_logprobs(tok, &p.prompts[index], c.scored.as_deref(), &mut offset),
            None => LegacyLogprobs::default(),
        };
        v.extend(completion_logprobs(tok, &c.logprobs, &mut offset));
        logprobs = Some(v);
    }
    Choice {
        index,
        text: format!("{}{}", echoed.unwrap_or(""), c.content),
        logprobs,
        finish_reason: c.finish,
    }
}

/// The whole response: every choice, usage summed over them, the first's
/// `timings`.
pub(crate) fn response(id: String, model: String, w: Whole<'_>) -> Response {
    w.openai([id, model], "text_completion", choice)
}
