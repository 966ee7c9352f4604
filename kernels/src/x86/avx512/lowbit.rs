//! AVX-512 dot products of Q2_K and Q3_K with Q8_K activations.
//!
//! 64 weights per 512-bit step: one 32-byte `qs` piece broadcast to both
//! halves and shifted by a different amount in each, so the low half holds
//! one 2-bit plane and the high half the next; the 64 matching activations
//! are contiguous. Levels are unsigned (Q3_K's are biased by +4, the bias
//! taken off each i16 pair by a second `maddubs`), so `maddubs` gives i16
//! pairs and the per-16 sub-block scales (one per 128-bit lane, `vpermw`)
//! are applied with `dpwssd` (VNNI) or `madd` + `add` (BW).
//!
//! Bit for bit ggml's x86 dots (AVX2 code even in llama.cpp's AVX-512
//! build): the sixteen i32 lanes, folded to eight (lane l + lane l+8), are
//! exactly ggml's eight, and the f32 steps are its own — one 8-lane FMA per
//! super-block (Q2_K: the mins' FMA first, into the same accumulator), one
//! horizontal sum per row.
//!
//! Entry points are safe fns over `#[target_feature]` bodies; the kernel
//! table asks this tier only after `Isa::Avx512.available()` (F, BW, VL plus
//! AVX2, FMA, F16C), and the VNNI variants are handed out only when the CPU
//! reports AVX512-VNNI.

use std::arch::x86_64::*;

use crate::cpu::Isa;
use crate::scalar::q2_k::BlockQ2K;
use crate::scalar::q3_k::BlockQ3K;
use crate::scalar::q8_k::rows;
use crate::scalar::q8_k::BlockQ8K;
use crate::sig::VecDotFn;
use crate::x86::avx2::kquants::{f16_to_f32, hsum_ps, load_bsums, load_u8, load_u8_128};
use crate::x86::avx512::kquants::fold8;
use crate::GgmlType;

/// This family's dot product for `ty` (the fastest variant the host runs).
// Same shape as legacy.rs::vec_dot_variants in this tier and
// aarch64/neon/lowbit.rs::vec_dot_fn/vec_dot_variants (and neon/legacy.rs) in NEON: each family
// file lists its own types and kernels, the tiers differ in detection (VNNI vs dotprod) and variant
// names, and only one tier compiles per target.
pub fn vec_dot_fn(ty: GgmlType) -> Option<VecDotFn> {
    vec_dot_variants(ty).last().map(|(_, f)| *f)
}

/// Every Q2_K / Q3_K dot of this tier the host can run, named (`"bw"`,
/// `"vnni"`), fastest last: `vec_dot_fn` takes the last, tests check them all.
pub fn vec_dot_variants(ty: GgmlType) -> Vec<(&'static str, VecDotFn)> {
    if !Isa::Avx512.available() {
        return Vec::new();
    }
    match ty {
        GgmlType::Q2_K => super::variant_pair(vec_dot_q2_k, vec_dot_q2_k_vnni),
        GgmlType::Q3_K => super::variant_pair(vec_dot_q3_k, vec_dot_q3_k_vnni),
        _ => Vec::new(),
    }
}

macro_rules! entry {
    ($name:ident, $body:ident, $vnni:literal, $features:literal, $block:ty, $kernel:ident) => {
        #[target_feature(enable = $features)]
        fn $body(x: &[$block], y: &[BlockQ8K]) -> f32 {
            // SAFETY: this function enables every feature the kernel needs.
            unsafe { $kernel::<$vnni>(x, y) }
        }

        fn $name(n: usize, w: &[u8], act: &[u8]) -> f32 {
            let (x, y) = rows::<$block>(n, w, act);
            // SAFETY: `vec_dot_variants` hands this out only when
            // `Isa::Avx512.available()` (AVX512 F/BW/VL, AVX2, FMA, F16C) and,
            // for the `_vnni` variants, AVX512-VNNI is detected.
            unsafe { $body(x, y) }
        }
    };
}

entry!(
    vec_dot_q2_k,
    q2_k_bw,
    false,
    "avx512f,avx512bw,avx512vl,avx2,fma,f16c",
    BlockQ2K,
    q2_k
);
entry!(
    vec_dot_q2_k_vnni,
    q2_k_vnni,
    true,
    "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c",
    BlockQ2K,
    q2_k
);
entry!(
    vec_dot_q3_k,
    q3_k_bw,
    false,
    "avx512f,avx512bw,avx512vl,avx2,fma,f16c",
    BlockQ3K,
    q3_k
);
entry!(
    vec_dot_q3_k_vnni,
    q3_k_vnni,
    true,
    "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c",
    BlockQ3K,
    q3_k
);

