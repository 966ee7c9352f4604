//! AVX-512 multi-row bodies for Q3_K, Q5_K and Q6_K (one weight row against
//! `C` Q8_K activation rows; the drivers are in [`super::gemm`]).
//!
//! Each is the tier's one-row kernel (`lowbit::q3_k::<true>`,
//! `kquants::q5_k`, `kquants::q6_k`, all in ggml's order) with its
//! per-block work split in two: the weight side (levels, their high bits,
//! the sub-block scales and their lane broadcasts) is unpacked once per
//! block, then every activation row runs the one-row kernel's per-block
//! arithmetic against it — the same `maddubs` / `dpwssd` integer sums in
//! the same i32 lanes (exact), folded to ggml's eight lanes, the same f32
//! scale products, one 8-lane FMA per block into its own accumulator (Q5_K:
//! the same scalar `summs` FMA), and the same final horizontal sum. So each
//! output is the one-row `vec_dot` bit for bit.
//!
//! Q3_K, Q5_K and Q6_K also have a two-weight-row kernel for the mat-vec
//! (one activation row): two independent accumulator chains where the
//! one-row kernel has one, each fed exactly as that kernel feeds its own.
//! (Q6_K's is no faster in cache; it pays from DRAM, with the driver pairing
//! row i with row i + n/2: docs/PERFORMANCE.md.)

use std::arch::x86_64::*;

use crate::scalar::iq4_xs::BlockIq4Xs;
use crate::scalar::q3_k::BlockQ3K;
use crate::scalar::q4_k::BlockQ4K;
use crate::scalar::q5_k::BlockQ5K;
use crate::scalar::q6_k::BlockQ6K;
use crate::scalar::q8_k::BlockQ8K;
use crate::x86::avx2::kquants::{
    at, f16_to_f32, hsum_ps, k4_scales_mins, load_bsums, load_i8, load_u8, load_u8_128,
    mins_dot_bsums,
};
use crate::x86::avx512::kquants::{
    at64, bcast_pair, fold8, halves_i16, hsum128, hsum_i32_4, iq4_xs_d, iq4_xs_hsum, iq4_xs_levels,
    iq4_xs_sumi, k4_scale_bytes, k4_unpack2, load64, q6_index, q6_k_levels, q6_k_levels_gfni,
    Iq4Acts, Iq4Consts, Q6Affine,
};
use crate::x86::avx512::lowbit::{self, q3_k_levels, Q3Unpack};
use crate::x86::avx512::prefetch_rows2;

// ---------------------------------------------------------------- Q3_K

/// One Q3_K row against `C` Q8_K rows: `lowbit::q3_k::<true>` per output.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(crate) fn q3_k_cols<const C: usize>(x: &[BlockQ3K], y: [&[BlockQ8K]; C]) -> [f32; C] {
    // SAFETY: loads read whole block fields (bounds-checked); this function
    // enables every feature the `lowbit` helpers need (VNNI included).
    unsafe {
        let four = _mm512_set1_epi8(4);
        let k3 = Q3Unpack::new();
        let idx = [
            lowbit::lane_index(0),
            lowbit::lane_index(4),
            lowbit::lane_index(8),
            lowbit::lane_index(12),
        ];
        let mut acc = [_mm256_setzero_ps(); C];
        for (b, xb) in x.iter().enumerate() {
            let xd = f16_to_f32(xb.d);
            let sc16 = _mm256_cvtepi8_epi16(lowbit::q3_k_scales(&xb.scales));
            let sc = _mm512_castsi256_si512(sc16);
            // Weight side, piece j = 2h + p: levels + 4 and the scale per lane.
            let q = q3_k_levels::<false>(xb, &k3);
            let s: [__m512i; 4] = std::array::from_fn(|j| _mm512_permutexvar_epi16(idx[j], sc));
            for c in 0..C {
                let yb = &y[c][b];
                let d = yb.d * xd;
                let mut sumi = _mm512_setzero_si512();
                for j in 0..4 {
                    // The +4 bias off each i16 pair, as the one-row kernel.
                    let a = lowbit::load64(&yb.qs, 64 * j);
                    let prod = _mm512_sub_epi16(
                        _mm512_maddubs_epi16(q[j], a),
                        _mm512_maddubs_epi16(four, a),
                    );
                    sumi = lowbit::dot_scale::<true>(sumi, prod, s[j]);
                }
                acc[c] =
                    _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(fold8(sumi)), acc[c]);
            }
        }
        std::array::from_fn(|c| hsum_ps(acc[c]))
    }
}

/// Two Q3_K rows against one Q8_K row: `lowbit::q3_k::<true>` per output.
/// Each row keeps its own 8-lane accumulator fed block after block as the
/// one-row kernel feeds its one (same integer sums, same `d`, same FMA,
/// same final sum), so each output is that kernel's bits; the two chains
/// are independent, and the activation loads and the `4·a` bias products
/// are shared between the rows.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(crate) fn q3_k_rows2(x0: &[BlockQ3K], x1: &[BlockQ3K], y: &[BlockQ8K]) -> [f32; 2] {
    // SAFETY: this function enables every feature the body needs.
    unsafe { q3_k_rows2_body::<false>(x0, x1, y) }
}

/// [`q3_k_rows2`] unpacking levels with GFNI ([`q3_k_levels`]`::<true>`):
/// the same integers, so the same bits, in fewer ops (faster in cache for
/// the expert shape: docs/PERFORMANCE.md).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c,gfni")]
pub(crate) fn q3_k_rows2_gfni(x0: &[BlockQ3K], x1: &[BlockQ3K], y: &[BlockQ8K]) -> [f32; 2] {
    // SAFETY: this function enables every feature the body needs.
    unsafe { q3_k_rows2_body::<true>(x0, x1, y) }
}

