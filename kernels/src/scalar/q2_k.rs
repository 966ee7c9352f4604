//! Q2_K: 256 weights in 16 sub-blocks of 16, 2.625 bits per weight.
//!
//! `x = d·(sc & 15)·q − dmin·(sc >> 4)` with `q ∈ 0..=3` and one byte `sc` per
//! sub-block holding a 4-bit scale and a 4-bit min. Layout (ggml `block_q2_K`):
//! `scales[16]`, `qs[64]` (2-bit levels, see [`pack_2bit`]), `d: f16`, `dmin: f16`.

// Index loops mirror ggml's reference line by line (the order of f32 operations is the spec).
#![allow(clippy::needless_range_loop)]

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::kquant_search::{make_qkx_quants, make_qp_quants, nearest_int, pack_2bit, AffineSearch};
use super::q8_k::rows;
use crate::assert_block_size;
use crate::blocks::{as_blocks, as_blocks_mut};

pub const QK_K: usize = 256;

// Declared as every 256-element scalar/ block type is (q2_k to q8_k, iq4_xs): repr(C), Pod, a size
// assertion and the per-element accessors; each module owns its ggml layout, so the fields and the
// level decoding differ.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ2K {
    pub scales: [u8; 16],
    pub qs: [u8; 64],
    pub d: f16,
    pub dmin: f16,
}
assert_block_size!(BlockQ2K, 84);

impl BlockQ2K {
    /// Level of element `i` (0..256), 0..=3.
    #[inline]
    pub fn level(&self, i: usize) -> u8 {
        let (half, r) = (i / 128, i % 128);
        (self.qs[half * 32 + r % 32] >> (2 * (r / 32))) & 3
    }
}

pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    let blocks: &[BlockQ2K] = as_blocks(src);
    assert_eq!(blocks.len() * QK_K, dst.len(), "Q2_K dequantize length");
    for (b, y) in blocks.iter().zip(dst.chunks_exact_mut(QK_K)) {
        let d = b.d.to_f32();
        let min = b.dmin.to_f32();
        for (j, ys) in y.chunks_exact_mut(16).enumerate() {
            let sc = b.scales[j];
            let dl = d * (sc & 0xF) as f32;
            let ml = min * (sc >> 4) as f32;
            for (l, v) in ys.iter_mut().enumerate() {
                *v = dl * b.level(16 * j + l) as f32 - ml;
            }
        }
    }
}

/// Requantises every element against the stored (rounded) scales and packs.
fn finish_block(x: &[f32], b: &mut BlockQ2K, levels: &mut [u8; 256]) {
    let dm = b.d.to_f32();
    let mm = b.dmin.to_f32();
    for j in 0..16 {
        let d = dm * (b.scales[j] & 0xF) as f32;
        if d == 0.0 {
            continue;
        }
        let m = mm * (b.scales[j] >> 4) as f32;
        for ii in 0..16 {
            let l = nearest_int((x[16 * j + ii] + m) / d);
            levels[16 * j + ii] = l.clamp(0, 3) as u8;
        }
    }
    pack_2bit(levels, &mut b.qs);
}

/// ggml's `quantize_row_q2_K_ref`.
fn quantize_block_ref(x: &[f32], b: &mut BlockQ2K) {
    let mut levels = [0u8; 256];
    let mut scales = [0f32; 16];
    let mut mins = [0f32; 16];
    let mut weights = [0f32; 16];
    let search = AffineSearch {
        rmin: -0.5,
        rdelta: 0.1,
        nstep: 15,
        use_mad: true,
    };
    let mut max_scale = 0f32;
    let mut max_min = 0f32;
    for j in 0..16 {
        let xs = &x[16 * j..16 * j + 16];
        for (w, v) in weights.iter_mut().zip(xs) {
            *w = v.abs();
        }
        let (s, m) = make_qkx_quants(
            xs,
            3,
            Some(&weights),
            &mut levels[16 * j..16 * j + 16],
            &search,
            false,
        );
        scales[j] = s;
        mins[j] = m;
        if s > max_scale {
            max_scale = s;
        }
        if m > max_min {
            max_min = m;
        }
    }
    const Q4SCALE: f32 = 15.0;
    if max_scale > 0.0 {
        let iscale = Q4SCALE / max_scale;
        for j in 0..16 {
            b.scales[j] = nearest_int(iscale * scales[j]) as u8;
        }
        b.d = f16::from_f32(max_scale / Q4SCALE);
    } else {
        b.scales = [0; 16];
        b.d = f16::from_f32(0.0);
    }
    if max_min > 0.0 {
        let iscale = Q4SCALE / max_min;
        for j in 0..16 {
            let l = nearest_int(iscale * mins[j]);
            b.scales[j] |= (l << 4) as u8;
        }
        b.dmin = f16::from_f32(max_min / Q4SCALE);
    } else {
        b.dmin = f16::from_f32(0.0);
    }
    finish_block(x, b, &mut levels);
}

