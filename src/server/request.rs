//! The one internal request every generating dialect becomes: the prompt
//! (rendered and tokenized), the sampling and stopping fields, what to
//! report. Each dialect's module has its own `#[derive(Deserialize)]`
//! request type and turns it into a [`Prepared`] with the pieces here;
//! [`super::generate`] hands it to the slots.

use std::sync::Arc;

use serde_json::Value;

use super::api::{self, ApiError};
use super::app::{check_text_size, App, Ready};
use super::sampling::{Common, Sampling};

/// The kinds of endpoint that generate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Chat,
    Completion,
    /// llama-server's own `POST /completion`.
    Native,
    /// Anthropic's `POST /v1/messages` (run as the chat request it means).
    Anthropic,
}

impl Kind {
    /// The dialect of the kind's errors.
    pub fn dialect(self) -> super::error::Dialect {
        match self {
            Kind::Anthropic => super::error::Dialect::Anthropic,
            _ => super::error::Dialect::OpenAi,
        }
    }
}

/// A checked request, ready for a slot.
#[derive(Clone)]
pub(crate) struct Prepared {
    pub kind: Kind,
    pub common: Common,
    /// One prompt per choice (several only for completions).
    pub prompts: Vec<Vec<u32>>,
    /// Completions' `echo`: each choice's text starts with its prompt's.
    pub echo: bool,
    /// Each prompt as text.
    pub texts: Vec<String>,
    pub starts_thinking: bool,
    pub tools: bool,
    /// Alternatives per token's log-probability; `None`: none asked for.
    pub logprobs: Option<usize>,
    /// JSON mode.
    pub json: bool,
    /// A forced tool call (`tool_choice` required or named).
    pub tool_call: Option<Arc<Vec<(String, crate::constrain::tools::Shape)>>>,
    pub logit_bias: Vec<(u32, f32)>,
}

/// The bytes of the messages' texts (what any rendering of them holds).
pub(crate) fn message_text_bytes(messages: &Value) -> usize {
    messages
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m.get("content").and_then(Value::as_str))
        .map(str::len)
        .sum()
}

/// A chat request's prompt: the messages rendered with the chat template
/// and tokenized, whether it opens `<think>`, whether tools were offered,
/// and the forced tool call, if any.
pub(crate) struct ChatPrompt {
    pub text: String,
    pub ids: Vec<u32>,
    pub tools: bool,
    pub starts_thinking: bool,
    pub tool_call: Option<Arc<Vec<(String, crate::constrain::tools::Shape)>>>,
}

/// A chat request's `messages`, `tools` and `tool_choice`, as given.
#[derive(Clone, Debug, Default, serde::Deserialize)]
#[serde(default)]
pub(crate) struct ChatFields {
    pub messages: Option<Value>,
    pub tools: Option<Value>,
    pub tool_choice: Option<Value>,
}

/// Renders a chat request's `messages` and `tools` (after `tool_choice`).
pub(crate) fn chat_prompt(app: &App, r: &Ready, c: &ChatFields) -> Result<ChatPrompt, ApiError> {
    let messages = api::messages(c.messages.as_ref())?;
    let mut tools = api::tools(c.tools.as_ref())?;
    let mut tool_call = None;
    match api::tool_choice(c.tool_choice.as_ref(), tools.as_ref())? {
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
    let starts_thinking = text.trim_end().ends_with("<think>");
    Ok(ChatPrompt {
        text,
        ids,
        tools: tools.is_some(),
        starts_thinking,
        tool_call,
    })
}

/// A raw prompt list (`/v1/completions`, `/completion`): each tokenized
/// (text) or checked against the vocabulary (ids), with its text.
pub(crate) fn raw_prompts(
    app: &App,
    r: &Ready,
    prompt: Option<&Value>,
) -> Result<(Vec<Vec<u32>>, Vec<String>), ApiError> {
    let (mut prompts, mut texts) = (Vec::new(), Vec::new());
    let n_vocab = r.model.model.n_vocab();
    for p in api::prompts(prompt)? {
        match p {
            api::PromptIn::Text(t) => {
                check_text_size(app, r, t.len())?;
                let ids = r
                    .model
                    .tokenize(&t)
                    .map_err(|e| ApiError::bad(format!("tokenizing the prompt: {e}")))?;
                prompts.push(ids);
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
    Ok((prompts, texts))
}

/// What a dialect's request means, before its prompts are checked.
pub(crate) struct Parts {
    pub kind: Kind,
    pub prompts: Vec<Vec<u32>>,
    pub texts: Vec<String>,
    pub echo: bool,
    pub starts_thinking: bool,
    pub tools: bool,
    pub logprobs: Option<usize>,
    pub tool_call: Option<Arc<Vec<(String, crate::constrain::tools::Shape)>>>,
}

/// The shared fields checked, in the order every dialect checks them:
/// sampling and limits, then (after the dialect's log-probabilities) the
/// output format and the bias.
pub(crate) struct Checked {
    pub common: Common,
    pub json: bool,
    pub logit_bias: Vec<(u32, f32)>,
}

/// Checks the sampling fields; `logprobs` (the dialect's own check) runs
/// between them and the format, as it always has.
pub(crate) fn check<T>(
    r: &Ready,
    s: &Sampling,
    logprobs: impl FnOnce() -> Result<T, ApiError>,
) -> Result<(Checked, T), ApiError> {
    let common = s.common()?;
    let lp = logprobs()?;
    let json = s.json_mode()?;
    let logit_bias = s.logit_bias(r.model.model.n_vocab())?;
    Ok((
        Checked {
            common,
            json,
            logit_bias,
        },
        lp,
    ))
}

/// The internal request: the prompts checked against a slot's context.
pub(crate) fn finish(app: &App, c: Checked, p: Parts) -> Result<Prepared, ApiError> {
    for prompt in &p.prompts {
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
    if p.prompts.len() > 1 && c.common.stream {
        return Err(ApiError::field(
            "prompt",
            "several prompts are answered with stream: false only",
        ));
    }
    Ok(Prepared {
        kind: p.kind,
        common: c.common,
        prompts: p.prompts,
        echo: p.echo,
        texts: p.texts,
        starts_thinking: p.starts_thinking,
        tools: p.tools,
        logprobs: p.logprobs,
        json: c.json,
        tool_call: p.tool_call,
        logit_bias: c.logit_bias,
    })
}

/// A request whose prompt is raw text or token ids (`/v1/completions`,
/// `/completion`), checked in the order every dialect checks: the shared
/// fields, the dialect's `logprobs`, then the prompts and `echo`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn raw_request(
    app: &App,
    r: &Ready,
    kind: Kind,
    sampling: &Sampling,
    prompt: Option<&Value>,
    logprobs: impl FnOnce() -> Result<Option<usize>, ApiError>,
    echo: impl FnOnce() -> Result<bool, ApiError>,
) -> Result<Prepared, ApiError> {
    let (checked, logprobs) = check(r, sampling, logprobs)?;
    let (prompts, texts) = raw_prompts(app, r, prompt)?;
    let parts = Parts {
        kind,
        prompts,
        texts,
        echo: echo()?,
        starts_thinking: false,
        tools: false,
        logprobs,
        tool_call: None,
    };
    finish(app, checked, parts)
}
