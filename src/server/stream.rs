//! Server-sent events for OpenAI's chat and completions (one chunk per
//! piece of text, the finish, the usage when asked, `[DONE]`) and
//! llama-server's own `/completion` stream (bare objects, then the final
//! result). Anthropic's events are [`super::anthropic::stream`]'s.

use std::convert::Infallible;
use std::sync::Arc;

use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use tokio::sync::mpsc;

use crate::engine::LoadedModel;
use crate::sample::TokenLogprob;

use super::api::ApiError;
use super::app::{now_secs, App, STREAM_BUFFER};
use super::error::shutting_down;
use super::generate::{Assembler, Part};
use super::llama;
use super::logprobs::{chat_logprobs, completion_logprobs, echoed_logprobs, native_probs};
use super::request::{Kind, Prepared};
use super::slots::Msg;

/// A streaming response: server-sent events, one chunk per piece of text,
/// a final chunk with the finish reason, the usage chunk when asked, then
/// `[DONE]`. A client that goes away drops the stream, which drops the
/// slot's receiver: the slot stops at its next token.
pub(crate) fn stream(
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
                let _ =
                    send(serde_json::to_value(llama::result(&p, 0, "", &done)).unwrap_or_default())
                        .await;
                return;
            }
        };
        last["timings"] = serde_json::to_value(done.timings()).unwrap_or_default();
        if !send(last.clone()).await {
            return;
        }
        if include_usage {
            let mut u = last;
            u["choices"] = json!([]);
            u["usage"] = serde_json::to_value(done.usage()).unwrap_or_default();
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
