//! `clover serve`: an OpenAI-compatible HTTP server.
//!
//! The async side (axum on tokio) only moves requests and text: it checks a
//! request, renders and tokenizes its prompt, hands a [`slots::Job`] to the
//! [`slots::Scheduler`], and turns what the slot sends back into a JSON
//! response or server-sent events. Generation runs on the slots' own threads
//! ([`slots`]). The listener opens before the model is loaded: `/health`
//! answers 503 until it is ready.
//!
//! One module per dialect, named for what it serves:
//! - [`openai_chat`]: `POST /v1/chat/completions`;
//! - [`openai_completions`]: `POST /v1/completions`;
//! - [`anthropic`]: `POST /v1/messages`, `POST /v1/messages/count_tokens`
//!   (the request's conversion in [`anthropic_request`]);
//! - [`llama`]: llama-server's own `POST /completion`, `/tokenize`,
//!   `/detokenize`, `GET /props`, `/slots`, `/health`, `/metrics`;
//! - [`models`]: `GET /v1/models`, `GET /v1/models/{id}`.
//!
//! Shared: [`app`] (state, router, auth, bodies), [`request`] (the one
//! internal request the dialects become) with [`sampling`], [`api`] and
//! [`fields`] (the fields, typed and checked), [`generate`] (the bridge to
//! the scheduler), [`stream`] (server-sent events), [`logprobs`], [`error`]
//! (the one error type, in each dialect's shape), [`conn`] (connections),
//! [`slots`] with [`batcher`], [`done`], [`metrics`], [`text`].

pub mod anthropic;
pub mod anthropic_request;
pub mod api;
pub mod app;
pub mod batcher;
pub mod conn;
pub mod done;
pub mod error;
pub mod fields;
pub mod generate;
pub mod llama;
pub mod logprobs;
pub mod metrics;
pub mod models;
pub mod openai_chat;
pub mod openai_completions;
pub mod parts;
pub mod request;
pub mod sampling;
pub mod slots;
pub mod stream;
pub mod text;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::sync::mpsc;

use crate::engine::LoadedModel;

use app::{App, Ready};
use axum::routing::{get, post};
use axum::Router;
use metrics::Metrics;
use slots::Scheduler;

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

/// Everything `serve` needs to start the slots once the model is loaded.
pub struct SlotPlan {
    pub load: Box<dyn FnOnce() -> anyhow::Result<Arc<LoadedModel>> + Send>,
    pub session: crate::engine::SessionOptions,
    pub n_slots: usize,
    pub max_queue: usize,
    /// Slots speculate: how, and what drafts.
    pub spec: Option<(crate::spec::SpecConfig, crate::spec::SpecChoice)>,
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
        let router = router(Arc::clone(&app));
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

/// Every route: each dialect's module has its handlers.
pub(crate) fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(openai_chat::handle))
        .route("/v1/completions", post(openai_completions::handle))
        .route("/v1/messages", post(anthropic::messages))
        .route("/v1/messages/count_tokens", post(anthropic::count_tokens))
        .route("/v1/models", get(models::list))
        .route("/v1/models/{id}", get(models::by_id))
        .route("/models", get(models::list))
        .route("/completion", post(llama::completion))
        .route("/tokenize", post(llama::tokenize))
        .route("/detokenize", post(llama::detokenize))
        .route("/props", get(llama::props))
        .route("/slots", get(llama::slots))
        .route("/health", get(llama::health))
        .route("/v1/health", get(llama::health))
        .route("/metrics", get(llama::metrics))
        .fallback(error::not_found)
        .method_not_allowed_fallback(error::method_not_allowed)
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&app),
            app::count,
        ))
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&app),
            app::cors,
        ))
        .with_state(app)
}
