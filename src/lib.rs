//! clover: runs the Clover-35B-A3B model family (and plain qwen35moe) on CPUs.

pub mod cli;
pub mod gguf;
pub mod synth;

pub use kernels;
