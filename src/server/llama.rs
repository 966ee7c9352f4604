//! llama-server's own endpoints, for scripts written against it:
//! `POST /completion` (its request and result shapes, its stream),
//! `POST /tokenize`, `POST /detokenize`, `GET /props`, `GET /slots`,
//! `GET /health` (also `/v1/health`) and `GET /metrics`.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::api::{self, ApiError};
use super::app::{answer, authorize, off_runtime, read_body, ready, App, AppState, Ready};
use super::done::{Done, Timings};
use super::fields::{parse, Field, Int};
use super::generate::{generate, Reply, Whole};
use super::logprobs::{native_probs, TokenEntry};
use super::request::{raw_request, Kind, Prepared};
use super::sampling::Sampling;

/// `POST /completion`.
pub(crate) async fn completion(State(app): AppState, headers: HeaderMap, body: Body) -> Response {
    let reply = Reply {
        last: Some(|p, done| serde_json::to_value(result(p, 0, "", done)).unwrap_or_default()),
        ..Reply::new(Kind::Native, prepare, |_, _, w| response(w))
    };
    generate(app, reply, headers, body).await
}

/// `/completion`'s request: the shared fields (`n_predict` among them),
/// `prompt`, and `n_probs` (alternatives per token, 0: none).
#[derive(Deserialize, Default)]
#[serde(default)]
struct NativeRequest {
    #[serde(flatten)]
    sampling: Sampling,
    prompt: Option<Value>,
    n_probs: Field<Int>,
}

fn prepare(app: &App, r: &Ready, body: &[u8]) -> Result<Prepared, ApiError> {
    let q: NativeRequest = parse(body)?;
    let (n, prompt) = (q.n_probs, q.prompt.as_ref());
    let kind = Kind::Native;
    raw_request(
        app,
        r,
        kind,
        &q.sampling,
        prompt,
        || api::n_probs(n),
        || Ok(false),
    )
}

/// `/completion`'s result: the text, how it stopped, the counts and
/// `timings`.
#[derive(Serialize)]
pub(crate) struct NativeResult {
    index: usize,
    content: String,
    tokens: [u32; 0],
    id_slot: usize,
    stop: bool,
    tokens_predicted: usize,
    tokens_evaluated: usize,
    tokens_cached: usize,
    prompt: String,
    has_new_line: bool,
    truncated: bool,
    stop_type: &'static str,
    stopping_word: String,
    generation_settings: GenerationSettings,
    timings: Timings,
    #[serde(skip_serializing_if = "Option::is_none")]
    completion_probabilities: Option<Vec<TokenEntry>>,
}

#[derive(Serialize)]
struct GenerationSettings {
    n_predict: i64,
    temperature: f32,
    top_k: i32,
    top_p: f32,
    min_p: f32,
    seed: Option<u64>,
    stop: Vec<String>,
    ignore_eos: bool,
}

/// The final result of prompt `index`, whose text was `content`.
pub(crate) fn result(p: &Prepared, index: usize, content: &str, done: &Done) -> NativeResult {
    let stop_type = match (done.length, &done.stopping_word) {
        (true, _) => "limit",
        (false, Some(_)) => "word",
        (false, None) => "eos",
    };
    let s = &p.common.sampler;
    NativeResult {
        index,
        content: content.to_string(),
        tokens: [],
        id_slot: done.slot,
        stop: true,
        tokens_predicted: done.predicted_n,
        tokens_evaluated: done.prompt_n,
        tokens_cached: done.cached_n,
        prompt: p.texts[index].clone(),
        has_new_line: content.contains('\n'),
        truncated: false,
        stop_type,
        stopping_word: done.stopping_word.clone().unwrap_or_default(),
        generation_settings: GenerationSettings {
            n_predict: p.common.n_predict.map_or(-1, |n| n as i64),
            temperature: s.temp,
            top_k: s.top_k,
            top_p: s.top_p,
            min_p: s.min_p,
            seed: s.seed,
            stop: p.common.stop.clone(),
            ignore_eos: p.common.ignore_eos,
        },
        timings: done.timings(),
        completion_probabilities: None,
    }
}

