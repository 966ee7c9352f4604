//! OpenAI's `GET /v1/models` (also `/models`) and `GET /v1/models/{id}`:
//! the one model this server has.

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response;
use serde::Serialize;

use super::api::ApiError;
use super::app::{answer, authorize, now_secs, App, AppState};

/// The model as `/v1/models` lists it.
#[derive(Serialize)]
struct Model {
    id: String,
    object: &'static str,
    created: u64,
    owned_by: &'static str,
    meta: Meta,
}

#[derive(Serialize)]
struct Meta {
    n_ctx_slot: usize,
}

#[derive(Serialize)]
struct List {
    object: &'static str,
    data: Vec<Model>,
}

fn model(app: &App) -> Model {
    Model {
        id: app.cfg.model_name.clone(),
        object: "model",
        created: now_secs(),
        owned_by: "clover",
        meta: Meta {
            n_ctx_slot: app.cfg.n_ctx_slot,
        },
    }
}

pub(crate) async fn list(State(app): AppState, headers: HeaderMap) -> Response {
    answer(authorize(&app, &headers).map(|_| List {
        object: "list",
        data: vec![model(&app)],
    }))
}

/// `GET /v1/models/{id}` (the OpenAI clients' `models.retrieve`).
pub(crate) async fn by_id(
    State(app): AppState,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    answer(authorize(&app, &headers).and_then(|_| {
        if id != app.cfg.model_name {
            let e = ApiError::field(
                "model",
                format!(
                    "the model '{id}' does not exist; this server has '{}'",
                    app.cfg.model_name
                ),
            );
            return Err(ApiError { status: 404, ..e });
        }
        Ok(model(&app))
    }))
}
