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

pub mod api;
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
    pub shutdown_timeout: Duration,
}

/// The loaded model and its slots.
struct Ready {
    model: Arc<LoadedModel>,
    sched: Arc<Scheduler>,
    batcher: Arc<slots::Batcher>,
}

struct App {
    cfg: ServeConfig,
    ready: OnceLock<Ready>,
    metrics: Arc<Metrics>,
    next_id: AtomicU64,
}

/// Per-stream buffer of messages between a slot and its client.
const STREAM_BUFFER: usize = 64;

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn error_response(app: &App, e: ApiError) -> Response {
    app.metrics.request(e.status);
    let status = StatusCode::from_u16(e.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut r = (status, axum::Json(e.body())).into_response();
    if e.status == 503 {
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    r
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
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    match given {
        Some(g) if g == key => Ok(()),
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

async fn read_body(app: &App, body: Body) -> Result<Map<String, Value>, ApiError> {
    let bytes = axum::body::to_bytes(body, app.cfg.max_body)
        .await
        .map_err(|_| {
            ApiError::status(
                413,
                format!("the request body is larger than {} bytes", app.cfg.max_body),
            )
        })?;
    api::object(&bytes)
}

/// The kinds of endpoint that generate.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Chat,
    Completion,
}

/// A checked request, ready for a slot.
struct Prepared {
    kind: Kind,
    common: api::Common,
    prompt: Vec<u32>,
    starts_thinking: bool,
    tools: bool,
}

fn prepare(app: &App, r: &Ready, kind: Kind, o: &Map<String, Value>) -> Result<Prepared, ApiError> {
    let common = api::common(o)?;
    let (text, tools) = match kind {
        Kind::Chat => {
            let messages = api::messages(o)?;
            let tools = api::tools(o)?;
            let text = r
                .model
                .template
                .render_json(&messages, tools.as_ref(), true)
                .map_err(|e| ApiError::bad(format!("chat template: {e}")))?;
            (text, tools.is_some())
        }
        Kind::Completion => (api::prompt(o)?, false),
    };
    let starts_thinking = kind == Kind::Chat && text.trim_end().ends_with("<think>");
    let prompt = r
        .model
        .tokenize(&text)
        .map_err(|e| ApiError::bad(format!("tokenizing the prompt: {e}")))?;
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
    Ok(Prepared {
        kind,
        common,
        prompt,
        starts_thinking,
        tools,
    })
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

/// Submits the job; the receiving end of its messages.
fn submit(r: &Ready, p: &Prepared) -> Result<mpsc::Receiver<Msg>, ApiError> {
    let (tx, rx) = mpsc::channel(STREAM_BUFFER);
    let job = Job {
        prompt: p.prompt.clone(),
        sampler: p.common.sampler.clone(),
        n_predict: p.common.n_predict,
        stop: p.common.stop.clone(),
        starts_thinking: p.starts_thinking,
        ignore_eos: p.common.ignore_eos,
        tx,
    };
    match r.sched.submit(job) {
        Ok(()) => Ok(rx),
        Err(Refused::QueueFull) => Err(ApiError::status(
            503,
            "every slot is busy and the queue is full; retry later",
        )),
        Err(Refused::ShuttingDown) => Err(ApiError::status(503, "the server is shutting down")),
    }
}

/// Turns a slot's messages into response pieces: text (split into content,
/// reasoning and tool calls) and the end.
struct Assembler {
    kind: Kind,
    tools: Option<ToolCallParser>,
    n_calls: usize,
    id: String,
}

/// One piece of a response.
enum Part {
    Content(String),
    Reasoning(String),
    Call(Value),
}

impl Assembler {
    fn text(&mut self, text: String, thinking: bool) -> Vec<Part> {
        if thinking && self.kind == Kind::Chat {
            return vec![Part::Reasoning(text)];
        }
        match &mut self.tools {
            Some(p) => {
                let pieces = p.push(&text);
                self.pieces(pieces)
            }
            None => vec![Part::Content(text)],
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
                Piece::Text(t) => Part::Content(t),
                Piece::Call { name, arguments } => {
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
        let r = ready(&app)?;
        let o = read_body(&app, body).await?;
        let p = prepare(&app, r, kind, &o)?;
        let rx = submit(r, &p)?;
        Ok::<_, ApiError>((p, rx))
    }
    .await;
    let (p, rx) = match result {
        Ok(x) => x,
        Err(e) => return error_response(&app, e),
    };
    let n = app.next_id.fetch_add(1, Ordering::Relaxed);
    let id = match kind {
        Kind::Chat => format!("chatcmpl-clover-{n}"),
        Kind::Completion => format!("cmpl-clover-{n}"),
    };
    let asm = Assembler {
        kind,
        tools: p.tools.then(ToolCallParser::default),
        n_calls: 0,
        id: id.clone(),
    };
    if p.common.stream {
        app.metrics.request(200);
        stream(app, p, rx, asm, id)
    } else {
        whole(app, p, rx, asm, id).await
    }
}

/// A non-streaming response: everything, then one JSON object.
async fn whole(
    app: Arc<App>,
    p: Prepared,
    mut rx: mpsc::Receiver<Msg>,
    mut asm: Assembler,
    id: String,
) -> Response {
    let (mut content, mut reasoning, mut calls) = (String::new(), String::new(), Vec::new());
    let mut take = |parts: Vec<Part>| {
        for part in parts {
            match part {
                Part::Content(t) => content.push_str(&t),
                Part::Reasoning(t) => reasoning.push_str(&t),
                Part::Call(v) => calls.push(v),
            }
        }
    };
    let done = loop {
        match rx.recv().await {
            Some(Msg::Text { text, thinking }) => take(asm.text(text, thinking)),
            Some(Msg::Done(d)) => break d,
            Some(Msg::Error(e)) => return error_response(&app, ApiError::status(500, e)),
            None => {
                return error_response(
                    &app,
                    ApiError::status(500, "the slot ended without a result"),
                )
            }
        }
    };
    take(asm.finish());
    let created = now_secs();
    let model = app.cfg.model_name.clone();
    let finish = asm.finish_reason(&done);
    let v = match p.kind {
        Kind::Chat => {
            let mut message = json!({"role": "assistant", "content": content});
            if !reasoning.is_empty() {
                message["reasoning_content"] = Value::String(reasoning);
            }
            if !calls.is_empty() {
                message["tool_calls"] = Value::Array(calls);
            }
            json!({
                "id": id, "object": "chat.completion", "created": created, "model": model,
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": usage(&done), "timings": timings(&done),
            })
        }
        Kind::Completion => json!({
            "id": id, "object": "text_completion", "created": created, "model": model,
            "choices": [{"index": 0, "text": content, "logprobs": null, "finish_reason": finish}],
            "usage": usage(&done), "timings": timings(&done),
        }),
    };
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
) -> Response {
    let (tx, out) = mpsc::channel::<Result<Event, Infallible>>(STREAM_BUFFER);
    let created = now_secs();
    let model = app.cfg.model_name.clone();
    let kind = p.kind;
    let include_usage = p.common.include_usage;
    let chunk = move |choice: Value| -> Value {
        let object = match kind {
            Kind::Chat => "chat.completion.chunk",
            Kind::Completion => "text_completion",
        };
        json!({"id": id, "object": object, "created": created, "model": model, "choices": [choice]})
    };
    let part_choice = move |part: Part| -> Value {
        match (kind, part) {
            (Kind::Chat, Part::Content(t)) => {
                json!({"index": 0, "delta": {"content": t}, "finish_reason": null})
            }
            (Kind::Chat, Part::Reasoning(t)) => {
                json!({"index": 0, "delta": {"reasoning_content": t}, "finish_reason": null})
            }
            (Kind::Chat, Part::Call(c)) => {
                json!({"index": 0, "delta": {"tool_calls": [c]}, "finish_reason": null})
            }
            (Kind::Completion, Part::Content(t) | Part::Reasoning(t)) => {
                json!({"index": 0, "text": t, "logprobs": null, "finish_reason": null})
            }
            (Kind::Completion, Part::Call(_)) => {
                json!({"index": 0, "text": "", "finish_reason": null})
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
        let done = loop {
            match rx.recv().await {
                Some(Msg::Text { text, thinking }) => {
                    for part in asm.text(text, thinking) {
                        if !send(chunk(part_choice(part))).await {
                            return;
                        }
                    }
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
            if !send(chunk(part_choice(part))).await {
                return;
            }
        }
        let finish = asm.finish_reason(&done);
        let mut last = match kind {
            Kind::Chat => chunk(json!({"index": 0, "delta": {}, "finish_reason": finish})),
            Kind::Completion => {
                chunk(json!({"index": 0, "text": "", "logprobs": null, "finish_reason": finish}))
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

async fn chat(State(app): State<Arc<App>>, headers: HeaderMap, body: Body) -> Response {
    generate(app, Kind::Chat, headers, body).await
}

async fn completions(State(app): State<Arc<App>>, headers: HeaderMap, body: Body) -> Response {
    generate(app, Kind::Completion, headers, body).await
}

async fn models(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    if let Err(e) = authorize(&app, &headers) {
        return error_response(&app, e);
    }
    let v = json!({"object": "list", "data": [{
        "id": app.cfg.model_name, "object": "model", "created": now_secs(), "owned_by": "clover",
        "meta": {"n_ctx_slot": app.cfg.n_ctx_slot},
    }]});
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

/// Runs the server until SIGINT or SIGTERM: it then stops accepting, lets
/// in-flight requests finish for up to `shutdown_timeout`, cancels what is
/// left at its next token, and returns.
pub fn serve(cfg: ServeConfig, plan: SlotPlan) -> anyhow::Result<()> {
    crate::signals::default_terminate();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("clover-http")
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind((cfg.host.as_str(), cfg.port))
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
                    let _ = loader.ready.set(Ready {
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
            .route("/v1/models", get(models))
            .route("/health", get(health))
            .route("/metrics", get(metrics_text))
            .fallback(not_found)
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
            if let Some(r) = on_stop.ready.get() {
                r.sched.close();
                let sched = Arc::clone(&r.sched);
                tokio::spawn(async move {
                    tokio::time::sleep(timeout).await;
                    sched.cancel_all.store(true, Ordering::Relaxed);
                });
            }
        };
        let server = axum::serve(listener, router).with_graceful_shutdown(shutdown);
        tokio::select! {
            r = server => r.map_err(anyhow::Error::from)?,
            Some(e) = fail_rx.recv() => return Err(e),
        }
        eprintln!("clover serve: stopped");
        Ok(())
    })
}