/// # Safety
/// The caller must have AVX512 F/BW/VL/VNNI, AVX2, FMA and F16C enabled,
/// and GFNI when `GFNI`.
#[inline(always)]
unsafe fn q3_k_rows2_body<const GFNI: bool>(
    x0: &[BlockQ3K],
    x1: &[BlockQ3K],
    y: &[BlockQ8K],
) -> [f32; 2] {
    // SAFETY: loads read whole block fields (bounds-checked); the caller
    // enables every feature the `lowbit` helpers need (VNNI included).
    unsafe {
        let four = _mm512_set1_epi8(4);
        let k3 = Q3Unpack::new();
        let idx = [
            lowbit::lane_index(0),
            lowbit::lane_index(4),
            lowbit::lane_index(8),
            lowbit::lane_index(12),
        ];
        // Two named accumulators (an array indexed by the row was kept on
        // the stack).
        let (mut acc0, mut acc1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        for (b, ((xa, xb), yb)) in x0.iter().zip(x1).zip(y).enumerate() {
            prefetch_rows2(x0, x1, b);
            let a: [__m512i; 4] = std::array::from_fn(|j| lowbit::load64(&yb.qs, 64 * j));
            let bias: [__m512i; 4] = std::array::from_fn(|j| _mm512_maddubs_epi16(four, a[j]));
            let d0 = yb.d * f16_to_f32(xa.d);
            let d1 = yb.d * f16_to_f32(xb.d);
            let s0 = q3_k_row_block::<GFNI>(xa, &a, &bias, &k3, &idx);
            let s1 = q3_k_row_block::<GFNI>(xb, &a, &bias, &k3, &idx);
            acc0 = _mm256_fmadd_ps(_mm256_set1_ps(d0), _mm256_cvtepi32_ps(s0), acc0);
            acc1 = _mm256_fmadd_ps(_mm256_set1_ps(d1), _mm256_cvtepi32_ps(s1), acc1);
        }
        [hsum_ps(acc0), hsum_ps(acc1)]
    }
}

/// One row's block of [`q3_k_rows2_body`]: the eight i32 lanes of
/// `Σ_j s_j·((level + 4)·a − 4·a)` (a plain fn, not a closure, so that it
/// inlines into the `#[target_feature]` callers).
///
/// # Safety
/// As [`q3_k_rows2_body`].
#[inline(always)]
unsafe fn q3_k_row_block<const GFNI: bool>(
    xr: &BlockQ3K,
    a: &[__m512i; 4],
    bias: &[__m512i; 4],
    k3: &Q3Unpack,
    idx: &[__m512i; 4],
) -> __m256i {
    // SAFETY: loads read whole block fields (bounds-checked); the caller
    // enables every feature needed.
    unsafe {
        let sc16 = _mm256_cvtepi8_epi16(lowbit::q3_k_scales(&xr.scales));
        let sc = _mm512_castsi256_si512(sc16);
        let q = q3_k_levels::<GFNI>(xr, k3);
        let mut sumi = _mm512_setzero_si512();
        for j in 0..4 {
            let prod = _mm512_sub_epi16(_mm512_maddubs_epi16(q[j], a[j]), bias[j]);
            let s = _mm512_permutexvar_epi16(idx[j], sc);
            sumi = lowbit::dot_scale::<true>(sumi, prod, s);
        }
        fold8(sumi)
    }
}

// ---------------------------------------------------------------- Q5_K

/// One Q5_K row against `C` Q8_K rows: `kquants::q5_k` per output.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(crate) fn q5_k_cols<const C: usize>(x: &[BlockQ5K], y: [&[BlockQ8K]; C]) -> [f32; C] {
    let m4 = _mm512_set1_epi8(0xF);
    let one = _mm512_set1_epi8(1);
    let nib_shift = halves_i16(0, 4);
    let mut acc = [_mm256_setzero_ps(); C];
    let mut summs = [0f32; C];
    for (b, xb) in x.iter().enumerate() {
        let (xd, xdmin) = (f16_to_f32(xb.d), f16_to_f32(xb.dmin));
        let (sc, mins) = k4_scales_mins(&xb.scales);
        let sc = _mm512_broadcast_i32x4(_mm256_castsi256_si128(sc));
        let qh = _mm512_broadcast_i64x4(load_u8(&xb.qh));
        let mut q = [_mm512_setzero_si512(); 4];
        let mut s = [_mm512_setzero_si512(); 4];
        for j in 0..4 {
            let v = _mm512_broadcast_i64x4(load_u8(at(&xb.qs, 32 * j)));
            let v = _mm512_and_si512(_mm512_srlv_epi16(v, nib_shift), m4);
            let hb = _mm512_srlv_epi16(qh, halves_i16(2 * j as i16, 2 * j as i16 + 1));
            let hb = _mm512_slli_epi16::<4>(_mm512_and_si512(hb, one));
            q[j] = _mm512_or_si512(v, hb);
            s[j] = bcast_pair(sc, 2 * j, 2 * j + 1);
        }
        for c in 0..C {
            let yb = &y[c][b];
            let d = yb.d * xd;
            let dmin = -yb.d * xdmin;
            let prod = mins_dot_bsums(mins, &yb.bsums);
            summs[c] = dmin.mul_add(hsum_i32_4(prod) as f32, summs[c]);
            let mut sumi = _mm512_setzero_si512();
            for j in 0..4 {
                let p = _mm512_maddubs_epi16(q[j], load64(at64(&yb.qs, 64 * j)));
                sumi = _mm512_dpwssds_epi32(sumi, p, s[j]);
            }
            acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(fold8(sumi)), acc[c]);
        }
    }
    std::array::from_fn(|c| hsum_ps(acc[c]) + summs[c])
}

/// Two Q5_K rows against one Q8_K row: `kquants::q5_k` per output, each row
/// its own accumulator and `summs` fed as the one-row kernel feeds its own
/// (so each output is that kernel's bits); the activation loads are shared.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(crate) fn q5_k_rows2(x0: &[BlockQ5K], x1: &[BlockQ5K], y: &[BlockQ8K]) -> [f32; 2] {
    // SAFETY: this function enables every feature the body needs.
    unsafe { q5_k_rows2_body::<false>(x0, x1, y) }
}

