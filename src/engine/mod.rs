//! The model session layer: everything between a GGUF file on disk and a stream
//! of text.
//!
//! ```text
//! let model   = LoadedModel::open(path)?;                     // mmap, tokenizer, template
//! let mut s   = Session::new(Arc::new(model), SessionOptions::new(4096))?;
//! let prompt  = s.model().tokenize(text)?;                    // or render_chat(...)
//! let mut sampler = Sampler::new(SamplerParams::greedy());
//! let out = generate(&mut s, &prompt, &mut sampler, &mut PlainStep, &GenOptions::default(),
//!                    &mut |ev| { /* GenEvent::Token { text, .. } → stdout */ })?;
//! // out.tokens, out.stop, out.timings
//! ```
//!
//! * [`load`]: [`LoadedModel`] — the mapped file (leaked to `'static`: a model lives
//!   as long as the process), the bound [`crate::model::Model`], the tokenizer and
//!   chat template from the metadata, and what the UI shows about it.
//! * [`session`]: [`Session`] — one sequence: the model state on its own rayon pool,
//!   the tokens the state holds, prompt-prefix reuse and a recurrent-state checkpoint.
//! * [`generate`]: the one generation loop, and the [`Step`] trait a speculative
//!   driver implements to replace plain token-by-token decoding ([`PlainStep`]).
//! * [`tokens`]: the same loop on a bare model and state, in token ids
//!   ([`generate_tokens`]: the speculation oracle tests, `clover bench`).
//! * [`chat`]: [`ChatSession`], the `tui::ChatEngine` over a session.
//! * [`default_model`]: the trained model (clover-tiny-kjv) used without `-m`.

pub mod chat;
pub mod default_model;
pub mod generate;
pub mod load;
pub mod packed_cache;
pub mod session;
pub mod spec_step;
pub mod tokens;

use kernels::GgmlType;
use thiserror::Error;

use crate::chat::ChatError;
use crate::gguf::GgufError;
use crate::model::{ForwardError, LoadError, StateError};
use crate::tokenizer::TokenizerError;

pub use chat::ChatSession;
pub use generate::{
    generate, GenEvent, GenOptions, Generation, PlainStep, Step, StepIo, StepStats, StopReason,
    Timings,
};
pub use load::LoadedModel;
pub use session::{Prefill, PromptEval, Session, SessionOptions};
pub use spec_step::SpecStep;
pub use tokens::{generate_tokens, generate_tokens_with, TokenGeneration};

/// Everything the session layer can fail with.
#[derive(Debug, Error)]
pub enum EngineError {
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    #[error(transparent)]
    Chat(#[from] ChatError),
    #[error(transparent)]
    State(#[from] StateError),
    #[error(transparent)]
    Forward(#[from] ForwardError),
    #[error("metadata key {key}: {reason}")]
    Metadata { key: String, reason: String },
    #[error("the prompt is empty")]
    EmptyPrompt,
    #[error("the prompt is {n_prompt} tokens, longer than the context of {n_ctx} (raise -c)")]
    PromptTooLong { n_prompt: usize, n_ctx: usize },
    #[error(
        "this turn needs {n_prompt} tokens with the system prompt, more than the {budget} \
         a context of {n_ctx} leaves beside the reply (raise -c or send a shorter message)"
    )]
    TurnTooLong {
        n_prompt: usize,
        budget: usize,
        n_ctx: usize,
    },
    #[error("{0}")]
    Options(String),
    #[error("cancelled")]
    Cancelled,
    #[error("thread pool: {0}")]
    Threads(String),
    #[error("speculative step: {0}")]
    Spec(#[from] crate::spec::SpecError),
}

/// KV cache types `-ctk` / `-ctv` accept (docs/DESIGN.md §2.5).
pub const CACHE_TYPES: [(&str, GgmlType); 4] = [
    ("f32", GgmlType::F32),
    ("f16", GgmlType::F16),
    ("bf16", GgmlType::BF16),
    ("q8_0", GgmlType::Q8_0),
];

/// Parses a KV cache type name (llama.cpp spelling, any case).
pub fn parse_cache_type(s: &str) -> Result<GgmlType, String> {
    let lower = s.to_ascii_lowercase();
    CACHE_TYPES
        .iter()
        .find(|(name, _)| *name == lower)
        .map(|&(_, ty)| ty)
        .ok_or_else(|| format!("unknown KV cache type '{s}' (expected f32, f16, bf16 or q8_0)"))
}

#[cfg(test)]
mod tests;
