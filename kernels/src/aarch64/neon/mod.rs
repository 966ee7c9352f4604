//! NEON kernels: the same function names as the scalar reference, split by
//! family (legacy 32-element blocks and floats; K-quants and IQ4_XS; Q2_K,
//! Q3_K and the Q8_K quantiser).

use crate::sig::{QuantizeFn, VecDotFn};
use crate::GgmlType;

pub mod kquants;
pub mod legacy;
pub mod lowbit;

/// A block type's dot variants on this tier: `"neon"` always, `"dotprod"`
/// (the faster, last) when the host has the dot-product extension.
pub(crate) fn variant_pair(plain: VecDotFn, dot: VecDotFn) -> Vec<(&'static str, VecDotFn)> {
    let mut v = vec![("neon", plain)];
    if has_dotprod() {
        v.push(("dotprod", dot));
    }
    v
}

/// Whether the host has the dot-product extension (`sdot`).
pub(crate) fn has_dotprod() -> bool {
    std::arch::is_aarch64_feature_detected!("dotprod")
}

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
