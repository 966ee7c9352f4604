//! Quantized block formats, dot products and small f32 ops for clover.
//!
//! No I/O and no model knowledge. `scalar` is the reference every SIMD path is
//! tested against; `isa` picks the fastest tier the host has, once.

#[cfg(target_arch = "aarch64")]
pub mod aarch64;
pub mod blocks;
pub mod cpu;
pub mod iq4_r8;
pub mod isa;
pub mod matmul;
pub mod plan;
pub mod q3k_r8;
pub mod q4k_r8;
pub mod q5k_r8;
pub mod q6k_r8;
pub mod q80_r8;
pub mod r8;
pub mod repack;
pub mod scalar;
pub mod sig;
pub mod types;
#[cfg(target_arch = "x86_64")]
pub mod x86;

pub use cpu::Isa;
pub use isa::KernelTable;
pub use matmul::{QActs, QExperts, QMatrix, Rows};
pub use plan::{Kernel, Mode};
pub use types::{GgmlType, UnsupportedType};
