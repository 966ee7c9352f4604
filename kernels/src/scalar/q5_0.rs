//! Q5_0: 32 weights, one f16 scale, 5-bit levels `q ∈ [0, 31]`;
//! `x = d·(q − 16)`. Low nibbles as Q4_0; bit `j` of the little-endian u32 `qh`
//! is the fifth bit of element `j`. Dot type: Q8_0.

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
pub struct BlockQ5_0 {
    pub d: f16,
    pub qh: [u8; 4],
    pub qs: [u8; QK / 2],
}
assert_block_size!(BlockQ5_0, 22);

/// The 32 five-bit levels of a Q5_0/Q5_1 block, in element order.
#[inline]
pub(crate) fn unpack5(qh: [u8; 4], qs: &[u8; QK / 2]) -> [u8; QK] {
    let h = u32::from_le_bytes(qh);
    let mut q = [0u8; QK];
    for j in 0..QK / 2 {
        q[j] = (qs[j] & 0x0f) | ((((h >> j) & 1) as u8) << 4);
        q[j + QK / 2] = (qs[j] >> 4) | ((((h >> (j + QK / 2)) & 1) as u8) << 4);
    }
    q
}

/// Packs 32 five-bit levels into `(qh, qs)`.
#[inline]
pub(crate) fn pack5(l: &[u8; QK]) -> ([u8; 4], [u8; QK / 2]) {
    let mut h = 0u32;
    let mut qs = [0u8; QK / 2];
    for j in 0..QK / 2 {
        qs[j] = (l[j] & 0x0f) | ((l[j + QK / 2] & 0x0f) << 4);
        h |= (((l[j] & 0x10) >> 4) as u32) << j;
        h |= (((l[j + QK / 2] & 0x10) >> 4) as u32) << (j + QK / 2);
    }
    (h.to_le_bytes(), qs)
}

pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    let blocks: &[BlockQ5_0] = as_blocks(&src[..dst.len() / QK * 22]);
    for (b, y) in blocks.iter().zip(dst.chunks_exact_mut(QK)) {
        let d = b.d.to_f32();
        for (o, q) in y.iter_mut().zip(unpack5(b.qh, &b.qs)) {
            *o = d * (q as i32 - 16) as f32;
        }
    }
}

/// ggml's `quantize_row_q5_0_ref` (imatrix `None`) or `quantize_row_q5_0_impl`.
pub fn quantize(src: &[f32], dst: &mut [u8], imatrix: Option<&[f32]>) {
    let blocks: &mut [BlockQ5_0] = as_blocks_mut(&mut dst[..src.len() / QK * 22]);
    match imatrix {
        None => {
            for (b, x) in blocks.iter_mut().zip(src.chunks_exact(QK)) {
                let (max, _) = signed_absmax(x);
                let d = max / -16.0;
                let id = if d != 0.0 { 1.0 / d } else { 0.0 };
                let mut l = [0u8; QK];
                for (o, &v) in l.iter_mut().zip(x) {
                    *o = ((v * id + 16.5) as i8).min(31) as u8;
                }
                b.d = f16::from_f32(d);
                (b.qh, b.qs) = pack5(&l);
            }
        }
        Some(qw) => weighted_blocks(blocks, src, qw, |b, x, weight, l| {
            let d = make_qx_quants(16, x, l, weight);
            b.d = f16::from_f32(d);
            (b.qh, b.qs) = pack5(l);
        }),
    }
}

/// `sumf += (dx·dy)·sumi` per block (ggml's `ggml_vec_dot_q5_0_q8_0_generic`).
pub fn vec_dot(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let (x, y) = rows::<BlockQ5_0, BlockQ8_0>(n, w, act);
    let mut sumf = 0f32;
    for (bx, by) in x.iter().zip(y) {
        let q = unpack5(bx.qh, &bx.qs);
        let mut sumi = 0i32;
        for (&qx, &qy) in q.iter().zip(&by.qs) {
            sumi += (qx as i32 - 16) * qy as i32;
        }
        sumf += (bx.d.to_f32() * by.d.to_f32()) * sumi as f32;
    }
    sumf
}
