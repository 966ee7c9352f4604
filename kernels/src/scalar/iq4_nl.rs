//! IQ4_NL: 32 weights, one f16 scale, 4-bit indices into a fixed non-linear
//! grid; `x = d·KVALUES[q]`. Same nibble order as Q4_0. Dot type: Q8_0.

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::kquant_search::signed_absmax;
use super::legacy_search::{best_index_int8, GROUP_MAX_EPS};
use super::q8_0::{rows, BlockQ8_0};
use crate::assert_block_size;
use crate::blocks::{as_blocks, as_blocks_mut};

pub const QK: usize = 32;

/// ggml's `kvalues_iq4nl`.
pub const KVALUES: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

// Declared as every 32-element scalar/ block type is (q4_0, q4_1, q5_0, q5_1, q8_0, q8_1, iq4_nl):
// repr(C), Pod, an f16 scale first and a size assertion, then a dequantize over the as_blocks view;
// each module owns its ggml layout and decodes its own levels.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockIq4Nl {
    pub d: f16,
    pub qs: [u8; QK / 2],
}
assert_block_size!(BlockIq4Nl, 18);

pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    let blocks: &[BlockIq4Nl] = as_blocks(&src[..dst.len() / QK * 18]);
    for (b, y) in blocks.iter().zip(dst.chunks_exact_mut(QK)) {
        let d = b.d.to_f32();
        for j in 0..QK / 2 {
            y[j] = d * KVALUES[(b.qs[j] & 0x0f) as usize] as f32;
            y[j + QK / 2] = d * KVALUES[(b.qs[j] >> 4) as usize] as f32;
        }
    }
}

/// With `imatrix` `None`: ggml's `quantize_row_iq4_nl_ref` (one least-squares
/// refit of the scale, `ntry = -1`). With `Some`: ggml's `quantize_iq4_nl`
/// (weights `qw·sqrt(σ² + x²)` with σ² = 2·Σx²/32 per block, and a search
/// over 15 trial scales, `ntry = 7`).
pub fn quantize(src: &[f32], dst: &mut [u8], imatrix: Option<&[f32]>) {
    let blocks: &mut [BlockIq4Nl] = as_blocks_mut(&mut dst[..src.len() / QK * 18]);
    for (i, (b, x)) in blocks.iter_mut().zip(src.chunks_exact(QK)).enumerate() {
        let qw = imatrix.map(|q| &q[i * QK..(i + 1) * QK]);
        *b = quantize_block(x, qw, if qw.is_some() { 7 } else { -1 });
    }
}

/// ggml's `quantize_iq4_nl` (`ggml_quantize_chunk`'s IQ4_NL): the scale
/// search over 15 trial scales (`ntry = 7`) with or without `imatrix`
/// (without: weights `x²`).
pub fn quantize_searched(src: &[f32], dst: &mut [u8], imatrix: Option<&[f32]>) {
    let blocks: &mut [BlockIq4Nl] = as_blocks_mut(&mut dst[..src.len() / QK * 18]);
    for (i, (b, x)) in blocks.iter_mut().zip(src.chunks_exact(QK)).enumerate() {
        *b = quantize_block(x, imatrix.map(|q| &q[i * QK..(i + 1) * QK]), 7);
    }
}

/// One block of ggml's `quantize_row_iq4_nl_impl` with `super_block_size ==
/// block_size == 32`.
fn quantize_block(x: &[f32], qw: Option<&[f32]>, ntry: i32) -> BlockIq4Nl {
    let values = &KVALUES;
    let mut sigma2 = 0f32;
    for &v in x {
        sigma2 += v * v;
    }
    sigma2 *= 2.0 / QK as f32;
    let mut weight = [0f32; QK];
    for j in 0..QK {
        weight[j] = match qw {
            Some(q) => q[j] * (sigma2 + x[j] * x[j]).sqrt(),
            None => x[j] * x[j],
        };
    }
    let (max, amax) = signed_absmax(x);
    let mut l = [0u8; QK];
    let mut b = BlockIq4Nl {
        d: f16::from_f32(0.0),
        qs: [0; QK / 2],
    };
    if amax < GROUP_MAX_EPS {
        // ggml leaves the scale 0; with the search (ntry > 0) it still
        // picks each level for 0 · x, the level nearest 0 (0x88 packed).
        if ntry > 0 {
            let k = best_index_int8(values, 0.0) as u8;
            b.qs = [k | (k << 4); QK / 2];
        }
        return b;
    }
    let v0 = values[0] as f32;
    let mut d = if ntry > 0 { -max / v0 } else { max / v0 };
    let mut id = 1.0 / d;
    let (mut sumqx, mut sumq2) = (0f32, 0f32);
    for j in 0..QK {
        let k = best_index_int8(values, id * x[j]);
        l[j] = k as u8;
        let q = values[k] as f32;
        sumqx += weight[j] * q * x[j];
        sumq2 += weight[j] * q * q;
    }
    d = if sumq2 > 0.0 { sumqx / sumq2 } else { 0.0 };
    let mut best = d * sumqx;
    for itry in -ntry..=ntry {
        id = (itry as f32 + v0) / max;
        let (mut sumqx, mut sumq2) = (0f32, 0f32);
        for j in 0..QK {
            let q = values[best_index_int8(values, id * x[j])] as f32;
            sumqx += weight[j] * q * x[j];
            sumq2 += weight[j] * q * q;
        }
        if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    b.d = f16::from_f32(d);
    if ntry > 0 {
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        for j in 0..QK {
            l[j] = best_index_int8(values, id * x[j]) as u8;
        }
    }
    for j in 0..QK / 2 {
        b.qs[j] = l[j] | (l[j + QK / 2] << 4);
    }
    b
}

/// `sumf += (dy·dx)·sumi` per block (ggml's `ggml_vec_dot_iq4_nl_q8_0_generic`).
pub fn vec_dot(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let (x, y) = rows::<BlockIq4Nl, BlockQ8_0>(n, w, act);
    let mut sumf = 0f32;
    for (bx, by) in x.iter().zip(y) {
        let d = by.d.to_f32() * bx.d.to_f32();
        let (mut s1, mut s2) = (0i32, 0i32);
        for j in 0..QK / 2 {
            s1 += by.qs[j] as i32 * KVALUES[(bx.qs[j] & 0x0f) as usize] as i32;
            s2 += by.qs[j + QK / 2] as i32 * KVALUES[(bx.qs[j] >> 4) as usize] as i32;
        }
        sumf += d * (s1 + s2) as f32;
    }
    sumf
}
