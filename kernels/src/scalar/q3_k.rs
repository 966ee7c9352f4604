//! Q3_K: 256 weights in 16 sub-blocks of 16, 3.4375 bits per weight.
//!
//! `x = d·(s − 32)·(q − 4)` with a 6-bit sub-block scale `s` and `q ∈ 0..=7`
//! (low two bits in `qs`, the high bit in `hmask`). Layout (ggml `block_q3_K`):
//! `hmask[32]` (bit `j` of byte `l` is the high bit of element `32·j + l`),
//! `qs[64]` (2-bit, see [`pack_2bit`]), `scales[12]` (sixteen 6-bit values:
//! low nibbles in bytes 0..8, high pairs in bytes 8..12), `d: f16`.

// Index loops mirror ggml's reference line by line (the order of f32 operations is the spec).
#![allow(clippy::needless_range_loop)]

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::kquant_search::{make_q3_quants, make_qx_quants, nearest_int, pack_2bit};
use super::q8_k::rows;
use crate::assert_block_size;
use crate::blocks::{as_blocks, as_blocks_mut};

pub const QK_K: usize = 256;

#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ3K {
    pub hmask: [u8; 32],
    pub qs: [u8; 64],
    pub scales: [u8; 12],
    pub d: f16,
}
assert_block_size!(BlockQ3K, 110);

/// The sixteen 6-bit scales, unbiased (`s − 32`).
#[inline]
pub fn unpack_scales(s: &[u8; 12]) -> [i8; 16] {
    let mut out = [0i8; 16];
    for (j, o) in out.iter_mut().enumerate() {
        let low = if j < 8 { s[j] & 0xF } else { s[j - 8] >> 4 };
        let high = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
        *o = (low | (high << 4)) as i8 - 32;
    }
    out
}

/// Packs sixteen 6-bit scales (already biased by 32, `0..64`).
fn pack_scales(l: &[u8; 16]) -> [u8; 12] {
    let mut s = [0u8; 12];
    for (j, &v) in l.iter().enumerate() {
        if j < 8 {
            s[j] = v & 0xF;
        } else {
            s[j - 8] |= (v & 0xF) << 4;
        }
        s[j % 4 + 8] |= (v >> 4) << (2 * (j / 4));
    }
    s
}

impl BlockQ3K {
    /// Signed level of element `i` (0..256), `−4..=3`.
    #[inline]
    pub fn level(&self, i: usize) -> i8 {
        let (half, r) = (i / 128, i % 128);
        let low = (self.qs[half * 32 + r % 32] >> (2 * (r / 32))) & 3;
        let high = (self.hmask[i % 32] >> (i / 32)) & 1;
        low as i8 - if high == 1 { 0 } else { 4 }
    }
}

pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    let blocks: &[BlockQ3K] = as_blocks(src);
    assert_eq!(blocks.len() * QK_K, dst.len(), "Q3_K dequantize length");
    for (b, y) in blocks.iter().zip(dst.chunks_exact_mut(QK_K)) {
        let d_all = b.d.to_f32();
        let sc = unpack_scales(&b.scales);
        for (j, ys) in y.chunks_exact_mut(16).enumerate() {
            let dl = d_all * sc[j] as f32;
            for (l, v) in ys.iter_mut().enumerate() {
                *v = dl * b.level(16 * j + l) as f32;
            }
        }
    }
}

/// Requantises against the stored scales, splits off the high bits and packs.
fn finish_block(x: &[f32], b: &mut BlockQ3K, levels: &mut [i8; 256]) {
    let sc = unpack_scales(&b.scales);
    let dd = b.d.to_f32();
    for j in 0..16 {
        let d = dd * sc[j] as f32;
        if d == 0.0 {
            continue;
        }
        for ii in 0..16 {
            let l = nearest_int(x[16 * j + ii] / d).clamp(-4, 3);
            levels[16 * j + ii] = (l + 4) as i8;
        }
    }
    b.hmask = [0; 32];
    let mut low = [0u8; 256];
    for (i, &l) in levels.iter().enumerate() {
        let mut l = l as u8;
        if l > 3 {
            b.hmask[i % 32] |= 1 << (i / 32);
            l -= 4;
        }
        low[i] = l;
    }
    pack_2bit(&low, &mut b.qs);
}