/// 64 activation bytes starting at `off`.
///
/// # Safety
/// The caller must have AVX-512F enabled.
#[inline(always)]
pub(crate) unsafe fn load64(a: &[i8; 256], off: usize) -> __m512i {
    let s: &[i8; 64] = a[off..off + 64].try_into().unwrap();
    // SAFETY: `s` is 64 readable bytes and `loadu` has no alignment requirement.
    unsafe { _mm512_loadu_si512(s.as_ptr().cast()) }
}

/// `a` in every i16 lane of the low 256 bits, `b` in the high 256 bits.
///
/// # Safety
/// The caller must have AVX-512F and AVX enabled.
#[inline(always)]
pub(crate) unsafe fn halves_i16(a: i16, b: i16) -> __m512i {
    // SAFETY: register-only intrinsics; the features are enabled by the caller.
    unsafe {
        _mm512_inserti64x4::<1>(
            _mm512_castsi256_si512(_mm256_set1_epi16(a)),
            _mm256_set1_epi16(b),
        )
    }
}

/// i16 lane indices giving 128-bit lane L the i16 at `base + L`.
///
/// # Safety
/// The caller must have AVX-512F enabled.
#[inline(always)]
pub(crate) unsafe fn lane_index(base: i16) -> __m512i {
    // SAFETY: register-only intrinsics; AVX-512F is enabled by the caller.
    unsafe {
        let i = |l: i16| (base + l) as i32 | (((base + l) as i32) << 16);
        _mm512_setr_epi32(
            i(0),
            i(0),
            i(0),
            i(0),
            i(1),
            i(1),
            i(1),
            i(1),
            i(2),
            i(2),
            i(2),
            i(2),
            i(3),
            i(3),
            i(3),
            i(3),
        )
    }
}

/// `acc + Σ pairs p·s` into i32 lanes (the saturating `dpwssds` never
/// saturates here; see `kquants`).
///
/// # Safety
/// The caller must have AVX-512BW enabled, and AVX512-VNNI when `VNNI`.
#[inline(always)]
pub(crate) unsafe fn dot_scale<const VNNI: bool>(acc: __m512i, p: __m512i, s: __m512i) -> __m512i {
    // SAFETY: register-only intrinsics; the features are enabled by the caller.
    unsafe {
        if VNNI {
            _mm512_dpwssds_epi32(acc, p, s)
        } else {
            _mm512_add_epi32(acc, _mm512_madd_epi16(p, s))
        }
    }
}

/// Q2_K: `dall·Σ_j (sc_j & 15)·(q·a)_j − dmin·Σ_j (sc_j >> 4)·bsum_j`.
///
/// # Safety
/// The caller must have AVX512 F/BW/VL, AVX2, FMA and F16C enabled, and
/// AVX512-VNNI when `VNNI`.
#[inline(always)]
unsafe fn q2_k<const VNNI: bool>(x: &[BlockQ2K], y: &[BlockQ8K]) -> f32 {
    // SAFETY: loads read whole block fields (bounds-checked); the features are
    // enabled by the caller.
    unsafe {
        let m3 = _mm512_set1_epi8(3);
        let m4 = _mm_set1_epi8(0xF);
        let shifts = [halves_i16(0, 2), halves_i16(4, 6)];
        let idx = [lane_index(0), lane_index(4), lane_index(8), lane_index(12)];
        let mut acc = _mm256_setzero_ps();
        for (xb, yb) in x.iter().zip(y) {
            let dall = yb.d * f16_to_f32(xb.d);
            let dmin = -yb.d * f16_to_f32(xb.dmin);
            let packed = load_u8_128(&xb.scales);
            let mv = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16::<4>(packed), m4));
            let summs = _mm256_madd_epi16(mv, load_bsums(&yb.bsums));
            acc = _mm256_fmadd_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(summs), acc);
            let sc = _mm512_castsi256_si512(_mm256_cvtepu8_epi16(_mm_and_si128(packed, m4)));
            let mut sumi = _mm512_setzero_si512();
            for h in 0..2 {
                let q2 =
                    _mm512_broadcast_i64x4(load_u8(xb.qs[32 * h..32 * h + 32].try_into().unwrap()));
                for p in 0..2 {
                    let q = _mm512_and_si512(_mm512_srlv_epi16(q2, shifts[p]), m3);
                    let prod = _mm512_maddubs_epi16(q, load64(&yb.qs, 128 * h + 64 * p));
                    let s = _mm512_permutexvar_epi16(idx[2 * h + p], sc);
                    sumi = dot_scale::<VNNI>(sumi, prod, s);
                }
            }
            acc = _mm256_fmadd_ps(_mm256_set1_ps(dall), _mm256_cvtepi32_ps(fold8(sumi)), acc);
        }
        hsum_ps(acc)
    }
}

