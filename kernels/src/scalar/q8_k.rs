//! Q8_K: the activation type of the K-quants and IQ4_XS.
//!
//! 256 values `x ≈ d·q` with `d: f32`, `q: i8 ∈ [-127, 127]`, plus `bsums`, the
//! sum of each 16 consecutive `q` (used to apply the weights' sub-block mins).
//! Layout (ggml `block_q8_K`): `d: f32`, `qs[256]`, `bsums[16]: i16`.

// Index loops mirror ggml's reference line by line (the order of f32 operations is the spec).
#![allow(clippy::needless_range_loop)]

use bytemuck::{Pod, Zeroable};

use super::kquant_search::{nearest_int, signed_absmax};
use crate::assert_block_size;
use crate::blocks::{as_blocks, as_blocks_mut};

pub const QK_K: usize = 256;

// Declared as every 256-element scalar/ block type is (q2_k to q8_k, iq4_xs): repr(C), Pod, a size
// assertion and the per-element accessors; each module owns its ggml layout, so the fields and the
// level decoding differ.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ8K {
    pub d: f32,
    pub qs: [i8; 256],
    pub bsums: [i16; 16],
}
assert_block_size!(BlockQ8K, 292);

pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    let blocks: &[BlockQ8K] = as_blocks(src);
    assert_eq!(blocks.len() * QK_K, dst.len(), "Q8_K dequantize length");
    for (b, y) in blocks.iter().zip(dst.chunks_exact_mut(QK_K)) {
        for (v, &q) in y.iter_mut().zip(&b.qs) {
            *v = b.d * q as f32;
        }
    }
}

/// ggml's `quantize_row_q8_K_ref`: `d = max/−127` where `max` is the first
/// element of largest magnitude, `q = round_half_even(x/d)`.
/// Q8_K is an activation format: the importance matrix is ignored.
pub fn quantize(src: &[f32], dst: &mut [u8], _imatrix: Option<&[f32]>) {
    let blocks: &mut [BlockQ8K] = as_blocks_mut(dst);
    assert_eq!(blocks.len() * QK_K, src.len(), "Q8_K quantize length");
    for (b, x) in blocks.iter_mut().zip(src.chunks_exact(QK_K)) {
        quantize_block(x, b);
    }
}

/// One block of [`quantize`] (shared by the SIMD tiers for their tails).
pub fn quantize_block(x: &[f32], b: &mut BlockQ8K) {
    let (max, amax) = signed_absmax(x);
    if amax == 0.0 {
        b.d = 0.0;
        b.qs = [0; 256];
        // ggml leaves bsums as they were; zero is what they sum to.
        b.bsums = [0; 16];
        return;
    }
    let iscale = -127.0 / max;
    for (q, &v) in b.qs.iter_mut().zip(x) {
        *q = nearest_int(iscale * v).min(127) as i8;
    }
    for j in 0..16 {
        b.bsums[j] = b.qs[16 * j..16 * j + 16].iter().map(|&q| q as i16).sum();
    }
    b.d = 1.0 / iscale;
}

/// Q8_K × Q8_K (not a ggml weight type; provided for completeness and tests).
pub fn vec_dot(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let (x, y) = rows::<BlockQ8K>(n, w, act);
    let mut sumf = 0f32;
    for (xb, yb) in x.iter().zip(y) {
        let sumi: i32 = xb
            .qs
            .iter()
            .zip(&yb.qs)
            .map(|(&a, &b)| a as i32 * b as i32)
            .sum();
        sumf += xb.d * yb.d * sumi as f32;
    }
    sumf
}

/// Checked views of a K-quant weight row and its Q8_K activation row, `n /
/// 256` blocks each (every tier's K-quant dots start here).
pub(crate) fn rows<'a, B: bytemuck::Pod>(
    n: usize,
    w: &'a [u8],
    act: &'a [u8],
) -> (&'a [B], &'a [BlockQ8K]) {
    let x: &[B] = as_blocks(w);
    let y: &[BlockQ8K] = as_blocks(act);
    let nb = n / QK_K;
    assert!(
        n.is_multiple_of(QK_K) && x.len() >= nb && y.len() >= nb,
        "vec_dot: {n} elements do not fit {} weight / {} activation blocks",
        x.len(),
        y.len()
    );
    (&x[..nb], &y[..nb])
}
