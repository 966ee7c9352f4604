//! `clover serve`: an OpenAI-compatible HTTP server.
//!
//! The async side (axum on tokio) only moves requests and text: it checks a
//! request, renders and tokenizes its prompt, hands a [`slots::Job`] to the
//! [`slots::Scheduler`], and turns what the slot sends back into a JSON
//! response or server-sent events. Generation runs on the slots' own threads
//! ([`slots`]). The listener opens before the model is loaded: `/health`
//! answers 503 until it is ready.
//!
//! Endpoints: `POST /v1/chat/completions`, `POST /v1/completions`,
//! `GET /v1/models`, `GET /health`, `GET /metrics`.

pub mod anthropic;
pub mod api;
pub mod conn;
pub mod metrics;
pub mod slots;
pub mod text;

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde_json::{json, Map, Value};
use tokio::sync::mpsc;

use crate::engine::LoadedModel;

use api::ApiError;
use metrics::Metrics;
use slots::{Done, Job, Msg, Refused, Scheduler};
use text::{Piece, ToolCallParser};

use crate::sample::TokenLogprob;
use crate::tokenizer::Tokenizer;

/// What `clover serve` was asked for.
pub struct ServeConfig {
    pub host: String,
    pub port: u16,
    pub api_key: Option<String>,
    /// The name `/v1/models` lists and responses carry.
    pub model_name: String,
    /// Context positions of each slot.
    pub n_ctx_slot: usize,
    pub max_body: usize,
    /// A request's body must arrive within this of its head.
    pub body_timeout: Duration,
    pub limits: conn::Limits,
    pub shutdown_timeout: Duration,
    /// Origins browsers may call from (`--cors-origins`; `None`: any).
    pub cors_origins: Option<Vec<String>>,
}

/// The loaded model and its slots.
struct Ready {
    model: Arc<LoadedModel>,
    /// The longest text of any token, in bytes: a text of `n` bytes is at
    /// least `n / max_piece` tokens, known before it is tokenized.
    max_piece: usize,
    sched: Arc<Scheduler>,
    batcher: Arc<slots::Batcher>,
}

struct App {
    cfg: ServeConfig,
    ready: OnceLock<Ready>,
    metrics: Arc<Metrics>,
    next_id: AtomicU64,
    /// Set when the server begins to stop.
    stopping: tokio::sync::watch::Sender<bool>,
}

/// Per-stream buffer of messages between a slot and its client.
const STREAM_BUFFER: usize = 64;

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn error_response(app: &App, e: ApiError) -> Response {
    error_response_as(app, e, Kind::Chat)
}

/// The error in the shape of the endpoint's API (Anthropic's or OpenAI's).
fn error_response_as(app: &App, e: ApiError, kind: Kind) -> Response {
    app.metrics.request(e.status);
    let status = StatusCode::from_u16(e.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let body = match kind {
        Kind::Anthropic => anthropic::error_body(&e),
        _ => e.body(),
    };
    let mut r = (status, axum::Json(body)).into_response();
    if e.status == 503 {
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    if matches!(e.status, 408 | 413) {
        // The rest of the body is not worth reading: the connection closes.
        r.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    r
}

/// The JSON, or the error.
fn answer(app: &App, result: Result<Value, ApiError>) -> Response {
    match result {
        Ok(v) => json_response(app, v),
        Err(e) => error_response(app, e),
    }
}

fn json_response(app: &App, v: Value) -> Response {
    app.metrics.request(200);
    axum::Json(v).into_response()
}

/// `--api-key`: `Authorization: Bearer KEY` on every `/v1` request.
fn authorize(app: &App, headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(key) = &app.cfg.api_key else {
        return Ok(());
    };
    // OpenAI's clients send `Authorization: Bearer`, Anthropic's `x-api-key`.
    // The scheme's name is case-insensitive (RFC 9110 11.1).
    let bearer = |v: &str| {
        let (scheme, key) = v.trim().split_once(' ')?;
        scheme
            .eq_ignore_ascii_case("bearer")
            .then(|| key.trim_start().to_string())
    };
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer)
        .or_else(|| {
            headers
                .get("x-api-key")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        });
    match given {
        Some(g) if g == *key => Ok(()),
        Some(_) => Err(ApiError::status(401, "Invalid API key")),
        None => Err(ApiError::status(
            401,
            "Missing API key (Authorization: Bearer KEY)",
        )),
    }
}

fn ready(app: &App) -> Result<&Ready, ApiError> {
    app.ready
        .get()
        .ok_or_else(|| ApiError::status(503, "Loading model"))
}

/// The request's body, whole: at most `--max-body` bytes, within
/// `--body-timeout`. A body still arriving when the server begins to stop
/// is not waited for (503).
async fn read_body(app: &App, body: Body) -> Result<axum::body::Bytes, ApiError> {
    let limit = app.cfg.max_body;
    let mut stopping = app.stopping.subscribe();
    let read = tokio::time::timeout(app.cfg.body_timeout, axum::body::to_bytes(body, limit));
    let result = tokio::select! {
        r = read => r,
        _ = stopping.wait_for(|&s| s) => return Err(shutting_down()),
    };
    match result {
        Ok(Ok(bytes)) => Ok(bytes),
        Ok(Err(_)) => Err(ApiError::status(
            413,
            format!("the request body is larger than {limit} bytes"),
        )),
        Err(_) => Err(ApiError::status(
            408,
            format!(
                "the request body did not arrive within {} s",
                app.cfg.body_timeout.as_secs_f64()
            ),
        )),
    }
}

/// Bodies at least this large give their memory back to the system when
/// their request is done (glibc keeps freed memory otherwise).
const TRIM_BODY: usize = 1 << 20;

/// Runs `f` on the blocking pool, off the HTTP runtime's threads: parsing,
/// rendering and tokenizing a prompt can take seconds.
async fn off_runtime<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(|_| Err(ApiError::status(500, "the request's worker failed")))
}

/// Returns freed memory to the system after a large request (whose body
/// was `body_len` bytes).
fn trim_after(body_len: usize) {
    if body_len >= TRIM_BODY {
        // SAFETY: malloc_trim only walks glibc's own heap.
        #[cfg(target_env = "gnu")]
        unsafe {
            libc::malloc_trim(0);
        }
    }
}

/// The kinds of endpoint that generate.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Chat,
    Completion,
    /// llama-server's own `POST /completion`.
    Native,
    /// Anthropic's `POST /v1/messages` (run as the chat request it means).
    Anthropic,
}

