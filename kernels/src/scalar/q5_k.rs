//! Q5_K: 256 weights in 8 sub-blocks of 32, 5.5 bits per weight.
//!
//! `x = d·sc·q − dmin·m` as Q4_K, with `q ∈ 0..=31`: the low four bits as in
//! Q4_K's `qs`, the fifth bit of element `32·j + l` in bit `j` of `qh[l]`.
//! Layout (ggml `block_q5_K`): `d`, `dmin`, `scales[12]`, `qh[32]`, `qs[128]`.

// Index loops mirror ggml's reference line by line (the order of f32 operations is the spec).
#![allow(clippy::needless_range_loop)]

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::kquant_search::AffineSearch;
use super::q4_k::{
    affine_k, dequantize_affine, requantize_affine, search_ref, search_weighted, vec_dot_affine,
};
use crate::assert_block_size;
use crate::blocks::as_blocks_mut;

pub const QK_K: usize = 256;

// Declared as every 256-element scalar/ block type is (q2_k to q8_k, iq4_xs): repr(C), Pod, a size
// assertion and the per-element accessors; each module owns its ggml layout, so the fields and the
// level decoding differ.
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

affine_k!(BlockQ5K, "Q5_K");

pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    dequantize_affine::<BlockQ5K>(src, dst);
}

// Same driver as q4_k.rs::quantize: the search constants and nmax differ, and Q5_K packs a fifth
// bit into qh; the shared steps are already search_ref, search_weighted and requantize_affine.
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
    vec_dot_affine::<BlockQ5K>(n, w, act)
}
