//! AVX2 dot products of the 256-element weight types with Q8_K activations,
//! and the Q8_K activation quantiser.
//!
//! The ggml pattern: unsigned levels × signed activations with `maddubs`
//! (pairs to i16), sub-block scales applied with `madd` (to i32), one i32
//! vector per super-block converted once and accumulated with FMA into an f32
//! register; the sub-block mins go through the activation `bsums`. No
//! horizontal sum until the end of the row.
//!
//! Every entry point here is a safe fn over a `#[target_feature]` body; the
//! table in `isa` only hands these out after `Isa::Avx2.available()` (AVX2,
//! FMA, F16C) said yes.

use std::arch::x86_64::*;

use crate::blocks::as_blocks_mut;
use crate::scalar::iq4_grid::KVALUES_IQ4NL;
use crate::scalar::iq4_xs::BlockIq4Xs;
use crate::scalar::q2_k::BlockQ2K;
use crate::scalar::q3_k::BlockQ3K;
use crate::scalar::q4_k::BlockQ4K;
use crate::scalar::q5_k::BlockQ5K;
use crate::scalar::q6_k::BlockQ6K;
use crate::scalar::q8_k::{rows, BlockQ8K};
use crate::sig::{QuantizeFn, VecDotFn};
use crate::GgmlType;

const QK_K: usize = 256;

pub fn vec_dot_fn(ty: GgmlType) -> Option<VecDotFn> {
    match ty {
        GgmlType::Q2_K => Some(vec_dot_q2_k),
        GgmlType::Q3_K => Some(vec_dot_q3_k),
        GgmlType::Q4_K => Some(vec_dot_q4_k),
        GgmlType::Q5_K => Some(vec_dot_q5_k),
        GgmlType::Q6_K => Some(vec_dot_q6_k),
        GgmlType::IQ4_XS => Some(vec_dot_iq4_xs),
        _ => None,
    }
}

/// The dot in the order of ggml's CPU_REPACK kernels for `ty`, where
/// llama.cpp's x86 build repacks that type (Q4_K → `q4_K_8x8`, whose
/// gemv/gemm keep one exact i32 per super-block and column).
pub fn ggml_repack_dot_fn(ty: GgmlType) -> Option<VecDotFn> {
    match ty {
        GgmlType::Q4_K => Some(vec_dot_q4_k_repacked),
        _ => None,
    }
}

/// As [`ggml_repack_dot_fn`] for the rows a repacked product takes four at a
/// time (its gemm kernel).
pub fn ggml_repack_gemm_dot_fn(ty: GgmlType) -> Option<VecDotFn> {
    match ty {
        GgmlType::Q4_K => Some(vec_dot_q4_k_repacked_gemm),
        _ => None,
    }
}

/// The dot in the order of ggml's tiled K-quant matmul (`ggml-cpu/tiled`),
/// which llama.cpp's x86 build takes for these types on batches of ≥ 8
/// activation rows (per expert for `MUL_MAT_ID`) unless the weights are
/// repacked: per super-block `r = isum·d − dmin·imin`, `acc += r·d_a`.
pub fn tiled_dot_fn(ty: GgmlType) -> Option<VecDotFn> {
    match ty {
        GgmlType::Q3_K => Some(vec_dot_q3_k_tiled),
        GgmlType::Q4_K => Some(vec_dot_q4_k_tiled),
        GgmlType::Q5_K => Some(vec_dot_q5_k_tiled),
        GgmlType::Q6_K => Some(vec_dot_q6_k_tiled),
        _ => None,
    }
}

pub fn quantize_fn(act_ty: GgmlType) -> Option<QuantizeFn> {
    match act_ty {
        GgmlType::Q8_K => Some(quantize_q8_k),
        _ => None,
    }
}

// Same macro as aarch64/neon/kquants.rs::safe_entry and avx512/kquants.rs::safe_entry: each tier
// states its own SAFETY argument (what its table detected), and the NEON and x86 forms compile for
// different targets.
macro_rules! safe_entry {
    ($name:ident, $block:ty, $body:ident) => {
        fn $name(n: usize, w: &[u8], act: &[u8]) -> f32 {
            let (x, y) = rows::<$block>(n, w, act);
            // SAFETY: `vec_dot_fn` is only consulted by the kernel table for the
            // AVX2 and AVX-512 tiers, which it builds only when
            // `Isa::available()` confirmed AVX2, FMA and F16C on this CPU.
            unsafe { $body(x, y) }
        }
    };
}