/// Two Q5_K rows in the file's layout against one Q8_K row in the repacked
/// product's arithmetic (`crate::q5k_r8`, `r8::minned_row`): per row and
/// block the exact `Σ sc·(q·a)` and `Σ m·bsum`, each converted once and
/// fused into its own f32 chain with `d·d_a` and `dmin·d_a`, and the
/// difference of the two chains at the end.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(crate) fn q5_k_r8_rows2(x0: &[BlockQ5K], x1: &[BlockQ5K], y: &[BlockQ8K]) -> [f32; 2] {
    // SAFETY: this function enables every feature the body needs.
    unsafe { q5_k_rows2_body::<true>(x0, x1, y) }
}

/// One Q5_K row in the file's layout against `C` Q8_K rows in the repacked
/// product's arithmetic ([`q5_k_r8_rows2`] per output; the rows a mat-vec's
/// pairs leave).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(crate) fn q5_k_r8_cols<const C: usize>(x: &[BlockQ5K], y: [&[BlockQ8K]; C]) -> [f32; C] {
    std::array::from_fn(|c| {
        let (mut acc, mut acc_min) = (0f32, 0f32);
        for (xb, yb) in x.iter().zip(y[c]) {
            let a: [__m512i; 4] = std::array::from_fn(|j| load64(at64(&yb.qs, 64 * j)));
            // SAFETY: whole block fields; this function enables the features.
            let (sumi, prod) = unsafe { q5_k_block(xb, &a, &yb.bsums) };
            // SAFETY: register-only; this function enables AVX2.
            let isum = unsafe { hsum_i32_8(sumi) };
            acc = (isum as f32).mul_add(f16_to_f32(xb.d) * yb.d, acc);
            acc_min = (hsum_i32_4(prod) as f32).mul_add(f16_to_f32(xb.dmin) * yb.d, acc_min);
        }
        acc - acc_min
    })
}

/// One Q5_K block of one row against one Q8_K block (`a`: its levels in four
/// 512-bit loads): the exact integers of `kquants::q5_k`, the eight i32 lanes
/// of `Σ sc·(q·a)` and the four of `Σ m·bsum`.
///
/// # Safety
/// The caller must have AVX-512 F/BW/VL/VNNI and AVX2 enabled.
#[inline(always)]
unsafe fn q5_k_block(xr: &BlockQ5K, a: &[__m512i; 4], bsums: &[i16; 16]) -> (__m256i, __m128i) {
    // SAFETY: loads read whole block fields; the caller enables the features.
    unsafe {
        let m4 = _mm512_set1_epi8(0xF);
        let one = _mm512_set1_epi8(1);
        let nib_shift = halves_i16(0, 4);
        let (sc, mins) = k4_scales_mins(&xr.scales);
        let sc = _mm512_broadcast_i32x4(_mm256_castsi256_si128(sc));
        let qh = _mm512_broadcast_i64x4(load_u8(&xr.qh));
        let mut sumi = _mm512_setzero_si512();
        for (j, &aj) in a.iter().enumerate() {
            let v = _mm512_broadcast_i64x4(load_u8(at(&xr.qs, 32 * j)));
            let v = _mm512_and_si512(_mm512_srlv_epi16(v, nib_shift), m4);
            let hb = _mm512_srlv_epi16(qh, halves_i16(2 * j as i16, 2 * j as i16 + 1));
            let hb = _mm512_slli_epi16::<4>(_mm512_and_si512(hb, one));
            let q = _mm512_or_si512(v, hb);
            let p = _mm512_maddubs_epi16(q, aj);
            sumi = _mm512_dpwssds_epi32(sumi, p, bcast_pair(sc, 2 * j, 2 * j + 1));
        }
        (fold8(sumi), mins_dot_bsums(mins, bsums))
    }
}

/// `R8`: the repacked product's arithmetic ([`q5_k_r8_rows2`]), else
/// `kquants::q5_k`'s ([`q5_k_rows2`]).
///
/// # Safety
/// The caller must have AVX-512 F/BW/VL/VNNI, AVX2, FMA and F16C enabled.
#[inline(always)]
unsafe fn q5_k_rows2_body<const R8: bool>(
    x0: &[BlockQ5K],
    x1: &[BlockQ5K],
    y: &[BlockQ8K],
) -> [f32; 2] {
    // SAFETY: loads read whole block fields (bounds-checked by the zips); the
    // caller enables every feature needed.
    unsafe {
        let mut acc = [_mm256_setzero_ps(); 2];
        let (mut summs, mut acc_r8, mut min_r8) = ([0f32; 2], [0f32; 2], [0f32; 2]);
        for (b, ((xa, xb), yb)) in x0.iter().zip(x1).zip(y).enumerate() {
            prefetch_rows2(x0, x1, b);
            let a: [__m512i; 4] = [
                load64(at64(&yb.qs, 0)),
                load64(at64(&yb.qs, 64)),
                load64(at64(&yb.qs, 128)),
                load64(at64(&yb.qs, 192)),
            ];
            for (r, xr) in [xa, xb].into_iter().enumerate() {
                let (xd, xdmin) = (f16_to_f32(xr.d), f16_to_f32(xr.dmin));
                let (sumi, prod) = q5_k_block(xr, &a, &yb.bsums);
                if R8 {
                    acc_r8[r] = (hsum_i32_8(sumi) as f32).mul_add(xd * yb.d, acc_r8[r]);
                    min_r8[r] = (hsum_i32_4(prod) as f32).mul_add(xdmin * yb.d, min_r8[r]);
                } else {
                    let dmin = -yb.d * xdmin;
                    summs[r] = dmin.mul_add(hsum_i32_4(prod) as f32, summs[r]);
                    let d = _mm256_set1_ps(yb.d * xd);
                    acc[r] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sumi), acc[r]);
                }
            }
        }
        if R8 {
            [acc_r8[0] - min_r8[0], acc_r8[1] - min_r8[1]]
        } else {
            [hsum_ps(acc[0]) + summs[0], hsum_ps(acc[1]) + summs[1]]
        }
    }
}

// ---------------------------------------------------------------- Q6_K

