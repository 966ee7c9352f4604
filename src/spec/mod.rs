//! Self-speculative decoding (docs/DESIGN.md §4.2, §4.1, §5): small pure pieces.
//!
//! - `verify`: the acceptance rules (pure functions);
//! - `draft`: the `Drafter` trait and the diffusion / sequence / random drafters;
//! - `ngram`: drafts from the text's own n-grams, and chains of drafters;
//! - `mtp`: drafts from the model's multi-token-prediction block;
//! - `choice`: `--spec-type`, parsed into the stages that draft;
//! - `adaptive`: the draft length from measured acceptance and costs;
//! - `stats`: counters and timings;
//! - `replay`: replayed acceptance profiles for benchmarks (simulated acceptance);
//! - `speculator`: one draft → verify → accept → commit round (`Speculator`);
//!   the loop around it is `engine::generate` / `engine::generate_tokens`;
//! - `cost`: the rollback stash size (docs/DESIGN.md §5).

pub mod adaptive;
pub mod choice;
pub mod cost;
pub mod draft;
pub mod mtp;
pub mod ngram;
pub mod replay;
pub mod speculator;
pub mod stats;
pub mod verify;

pub use choice::SpecChoice;
pub use draft::{DiffusionDrafter, Draft, DraftCtx, Drafter, RandomDrafter, SequenceDrafter};
pub use speculator::{SpecConfig, SpecError, Speculator};
pub use stats::SpecStats;