safe_entry!(vec_dot_q2_k, BlockQ2K, q2_k);
safe_entry!(vec_dot_q3_k, BlockQ3K, q3_k);
safe_entry!(vec_dot_q4_k, BlockQ4K, q4_k);
safe_entry!(vec_dot_q4_k_repacked, BlockQ4K, q4_k_repacked);
safe_entry!(vec_dot_q4_k_repacked_gemm, BlockQ4K, q4_k_repacked_gemm);
safe_entry!(vec_dot_q3_k_tiled, BlockQ3K, q3_k_tiled);
safe_entry!(vec_dot_q4_k_tiled, BlockQ4K, q4_k_tiled);
safe_entry!(vec_dot_q5_k_tiled, BlockQ5K, q5_k_tiled);
safe_entry!(vec_dot_q6_k_tiled, BlockQ6K, q6_k_tiled);
safe_entry!(vec_dot_q5_k, BlockQ5K, q5_k);
safe_entry!(vec_dot_q6_k, BlockQ6K, q6_k);
safe_entry!(vec_dot_iq4_xs, BlockIq4Xs, iq4_xs);

fn quantize_q8_k(src: &[f32], dst: &mut [u8]) {
    let blocks: &mut [BlockQ8K] = as_blocks_mut(dst);
    assert_eq!(blocks.len() * QK_K, src.len(), "Q8_K quantize length");
    // SAFETY: `quantize_fn` is only consulted by the kernel table for the AVX2
    // and AVX-512 tiers, built only when `Isa::available()` confirmed AVX2.
    unsafe { q8_k_quantize(src, blocks) }
}

// ---------------------------------------------------------------- helpers

#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn load_u8(b: &[u8; 32]) -> __m256i {
    // SAFETY: `b` is 32 readable bytes and `loadu` has no alignment requirement.
    unsafe { _mm256_loadu_si256(b.as_ptr().cast()) }
}

#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn load_i8(b: &[i8; 32]) -> __m256i {
    // SAFETY: `b` is 32 readable bytes and `loadu` has no alignment requirement.
    unsafe { _mm256_loadu_si256(b.as_ptr().cast()) }
}

#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn load_u8_128(b: &[u8; 16]) -> __m128i {
    // SAFETY: `b` is 16 readable bytes and `loadu` has no alignment requirement.
    unsafe { _mm_loadu_si128(b.as_ptr().cast()) }
}

#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn load_bsums(b: &[i16; 16]) -> __m256i {
    // SAFETY: `b` is 32 readable bytes and `loadu` has no alignment requirement.
    unsafe { _mm256_loadu_si256(b.as_ptr().cast()) }
}

/// 32 bytes starting at `off` of a block field.
#[inline(always)]
pub(crate) fn at<T, const N: usize>(a: &[T; N], off: usize) -> &[T; 32] {
    a[off..off + 32].try_into().unwrap()
}

/// f16 to f32 with F16C (one conversion per super-block).
#[inline]
#[target_feature(enable = "avx2,f16c")]
pub(crate) fn f16_to_f32(h: half::f16) -> f32 {
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h.to_bits() as i32)))
}

#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn hsum_ps(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

/// Sixteen i16 lanes: eight copies of byte `is` of `scales`, then eight of
/// byte `is + 1` (the scales of two 16-element sub-blocks against one 32-byte
/// `maddubs` result), sign- or zero-extended.
#[inline]
#[target_feature(enable = "avx2")]
fn scale_pair(scales: __m128i, is: usize, signed: bool) -> __m256i {
    const ONES: i64 = 0x0101_0101_0101_0101;
    let mask = _mm_set_epi64x((is as i64 + 1) * ONES, is as i64 * ONES);
    let s = _mm_shuffle_epi8(scales, mask);
    if signed {
        _mm256_cvtepi8_epi16(s)
    } else {
        _mm256_cvtepu8_epi16(s)
    }
}

/// Sixteen scale bytes as a 128-bit vector.
#[inline]
#[target_feature(enable = "avx2")]
fn load_scales16<T: bytemuck::Pod>(s: &[T; 16]) -> __m128i {
    load_u8_128(bytemuck::cast_ref(s))
}

/// Σ over i16 pairs of `scale·p` into i32 (`madd`), added to `acc`.
#[inline]
#[target_feature(enable = "avx2")]
fn madd_acc(acc: __m256i, scale: __m256i, p: __m256i) -> __m256i {
    _mm256_add_epi32(acc, _mm256_madd_epi16(scale, p))
}

// ---------------------------------------------------------------- Q4_K

/// Q4_K/Q5_K's twelve scale bytes as (eight 6-bit scales as i16 in both
/// 128-bit lanes, eight 6-bit mins as i16), unpacked with ggml's 32-bit masks.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn k4_scales_mins(s: &[u8; 12]) -> (__m256i, __m128i) {
    const KMASK1: u32 = 0x3f3f_3f3f;
    const KMASK2: u32 = 0x0f0f_0f0f;
    const KMASK3: u32 = 0x0303_0303;
    let w = |i: usize| u32::from_le_bytes([s[4 * i], s[4 * i + 1], s[4 * i + 2], s[4 * i + 3]]);
    let (u0, u1, u2) = (w(0), w(1), w(2));
    let sc_lo = u0 & KMASK1;
    let sc_hi = (u2 & KMASK2) | (((u0 >> 6) & KMASK3) << 4);
    let m_lo = u1 & KMASK1;
    let m_hi = ((u2 >> 4) & KMASK2) | (((u1 >> 6) & KMASK3) << 4);
    let v = _mm256_cvtepu8_epi16(_mm_setr_epi32(
        sc_lo as i32,
        sc_hi as i32,
        m_lo as i32,
        m_hi as i32,
    ));
    let sc = _mm256_castsi256_si128(v);
    (_mm256_set_m128i(sc, sc), _mm256_extracti128_si256(v, 1))
}