/// One Q6_K row against `C` Q8_K rows: `kquants::q6_k` per output.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(crate) fn q6_k_cols<const C: usize>(x: &[BlockQ6K], y: [&[BlockQ8K]; C]) -> [f32; C] {
    let m4 = _mm512_set1_epi8(0xF);
    let m3 = _mm512_set1_epi8(3);
    let sh02 = halves_i16(0, 2);
    let sh46 = halves_i16(4, 6);
    let idxs = [q6_index(0), q6_index(4), q6_index(8), q6_index(12)];
    let mut acc = [_mm256_setzero_ps(); C];
    for (b, xb) in x.iter().enumerate() {
        let xd = f16_to_f32(xb.d);
        let s8: &[u8; 16] = bytemuck::cast_ref(&xb.scales);
        let sc16 = _mm256_cvtepi8_epi16(load_u8_128(s8));
        let sc = _mm512_castsi256_si512(sc16);
        // Weight side, piece j: levels (offset by +32) and the scales.
        // SAFETY: this function enables AVX-512F/BW and AVX2.
        let q = unsafe { q6_k_levels(xb, m4, m3, sh02, sh46) };
        let s: [__m512i; 4] = std::array::from_fn(|j| _mm512_permutexvar_epi16(idxs[j], sc));
        for c in 0..C {
            let yb = &y[c][b];
            let d = yb.d * xd;
            let corr = _mm256_madd_epi16(sc16, load_bsums(&yb.bsums));
            let mut sumi = _mm512_sub_epi32(
                _mm512_setzero_si512(),
                _mm512_zextsi256_si512(_mm256_slli_epi32::<5>(corr)),
            );
            for j in 0..4 {
                let p = _mm512_maddubs_epi16(q[j], load64(at64(&yb.qs, 64 * j)));
                sumi = _mm512_dpwssds_epi32(sumi, p, s[j]);
            }
            acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(fold8(sumi)), acc[c]);
        }
    }
    std::array::from_fn(|c| hsum_ps(acc[c]))
}

/// Two Q6_K rows against one Q8_K row: `kquants::q6_k` per output, each
/// row's accumulator fed exactly as [`q6_k_cols`] feeds its one; the
/// activation loads and bsums are shared, and the two chains independent.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(crate) fn q6_k_rows2(x0: &[BlockQ6K], x1: &[BlockQ6K], y: &[BlockQ8K]) -> [f32; 2] {
    // SAFETY: this function enables every feature the body needs.
    unsafe { q6_k_rows2_body::<false, false>(x0, x1, y) }
}

/// [`q6_k_rows2`] unpacking levels with GFNI ([`q6_k_levels_gfni`]): the
/// same integers, so the same bits.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c,gfni")]
pub(crate) fn q6_k_rows2_gfni(x0: &[BlockQ6K], x1: &[BlockQ6K], y: &[BlockQ8K]) -> [f32; 2] {
    // SAFETY: this function enables every feature the body needs.
    unsafe { q6_k_rows2_body::<true, false>(x0, x1, y) }
}

/// Two Q6_K rows in the file's layout against one Q8_K row with the
/// arithmetic of the repacked product ([`crate::q6k_r8`]): per block the
/// exact integer sum (the lanes of [`q6_k_row_block`], added), converted
/// once and fused as `acc = fma(isum, d_w · d_a, acc)` block after block.
/// Its bits are [`crate::q6k_r8::gemm_ref`]'s, so a mat-vec may stream the
/// file's rows (faster from memory than the repacked ones) while batches
/// take the repacked product.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c,gfni")]
pub(crate) fn q6_k_r8_rows2(x0: &[BlockQ6K], x1: &[BlockQ6K], y: &[BlockQ8K]) -> [f32; 2] {
    // SAFETY: this function enables every feature the body needs.
    unsafe { q6_k_rows2_body::<true, true>(x0, x1, y) }
}

/// One Q6_K row in the file's layout against `C` Q8_K rows in the
/// repacked product's arithmetic ([`q6_k_r8_rows2`] per output; the rows a
/// mat-vec's pairs leave).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c,gfni")]
pub(crate) fn q6_k_r8_cols<const C: usize>(x: &[BlockQ6K], y: [&[BlockQ8K]; C]) -> [f32; C] {
    // SAFETY: loads read whole block fields (bounds-checked by the zip);
    // this function enables every feature needed.
    unsafe {
        let (k6, g6, idxs) = q6_constants();
        std::array::from_fn(|c| {
            let mut acc = 0f32;
            for (xb, yb) in x.iter().zip(y[c]) {
                let a: [__m512i; 4] = std::array::from_fn(|j| load64(at64(&yb.qs, 64 * j)));
                let s = q6_k_row_block::<true>(xb, &a, load_bsums(&yb.bsums), &k6, &g6, &idxs);
                let dd = f16_to_f32(xb.d) * yb.d;
                acc = (hsum_i32_8(s) as f32).mul_add(dd, acc);
            }
            acc
        })
    }
}

/// The sum of eight i32 lanes (exact: integer addition).
///
/// # Safety
/// The caller must have AVX2 enabled.
#[inline(always)]
unsafe fn hsum_i32_8(v: __m256i) -> i32 {
    // SAFETY: register-only; the caller enables AVX2.
    unsafe {
        hsum_i32_4(_mm_add_epi32(
            _mm256_castsi256_si128(v),
            _mm256_extracti128_si256::<1>(v),
        ))
    }
}

