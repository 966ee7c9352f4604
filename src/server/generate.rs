//! The bridge between the HTTP side and the slots: a dialect's handler
//! hands its body here; it is parsed, rendered and tokenized off the
//! runtime ([`super::request::prepare`]), submitted to the scheduler, and
//! what the slots send back is assembled into pieces (content, reasoning,
//! tool calls) that the dialect renders, whole or streamed.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::body::Body;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use tokio::sync::mpsc;

use crate::sample::TokenLogprob;

use super::api::ApiError;
use super::app::{authorize, off_runtime, read_body, ready, trim_after, App, Ready, STREAM_BUFFER};
use super::done::Done;
use super::error::shutting_down;
use super::request::{Kind, Prepared};
use super::slots::{Job, Msg, Refused};
use super::text::{self, Piece, ToolCallParser};
use super::{anthropic, llama, openai_chat, openai_completions, stream};

/// Waits until a slot takes the job whose messages `rx` receives.
pub(crate) async fn admitted(rx: &mut mpsc::Receiver<Msg>) -> Result<(), ApiError> {
    match rx.recv().await {
        Some(Msg::Started) => Ok(()),
        Some(Msg::Shutdown) => Err(shutting_down()),
        Some(Msg::Error(e)) => Err(ApiError::status(500, e)),
        _ => Err(ApiError::status(500, "the slot ended without a result")),
    }
}

/// Submits prompt `i`'s job; the receiving end of its messages.
fn submit(r: &Ready, p: &Prepared, i: usize) -> Result<mpsc::Receiver<Msg>, ApiError> {
    let (tx, rx) = mpsc::channel(STREAM_BUFFER);
    let job = Job {
        prompt: p.prompts[i].clone(),
        // Echoed log-probabilities score the prompt first.
        score_prompt: p.logprobs.filter(|_| p.echo),
        sampler: p.common.sampler.clone(),
        n_predict: p.common.n_predict,
        stop: p.common.stop.clone(),
        starts_thinking: p.starts_thinking,
        ignore_eos: p.common.ignore_eos,
        logprobs: p.logprobs,
        json: p.json,
        tool_call: p.tool_call.clone(),
        logit_bias: p.logit_bias.clone(),
        tx,
    };
    match r.sched.submit(job) {
        Ok(()) => Ok(rx),
        Err(Refused::QueueFull) => Err(ApiError::status(
            503,
            "every slot is busy and the queue is full; retry later",
        )),
        Err(Refused::ShuttingDown) => Err(shutting_down()),
    }
}

/// Turns a slot's messages into response pieces: text (split into content,
/// reasoning and tool calls) and the end.
pub(crate) struct Assembler {
    kind: Kind,
    tools: Option<ToolCallParser>,
    pub n_calls: usize,
    id: String,
    /// Token log-probabilities not yet attached to content (the tool-call
    /// parser may hold text back).
    pending: Vec<TokenLogprob>,
}

/// One piece of a response; content comes with its tokens'
/// log-probabilities when they were asked for.
pub(crate) enum Part {
    Content(String, Vec<TokenLogprob>),
    Reasoning(String),
    Call(Value),
}

impl Assembler {
    pub fn text(&mut self, text: String, thinking: bool, logprobs: Vec<TokenLogprob>) -> Vec<Part> {
        if thinking && matches!(self.kind, Kind::Chat | Kind::Anthropic) {
            // OpenAI reports log-probabilities for the content only.
            return vec![Part::Reasoning(text)];
        }
        self.pending.extend(logprobs);
        match &mut self.tools {
            Some(p) => {
                let pieces = p.push(&text);
                self.pieces(pieces)
            }
            None => vec![Part::Content(text, std::mem::take(&mut self.pending))],
        }
    }

    pub fn finish(&mut self) -> Vec<Part> {
        match self.tools.as_mut() {
            Some(p) => {
                let pieces = p.finish();
                self.pieces(pieces)
            }
            None => Vec::new(),
        }
    }

    fn pieces(&mut self, pieces: Vec<Piece>) -> Vec<Part> {
        pieces
            .into_iter()
            .map(|p| match p {
                Piece::Text(t) => Part::Content(t, std::mem::take(&mut self.pending)),
                Piece::Call { name, arguments } => {
                    // The call's tokens are not content.
                    self.pending.clear();
                    let v = text::tool_call_json(&self.id, self.n_calls, &name, &arguments);
                    self.n_calls += 1;
                    Part::Call(v)
                }
            })
            .collect()
    }

    pub fn finish_reason(&self, d: &Done) -> &'static str {
        if self.n_calls > 0 {
            "tool_calls"
        } else if d.length {
            "length"
        } else {
            "stop"
        }
    }
}

/// Parses, checks, renders and submits a generating request of `kind`, and
/// answers it whole or streamed, in the kind's dialect.
/// A dialect's parser: its typed request from the body, converted into
/// the internal one (run off the runtime).
pub(crate) type Prepare = fn(&App, &Ready, &[u8]) -> Result<Prepared, ApiError>;

