//! Q4_1: 32 weights, f16 scale `d` and minimum `m`, 4-bit levels;
//! `x = d·q + m`. Same nibble order as Q4_0. Dot type: Q8_1.

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::legacy_search::{make_qkx3_quants, weighted_blocks};
use super::q8_0::rows;
use super::q8_1::BlockQ8_1;
use crate::assert_block_size;
use crate::blocks::{as_blocks, as_blocks_mut};

pub const QK: usize = 32;

// Declared as every 32-element scalar/ block type is (q4_0, q4_1, q5_0, q5_1, q8_0, q8_1, iq4_nl):
// repr(C), Pod, an f16 scale first and a size assertion, then a dequantize over the as_blocks view;
// each module owns its ggml layout and decodes its own levels.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ4_1 {
    pub d: f16,
    pub m: f16,
    pub qs: [u8; QK / 2],
}
assert_block_size!(BlockQ4_1, 20);

pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    let blocks: &[BlockQ4_1] = as_blocks(&src[..dst.len() / QK * 20]);
    for (b, y) in blocks.iter().zip(dst.chunks_exact_mut(QK)) {
        let (d, m) = (b.d.to_f32(), b.m.to_f32());
        for j in 0..QK / 2 {
            y[j] = d * (b.qs[j] & 0x0f) as f32 + m;
            y[j + QK / 2] = d * (b.qs[j] >> 4) as f32 + m;
        }
    }
}

/// ggml's `quantize_row_q4_1_ref` (imatrix `None`) or `quantize_row_q4_1_impl`.
pub fn quantize(src: &[f32], dst: &mut [u8], imatrix: Option<&[f32]>) {
    let blocks: &mut [BlockQ4_1] = as_blocks_mut(&mut dst[..src.len() / QK * 20]);
    match imatrix {
        None => {
            for (b, x) in blocks.iter_mut().zip(src.chunks_exact(QK)) {
                let (d, m, l) = quantize_block_ref(x, 15);
                b.d = f16::from_f32(d);
                b.m = f16::from_f32(m);
                for j in 0..QK / 2 {
                    b.qs[j] = l[j] | (l[j + QK / 2] << 4);
                }
            }
        }
        Some(qw) => weighted_blocks(blocks, src, qw, |b, x, weight, l| {
            let (d, m) = make_qkx3_quants(15, x, weight, l);
            b.d = f16::from_f32(d);
            b.m = f16::from_f32(m);
            for j in 0..QK / 2 {
                b.qs[j] = l[j] | (l[j + QK / 2] << 4);
            }
        }),
    }
}

/// The min/max block quantiser shared with Q5_1 (`nmax` 15 or 31): returns
/// `(d, min, levels)` with `levels[j] = min(nmax, trunc((x − min)·(1/d) + 0.5))`.
pub(crate) fn quantize_block_ref(x: &[f32], nmax: u8) -> (f32, f32, [u8; QK]) {
    let mut min = f32::MAX;
    let mut max = -f32::MAX;
    for &v in x {
        if v < min {
            min = v;
        }
        if v > max {
            max = v;
        }
    }
    let d = (max - min) / nmax as f32;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut l = [0u8; QK];
    for (o, &v) in l.iter_mut().zip(x) {
        *o = (((v - min) * id + 0.5) as i8).min(nmax as i8) as u8;
    }
    (d, min, l)
}

/// `sumf += (dx·dy)·sumi + mx·sy` per block (ggml's
/// `ggml_vec_dot_q4_1_q8_1_generic`).
pub fn vec_dot(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let (x, y) = rows::<BlockQ4_1, BlockQ8_1>(n, w, act);
    let mut sumf = 0f32;
    for (bx, by) in x.iter().zip(y) {
        let (mut s0, mut s1) = (0i32, 0i32);
        for j in 0..QK / 2 {
            s0 += (bx.qs[j] & 0x0f) as i32 * by.qs[j] as i32;
            s1 += (bx.qs[j] >> 4) as i32 * by.qs[j + QK / 2] as i32;
        }
        sumf += (bx.d.to_f32() * by.d.to_f32()) * (s0 + s1) as f32 + bx.m.to_f32() * by.s.to_f32();
    }
    sumf
}