/// Broadcasts i16 lane `j` (0..8) of each 128-bit half to all of it.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn bcast_i16(v: __m256i, j: usize) -> __m256i {
    let lo = (2 * j) as i16;
    _mm256_shuffle_epi8(v, _mm256_set1_epi16(lo | ((lo + 1) << 8)))
}

/// Σ_j mins[j/2]·bsums[j] as four i32 lanes (hadd pairs of bsums to
/// 32-element sums, then `madd` with the eight mins).
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn mins_dot_bsums(mins: __m128i, bsums: &[i16; 16]) -> __m128i {
    let q8 = load_bsums(bsums);
    let q8s = _mm_hadd_epi16(_mm256_castsi256_si128(q8), _mm256_extracti128_si256(q8, 1));
    _mm_madd_epi16(mins, q8s)
}

/// One Q4_K super-block's integer parts: the eight i32 lanes of
/// `Σ sc·(level·a)` (ggml's AVX2 lane layout) and the four of `Σ m·bsum`.
#[inline]
#[target_feature(enable = "avx2")]
fn q4_k_block(xb: &BlockQ4K, yb: &BlockQ8K) -> (__m256i, __m128i) {
    let m4 = _mm256_set1_epi8(0xF);
    let (sc, mins) = k4_scales_mins(&xb.scales);
    let prod = mins_dot_bsums(mins, &yb.bsums);
    let mut sumi = _mm256_setzero_si256();
    for j in 0..4 {
        let q4 = load_u8(at(&xb.qs, 32 * j));
        let q4l = _mm256_and_si256(q4, m4);
        let q4h = _mm256_and_si256(_mm256_srli_epi16(q4, 4), m4);
        let pl = _mm256_maddubs_epi16(q4l, load_i8(at(&yb.qs, 64 * j)));
        let ph = _mm256_maddubs_epi16(q4h, load_i8(at(&yb.qs, 64 * j + 32)));
        sumi = madd_acc(sumi, bcast_i16(sc, 2 * j), pl);
        sumi = madd_acc(sumi, bcast_i16(sc, 2 * j + 1), ph);
    }
    (sumi, prod)
}

#[target_feature(enable = "avx2,fma,f16c")]
fn q4_k(x: &[BlockQ4K], y: &[BlockQ8K]) -> f32 {
    let mut acc = _mm256_setzero_ps();
    let mut acc_m = _mm_setzero_ps();
    for (xb, yb) in x.iter().zip(y) {
        let d = yb.d * f16_to_f32(xb.d);
        let dmin = -yb.d * f16_to_f32(xb.dmin);
        let (sumi, prod) = q4_k_block(xb, yb);
        acc_m = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(prod), acc_m);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    let m = _mm_add_ps(acc_m, _mm_movehl_ps(acc_m, acc_m));
    let m = _mm_add_ss(m, _mm_movehdup_ps(m));
    hsum_ps(acc) + _mm_cvtss_f32(m)
}

/// Q4_K · Q8_K in the order of ggml's tiled K-quant matmul (`tiled/`,
/// AVX512-VNNI microkernel), which llama.cpp uses for batches of ≥ 8 rows:
/// see [`tiled_step`].
#[target_feature(enable = "avx2,fma,f16c")]
fn q4_k_tiled(x: &[BlockQ4K], y: &[BlockQ8K]) -> f32 {
    let mut acc = 0f32;
    for (xb, yb) in x.iter().zip(y) {
        let (sumi, prod) = q4_k_block(xb, yb);
        let min = Some((f16_to_f32(xb.dmin), hsum_i32_4(prod)));
        acc = tiled_step(acc, hsum_i32_8(sumi), f16_to_f32(xb.d), min, yb.d);
    }
    acc
}

/// One super-block of ggml's tiled microkernel: `r = isum·d` (then
/// `r = fma(−dmin, imin, r)` for types with mins), `acc = fma(r, d_a, acc)`
/// (GCC contracts the kernel's `add(acc, mul(r, d_a))`; checked against
/// llama.cpp's output).
#[inline(always)]
fn tiled_step(acc: f32, isum: i32, d: f32, min: Option<(f32, i32)>, d_a: f32) -> f32 {
    let mut r = isum as f32 * d;
    if let Some((dmin, imin)) = min {
        r = (-dmin).mul_add(imin as f32, r);
    }
    r.mul_add(d_a, acc)
}

