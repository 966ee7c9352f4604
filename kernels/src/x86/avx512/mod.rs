//! AVX512 kernels: the same function names as the scalar reference, split by
//! family (legacy 32-element blocks and floats; K-quants and IQ4_XS; Q2_K and
//! Q3_K; the Q8 activation quantisers; the delta rule).

use crate::sig::{QuantizeFn, VecDotFn};
use crate::GgmlType;

pub mod delta;
pub mod gemm;
pub mod gemm_f32;
mod gemm_kq;
pub mod iq4_r8;
pub mod kquants;
pub mod legacy;
pub mod lowbit;
pub mod prompt;
pub mod q3k_r8;
pub mod q4k_r8;
pub mod q5k_r8;
pub mod q6k_r8;
pub mod q80_r8;
pub mod quant;
mod repack;

use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T1};

/// A block type's dot variants on this tier: `"bw"` always, `"vnni"` (the
/// faster, last) when the host has AVX-512 VNNI.
pub(crate) fn variant_pair(plain: VecDotFn, vnni: VecDotFn) -> Vec<(&'static str, VecDotFn)> {
    let mut v = vec![("bw", plain)];
    if has_vnni() {
        v.push(("vnni", vnni));
    }
    v
}

/// Whether the host has AVX-512 VNNI.
pub(crate) fn has_vnni() -> bool {
    is_x86_feature_detected!("avx512vnni")
}

/// Prefetches the weight bytes [`PREFETCH_BYTES`] ahead of block `b` of
/// both rows into L2 (`prefetcht1`), for the two-row mat-vec kernels. Rows
/// are contiguous in a matrix, so past a row's end this reaches the rows
/// that follow. A prefetch of an address outside the mapping is dropped,
/// never faults.
///
/// Why: a decode step reads each selected expert's matrices once, as short
/// runs (about 450 KiB each at full size) scattered over the file, which
/// leaves the hardware prefetchers little time to ramp up; asking for the
/// lines 1 KiB ahead of both rows keeps more misses in flight. Measured, not
/// modelled: one-thread full-size decoding gained clearly (512 and 2048
/// bytes ahead were no better; docs/PERFORMANCE.md). The file's pages were PMD-mapped huge pages in these
/// runs (`FilePmdMapped`), so this is not about 4 KiB page boundaries.
#[inline(always)]
pub(crate) fn prefetch_rows2<T>(x0: &[T], x1: &[T], b: usize) {
    for x in [x0, x1] {
        let p = x
            .as_ptr()
            .wrapping_add(b)
            .cast::<i8>()
            .wrapping_add(PREFETCH_BYTES);
        // SAFETY: prefetching is a hint with no architectural effect; SSE is
        // part of x86-64.
        unsafe {
            _mm_prefetch::<_MM_HINT_T1>(p);
            _mm_prefetch::<_MM_HINT_T1>(p.wrapping_add(64));
        }
    }
}

/// How far ahead [`prefetch_rows2`] reaches.
const PREFETCH_BYTES: usize = 1024;

/// This tier's dot product for weight type `ty`, if it has one.
// Same shape as aarch64/neon/mod.rs::vec_dot_fn/quantize_fn: each tier chains its own family
// modules, and only one of the two compiles per target.
pub fn vec_dot_fn(ty: GgmlType) -> Option<VecDotFn> {
    legacy::vec_dot_fn(ty)
        .or_else(|| kquants::vec_dot_fn(ty))
        .or_else(|| lowbit::vec_dot_fn(ty))
}

/// This tier's activation quantiser into `act_ty`, if it has one.
pub fn quantize_fn(act_ty: GgmlType) -> Option<QuantizeFn> {
    quant::quantize_fn(act_ty)
        .or_else(|| legacy::quantize_fn(act_ty))
        .or_else(|| kquants::quantize_fn(act_ty))
}
