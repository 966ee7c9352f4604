//! Q8_1: Q8_0's levels plus `s = d·Σq` (f16), the activation type for Q4_1 and
//! Q5_1 weights, whose minimum term needs the activation block's sum.

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::q8_0::{self, rows};
use crate::assert_block_size;
use crate::blocks::{as_blocks, as_blocks_mut};

pub const QK: usize = 32;

// Declared as every 32-element scalar/ block type is (q4_0, q4_1, q5_0, q5_1, q8_0, q8_1, iq4_nl):
// repr(C), Pod, an f16 scale first and a size assertion, then a dequantize over the as_blocks view;
// each module owns its ggml layout and decodes its own levels.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ8_1 {
    pub d: f16,
    /// `d · Σ qs`, rounded once from f32.
    pub s: f16,
    pub qs: [i8; QK],
}
assert_block_size!(BlockQ8_1, 36);

pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    let blocks: &[BlockQ8_1] = as_blocks(&src[..dst.len() / QK * 36]);
    for (b, y) in blocks.iter().zip(dst.chunks_exact_mut(QK)) {
        let d = b.d.to_f32();
        for (o, &q) in y.iter_mut().zip(&b.qs) {
            *o = q as f32 * d;
        }
    }
}

/// ggml's `quantize_row_q8_1_ref` (the same levels as Q8_0); no imatrix use.
pub fn quantize(src: &[f32], dst: &mut [u8], _imatrix: Option<&[f32]>) {
    quantize_with(src, dst, q8_0::quantize_block);
}

/// An activation row into Q8_1 as ggml's x86 `quantize_row_q8_1`: the levels
/// of `q8_0::quantize_block_act`, `s = d·Σq`.
pub fn quantize_act(src: &[f32], dst: &mut [u8]) {
    quantize_with(src, dst, q8_0::quantize_block_act);
}

/// Q8_1 blocks whose levels and f32 scale come from `block` (one of Q8_0's
/// two block quantisers), `s = d·Σq`.
fn quantize_with(src: &[f32], dst: &mut [u8], block: fn(&[f32], &mut [i8; QK]) -> f32) {
    let blocks: &mut [BlockQ8_1] = as_blocks_mut(&mut dst[..src.len() / QK * 36]);
    for (b, x) in blocks.iter_mut().zip(src.chunks_exact(QK)) {
        let d = block(x, &mut b.qs);
        let sum: i32 = b.qs.iter().map(|&q| q as i32).sum();
        b.d = f16::from_f32(d);
        b.s = f16::from_f32(sum as f32 * d);
    }
}

/// Q8_1 · Q8_1 (ggml has no such kernel; defined as Q8_0's, ignoring `s`).
pub fn vec_dot(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let (x, y) = rows::<BlockQ8_1, BlockQ8_1>(n, w, act);
    let pairs = x
        .iter()
        .zip(y)
        .map(|(bx, by)| ((bx.d, &bx.qs), (by.d, &by.qs)));
    super::q8_0::dot_blocks(pairs)
}