/// Q4_K · Q8_K in the order of ggml's `ggml_gemv_q4_K_8x8_q8_K` /
/// `ggml_gemm_q4_K_8x8_q8_K` (x86): per super-block the exact i32
/// `Σ_j sc_j·(q·a)_j` and `Σ_j m_j·bsum_j`, each converted once and fused
/// into its own f32 accumulator with `d·d_a` and `dmin·d_a`; the result is
/// `acc − acc_min`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn q4_k_repacked(x: &[BlockQ4K], y: &[BlockQ8K]) -> f32 {
    let (mut acc, mut acc_min) = (0f32, 0f32);
    for (xb, yb) in x.iter().zip(y) {
        let (sumi, prod) = q4_k_block(xb, yb);
        let (isum, imin) = (hsum_i32_8(sumi), hsum_i32_4(prod));
        acc = (isum as f32).mul_add(f16_to_f32(xb.d) * yb.d, acc);
        acc_min = (imin as f32).mul_add(f16_to_f32(xb.dmin) * yb.d, acc_min);
    }
    acc - acc_min
}

/// Q4_K · Q8_K in the order of ggml's `ggml_gemm_q4_K_8x8_q8_K` (x86), the
/// repacked kernel for activation rows taken four at a time: as
/// [`q4_k_repacked`] but the fused accumulation runs per pair of
/// sub-blocks (64 elements), four steps per super-block.
#[target_feature(enable = "avx2,fma,f16c")]
fn q4_k_repacked_gemm(x: &[BlockQ4K], y: &[BlockQ8K]) -> f32 {
    let m4 = _mm256_set1_epi8(0xF);
    let (mut acc, mut acc_min) = (0f32, 0f32);
    for (xb, yb) in x.iter().zip(y) {
        let (sc, mins) = k4_scales_mins(&xb.scales);
        let prod = mins_dot_bsums(mins, &yb.bsums);
        let mut imin = [0i32; 4];
        // SAFETY: `imin` is 16 writable bytes; `storeu` has no alignment requirement.
        unsafe { _mm_storeu_si128(imin.as_mut_ptr().cast(), prod) };
        let (dd, dm) = (f16_to_f32(xb.d) * yb.d, f16_to_f32(xb.dmin) * yb.d);
        for (j, &im) in imin.iter().enumerate() {
            let q4 = load_u8(at(&xb.qs, 32 * j));
            let q4l = _mm256_and_si256(q4, m4);
            let q4h = _mm256_and_si256(_mm256_srli_epi16(q4, 4), m4);
            let pl = _mm256_maddubs_epi16(q4l, load_i8(at(&yb.qs, 64 * j)));
            let ph = _mm256_maddubs_epi16(q4h, load_i8(at(&yb.qs, 64 * j + 32)));
            let s = madd_acc(_mm256_setzero_si256(), bcast_i16(sc, 2 * j), pl);
            let s = madd_acc(s, bcast_i16(sc, 2 * j + 1), ph);
            acc = (hsum_i32_8(s) as f32).mul_add(dd, acc);
            acc_min = (im as f32).mul_add(dm, acc_min);
        }
    }
    acc - acc_min
}

/// Σ of eight i32 lanes (exact in i32 for these block sums).
#[inline]
#[target_feature(enable = "avx2")]
fn hsum_i32_8(v: __m256i) -> i32 {
    hsum_i32_4(_mm_add_epi32(
        _mm256_castsi256_si128(v),
        _mm256_extracti128_si256(v, 1),
    ))
}

/// Σ of four i32 lanes.
#[inline]
#[target_feature(enable = "avx2")]
fn hsum_i32_4(v: __m128i) -> i32 {
    let v = _mm_add_epi32(v, _mm_unpackhi_epi64(v, v));
    let v = _mm_add_epi32(v, _mm_shuffle_epi32(v, 1));
    _mm_cvtsi128_si32(v)
}

// ---------------------------------------------------------------- Q5_K