/// A checked request, ready for a slot.
#[derive(Clone)]
struct Prepared {
    kind: Kind,
    common: api::Common,
    /// One prompt per choice (several only for completions).
    prompts: Vec<Vec<u32>>,
    /// Completions' `echo`: each choice's text starts with its prompt's.
    echo: bool,
    /// Each prompt as text.
    texts: Vec<String>,
    starts_thinking: bool,
    tools: bool,
    /// Alternatives per token's log-probability; `None`: none asked for.
    logprobs: Option<usize>,
    /// JSON mode.
    json: bool,
    /// A forced tool call (`tool_choice` required or named).
    tool_call: Option<Arc<Vec<(String, crate::constrain::tools::Shape)>>>,
    logit_bias: Vec<(u32, f32)>,
}

fn prepare(app: &App, r: &Ready, kind: Kind, o: &Map<String, Value>) -> Result<Prepared, ApiError> {
    let common = api::common(o)?;
    let logprobs = match kind {
        Kind::Chat | Kind::Anthropic => api::chat_logprobs(o)?,
        Kind::Completion => api::completion_logprobs(o)?,
        Kind::Native => api::n_probs(o)?,
    };
    let json = api::json_mode(o)?;
    let logit_bias = api::logit_bias(o, r.model.model.n_vocab())?;
    let tokenize = |text: &str| {
        r.model
            .tokenize(text)
            .map_err(|e| ApiError::bad(format!("tokenizing the prompt: {e}")))
    };
    let mut tool_call = None;
    let (prompts, texts, tools, starts_thinking) = match kind {
        Kind::Chat | Kind::Anthropic => {
            let messages = api::messages(o)?;
            let mut tools = api::tools(o)?;
            match api::tool_choice(o, tools.as_ref())? {
                api::ToolChoice::Auto => {}
                // Not offered, so not called.
                api::ToolChoice::None => tools = None,
                choice => {
                    let all = api::tool_schemas(tools.as_ref().expect("checked"))?;
                    let forced = all
                        .iter()
                        .filter(|(n, _)| match &choice {
                            api::ToolChoice::Named(name) => n == name,
                            _ => true,
                        })
                        .map(|(n, schema)| (n.clone(), crate::constrain::tools::Shape::of(schema)))
                        .collect();
                    tool_call = Some(Arc::new(forced));
                }
            }
            check_text_size(app, r, message_text_bytes(&messages))?;
            let (text, ids) = r
                .model
                .chat_prompt_json(&messages, tools.as_ref(), true)
                .map_err(|e| ApiError::bad(format!("chat template: {e}")))?;
            let thinking = text.trim_end().ends_with("<think>");
            (vec![ids], vec![text], tools.is_some(), thinking)
        }
        Kind::Completion | Kind::Native => {
            let (mut prompts, mut texts) = (Vec::new(), Vec::new());
            let n_vocab = r.model.model.n_vocab();
            for p in api::prompts(o)? {
                match p {
                    api::PromptIn::Text(t) => {
                        check_text_size(app, r, t.len())?;
                        prompts.push(tokenize(&t)?);
                        texts.push(t);
                    }
                    api::PromptIn::Ids(ids) => {
                        if let Some(&bad) = ids.iter().find(|&&i| i as usize >= n_vocab) {
                            return Err(ApiError::field(
                                "prompt",
                                format!("token id {bad} is not below the vocabulary's {n_vocab}"),
                            ));
                        }
                        let text = r.model.tokenizer.decode(&ids).unwrap_or_default();
                        prompts.push(ids);
                        texts.push(text);
                    }
                }
            }
            (prompts, texts, false, false)
        }
    };
    for prompt in &prompts {
        if prompt.is_empty() {
            return Err(ApiError::bad("the prompt is empty"));
        }
        if prompt.len() >= app.cfg.n_ctx_slot {
            return Err(ApiError::bad(format!(
                "the prompt is {} tokens, more than a slot's context of {} leaves for a reply (raise -c)",
                prompt.len(),
                app.cfg.n_ctx_slot
            )));
        }
    }
    if prompts.len() > 1 && common.stream {
        return Err(ApiError::field(
            "prompt",
            "several prompts are answered with stream: false only",
        ));
    }
    let echo = match kind {
        Kind::Completion => api::boolean(o, "echo")?.unwrap_or(false),
        Kind::Native => false,
        Kind::Chat | Kind::Anthropic => false,
    };
    Ok(Prepared {
        kind,
        common,
        prompts,
        echo,
        texts,
        starts_thinking,
        tools,
        logprobs,
        json,
        tool_call,
        logit_bias,
    })
}

/// The bytes of the messages' texts (what any rendering of them holds).
fn message_text_bytes(messages: &Value) -> usize {
    messages
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m.get("content").and_then(Value::as_str))
        .map(str::len)
        .sum()
}

/// Refuses a prompt whose text alone (`bytes` long) is more tokens than a
/// slot holds, before it is rendered or tokenized: no token's text is longer
/// than `max_piece` bytes.
fn check_text_size(app: &App, r: &Ready, bytes: usize) -> Result<(), ApiError> {
    let at_least = bytes.div_ceil(r.max_piece.max(1));
    if at_least >= app.cfg.n_ctx_slot {
        return Err(ApiError::bad(format!(
            "the prompt is {bytes} bytes of text, at least {at_least} tokens, more than a \
             slot's context of {} leaves for a reply (raise -c)",
            app.cfg.n_ctx_slot
        )));
    }
    Ok(())
}

/// The `usage` object.
fn usage(d: &Done) -> Value {
    json!({
        "prompt_tokens": d.prompt_n,
        "completion_tokens": d.predicted_n,
        "total_tokens": d.prompt_n + d.predicted_n,
        "prompt_tokens_details": {"cached_tokens": d.cached_n},
    })
}

/// llama-server's `timings` object.
fn timings(d: &Done) -> Value {
    let evaluated = d.prompt_n - d.cached_n.min(d.prompt_n);
    let per = |ms: f64, n: usize| if n > 0 { ms / n as f64 } else { 0.0 };
    let rate = |ms: f64, n: usize| if ms > 0.0 { n as f64 * 1e3 / ms } else { 0.0 };
    json!({
        "cache_n": d.cached_n,
        "prompt_n": evaluated,
        "prompt_ms": d.prompt_ms,
        "prompt_per_token_ms": per(d.prompt_ms, evaluated),
        "prompt_per_second": rate(d.prompt_ms, evaluated),
        "predicted_n": d.predicted_n,
        "predicted_ms": d.predicted_ms,
        "predicted_per_token_ms": per(d.predicted_ms, d.predicted_n),
        "predicted_per_second": rate(d.predicted_ms, d.predicted_n),
        "draft_n": d.draft_n,
        "draft_n_accepted": d.draft_accepted,
    })
}

/// A log-probability as JSON can carry it: −9999 for an impossible token, as
/// OpenAI writes it.
fn finite_lp(logprob: f32) -> f64 {
    if logprob.is_finite() {
        logprob as f64
    } else {
        -9999.0
    }
}