/// One prompt is answered with its result, several with a list.
pub(crate) fn response(w: Whole<'_>) -> Response {
    let mut results: Vec<NativeResult> = w
        .choices
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let mut v = result(w.p, i, &c.content, &c.done);
            if w.p.logprobs.is_some() {
                v.completion_probabilities = Some(native_probs(&w.model.tokenizer, &c.logprobs));
            }
            v
        })
        .collect();
    match results.len() {
        1 => axum::Json(results.remove(0)).into_response(),
        _ => axum::Json(results).into_response(),
    }
}

/// `/tokenize`'s request.
#[derive(Deserialize, Default)]
#[serde(default)]
struct TokenizeRequest {
    content: Field<String>,
    /// A BOS where the model wants one (default off).
    add_special: Field<bool>,
    /// Control-token texts become their ids (default on).
    parse_special: Field<bool>,
    /// Each id with its text.
    with_pieces: Field<bool>,
}

#[derive(Serialize)]
struct Tokens {
    tokens: Vec<Token>,
}

#[derive(Serialize)]
#[serde(untagged)]
enum Token {
    Id(u32),
    WithPiece { id: u32, piece: Piece },
}

/// A token's text: a string when it is UTF-8, else its bytes.
#[derive(Serialize)]
#[serde(untagged)]
enum Piece {
    Text(String),
    Bytes(Vec<u8>),
}

/// llama-server's `POST /tokenize`: `content`, `add_special`,
/// `parse_special`, `with_pieces`.
pub(crate) async fn tokenize(State(app): AppState, headers: HeaderMap, body: Body) -> Response {
    let result = async {
        authorize(&app, &headers)?;
        ready(&app)?;
        let bytes = read_body(&app, body).await?;
        let worker = Arc::clone(&app);
        off_runtime(move || tokenize_body(&worker, &bytes)).await
    }
    .await;
    answer(result)
}

/// `/tokenize`'s answer to a body (run off the HTTP runtime).
fn tokenize_body(app: &App, bytes: &[u8]) -> Result<Tokens, ApiError> {
    let r = ready(app)?;
    let req: TokenizeRequest = parse(bytes)?;
    let Some(text) = req.content.get("content", "a string")? else {
        return Err(ApiError::field("content", "'content' must be a string"));
    };
    let add_special = req
        .add_special
        .get("add_special", "a boolean")?
        .unwrap_or(false);
    let parse_special = req
        .parse_special
        .get("parse_special", "a boolean")?
        .unwrap_or(true);
    let with_pieces = req
        .with_pieces
        .get("with_pieces", "a boolean")?
        .unwrap_or(false);
    let tok = &r.model.tokenizer;
    let mut ids = tok
        .encode(&text, parse_special)
        .map_err(|e| ApiError::bad(format!("tokenizing: {e}")))?;
    // `encode` prepends the model's BOS when it wants one.
    if tok.add_bos() && !add_special && !ids.is_empty() {
        ids.remove(0);
    }
    let tokens = ids
        .iter()
        .map(|&id| match with_pieces {
            false => Token::Id(id),
            true => {
                let bytes = tok.piece(id).unwrap_or(&[]);
                let piece = match std::str::from_utf8(bytes) {
                    Ok(s) => Piece::Text(s.to_string()),
                    Err(_) => Piece::Bytes(bytes.to_vec()),
                };
                Token::WithPiece { id, piece }
            }
        })
        .collect();
    Ok(Tokens { tokens })
}

/// `/detokenize`'s request.
#[derive(Deserialize, Default)]
#[serde(default)]
struct DetokenizeRequest {
    tokens: Field<Vec<u32>>,
}

#[derive(Serialize)]
struct Content {
    content: String,
}