/// `R8`: the repacked product's arithmetic ([`q6_k_r8_rows2`]), else
/// `kquants::q6_k`'s.
///
/// # Safety
/// The caller must have AVX512 F/BW/VL/VNNI, AVX2, FMA and F16C enabled,
/// and GFNI when `GFNI`.
#[inline(always)]
unsafe fn q6_k_rows2_body<const GFNI: bool, const R8: bool>(
    x0: &[BlockQ6K],
    x1: &[BlockQ6K],
    y: &[BlockQ8K],
) -> [f32; 2] {
    // SAFETY: loads read whole block fields (bounds-checked); the caller
    // enables every feature needed.
    unsafe {
        let (k6, g6, idxs) = q6_constants();
        let (mut acc0, mut acc1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        let mut acc_r8 = [0f32; 2];
        for (b, ((xa, xb), yb)) in x0.iter().zip(x1).zip(y).enumerate() {
            prefetch_rows2(x0, x1, b);
            let a: [__m512i; 4] = std::array::from_fn(|j| load64(at64(&yb.qs, 64 * j)));
            let bsums = load_bsums(&yb.bsums);
            let d0 = yb.d * f16_to_f32(xa.d);
            let d1 = yb.d * f16_to_f32(xb.d);
            let s0 = q6_k_row_block::<GFNI>(xa, &a, bsums, &k6, &g6, &idxs);
            let s1 = q6_k_row_block::<GFNI>(xb, &a, bsums, &k6, &g6, &idxs);
            if R8 {
                acc_r8[0] = (hsum_i32_8(s0) as f32).mul_add(d0, acc_r8[0]);
                acc_r8[1] = (hsum_i32_8(s1) as f32).mul_add(d1, acc_r8[1]);
            } else {
                acc0 = _mm256_fmadd_ps(_mm256_set1_ps(d0), _mm256_cvtepi32_ps(s0), acc0);
                acc1 = _mm256_fmadd_ps(_mm256_set1_ps(d1), _mm256_cvtepi32_ps(s1), acc1);
            }
        }
        if R8 {
            return acc_r8;
        }
        [hsum_ps(acc0), hsum_ps(acc1)]
    }
}

/// The constants [`q6_k_row_block`] takes: the masks and shuffles of the
/// plain level unpacking, the affine matrices of the GFNI one, and the four
/// pieces' scale indices.
///
/// # Safety
/// The caller must have AVX512 F/BW and AVX2 enabled.
#[inline(always)]
unsafe fn q6_constants() -> ((__m512i, __m512i, __m512i, __m512i), Q6Affine, [__m512i; 4]) {
    // SAFETY: register-only; the caller enables the features.
    unsafe {
        let k6 = (
            _mm512_set1_epi8(0xF),
            _mm512_set1_epi8(3),
            halves_i16(0, 2),
            halves_i16(4, 6),
        );
        (
            k6,
            Q6Affine::new(),
            [q6_index(0), q6_index(4), q6_index(8), q6_index(12)],
        )
    }
}

/// One row's block of [`q6_k_rows2_body`]: the eight i32 lanes of
/// `Σ_j s_j·(level + 32)·a − 32·Σ scale·bsum`.
///
/// # Safety
/// As [`q6_k_rows2_body`].
#[inline(always)]
unsafe fn q6_k_row_block<const GFNI: bool>(
    xr: &BlockQ6K,
    a: &[__m512i; 4],
    bsums: __m256i,
    k6: &(__m512i, __m512i, __m512i, __m512i),
    g6: &Q6Affine,
    idxs: &[__m512i; 4],
) -> __m256i {
    // SAFETY: loads read whole block fields (bounds-checked); the caller
    // enables every feature needed.
    unsafe {
        let s8: &[u8; 16] = bytemuck::cast_ref(&xr.scales);
        let sc16 = _mm256_cvtepi8_epi16(load_u8_128(s8));
        let sc = _mm512_castsi256_si512(sc16);
        let q = if GFNI {
            q6_k_levels_gfni(xr, g6)
        } else {
            q6_k_levels(xr, k6.0, k6.1, k6.2, k6.3)
        };
        let corr = _mm256_madd_epi16(sc16, bsums);
        let mut sumi = _mm512_sub_epi32(
            _mm512_setzero_si512(),
            _mm512_zextsi256_si512(_mm256_slli_epi32::<5>(corr)),
        );
        for j in 0..4 {
            let p = _mm512_maddubs_epi16(q[j], a[j]);
            sumi = _mm512_dpwssds_epi32(sumi, p, _mm512_permutexvar_epi16(idxs[j], sc));
        }
        fold8(sumi)
    }
}

// ---------------------------------------------------------------- Q4_K

/// Two Q4_K rows against one Q8_K row: `kquants::q4_k`'s integer sums in
/// its eight i32 lanes per row (exact, so the same integers), its
/// `d`/`dmin` products, the same 8-lane FMA into `acc` and 4-lane FNMA into
/// `acc_m` per row and block (lane for lane, so the same roundings), and its
/// final sums: each output is the one-row dot bit for bit.
///
/// Shared between the two rows: the activation loads, and the per-block
/// scalar-ish work done two rows per instruction (the f16 `d`/`dmin`
/// conversion, the scale and min unpacking in one 256-bit register, the
/// mins' dot, the `acc_m` FNMA), which is why it outruns the one-row kernel
/// in cache (docs/PERFORMANCE.md).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(crate) fn q4_k_rows2(x0: &[BlockQ4K], x1: &[BlockQ4K], y: &[BlockQ8K]) -> [f32; 2] {
    // SAFETY: this function enables every feature the body needs.
    unsafe { q4_k_rows2_body::<false>(x0, x1, y) }
}

/// Two Q4_K rows against one Q8_K row in the order of ggml's repacked
/// `q4_K_8x8` gemv (`avx2::kquants::q4_k_repacked`, the dot llama.cpp's x86
/// build gives Q4_K matrices of `n_out % 8 == 0`): per row and block the
/// exact i32 `Σ sc·(q·a)` and `Σ m·bsum`, each converted once and fused into
/// its own f32 accumulator with `d·d_a` and `dmin·d_a` (four f32 lanes: row
/// 0's two, row 1's two; lane for lane the scalar FMAs), the result
/// `acc − acc_min`: the same bits as that one-row dot. The integer work is
/// [`q4_k_rows2`]'s.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(crate) fn q4_k_repacked_rows2(x0: &[BlockQ4K], x1: &[BlockQ4K], y: &[BlockQ8K]) -> [f32; 2] {
    // SAFETY: this function enables every feature the body needs.
    unsafe { q4_k_rows2_body::<true>(x0, x1, y) }
}

