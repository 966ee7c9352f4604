//! Server-sent events for OpenAI's chat and completions (one chunk per
//! piece of text, the finish, the usage when asked, `[DONE]`) and
//! llama-server's own `/completion` stream (bare objects, then the final
//! result). Anthropic's events are [`super::anthropic::stream`]'s.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;

use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::Value;
use tokio::sync::mpsc;

use crate::engine::LoadedModel;
use crate::sample::TokenLogprob;

use super::api::ApiError;
use super::app::{now_secs, App, STREAM_BUFFER};
use super::done::{Done, Timings, Usage};
use super::error::shutting_down;
use super::logprobs::{
    chat_logprobs, completion_logprobs, echoed_logprobs, native_probs, ChatLogprobs,
    LegacyLogprobs, TokenEntry,
};
use super::parts::{Assembler, Part};
use super::request::{Kind, Prepared};
use super::slots::Msg;

/// What an event stream starts from: the request, its slot's messages, the
/// assembler of its parts and the reply's id.
pub(crate) struct Streaming {
    pub app: Arc<App>,
    pub p: Prepared,
    pub rx: mpsc::Receiver<Msg>,
    pub asm: Assembler,
    pub id: String,
}

/// Where a stream's task sends its events.
#[derive(Clone)]
pub(crate) struct Events(mpsc::Sender<Result<Event, Infallible>>);

impl Events {
    /// Sends `e`; `false` once the client has gone.
    pub(crate) async fn send(&self, e: Event) -> bool {
        self.0.send(Ok(e)).await.is_ok()
    }
}

/// A server-sent-event response, fed by the task `feed` makes.
pub(crate) fn sse<F>(feed: impl FnOnce(Events) -> F) -> Response
where
    F: Future<Output = ()> + Send + 'static,
{
    let (tx, out) = mpsc::channel(STREAM_BUFFER);
    tokio::spawn(feed(Events(tx)));
    Sse::new(tokio_stream::wrappers::ReceiverStream::new(out)).into_response()
}

/// A typed piece as JSON.
fn to_value(v: impl Serialize) -> Value {
    serde_json::to_value(v).unwrap_or_default()
}

/// An OpenAI stream chunk: one choice (none in the usage chunk), the
/// `timings` on the last, the `usage` on the usage chunk.
#[derive(Serialize)]
struct Chunk<'a> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    choices: Vec<ChunkChoice>,
    #[serde(skip_serializing_if = "Option::is_none")]
    timings: Option<Timings>,
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<Usage>,
}

/// A chunk's choice: chat's delta or a completion's text.
#[derive(Serialize)]
#[serde(untagged)]
enum ChunkChoice {
    Chat {
        index: usize,
        delta: Delta,
        /// Absent, `null`, or the content's log-probabilities.
        #[serde(skip_serializing_if = "Option::is_none")]
        logprobs: Option<Option<ChatLogprobs>>,
        finish_reason: Option<&'static str>,
    },
    Text {
        index: usize,
        text: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        logprobs: Option<Option<LegacyLogprobs>>,
        finish_reason: Option<&'static str>,
    },
}

/// What a chat chunk adds to the message.
#[derive(Default, Serialize)]
struct Delta {
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_calls: Option<Vec<Value>>,
}

/// One piece of llama-server's own stream.
#[derive(Serialize)]
struct NativePiece {
    index: usize,
    content: String,
    tokens: [u32; 0],
    stop: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    completion_probabilities: Option<Vec<TokenEntry>>,
}

fn chat(
    delta: Delta,
    logprobs: Option<Option<ChatLogprobs>>,
    finish: Option<&'static str>,
) -> ChunkChoice {
    ChunkChoice::Chat {
        index: 0,
        delta,
        logprobs,
        finish_reason: finish,
    }
}

fn text(
    text: String,
    logprobs: Option<Option<LegacyLogprobs>>,
    finish: Option<&'static str>,
) -> ChunkChoice {
    ChunkChoice::Text {
        index: 0,
        text,
        logprobs,
        finish_reason: finish,
    }
}

fn native(content: String, probs: Option<Vec<TokenEntry>>) -> NativePiece {
    NativePiece {
        index: 0,
        content,
        tokens: [],
        stop: false,
        completion_probabilities: probs,
    }
}