/// llama-server's `POST /detokenize`: `tokens` (ids) to `content`.
pub(crate) async fn detokenize(State(app): AppState, headers: HeaderMap, body: Body) -> Response {
    let result = async {
        authorize(&app, &headers)?;
        let r = ready(&app)?;
        let req: DetokenizeRequest = parse(&read_body(&app, body).await?)?;
        let must = "'tokens' must be a list of token ids";
        let ids = req
            .tokens
            .get("tokens", "a list of token ids")?
            .ok_or_else(|| ApiError::field("tokens", must))?;
        let content = r
            .model
            .tokenizer
            .decode(&ids)
            .map_err(|e| ApiError::field("tokens", e.to_string()))?;
        Ok(Content { content })
    }
    .await;
    answer(result)
}

#[derive(Serialize)]
struct SlotInfo {
    id: usize,
    n_ctx: usize,
    is_processing: bool,
    n_tokens_cached: usize,
}

/// llama-server's `GET /slots`: each slot's id, context, whether it is
/// busy, and the tokens its sequence kept from its last request.
pub(crate) async fn slots(State(app): AppState, headers: HeaderMap) -> Response {
    answer(
        authorize(&app, &headers)
            .and_then(|_| ready(&app))
            .map(|r| {
                let states = r.sched.slot_states().into_iter().enumerate();
                states
                    .map(|(id, (busy, n))| SlotInfo {
                        id,
                        n_ctx: app.cfg.n_ctx_slot,
                        is_processing: busy,
                        n_tokens_cached: n,
                    })
                    .collect::<Vec<_>>()
            }),
    )
}

#[derive(Serialize)]
struct Props {
    default_generation_settings: DefaultSettings,
    total_slots: usize,
    model_path: String,
    modalities: Modalities,
    build_info: &'static str,
}

#[derive(Serialize)]
struct DefaultSettings {
    n_ctx: usize,
    params: Params,
}

#[derive(Serialize)]
struct Params {
    temperature: f64,
    top_k: i32,
    top_p: f64,
    min_p: f64,
    repeat_penalty: f64,
    repeat_last_n: i32,
    presence_penalty: f64,
    frequency_penalty: f64,
}

#[derive(Serialize)]
struct Modalities {
    vision: bool,
    audio: bool,
}

/// llama-server's `GET /props`: the slots, their context and the sampling
/// defaults a request starts from.
pub(crate) async fn props(State(app): AppState, headers: HeaderMap) -> Response {
    answer(
        authorize(&app, &headers)
            .and_then(|_| ready(&app))
            .map(|r| {
                let d = crate::sample::SamplerParams::default();
                // f32 as its shortest decimal (0.8, not 0.800000011920929).
                let f = |x: f32| x.to_string().parse::<f64>().unwrap_or(x as f64);
                Props {
                    default_generation_settings: DefaultSettings {
                        n_ctx: app.cfg.n_ctx_slot,
                        params: Params {
                            temperature: f(d.temp),
                            top_k: d.top_k,
                            top_p: f(d.top_p),
                            min_p: f(d.min_p),
                            repeat_penalty: f(d.repeat_penalty),
                            repeat_last_n: d.repeat_last_n,
                            presence_penalty: f(d.presence_penalty),
                            frequency_penalty: f(d.frequency_penalty),
                        },
                    },
                    total_slots: r.sched.load().2,
                    model_path: r.model.path.display().to_string(),
                    modalities: Modalities {
                        vision: false,
                        audio: false,
                    },
                    build_info: concat!("clover ", env!("CARGO_PKG_VERSION")),
                }
            }),
    )
}

#[derive(Serialize)]
struct Health {
    status: &'static str,
}

/// `GET /health`: 503 while the model loads, then 200.
pub(crate) async fn health(State(app): AppState) -> Response {
    answer(ready(&app).map(|_| Health { status: "ok" }))
}

/// `GET /metrics`: Prometheus' text format.
pub(crate) async fn metrics(State(app): AppState) -> Response {
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
