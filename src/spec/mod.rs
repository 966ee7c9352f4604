//! Self-speculative decoding (DESIGN §4.2, §4.1, §5): small pure pieces.
//!
//! - `verify`: the acceptance rules (pure functions);
//! - `draft`: the `Drafter` trait and the diffusion / sequence / random drafters;
//! - `adaptive`: the draft length from measured acceptance and costs;
//! - `stats`: counters and timings;
//! - `driver`: the loop (`generate`);
//! - `cost`: the rollback stash size (DESIGN §5).

pub mod adaptive;
pub mod cost;
pub mod draft;
pub mod driver;
pub mod stats;
pub mod verify;

pub use draft::{DiffusionDrafter, Draft, DraftCtx, Drafter, RandomDrafter, SequenceDrafter};
pub use driver::{generate, Generation, SpecConfig, SpecError, Speculator};
pub use stats::SpecStats;
