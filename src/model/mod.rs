//! The qwen35moe / clover_moe model: configuration, weights, state and the
//! autoregressive forward pass (docs/DESIGN.md §1.2, §2).
//!
//! ```text
//! let config = ModelConfig::from_metadata(|key| file.get(key))?;
//! let model  = Model::bind(config, &|name| tensor_as_weight_ref(name))?;
//! let mut st = model.new_state(StateOptions::new(n_ctx))?;
//! let logits = model.forward(&mut st, &prompt, 0, LogitsFor::Last)?;      // prefill
//! let logits = model.forward(&mut st, &[tok], st.n_past(), LogitsFor::Last)?; // decode
//! // self-speculation (docs/DESIGN.md §5): GDN states untouched until the commit
//! let ys = model.forward_verify(&mut st, &[anchor, d1, d2], n, LogitsFor::All)?;
//! model.commit_verify(&mut st, accepted + 1)?;
//! ```
//! `st.stats` holds per-layer mixer / MoE nanoseconds (`stats.timing = true`)
//! and expert-selection counters; `st.kv.truncate(n)` rolls the KV cache back.

pub mod attention;
pub mod batch;
pub mod capture;
pub mod chunked;
pub mod config;
pub mod cx;
pub mod deltanet;
pub mod diffusion;
pub mod forward;
pub mod kv;
pub mod linear;
pub mod load;
pub mod moe;
pub mod mtp;
pub mod observe;
pub mod ops;
pub mod pass;
pub mod profile;
pub mod recurrent;
pub mod state;
pub mod tiny;
pub mod verify;
pub mod warm;
pub mod weights;

use kernels::GgmlType;
use thiserror::Error;

pub use config::{Arch, ConfigError, LayerKind, ModelConfig};
pub use forward::{LogitsFor, Model};
pub use load::LoadError;
pub use state::{DeltaNetState, State, StateOptions, Stats};
pub use weights::{WeightError, WeightRef, Weights};

/// A state that cannot be built.
#[derive(Debug, Error, PartialEq)]
pub enum StateError {
    #[error("KV cache type {0} is not supported (use f32, f16, bf16 or q8_0)")]
    CacheType(GgmlType),
    #[error("{0}")]
    Size(String),
    #[error(
        "a context of {n_ctx} tokens needs {} of memory for the KV cache and state, \
         more than the {} available (lower -c, or -ctk/-ctv q8_0)",
        gib(*needed),
        gib(*available as u128)
    )]
    OutOfMemory {
        n_ctx: usize,
        needed: u128,
        available: u64,
    },
}

/// Bytes as GiB for messages (`2.50 GiB`; `> 1e9 GiB` for absurd sizes).
fn gib(b: u128) -> String {
    let g = b as f64 / (1u64 << 30) as f64;
    if g > 1e9 {
        "more than a billion GiB".to_string()
    } else {
        format!("{g:.2} GiB")
    }
}

/// A forward call that cannot run.
#[derive(Debug, Error, PartialEq)]
pub enum ForwardError {
    #[error("no tokens to process")]
    Empty,
    #[error("position {got} given, but the state holds {expected} positions")]
    Position { expected: usize, got: usize },
    #[error("{need} positions exceed the context of {n_ctx}")]
    ContextFull { need: usize, n_ctx: usize },
    #[error("token id {id} is outside the vocabulary of {n_vocab}")]
    Token { id: u32, n_vocab: usize },
    #[error("logits index {index} is outside the {n_tokens} input tokens")]
    Index { index: usize, n_tokens: usize },
    #[error("a verify pass of {n} tokens exceeds the batch size {max_batch}")]
    VerifyTooLong { n: usize, max_batch: usize },
    #[error("a verify pass is pending: commit it first")]
    VerifyPending,
    #[error("no verify pass to commit")]
    NoVerifyPending,
    #[error("cannot keep {n_keep} of {n} verified positions")]
    KeepTooMany { n_keep: usize, n: usize },
    #[error("this model has no block-diffusion tensors (a clover_moe file is needed)")]
    NoDiffusion,
    #[error("this state keeps no MTP cache, or the model has no MTP block")]
    NoMtp,
    #[error("a diffusion block of {n} tokens exceeds the batch size {max_batch}")]
    BlockTooLong { n: usize, max_batch: usize },
    #[error(
        "the model produced NaN or infinite values, first in {} (the weights are \
         probably damaged)",
        match layer {
            Some(il) => format!("the output of layer {il}"),
            None => "the token embedding".to_string(),
        }
    )]
    NonFinite {
        /// The first layer whose output held one (`None`: the embedding did).
        layer: Option<usize>,
    },
}
