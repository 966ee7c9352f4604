//! The request fields whose checks go deeper than their type: messages,
//! tools and `tool_choice`, prompts, log-probabilities and `logit_bias`.
//! Each takes the field's value from a dialect's typed request ([`None`]:
//! absent or `null`).

use serde_json::Value;

pub use super::error::ApiError;
use super::fields::{Field, Int};

/// The most alternatives a token's log-probability comes with (OpenAI's
/// limit for `top_logprobs`).
pub const MAX_TOP_LOGPROBS: i64 = 20;

/// A chat request's `logprobs` (a boolean) and `top_logprobs` (0 to 20, only
/// with `logprobs`): how many alternatives to report per token, `None`: no
/// log-probabilities.
pub fn chat_logprobs(logprobs: Field<bool>, top: Field<Int>) -> Result<Option<usize>, ApiError> {
    let on = logprobs.get("logprobs", "a boolean")?.unwrap_or(false);
    let top = top.get("top_logprobs", "an integer")?.map(|i| i.0);
    if let Some(n) = top {
        if !(0..=MAX_TOP_LOGPROBS).contains(&n) {
            return Err(ApiError::field(
                "top_logprobs",
                format!("'top_logprobs' must be between 0 and {MAX_TOP_LOGPROBS}"),
            ));
        }
        if !on {
            return Err(ApiError::field(
                "top_logprobs",
                "'top_logprobs' needs 'logprobs': true",
            ));
        }
    }
    Ok(on.then(|| top.unwrap_or(0) as usize))
}

/// llama-server's `n_probs`: how many alternatives each token comes with
/// (0, the default: no probabilities).
pub fn n_probs(n_probs: Field<Int>) -> Result<Option<usize>, ApiError> {
    match n_probs.get("n_probs", "an integer")?.map(|i| i.0) {
        None | Some(0) => Ok(None),
        Some(n) if (1..=MAX_TOP_LOGPROBS).contains(&n) => Ok(Some(n as usize)),
        Some(_) => Err(ApiError::field(
            "n_probs",
            format!("'n_probs' must be between 0 and {MAX_TOP_LOGPROBS}"),
        )),
    }
}

/// A completion request's `logprobs`: an integer, 0 to 20 alternatives per
/// token (0: the chosen token's alone).
pub fn completion_logprobs(logprobs: Field<Int>) -> Result<Option<usize>, ApiError> {
    match logprobs.get("logprobs", "an integer")?.map(|i| i.0) {
        None => Ok(None),
        Some(n) if (0..=MAX_TOP_LOGPROBS).contains(&n) => Ok(Some(n as usize)),
        Some(_) => Err(ApiError::field(
            "logprobs",
            format!("'logprobs' must be between 0 and {MAX_TOP_LOGPROBS}"),
        )),
    }
}