/// ggml's `quantize_row_q2_K_impl` (importance-weighted).
fn quantize_block_weighted(x: &[f32], qw: &[f32], b: &mut BlockQ2K) {
    let mut levels = [0u8; 256];
    let mut scales = [0f32; 16];
    let mut mins = [0f32; 16];
    let mut sw = [0f32; 16];
    let mut weight = [0f32; 16];
    // The buffers and search as in quantize_block_ref above, with ggml's _impl constants (rmin
    // −0.9, 36 steps, squared error) instead of _ref's.
    let search = AffineSearch {
        rmin: -0.9,
        rdelta: 0.05,
        nstep: 36,
        use_mad: false,
    };
    let mut sumx2 = 0f32;
    for v in x {
        sumx2 += v * v;
    }
    let sigma2 = sumx2 / QK_K as f32;
    for j in 0..16 {
        let xs = &x[16 * j..16 * j + 16];
        for l in 0..16 {
            weight[l] = qw[16 * j + l] * (sigma2 + xs[l] * xs[l]).sqrt();
        }
        for w in weight {
            sw[j] += w;
        }
        let (s, m) = make_qkx_quants(
            xs,
            3,
            Some(&weight),
            &mut levels[16 * j..16 * j + 16],
            &search,
            true,
        );
        scales[j] = s;
        mins[j] = m;
    }
    let mut ls = [0u8; 16];
    let mut lm = [0u8; 16];
    let dm = make_qp_quants(&scales, 15, &mut ls, &sw);
    let mm = make_qp_quants(&mins, 15, &mut lm, &sw);
    b.d = f16::from_f32(dm);
    b.dmin = f16::from_f32(mm);
    for j in 0..16 {
        b.scales[j] = ls[j] | (lm[j] << 4);
    }
    finish_block(x, b, &mut levels);
}

pub fn quantize(src: &[f32], dst: &mut [u8], imatrix: Option<&[f32]>) {
    let blocks: &mut [BlockQ2K] = as_blocks_mut(dst);
    assert_eq!(blocks.len() * QK_K, src.len(), "Q2_K quantize length");
    for (i, (b, x)) in blocks.iter_mut().zip(src.chunks_exact(QK_K)).enumerate() {
        match imatrix {
            None => quantize_block_ref(x, b),
            Some(w) => quantize_block_weighted(x, &w[i * QK_K..(i + 1) * QK_K], b),
        }
    }
}

/// ggml's `ggml_vec_dot_q2_K_q8_K_generic`: per super-block integer sums
/// (levels × activations per 16, times the 4-bit scale; bsums × the 4-bit
/// mins), then `dall·isum − dmin·summs` in f32.
pub fn vec_dot(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let (x, y) = rows::<BlockQ2K>(n, w, act);
    let mut sumf = 0f32;
    for (xb, yb) in x.iter().zip(y) {
        let mut summs = 0i32;
        for j in 0..16 {
            summs += yb.bsums[j] as i32 * (xb.scales[j] >> 4) as i32;
        }
        let dall = yb.d * xb.d.to_f32();
        let dmin = yb.d * xb.dmin.to_f32();
        let mut isum = 0i32;
        for j in 0..16 {
            let d = (xb.scales[j] & 0xF) as i32;
            let mut isuml = 0i32;
            for l in 0..16 {
                let i = 16 * j + l;
                isuml += yb.qs[i] as i32 * xb.level(i) as i32;
            }
            isum += d * isuml;
        }
        sumf += dall * isum as f32 - dmin * summs as f32;
    }
    sumf
}
