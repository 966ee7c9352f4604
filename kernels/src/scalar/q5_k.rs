//! Q5_K: 256 weights in 8 sub-blocks of 32, 5.5 bits per weight.
//!
//! `x = d·sc·q − dmin·m` as Q4_K, with `q ∈ 0..=31`: the low four bits as in
//! Q4_K's `qs`, the fifth bit of element `32·j + l` in bit `j` of `qh[l]`.
//! Layout (ggml `block_q5_K`): `d`, `dmin`, `scales[12]`, `qh[32]`, `qs[128]`.

// Index loops mirror ggml's reference line by line (the order of f32 operations is the spec).
#![allow(clippy::needless_range_loop)]

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::kquant_search::{get_scale_min_k4, unpack_scale_min_k4, AffineSearch};
use super::q4_k::{requantize_affine, search_ref, search_weighted};
use super::q8_k::BlockQ8K;
use crate::assert_block_size;
use crate::blocks::{as_blocks, as_blocks_mut};

pub const QK_K: usize = 256;

#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ5K {
    pub d: f16,
    pub dmin: f16,
    pub scales: [u8; 12],
    pub qh: [u8; 32],
    pub qs: [u8; 128],
}
assert_block_size!(BlockQ5K, 176);

impl BlockQ5K {
    /// Level of element `i` (0..256), 0..=31.
    #[inline]
    pub fn level(&self, i: usize) -> u8 {
        let byte = self.qs[(i / 64) * 32 + i % 32];
        let low = if (i / 32) & 1 == 0 {
            byte & 0xF
        } else {
            byte >> 4
        };
        let high = (self.qh[i % 32] >> (i / 32)) & 1;
        low | (high << 4)
    }
}

pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    let blocks: &[BlockQ5K] = as_blocks(src);
    assert_eq!(blocks.len() * QK_K, dst.len(), "Q5_K dequantize length");
    for (b, y) in blocks.iter().zip(dst.chunks_exact_mut(QK_K)) {
        let d = b.d.to_f32();
        let min = b.dmin.to_f32();
        for (j, ys) in y.chunks_exact_mut(32).enumerate() {
            let (sc, m) = get_scale_min_k4(j, &b.scales);
            let d1 = d * sc as f32;
            let m1 = min * m as f32;
            for (l, v) in ys.iter_mut().enumerate() {
                *v = d1 * b.level(32 * j + l) as f32 - m1;
            }
        }
    }
}

pub fn quantize(src: &[f32], dst: &mut [u8], imatrix: Option<&[f32]>) {
    let blocks: &mut [BlockQ5K] = as_blocks_mut(dst);
    assert_eq!(blocks.len() * QK_K, src.len(), "Q5_K quantize length");
    let search = AffineSearch {
        rmin: -0.5,
        rdelta: 0.1,
        nstep: 15,
        use_mad: false,
    };
    for (i, (b, x)) in blocks.iter_mut().zip(src.chunks_exact(QK_K)).enumerate() {
        let mut levels = [0u8; 256];
        let (d, dmin, scales) = match imatrix {
            None => search_ref(x, 31, &search, &mut levels),
            Some(w) => search_weighted(x, &w[i * QK_K..(i + 1) * QK_K], 31, &mut levels),
        };
        b.d = d;
        b.dmin = dmin;
        b.scales = scales;
        requantize_affine(x, d, dmin, &scales, 31, &mut levels);
        b.qh = [0; 32];
        for g in 0..4 {
            for l in 0..32 {
                let mut l1 = levels[64 * g + l];
                if l1 > 15 {
                    l1 -= 16;
                    b.qh[l] |= 1 << (2 * g);
                }
                let mut l2 = levels[64 * g + 32 + l];
                if l2 > 15 {
                    l2 -= 16;
                    b.qh[l] |= 2 << (2 * g);
                }
                b.qs[32 * g + l] = l1 | (l2 << 4);
            }
        }
    }
}

/// ggml's `ggml_vec_dot_q5_K_q8_K_generic` (same accumulation order as Q4_K).
pub fn vec_dot(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let x: &[BlockQ5K] = as_blocks(w);
    let y: &[BlockQ8K] = as_blocks(act);
    let nb = n / QK_K;
    assert!(
        n.is_multiple_of(QK_K) && x.len() >= nb && y.len() >= nb,
        "Q5_K vec_dot length"
    );
    let mut sums = [0f32; 8];
    let mut sumf = 0f32;
    for (xb, yb) in x[..nb].iter().zip(&y[..nb]) {
        let (sc, mins) = unpack_scale_min_k4(&xb.scales);
        let mut sumi = 0i32;
        for j in 0..16 {
            sumi += yb.bsums[j] as i32 * mins[j / 2] as i32;
        }
        let mut aux32 = [0i32; 8];
        for i in 0..QK_K {
            let p = yb.qs[i] as i32 * xb.level(i) as i32;
            aux32[i % 8] += sc[i / 32] as i32 * p;
        }
        let d = xb.d.to_f32() * yb.d;
        for l in 0..8 {
            sums[l] += d * aux32[l] as f32;
        }
        let dmin = xb.dmin.to_f32() * yb.d;
        sumf -= dmin * sumi as f32;
    }
    for s in sums {
        sumf += s;
    }
    sumf
}
