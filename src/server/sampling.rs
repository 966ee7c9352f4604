//! The fields every generating dialect shares, typed: sampling, limits,
//! stops, streaming, the output format and `logit_bias`. Each dialect's
//! request type flattens [`Sampling`] in and converts it into
//! [`Common`] (and the JSON-mode flag, the bias) with today's checks: a
//! field of the wrong type or out of range is a 400 naming the field.

use serde::Deserialize;
use serde_json::Value;

use super::error::ApiError;
use super::fields::{Field, Int};
use crate::sample::SamplerParams;

/// What every generation request sets besides its prompt.
#[derive(Clone, Debug)]
pub struct Common {
    pub sampler: SamplerParams,
    pub n_predict: Option<usize>,
    pub stop: Vec<String>,
    pub stream: bool,
    pub include_usage: bool,
    /// llama-server's `ignore_eos`.
    pub ignore_eos: bool,
}

/// `stop`: one string or a list of them.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum Stop {
    One(String),
    Many(Vec<String>),
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct StreamOptions {
    include_usage: Field<bool>,
}

/// The shared fields, as a request carries them.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct Sampling {
    n: Field<Int>,
    model: Field<String>,
    temperature: Field<f64>,
    top_p: Field<f64>,
    top_k: Field<Int>,
    min_p: Field<f64>,
    presence_penalty: Field<f64>,
    frequency_penalty: Field<f64>,
    repeat_penalty: Field<f64>,
    repeat_last_n: Field<Int>,
    seed: Field<Int>,
    max_tokens: Field<Int>,
    max_completion_tokens: Field<Int>,
    /// llama-server's name for `max_tokens` (−1: no limit).
    n_predict: Field<Int>,
    stop: Field<Stop>,
    stream: Field<bool>,
    stream_options: Field<StreamOptions>,
    ignore_eos: Field<bool>,
    response_format: Field<Value>,
    grammar: Field<Value>,
    json_schema: Field<Value>,
    logit_bias: Field<Value>,
}

fn integer(f: &Field<Int>, k: &str) -> Result<Option<i64>, ApiError> {
    Ok(f.clone().get(k, "an integer")?.map(|i| i.0))
}

/// A number that must lie in `[lo, hi]` (OpenAI's ranges where OpenAI
/// defines the field): outside it, a 400 naming the field.
fn ranged(f: &Field<f64>, k: &str, lo: f64, hi: f64) -> Result<Option<f32>, ApiError> {
    match f.clone().get(k, "a number")? {
        Some(v) if !(lo..=hi).contains(&v) => Err(ApiError::field(
            k,
            format!("'{k}' must be from {lo} to {hi}, not {v}"),
        )),
        v => Ok(v.map(|v| v as f32)),
    }
}

impl Sampling {
    /// The sampling and stopping fields, checked.
    pub fn common(&self) -> Result<Common, ApiError> {
        if let Some(n) = integer(&self.n, "n")? {
            if n != 1 {
                return Err(ApiError::field("n", "only n = 1 is supported"));
            }
        }
        self.model.clone().get("model", "a string")?;
        let mut s = SamplerParams::default();
        if let Some(t) = ranged(&self.temperature, "temperature", 0.0, 2.0)? {
            s.temp = t;
        }
        if let Some(v) = ranged(&self.top_p, "top_p", 0.0, 1.0)? {
            s.top_p = v;
        }
        if let Some(v) = integer(&self.top_k, "top_k")? {
            if v < -1 {
                return Err(ApiError::field(
                    "top_k",
                    format!("'top_k' must be at least 0 (or -1: off), not {v}"),
                ));
            }
            s.top_k = v.clamp(-1, i32::MAX as i64) as i32;
        }
        if let Some(v) = ranged(&self.min_p, "min_p", 0.0, 1.0)? {
            s.min_p = v;
        }
        if let Some(v) = ranged(&self.presence_penalty, "presence_penalty", -2.0, 2.0)? {
            s.presence_penalty = v;
        }
        if let Some(v) = ranged(&self.frequency_penalty, "frequency_penalty", -2.0, 2.0)? {
            s.frequency_penalty = v;
        }
        if let Some(v) = ranged(&self.repeat_penalty, "repeat_penalty", 0.0, 100.0)? {
            s.repeat_penalty = v;
        }
        if let Some(v) = integer(&self.repeat_last_n, "repeat_last_n")? {
            s.repeat_last_n = v.clamp(-1, i32::MAX as i64) as i32;
        }
        if let Some(v) = integer(&self.seed, "seed")? {
            s.seed = Some(v as u64);
        }
        let mut n_predict = None;
        for (k, f) in [
            ("max_tokens", &self.max_tokens),
            ("max_completion_tokens", &self.max_completion_tokens),
            ("n_predict", &self.n_predict),
        ] {
            if let Some(v) = integer(f, k)? {
                if v >= 0 {
                    n_predict = Some(v as usize);
                } else if k != "n_predict" || v != -1 {
                    return Err(ApiError::field(k, format!("'{k}' must not be negative")));
                }
            }
        }
        let stop = match self
            .stop
            .clone()
            .get("stop", "a string or a list of strings")?
        {
            None => Vec::new(),
            Some(Stop::One(s)) => vec![s],
            Some(Stop::Many(v)) => v,
        };
        let stream = self
            .stream
            .clone()
            .get("stream", "a boolean")?
            .unwrap_or(false);
        let include_usage = match self
            .stream_options
            .clone()
            .get("stream_options", "an object")?
        {
            None => false,
            Some(so) => so
                .include_usage
                .get("include_usage", "a boolean")?
                .unwrap_or(false),
        };
        let ignore_eos = self
            .ignore_eos
            .clone()
            .get("ignore_eos", "a boolean")?
            .unwrap_or(false);
        Ok(Common {
            sampler: s,
            n_predict,
            stop,
            stream,
            include_usage,
            ignore_eos,
        })
    }

    /// `response_format`: `{"type": "text"}` (or none) or `{"type":
    /// "json_object"}` (JSON mode: the reply is one JSON object); `true` for
    /// JSON mode. Schemas and grammars are refused rather than ignored.
    pub fn json_mode(&self) -> Result<bool, ApiError> {
        for (k, f) in [
            ("grammar", &self.grammar),
            ("json_schema", &self.json_schema),
        ] {
            if f.is_given() {
                return Err(ApiError::field(
                    k,
                    format!(
                        "'{k}' is not supported; response_format {{\"type\": \"json_object\"}} is"
                    ),
                ));
            }
        }
        let param = "response_format";
        let kind = match self.response_format.clone().get(param, "an object")? {
            None => return Ok(false),
            Some(Value::Object(f)) => f.get("type").and_then(Value::as_str).map(str::to_string),
            Some(_) => None,
        };
        match kind.as_deref() {
            Some("text") => Ok(false),
            Some("json_object") => Ok(true),
            Some("json_schema") => Err(ApiError::field(
                param,
                "json_schema is not supported; {\"type\": \"json_object\"} is (any JSON object)",
            )),
            _ => Err(ApiError::field(
                param,
                "'response_format' must be {\"type\": \"text\"} or {\"type\": \"json_object\"}",
            )),
        }
    }

    /// `logit_bias`, checked against a vocabulary of `n_vocab`
    /// ([`super::api::logit_bias`]).
    pub fn logit_bias(&self, n_vocab: usize) -> Result<Vec<(u32, f32)>, ApiError> {
        let v = self.logit_bias.clone().get("logit_bias", "an object")?;
        super::api::logit_bias(v.as_ref(), n_vocab)
    }
}
