//! Quantized block formats, dot products and small f32 ops for clover.
//!
//! No I/O and no model knowledge. `scalar` is the reference every SIMD path is
//! tested against.

pub mod types;

pub use types::{GgmlType, UnsupportedType};
