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
//! (Q6_K's was no faster in cache; from DRAM, with the driver pairing row i
//! with row i + n/2, decode `-t 1` gained 4–9 %.)

use std::arch::x86_64::*;

use crate::scalar::q3_k::BlockQ3K;
use crate::scalar::q5_k::BlockQ5K;
use crate::scalar::q6_k::BlockQ6K;
use crate::scalar::q8_k::BlockQ8K;
use crate::x86::avx2::kquants::{
    at, f16_to_f32, hsum_ps, k4_scales_mins, load_bsums, load_u8, load_u8_128, mins_dot_bsums,
};
use crate::x86::avx512::kquants::{
    at64, bcast_pair, fold8, halves_i16, hsum_i32_4, load64, q6_index, q6_k_levels,
    q6_k_levels_gfni, Q6Affine,
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
/// the same integers, so the same bits, in fewer ops (in cache 12.5 ->
/// 13.7 GB/s for the 512 x 2048 expert shape).
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
                sumi = _mm512_dpwssd_epi32(sumi, p, s[j]);
            }
            acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(fold8(sumi)), acc[c]);
        }
    }
    std::array::from_fn(|c| hsum_ps(acc[c]) + summs[c])
}

/// Two Q5_K rows against one Q8_K row: `kquants::q5_k` per output, each row
/// its own accumulator and `summs` fed as the one-row kernel feeds its own
/// (so each output is that kernel's bits); the activation loads are shared.
// `j` indexes `a` and builds the shift and scale indices (as `q5_k_cols`).
#[allow(clippy::needless_range_loop)]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(crate) fn q5_k_rows2(x0: &[BlockQ5K], x1: &[BlockQ5K], y: &[BlockQ8K]) -> [f32; 2] {
    let m4 = _mm512_set1_epi8(0xF);
    let one = _mm512_set1_epi8(1);
    let nib_shift = halves_i16(0, 4);
    let mut acc = [_mm256_setzero_ps(); 2];
    let mut summs = [0f32; 2];
    for (b, ((xa, xb), yb)) in x0.iter().zip(x1).zip(y).enumerate() {
        prefetch_rows2(x0, x1, b);
        let a: [__m512i; 4] = std::array::from_fn(|j| load64(at64(&yb.qs, 64 * j)));
        for (r, xr) in [xa, xb].into_iter().enumerate() {
            let (xd, xdmin) = (f16_to_f32(xr.d), f16_to_f32(xr.dmin));
            let (sc, mins) = k4_scales_mins(&xr.scales);
            let sc = _mm512_broadcast_i32x4(_mm256_castsi256_si128(sc));
            let qh = _mm512_broadcast_i64x4(load_u8(&xr.qh));
            let d = yb.d * xd;
            let dmin = -yb.d * xdmin;
            let prod = mins_dot_bsums(mins, &yb.bsums);
            summs[r] = dmin.mul_add(hsum_i32_4(prod) as f32, summs[r]);
            let mut sumi = _mm512_setzero_si512();
            for j in 0..4 {
                let v = _mm512_broadcast_i64x4(load_u8(at(&xr.qs, 32 * j)));
                let v = _mm512_and_si512(_mm512_srlv_epi16(v, nib_shift), m4);
                let hb = _mm512_srlv_epi16(qh, halves_i16(2 * j as i16, 2 * j as i16 + 1));
                let hb = _mm512_slli_epi16::<4>(_mm512_and_si512(hb, one));
                let q = _mm512_or_si512(v, hb);
                let p = _mm512_maddubs_epi16(q, a[j]);
                sumi = _mm512_dpwssd_epi32(sumi, p, bcast_pair(sc, 2 * j, 2 * j + 1));
            }
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(fold8(sumi)), acc[r]);
        }
    }
    [hsum_ps(acc[0]) + summs[0], hsum_ps(acc[1]) + summs[1]]
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
                sumi = _mm512_dpwssd_epi32(sumi, p, s[j]);
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
    unsafe { q6_k_rows2_body::<false>(x0, x1, y) }
}

/// [`q6_k_rows2`] unpacking levels with GFNI ([`q6_k_levels_gfni`]): the
/// same integers, so the same bits.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c,gfni")]
pub(crate) fn q6_k_rows2_gfni(x0: &[BlockQ6K], x1: &[BlockQ6K], y: &[BlockQ8K]) -> [f32; 2] {
    // SAFETY: this function enables every feature the body needs.
    unsafe { q6_k_rows2_body::<true>(x0, x1, y) }
}

/// # Safety
/// The caller must have AVX512 F/BW/VL/VNNI, AVX2, FMA and F16C enabled,
/// and GFNI when `GFNI`.
#[inline(always)]
unsafe fn q6_k_rows2_body<const GFNI: bool>(
    x0: &[BlockQ6K],
    x1: &[BlockQ6K],
    y: &[BlockQ8K],
) -> [f32; 2] {
    // SAFETY: loads read whole block fields (bounds-checked); the caller
    // enables every feature needed.
    unsafe {
        let k6 = (
            _mm512_set1_epi8(0xF),
            _mm512_set1_epi8(3),
            halves_i16(0, 2),
            halves_i16(4, 6),
        );
        let g6 = Q6Affine::new();
        let idxs = [q6_index(0), q6_index(4), q6_index(8), q6_index(12)];
        let (mut acc0, mut acc1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        for (b, ((xa, xb), yb)) in x0.iter().zip(x1).zip(y).enumerate() {
            prefetch_rows2(x0, x1, b);
            let a: [__m512i; 4] = std::array::from_fn(|j| load64(at64(&yb.qs, 64 * j)));
            let bsums = load_bsums(&yb.bsums);
            let d0 = yb.d * f16_to_f32(xa.d);
            let d1 = yb.d * f16_to_f32(xb.d);
            let s0 = q6_k_row_block::<GFNI>(xa, &a, bsums, &k6, &g6, &idxs);
            let s1 = q6_k_row_block::<GFNI>(xb, &a, bsums, &k6, &g6, &idxs);
            acc0 = _mm256_fmadd_ps(_mm256_set1_ps(d0), _mm256_cvtepi32_ps(s0), acc0);
            acc1 = _mm256_fmadd_ps(_mm256_set1_ps(d1), _mm256_cvtepi32_ps(s1), acc1);
        }
        [hsum_ps(acc0), hsum_ps(acc1)]
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
            sumi = _mm512_dpwssd_epi32(sumi, p, _mm512_permutexvar_epi16(idxs[j], sc));
        }
        fold8(sumi)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scalar;
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
