//! clover: runs the Clover-35B-A3B model family (and plain qwen35moe) on CPUs.

pub mod bench;
pub mod chat;
pub mod cli;
pub mod constrain;
pub mod engine;
pub mod gguf;
pub mod imatrix;
pub mod kld;
pub mod model;
pub mod output;
pub mod quantize;
pub mod sample;
pub mod score;
pub mod server;
pub mod signals;
pub mod spec;
pub mod synth;
pub mod tokenizer;
pub mod tui;

pub use kernels;
