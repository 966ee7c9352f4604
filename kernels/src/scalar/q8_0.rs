//! Q8_0: 32 weights, one f16 scale, signed 8-bit levels; `x = d·q`. Also the
//! activation type for Q4_0, Q5_0, Q8_0 and IQ4_NL weights. Dot type: Q8_0.

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::legacy_search::round_away;
use crate::assert_block_size;
use crate::blocks::{as_blocks, as_blocks_mut};

pub const QK: usize = 32;

// Declared as every 32-element scalar/ block type is (q4_0, q4_1, q5_0, q5_1, q8_0, q8_1, iq4_nl):
// repr(C), Pod, an f16 scale first and a size assertion, then a dequantize over the as_blocks view;
// each module owns its ggml layout and decodes its own levels.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ8_0 {
    pub d: f16,
    pub qs: [i8; QK],
}
assert_block_size!(BlockQ8_0, 34);

pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    let blocks: &[BlockQ8_0] = as_blocks(&src[..dst.len() / QK * 34]);
    for (b, y) in blocks.iter().zip(dst.chunks_exact_mut(QK)) {
        let d = b.d.to_f32();
        for (o, &q) in y.iter_mut().zip(&b.qs) {
            *o = q as f32 * d;
        }
    }
}

/// The scale and levels of one block by ggml's `quantize_row_q8_0_ref`:
/// `d = amax/127` (f32), levels `roundf(x·(1/d))`. Returns the f32 `d`.
pub(crate) fn quantize_block(x: &[f32], qs: &mut [i8; QK]) -> f32 {
    let mut amax = 0f32;
    for &v in x {
        amax = amax.max(v.abs());
    }
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    for (q, &v) in qs.iter_mut().zip(x) {
        *q = round_away(v * id) as i8;
    }
    d
}

/// The levels of one *activation* block as ggml's CPU backend converts
/// activations on x86 (`quantize_row_q8_0` in `arch/x86/quants.c`, the
/// `from_float` of the Q8_0 dot product): `d = amax/127`, levels
/// `round_half_even(x·(127/amax))`. It differs from the weight quantiser
/// (`quantize_block`, `1/d` and half away from zero) in the last bit of the
/// multiplier and on ties, and one flipped level can move a MoE routing
/// decision, so logits follow llama.cpp only with this form. Returns the f32 `d`.
// Alike to quantize_block above on purpose: the multiplier (127/amax vs 1/d) and the rounding (ties
// to even vs away from zero) are ggml's two converters (see above).
pub(crate) fn quantize_block_act(x: &[f32], qs: &mut [i8; QK]) -> f32 {
    let mut amax = 0f32;
    for &v in x {
        amax = amax.max(v.abs());
    }
    let d = amax / 127.0;
    let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
    for (q, &v) in qs.iter_mut().zip(x) {
        *q = (v * id).round_ties_even() as i8;
    }
    d
}

/// An activation row into Q8_0 (`quantize_block_act`): the kernel table's
/// converter, also used for a Q8_0 K/V cache as ggml's `set_rows` does.
pub fn quantize_act(src: &[f32], dst: &mut [u8]) {
    let blocks: &mut [BlockQ8_0] = as_blocks_mut(&mut dst[..src.len() / QK * 34]);
    for (b, x) in blocks.iter_mut().zip(src.chunks_exact(QK)) {
        let d = quantize_block_act(x, &mut b.qs);
        b.d = f16::from_f32(d);
    }
}

/// ggml's `quantize_row_q8_0_ref`; ggml ignores the importance matrix for Q8_0
/// and so do we.
pub fn quantize(src: &[f32], dst: &mut [u8], _imatrix: Option<&[f32]>) {
    let blocks: &mut [BlockQ8_0] = as_blocks_mut(&mut dst[..src.len() / QK * 34]);
    for (b, x) in blocks.iter_mut().zip(src.chunks_exact(QK)) {
        let d = quantize_block(x, &mut b.qs);
        b.d = f16::from_f32(d);
    }
}

/// The first `n / 32` blocks of a 32-element weight row (`B`) and of its
/// activation row (`A`): every 32-element scalar dot starts here.
pub(crate) fn rows<'a, B: Pod, A: Pod>(n: usize, w: &'a [u8], act: &'a [u8]) -> (&'a [B], &'a [A]) {
    let nb = n / QK;
    (
        as_blocks(&w[..nb * std::mem::size_of::<B>()]),
        as_blocks(&act[..nb * std::mem::size_of::<A>()]),
    )
}

/// `sumf += sumi·(dx·dy)` per block (ggml's `ggml_vec_dot_q8_0_q8_0_generic`).
pub fn vec_dot(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let (x, y) = rows::<BlockQ8_0, BlockQ8_0>(n, w, act);
    dot_blocks(
        x.iter()
            .zip(y)
            .map(|(bx, by)| ((bx.d, &bx.qs), (by.d, &by.qs))),
    )
}

/// `Σ sumi·(dx·dy)` over pairs of blocks given as (scale, levels), in
/// order: the Q8_0 and Q8_1 dots' arithmetic.
pub(crate) fn dot_blocks<'a>(
    pairs: impl Iterator<Item = ((f16, &'a [i8; QK]), (f16, &'a [i8; QK]))>,
) -> f32 {
    let mut sumf = 0f32;
    for ((dx, qx), (dy, qy)) in pairs {
        let mut sumi = 0i32;
        for j in 0..QK {
            sumi += qx[j] as i32 * qy[j] as i32;
        }
        sumf += sumi as f32 * (dx.to_f32() * dy.to_f32());
    }
    sumf
}

#[cfg(test)]
mod act_tests {
    use super::*;

    #[test]
    fn activation_levels_round_ties_to_even_like_ggml_x86() {
        // amax = 127 → multiplier exactly 1: every k + 0.5 is a tie.
        let mut x = [0f32; QK];
        x[0] = 127.0;
        x[1] = 2.5;
        x[2] = 3.5;
        x[3] = -2.5;
        x[4] = -0.5;
        let (mut act, mut wt) = ([0i8; QK], [0i8; QK]);
        assert_eq!(quantize_block_act(&x, &mut act), 1.0);
        quantize_block(&x, &mut wt);
        assert_eq!(&act[..5], &[127, 2, 4, -2, 0]);
        // The weight quantiser (`_ref`) rounds half away from zero.
        assert_eq!(&wt[..5], &[127, 3, 4, -3, -1]);
    }
}
