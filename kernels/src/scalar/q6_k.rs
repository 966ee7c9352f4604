//! Q6_K: 256 weights in 16 sub-blocks of 16, 6.5625 bits per weight.
//!
//! `x = d·sc·(q − 32)` with an i8 sub-block scale `sc` and `q ∈ 0..=63`.
//! Layout (ggml `block_q6_K`): `ql[128]` (low nibbles), `qh[64]` (high pairs),
//! `scales[16]: i8`, `d: f16`. Within each 128-element half `h`: element
//! `l + 32·k` (k = 0..4) takes its low nibble from `ql[64h + l + 32·(k%2)]`
//! (low nibble for k < 2, high for k ≥ 2) and its high pair from bits
//! `2k..2k+2` of `qh[32h + l]`.

// Module header as in q3_k.rs: each K-quant module declares its own ggml block struct; only
// the lint allow, imports and QK_K are alike.
// Index loops mirror ggml's reference line by line (the order of f32 operations is the spec).
#![allow(clippy::needless_range_loop)]

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::kquant_search::{make_qx_quants, nearest_int, GROUP_MAX_EPS};
use super::q8_k::rows;
use crate::assert_block_size;
use crate::blocks::{as_blocks, as_blocks_mut};

pub const QK_K: usize = 256;

#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ6K {
    pub ql: [u8; 128],
    pub qh: [u8; 64],
    pub scales: [i8; 16],
    pub d: f16,
}
assert_block_size!(BlockQ6K, 210);

impl BlockQ6K {
    /// Signed level of element `i` (0..256), `−32..=31`.
    #[inline]
    pub fn level(&self, i: usize) -> i8 {
        let (h, r) = (i / 128, i % 128);
        let (k, l) = (r / 32, r % 32);
        let lb = self.ql[64 * h + l + 32 * (k % 2)];
        let low = if k < 2 { lb & 0xF } else { lb >> 4 };
        let high = (self.qh[32 * h + l] >> (2 * k)) & 3;
        (low | (high << 4)) as i8 - 32
    }
}

pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    let blocks: &[BlockQ6K] = as_blocks(src);
    assert_eq!(blocks.len() * QK_K, dst.len(), "Q6_K dequantize length");
    for (b, y) in blocks.iter().zip(dst.chunks_exact_mut(QK_K)) {
        let d = b.d.to_f32();
        for (i, v) in y.iter_mut().enumerate() {
            *v = d * b.scales[i / 16] as f32 * b.level(i) as f32;
        }
    }
}

/// ggml's `quantize_row_q6_K_ref` (`qw: None`) and `quantize_row_q6_K_impl`
/// (`qw: Some`, used directly as the per-element weights).
fn quantize_block(x: &[f32], qw: Option<&[f32]>, b: &mut BlockQ6K) {
    let mut levels = [0i8; 256];
    let mut scales = [0f32; 16];
    let mut max_scale = 0f32;
    let mut max_abs_scale = 0f32;
    for ib in 0..16 {
        let r = 16 * ib..16 * ib + 16;
        let w = qw.map(|w| &w[r.clone()]);
        let scale = make_qx_quants(&x[r.clone()], 32, &mut levels[r], w);
        scales[ib] = scale;
        if scale.abs() > max_abs_scale {
            max_abs_scale = scale.abs();
            max_scale = scale;
        }
    }
    if max_abs_scale < GROUP_MAX_EPS {
        *b = BlockQ6K::zeroed();
        return;
    }
    let iscale = -128.0 / max_scale;
    b.d = f16::from_f32(1.0 / iscale);
    for ib in 0..16 {
        b.scales[ib] = nearest_int(iscale * scales[ib]).min(127) as i8;
    }
    for j in 0..16 {
        let d = b.d.to_f32() * b.scales[j] as f32;
        if d == 0.0 {
            continue;
        }
        for ii in 0..16 {
            let l = nearest_int(x[16 * j + ii] / d).clamp(-32, 31);
            levels[16 * j + ii] = (l + 32) as i8;
        }
    }
    for h in 0..2 {
        for l in 0..32 {
            let q = |k: usize| levels[128 * h + 32 * k + l] as u8;
            b.ql[64 * h + l] = (q(0) & 0xF) | ((q(2) & 0xF) << 4);
            b.ql[64 * h + 32 + l] = (q(1) & 0xF) | ((q(3) & 0xF) << 4);
            b.qh[32 * h + l] =
                (q(0) >> 4) | ((q(1) >> 4) << 2) | ((q(2) >> 4) << 4) | ((q(3) >> 4) << 6);
        }
    }
}

// Same per-block driver as iq4_xs.rs::quantize: each calls its own quantize_block with the block's
// importance slice.
pub fn quantize(src: &[f32], dst: &mut [u8], imatrix: Option<&[f32]>) {
    let blocks: &mut [BlockQ6K] = as_blocks_mut(dst);
    assert_eq!(blocks.len() * QK_K, src.len(), "Q6_K quantize length");
    for (i, (b, x)) in blocks.iter_mut().zip(src.chunks_exact(QK_K)).enumerate() {
        let qw = imatrix.map(|w| &w[i * QK_K..(i + 1) * QK_K]);
        quantize_block(x, qw, b);
    }
}

/// ggml's `ggml_vec_dot_q6_K_q8_K_generic`: eight i32 lane sums of
/// `scale·level·activation`, `sums[l] += d·aux32[l]` per super-block.
pub fn vec_dot(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let (x, y) = rows::<BlockQ6K>(n, w, act);
    let mut sums = [0f32; 8];
    for (xb, yb) in x.iter().zip(y) {
        let mut aux32 = [0i32; 8];
        for i in 0..QK_K {
            let p = yb.qs[i] as i32 * xb.level(i) as i32;
            aux32[i % 8] += xb.scales[i / 16] as i32 * p;
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
