//! What a finished generation reports: the slots send it
//! ([`super::slots::Msg::Done`]), `/metrics` counts it, and the responses
//! carry its counts and timings. Its own module, so that the dependencies
//! point one way: the slots use the metrics and this, the metrics only this.

/// How a generation ended, and what it cost.
#[derive(Clone, Debug, Default)]
pub struct Done {
    pub prompt_n: usize,
    pub prompt_ms: f64,
    /// Prompt tokens reused from the slot's previous request.
    pub cached_n: usize,
    pub predicted_n: usize,
    pub predicted_ms: f64,
    pub draft_n: usize,
    pub draft_accepted: usize,
    /// `true`: a limit (max_tokens or the context) ended it, not EOG or a stop.
    pub length: bool,
    /// The stop string that ended it.
    pub stopping_word: Option<String>,
    pub slot: usize,
}

/// OpenAI's `usage` object.
#[derive(serde::Serialize)]
pub struct Usage {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub total_tokens: usize,
    pub prompt_tokens_details: PromptTokensDetails,
}

#[derive(serde::Serialize)]
pub struct PromptTokensDetails {
    pub cached_tokens: usize,
}

/// llama-server's `timings` object.
#[derive(serde::Serialize)]
pub struct Timings {
    pub cache_n: usize,
    pub prompt_n: usize,
    pub prompt_ms: f64,
    pub prompt_per_token_ms: f64,
    pub prompt_per_second: f64,
    pub predicted_n: usize,
    pub predicted_ms: f64,
    pub predicted_per_token_ms: f64,
    pub predicted_per_second: f64,
    pub draft_n: usize,
    pub draft_n_accepted: usize,
}

impl Done {
    /// The `usage` object.
    pub fn usage(&self) -> Usage {
        Usage {
            prompt_tokens: self.prompt_n,
            completion_tokens: self.predicted_n,
            total_tokens: self.prompt_n + self.predicted_n,
            prompt_tokens_details: PromptTokensDetails {
                cached_tokens: self.cached_n,
            },
        }
    }

    /// llama-server's `timings` object.
    pub fn timings(&self) -> Timings {
        let evaluated = self.prompt_n - self.cached_n.min(self.prompt_n);
        let per = |ms: f64, n: usize| if n > 0 { ms / n as f64 } else { 0.0 };
        let rate = |ms: f64, n: usize| if ms > 0.0 { n as f64 * 1e3 / ms } else { 0.0 };
        Timings {
            cache_n: self.cached_n,
            prompt_n: evaluated,
            prompt_ms: self.prompt_ms,
            prompt_per_token_ms: per(self.prompt_ms, evaluated),
            prompt_per_second: rate(self.prompt_ms, evaluated),
            predicted_n: self.predicted_n,
            predicted_ms: self.predicted_ms,
            predicted_per_token_ms: per(self.predicted_ms, self.predicted_n),
            predicted_per_second: rate(self.predicted_ms, self.predicted_n),
            draft_n: self.draft_n,
            draft_n_accepted: self.draft_accepted,
        }
    }
}
