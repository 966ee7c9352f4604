//! NEON kernels: the same function names as the scalar reference, split by
//! family (legacy 32-element blocks and floats; K-quants and IQ4_XS; Q2_K,
//! Q3_K and the Q8_K quantiser).

use crate::sig::{QuantizeFn, VecDotFn};
use crate::GgmlType;

pub mod kquants;
pub mod legacy;
pub mod lowbit;

/// This tier's dot product for weight type `ty`, if it has one.
pub fn vec_dot_fn(ty: GgmlType) -> Option<VecDotFn> {
    legacy::vec_dot_fn(ty)
        .or_else(|| kquants::vec_dot_fn(ty))
        .or_else(|| lowbit::vec_dot_fn(ty))
}

/// This tier's activation quantiser into `act_ty`, if it has one.
pub fn quantize_fn(act_ty: GgmlType) -> Option<QuantizeFn> {
    legacy::quantize_fn(act_ty)
        .or_else(|| kquants::quantize_fn(act_ty))
        .or_else(|| lowbit::quantize_fn(act_ty))
}