/// Q3_K's sixteen 6-bit scales, unbiased (`s − 32`), as i8, in vector
/// registers: dwords 0..4 are ggml's `(a0 | a1 | a0 >> 4 | a1 >> 4) & 0x0F`
/// with bits 4-5 from `tmp >> 0 | 2 | 4 | 6`.
///
/// # Safety
/// The caller must have AVX2 enabled.
#[inline(always)]
pub(crate) unsafe fn q3_k_scales(s: &[u8; 12]) -> __m128i {
    let a: &[u8; 8] = s[..8].try_into().unwrap();
    let t = i32::from_le_bytes([s[8], s[9], s[10], s[11]]);
    // SAFETY: `a` is 8 readable bytes (`loadl` has no alignment
    // requirement); the rest are register-only; AVX2 is enabled by the caller.
    unsafe {
        let v = _mm_unpacklo_epi64(_mm_loadl_epi64(a.as_ptr().cast()), _mm_cvtsi32_si128(t));
        let lo = _mm_srlv_epi32(
            _mm_shuffle_epi32::<0b01_00_01_00>(v),
            _mm_setr_epi32(0, 0, 4, 4),
        );
        let hi = _mm_srlv_epi32(
            _mm_shuffle_epi32::<0b10_10_10_10>(v),
            _mm_setr_epi32(0, 2, 4, 6),
        );
        let lo = _mm_and_si128(lo, _mm_set1_epi8(0xF));
        let hi = _mm_slli_epi32::<4>(_mm_and_si128(hi, _mm_set1_epi8(3)));
        _mm_sub_epi8(_mm_or_si128(lo, hi), _mm_set1_epi8(32))
    }
}

/// A `gf2p8affineqb` matrix moving input bits `s`, `s + 1` of every byte to
/// bits 0, 1 and clearing the rest (output bit i is the parity of matrix byte
/// 7 − i AND the input byte).
pub(crate) const fn gf_low_pair(s: u32) -> i64 {
    ((1u64 << s) << 56 | (1u64 << (s + 1)) << 48) as i64
}

/// A `gf2p8affineqb` matrix moving input bit `b` of every byte to bit 2 and
/// clearing the rest.
pub(crate) const fn gf_bit2(b: u32) -> i64 {
    ((1u64 << b) << 40) as i64
}

/// The constants [`q3_k_levels`] unpacks with: shifts and masks for the
/// plain form; affine matrices for the GFNI form (`gf2p8affineqb`: output bit
/// i is the parity of matrix byte 7 − i AND the input byte), one per piece
/// moving a 2-bit plane of `qs` to bits 0-1 and one moving its `hmask` bit to
/// bit 2, each clearing every other bit.
#[derive(Clone, Copy)]
pub(crate) struct Q3Unpack {
    /// 16-bit shifts 0 | 2 and 4 | 6 by 256-bit half: a 2-bit plane to bits 0-1.
    shifts: [__m512i; 2],
    /// Bytes `1 << bit` | `1 << (bit + 1)` by 256-bit half: piece j's hmask bit.
    bits: [__m512i; 4],
    m3: __m512i,
    four: __m512i,
    low: [__m512i; 2],
    high: [__m512i; 4],
}

impl Q3Unpack {
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx2")]
    pub(crate) fn new() -> Self {
        let bit = |b: u8| {
            _mm512_inserti64x4::<1>(
                _mm512_castsi256_si512(_mm256_set1_epi8((1u8 << b) as i8)),
                _mm256_set1_epi8((1u8 << (b + 1)) as i8),
            )
        };
        let halves = |lo: i64, hi: i64| {
            _mm512_inserti64x4::<1>(
                _mm512_castsi256_si512(_mm256_set1_epi64x(lo)),
                _mm256_set1_epi64x(hi),
            )
        };
        let (low, high) = (gf_low_pair, gf_bit2);
        // SAFETY: register-only; the features are enabled here.
        let shifts = unsafe { [halves_i16(0, 2), halves_i16(4, 6)] };
        Self {
            shifts,
            bits: [bit(0), bit(2), bit(4), bit(6)],
            m3: _mm512_set1_epi8(3),
            four: _mm512_set1_epi8(4),
            low: [halves(low(0), low(2)), halves(low(4), low(6))],
            high: [0, 2, 4, 6].map(|b| halves(high(b), high(b + 1))),
        }
    }
}