pub(crate) async fn generate(
    app: Arc<App>,
    kind: Kind,
    prepare: Prepare,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let result = async {
        authorize(&app, &headers)?;
        ready(&app)?;
        let bytes = read_body(&app, body).await?;
        let worker = Arc::clone(&app);
        let p = off_runtime(move || {
            let app = &*worker;
            let r = ready(app)?;
            let p = prepare(app, r, &bytes);
            let len = bytes.len();
            drop(bytes);
            trim_after(len);
            p
        })
        .await?;
        let r = ready(&app)?;
        let rxs = (0..p.prompts.len())
            .map(|i| submit(r, &p, i))
            .collect::<Result<Vec<_>, _>>()?;
        Ok::<_, ApiError>((p, rxs, Arc::clone(&r.model)))
    }
    .await;
    let (p, mut rxs, model) = match result {
        Ok(x) => x,
        Err(e) => return e.in_dialect(kind.dialect()).into_response(),
    };
    if p.common.stream {
        // The 200 and the event stream start once a slot has taken the
        // request: one still queued at shutdown gets a plain 503.
        if let Err(e) = admitted(&mut rxs[0]).await {
            return e.in_dialect(kind.dialect()).into_response();
        }
    }
    let n = app.next_id.fetch_add(1, Ordering::Relaxed);
    let id = match kind {
        Kind::Chat => format!("chatcmpl-clover-{n}"),
        Kind::Anthropic => format!("msg_clover_{n}"),
        Kind::Completion | Kind::Native => format!("cmpl-clover-{n}"),
    };
    let asm = || Assembler {
        kind,
        tools: p.tools.then(ToolCallParser::default),
        n_calls: 0,
        id: id.clone(),
        pending: Vec::new(),
    };
    if p.common.stream {
        let (asm, rx) = (asm(), rxs.remove(0));
        match kind {
            Kind::Anthropic => anthropic::stream(app, p, rx, asm, id),
            _ => stream::stream(app, p, rx, asm, id, model),
        }
    } else {
        let choices = rxs.into_iter().map(|rx| (rx, asm())).collect();
        match whole(&p, choices, &model).await {
            Ok(out) => {
                let model_name = app.cfg.model_name.clone();
                match kind {
                    Kind::Chat => openai_chat::response(id, model_name, out),
                    Kind::Completion => openai_completions::response(id, model_name, out),
                    Kind::Anthropic => anthropic::response(id, model_name, out),
                    Kind::Native => llama::response(out),
                }
            }
            Err(e) => e.in_dialect(kind.dialect()).into_response(),
        }
    }
}

/// Everything one choice's generation produced.
pub(crate) struct Collected {
    pub content: String,
    pub reasoning: String,
    pub calls: Vec<Value>,
    /// The content tokens' log-probabilities (when asked for).
    pub logprobs: Vec<TokenLogprob>,
    /// The echoed prompt's scores (completions' `echo` with `logprobs`).
    pub scored: Option<Vec<TokenLogprob>>,
    pub finish: &'static str,
    pub done: Done,
}

/// Collects one slot's messages.
async fn collect(mut rx: mpsc::Receiver<Msg>, mut asm: Assembler) -> Result<Collected, ApiError> {
    let (mut content, mut reasoning, mut calls) = (String::new(), String::new(), Vec::new());
    let (mut lps, mut scored) = (Vec::new(), None);
    let mut take = |parts: Vec<Part>| {
        for part in parts {
            match part {
                Part::Content(t, l) => {
                    content.push_str(&t);
                    lps.extend(l);
                }
                Part::Reasoning(t) => reasoning.push_str(&t),
                Part::Call(v) => calls.push(v),
            }
        }
    };
    let done = loop {
        match rx.recv().await {
            Some(Msg::Text {
                text,
                thinking,
                logprobs,
            }) => take(asm.text(text, thinking, logprobs)),
            Some(Msg::Scored(s)) => scored = Some(s),
            Some(Msg::Started) => {}
            Some(Msg::Shutdown) => return Err(shutting_down()),
            Some(Msg::Done(d)) => break d,
            Some(Msg::Error(e)) => return Err(ApiError::status(500, e)),
            None => return Err(ApiError::status(500, "the slot ended without a result")),
        }
    };
    take(asm.finish());
    Ok(Collected {
        content,
        reasoning,
        calls,
        logprobs: lps,
        scored,
        finish: asm.finish_reason(&done),
        done,
    })
}

/// A whole (not streamed) answer: the request and each choice, in order.
pub(crate) struct Whole<'a> {
    pub p: &'a Prepared,
    pub model: &'a crate::engine::LoadedModel,
    pub choices: Vec<Collected>,
}

impl Whole<'_> {
    /// The counts summed over the choices (`usage`).
    pub fn total(&self) -> Done {
        self.choices.iter().fold(Done::default(), |mut a, c| {
            a.prompt_n += c.done.prompt_n;
            a.predicted_n += c.done.predicted_n;
            a.cached_n += c.done.cached_n;
            a
        })
    }
}

/// Every choice of a non-streaming response, collected.
async fn whole<'a>(
    p: &'a Prepared,
    choices: Vec<(mpsc::Receiver<Msg>, Assembler)>,
    model: &'a crate::engine::LoadedModel,
) -> Result<Whole<'a>, ApiError> {
    let mut out = Vec::new();
    for (rx, asm) in choices {
        out.push(collect(rx, asm).await?);
    }
    Ok(Whole {
        p,
        model,
        choices: out,
    })
}
