//! Q4_K: 256 weights in 8 sub-blocks of 32, 4.5 bits per weight.
//!
//! `x = d·sc·q − dmin·m` with 6-bit sub-block scales `sc` and mins `m` and
//! `q ∈ 0..=15`. Layout (ggml `block_q4_K`): `d: f16`, `dmin: f16`,
//! `scales[12]` (see [`get_scale_min_k4`]), `qs[128]`: each 32-byte group
//! holds sub-block `2g` in its low nibbles and `2g + 1` in its high nibbles.

// Index loops mirror ggml's reference line by line (the order of f32 operations is the spec).
#![allow(clippy::needless_range_loop)]

use bytemuck::{Pod, Zeroable};
use half::f16;

use super::kquant_search::{
    make_qkx_quants, make_qp_quants, nearest_int, pack_scale_min_k4, unpack_scale_min_k4,
    AffineSearch,
};
use super::q8_k::rows;
use crate::assert_block_size;
use crate::blocks::{as_blocks, as_blocks_mut};

pub use super::kquant_search::get_scale_min_k4;

pub const QK_K: usize = 256;

// Declared as every 256-element scalar/ block type is (q2_k to q8_k, iq4_xs): repr(C), Pod, a size
// assertion and the per-element accessors; each module owns its ggml layout, so the fields and the
// level decoding differ.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ4K {
    pub d: f16,
    pub dmin: f16,
    pub scales: [u8; 12],
    pub qs: [u8; 128],
}
assert_block_size!(BlockQ4K, 144);

impl BlockQ4K {
    /// Level of element `i` (0..256), 0..=15.
    #[inline]
    pub fn level(&self, i: usize) -> u8 {
        let byte = self.qs[(i / 64) * 32 + i % 32];
        if (i / 32) & 1 == 0 {
            byte & 0xF
        } else {
            byte >> 4
        }
    }
}

pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    dequantize_affine::<BlockQ4K>(src, dst);
}

/// What the Q4_K and Q5_K references read from a block: `d`, `dmin`, the
/// packed 6-bit sub-block scales and mins, and the level of element `i`. One
/// [`dequantize_affine`] and one [`vec_dot_affine`] serve both formats; each
/// block type inlines its own `level`.
pub(crate) trait AffineK: Pod {
    const NAME: &'static str;
    fn d(&self) -> f16;
    fn dmin(&self) -> f16;
    fn scales(&self) -> &[u8; 12];
    fn level(&self, i: usize) -> u8;
}

/// `impl AffineK` for a block with fields `d`, `dmin`, `scales` and an
/// inherent `level`.
macro_rules! affine_k {
    ($block:ty, $name:literal) => {
        impl $crate::scalar::q4_k::AffineK for $block {
            const NAME: &'static str = $name;
            fn d(&self) -> half::f16 {
                self.d
            }
            fn dmin(&self) -> half::f16 {
                self.dmin
            }
            fn scales(&self) -> &[u8; 12] {
                &self.scales
            }
            #[inline]
            fn level(&self, i: usize) -> u8 {
                <$block>::level(self, i)
            }
        }
    };
}
pub(crate) use affine_k;

affine_k!(BlockQ4K, "Q4_K");

/// `x = d·sc·q − dmin·m` per element (Q4_K and Q5_K).
pub(crate) fn dequantize_affine<B: AffineK>(src: &[u8], dst: &mut [f32]) {
    let blocks: &[B] = as_blocks(src);
    assert_eq!(
        blocks.len() * QK_K,
        dst.len(),
        "{} dequantize length",
        B::NAME
    );
    for (b, y) in blocks.iter().zip(dst.chunks_exact_mut(QK_K)) {
        let d = b.d().to_f32();
        let min = b.dmin().to_f32();
        for (j, ys) in y.chunks_exact_mut(32).enumerate() {
            let (sc, m) = get_scale_min_k4(j, b.scales());
            let d1 = d * sc as f32;
            let m1 = min * m as f32;
            for (l, v) in ys.iter_mut().enumerate() {
                *v = d1 * b.level(32 * j + l) as f32 - m1;
            }
        }
    }
}