/// One Q5_K super-block's integer parts (as [`q4_k_block`]).
#[inline]
#[target_feature(enable = "avx2")]
fn q5_k_block(xb: &BlockQ5K, yb: &BlockQ8K) -> (__m256i, __m128i) {
    let m4 = _mm256_set1_epi8(0xF);
    let sixteen = _mm256_set1_epi8(16);
    let (sc, mins) = k4_scales_mins(&xb.scales);
    let prod = mins_dot_bsums(mins, &yb.bsums);
    let hbits = load_u8(&xb.qh);
    let high = |bit: i32| {
        let m = _mm256_set1_epi8(1 << bit);
        _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hbits, m), m), sixteen)
    };
    let mut sumi = _mm256_setzero_si256();
    for j in 0..4 {
        let q5 = load_u8(at(&xb.qs, 32 * j));
        let q5l = _mm256_or_si256(_mm256_and_si256(q5, m4), high(2 * j as i32));
        let q5h = _mm256_or_si256(
            _mm256_and_si256(_mm256_srli_epi16(q5, 4), m4),
            high(2 * j as i32 + 1),
        );
        let pl = _mm256_maddubs_epi16(q5l, load_i8(at(&yb.qs, 64 * j)));
        let ph = _mm256_maddubs_epi16(q5h, load_i8(at(&yb.qs, 64 * j + 32)));
        sumi = madd_acc(sumi, bcast_i16(sc, 2 * j), pl);
        sumi = madd_acc(sumi, bcast_i16(sc, 2 * j + 1), ph);
    }
    (sumi, prod)
}

#[target_feature(enable = "avx2,fma,f16c")]
fn q5_k(x: &[BlockQ5K], y: &[BlockQ8K]) -> f32 {
    let mut acc = _mm256_setzero_ps();
    let mut summs = 0f32;
    for (xb, yb) in x.iter().zip(y) {
        let d = yb.d * f16_to_f32(xb.d);
        let dmin = -yb.d * f16_to_f32(xb.dmin);
        let (sumi, prod) = q5_k_block(xb, yb);
        // ggml's AVX2 Q5_K: the mins' i32 sum, then `summs += dmin * Σ`
        // (contracted to an FMA by GCC).
        summs = dmin.mul_add(hsum_i32_4(prod) as f32, summs);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    hsum_ps(acc) + summs
}

/// Q5_K in ggml's tiled order (see [`q4_k_tiled`]).
#[target_feature(enable = "avx2,fma,f16c")]
fn q5_k_tiled(x: &[BlockQ5K], y: &[BlockQ8K]) -> f32 {
    let mut acc = 0f32;
    for (xb, yb) in x.iter().zip(y) {
        let (sumi, prod) = q5_k_block(xb, yb);
        let min = Some((f16_to_f32(xb.dmin), hsum_i32_4(prod)));
        acc = tiled_step(acc, hsum_i32_8(sumi), f16_to_f32(xb.d), min, yb.d);
    }
    acc
}

// ---------------------------------------------------------------- Q6_K

/// One Q6_K super-block's i32 lanes of `Σ sc·((level − 32)·a)`, the −32
/// taken as ggml's AVX2 kernel takes it, lane for lane: 32·(bsum·scale
/// pairs) subtracted from the lanes.
#[inline]
#[target_feature(enable = "avx2")]
fn q6_k_block(xb: &BlockQ6K, yb: &BlockQ8K) -> __m256i {
    let m4 = _mm256_set1_epi8(0xF);
    let m2 = _mm256_set1_epi8(3);
    let sc = load_scales16(&xb.scales);
    let mut sumi = _mm256_setzero_si256();
    for h in 0..2 {
        let ql0 = load_u8(at(&xb.ql, 64 * h));
        let ql1 = load_u8(at(&xb.ql, 64 * h + 32));
        let qh = load_u8(at(&xb.qh, 32 * h));
        let hi = |s: i32| {
            let v = match s {
                0 => qh,
                2 => _mm256_srli_epi16(qh, 2),
                4 => _mm256_srli_epi16(qh, 4),
                _ => _mm256_srli_epi16(qh, 6),
            };
            _mm256_slli_epi16(_mm256_and_si256(v, m2), 4)
        };
        let q = [
            _mm256_or_si256(_mm256_and_si256(ql0, m4), hi(0)),
            _mm256_or_si256(_mm256_and_si256(ql1, m4), hi(2)),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4), hi(4)),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4), hi(6)),
        ];
        for (k, qk) in q.into_iter().enumerate() {
            let q8 = load_i8(at(&yb.qs, 128 * h + 32 * k));
            let p = _mm256_maddubs_epi16(qk, q8);
            sumi = madd_acc(sumi, scale_pair(sc, 8 * h + 2 * k, true), p);
        }
    }
    let sclsub = _mm256_slli_epi32(
        _mm256_madd_epi16(load_bsums(&yb.bsums), _mm256_cvtepi8_epi16(sc)),
        5,
    );
    _mm256_sub_epi32(sumi, sclsub)
}

