//! Q8_1: Q8_0's levels plus `s = d·Σq` (f16), the activation type for Q4_1 and
//! Q5_1 weights, whose minimum term needs the activation block's sum.

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::q8_0;
use crate::assert_block_size;
use crate::blocks::{as_blocks, as_blocks_mut};

pub const QK: usize = 32;

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
    let blocks: &mut [BlockQ8_1] = as_blocks_mut(&mut dst[..src.len() / QK * 36]);
    for (b, x) in blocks.iter_mut().zip(src.chunks_exact(QK)) {
        let d = q8_0::quantize_block(x, &mut b.qs);
        let sum: i32 = b.qs.iter().map(|&q| q as i32).sum();
        b.d = f16::from_f32(d);
        b.s = f16::from_f32(sum as f32 * d);
    }
}

/// An activation row into Q8_1 as ggml's x86 `quantize_row_q8_1`: the levels
/// of `q8_0::quantize_block_act`, `s = d·Σq`.
pub fn quantize_act(src: &[f32], dst: &mut [u8]) {
    let blocks: &mut [BlockQ8_1] = as_blocks_mut(&mut dst[..src.len() / QK * 36]);
    for (b, x) in blocks.iter_mut().zip(src.chunks_exact(QK)) {
        let d = q8_0::quantize_block_act(x, &mut b.qs);
        let sum: i32 = b.qs.iter().map(|&q| q as i32).sum();
        b.d = f16::from_f32(d);
        b.s = f16::from_f32(sum as f32 * d);
    }
}

/// Q8_1 · Q8_1 (ggml has no such kernel; defined as Q8_0's, ignoring `s`).
pub fn vec_dot(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let nb = n / QK;
    let x: &[BlockQ8_1] = as_blocks(&w[..nb * 36]);
    let y: &[BlockQ8_1] = as_blocks(&act[..nb * 36]);
    let pairs = x
        .iter()
        .zip(y)
        .map(|(bx, by)| ((bx.d, &bx.qs), (by.d, &by.qs)));
    super::q8_0::dot_blocks(pairs)
}