/// # Safety
/// The caller must have AVX512 F/BW/VL/VNNI, AVX2, FMA and F16C enabled.
#[inline(always)]
unsafe fn q4_k_rows2_body<const REPACKED: bool>(
    x0: &[BlockQ4K],
    x1: &[BlockQ4K],
    y: &[BlockQ8K],
) -> [f32; 2] {
    // SAFETY: loads read whole block fields (bounds-checked); the caller
    // enables every feature needed.
    unsafe {
        let m4 = _mm256_set1_epi8(0xF);
        let lo16 = _mm256_set1_epi32(0xFFFF);
        // f32 lanes of (d0, dmin0, d1, dmin1): dmin0 ×4 | dmin1 ×4.
        let dmin_idx = _mm256_setr_epi32(1, 1, 1, 1, 3, 3, 3, 3);
        let mut acc = [_mm256_setzero_ps(); 2];
        let mut acc_m = _mm256_setzero_ps();
        // REPACKED: (acc0, acc1, acc_min0, acc_min1).
        let mut acc4 = _mm_setzero_ps();
        let mut pairs = [0i32; 16];
        for (b, ((xa, xb), yb)) in x0.iter().zip(x1).zip(y).enumerate() {
            prefetch_rows2(x0, x1, b);
            let head =
                |x: &BlockQ4K| i32::from_le_bytes(bytemuck::bytes_of(x)[..4].try_into().unwrap());
            let dd = _mm_mul_ps(
                _mm_cvtph_ps(_mm_setr_epi32(head(xa), head(xb), 0, 0)),
                _mm_set1_ps(yb.d),
            );
            // Row 0's scale bytes in the low 128-bit lane, row 1's in the high:
            // per lane the eight scales, then the eight mins.
            let u = k4_unpack2(_mm256_inserti128_si256::<1>(
                _mm256_castsi128_si256(k4_scale_bytes(xa)),
                k4_scale_bytes(xb),
            ));
            // ggml's four lanes of the mins' dot per row: lane l is
            // m_2l·(b_4l + b_4l+1) + m_2l+1·(b_4l+2 + b_4l+3) (exact in i32).
            let bs = load_bsums(&yb.bsums);
            let b2 = _mm256_permute4x64_epi64::<0b10_00_10_00>(_mm256_hadd_epi16(bs, bs));
            let mins = _mm256_cvtepu8_epi16(_mm256_castsi256_si128(_mm256_permute4x64_epi64::<
                0b11_01_11_01,
            >(u)));
            let prod = _mm256_madd_epi16(mins, b2);
            if !REPACKED {
                let dmin = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(dd), dmin_idx);
                acc_m = _mm256_fnmadd_ps(dmin, _mm256_cvtepi32_ps(prod), acc_m);
            }
            // i32 lanes 0..4: row 0's (scale 2j, 2j+1) pairs, 8..12 row 1's.
            let v32 = _mm512_cvtepu8_epi16(u);
            // Two 256-bit stores: a dword load forwarded from one 512-bit store
            // stalls the store forwarding and slowed this kernel markedly.
            _mm256_storeu_si256(pairs.as_mut_ptr().cast(), _mm512_castsi512_si256(v32));
            _mm256_storeu_si256(
                pairs[8..].as_mut_ptr().cast(),
                _mm512_extracti64x4_epi64::<1>(v32),
            );
            // Read back through memory: each broadcast below is then a load.
            let pairs = std::hint::black_box(&pairs);
            let mut sumi = [_mm256_setzero_si256(); 2];
            for j in 0..4 {
                let al = load_i8(at(&yb.qs, 64 * j));
                let ah = load_i8(at(&yb.qs, 64 * j + 32));
                for (r, xr) in [xa, xb].into_iter().enumerate() {
                    let q = load_u8(at(&xr.qs, 32 * j));
                    let z = _mm256_setzero_si256();
                    let dl = _mm256_dpbusd_epi32(z, _mm256_and_si256(q, m4), al);
                    // The high nibbles in place: 16 times their dot, so
                    // `<< 12` is `dh << 16`.
                    let dh = _mm256_dpbusd_epi32(z, _mm256_andnot_si256(m4, q), ah);
                    // (dl & 0xFFFF) | dh << 16: the i16 pairs (dl, dh).
                    let m =
                        _mm256_ternarylogic_epi32::<0xEC>(dl, _mm256_slli_epi32::<12>(dh), lo16);
                    // Saturating: see `kquants` (here |lane| ≤ 8·63·2·7680;
                    // the split `pmaddwd` + `paddd` form is slower).
                    let pair = _mm256_set1_epi32(pairs[8 * r + j]);
                    sumi[r] = _mm256_dpwssds_epi32(sumi[r], m, pair);
                }
            }
            if REPACKED {
                // (Σ sumi0, Σ sumi1, Σ prod0, Σ prod1), exact.
                let h = _mm256_hadd_epi32(sumi[0], sumi[1]);
                let h = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256::<1>(h));
                let p = _mm_hadd_epi32(
                    _mm256_castsi256_si128(prod),
                    _mm256_extracti128_si256::<1>(prod),
                );
                let isums = _mm_hadd_epi32(h, p);
                // (d0, d1, dmin0, dmin1) · d_a
                let dd = _mm_permute_ps::<0b11_01_10_00>(dd);
                acc4 = _mm_fmadd_ps(_mm_cvtepi32_ps(isums), dd, acc4);
            } else {
                let d = [
                    _mm256_broadcastss_ps(dd),
                    _mm256_broadcastss_ps(_mm_movehl_ps(dd, dd)),
                ];
                for r in 0..2 {
                    acc[r] = _mm256_fmadd_ps(d[r], _mm256_cvtepi32_ps(sumi[r]), acc[r]);
                }
            }
        }
        if REPACKED {
            let a: [f32; 4] = std::mem::transmute(acc4);
            return [a[0] - a[2], a[1] - a[3]];
        }
        [
            hsum_ps(acc[0]) + hsum128(_mm256_castps256_ps128(acc_m)),
            hsum_ps(acc[1]) + hsum128(_mm256_extractf128_ps::<1>(acc_m)),
        ]
    }
}