/// The 256 levels + 4 (0..=7) of a Q3_K block in element order: piece
/// j = 2h + p holds elements 64j..64j+64. Plain: the hmask bit becomes a byte
/// mask (`vptestmb`) that adds 4 where it is set. `GFNI`: three ops a piece
/// (two affine transforms and an OR) where the plain form takes five. The
/// same bytes either way.
///
/// # Safety
/// The caller must have AVX-512F/BW and AVX2 enabled, and GFNI when `GFNI`.
#[inline(always)]
pub(crate) unsafe fn q3_k_levels<const GFNI: bool>(xb: &BlockQ3K, k: &Q3Unpack) -> [__m512i; 4] {
    // SAFETY: loads read whole block fields (bounds-checked); the features
    // are enabled by the caller.
    unsafe {
        let hm = _mm512_broadcast_i64x4(load_u8(&xb.hmask));
        let mut q = [_mm512_setzero_si512(); 4];
        for h in 0..2 {
            let q2 =
                _mm512_broadcast_i64x4(load_u8(xb.qs[32 * h..32 * h + 32].try_into().unwrap()));
            for p in 0..2 {
                let j = 2 * h + p;
                q[j] = if GFNI {
                    let low = _mm512_gf2p8affine_epi64_epi8::<0>(q2, k.low[p]);
                    let high = _mm512_gf2p8affine_epi64_epi8::<0>(hm, k.high[j]);
                    _mm512_or_si512(low, high)
                } else {
                    let low = _mm512_and_si512(_mm512_srlv_epi16(q2, k.shifts[p]), k.m3);
                    let set = _mm512_test_epi8_mask(hm, k.bits[j]);
                    _mm512_mask_add_epi8(low, set, low, k.four)
                };
            }
        }
        q
    }
}

/// Q3_K: `d·Σ_j s_j·Σ ((q + 4) − 4)·a` with `q + 4 = low | high << 2`.
///
/// # Safety
/// The caller must have AVX512 F/BW/VL, AVX2, FMA and F16C enabled, and
/// AVX512-VNNI when `VNNI`.
#[inline(always)]
unsafe fn q3_k<const VNNI: bool>(x: &[BlockQ3K], y: &[BlockQ8K]) -> f32 {
    // SAFETY: loads read whole block fields (bounds-checked); the features are
    // enabled by the caller.
    unsafe {
        let k3 = Q3Unpack::new();
        let idx = [lane_index(0), lane_index(4), lane_index(8), lane_index(12)];
        let four = _mm512_set1_epi8(4);
        let mut acc = _mm256_setzero_ps();
        for (xb, yb) in x.iter().zip(y) {
            let d = yb.d * f16_to_f32(xb.d);
            let sc16 = _mm256_cvtepi8_epi16(q3_k_scales(&xb.scales));
            let mut sumi = _mm512_setzero_si512();
            let sc = _mm512_castsi256_si512(sc16);
            let levels = q3_k_levels::<false>(xb, &k3);
            for (j, &q) in levels.iter().enumerate() {
                // (level + 4)·a − 4·a in i16 pairs: ggml's per-lane
                // values (it subtracts the bias per element, not per
                // sub-block, so each i32 lane equals its lane exactly).
                let a = load64(&yb.qs, 64 * j);
                let prod =
                    _mm512_sub_epi16(_mm512_maddubs_epi16(q, a), _mm512_maddubs_epi16(four, a));
                let s = _mm512_permutexvar_epi16(idx[j], sc);
                sumi = dot_scale::<VNNI>(sumi, prod, s);
            }
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(fold8(sumi)), acc);
        }
        hsum_ps(acc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scalar::q3_k::unpack_scales;

    #[test]
    fn the_vector_q3_k_scale_unpack_is_the_scalar_one() {
        if !is_x86_feature_detected!("avx2") {
            return;
        }
        // Every byte value in every position, plus patterned words.
        let mut cases: Vec<[u8; 12]> = (0..12 * 256)
            .map(|i| {
                let mut s = [0x5Au8; 12];
                s[i / 256] = (i % 256) as u8;
                s
            })
            .collect();
        let mut x = 0x9E37_79B9u32;
        for _ in 0..1000 {
            cases.push(std::array::from_fn(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            }));
        }
        for s in cases {
            // SAFETY: AVX2 was detected above.
            let got: [i8; 16] = unsafe { std::mem::transmute(q3_k_scales(&s)) };
            assert_eq!(got, unpack_scales(&s), "scales {s:?}");
        }
    }
}