/// `logit_bias`: OpenAI's object (token id as a string → bias from −100 to
/// 100) or llama-server's list of `[id, bias]` pairs, for a vocabulary of
/// `n_vocab`. A bias of −100 bans the token.
pub fn logit_bias(bias: Option<&Value>, n_vocab: usize) -> Result<Vec<(u32, f32)>, ApiError> {
    let param = "logit_bias";
    let bad = |m: String| ApiError::field(param, m);
    let pairs: Vec<(Value, Value)> = match bias {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Object(m)) => m
            .iter()
            .map(|(k, v)| (Value::String(k.clone()), v.clone()))
            .collect(),
        Some(Value::Array(a)) => a
            .iter()
            .map(|p| match p.as_array().map(Vec::as_slice) {
                Some([id, b]) => Ok((id.clone(), b.clone())),
                _ => Err(bad("'logit_bias' pairs must be [token id, bias]".into())),
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(bad("'logit_bias' must be an object".into())),
    };
    pairs
        .into_iter()
        .map(|(id, b)| {
            let id = match &id {
                Value::String(s) => s.trim().parse::<u64>().ok(),
                v => v.as_u64(),
            }
            .filter(|&i| i < n_vocab as u64)
            .ok_or_else(|| {
                bad(format!(
                    "'logit_bias': {id} is not a token id below {n_vocab}"
                ))
            })?;
            let b = b
                .as_f64()
                .filter(|b| (-100.0..=100.0).contains(b))
                .ok_or_else(|| {
                    bad(format!(
                        "'logit_bias': the bias of {id} must be a number from -100 to 100"
                    ))
                })?;
            let b = if b <= -100.0 {
                f32::NEG_INFINITY
            } else {
                b as f32
            };
            Ok((id as u32, b))
        })
        .collect()
}

/// The chat messages, checked, in the shape chat templates read: text content
/// as a string, a tool call's `arguments` as an object.
pub fn messages(messages: Option<&Value>) -> Result<Value, ApiError> {
    let Some(Value::Array(msgs)) = messages else {
        return Err(ApiError::field(
            "messages",
            "'messages' must be a list of messages",
        ));
    };
    if msgs.is_empty() {
        return Err(ApiError::field("messages", "'messages' is empty"));
    }
    let mut out = Vec::with_capacity(msgs.len());
    for (i, m) in msgs.iter().enumerate() {
        let Value::Object(m) = m else {
            return Err(ApiError::field(
                "messages",
                format!("message {i} is not an object"),
            ));
        };
        let mut m = m.clone();
        if !m.get("role").is_some_and(Value::is_string) {
            return Err(ApiError::field(
                "messages",
                format!("message {i} has no 'role' string"),
            ));
        }
        let content = match m.get("content") {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(s)) => s.clone(),
            Some(Value::Array(parts)) => {
                let mut text = String::new();
                for p in parts {
                    match (
                        p.get("type").and_then(Value::as_str),
                        p.get("text").and_then(Value::as_str),
                    ) {
                        (Some("text"), Some(t)) => text.push_str(t),
                        _ => {
                            return Err(ApiError::field(
                                "messages",
                                format!("message {i}: only text content parts are supported"),
                            ))
                        }
                    }
                }
                text
            }
            Some(_) => {
                return Err(ApiError::field(
                    "messages",
                    format!("message {i}: 'content' must be a string or a list of parts"),
                ))
            }
        };
        m.insert("content".into(), Value::String(content));
        if let Some(Value::Array(calls)) = m.get_mut("tool_calls") {
            for c in calls {
                if let Some(f) = c.get_mut("function") {
                    if let Some(Value::String(a)) = f.get("arguments") {
                        if let Ok(v) = serde_json::from_str::<Value>(a) {
                            f["arguments"] = v;
                        }
                    }
                }
            }
        }
        out.push(Value::Object(m));
    }
    Ok(Value::Array(out))
}

/// `tools`, when given: a list.
pub fn tools(tools: Option<&Value>) -> Result<Option<Value>, ApiError> {
    match tools {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(a)) if a.is_empty() => Ok(None),
        Some(t @ Value::Array(_)) => Ok(Some(t.clone())),
        Some(_) => Err(ApiError::field("tools", "'tools' must be a list")),
    }
}

/// What `tool_choice` asks for.
#[derive(Clone, Debug, PartialEq)]
pub enum ToolChoice {
    /// The model decides (the default).
    Auto,
    /// No tool: the tools are not offered.
    None,
    /// A call of one of the tools.
    Required,
    /// A call of this function.
    Named(String),
}