// ---------------------------------------------------------------- IQ4_XS

/// Two IQ4_XS rows against one Q8_K row laid out by
/// [`iq4_xs_prepare`](crate::x86::avx512::kquants::iq4_xs_prepare):
/// `kquants::iq4_xs` per output (the same i32 lanes, FMAs and final sum,
/// so the same bits), the activation side read as prepared.
// Same entry shape as q4_k_rows2 / q4_k_repacked_rows2 above (#[target_feature] wrappers
// over one const-generic body); the IQ4_XS body (grid lookup) shares no work with Q4_K's
// scale/min unpacking, so only the wrapper lines repeat.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(crate) fn iq4_xs_rows2(x0: &[BlockIq4Xs], x1: &[BlockIq4Xs], y: &[Iq4Acts]) -> [f32; 2] {
    // SAFETY: this function enables every feature the body needs.
    unsafe { iq4_xs_rows2_body::<false>(x0, x1, y) }
}

/// [`iq4_xs_rows2`] looking the grid up with `vpermb`: the same bits.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c")]
pub(crate) fn iq4_xs_rows2_vbmi(x0: &[BlockIq4Xs], x1: &[BlockIq4Xs], y: &[Iq4Acts]) -> [f32; 2] {
    // SAFETY: this function enables every feature the body needs.
    unsafe { iq4_xs_rows2_body::<true>(x0, x1, y) }
}