#[target_feature(enable = "avx2,fma,f16c")]
fn q6_k(x: &[BlockQ6K], y: &[BlockQ8K]) -> f32 {
    let mut acc = _mm256_setzero_ps();
    for (xb, yb) in x.iter().zip(y) {
        let d = yb.d * f16_to_f32(xb.d);
        let sumi = q6_k_block(xb, yb);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    hsum_ps(acc)
}

/// Q6_K in ggml's tiled order (see [`q4_k_tiled`]).
#[target_feature(enable = "avx2,fma,f16c")]
fn q6_k_tiled(x: &[BlockQ6K], y: &[BlockQ8K]) -> f32 {
    let mut acc = 0f32;
    for (xb, yb) in x.iter().zip(y) {
        let isum = hsum_i32_8(q6_k_block(xb, yb));
        acc = tiled_step(acc, isum, f16_to_f32(xb.d), None, yb.d);
    }
    acc
}

// ---------------------------------------------------------------- Q2_K

#[target_feature(enable = "avx2,fma,f16c")]
fn q2_k(x: &[BlockQ2K], y: &[BlockQ8K]) -> f32 {
    let m3 = _mm256_set1_epi8(3);
    let mut acc = _mm256_setzero_ps();
    for (xb, yb) in x.iter().zip(y) {
        let dall = yb.d * f16_to_f32(xb.d);
        let dmin = -yb.d * f16_to_f32(xb.dmin);
        let packed = load_scales16(&xb.scales);
        let sc = _mm_and_si128(packed, _mm_set1_epi8(0xF));
        let mv = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(packed, 4), _mm_set1_epi8(0xF)));
        let summs = _mm256_madd_epi16(mv, load_bsums(&yb.bsums));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(summs), acc);
        let mut sumi = _mm256_setzero_si256();
        for h in 0..2 {
            let q2 = load_u8(at(&xb.qs, 32 * h));
            let q = [
                _mm256_and_si256(q2, m3),
                _mm256_and_si256(_mm256_srli_epi16(q2, 2), m3),
                _mm256_and_si256(_mm256_srli_epi16(q2, 4), m3),
                _mm256_and_si256(_mm256_srli_epi16(q2, 6), m3),
            ];
            for (k, qk) in q.into_iter().enumerate() {
                let p = _mm256_maddubs_epi16(qk, load_i8(at(&yb.qs, 128 * h + 32 * k)));
                sumi = madd_acc(sumi, scale_pair(sc, 8 * h + 2 * k, false), p);
            }
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(dall), _mm256_cvtepi32_ps(sumi), acc);
    }
    hsum_ps(acc)
}

// ---------------------------------------------------------------- Q3_K

/// Q3_K's sixteen 6-bit scales, unbiased, as i8 (ggml's 32-bit masks).
#[inline]
#[target_feature(enable = "avx2")]
fn q3_k_scales(s: &[u8; 12]) -> __m128i {
    const KMASK1: u32 = 0x0303_0303;
    const KMASK2: u32 = 0x0f0f_0f0f;
    let w = |i: usize| u32::from_le_bytes([s[4 * i], s[4 * i + 1], s[4 * i + 2], s[4 * i + 3]]);
    let (a0, a1, tmp) = (w(0), w(1), w(2));
    let v = _mm_setr_epi32(
        ((a0 & KMASK2) | ((tmp & KMASK1) << 4)) as i32,
        ((a1 & KMASK2) | (((tmp >> 2) & KMASK1) << 4)) as i32,
        (((a0 >> 4) & KMASK2) | (((tmp >> 4) & KMASK1) << 4)) as i32,
        (((a1 >> 4) & KMASK2) | (((tmp >> 6) & KMASK1) << 4)) as i32,
    );
    _mm_sub_epi8(v, _mm_set1_epi8(32))
}

/// One Q3_K super-block's i32 lanes of `Σ sc·(level·a)`.
#[inline]
#[target_feature(enable = "avx2")]
fn q3_k_block(xb: &BlockQ3K, yb: &BlockQ8K) -> __m256i {
    let m3 = _mm256_set1_epi8(3);
    let four = _mm256_set1_epi8(4);
    let sc = q3_k_scales(&xb.scales);
    let hbits = load_u8(&xb.hmask);
    let mut sumi = _mm256_setzero_si256();
    for h in 0..2 {
        let q3 = load_u8(at(&xb.qs, 32 * h));
        let lows = [
            _mm256_and_si256(q3, m3),
            _mm256_and_si256(_mm256_srli_epi16(q3, 2), m3),
            _mm256_and_si256(_mm256_srli_epi16(q3, 4), m3),
            _mm256_and_si256(_mm256_srli_epi16(q3, 6), m3),
        ];
        for (k, low) in lows.into_iter().enumerate() {
            let bit = _mm256_set1_epi8(1 << (4 * h + k));
            // 4 where the high bit is clear: level = low − 4·(1 − h).
            let sub =
                _mm256_andnot_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hbits, bit), bit), four);
            let q8 = load_i8(at(&yb.qs, 128 * h + 32 * k));
            let p = _mm256_sub_epi16(_mm256_maddubs_epi16(low, q8), _mm256_maddubs_epi16(sub, q8));
            sumi = madd_acc(sumi, scale_pair(sc, 8 * h + 2 * k, true), p);
        }
    }
    sumi
}