/// OpenAI's `tool_choice`: `"auto"`, `"none"`, `"required"` or `{"type":
/// "function", "function": {"name": …}}`; a forced choice needs `tools`
/// naming the function.
pub fn tool_choice(choice: Option<&Value>, tools: Option<&Value>) -> Result<ToolChoice, ApiError> {
    let param = "tool_choice";
    let choice = match choice {
        None | Some(Value::Null) => ToolChoice::Auto,
        Some(Value::String(s)) => match s.as_str() {
            "auto" => ToolChoice::Auto,
            "none" => ToolChoice::None,
            "required" => ToolChoice::Required,
            _ => {
                return Err(ApiError::field(
                    param,
                    format!("'tool_choice' must be \"auto\", \"none\", \"required\" or a function, not \"{s}\""),
                ))
            }
        },
        Some(Value::Object(c)) => {
            let name = c
                .get("function")
                .and_then(|f| f.get("name"))
                .and_then(Value::as_str)
                .filter(|_| c.get("type").and_then(Value::as_str) == Some("function"))
                .ok_or_else(|| {
                    ApiError::field(
                        param,
                        "a named 'tool_choice' is {\"type\": \"function\", \"function\": {\"name\": …}}",
                    )
                })?;
            ToolChoice::Named(name.to_string())
        }
        Some(_) => return Err(ApiError::field(param, "'tool_choice' must be a string or an object")),
    };
    let forced = matches!(choice, ToolChoice::Required | ToolChoice::Named(_));
    if forced && tools.is_none() {
        return Err(ApiError::field(
            param,
            "a forced 'tool_choice' needs 'tools'",
        ));
    }
    if let ToolChoice::Named(name) = &choice {
        if !tool_schemas(tools.expect("checked"))?
            .iter()
            .any(|(n, _)| n == name)
        {
            return Err(ApiError::field(
                param,
                format!("'tool_choice' names '{name}', which is not among the tools"),
            ));
        }
    }
    Ok(choice)
}

/// Each function of `tools` (OpenAI's list): its name and its parameters'
/// schema (`{}` when it has none).
pub fn tool_schemas(tools: &Value) -> Result<Vec<(String, Value)>, ApiError> {
    let list = tools.as_array().map(Vec::as_slice).unwrap_or_default();
    list.iter()
        .map(|t| {
            let f = t.get("function").unwrap_or(t);
            let name = f.get("name").and_then(Value::as_str).ok_or_else(|| {
                ApiError::field("tools", "every tool needs a function with a 'name'")
            })?;
            let params = f.get("parameters").cloned().unwrap_or(Value::Null);
            Ok((name.to_string(), params))
        })
        .collect()
}

/// One completion prompt: text (tokenized with the model's BOS) or token
/// ids (taken as they are).
#[derive(Clone, Debug, PartialEq)]
pub enum PromptIn {
    Text(String),
    Ids(Vec<u32>),
}

/// The most prompts one completion request may carry.
pub const MAX_PROMPTS: usize = 64;

/// A completion's `prompt`: a string, a list of token ids, or a list of
/// either (one choice each, in order).
pub fn prompts(prompt: Option<&Value>) -> Result<Vec<PromptIn>, ApiError> {
    let bad = || {
        ApiError::field(
            "prompt",
            "'prompt' must be a string, a list of token ids, or a list of those",
        )
    };
    let ids = |a: &[Value]| -> Option<Vec<u32>> {
        a.iter()
            .map(|v| v.as_u64().and_then(|x| u32::try_from(x).ok()))
            .collect()
    };
    let one = |v: &Value| match v {
        Value::String(s) => Some(PromptIn::Text(s.clone())),
        Value::Array(a) => ids(a).map(PromptIn::Ids),
        _ => None,
    };
    let list = match prompt {
        Some(Value::String(s)) => vec![PromptIn::Text(s.clone())],
        Some(Value::Array(a)) if !a.is_empty() && a.iter().all(Value::is_number) => {
            vec![PromptIn::Ids(ids(a).ok_or_else(bad)?)]
        }
        Some(Value::Array(a)) if !a.is_empty() => a
            .iter()
            .map(one)
            .collect::<Option<Vec<_>>>()
            .ok_or_else(bad)?,
        _ => return Err(bad()),
    };
    if list.len() > MAX_PROMPTS {
        return Err(ApiError::field(
            "prompt",
            format!("at most {MAX_PROMPTS} prompts per request"),
        ));
    }
    Ok(list)
}

#[cfg(test)]
mod tests {
    use super::super::sampling::Common;
    use super::*;
    use serde_json::{json, Map};

    // The checks as a request body reaches them.
    fn common(o: &Map<String, Value>) -> Result<Common, ApiError> {
        let s: super::super::sampling::Sampling =
            serde_json::from_value(Value::Object(o.clone())).unwrap();
        s.common()
    }

    fn object(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
        super::super::fields::parse(body)
    }

    fn messages(o: &Map<String, Value>) -> Result<Value, ApiError> {
        super::messages(o.get("messages"))
    }

