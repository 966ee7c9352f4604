//! IQ4_XS: 256 weights in 8 sub-blocks of 32, 4.25 bits per weight.
//!
//! `x = d·(ls − 32)·G[q]` with `G` the 16-entry non-linear grid
//! ([`KVALUES_IQ4NL`]), a 6-bit sub-block scale `ls` and `q ∈ 0..16`.
//! Layout (ggml `block_iq4_xs`): `d: f16`, `scales_h: u16` (bits `2j..2j+2`
//! are the high pair of `ls_j`), `scales_l[4]` (low nibbles, two per byte),
//! `qs[128]`: 16 bytes per sub-block, element `l` in the low nibble of byte
//! `l`, element `l + 16` in its high nibble.

// Index loops mirror ggml's reference line by line (the order of f32 operations is the spec).
#![allow(clippy::needless_range_loop)]

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::iq4_grid::{best_index, KVALUES_IQ4NL};
use super::kquant_search::{nearest_int, signed_absmax, GROUP_MAX_EPS};
use super::q8_k::rows;
use crate::assert_block_size;
use crate::blocks::{as_blocks, as_blocks_mut};

pub const QK_K: usize = 256;

// Declared as every 256-element scalar/ block type is (q2_k to q8_k, iq4_xs): repr(C), Pod, a size
// assertion and the per-element accessors; each module owns its ggml layout, so the fields and the
// level decoding differ.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockIq4Xs {
    pub d: f16,
    pub scales_h: u16,
    pub scales_l: [u8; 4],
    pub qs: [u8; 128],
}
assert_block_size!(BlockIq4Xs, 136);

impl BlockIq4Xs {
    /// The 6-bit scale of sub-block `ib` (0..8), unbiased (`ls − 32`).
    #[inline]
    pub fn scale(&self, ib: usize) -> i32 {
        let low = (self.scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF;
        let high = ((self.scales_h >> (2 * ib)) & 3) as u8;
        (low | (high << 4)) as i32 - 32
    }

    /// Grid index of element `i` (0..256).
    #[inline]
    pub fn index(&self, i: usize) -> u8 {
        let (ib, r) = (i / 32, i % 32);
        let byte = self.qs[16 * ib + r % 16];
        if r < 16 {
            byte & 0xF
        } else {
            byte >> 4
        }
    }
}

pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    let blocks: &[BlockIq4Xs] = as_blocks(src);
    assert_eq!(blocks.len() * QK_K, dst.len(), "IQ4_XS dequantize length");
    for (b, y) in blocks.iter().zip(dst.chunks_exact_mut(QK_K)) {
        let d = b.d.to_f32();
        for (ib, ys) in y.chunks_exact_mut(32).enumerate() {
            let dl = d * b.scale(ib) as f32;
            for (l, v) in ys.iter_mut().enumerate() {
                *v = dl * KVALUES_IQ4NL[b.index(32 * ib + l) as usize] as f32;
            }
        }
    }
}

