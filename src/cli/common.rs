//! Flags shared by `clover run` and `clover chat`: context / threads / batches /
//! KV cache types, and the sampler. Spellings follow llama.cpp; its two-letter
//! short flags (`-ub`, `-ctk`, `-ctv`) are rewritten to long ones before parsing
//! ([`rewrite_llama_flags`]), since clap's short flags are single characters.

use std::ffi::OsString;

use clap::Args;
use kernels::GgmlType;

use crate::engine::{parse_cache_type, SessionOptions};
use crate::sample::SamplerParams;

/// llama.cpp's multi-letter short flags and the long flags they mean.
const LLAMA_SHORT: [(&str, &str); 5] = [
    ("-ub", "--ubatch-size"),
    ("-ctk", "--cache-type-k"),
    ("-ctv", "--cache-type-v"),
    ("-tb", "--threads-batch"),
    ("-fa", "--flash-attn"),
];

/// Rewrites `-ub N`, `-ctk T`, `-ctv T` (and `-ctk=T`) to their long forms;
/// everything after a bare `--` is left alone.
pub fn rewrite_llama_flags(args: impl IntoIterator<Item = OsString>) -> Vec<OsString> {
    let mut out = Vec::new();
    let mut rest = false;
    for a in args {
        if rest {
            out.push(a);
            continue;
        }
        let Some(s) = a.to_str() else {
            out.push(a);
            continue;
        };
        if s == "--" {
            rest = true;
            out.push(a);
            continue;
        }
        let (flag, value) = match s.split_once('=') {
            Some((f, v)) => (f, Some(v)),
            None => (s, None),
        };
        match LLAMA_SHORT.iter().find(|(short, _)| *short == flag) {
            Some((_, long)) => out.push(OsString::from(match value {
                Some(v) => format!("{long}={v}"),
                None => long.to_string(),
            })),
            None => out.push(a),
        }
    }
    out
}

fn cache_type(s: &str) -> Result<GgmlType, String> {
    parse_cache_type(s)
}

/// Context, threads, batches, KV cache.
#[derive(Args, Debug, Clone)]
pub struct ContextArgs {
    /// Context size in tokens
    #[arg(short = 'c', long = "ctx-size", default_value_t = 4096)]
    pub ctx_size: usize,
    /// Threads for generation (default: all cores)
    #[arg(short = 't', long = "threads")]
    pub threads: Option<usize>,
    /// Logical batch: most prompt tokens per forward call
    #[arg(short = 'b', long = "batch-size", default_value_t = 2048)]
    pub batch_size: usize,
    /// Physical batch (-ub): most tokens one forward pass computes at once
    #[arg(long = "ubatch-size", default_value_t = 512)]
    pub ubatch_size: usize,
    /// KV cache type for K (-ctk): f32, f16, bf16, q8_0
    #[arg(long = "cache-type-k", default_value = "f16", value_parser = cache_type)]
    pub cache_type_k: GgmlType,
    /// KV cache type for V (-ctv): f32, f16, bf16, q8_0
    #[arg(long = "cache-type-v", default_value = "f16", value_parser = cache_type)]
    pub cache_type_v: GgmlType,
}

impl ContextArgs {
    /// The session options, checked (zero sizes and thread counts are errors).
    pub fn session_options(&self) -> anyhow::Result<SessionOptions> {
        let opts = SessionOptions {
            n_ctx: self.ctx_size,
            n_batch: self.batch_size,
            n_ubatch: self.ubatch_size,
            type_k: self.cache_type_k,
            type_v: self.cache_type_v,
            threads: self.threads,
        };
        opts.validate()?;
        Ok(opts)
    }
}

/// The sampler chain (llama.cpp's defaults).
#[derive(Args, Debug, Clone)]
pub struct SamplingArgs {
    /// Temperature (0: greedy)
    #[arg(long, default_value_t = 0.8)]
    pub temp: f32,
    /// Keep the k most likely tokens (≤ 0: off)
    #[arg(long = "top-k", default_value_t = 40, allow_negative_numbers = true)]
    pub top_k: i32,
    /// Nucleus sampling mass (1: off)
    #[arg(long = "top-p", default_value_t = 0.95)]
    pub top_p: f32,
    /// Minimum probability relative to the most likely token (0: off)
    #[arg(long = "min-p", default_value_t = 0.05)]
    pub min_p: f32,
    /// Repetition penalty (1: off)
    #[arg(long = "repeat-penalty", default_value_t = 1.0)]
    pub repeat_penalty: f32,
    /// Tokens the repetition penalty looks back (0: off, -1: all)
    #[arg(
        long = "repeat-last-n",
        default_value_t = 64,
        allow_negative_numbers = true
    )]
    pub repeat_last_n: i32,
    /// Random seed (default: from the clock)
    #[arg(long)]
    pub seed: Option<u64>,
}

impl SamplingArgs {
    /// The sampler parameters, checked.
    pub fn params(&self) -> anyhow::Result<SamplerParams> {
        let finite = |name: &str, v: f32| {
            if v.is_finite() {
                Ok(())
            } else {
                Err(anyhow::anyhow!("--{name} must be a finite number, got {v}"))
            }
        };
        finite("temp", self.temp)?;
        finite("top-p", self.top_p)?;
        finite("min-p", self.min_p)?;
        finite("repeat-penalty", self.repeat_penalty)?;
        if !(0.0..=1.0).contains(&self.top_p) {
            anyhow::bail!("--top-p must be between 0 and 1, got {}", self.top_p);
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            anyhow::bail!("--min-p must be between 0 and 1, got {}", self.min_p);
        }
        if self.repeat_penalty <= 0.0 {
            anyhow::bail!(
                "--repeat-penalty must be greater than 0, got {}",
                self.repeat_penalty
            );
        }
        if self.repeat_last_n < -1 {
            anyhow::bail!(
                "--repeat-last-n must be -1, 0 or positive, got {}",
                self.repeat_last_n
            );
        }
        Ok(SamplerParams {
            temp: self.temp,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            repeat_penalty: self.repeat_penalty,
            repeat_last_n: self.repeat_last_n,
            seed: self.seed,
            ..SamplerParams::default()
        })
    }
}

/// `-n`: a count, or −1 for "no limit".
pub fn n_predict(n: i64) -> anyhow::Result<Option<usize>> {
    match n {
        -1 => Ok(None),
        n if n >= 0 => Ok(Some(n as usize)),
        n => anyhow::bail!("-n must be -1 (no limit) or at least 0, got {n}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strs(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn llama_short_flags_become_long_ones_but_not_after_double_dash() {
        let got = rewrite_llama_flags(strs(&[
            "clover",
            "run",
            "-ub",
            "8",
            "-ctk=q8_0",
            "-ctv",
            "bf16",
            "-c",
            "64",
            "--",
            "-ub",
        ]));
        assert_eq!(
            got,
            strs(&[
                "clover",
                "run",
                "--ubatch-size",
                "8",
                "--cache-type-k=q8_0",
                "--cache-type-v",
                "bf16",
                "-c",
                "64",
                "--",
                "-ub",
            ])
        );
    }

    #[test]
    fn n_predict_accepts_minus_one_and_rejects_other_negatives() {
        assert_eq!(n_predict(-1).unwrap(), None);
        assert_eq!(n_predict(0).unwrap(), Some(0));
        assert_eq!(n_predict(7).unwrap(), Some(7));
        assert!(n_predict(-2).is_err());
    }
}