    fn prompts(o: &Map<String, Value>) -> Result<Vec<PromptIn>, ApiError> {
        super::prompts(o.get("prompt"))
    }

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn fields_of_the_wrong_type_are_400_naming_the_field() {
        for (body, param) in [
            (json!({"temperature": "hot"}), "temperature"),
            (json!({"max_tokens": 1.5}), "max_tokens"),
            (json!({"max_tokens": -3}), "max_tokens"),
            (json!({"stop": 3}), "stop"),
            (json!({"stop": ["a", 1]}), "stop"),
            (json!({"stream": "yes"}), "stream"),
            (json!({"n": 2}), "n"),
            (json!({"seed": "x"}), "seed"),
        ] {
            let e = common(&obj(body.clone())).unwrap_err();
            assert_eq!((e.status, e.param.as_deref()), (400, Some(param)), "{body}");
        }
        let e = object(b"{not json").unwrap_err();
        assert_eq!(e.status, 400);
        assert_eq!(e.body()["error"]["type"], "invalid_request_error");
    }

    #[test]
    fn fields_map_onto_the_sampler_and_limits() {
        let c = common(&obj(json!({
            "temperature": 0, "top_k": 5, "top_p": 0.5, "min_p": 0.1, "seed": 7,
            "max_completion_tokens": 9, "stop": "x", "presence_penalty": 0.5,
            "frequency_penalty": 0.25, "repeat_penalty": 1.1, "stream": true,
            "stream_options": {"include_usage": true}, "n": 1, "unknown": {"x": 1}
        })))
        .unwrap();
        assert_eq!(c.sampler.temp, 0.0);
        assert_eq!((c.sampler.top_k, c.sampler.seed), (5, Some(7)));
        assert_eq!((c.sampler.top_p, c.sampler.min_p), (0.5, 0.1));
        assert_eq!(c.sampler.repeat_penalty, 1.1);
        assert_eq!(
            (c.sampler.presence_penalty, c.sampler.frequency_penalty),
            (0.5, 0.25)
        );
        assert_eq!(c.n_predict, Some(9));
        assert_eq!(c.stop, vec!["x".to_string()]);
        assert!(c.stream && c.include_usage);
    }

    #[test]
    fn messages_take_text_parts_and_tool_call_arguments_become_objects() {
        let m = messages(&obj(json!({"messages": [
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"x\": 1}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "42"}
        ]})))
        .unwrap();
        assert_eq!(m[0]["content"], "ab");
        assert_eq!(m[1]["content"], "");
        assert_eq!(m[1]["tool_calls"][0]["function"]["arguments"]["x"], 1);
        assert_eq!(m[2]["content"], "42");
        for bad in [
            json!({"messages": []}),
            json!({"messages": "hi"}),
            json!({"messages": [{"content": "no role"}]}),
            json!({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}),
        ] {
            assert_eq!(messages(&obj(bad)).unwrap_err().status, 400);
        }
    }

    #[test]
    fn a_prompt_is_text_ids_or_a_list_of_them() {
        let get = |v: Value| prompts(&obj(json!({ "prompt": v })));
        assert_eq!(get(json!("hi")).unwrap(), [PromptIn::Text("hi".into())]);
        assert_eq!(get(json!([5, 6])).unwrap(), [PromptIn::Ids(vec![5, 6])]);
        assert_eq!(
            get(json!(["a", [1], "b"])).unwrap(),
            [
                PromptIn::Text("a".into()),
                PromptIn::Ids(vec![1]),
                PromptIn::Text("b".into())
            ]
        );
        for bad in [
            json!([]),
            json!(3),
            json!([1, "a"]),
            json!([[-1]]),
            json!([[1.5]]),
            json!(null),
        ] {
            let e = get(bad.clone()).unwrap_err();
            assert_eq!(
                (e.status, e.param.as_deref()),
                (400, Some("prompt")),
                "{bad}"
            );
        }
        let many: Vec<Value> = (0..=MAX_PROMPTS).map(|_| json!("x")).collect();
        assert!(get(Value::Array(many)).is_err());
    }
}
