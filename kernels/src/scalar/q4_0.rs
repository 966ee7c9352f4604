//! Q4_0: 32 weights, one f16 scale, 4-bit levels `q ∈ [0, 15]`;
//! `x = d·(q − 8)`. Nibble `j` of byte `j` holds element `j` (low) and element
//! `j + 16` (high). Dot type: Q8_0.

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::kquant_search::signed_absmax;
use super::legacy_search::{make_qx_quants, weighted_blocks};
use super::q8_0::{rows, BlockQ8_0};
use crate::assert_block_size;
use crate::blocks::{as_blocks, as_blocks_mut};

pub const QK: usize = 32;

// Declared as every 32-element scalar/ block type is (q4_0, q4_1, q5_0, q5_1, q8_0, q8_1, iq4_nl):
// repr(C), Pod, an f16 scale first and a size assertion, then a dequantize over the as_blocks view;
// each module owns its ggml layout and decodes its own levels.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ4_0 {
    pub d: f16,
    pub qs: [u8; QK / 2],
}
assert_block_size!(BlockQ4_0, 18);

pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    let blocks: &[BlockQ4_0] = as_blocks(&src[..dst.len() / QK * 18]);
    for (b, y) in blocks.iter().zip(dst.chunks_exact_mut(QK)) {
        let d = b.d.to_f32();
        for j in 0..QK / 2 {
            y[j] = d * ((b.qs[j] & 0x0f) as i32 - 8) as f32;
            y[j + QK / 2] = d * ((b.qs[j] >> 4) as i32 - 8) as f32;
        }
    }
}

/// ggml's `quantize_row_q4_0_ref` (imatrix `None`) or `quantize_row_q4_0_impl`.
pub fn quantize(src: &[f32], dst: &mut [u8], imatrix: Option<&[f32]>) {
    let blocks: &mut [BlockQ4_0] = as_blocks_mut(&mut dst[..src.len() / QK * 18]);
    match imatrix {
        None => {
            for (b, x) in blocks.iter_mut().zip(src.chunks_exact(QK)) {
                *b = quantize_block_ref(x);
            }
        }
        Some(qw) => weighted_blocks(blocks, src, qw, |b, x, weight, l| {
            let d = make_qx_quants(8, x, l, weight);
            b.d = f16::from_f32(d);
            for j in 0..QK / 2 {
                b.qs[j] = l[j] | (l[j + QK / 2] << 4);
            }
        }),
    }
}

fn quantize_block_ref(x: &[f32]) -> BlockQ4_0 {
    let (max, _) = signed_absmax(x);
    let d = max / -8.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut b = BlockQ4_0 {
        d: f16::from_f32(d),
        qs: [0; QK / 2],
    };
    // `(int8_t)(x·id + 8.5)` truncates toward zero; the sum lies in [0.5, 16.5].
    let level = |v: f32| ((v * id + 8.5) as i8).min(15) as u8;
    for j in 0..QK / 2 {
        b.qs[j] = level(x[j]) | (level(x[j + QK / 2]) << 4);
    }
    b
}

/// Per block: integer dot of the centred levels with the Q8_0 levels, then
/// `sumf += sumi·dx·dy` (ggml's `ggml_vec_dot_q4_0_q8_0_generic`).
pub fn vec_dot(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let (x, y) = rows::<BlockQ4_0, BlockQ8_0>(n, w, act);
    let mut sumf = 0f32;
    for (bx, by) in x.iter().zip(y) {
        let (mut s0, mut s1) = (0i32, 0i32);
        for j in 0..QK / 2 {
            s0 += ((bx.qs[j] & 0x0f) as i32 - 8) * by.qs[j] as i32;
            s1 += ((bx.qs[j] >> 4) as i32 - 8) * by.qs[j + QK / 2] as i32;
        }
        sumf += (s0 + s1) as f32 * bx.d.to_f32() * by.d.to_f32();
    }
    sumf
}
