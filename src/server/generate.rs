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
use serde::Serialize;
use serde_json::Value;
use tokio::sync::mpsc;

use crate::sample::TokenLogprob;

use super::api::ApiError;
use super::app::{
    authorize, now_secs, off_runtime, read_body, ready, trim_after, App, Ready, STREAM_BUFFER,
};
use super::done::{Done, Timings, Usage};
use super::error::shutting_down;
use super::parts::{Assembler, Part};
use super::request::{Kind, Prepared};
use super::slots::{Job, Msg, Refused};
use super::stream::{self, Streaming};

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

/// Parses, checks, renders and submits a generating request of `kind`, and
/// answers it whole or streamed, in the kind's dialect.
/// A dialect's parser: its typed request from the body, converted into
/// the internal one (run off the runtime).
pub(crate) type Prepare = fn(&App, &Ready, &[u8]) -> Result<Prepared, ApiError>;

/// A dialect's event stream: the request, its slot's messages, the
/// assembler of its parts and the reply's id.
pub(crate) type StreamFn = fn(Streaming) -> Response;

/// What a dialect's handler hands the generation bridge: how to read its
/// request and how to answer it. The bridge knows no dialect.
#[derive(Clone, Copy)]
pub(crate) struct Reply {
    pub kind: Kind,
    pub prepare: Prepare,
    /// The whole answer: (id, model name, what was generated).
    pub whole: fn(String, String, Whole<'_>) -> Response,
    /// The dialect's own event stream; `None`: the OpenAI-style stream
    /// ([`stream::stream`]).
    pub stream: Option<StreamFn>,
    /// The last event of an OpenAI-style stream that ends with a result of
    /// its own instead of `[DONE]` (llama-server's `/completion`).
    pub last: Option<fn(&Prepared, &Done) -> Value>,
}

impl Reply {
    /// A dialect with the OpenAI-style stream.
    pub fn new(
        kind: Kind,
        prepare: Prepare,
        whole: fn(String, String, Whole<'_>) -> Response,
    ) -> Reply {
        Reply {
            kind,
            prepare,
            whole,
            stream: None,
            last: None,
        }
    }
}

pub(crate) async fn generate(
    app: Arc<App>,
    reply: Reply,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let Reply { kind, prepare, .. } = reply;
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
    let tools = p.tools;
    let asm = || Assembler::new(kind, tools, id.clone());
    if p.common.stream {
        let s = Streaming {
            app,
            rx: rxs.remove(0),
            asm: asm(),
            p,
            id,
        };
        match reply.stream {
            Some(own) => own(s),
            None => stream::stream(s, model, reply.last),
        }
    } else {
        let choices = rxs.into_iter().map(|rx| (rx, asm())).collect();
        match whole(&p, choices, &model).await {
            Ok(out) => (reply.whole)(id, app.cfg.model_name.clone(), out),
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

/// An OpenAI completion object, chat's or the legacy one's (their choices
/// differ): every choice, the usage summed over them, the first's timings.
#[derive(Serialize)]
pub(crate) struct Completion<C> {
    id: String,
    object: &'static str,
    created: u64,
    model: String,
    choices: Vec<C>,
    usage: Usage,
    timings: Timings,
}

impl Whole<'_> {
    /// The OpenAI completion object `object` with id `id` of model `model`,
    /// each collected choice rendered by `choice` (given its index).
    pub fn openai<C: Serialize>(
        mut self,
        [id, model]: [String; 2],
        object: &'static str,
        choice: impl Fn(&Whole, usize, Collected) -> C,
    ) -> Response {
        let usage = self.total().usage();
        let timings = self.choices[0].done.timings();
        let collected = std::mem::take(&mut self.choices);
        let choices = collected
            .into_iter()
            .enumerate()
            .map(|(i, c)| choice(&self, i, c))
            .collect();
        axum::Json(Completion {
            id,
            object,
            created: now_secs(),
            model,
            choices,
            usage,
            timings,
        })
        .into_response()
    }

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