// Same driver as q6_k / q6_k_tiled above: each type needs its own non-generic
// #[target_feature] fn for the VecDotFn tables; the per-type work is already in q3_k_block.
#[target_feature(enable = "avx2,fma,f16c")]
fn q3_k(x: &[BlockQ3K], y: &[BlockQ8K]) -> f32 {
    let mut acc = _mm256_setzero_ps();
    for (xb, yb) in x.iter().zip(y) {
        let d = yb.d * f16_to_f32(xb.d);
        let sumi = q3_k_block(xb, yb);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    hsum_ps(acc)
}

/// Q3_K in ggml's tiled order (see [`q4_k_tiled`]).
#[target_feature(enable = "avx2,fma,f16c")]
fn q3_k_tiled(x: &[BlockQ3K], y: &[BlockQ8K]) -> f32 {
    let mut acc = 0f32;
    for (xb, yb) in x.iter().zip(y) {
        let isum = hsum_i32_8(q3_k_block(xb, yb));
        acc = tiled_step(acc, isum, f16_to_f32(xb.d), None, yb.d);
    }
    acc
}

// ---------------------------------------------------------------- IQ4_XS

/// Signed × signed bytes through `maddubs`: |a| × (b with a's sign), to i16 pairs.
/// Exact while no activation is −128 (Q8_K's are in −127..=127).
#[inline]
#[target_feature(enable = "avx2")]
fn mul_add_i8(a: __m256i, b: __m256i) -> __m256i {
    _mm256_maddubs_epi16(_mm256_sign_epi8(a, a), _mm256_sign_epi8(b, a))
}

/// IQ4_XS's eight 6-bit sub-block scales, unbiased (`ls − 32`), as i16 in
/// both 128-bit lanes: nibble `j` of `scales_l` or'ed with bits `2j..2j+2` of
/// `scales_h` shifted to bit 4, with per-lane variable shifts.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn iq4_xs_scales(b: &BlockIq4Xs) -> __m256i {
    let l = _mm256_set1_epi32(i32::from_le_bytes(b.scales_l));
    // Lane j: byte j/2 of scales_l, shifted right by 4·(j%2).
    let l = _mm256_srlv_epi32(l, _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28));
    let l = _mm256_and_si256(l, _mm256_set1_epi32(0xF));
    let h = _mm256_set1_epi32(b.scales_h as i32);
    let h = _mm256_srlv_epi32(h, _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14));
    let h = _mm256_slli_epi32(_mm256_and_si256(h, _mm256_set1_epi32(3)), 4);
    let ls = _mm256_sub_epi32(_mm256_or_si256(l, h), _mm256_set1_epi32(32));
    let ls16 = _mm_packs_epi32(_mm256_castsi256_si128(ls), _mm256_extracti128_si256(ls, 1));
    _mm256_set_m128i(ls16, ls16)
}