/// # Safety
/// The caller must have AVX512 F/BW/VL/VNNI, AVX2, FMA and F16C enabled,
/// and AVX512-VBMI when `VBMI`.
#[inline(always)]
unsafe fn iq4_xs_rows2_body<const VBMI: bool>(
    x0: &[BlockIq4Xs],
    x1: &[BlockIq4Xs],
    y: &[Iq4Acts],
) -> [f32; 2] {
    // SAFETY: the caller enables every feature the helpers need.
    unsafe {
        let c = Iq4Consts::new();
        let mut acc = [_mm256_setzero_ps(); 2];
        for (b, ((xa, xb), ya)) in x0.iter().zip(x1).zip(y).enumerate() {
            prefetch_rows2(x0, x1, b);
            for (r, xr) in [xa, xb].into_iter().enumerate() {
                let sumi = iq4_xs_sumi(&iq4_xs_levels::<VBMI>(xr, &c), &ya.acts, ya.bias);
                acc[r] = _mm256_fmadd_ps(iq4_xs_d(ya.d, xr), _mm256_cvtepi32_ps(sumi), acc[r]);
            }
        }
        std::array::from_fn(|c| iq4_xs_hsum(acc[c]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scalar;
    use crate::x86::avx2::kquants::q4_k_repacked;
    use crate::x86::avx512::kquants::{
        iq4_xs as iq4_xs_plain, iq4_xs_prepare, iq4_xs_vbmi as iq4_xs_vbmi_row,
    };
    use crate::GgmlType;

    fn rnd_stream(mut x: u32) -> impl FnMut() -> f32 {
        move || {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x as f32 / u32::MAX as f32) * 2.0 - 1.0
        }
    }

    /// Two random weight rows of `ty` and one Q8_K activation row, `n = 3·256`.
    fn rows_and_act(ty: GgmlType, rnd: &mut impl FnMut() -> f32) -> ([Vec<u8>; 2], Vec<u8>) {
        let n = 3 * 256;
        let rb = ty.row_bytes(n as u64).unwrap() as usize;
        let mut rows = [vec![0u8; rb], vec![0u8; rb]];
        for r in rows.iter_mut() {
            let w: Vec<f32> = (0..n).map(|_| rnd()).collect();
            scalar::quantize_row(ty, &w, r, None);
        }
        let a: Vec<f32> = (0..n).map(|_| rnd()).collect();
        let mut act = vec![0u8; 3 * std::mem::size_of::<BlockQ8K>()];
        scalar::quantize_row(GgmlType::Q8_K, &a, &mut act, None);
        (rows, act)
    }

    /// Both Q6_K two-row kernels give, for each row, the bits of the
    /// one-row dot.
    #[test]
    fn both_q6_k_two_row_kernels_are_the_one_row_dot() {
        if !(crate::Isa::Avx512.available() && is_x86_feature_detected!("avx512vnni")) {
            return;
        }
        let mut rnd = rnd_stream(0x1234_5679);
        let dot = crate::x86::avx512::kquants::vec_dot_fn(GgmlType::Q6_K).unwrap();
        for _ in 0..8 {
            let (rows, act) = rows_and_act(GgmlType::Q6_K, &mut rnd);
            let n = 3 * 256;
            let want = [dot(n, &rows[0], &act), dot(n, &rows[1], &act)];
            let x0: &[BlockQ6K] = bytemuck::cast_slice(&rows[0]);
            let x1: &[BlockQ6K] = bytemuck::cast_slice(&rows[1]);
            let y: &[BlockQ8K] = bytemuck::cast_slice(&act);
            // SAFETY: AVX-512 with VNNI was detected above.
            let plain = unsafe { q6_k_rows2(x0, x1, y) };
            assert_eq!(plain.map(f32::to_bits), want.map(f32::to_bits));
            if is_x86_feature_detected!("gfni") {
                // SAFETY: and GFNI.
                let gfni = unsafe { q6_k_rows2_gfni(x0, x1, y) };
                assert_eq!(gfni.map(f32::to_bits), want.map(f32::to_bits));
            }
        }
    }

    /// Both Q4_K two-row kernels give, for each row, the bits of their
    /// one-row dot (the plain and the repacked order; random rows, 3 blocks, a few seeds; and rows whose scales and
    /// mins are all 63 against activations of 127 / −128, the widest sums).
    #[test]
    fn both_q4_k_two_row_kernels_are_their_one_row_dots() {
        if !(crate::Isa::Avx512.available() && is_x86_feature_detected!("avx512vnni")) {
            return;
        }
        let n = 3 * 256;
        let mut rnd = rnd_stream(0x0BAD_F00D);
        let dot = crate::x86::avx512::kquants::vec_dot_fn(GgmlType::Q4_K).unwrap();
        let check = |rows: &[Vec<u8>; 2], act: &[u8]| {
            let want = [dot(n, &rows[0], act), dot(n, &rows[1], act)];
            let x0: &[BlockQ4K] = bytemuck::cast_slice(&rows[0]);
            let x1: &[BlockQ4K] = bytemuck::cast_slice(&rows[1]);
            let y: &[BlockQ8K] = bytemuck::cast_slice(act);
            // SAFETY: AVX-512 with VNNI was detected above.
            let got = unsafe { q4_k_rows2(x0, x1, y) };
            assert_eq!(got.map(f32::to_bits), want.map(f32::to_bits));
            // SAFETY: as above (AVX2, FMA, F16C are part of the tier).
            let want = unsafe { [q4_k_repacked(x0, y), q4_k_repacked(x1, y)] };
            // SAFETY: as above.
            let got = unsafe { q4_k_repacked_rows2(x0, x1, y) };
            assert_eq!(
                got.map(f32::to_bits),
                want.map(f32::to_bits),
                "repacked order"
            );
        };
        for _ in 0..8 {
            let (rows, act) = rows_and_act(GgmlType::Q4_K, &mut rnd);
            check(&rows, &act);
        }
        let (mut rows, mut act) = rows_and_act(GgmlType::Q4_K, &mut rnd);
        for (r, row) in rows.iter_mut().enumerate() {
            let x: &mut [BlockQ4K] = bytemuck::cast_slice_mut(row);
            for (b, xb) in x.iter_mut().enumerate() {
                xb.scales = [0xFF; 12];
                xb.qs.fill(if (b + r) % 2 == 0 { 0xFF } else { 0xF0 });
            }
        }
        let y: &mut [BlockQ8K] = bytemuck::cast_slice_mut(&mut act);
        for (b, yb) in y.iter_mut().enumerate() {
            for (i, q) in yb.qs.iter_mut().enumerate() {
                *q = if (i + b) % 3 == 0 { -128 } else { 127 };
            }
            for (k, s) in yb.bsums.iter_mut().enumerate() {
                *s = yb.qs[16 * k..16 * k + 16].iter().map(|&v| v as i16).sum();
            }
        }
        check(&rows, &act);
    }

    /// The IQ4_XS one-row kernels (`pshufb` and, where the CPU has VBMI,
    /// `vpermb` lookups) give the same bits, and so do both two-row kernels
    /// for each of their rows (random blocks: every scale and nibble value).
    #[test]
    fn every_iq4_xs_kernel_gives_the_same_bits() {
        if !(crate::Isa::Avx512.available() && is_x86_feature_detected!("avx512vnni")) {
            return;
        }
        let vbmi = is_x86_feature_detected!("avx512vbmi");
        let mut rnd = rnd_stream(0x7F4A_7C15);
        for _ in 0..8 {
            let (mut rows, act) = rows_and_act(GgmlType::IQ4_XS, &mut rnd);
            // Random scale bits too (the quantiser's are a narrow set).
            for row in rows.iter_mut() {
                for blk in row.chunks_exact_mut(136) {
                    for b in &mut blk[2..8] {
                        *b = (rnd() * 1e4) as i32 as u8;
                    }
                }
            }
            let x0: &[BlockIq4Xs] = bytemuck::cast_slice(&rows[0]);
            let x1: &[BlockIq4Xs] = bytemuck::cast_slice(&rows[1]);
            let y: &[BlockQ8K] = bytemuck::cast_slice(&act);
            // SAFETY: AVX-512 with VNNI was detected above.
            let want = unsafe { [iq4_xs_plain(x0, y), iq4_xs_plain(x1, y)] };
            let mut two = |p: &[Iq4Acts]| {
                // SAFETY: as above.
                let got = unsafe { iq4_xs_rows2(x0, x1, p) };
                assert_eq!(got.map(f32::to_bits), want.map(f32::to_bits));
                if vbmi {
                    // SAFETY: and VBMI.
                    let two = unsafe { iq4_xs_rows2_vbmi(x0, x1, p) };
                    assert_eq!(two.map(f32::to_bits), want.map(f32::to_bits));
                }
            };
            // SAFETY: AVX2 comes with the AVX-512 tier.
            assert!(unsafe { iq4_xs_prepare(y, &mut two) });
            if vbmi {
                // SAFETY: and VBMI.
                let one = unsafe { [iq4_xs_vbmi_row(x0, y), iq4_xs_vbmi_row(x1, y)] };
                assert_eq!(one.map(f32::to_bits), want.map(f32::to_bits));
            }
        }
    }

    /// Both Q3_K two-row kernels give, for each row, the bits of the
    /// one-row dot (random rows, 3 blocks, a few seeds).
    #[test]
    fn both_q3_k_two_row_kernels_are_the_one_row_dot() {
        if !(crate::Isa::Avx512.available() && is_x86_feature_detected!("avx512vnni")) {
            return;
        }
        let n = 3 * 256;
        let mut rnd = rnd_stream(0x2545_F491);
        let dot = lowbit::vec_dot_fn(GgmlType::Q3_K).unwrap();
        for _ in 0..8 {
            let (rows, act) = rows_and_act(GgmlType::Q3_K, &mut rnd);
            let want = [dot(n, &rows[0], &act), dot(n, &rows[1], &act)];
            let x0: &[BlockQ3K] = bytemuck::cast_slice(&rows[0]);
            let x1: &[BlockQ3K] = bytemuck::cast_slice(&rows[1]);
            let y: &[BlockQ8K] = bytemuck::cast_slice(&act);
            // SAFETY: AVX-512 with VNNI was detected above.
            let plain = unsafe { q3_k_rows2(x0, x1, y) };
            assert_eq!(plain.map(f32::to_bits), want.map(f32::to_bits));
            if is_x86_feature_detected!("gfni") {
                // SAFETY: and GFNI.
                let gfni = unsafe { q3_k_rows2_gfni(x0, x1, y) };
                assert_eq!(gfni.map(f32::to_bits), want.map(f32::to_bits));
            }
        }
    }
}
