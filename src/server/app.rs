//! The application: its state, the router (every route, its fallbacks, CORS
//! and the status counter), and what every handler shares — the API key,
//! reading a body, the blocking pool.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::engine::LoadedModel;

use super::error::{shutting_down, ApiError};
use super::metrics::Metrics;
use super::slots::{Batcher, Scheduler};
use super::ServeConfig;

/// The loaded model and its slots.
pub(crate) struct Ready {
    pub model: Arc<LoadedModel>,
    /// The longest text of any token, in bytes: a text of `n` bytes is at
    /// least `n / max_piece` tokens, known before it is tokenized.
    pub max_piece: usize,
    pub sched: Arc<Scheduler>,
    pub batcher: Arc<Batcher>,
}

pub(crate) struct App {
    pub cfg: ServeConfig,
    pub ready: OnceLock<Ready>,
    pub metrics: Arc<Metrics>,
    pub next_id: AtomicU64,
    /// Set when the server begins to stop.
    pub stopping: tokio::sync::watch::Sender<bool>,
}

/// What handlers receive.
pub(crate) type AppState = State<Arc<App>>;

/// Per-stream buffer of messages between a slot and its client.
pub(crate) const STREAM_BUFFER: usize = 64;

pub(crate) fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A typed response body as JSON (200), or the error.
pub(crate) fn answer<T: Serialize>(result: Result<T, ApiError>) -> Response {
    match result {
        Ok(v) => axum::Json(v).into_response(),
        Err(e) => e.into_response(),
    }
}

/// `--api-key`: `Authorization: Bearer KEY` on every `/v1` request.
pub(crate) fn authorize(app: &App, headers: &HeaderMap) -> Result<(), ApiError> {
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

pub(crate) fn ready(app: &App) -> Result<&Ready, ApiError> {
    app.ready
        .get()
        .ok_or_else(|| ApiError::status(503, "Loading model"))
}

/// The request's body, whole: at most `--max-body` bytes, within
/// `--body-timeout`. A body still arriving when the server begins to stop
/// is not waited for (503).
pub(crate) async fn read_body(app: &App, body: Body) -> Result<axum::body::Bytes, ApiError> {
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
pub(crate) async fn off_runtime<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(|_| Err(ApiError::status(500, "the request's worker failed")))
}

/// Returns freed memory to the system after a large request (whose body
/// was `body_len` bytes).
pub(crate) fn trim_after(body_len: usize) {
    if body_len >= TRIM_BODY {
        // SAFETY: malloc_trim only walks glibc's own heap.
        #[cfg(target_env = "gnu")]
        unsafe {
            libc::malloc_trim(0);
        }
    }
}

/// Refuses a prompt whose text alone (`bytes` long) is more tokens than a
/// slot holds, before it is rendered or tokenized: no token's text is longer
/// than `max_piece` bytes.
pub(crate) fn check_text_size(app: &App, r: &Ready, bytes: usize) -> Result<(), ApiError> {
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

/// Counts every response by status for `/metrics` (not `/metrics` itself).
pub(crate) async fn count(
    State(app): AppState,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let counted = req.uri().path() != "/metrics";
    let r = next.run(req).await;
    if counted {
        app.metrics.request(r.status().as_u16());
    }
    r
}

/// CORS, as llama-server answers browsers: a preflight (`OPTIONS` with
/// `Access-Control-Request-Method`) gets 204 with the allowed methods and
/// headers; every answer to an allowed `Origin` names that origin. Any
/// origin is allowed unless `--cors-origins` lists them.
pub(crate) async fn cors(
    State(app): AppState,
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