/// A streaming response: server-sent events, one chunk per piece of text,
/// a final chunk with the finish reason, the usage chunk when asked, then
/// `[DONE]`. A client that goes away drops the stream, which drops the
/// slot's receiver: the slot stops at its next token.
pub(crate) fn stream(
    s: Streaming,
    loaded: Arc<LoadedModel>,
    last: Option<fn(&Prepared, &Done) -> Value>,
) -> Response {
    let Streaming {
        app,
        p,
        mut rx,
        mut asm,
        id,
    } = s;
    let created = now_secs();
    let model = app.cfg.model_name.clone();
    let kind = p.kind;
    let include_usage = p.common.include_usage;
    let (chunk_id, chunk_model) = (id.clone(), model.clone());
    let chunk = move |choice: ChunkChoice| -> Value {
        let object = match kind {
            // (Anthropic streams through `anthropic::stream`.)
            Kind::Chat | Kind::Anthropic | Kind::Native => "chat.completion.chunk",
            Kind::Completion => "text_completion",
        };
        to_value(Chunk {
            id: &chunk_id,
            object,
            created,
            model: &chunk_model,
            choices: vec![choice],
            timings: None,
            usage: None,
        })
    };
    let want_logprobs = p.logprobs.is_some();
    let echo = p.echo.then(|| (p.texts[0].clone(), p.prompts[0].clone()));
    let tok_model = Arc::clone(&loaded);
    // Each piece as its chunk (llama-server's own stream: the bare object).
    let piece_chunk = chunk.clone();
    let piece = move |part: Part, offset: &mut usize| -> Value {
        let chunk = &piece_chunk;
        let tok = &loaded.tokenizer;
        let lp = |on: bool| on.then_some(());
        match (kind, part) {
            (Kind::Chat | Kind::Anthropic, Part::Content(t, l)) => {
                let lps = lp(want_logprobs).map(|_| chat_logprobs(tok, &l));
                let delta = Delta {
                    content: Some(t),
                    ..Delta::default()
                };
                chunk(chat(delta, Some(lps), None))
            }
            (Kind::Chat | Kind::Anthropic, Part::Reasoning(t)) => {
                let delta = Delta {
                    reasoning_content: Some(t),
                    ..Delta::default()
                };
                chunk(chat(delta, None, None))
            }
            (Kind::Chat | Kind::Anthropic, Part::Call(c)) => {
                let delta = Delta {
                    tool_calls: Some(vec![c]),
                    ..Delta::default()
                };
                chunk(chat(delta, None, None))
            }
            (Kind::Completion, Part::Content(t, l)) => {
                let lps = lp(want_logprobs).map(|_| completion_logprobs(tok, &l, offset));
                chunk(text(t, Some(lps), None))
            }
            (Kind::Completion, Part::Reasoning(t)) => chunk(text(t, Some(None), None)),
            (Kind::Completion, Part::Call(_)) => chunk(text(String::new(), None, None)),
            (Kind::Native, Part::Content(t, l)) => {
                let probs = lp(want_logprobs).map(|_| native_probs(tok, &l));
                to_value(native(t, probs))
            }
            (Kind::Native, Part::Reasoning(t)) => to_value(native(t, None)),
            (Kind::Native, Part::Call(_)) => to_value(native(String::new(), None)),
        }
    };
    sse(move |tx| async move {
        let send = |v: Value| {
            let tx = tx.clone();
            async move { tx.send(Event::default().data(v.to_string())).await }
        };
        if kind == Kind::Chat {
            let delta = Delta {
                role: Some("assistant"),
                content: Some(String::new()),
                ..Delta::default()
            };
            if !send(chunk(chat(delta, None, None))).await {
                return;
            }
        }
        let mut offset = 0;
        // The echoed prompt comes first: at once, or with its scores.
        let echo_chunk = |scored: Option<&[TokenLogprob]>, offset: &mut usize| {
            let (text, ids) = echo.as_ref()?;
            let lp = scored.map(|s| echoed_logprobs(&tok_model.tokenizer, ids, Some(s), offset));
            Some(self::text(text.clone(), Some(lp), None))
        };
        if !want_logprobs {
            if let Some(c) = echo_chunk(None, &mut offset) {
                if !send(chunk(c)).await {
                    return;
                }
            }
        }
        let done = loop {
            match rx.recv().await {
                Some(Msg::Scored(s)) => {
                    if let Some(c) = echo_chunk(Some(&s), &mut offset) {
                        if !send(chunk(c)).await {
                            return;
                        }
                    }
                }
                Some(Msg::Text {
                    text,
                    thinking,
                    logprobs,
                }) => {
                    for part in asm.text(text, thinking, logprobs) {
                        if !send(piece(part, &mut offset)).await {
                            return;
                        }
                    }
                }
                Some(Msg::Started) => {}
                Some(Msg::Shutdown) => {
                    let _ = send(shutting_down().body()).await;
                    return;
                }
                Some(Msg::Done(d)) => break d,
                Some(Msg::Error(e)) => {
                    let _ = send(ApiError::status(500, e).body()).await;
                    return;
                }
                None => return,
            }
        };
        for part in asm.finish() {
            if !send(piece(part, &mut offset)).await {
                return;
            }
        }
        let finish = asm.finish_reason(&done);
        let last = match kind {
            Kind::Chat | Kind::Anthropic => chat(Delta::default(), None, Some(finish)),
            Kind::Completion => text(String::new(), Some(None), Some(finish)),
            // llama-server's own stream ends with its final result, no `[DONE]`.
            Kind::Native => {
                if let Some(last) = last {
                    let _ = send(last(&p, &done)).await;
                }
                return;
            }
        };
        let object = match kind {
            Kind::Completion => "text_completion",
            _ => "chat.completion.chunk",
        };
        let mut c = Chunk {
            id: &id,
            object,
            created,
            model: &model,
            choices: vec![last],
            timings: Some(done.timings()),
            usage: None,
        };
        if !send(to_value(&c)).await {
            return;
        }
        if include_usage {
            c.choices.clear();
            c.timings = None;
            c.usage = Some(done.usage());
            if !send(to_value(&c)).await {
                return;
            }
        }
        let _ = tx.send(Event::default().data("[DONE]")).await;
    })
}
