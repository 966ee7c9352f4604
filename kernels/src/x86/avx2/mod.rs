//! AVX2 kernels: the same function names as the scalar reference, split by
//! family (legacy 32-element blocks and floats; K-quants and IQ4_XS).

use crate::sig::{QuantizeFn, VecDotFn};
use crate::GgmlType;

pub mod kquants;
pub mod legacy;

/// This tier's dot product for weight type `ty`, if it has one.
pub fn vec_dot_fn(ty: GgmlType) -> Option<VecDotFn> {
    legacy::vec_dot_fn(ty).or_else(|| kquants::vec_dot_fn(ty))
}

/// This tier's activation quantiser into `act_ty`, if it has one.
pub fn quantize_fn(act_ty: GgmlType) -> Option<QuantizeFn> {
    legacy::quantize_fn(act_ty).or_else(|| kquants::quantize_fn(act_ty))
}

pub use kquants::{ggml_repack_dot_fn, ggml_repack_gemm_dot_fn, tiled_dot_fn};
pub use legacy::{gemm_f16_fn, gemm_f32_fn};