/// ggml's `quantize_row_q3_K_ref`.
fn quantize_block_ref(x: &[f32], b: &mut BlockQ3K) {
    let mut levels = [0i8; 256];
    let mut scales = [0f32; 16];
    let mut max_scale = 0f32;
    let mut amax = 0f32;
    for j in 0..16 {
        scales[j] = make_q3_quants(&x[16 * j..16 * j + 16], 4, &mut levels[16 * j..16 * j + 16]);
        let s = scales[j].abs();
        if s > amax {
            amax = s;
            max_scale = scales[j];
        }
    }
    if max_scale != 0.0 {
        let iscale = -32.0 / max_scale;
        let mut l = [0u8; 16];
        for j in 0..16 {
            let v = nearest_int(iscale * scales[j]) as i8;
            l[j] = (v.clamp(-32, 31) + 32) as u8;
        }
        b.scales = pack_scales(&l);
        b.d = f16::from_f32(1.0 / iscale);
    } else {
        b.scales = [0; 12];
        b.d = f16::from_f32(0.0);
    }
    finish_block(x, b, &mut levels);
}

/// ggml's `quantize_row_q3_K_impl` (importance-weighted).
fn quantize_block_weighted(x: &[f32], qw: &[f32], b: &mut BlockQ3K) {
    let mut levels = [0i8; 256];
    let mut scales = [0f32; 16];
    let mut weight = [0f32; 16];
    let mut sw = [0f32; 16];
    // The σ² and per-sub-block importance weights as in q4_k.rs::search_weighted, after ggml: 16
    // sub-blocks of 16 here, 8 of 32 there, each followed by its own search (make_qx_quants here,
    // make_qkx_quants there).
    let mut sumx2 = 0f32;
    for v in x {
        sumx2 += v * v;
    }
    let sigma2 = 2.0 * sumx2 / QK_K as f32;
    for j in 0..16 {
        let xs = &x[16 * j..16 * j + 16];
        for l in 0..16 {
            weight[l] = qw[16 * j + l] * (sigma2 + xs[l] * xs[l]).sqrt();
        }
        let mut sumw = 0f32;
        for w in weight {
            sumw += w;
        }
        sw[j] = sumw;
        scales[j] = make_qx_quants(xs, 4, &mut levels[16 * j..16 * j + 16], Some(&weight));
    }
    let mut ls = [0i8; 16];
    let d_block = make_qx_quants(&scales, 32, &mut ls, Some(&sw));
    b.scales = pack_scales(&ls.map(|v| v as u8));
    b.d = f16::from_f32(d_block);
    finish_block(x, b, &mut levels);
}

// Same per-block dispatch as q2_k.rs::quantize: each type calls its own two block quantisers
// (ggml's _ref and _impl).
pub fn quantize(src: &[f32], dst: &mut [u8], imatrix: Option<&[f32]>) {
    let blocks: &mut [BlockQ3K] = as_blocks_mut(dst);
    assert_eq!(blocks.len() * QK_K, src.len(), "Q3_K quantize length");
    for (i, (b, x)) in blocks.iter_mut().zip(src.chunks_exact(QK_K)).enumerate() {
        match imatrix {
            None => quantize_block_ref(x, b),
            Some(w) => quantize_block_weighted(x, &w[i * QK_K..(i + 1) * QK_K], b),
        }
    }
}

/// ggml's `ggml_vec_dot_q3_K_q8_K_generic`: eight i32 lane sums of
/// `scale·level·activation`, then per super-block `sums[l] += d·aux32[l]`,
/// and the eight lanes added at the end.
pub fn vec_dot(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let (x, y) = rows::<BlockQ3K>(n, w, act);
    let mut sums = [0f32; 8];
    for (xb, yb) in x.iter().zip(y) {
        let sc = unpack_scales(&xb.scales);
        let mut aux32 = [0i32; 8];
        for i in 0..QK_K {
            let p = yb.qs[i] as i32 * xb.level(i) as i32;
            aux32[i % 8] += sc[i / 16] as i32 * p;
        }
        let d = xb.d.to_f32() * yb.d;
        for l in 0..8 {
            sums[l] += d * aux32[l] as f32;
        }
    }
    let mut sumf = 0f32;
    for s in sums {
        sumf += s;
    }
    sumf
}
