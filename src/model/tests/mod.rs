//! Tests of the forward pass on tiny models built in memory (`model::tiny`).

mod attention;
mod deltanet;
mod diffusion;
mod forward;
mod moe;
mod verify;
mod weights;

pub use super::config::{LayerKind, ModelConfig};
pub use super::forward::Model;
pub use super::tiny::*;
pub use kernels::GgmlType;