/// ggml's `quantize_row_iq4_nl_impl` for super-block 256, block 32, 7 tries
/// either side: per sub-block the best grid scale by weighted least squares
/// (weights `x²`, or `qw·sqrt(σ² + x²)` with an importance matrix), then the
/// eight scales to 6 bits against `d = −max_scale/32` and a final re-rounding.
fn quantize_block(x: &[f32], qw: Option<&[f32]>, b: &mut BlockIq4Xs) {
    const NTRY: i32 = 7;
    let values = &KVALUES_IQ4NL;
    let mut sigma2 = 0f32;
    for v in x {
        sigma2 += v * v;
    }
    sigma2 *= 2.0 / QK_K as f32;
    let mut scales = [0f32; 8];
    let mut weight = [0f32; 32];
    let mut max_scale = 0f32;
    let mut amax_scale = 0f32;
    for ib in 0..8 {
        let xb = &x[32 * ib..32 * ib + 32];
        match qw {
            Some(qw) => {
                for j in 0..32 {
                    weight[j] = qw[32 * ib + j] * (sigma2 + xb[j] * xb[j]).sqrt();
                }
            }
            None => {
                for j in 0..32 {
                    weight[j] = xb[j] * xb[j];
                }
            }
        }
        let (max, amax) = signed_absmax(xb);
        if amax < GROUP_MAX_EPS {
            scales[ib] = 0.0;
            continue;
        }
        let v0 = values[0] as f32;
        let mut d = -max / v0;
        let mut id = 1.0 / d;
        let mut sumqx = 0f32;
        let mut sumq2 = 0f32;
        for j in 0..32 {
            let q = values[best_index(values, id * xb[j]) as usize] as f32;
            let w = weight[j];
            sumqx += w * q * xb[j];
            sumq2 += w * q * q;
        }
        d = if sumq2 > 0.0 { sumqx / sumq2 } else { 0.0 };
        let mut best = d * sumqx;
        for itry in -NTRY..=NTRY {
            id = (itry + values[0] as i32) as f32 / max;
            sumqx = 0.0;
            sumq2 = 0.0;
            for j in 0..32 {
                let q = values[best_index(values, id * xb[j]) as usize] as f32;
                let w = weight[j];
                sumqx += w * q * xb[j];
                sumq2 += w * q * q;
            }
            if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
                d = sumqx / sumq2;
                best = d * sumqx;
            }
        }
        scales[ib] = d;
        if d.abs() > amax_scale {
            amax_scale = d.abs();
            max_scale = d;
        }
    }
    let d = -max_scale / 32.0;
    b.d = f16::from_f32(d);
    b.scales_h = 0;
    b.scales_l = [0; 4];
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut levels = [0u8; 256];
    for ib in 0..8 {
        let l = nearest_int(id * scales[ib]).clamp(-32, 31);
        let dl = d * l as f32;
        let idl = if dl != 0.0 { 1.0 / dl } else { 0.0 };
        for j in 0..32 {
            levels[32 * ib + j] = best_index(values, idl * x[32 * ib + j]);
        }
        let l = (l + 32) as u8;
        if ib % 2 == 0 {
            b.scales_l[ib / 2] = l & 0xF;
        } else {
            b.scales_l[ib / 2] |= (l & 0xF) << 4;
        }
        b.scales_h |= ((l >> 4) as u16) << (2 * ib);
    }
    for ib in 0..8 {
        for j in 0..16 {
            b.qs[16 * ib + j] = levels[32 * ib + j] | (levels[32 * ib + 16 + j] << 4);
        }
    }
}

pub fn quantize(src: &[f32], dst: &mut [u8], imatrix: Option<&[f32]>) {
    let blocks: &mut [BlockIq4Xs] = as_blocks_mut(dst);
    assert_eq!(blocks.len() * QK_K, src.len(), "IQ4_XS quantize length");
    for (i, (b, x)) in blocks.iter_mut().zip(src.chunks_exact(QK_K)).enumerate() {
        let qw = imatrix.map(|w| &w[i * QK_K..(i + 1) * QK_K]);
        quantize_block(x, qw, b);
    }
}

/// ggml's `ggml_vec_dot_iq4_xs_q8_K_generic`: per sub-block the integer sum of
/// `G[q]·activation`, then `sumf += d·y.d·(ls − 32)·sum` in sub-block order.
pub fn vec_dot(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let (x, y) = rows::<BlockIq4Xs>(n, w, act);
    let mut sumf = 0f32;
    for (xb, yb) in x.iter().zip(y) {
        let d4d8 = xb.d.to_f32() * yb.d;
        for ib in 0..8 {
            let dl = d4d8 * xb.scale(ib) as f32;
            let mut sumi = 0i32;
            for l in 0..32 {
                let i = 32 * ib + l;
                sumi += yb.qs[i] as i32 * KVALUES_IQ4NL[xb.index(i) as usize] as i32;
            }
            sumf += dl * sumi as f32;
        }
    }
    sumf
}