/// A token as OpenAI's `logprobs` give it: its text, its log-probability
/// and its bytes.
fn token_json(tok: &Tokenizer, id: u32, logprob: f32) -> Value {
    let bytes = tok.piece(id).unwrap_or(&[]);
    json!({"token": String::from_utf8_lossy(bytes), "logprob": finite_lp(logprob), "bytes": bytes})
}

/// A chat choice's `logprobs`: `{"content": [...]}`, each token with its
/// `top_logprobs`.
fn chat_logprobs(tok: &Tokenizer, lps: &[TokenLogprob]) -> Value {
    let content: Vec<Value> = lps
        .iter()
        .map(|r| {
            let mut v = token_json(tok, r.id, r.logprob);
            let top = r.top.iter().map(|&(i, l)| token_json(tok, i, l));
            v["top_logprobs"] = Value::Array(top.collect());
            v
        })
        .collect();
    json!({"content": content, "refusal": null})
}

/// A completion choice's `logprobs` (the legacy shape): `tokens`,
/// `token_logprobs`, `top_logprobs` (text → log-probability) and
/// `text_offset`, counted in characters from the choice's start; `offset`
/// is where these tokens start, and moves past them. A token without a
/// record (an echoed prompt's first) gets nulls.
fn legacy_logprobs<'a>(
    tok: &Tokenizer,
    entries: impl Iterator<Item = (u32, Option<&'a TokenLogprob>)>,
    offset: &mut usize,
) -> Value {
    let text = |id: u32| String::from_utf8_lossy(tok.piece(id).unwrap_or(&[])).into_owned();
    let (mut tokens, mut lp, mut top, mut at) = (vec![], vec![], vec![], vec![]);
    for (id, r) in entries {
        let t = text(id);
        at.push(*offset);
        *offset += t.chars().count();
        tokens.push(t);
        lp.push(r.map_or(Value::Null, |r| json!(finite_lp(r.logprob))));
        top.push(r.map_or(Value::Null, |r| {
            let alts: Map<String, Value> = r
                .top
                .iter()
                .map(|&(i, l)| (text(i), json!(finite_lp(l))))
                .collect();
            Value::Object(alts)
        }));
    }
    json!({"tokens": tokens, "token_logprobs": lp, "top_logprobs": top, "text_offset": at})
}

/// [`legacy_logprobs`] of generated tokens.
fn completion_logprobs(tok: &Tokenizer, lps: &[TokenLogprob], offset: &mut usize) -> Value {
    legacy_logprobs(tok, lps.iter().map(|r| (r.id, Some(r))), offset)
}

/// [`legacy_logprobs`] of an echoed prompt: its first token has none, each
/// other one the record `scored` holds for it.
fn echoed_logprobs(
    tok: &Tokenizer,
    prompt: &[u32],
    scored: Option<&[TokenLogprob]>,
    offset: &mut usize,
) -> Value {
    let records = std::iter::once(None).chain(scored.unwrap_or(&[]).iter().map(Some));
    let entries = prompt
        .iter()
        .zip(records.chain(std::iter::repeat(None)))
        .map(|(&id, r)| (id, r));
    legacy_logprobs(tok, entries, offset)
}

/// Waits until a slot takes the job whose messages `rx` receives.
async fn admitted(rx: &mut mpsc::Receiver<Msg>) -> Result<(), ApiError> {
    match rx.recv().await {
        Some(Msg::Started) => Ok(()),
        Some(Msg::Shutdown) => Err(shutting_down()),
        Some(Msg::Error(e)) => Err(ApiError::status(500, e)),
        _ => Err(ApiError::status(500, "the slot ended without a result")),
    }
}