/// Requantises every element against the stored scales (`nmax` 15 or 31);
/// shared with Q5_K.
pub(crate) fn requantize_affine(
    x: &[f32],
    d: f16,
    dmin: f16,
    scales: &[u8; 12],
    nmax: i32,
    levels: &mut [u8; 256],
) {
    for j in 0..8 {
        let (sc, m) = get_scale_min_k4(j, scales);
        let dd = d.to_f32() * sc as f32;
        if dd == 0.0 {
            continue;
        }
        let dm = dmin.to_f32() * m as f32;
        for ii in 0..32 {
            let l = nearest_int((x[32 * j + ii] + dm) / dd);
            levels[32 * j + ii] = l.clamp(0, nmax) as u8;
        }
    }
}

/// The reference (no importance matrix) search of Q4_K and Q5_K: per
/// sub-block `make_qkx2_quants` with weights `rms(x) + |x|`, then the eight
/// scales and mins linearly to 6 bits. Returns `(d, dmin, scales)`.
pub(crate) fn search_ref(
    x: &[f32],
    nmax: i32,
    search: &AffineSearch,
    levels: &mut [u8; 256],
) -> (f16, f16, [u8; 12]) {
    let mut scales = [0f32; 8];
    let mut mins = [0f32; 8];
    let mut weights = [0f32; 32];
    let mut max_scale = 0f32;
    let mut max_min = 0f32;
    for j in 0..8 {
        let xs = &x[32 * j..32 * j + 32];
        let mut sum_x2 = 0f32;
        for v in xs {
            sum_x2 += v * v;
        }
        let av_x = (sum_x2 / 32.0).sqrt();
        for (w, v) in weights.iter_mut().zip(xs) {
            *w = av_x + v.abs();
        }
        let (s, m) = make_qkx_quants(
            xs,
            nmax,
            Some(&weights),
            &mut levels[32 * j..32 * j + 32],
            search,
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
    let inv_scale = if max_scale > 0.0 {
        63.0 / max_scale
    } else {
        0.0
    };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    let mut ls = [0u8; 8];
    let mut lm = [0u8; 8];
    for j in 0..8 {
        ls[j] = (nearest_int(inv_scale * scales[j]) as u8).min(63);
        lm[j] = (nearest_int(inv_min * mins[j]) as u8).min(63);
    }
    (
        f16::from_f32(max_scale / 63.0),
        f16::from_f32(max_min / 63.0),
        pack_scale_min_k4(&ls, &lm),
    )
}

/// The importance-weighted search of Q4_K and Q5_K (`quantize_row_q4_K_impl`):
/// `make_qkx3_quants` per sub-block, then `make_qp_quants` for the 6-bit
/// scales and mins, weights `qw·sqrt(σ² + x²)`.
pub(crate) fn search_weighted(
    x: &[f32],
    qw: &[f32],
    nmax: i32,
    levels: &mut [u8; 256],
) -> (f16, f16, [u8; 12]) {
    // Same weighted-search steps as q2_k.rs::quantize_block_weighted, after ggml's
    // two functions: 8 sub-blocks of 32 with 6-bit scales and 2·σ² here, 16 of 16
    // with 4-bit scales and σ² there.
    let mut scales = [0f32; 8];
    let mut mins = [0f32; 8];
    let mut weights = [0f32; 32];
    let mut sw = [0f32; 8];
    let search = AffineSearch {
        rmin: -0.9,
        rdelta: 0.05,
        nstep: 36,
        use_mad: false,
    };
    let mut sum_x2 = 0f32;
    for v in x {
        sum_x2 += v * v;
    }
    let sigma2 = 2.0 * sum_x2 / QK_K as f32;
    for j in 0..8 {
        let xs = &x[32 * j..32 * j + 32];
        for l in 0..32 {
            weights[l] = qw[32 * j + l] * (sigma2 + xs[l] * xs[l]).sqrt();
        }
        let mut sumw = 0f32;
        for w in weights {
            sumw += w;
        }
        sw[j] = sumw;
        let (s, m) = make_qkx_quants(
            xs,
            nmax,
            Some(&weights),
            &mut levels[32 * j..32 * j + 32],
            &search,
            true,
        );
        scales[j] = s;
        mins[j] = m;
    }
    let mut ls = [0u8; 8];
    let mut lm = [0u8; 8];
    let d_block = make_qp_quants(&scales, 63, &mut ls, &sw);
    let m_block = make_qp_quants(&mins, 63, &mut lm, &sw);
    for j in 0..8 {
        ls[j] = ls[j].min(63);
        lm[j] = lm[j].min(63);
    }
    (
        f16::from_f32(d_block),
        f16::from_f32(m_block),
        pack_scale_min_k4(&ls, &lm),
    )
}

pub fn quantize(src: &[f32], dst: &mut [u8], imatrix: Option<&[f32]>) {
    let blocks: &mut [BlockQ4K] = as_blocks_mut(dst);
    assert_eq!(blocks.len() * QK_K, src.len(), "Q4_K quantize length");
    let search = AffineSearch {
        rmin: -1.0,
        rdelta: 0.1,
        nstep: 20,
        use_mad: false,
    };
    for (i, (b, x)) in blocks.iter_mut().zip(src.chunks_exact(QK_K)).enumerate() {
        let mut levels = [0u8; 256];
        let (d, dmin, scales) = match imatrix {
            None => search_ref(x, 15, &search, &mut levels),
            Some(w) => search_weighted(x, &w[i * QK_K..(i + 1) * QK_K], 15, &mut levels),
        };
        b.d = d;
        b.dmin = dmin;
        b.scales = scales;
        requantize_affine(x, d, dmin, &scales, 15, &mut levels);
        for g in 0..4 {
            for l in 0..32 {
                b.qs[32 * g + l] = levels[64 * g + l] | (levels[64 * g + 32 + l] << 4);
            }
        }
    }
}

/// ggml's `ggml_vec_dot_q4_K_q8_K_generic`: eight i32 lane sums of
/// `scale·level·activation`, `sums[l] += d·aux32[l]` per super-block, the mins
/// through `bsums` subtracted as `dmin·sumi`, the lanes added last.
pub fn vec_dot(n: usize, w: &[u8], act: &[u8]) -> f32 {
    vec_dot_affine::<BlockQ4K>(n, w, act)
}

/// [`vec_dot`]'s arithmetic for Q4_K and Q5_K (ggml's two generic dots are
/// the same but for the level unpacking).
pub(crate) fn vec_dot_affine<B: AffineK>(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let (x, y) = rows::<B>(n, w, act);
    let mut sums = [0f32; 8];
    let mut sumf = 0f32;
    for (xb, yb) in x.iter().zip(y) {
        let (sc, mins) = unpack_scale_min_k4(xb.scales());
        let mut sumi = 0i32;
        for j in 0..16 {
            sumi += yb.bsums[j] as i32 * mins[j / 2] as i32;
        }
        let mut aux32 = [0i32; 8];
        for i in 0..QK_K {
            let p = yb.qs[i] as i32 * xb.level(i) as i32;
            aux32[i % 8] += sc[i / 32] as i32 * p;
        }
        let d = xb.d().to_f32() * yb.d;
        for l in 0..8 {
            sums[l] += d * aux32[l] as f32;
        }
        let dmin = xb.dmin().to_f32() * yb.d;
        sumf -= dmin * sumi as f32;
    }
    for s in sums {
        sumf += s;
    }
    sumf
}
