//! Placeholder: no kernels of this family in this tier yet (the scalar reference is used).

use crate::isa::{QuantizeFn, VecDotFn};
use crate::GgmlType;

pub fn vec_dot_fn(_ty: GgmlType) -> Option<VecDotFn> {
    None
}

pub fn quantize_fn(_act_ty: GgmlType) -> Option<QuantizeFn> {
    None
}