fn shutting_down() -> ApiError {
    ApiError::status(503, "the server is shutting down")
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
struct Assembler {
    kind: Kind,
    tools: Option<ToolCallParser>,
    n_calls: usize,
    id: String,
    /// Token log-probabilities not yet attached to content (the tool-call
    /// parser may hold text back).
    pending: Vec<TokenLogprob>,
}

/// One piece of a response; content comes with its tokens'
/// log-probabilities when they were asked for.
enum Part {
    Content(String, Vec<TokenLogprob>),
    Reasoning(String),
    Call(Value),
}

impl Assembler {
    fn text(&mut self, text: String, thinking: bool, logprobs: Vec<TokenLogprob>) -> Vec<Part> {
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

    fn finish(&mut self) -> Vec<Part> {
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

    fn finish_reason(&self, d: &Done) -> &'static str {
        if self.n_calls > 0 {
            "tool_calls"
        } else if d.length {
            "length"
        } else {
            "stop"
        }
    }
}

async fn generate(app: Arc<App>, kind: Kind, headers: HeaderMap, body: Body) -> Response {
    let result = async {
        authorize(&app, &headers)?;
        ready(&app)?;
        let bytes = read_body(&app, body).await?;
        let worker = Arc::clone(&app);
        let p = off_runtime(move || {
            let app = &*worker;
            let r = ready(app)?;
            let o = api::object(&bytes)?;
            let o = match kind {
                Kind::Anthropic => anthropic::to_chat(&o)?,
                _ => o,
            };
            let p = prepare(app, r, kind, &o);
            let len = bytes.len();
            drop((o, bytes));
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
        Err(e) => return error_response_as(&app, e, kind),
    };
    if p.common.stream {
        // The 200 and the event stream start once a slot has taken the
        // request: one still queued at shutdown gets a plain 503.
        if let Err(e) = admitted(&mut rxs[0]).await {
            return error_response_as(&app, e, kind);
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
        app.metrics.request(200);
        let (asm, rx) = (asm(), rxs.remove(0));
        match kind {
            Kind::Anthropic => stream_anthropic(app, p, rx, asm, id),
            _ => stream(app, p, rx, asm, id, model),
        }
    } else {
        let choices = rxs.into_iter().map(|rx| (rx, asm())).collect();
        whole(app, p, choices, id, &model).await
    }
}

/// llama-server's `/completion` result: the text, how it stopped, the
/// counts and `timings`.
fn native_final(p: &Prepared, index: usize, content: &str, done: &Done) -> Value {
    let stop_type = match (done.length, &done.stopping_word) {
        (true, _) => "limit",
        (false, Some(_)) => "word",
        (false, None) => "eos",
    };
    let s = &p.common.sampler;
    json!({
        "index": index, "content": content, "tokens": [], "id_slot": done.slot, "stop": true,
        "tokens_predicted": done.predicted_n, "tokens_evaluated": done.prompt_n,
        "tokens_cached": done.cached_n, "prompt": p.texts[index],
        "has_new_line": content.contains('\n'), "truncated": false, "stop_type": stop_type,
        "stopping_word": done.stopping_word.clone().unwrap_or_default(),
        "generation_settings": {
            "n_predict": p.common.n_predict.map_or(-1, |n| n as i64), "temperature": s.temp,
            "top_k": s.top_k, "top_p": s.top_p, "min_p": s.min_p, "seed": s.seed,
            "stop": p.common.stop, "ignore_eos": p.common.ignore_eos,
        },
        "timings": timings(done),
    })
}

/// llama-server's `completion_probabilities`: each token with its id,
/// text, log-probability, bytes and alternatives.
fn native_probs(tok: &Tokenizer, lps: &[TokenLogprob]) -> Value {
    let entry = |id: u32, lp: f32| {
        let mut v = token_json(tok, id, lp);
        v["id"] = json!(id);
        v
    };
    let list: Vec<Value> = lps
        .iter()
        .map(|r| {
            let mut v = entry(r.id, r.logprob);
            let top = r.top.iter().map(|&(i, l)| entry(i, l));
            v["top_logprobs"] = Value::Array(top.collect());
            v
        })
        .collect();
    Value::Array(list)
}

/// One choice of a whole response, and how its generation ended.
struct Choice {
    value: Value,
    done: Done,
}

/// Collects one slot's messages into a choice.
async fn collect(
    p: &Prepared,
    index: usize,
    mut rx: mpsc::Receiver<Msg>,
    mut asm: Assembler,
    tok: &Tokenizer,
) -> Result<Choice, ApiError> {
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
    let finish = asm.finish_reason(&done);
    let value = match p.kind {
        Kind::Chat => {
            let logprobs = match p.logprobs {
                Some(_) => chat_logprobs(tok, &lps),
                None => Value::Null,
            };
            let mut message = json!({"role": "assistant", "content": content});
            if !reasoning.is_empty() {
                message["reasoning_content"] = Value::String(reasoning);
            }
            if !calls.is_empty() {
                message["tool_calls"] = Value::Array(calls);
            }
            json!({"index": index, "message": message, "logprobs": logprobs, "finish_reason": finish})
        }
        Kind::Completion => {
            let echoed = p.echo.then(|| p.texts[index].as_str());
            let mut offset = 0;
            let mut logprobs = Value::Null;
            if p.logprobs.is_some() {
                let mut v = match echoed {
                    Some(_) => {
                        echoed_logprobs(tok, &p.prompts[index], scored.as_deref(), &mut offset)
                    }
                    None => completion_logprobs(tok, &[], &mut offset),
                };
                let rest = completion_logprobs(tok, &lps, &mut offset);
                for k in ["tokens", "token_logprobs", "top_logprobs", "text_offset"] {
                    if let (Some(a), Some(b)) = (v[k].as_array_mut(), rest[k].as_array()) {
                        a.extend(b.iter().cloned());
                    }
                }
                logprobs = v;
            }
            let text = format!("{}{content}", echoed.unwrap_or(""));
            json!({"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish})
        }
        Kind::Anthropic => {
            let mut blocks = Vec::new();
            if !reasoning.is_empty() {
                blocks.push(json!({"type": "thinking", "thinking": reasoning, "signature": ""}));
            }
            if !content.is_empty() || calls.is_empty() {
                blocks.push(json!({"type": "text", "text": content}));
            }
            blocks.extend(calls.iter().map(anthropic::tool_use));
            let word = done.stopping_word.as_deref();
            let (reason, seq) = anthropic::stop(!calls.is_empty(), done.length, word);
            json!({"content": blocks, "stop_reason": reason, "stop_sequence": seq})
        }
        Kind::Native => {
            let mut v = native_final(p, index, &content, &done);
            if p.logprobs.is_some() {
                v["completion_probabilities"] = native_probs(tok, &lps);
            }
            v
        }
    };
    Ok(Choice { value, done })
}

/// A non-streaming response: every choice, then one JSON object (usage
/// summed over the choices; `timings` of the first).
async fn whole(
    app: Arc<App>,
    p: Prepared,
    choices: Vec<(mpsc::Receiver<Msg>, Assembler)>,
    id: String,
    loaded: &LoadedModel,
) -> Response {
    let mut out = Vec::new();
    for (i, (rx, asm)) in choices.into_iter().enumerate() {
        match collect(&p, i, rx, asm, &loaded.tokenizer).await {
            Ok(c) => out.push(c),
            Err(e) => return error_response_as(&app, e, p.kind),
        }
    }
    let created = now_secs();
    let model = app.cfg.model_name.clone();
    let total = out.iter().fold(Done::default(), |mut a, c| {
        a.prompt_n += c.done.prompt_n;
        a.predicted_n += c.done.predicted_n;
        a.cached_n += c.done.cached_n;
        a
    });
    let first = out[0].done.clone();
    let mut choices: Vec<Value> = out.into_iter().map(|c| c.value).collect();
    let object = match p.kind {
        Kind::Chat => "chat.completion",
        Kind::Completion => "text_completion",
        Kind::Anthropic => {
            let c = choices.remove(0);
            let v = json!({
                "id": id, "type": "message", "role": "assistant", "model": model,
                "content": c["content"], "stop_reason": c["stop_reason"],
                "stop_sequence": c["stop_sequence"],
                "usage": {"input_tokens": first.prompt_n, "output_tokens": first.predicted_n,
                          "cache_read_input_tokens": first.cached_n},
            });
            return json_response(&app, v);
        }
        // llama-server answers one prompt with its result, several with a list.
        Kind::Native if choices.len() == 1 => return json_response(&app, choices.remove(0)),
        Kind::Native => return json_response(&app, Value::Array(choices)),
    };
    let v = json!({
        "id": id, "object": object, "created": created, "model": model,
        "choices": choices, "usage": usage(&total), "timings": timings(&first),
    });
    json_response(&app, v)
}

/// A streaming response: server-sent events, one chunk per piece of text,
/// a final chunk with the finish reason, the usage chunk when asked, then
/// `[DONE]`. A client that goes away drops the stream, which drops the
/// slot's receiver: the slot stops at its next token.
fn stream(
    app: Arc<App>,
    p: Prepared,
    mut rx: mpsc::Receiver<Msg>,
    mut asm: Assembler,
    id: String,
    loaded: Arc<LoadedModel>,
) -> Response {
    let (tx, out) = mpsc::channel::<Result<Event, Infallible>>(STREAM_BUFFER);
    let created = now_secs();
    let model = app.cfg.model_name.clone();
    let kind = p.kind;
    let include_usage = p.common.include_usage;
    let chunk = move |choice: Value| -> Value {
        let object = match kind {
            // (Anthropic streams through `stream_anthropic`.)
            Kind::Chat | Kind::Anthropic => "chat.completion.chunk",
            Kind::Completion => "text_completion",
            // llama-server's own stream sends the bare objects.
            Kind::Native => return choice,
        };
        json!({"id": id, "object": object, "created": created, "model": model, "choices": [choice]})
    };
    let want_logprobs = p.logprobs.is_some();
    let echo = p.echo.then(|| (p.texts[0].clone(), p.prompts[0].clone()));
    let tok_model = Arc::clone(&loaded);
    let part_choice = move |part: Part, offset: &mut usize| -> Value {
        let tok = &loaded.tokenizer;
        match (kind, part) {
            (Kind::Chat | Kind::Anthropic, Part::Content(t, l)) => {
                let lp = match want_logprobs {
                    true => chat_logprobs(tok, &l),
                    false => Value::Null,
                };
                json!({"index": 0, "delta": {"content": t}, "logprobs": lp, "finish_reason": null})
            }
            (Kind::Chat | Kind::Anthropic, Part::Reasoning(t)) => {
                json!({"index": 0, "delta": {"reasoning_content": t}, "finish_reason": null})
            }
            (Kind::Chat | Kind::Anthropic, Part::Call(c)) => {
                json!({"index": 0, "delta": {"tool_calls": [c]}, "finish_reason": null})
            }
            (Kind::Completion, Part::Content(t, l)) => {
                let lp = match want_logprobs {
                    true => completion_logprobs(tok, &l, offset),
                    false => Value::Null,
                };
                json!({"index": 0, "text": t, "logprobs": lp, "finish_reason": null})
            }
            (Kind::Completion, Part::Reasoning(t)) => {
                json!({"index": 0, "text": t, "logprobs": null, "finish_reason": null})
            }
            (Kind::Completion, Part::Call(_)) => {
                json!({"index": 0, "text": "", "finish_reason": null})
            }
            (Kind::Native, Part::Content(t, l)) => {
                let mut v = json!({"index": 0, "content": t, "tokens": [], "stop": false});
                if want_logprobs {
                    v["completion_probabilities"] = native_probs(tok, &l);
                }
                v
            }
            (Kind::Native, Part::Reasoning(t)) => {
                json!({"index": 0, "content": t, "tokens": [], "stop": false})
            }
            (Kind::Native, Part::Call(_)) => {
                json!({"index": 0, "content": "", "tokens": [], "stop": false})
            }
        }
    };
    tokio::spawn(async move {
        let send = |v: Value| {
            let tx = tx.clone();
            async move {
                tx.send(Ok(Event::default().data(v.to_string())))
                    .await
                    .is_ok()
            }
        };
        if kind == Kind::Chat {
            let first = json!({"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": null});
            if !send(chunk(first)).await {
                return;
            }
        }
        let mut offset = 0;
        // The echoed prompt comes first: at once, or with its scores.
        let echo_chunk = |scored: Option<&[TokenLogprob]>, offset: &mut usize| {
            let (text, ids) = echo.as_ref()?;
            let lp = match scored {
                Some(s) => echoed_logprobs(&tok_model.tokenizer, ids, Some(s), offset),
                None => Value::Null,
            };
            Some(json!({"index": 0, "text": text, "logprobs": lp, "finish_reason": null}))
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
                        if !send(chunk(part_choice(part, &mut offset))).await {
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
            if !send(chunk(part_choice(part, &mut offset))).await {
                return;
            }
        }
        let finish = asm.finish_reason(&done);
        let mut last = match kind {
            Kind::Chat | Kind::Anthropic => {
                chunk(json!({"index": 0, "delta": {}, "finish_reason": finish}))
            }
            Kind::Completion => {
                chunk(json!({"index": 0, "text": "", "logprobs": null, "finish_reason": finish}))
            }
            // llama-server's own stream ends with its final result, no `[DONE]`.
            Kind::Native => {
                let _ = send(native_final(&p, 0, "", &done)).await;
                return;
            }
        };
        last["timings"] = timings(&done);
        if !send(last.clone()).await {
            return;
        }
        if include_usage {
            let mut u = last;
            u["choices"] = json!([]);
            u["usage"] = usage(&done);
            if let Some(o) = u.as_object_mut() {
                o.remove("timings");
            }
            if !send(u).await {
                return;
            }
        }
        let _ = tx.send(Ok(Event::default().data("[DONE]"))).await;
    });
    Sse::new(tokio_stream::wrappers::ReceiverStream::new(out)).into_response()
}

/// The Messages API's content-block events for one piece of a reply:
/// `open` is the open block (index, type), `next` the next block's index.
fn block_events(
    part: Part,
    open: &mut Option<(usize, &'static str)>,
    next: &mut usize,
) -> Vec<(&'static str, Value)> {
    let mut ev = Vec::new();
    let close = |open: &mut Option<(usize, &'static str)>, ev: &mut Vec<_>| {
        if let Some((i, _)) = open.take() {
            ev.push((
                "content_block_stop",
                json!({"type": "content_block_stop", "index": i}),
            ));
        }
    };
    let (kind, delta) = match part {
        Part::Content(t, _) if t.is_empty() => return ev,
        Part::Content(t, _) => ("text", json!({"type": "text_delta", "text": t})),
        Part::Reasoning(t) if t.is_empty() => return ev,
        Part::Reasoning(t) => ("thinking", json!({"type": "thinking_delta", "thinking": t})),
        Part::Call(c) => {
            close(open, &mut ev);
            let mut block = anthropic::tool_use(&c);
            let input = block["input"].to_string();
            block["input"] = json!({});
            let i = *next;
            *next += 1;
            ev.push((
                "content_block_start",
                json!({"type": "content_block_start", "index": i, "content_block": block}),
            ));
            let delta = json!({"type": "input_json_delta", "partial_json": input});
            ev.push((
                "content_block_delta",
                json!({"type": "content_block_delta", "index": i, "delta": delta}),
            ));
            ev.push((
                "content_block_stop",
                json!({"type": "content_block_stop", "index": i}),
            ));
            return ev;
        }
    };
    if open.is_none_or(|(_, k)| k != kind) {
        close(open, &mut ev);
        let block = match kind {
            "text" => json!({"type": "text", "text": ""}),
            _ => json!({"type": "thinking", "thinking": ""}),
        };
        ev.push((
            "content_block_start",
            json!({"type": "content_block_start", "index": *next, "content_block": block}),
        ));
        *open = Some((*next, kind));
        *next += 1;
    }
    let i = open.map_or(0, |(i, _)| i);
    ev.push((
        "content_block_delta",
        json!({"type": "content_block_delta", "index": i, "delta": delta}),
    ));
    ev
}

/// The Messages API's event stream: `message_start`, content blocks
/// (`content_block_start`, deltas, `content_block_stop`), `message_delta`
/// with the stop reason and usage, `message_stop`.
fn stream_anthropic(
    app: Arc<App>,
    p: Prepared,
    mut rx: mpsc::Receiver<Msg>,
    mut asm: Assembler,
    id: String,
) -> Response {
    let (tx, out) = mpsc::channel::<Result<Event, Infallible>>(STREAM_BUFFER);
    let model = app.cfg.model_name.clone();
    let input_tokens = p.prompts[0].len();
    tokio::spawn(async move {
        let send = |name: &'static str, v: Value| {
            let tx = tx.clone();
            async move {
                tx.send(Ok(Event::default().event(name).data(v.to_string())))
                    .await
                    .is_ok()
            }
        };
        let start = json!({"type": "message_start", "message": {
            "id": id, "type": "message", "role": "assistant", "model": model, "content": [],
            "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": input_tokens, "output_tokens": 0},
        }});
        if !send("message_start", start).await {
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
                    let _ = send("error", anthropic::error_body(&shutting_down())).await;
                    return;
                }
                Some(Msg::Done(d)) => break d,
                Some(Msg::Error(e)) => {
                    let _ = send("error", anthropic::error_body(&ApiError::status(500, e))).await;
                    return;
                }
                None => return,
            };
            for part in parts {
                for (name, v) in block_events(part, &mut open, &mut next) {
                    if !send(name, v).await {
                        return;
                    }
                }
            }
        };
        let mut tail: Vec<(&'static str, Value)> = Vec::new();
        for part in asm.finish() {
            tail.extend(block_events(part, &mut open, &mut next));
        }
        if let Some((i, _)) = open {
            tail.push((
                "content_block_stop",
                json!({"type": "content_block_stop", "index": i}),
            ));
        }
        let word = done.stopping_word.as_deref();
        let (reason, seq) = anthropic::stop(asm.n_calls > 0, done.length, word);
        tail.push((
            "message_delta",
            json!({"type": "message_delta",
            "delta": {"stop_reason": reason, "stop_sequence": seq},
            "usage": {"output_tokens": done.predicted_n}}),
        ));
        tail.push(("message_stop", json!({"type": "message_stop"})));
        for (name, v) in tail {
            if !send(name, v).await {
                return;
            }
        }
    });
    Sse::new(tokio_stream::wrappers::ReceiverStream::new(out)).into_response()
}

/// Anthropic's `POST /v1/messages`.
async fn messages(State(app): State<Arc<App>>, headers: HeaderMap, body: Body) -> Response {
    generate(app, Kind::Anthropic, headers, body).await
}

async fn chat(State(app): State<Arc<App>>, headers: HeaderMap, body: Body) -> Response {
    generate(app, Kind::Chat, headers, body).await
}

async fn completions(State(app): State<Arc<App>>, headers: HeaderMap, body: Body) -> Response {
    generate(app, Kind::Completion, headers, body).await
}

/// llama-server's own `POST /completion`.
async fn completion(State(app): State<Arc<App>>, headers: HeaderMap, body: Body) -> Response {
    generate(app, Kind::Native, headers, body).await
}

/// The model as `/v1/models` lists it.
fn model_object(app: &App) -> Value {
    json!({
        "id": app.cfg.model_name, "object": "model", "created": now_secs(), "owned_by": "clover",
        "meta": {"n_ctx_slot": app.cfg.n_ctx_slot},
    })
}

async fn models(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    if let Err(e) = authorize(&app, &headers) {
        return error_response(&app, e);
    }
    let v = json!({"object": "list", "data": [model_object(&app)]});
    json_response(&app, v)
}

/// `GET /v1/models/{id}` (the OpenAI clients' `models.retrieve`).
async fn model_by_id(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    axum::extract::Path(id): axum::extract::Path<String>,
) -> Response {
    if let Err(e) = authorize(&app, &headers) {
        return error_response(&app, e);
    }
    if id != app.cfg.model_name {
        let e = ApiError::field(
            "model",
            format!(
                "the model '{id}' does not exist; this server has '{}'",
                app.cfg.model_name
            ),
        );
        return error_response(&app, ApiError { status: 404, ..e });
    }
    json_response(&app, model_object(&app))
}

/// Anthropic's `POST /v1/messages/count_tokens`: the prompt tokens the
/// request would take (`{"input_tokens": n}`).
async fn count_tokens(State(app): State<Arc<App>>, headers: HeaderMap, body: Body) -> Response {
    let result = async {
        authorize(&app, &headers)?;
        ready(&app)?;
        let bytes = read_body(&app, body).await?;
        let worker = Arc::clone(&app);
        off_runtime(move || {
            let app = &*worker;
            let r = ready(app)?;
            let o = anthropic::to_chat(&api::object(&bytes)?)?;
            let messages = api::messages(&o)?;
            let tools = api::tools(&o)?;
            check_text_size(app, r, message_text_bytes(&messages))?;
            let (_, ids) = r
                .model
                .chat_prompt_json(&messages, tools.as_ref(), true)
                .map_err(|e| ApiError::bad(format!("chat template: {e}")))?;
            Ok(json!({"input_tokens": ids.len()}))
        })
        .await
    }
    .await;
    match result {
        Ok(v) => json_response(&app, v),
        Err(e) => error_response_as(&app, e, Kind::Anthropic),
    }
}

/// CORS, as llama-server answers browsers: a preflight (`OPTIONS` with
/// `Access-Control-Request-Method`) gets 204 with the allowed methods and
/// headers; every answer to an allowed `Origin` names that origin. Any
/// origin is allowed unless `--cors-origins` lists them.
async fn cors(
    State(app): State<Arc<App>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let origin = req.headers().get(header::ORIGIN).cloned();
    let allowed = origin.as_ref().filter(|o| {
        let list = app.cfg.cors_origins.as_ref();
        list.is_none_or(|l| o.to_str().is_ok_and(|o| l.iter().any(|a| a == o)))
    });
    let preflight = req.method() == axum::http::Method::OPTIONS;
    let mut r = if preflight {
        let mut r = StatusCode::NO_CONTENT.into_response();
        if allowed.is_some() {
            let h = r.headers_mut();
            h.insert(
                header::ACCESS_CONTROL_ALLOW_METHODS,
                HeaderValue::from_static("GET, POST, OPTIONS"),
            );
            let asked = req
                .headers()
                .get(header::ACCESS_CONTROL_REQUEST_HEADERS)
                .cloned();
            h.insert(
                header::ACCESS_CONTROL_ALLOW_HEADERS,
                asked.unwrap_or(HeaderValue::from_static("*")),
            );
            h.insert(
                header::ACCESS_CONTROL_MAX_AGE,
                HeaderValue::from_static("86400"),
            );
        }
        r
    } else {
        next.run(req).await
    };
    if let Some(o) = allowed {
        let h = r.headers_mut();
        h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, o.clone());
        h.insert(
            header::ACCESS_CONTROL_ALLOW_CREDENTIALS,
            HeaderValue::from_static("true"),
        );
    }
    if origin.is_some() {
        r.headers_mut()
            .append(header::VARY, HeaderValue::from_static("Origin"));
    }
    r
}

/// llama-server's `POST /tokenize`: `content`, `add_special` (a BOS where
/// the model wants one; default off), `parse_special` (control-token texts
/// become their ids; default on), `with_pieces` (each id with its text).
async fn tokenize(State(app): State<Arc<App>>, headers: HeaderMap, body: Body) -> Response {
    let result = async {
        authorize(&app, &headers)?;
        ready(&app)?;
        let bytes = read_body(&app, body).await?;
        let worker = Arc::clone(&app);
        off_runtime(move || tokenize_body(&worker, &bytes)).await
    }
    .await;
    answer(&app, result)
}

/// `/tokenize`'s answer to a body (run off the HTTP runtime).
fn tokenize_body(app: &App, bytes: &[u8]) -> Result<Value, ApiError> {
    let r = ready(app)?;
    let o = api::object(bytes)?;
    let Some(Value::String(text)) = o.get("content") else {
        return Err(ApiError::field("content", "'content' must be a string"));
    };
    let flag = |k: &str, default: bool| api::boolean(&o, k).map(|b| b.unwrap_or(default));
    let (add_special, parse_special) = (flag("add_special", false)?, flag("parse_special", true)?);
    let with_pieces = flag("with_pieces", false)?;
    let tok = &r.model.tokenizer;
    let mut ids = tok
        .encode(text, parse_special)
        .map_err(|e| ApiError::bad(format!("tokenizing: {e}")))?;
    // `encode` prepends the model's BOS when it wants one.
    if tok.add_bos() && !add_special && !ids.is_empty() {
        ids.remove(0);
    }
    let tokens: Vec<Value> = match with_pieces {
        false => ids.iter().map(|&i| json!(i)).collect(),
        true => ids
            .iter()
            .map(|&i| {
                let bytes = tok.piece(i).unwrap_or(&[]);
                let piece = match std::str::from_utf8(bytes) {
                    Ok(s) => json!(s),
                    Err(_) => json!(bytes),
                };
                json!({"id": i, "piece": piece})
            })
            .collect(),
    };
    Ok(json!({"tokens": tokens}))
}

/// llama-server's `POST /detokenize`: `tokens` (ids) to `content`.
async fn detokenize(State(app): State<Arc<App>>, headers: HeaderMap, body: Body) -> Response {
    let result = async {
        authorize(&app, &headers)?;
        let r = ready(&app)?;
        let o = api::object(&read_body(&app, body).await?)?;
        let ids = o
            .get("tokens")
            .and_then(Value::as_array)
            .and_then(|a| {
                a.iter()
                    .map(|v| v.as_u64().and_then(|x| u32::try_from(x).ok()))
                    .collect::<Option<Vec<u32>>>()
            })
            .ok_or_else(|| ApiError::field("tokens", "'tokens' must be a list of token ids"))?;
        let content = r
            .model
            .tokenizer
            .decode(&ids)
            .map_err(|e| ApiError::field("tokens", e.to_string()))?;
        Ok(json!({"content": content}))
    }
    .await;
    answer(&app, result)
}

/// llama-server's `GET /slots`: each slot's id, context, whether it is
/// busy, and the tokens its sequence kept from its last request.
async fn slots_info(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    let r = match authorize(&app, &headers).and_then(|_| ready(&app)) {
        Ok(r) => r,
        Err(e) => return error_response(&app, e),
    };
    let list: Vec<Value> = r
        .sched
        .slot_states()
        .into_iter()
        .enumerate()
        .map(|(id, (busy, n))| {
            json!({"id": id, "n_ctx": app.cfg.n_ctx_slot, "is_processing": busy, "n_tokens_cached": n})
        })
        .collect();
    json_response(&app, Value::Array(list))
}

/// llama-server's `GET /props`: the slots, their context and the sampling
/// defaults a request starts from.
async fn props(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    let result = authorize(&app, &headers).and_then(|_| ready(&app));
    let r = match result {
        Ok(r) => r,
        Err(e) => return error_response(&app, e),
    };
    let d = crate::sample::SamplerParams::default();
    // f32 as its shortest decimal (0.8, not 0.800000011920929).
    let f = |x: f32| x.to_string().parse::<f64>().unwrap_or(x as f64);
    let v = json!({
        "default_generation_settings": {
            "n_ctx": app.cfg.n_ctx_slot,
            "params": {
                "temperature": f(d.temp), "top_k": d.top_k, "top_p": f(d.top_p),
                "min_p": f(d.min_p), "repeat_penalty": f(d.repeat_penalty),
                "repeat_last_n": d.repeat_last_n, "presence_penalty": f(d.presence_penalty),
                "frequency_penalty": f(d.frequency_penalty),
            },
        },
        "total_slots": r.sched.load().2,
        "model_path": r.model.path.display().to_string(),
        "modalities": {"vision": false, "audio": false},
        "build_info": concat!("clover ", env!("CARGO_PKG_VERSION")),
    });
    json_response(&app, v)
}

async fn health(State(app): State<Arc<App>>) -> Response {
    match ready(&app) {
        Ok(_) => json_response(&app, json!({"status": "ok"})),
        Err(e) => error_response(&app, e),
    }
}

async fn metrics_text(State(app): State<Arc<App>>) -> Response {
    let (q, busy, n) = app.ready.get().map_or((0, 0, 0), |r| r.sched.load());
    let mut body = app.metrics.render(q, busy, n);
    if let Some(r) = app.ready.get() {
        let steps = r.batcher.steps.load(Ordering::Relaxed);
        let rows = r.batcher.rows.load(Ordering::Relaxed);
        body += "# HELP clover_batch_steps_total Batched steps (one forward pass each)\n";
        body += "# TYPE clover_batch_steps_total counter\n";
        body += &format!("clover_batch_steps_total {steps}\n");
        body += "# HELP clover_batch_rows_total Sequences decoded by batched steps\n";
        body += "# TYPE clover_batch_rows_total counter\n";
        body += &format!("clover_batch_rows_total {rows}\n");
        let prompt = r.batcher.prompt_rows.load(Ordering::Relaxed);
        body += "# HELP clover_batch_prompt_tokens_total Prompt tokens evaluated inside batched steps\n";
        body += "# TYPE clover_batch_prompt_tokens_total counter\n";
        body += &format!("clover_batch_prompt_tokens_total {prompt}\n");
        let mixed = r.batcher.mixed_steps.load(Ordering::Relaxed);
        body += "# HELP clover_batch_mixed_steps_total Batched steps that decoded and evaluated a prompt batch in one pass\n";
        body += "# TYPE clover_batch_mixed_steps_total counter\n";
        body += &format!("clover_batch_mixed_steps_total {mixed}\n");
    }
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], body).into_response()
}

async fn not_found(State(app): State<Arc<App>>) -> Response {
    error_response(&app, ApiError::status(404, "no such endpoint"))
}

/// Everything `serve` needs to start the slots once the model is loaded.
pub struct SlotPlan {
    pub load: Box<dyn FnOnce() -> anyhow::Result<Arc<LoadedModel>> + Send>,
    pub session: crate::engine::SessionOptions,
    pub n_slots: usize,
    pub max_queue: usize,
    pub spec: Option<crate::spec::SpecConfig>,
    /// Decode the slots' next tokens in one forward pass (off: each slot
    /// runs its own, taking turns on the pool).
    pub batching: bool,
}

/// glibc raises its mmap threshold after a large block is freed, and then
/// keeps the memory of later large blocks (a request body of megabytes) in
/// its heaps: fixed thresholds give every block over 4 MiB back when it is
/// freed (and `trim_after` the rest), so RSS returns to where it was after
/// giant requests.
fn keep_heap_small() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only sets glibc's allocator parameters.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 4 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 8 << 20);
    }
}

/// How long before the shutdown deadline running generations are cancelled.
const CANCEL_AHEAD: Duration = Duration::from_millis(500);

/// Runs the server until SIGINT or SIGTERM: it then stops accepting, closes
/// connections that are not being answered, answers queued requests 503,
/// lets in-flight requests finish, cancels what is left at its next token
/// shortly before `shutdown_timeout`, and returns by then whatever clients
/// do.
pub fn serve(cfg: ServeConfig, plan: SlotPlan) -> anyhow::Result<()> {
    crate::signals::default_terminate();
    keep_heap_small();
    let fds = conn::raise_fd_limit();
    let wanted = cfg.limits.max_connections as u64 + 64;
    if fds > 0 && fds < wanted {
        eprintln!(
            "clover serve: warning: the open-file limit is {fds}: fewer connections than \
             --max-connections {} can be accepted (raise ulimit -n)",
            cfg.limits.max_connections
        );
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("clover-http")
        .enable_all()
        .build()?;
    let result = rt.block_on(async move {
        // `localhost` without the resolver (a static binary has no NSS
        // modules to load); addresses parse, other names are resolved.
        let host = match cfg.host.as_str() {
            "localhost" => "127.0.0.1",
            h => h,
        };
        let listener = tokio::net::TcpListener::bind((host, cfg.port))
            .await
            .map_err(|e| anyhow::anyhow!("listening on {}:{}: {e}", cfg.host, cfg.port))?;
        let addr = listener.local_addr()?;
        eprintln!("clover serve: listening on http://{addr} (loading the model)");
        let timeout = cfg.shutdown_timeout;
        let app = Arc::new(App {
            cfg,
            ready: OnceLock::new(),
            metrics: Arc::new(Metrics::default()),
            next_id: AtomicU64::new(1),
            stopping: tokio::sync::watch::Sender::new(false),
        });
        let loader = Arc::clone(&app);
        let (fail_tx, mut fail_rx) = mpsc::channel::<anyhow::Error>(1);
        std::thread::Builder::new()
            .name("clover-load".into())
            .spawn(move || {
                let result = (|| {
                    let model = (plan.load)()?;
                    let sched = Arc::new(Scheduler::new(plan.n_slots, plan.max_queue));
                    let batcher = slots::start(
                        Arc::clone(&model),
                        plan.session,
                        plan.n_slots,
                        plan.spec,
                        plan.batching,
                        Arc::clone(&sched),
                        Arc::clone(&loader.metrics),
                    )?;
                    // (A control token's text counts as written in the
                    // vocabulary, for --special-in-content.)
                    let tok = &model.tokenizer;
                    let max_piece = (0..tok.vocab_size() as u32)
                        .map(|i| {
                            let piece = tok.piece(i).map_or(0, <[u8]>::len);
                            piece.max(tok.id_to_token(i).map_or(0, str::len))
                        })
                        .max()
                        .unwrap_or(1);
                    let _ = loader.ready.set(Ready {
                        max_piece,
                        model,
                        sched,
                        batcher,
                    });
                    eprintln!(
                        "clover serve: ready: {} slots of {} positions",
                        plan.n_slots, loader.cfg.n_ctx_slot
                    );
                    Ok(())
                })();
                if let Err(e) = result {
                    let _ = fail_tx.blocking_send(e);
                }
            })?;
        let router = Router::new()
            .route("/v1/chat/completions", post(chat))
            .route("/v1/completions", post(completions))
            .route("/completion", post(completion))
            .route("/v1/messages", post(messages))
            .route("/v1/models", get(models))
            .route("/v1/models/{id}", get(model_by_id))
            .route("/v1/messages/count_tokens", post(count_tokens))
            .route("/health", get(health))
            .route("/tokenize", post(tokenize))
            .route("/detokenize", post(detokenize))
            .route("/props", get(props))
            .route("/slots", get(slots_info))
            .route("/models", get(models))
            .route("/v1/health", get(health))
            .route("/metrics", get(metrics_text))
            .fallback(not_found)
            .layer(axum::middleware::from_fn_with_state(Arc::clone(&app), cors))
            .with_state(Arc::clone(&app));
        let on_stop = Arc::clone(&app);
        let shutdown = async move {
            use tokio::signal::unix::{signal, SignalKind};
            let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
            let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
            tokio::select! {
                _ = term.recv() => {},
                _ = int.recv() => {},
            }
            eprintln!(
                "clover serve: stopping: no new requests; in-flight ones get {:.0} s",
                timeout.as_secs_f64()
            );
            on_stop.stopping.send_replace(true);
            if let Some(r) = on_stop.ready.get() {
                r.sched.close();
                let sched = Arc::clone(&r.sched);
                // Generations still running are cancelled a moment before
                // the deadline, so their replies can end before it.
                let cut = timeout.saturating_sub(CANCEL_AHEAD.min(timeout / 4));
                tokio::spawn(async move {
                    tokio::time::sleep(cut).await;
                    sched.cancel_all.store(true, Ordering::Relaxed);
                });
            }
        };
        let limits = app.cfg.limits.clone();
        let stats = Arc::clone(&app.metrics.conns);
        // (A moment even at --shutdown-timeout 0, for the cut replies' ends.)
        let drain = timeout.max(Duration::from_millis(250));
        let server = conn::run(listener, router, limits, stats, shutdown, drain);
        tokio::select! {
            _ = server => {},
            Some(e) = fail_rx.recv() => return Err(e),
        }
        eprintln!("clover serve: stopped");
        Ok(())
    });
    // Prompts still being parsed on the blocking pool are not waited for.
    rt.shutdown_timeout(Duration::from_millis(100));
    result
}
