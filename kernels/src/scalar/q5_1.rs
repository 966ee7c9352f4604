//! Q5_1: 32 weights, f16 scale `d` and minimum `m`, 5-bit levels;
//! `x = d·q + m`. Bit layout as Q5_0. Dot type: Q8_1.

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::legacy_search::{make_qkx3_quants, weighted_blocks};
use super::q4_1::quantize_block_ref;
use super::q5_0::{pack5, unpack5};
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
pub struct BlockQ5_1 {
    pub d: f16,
    pub m: f16,
    pub qh: [u8; 4],
    pub qs: [u8; QK / 2],
}
assert_block_size!(BlockQ5_1, 24);

pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    let blocks: &[BlockQ5_1] = as_blocks(&src[..dst.len() / QK * 24]);
    for (b, y) in blocks.iter().zip(dst.chunks_exact_mut(QK)) {
        let (d, m) = (b.d.to_f32(), b.m.to_f32());
        for (o, q) in y.iter_mut().zip(unpack5(b.qh, &b.qs)) {
            *o = d * q as f32 + m;
        }
    }
}

/// ggml's `quantize_row_q5_1_ref` (imatrix `None`) or `quantize_row_q5_1_impl`.
pub fn quantize(src: &[f32], dst: &mut [u8], imatrix: Option<&[f32]>) {
    let blocks: &mut [BlockQ5_1] = as_blocks_mut(&mut dst[..src.len() / QK * 24]);
    match imatrix {
        None => {
            for (b, x) in blocks.iter_mut().zip(src.chunks_exact(QK)) {
                let (d, m, l) = quantize_block_ref(x, 31);
                b.d = f16::from_f32(d);
                b.m = f16::from_f32(m);
                (b.qh, b.qs) = pack5(&l);
            }
        }
        Some(qw) => weighted_blocks(blocks, src, qw, |b, x, weight, l| {
            let (d, m) = make_qkx3_quants(31, x, weight, l);
            b.d = f16::from_f32(d);
            b.m = f16::from_f32(m);
            (b.qh, b.qs) = pack5(l);
        }),
    }
}

/// `sumf += (dx·dy)·sumi + mx·sy` per block (ggml's
/// `ggml_vec_dot_q5_1_q8_1_generic`).
// Alike to q5_0.rs::vec_dot: Q5_1 takes the levels unsigned against Q8_1 and adds m·s, Q5_0 centres
// them (q − 16) against Q8_0; ggml keeps the two formulas apart.
pub fn vec_dot(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let (x, y) = rows::<BlockQ5_1, BlockQ8_1>(n, w, act);
    let mut sumf = 0f32;
    for (bx, by) in x.iter().zip(y) {
        let q = unpack5(bx.qh, &bx.qs);
        let mut sumi = 0i32;
        for (&qx, &qy) in q.iter().zip(&by.qs) {
            sumi += qx as i32 * qy as i32;
        }
        sumf += (bx.d.to_f32() * by.d.to_f32()) * sumi as f32 + bx.m.to_f32() * by.s.to_f32();
    }
    sumf
}