#[target_feature(enable = "avx2,fma,f16c")]
fn iq4_xs(x: &[BlockIq4Xs], y: &[BlockQ8K]) -> f32 {
    let m4 = _mm256_set1_epi8(0xF);
    let values = {
        // A cast, not an `array::map` (an out-of-line call per row).
        let v = load_u8_128(bytemuck::cast_ref(&KVALUES_IQ4NL));
        _mm256_set_m128i(v, v)
    };
    let mut acc = _mm256_setzero_ps();
    for (xb, yb) in x.iter().zip(y) {
        let d = yb.d * f16_to_f32(xb.d);
        let ls = iq4_xs_scales(xb);
        let mut sumi = _mm256_setzero_si256();
        for p in 0..4 {
            // Sub-blocks 2p and 2p+1 in the two 128-bit lanes: low nibbles are
            // their elements 0..16, high nibbles their elements 16..32.
            let q4 = load_u8(at(&xb.qs, 32 * p));
            let lo = _mm256_shuffle_epi8(values, _mm256_and_si256(q4, m4));
            let hi = _mm256_shuffle_epi8(values, _mm256_and_si256(_mm256_srli_epi16(q4, 4), m4));
            let a = &yb.qs[64 * p..64 * p + 64];
            let a_lo = load_halves(&a[0..16], &a[32..48]);
            let a_hi = load_halves(&a[16..32], &a[48..64]);
            // Lanes 0..8 scale 2p, lanes 8..16 scale 2p+1.
            let sc = _mm256_shuffle_epi8(
                ls,
                _mm256_setr_epi8(
                    (4 * p) as i8,
                    (4 * p + 1) as i8,
                    (4 * p) as i8,
                    (4 * p + 1) as i8,
                    (4 * p) as i8,
                    (4 * p + 1) as i8,
                    (4 * p) as i8,
                    (4 * p + 1) as i8,
                    (4 * p) as i8,
                    (4 * p + 1) as i8,
                    (4 * p) as i8,
                    (4 * p + 1) as i8,
                    (4 * p) as i8,
                    (4 * p + 1) as i8,
                    (4 * p) as i8,
                    (4 * p + 1) as i8,
                    (4 * p + 2) as i8,
                    (4 * p + 3) as i8,
                    (4 * p + 2) as i8,
                    (4 * p + 3) as i8,
                    (4 * p + 2) as i8,
                    (4 * p + 3) as i8,
                    (4 * p + 2) as i8,
                    (4 * p + 3) as i8,
                    (4 * p + 2) as i8,
                    (4 * p + 3) as i8,
                    (4 * p + 2) as i8,
                    (4 * p + 3) as i8,
                    (4 * p + 2) as i8,
                    (4 * p + 3) as i8,
                    (4 * p + 2) as i8,
                    (4 * p + 3) as i8,
                ),
            );
            sumi = madd_acc(sumi, sc, mul_add_i8(lo, a_lo));
            sumi = madd_acc(sumi, sc, mul_add_i8(hi, a_hi));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    hsum_ps(acc)
}

/// Two 16-byte activation pieces as the low and high 128-bit lanes.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn load_halves(lo: &[i8], hi: &[i8]) -> __m256i {
    let lo: &[i8; 16] = lo.try_into().unwrap();
    let hi: &[i8; 16] = hi.try_into().unwrap();
    // SAFETY: each is 16 readable bytes and `loadu` has no alignment requirement.
    unsafe {
        _mm256_set_m128i(
            _mm_loadu_si128(hi.as_ptr().cast()),
            _mm_loadu_si128(lo.as_ptr().cast()),
        )
    }
}

// ---------------------------------------------------------------- Q8_K quantiser

/// Bit-exact with the scalar reference: the same first-largest-magnitude
/// element, the same f32 `iscale`, and `cvtps` rounding (half to even under the
/// default MXCSR) equals ggml's `nearest_int`.
#[target_feature(enable = "avx2")]
fn q8_k_quantize(src: &[f32], blocks: &mut [BlockQ8K]) {
    let abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff_ffff));
    let perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    let max127 = _mm256_set1_epi32(127);
    for (b, x) in blocks.iter_mut().zip(src.chunks_exact(QK_K)) {
        let x: &[f32; QK_K] = x.try_into().unwrap();
        let load = |i: usize| {
            let v: &[f32; 8] = x[i..i + 8].try_into().unwrap();
            // SAFETY: `v` is 8 readable f32 and `loadu` has no alignment requirement.
            unsafe { _mm256_loadu_ps(v.as_ptr()) }
        };
        let mut vmax = _mm256_setzero_ps();
        for i in (0..QK_K).step_by(8) {
            vmax = _mm256_max_ps(vmax, _mm256_and_ps(load(i), abs_mask));
        }
        let m = _mm_max_ps(_mm256_castps256_ps128(vmax), _mm256_extractf128_ps(vmax, 1));
        let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        let amax = _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
        if amax == 0.0 {
            b.d = 0.0;
            b.qs = [0; QK_K];
            b.bsums = [0; 16];
            continue;
        }
        // The first element whose magnitude is amax carries the sign.
        let target = _mm256_set1_ps(amax);
        let mut max = amax;
        for i in (0..QK_K).step_by(8) {
            let hit = _mm256_movemask_ps(_mm256_cmp_ps(
                _mm256_and_ps(load(i), abs_mask),
                target,
                _CMP_EQ_OQ,
            ));
            if hit != 0 {
                max = x[i + hit.trailing_zeros() as usize];
                break;
            }
        }
        let iscale = -127.0 / max;
        let vs = _mm256_set1_ps(iscale);
        for g in 0..8 {
            let conv = |k: usize| {
                let v = _mm256_cvtps_epi32(_mm256_mul_ps(load(32 * g + 8 * k), vs));
                _mm256_min_epi32(v, max127)
            };
            let (i0, i1, i2, i3) = (conv(0), conv(1), conv(2), conv(3));
            // Sums of the two 16-element groups (all values fit i16).
            let s = _mm256_hadd_epi32(_mm256_add_epi32(i0, i1), _mm256_add_epi32(i2, i3));
            let s = _mm256_hadd_epi32(s, s);
            b.bsums[2 * g] = (_mm256_extract_epi32(s, 0) + _mm256_extract_epi32(s, 4)) as i16;
            b.bsums[2 * g + 1] = (_mm256_extract_epi32(s, 1) + _mm256_extract_epi32(s, 5)) as i16;
            let p = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
            let p = _mm256_permutevar8x32_epi32(p, perm);
            let out: &mut [i8; 32] = (&mut b.qs[32 * g..32 * g + 32]).try_into().unwrap();
            // SAFETY: `out` is 32 writable bytes and `storeu` has no alignment requirement.
            unsafe { _mm256_storeu_si256(out.as_mut_ptr().cast(), p) };
        }
        b.d = 1.0 / iscale;
    }
}
