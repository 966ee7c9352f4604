//! AVX-512 (VNNI) dot products of Q4_K, Q5_K, Q6_K and IQ4_XS with Q8_K
//! activations. Q2_K, Q3_K and the Q8_K quantiser use the AVX2 kernels.
//!
//! IQ4_XS uses 256-bit VNNI (AVX512-VL): its grid looked up biased by +128
//! (unsigned) and `dpbusd` (no i16 saturation). With VBMI, one sub-block per
//! step (`vpermb` lookup in activation order, one `mullo` by the broadcast
//! scale); without, two sub-blocks per step, the partial dots folded into one
//! i32 per sub-block by `hadd` and one `mullo` per super-block. Either way
//! the bias comes off through the activation `bsums`. (A 512-bit form
//! measured slower on the Zen 4 this was tuned on, whose 512-bit ops are
//! double-pumped.)
//!
//! Q4_K uses 256-bit VNNI too: `dpbusd` of the nibbles, two sub-blocks'
//! partial sums merged into i16 pairs and scaled by one `dpwssd` against a
//! broadcast scale pair, the scales and mins unpacked with vector ops (see
//! [`q4_k`]); 1.25× the 512-bit `maddubs` form on Zen 4, where shuffles (the
//! per-step scale broadcasts) compete with the multipliers.
//!
//! 64 weights per 512-bit step for Q5_K/Q6_K: levels are unsigned, so
//! `maddubs` (to i16 pairs) then `dpwssd` applies the sub-block scales and
//! accumulates in one instruction.
//!
//! Q4_K, Q5_K and Q6_K are bit for bit ggml's x86 dots (AVX2 code even in
//! llama.cpp's AVX-512 build): the i32 lanes, folded to eight where a step is
//! 512 bits wide (lane l + lane l+8), are exactly ggml's eight; the f32 steps
//! are its own (one 8-lane FMA per super-block, the mins as ggml sums them,
//! one horizontal sum per row).
//!
//! Every scale step uses the saturating `dpwssds`, in this module and in
//! `gemm`, `gemm_kq` and `lowbit`: no sum in these kernels comes near
//! 2^31 (the widest, Q6_K's, stays under 2^25: 8 products of at most
//! 2·63·128 by 128 plus 32·2·128·2048), so it gives the wrapping `dpwssd`'s
//! integers; LLVM splits the plain intrinsic into `pmaddwd` + `paddd`, which
//! measurably slows the Q3_K and Q6_K mat-vecs and full-size decoding
//! (docs/PERFORMANCE.md).
//!
//! Entry points are safe fns over `#[target_feature]` bodies; `vec_dot_fn`
//! hands them out only when the CPU also reports AVX512-VNNI, and the kernel
//! table only asks this tier after `Isa::Avx512.available()` (F, BW, VL plus
//! the AVX2 tier's AVX2, FMA, F16C).

use std::arch::x86_64::*;

use crate::scalar::iq4_grid::KVALUES_IQ4NL;
use crate::scalar::iq4_xs::BlockIq4Xs;
use crate::scalar::q4_k::BlockQ4K;
use crate::scalar::q5_k::BlockQ5K;
use crate::scalar::q6_k::BlockQ6K;
use crate::scalar::q8_k::rows;
use crate::scalar::q8_k::BlockQ8K;
use crate::sig::{QuantizeFn, VecDotFn};
use crate::x86::avx2::kquants::{
    at, f16_to_f32, hsum_ps, k4_scales_mins, load_bsums, load_halves, load_i8, load_u8,
    load_u8_128, mins_dot_bsums,
};
use crate::GgmlType;

pub fn vec_dot_fn(ty: GgmlType) -> Option<VecDotFn> {
    if !is_x86_feature_detected!("avx512vnni") {
        return None;
    }
    match ty {
        GgmlType::Q4_K => Some(vec_dot_q4_k),
        GgmlType::Q5_K => Some(vec_dot_q5_k),
        GgmlType::Q6_K => Some(vec_dot_q6_k),
        GgmlType::IQ4_XS if is_x86_feature_detected!("avx512vbmi") => Some(vec_dot_iq4_xs_vbmi),
        GgmlType::IQ4_XS => Some(vec_dot_iq4_xs),
        _ => None,
    }
}

pub fn quantize_fn(_act_ty: GgmlType) -> Option<QuantizeFn> {
    None
}

// Same macro as aarch64/neon/kquants.rs::safe_entry: each tier states its own SAFETY
// argument (what vec_dot_fn detected), and only one tier compiles per target.
macro_rules! safe_entry {
    ($name:ident, $block:ty, $body:ident) => {
        fn $name(n: usize, w: &[u8], act: &[u8]) -> f32 {
            let (x, y) = rows::<$block>(n, w, act);
            // SAFETY: `vec_dot_fn` hands this out only after detecting
            // AVX512-VNNI, and the kernel table consults it only for the
            // AVX-512 tier, built only when `Isa::Avx512.available()` confirmed
            // AVX512 F/BW/VL, AVX2, FMA and F16C.
            unsafe { $body(x, y) }
        }
    };
}

safe_entry!(vec_dot_q4_k, BlockQ4K, q4_k);
safe_entry!(vec_dot_q5_k, BlockQ5K, q5_k);
safe_entry!(vec_dot_q6_k, BlockQ6K, q6_k);
safe_entry!(vec_dot_iq4_xs, BlockIq4Xs, iq4_xs);

fn vec_dot_iq4_xs_vbmi(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let (x, y) = rows::<BlockIq4Xs>(n, w, act);
    // SAFETY: handed out by `vec_dot_fn` only after detecting AVX512-VBMI as
    // well as AVX512-VNNI; the rest as for `safe_entry!`.
    unsafe { iq4_xs_vbmi(x, y) }
}

/// 64 bytes starting at `off` of a block field.
#[inline(always)]
pub(crate) fn at64<T, const N: usize>(a: &[T; N], off: usize) -> &[T; 64] {
    a[off..off + 64].try_into().unwrap()
}

#[inline]
#[target_feature(enable = "avx512f")]
pub(crate) fn load64<T: bytemuck::Pod>(b: &[T; 64]) -> __m512i {
    // SAFETY: `b` is 64 readable bytes (T is a byte type here) and `loadu`
    // has no alignment requirement.
    unsafe { _mm512_loadu_si512(b.as_ptr().cast()) }
}

/// `a` in every i16 lane of the low 256 bits, `b` in the high 256 bits.
#[inline]
#[target_feature(enable = "avx512f,avx2")]
pub(crate) fn halves_i16(a: i16, b: i16) -> __m512i {
    _mm512_inserti64x4::<1>(
        _mm512_castsi256_si512(_mm256_set1_epi16(a)),
        _mm256_set1_epi16(b),
    )
}

/// Broadcasts i16 lane `a` of each 128-bit lane to the low 256 bits and lane
/// `b` to the high 256 bits (`v` holds the same eight i16 in every lane).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx2")]
pub(crate) fn bcast_pair(v: __m512i, a: usize, b: usize) -> __m512i {
    let sel = |j: usize| (2 * j as i16) | ((2 * j as i16 + 1) << 8);
    _mm512_shuffle_epi8(v, halves_i16(sel(a), sel(b)))
}

/// ggml's eight i32 lanes from our sixteen: lane l + lane l+8 (a 512-bit
/// step covers two of ggml's 256-bit steps, which add into the same lanes).
#[inline]
#[target_feature(enable = "avx512f,avx2")]
pub(crate) fn fold8(v: __m512i) -> __m256i {
    _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64::<1>(v))
}

/// Sum of the four i32 lanes (exact).
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn hsum_i32_4(v: __m128i) -> i32 {
    let s = _mm_add_epi32(v, _mm_unpackhi_epi64(v, v));
    _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32::<1>(s)))
}

/// Sum of the four f32 lanes as ggml's `acc_m` reduction: (0+2) + (1+3).
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn hsum128(v: __m128) -> f32 {
    let s = _mm_add_ps(v, _mm_movehl_ps(v, v));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
}

/// Per 128-bit lane, the sums of the four i32 lanes of `d[0]`, `d[1]`,
/// `d[2]`, `d[3]` (exact), by unpacks and adds: the integers of three
/// `hadd`s. On Zen 4 `vphaddd` issues at one per two cycles, an unpack at
/// three per cycle, so this form is cheaper. (Written as `shufps` pairs and
/// adds, LLVM turns it back into `vphaddd`; it leaves this form alone.)
#[inline(always)]
pub(crate) fn fold4_i32(d: [__m256i; 4]) -> __m256i {
    // SAFETY: register-only AVX2 intrinsics; every caller enables AVX2.
    unsafe {
        // [a0+a2, b0+b2, a1+a3, b1+b3] per lane.
        let t01 = _mm256_add_epi32(
            _mm256_unpacklo_epi32(d[0], d[1]),
            _mm256_unpackhi_epi32(d[0], d[1]),
        );
        let t23 = _mm256_add_epi32(
            _mm256_unpacklo_epi32(d[2], d[3]),
            _mm256_unpackhi_epi32(d[2], d[3]),
        );
        _mm256_add_epi32(
            _mm256_unpacklo_epi64(t01, t23),
            _mm256_unpackhi_epi64(t01, t23),
        )
    }
}

// ---------------------------------------------------------------- Q4_K / Q5_K

/// Q4_K/Q5_K's twelve packed scale bytes (the first twelve of `s`) as
/// sixteen u8: the eight 6-bit scales, then the eight 6-bit mins — ggml's
/// 32-bit mask arithmetic done on all four words at once.
#[inline]
#[target_feature(enable = "avx512f,avx512vl,avx2")]
pub(crate) fn k4_unpack(s: __m128i) -> __m128i {
    _mm256_castsi256_si128(k4_unpack2(_mm256_castsi128_si256(s)))
}

/// [`k4_unpack`] of two blocks' scale bytes at once, one per 128-bit lane.
#[inline]
#[target_feature(enable = "avx512f,avx512vl,avx2")]
pub(crate) fn k4_unpack2(s: __m256i) -> __m256i {
    // Low parts: sc0..3 = s[0..4] & 63, sc4..7 = s[8..12] & 15,
    // m0..3 = s[4..8] & 63, m4..7 = s[8..12] >> 4.
    let lo = _mm256_shuffle_epi8(
        s,
        _mm256_setr_epi8(
            0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11, //
            0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11,
        ),
    );
    let lo = _mm256_srlv_epi32(lo, _mm256_setr_epi32(0, 0, 0, 4, 0, 0, 0, 4));
    // High parts of sc4..7 and m4..7: bits 6..7 of s[0..4] and s[4..8], to bits 4..5.
    let hi = _mm256_shuffle_epi8(
        s,
        _mm256_setr_epi8(
            -1, -1, -1, -1, 0, 1, 2, 3, -1, -1, -1, -1, 4, 5, 6, 7, //
            -1, -1, -1, -1, 0, 1, 2, 3, -1, -1, -1, -1, 4, 5, 6, 7,
        ),
    );
    let hi = _mm256_and_si256(_mm256_srli_epi16::<2>(hi), _mm256_set1_epi8(0x30));
    let keep = _mm256_setr_epi32(
        0x3f3f_3f3f,
        0x0f0f_0f0f,
        0x3f3f_3f3f,
        0x0f0f_0f0f,
        0x3f3f_3f3f,
        0x0f0f_0f0f,
        0x3f3f_3f3f,
        0x0f0f_0f0f,
    );
    // (lo & keep) | hi
    _mm256_ternarylogic_epi32::<0xEA>(lo, keep, hi)
}

/// A Q4_K block's `d` and `dmin` (its first four bytes) times the
/// activation scale, each in every lane.
#[inline]
#[target_feature(enable = "avx2,f16c")]
fn k4_d_dmin(head: &[u8; 4], yd: f32) -> (__m256, __m256) {
    let h = _mm_cvtsi32_si128(i32::from_le_bytes(*head));
    let dd = _mm_mul_ps(_mm_cvtph_ps(h), _mm_set1_ps(yd));
    (
        _mm256_broadcastss_ps(dd),
        _mm256_broadcastss_ps(_mm_movehdup_ps(dd)),
    )
}

/// `acc_m − dmin·prod` with ggml's four i32 lanes of the mins' dot (lane k:
/// `Σ_{j=2k,2k+1} mins[j]·(bsums[2j] + bsums[2j+1])`, see
/// `mins_dot_bsums`); `v16` holds the scales in i16 lanes 0..8 and the mins
/// in lanes 8..16.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma")]
pub(crate) fn k4_mins(acc_m: __m128, dmin: __m128, v16: __m256i, bsums: &[i16; 16]) -> __m128 {
    let idx = _mm256_setr_epi16(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15);
    let mins = _mm256_permutexvar_epi16(idx, v16);
    let prod8 = _mm256_madd_epi16(mins, load_bsums(bsums));
    let prod = _mm_hadd_epi32(
        _mm256_castsi256_si128(prod8),
        _mm256_extracti128_si256::<1>(prod8),
    );
    _mm_fnmadd_ps(dmin, _mm_cvtepi32_ps(prod), acc_m)
}

/// The 16 bytes starting at byte 4 of a Q4_K/Q5_K block: the twelve scale
/// bytes (and four bytes of what follows, ignored).
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn k4_scale_bytes<B: bytemuck::Pod>(b: &B) -> __m128i {
    let bytes: &[u8] = bytemuck::bytes_of(b);
    load_u8_128(bytes[4..20].try_into().unwrap())
}

/// Q4_K in 256-bit steps with no shuffle in the inner loop: per 32-byte
/// `qs` piece j, one `dpbusd` of the low nibbles (sub-block 2j) and one of
/// the high nibbles (2j+1) against their 32 activations; every i32 lane is a
/// sum of four products (|·| ≤ 4·15·127, so it fits i16), so the two are
/// merged into i16 pairs (low: 2j, high: 2j+1) and scaled by one `dpwssd`
/// against the broadcast scale pair. The pairs are the unpacked scales
/// stored once per block; each broadcast is then a load, not a shuffle.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(crate) fn q4_k(x: &[BlockQ4K], y: &[BlockQ8K]) -> f32 {
    let m4 = _mm256_set1_epi8(0xF);
    let lo16 = _mm256_set1_epi32(0xFFFF);
    let mut acc = _mm256_setzero_ps();
    let mut acc_m = _mm_setzero_ps();
    let mut pairs = [0i32; 8];
    for (xb, yb) in x.iter().zip(y) {
        let head: &[u8; 4] = bytemuck::bytes_of(xb)[..4].try_into().unwrap();
        let (d, dmin) = k4_d_dmin(head, yb.d);
        // i16 lanes 0..8: scales, 8..16: mins; i32 lane j: scales 2j, 2j+1.
        let v16 = _mm256_cvtepu8_epi16(k4_unpack(k4_scale_bytes(xb)));
        acc_m = k4_mins(acc_m, _mm256_castps256_ps128(dmin), v16, &yb.bsums);
        // SAFETY: `pairs` is 32 writable bytes; `storeu` has no alignment requirement.
        unsafe { _mm256_storeu_si256(pairs.as_mut_ptr().cast(), v16) };
        // Read back through memory (not forwarded into register shuffles).
        let pairs = std::hint::black_box(&pairs);
        let mut sumi = _mm256_setzero_si256();
        for (j, &pair) in pairs[..4].iter().enumerate() {
            let q = load_u8(at(&xb.qs, 32 * j));
            let lo = _mm256_and_si256(q, m4);
            let hi = _mm256_andnot_si256(m4, q);
            let z = _mm256_setzero_si256();
            let dl = _mm256_dpbusd_epi32(z, lo, load_i8(at(&yb.qs, 64 * j)));
            let dh = _mm256_dpbusd_epi32(z, hi, load_i8(at(&yb.qs, 64 * j + 32)));
            // (dl & 0xFFFF) | dh << 16
            let m = _mm256_ternarylogic_epi32::<0xEC>(dl, _mm256_slli_epi32::<12>(dh), lo16);
            sumi = _mm256_dpwssds_epi32(sumi, m, _mm256_set1_epi32(pair));
        }
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sumi), acc);
    }
    hsum_ps(acc) + hsum128(acc_m)
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn q5_k(x: &[BlockQ5K], y: &[BlockQ8K]) -> f32 {
    let m4 = _mm512_set1_epi8(0xF);
    let one = _mm512_set1_epi8(1);
    let nib_shift = halves_i16(0, 4);
    let mut acc = _mm256_setzero_ps();
    let mut summs = 0f32;
    for (xb, yb) in x.iter().zip(y) {
        let d = yb.d * f16_to_f32(xb.d);
        let dmin = -yb.d * f16_to_f32(xb.dmin);
        let (sc, mins) = k4_scales_mins(&xb.scales);
        let prod = mins_dot_bsums(mins, &yb.bsums);
        // ggml's AVX2 Q5_K: `summs += dmin * Σ prod`, contracted by GCC.
        summs = dmin.mul_add(hsum_i32_4(prod) as f32, summs);
        let sc = _mm512_broadcast_i32x4(_mm256_castsi256_si128(sc));
        let qh = _mm512_broadcast_i64x4(load_u8(&xb.qh));
        let mut sumi = _mm512_setzero_si512();
        for j in 0..4 {
            let q = _mm512_broadcast_i64x4(load_u8(at(&xb.qs, 32 * j)));
            let q = _mm512_and_si512(_mm512_srlv_epi16(q, nib_shift), m4);
            // Bit 2j of qh for the low half, bit 2j+1 for the high half, to bit 4.
            let hb = _mm512_srlv_epi16(qh, halves_i16(2 * j as i16, 2 * j as i16 + 1));
            let hb = _mm512_slli_epi16::<4>(_mm512_and_si512(hb, one));
            let q = _mm512_or_si512(q, hb);
            let p = _mm512_maddubs_epi16(q, load64(at64(&yb.qs, 64 * j)));
            sumi = _mm512_dpwssds_epi32(sumi, p, bcast_pair(sc, 2 * j, 2 * j + 1));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(fold8(sumi)), acc);
    }
    hsum_ps(acc) + summs
}

// ---------------------------------------------------------------- Q6_K

/// i16 lane indices giving 128-bit lane L the scale of sub-block `base + L`
#[inline]
#[target_feature(enable = "avx512f,avx2")]
pub(crate) fn q6_index(base: i16) -> __m512i {
    let lo = _mm256_inserti128_si256::<1>(_mm256_set1_epi16(base), _mm_set1_epi16(base + 1));
    let hi = _mm256_inserti128_si256::<1>(_mm256_set1_epi16(base + 2), _mm_set1_epi16(base + 3));
    _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi)
}

/// The 256 levels of a Q6_K block offset by +32 (0..=63), in element
/// order: piece j holds elements 64j..64j+64. `m4`, `m3`: bytes 0xF and 3;
/// `sh02` / `sh46`: 16-bit shifts 0 | 2 and 4 | 6 by 256-bit half.
///
/// # Safety
/// The caller must have AVX-512F/BW and AVX2 enabled.
#[inline(always)]
pub(crate) unsafe fn q6_k_levels(
    xb: &BlockQ6K,
    m4: __m512i,
    m3: __m512i,
    sh02: __m512i,
    sh46: __m512i,
) -> [__m512i; 4] {
    // SAFETY: loads read whole block fields (bounds-checked); the features
    // are enabled by the caller.
    unsafe {
        let mut q = [_mm512_setzero_si512(); 4];
        for h in 0..2 {
            let ql = load64(at64(&xb.ql, 64 * h));
            let qh = _mm512_broadcast_i64x4(load_u8(at(&xb.qh, 32 * h)));
            let hi_a = _mm512_and_si512(_mm512_srlv_epi16(qh, sh02), m3);
            let hi_b = _mm512_and_si512(_mm512_srlv_epi16(qh, sh46), m3);
            q[2 * h] = _mm512_or_si512(_mm512_and_si512(ql, m4), _mm512_slli_epi16::<4>(hi_a));
            q[2 * h + 1] = _mm512_or_si512(
                _mm512_and_si512(_mm512_srli_epi16::<4>(ql), m4),
                _mm512_slli_epi16::<4>(hi_b),
            );
        }
        q
    }
}

/// The affine matrices [`q6_k_levels_gfni`] unpacks with
/// (`gf2p8affineqb`: output bit i is the parity of matrix byte 7 − i AND the
/// input byte): `nib_hi` moves bits 4-7 to 0-3; `high[p]` moves the qh pair
/// of piece 2h + p (bits 0-1 | 2-3, or 4-5 | 6-7, by 256-bit half) to bits
/// 4-5. Each clears every other bit.
#[derive(Clone, Copy)]
pub(crate) struct Q6Affine {
    m4: __m512i,
    nib_hi: __m512i,
    high: [__m512i; 2],
}

impl Q6Affine {
    #[inline]
    #[target_feature(enable = "avx512f,avx2")]
    pub(crate) fn new() -> Self {
        // Output bits 4, 5 from input bits s, s + 1.
        let pair = |s: u32| ((1u64 << s) << 24 | (1u64 << (s + 1)) << 16) as i64;
        let halves = |lo: i64, hi: i64| {
            _mm512_inserti64x4::<1>(
                _mm512_castsi256_si512(_mm256_set1_epi64x(lo)),
                _mm256_set1_epi64x(hi),
            )
        };
        let nib = (0..4).fold(0u64, |m, i| m | (1u64 << (4 + i)) << (8 * (7 - i)));
        Self {
            m4: _mm512_set1_epi8(0xF),
            nib_hi: _mm512_set1_epi64(nib as i64),
            high: [halves(pair(0), pair(2)), halves(pair(4), pair(6))],
        }
    }
}

/// [`q6_k_levels`] with GFNI: five ops per 64-byte half (the low nibbles
/// merged with their high bits by one ternary op; the high nibbles and both
/// high-bit pairs by one affine transform each) where the shift form takes
/// eleven. The same bytes.
///
/// # Safety
/// The caller must have AVX-512F/BW, AVX2 and GFNI enabled.
#[inline(always)]
pub(crate) unsafe fn q6_k_levels_gfni(xb: &BlockQ6K, k: &Q6Affine) -> [__m512i; 4] {
    // SAFETY: loads read whole block fields (bounds-checked); the features
    // are enabled by the caller.
    unsafe {
        let mut q = [_mm512_setzero_si512(); 4];
        for h in 0..2 {
            let ql = load64(at64(&xb.ql, 64 * h));
            let qh = _mm512_broadcast_i64x4(load_u8(at(&xb.qh, 32 * h)));
            let hi_a = _mm512_gf2p8affine_epi64_epi8::<0>(qh, k.high[0]);
            let hi_b = _mm512_gf2p8affine_epi64_epi8::<0>(qh, k.high[1]);
            // (ql & 0x0F) | hi_a
            q[2 * h] = _mm512_ternarylogic_epi32::<0xEA>(ql, k.m4, hi_a);
            q[2 * h + 1] = _mm512_or_si512(_mm512_gf2p8affine_epi64_epi8::<0>(ql, k.nib_hi), hi_b);
        }
        q
    }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn q6_k(x: &[BlockQ6K], y: &[BlockQ8K]) -> f32 {
    let m4 = _mm512_set1_epi8(0xF);
    let m3 = _mm512_set1_epi8(3);
    let sh02 = halves_i16(0, 2);
    let sh46 = halves_i16(4, 6);
    // i16 lane indices giving 128-bit lane L the scale of sub-block `base + L`.
    let idxs = [q6_index(0), q6_index(4), q6_index(8), q6_index(12)];
    let mut acc = _mm256_setzero_ps();
    for (xb, yb) in x.iter().zip(y) {
        let d = yb.d * f16_to_f32(xb.d);
        let s8: &[u8; 16] = bytemuck::cast_ref(&xb.scales);
        let sc16 = _mm256_cvtepi8_epi16(load_u8_128(s8));
        let sc = _mm512_castsi256_si512(sc16);
        // The −32 offset of every level: 32·Σ scale·bsum.
        let corr = _mm256_madd_epi16(sc16, load_bsums(&yb.bsums));
        let mut sumi = _mm512_sub_epi32(
            _mm512_setzero_si512(),
            _mm512_zextsi256_si512(_mm256_slli_epi32::<5>(corr)),
        );
        // SAFETY: this function enables AVX-512F/BW and AVX2.
        let q = unsafe { q6_k_levels(xb, m4, m3, sh02, sh46) };
        for (j, &qj) in q.iter().enumerate() {
            let p = _mm512_maddubs_epi16(qj, load64(at64(&yb.qs, 64 * j)));
            sumi = _mm512_dpwssds_epi32(sumi, p, _mm512_permutexvar_epi16(idxs[j], sc));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(fold8(sumi)), acc);
    }
    hsum_ps(acc)
}

// ---------------------------------------------------------------- IQ4_XS

/// The IQ4_NL grid biased to unsigned (`G + 128 ∈ 1..=241`), built at
/// compile time: an `array::map` here was an out-of-line call per row, a
/// large cost for the VBMI kernel (a row is only 16 blocks).
pub(crate) const BIASED_GRID: [u8; 16] = {
    let mut b = [0u8; 16];
    let mut i = 0;
    while i < 16 {
        b[i] = (KVALUES_IQ4NL[i] as i16 + 128) as u8;
        i += 1;
    }
    b
};

/// The constants of the IQ4_XS kernels.
pub(crate) struct Iq4Consts {
    /// The biased grid in both 128-bit halves: `pshufb` reads four index
    /// bits per lane, the 256-bit `vpermb` five (bit 4, the neighbour's
    /// bit after a 16-bit shift, then picks the same entry).
    values: __m256i,
    m4: __m256i,
    /// Lane i holds sub-block ORDER[i] = 0,2,4,6,1,3,5,7: nibble ORDER[i]
    /// of `scales_l`, bit pair ORDER[i] of `scales_h`.
    order: __m256i,
    shift_l: __m256i,
    shift_h: __m256i,
    neg128: __m256i,
}

impl Iq4Consts {
    #[inline(always)]
    pub(crate) fn new() -> Self {
        // SAFETY: register-only AVX/AVX2 intrinsics; every caller is an
        // AVX2 (or wider) `#[target_feature]` function that inlines this.
        unsafe {
            let v = load_u8_128(&BIASED_GRID);
            Self {
                values: _mm256_set_m128i(v, v),
                m4: _mm256_set1_epi8(0xF),
                order: _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7),
                shift_l: _mm256_setr_epi32(0, 8, 16, 24, 4, 12, 20, 28),
                shift_h: _mm256_setr_epi32(0, 4, 8, 12, 2, 6, 10, 14),
                neg128: _mm256_set1_epi16(-128),
            }
        }
    }
}

/// One IQ4_XS block's weight side: per 32-byte `qs` piece p, the biased
/// grid values of the low nibbles (elements 0..16 of sub-blocks 2p | 2p+1 in
/// the two 128-bit lanes) and of the high nibbles (elements 16..32), and the
/// signed sub-block scales in the lane order of [`Iq4Consts`].
pub(crate) struct Iq4Levels {
    lo: [__m256i; 4],
    hi: [__m256i; 4],
    ls: __m256i,
}

/// [`Iq4Levels`] of `xb`, the grid looked up by `vpermb` (AVX512-VBMI) when
/// `VBMI`, else by `pshufb` of the masked nibbles: the same bytes.
///
/// # Safety
/// The caller must have AVX512 F/BW/VL and AVX2 enabled, and AVX512-VBMI
/// when `VBMI`.
#[inline(always)]
pub(crate) unsafe fn iq4_xs_levels<const VBMI: bool>(xb: &BlockIq4Xs, c: &Iq4Consts) -> Iq4Levels {
    // SAFETY: loads read whole block fields; the caller enables the features.
    unsafe {
        let l = _mm256_srlv_epi32(
            _mm256_set1_epi32(i32::from_le_bytes(xb.scales_l)),
            c.shift_l,
        );
        // `scales_h` and the two bytes after it as one dword (a broadcast
        // straight from memory): the shifts keep to its low 16 bits.
        let sh = std::ptr::from_ref(xb)
            .cast::<u8>()
            .add(2)
            .cast::<i32>()
            .read_unaligned();
        let h = _mm256_srlv_epi32(_mm256_set1_epi32(sh), c.shift_h);
        let ls = _mm256_or_si256(
            _mm256_and_si256(l, _mm256_set1_epi32(0xF)),
            _mm256_slli_epi32::<4>(_mm256_and_si256(h, _mm256_set1_epi32(3))),
        );
        let ls = _mm256_sub_epi32(ls, _mm256_set1_epi32(32));
        let mut lv = Iq4Levels {
            lo: [_mm256_setzero_si256(); 4],
            hi: [_mm256_setzero_si256(); 4],
            ls,
        };
        for p in 0..4 {
            let q4 = load_u8(at(&xb.qs, 32 * p));
            let q4h = _mm256_srli_epi16::<4>(q4);
            if VBMI {
                lv.lo[p] = _mm256_permutexvar_epi8(q4, c.values);
                lv.hi[p] = _mm256_permutexvar_epi8(q4h, c.values);
            } else {
                lv.lo[p] = _mm256_shuffle_epi8(c.values, _mm256_and_si256(q4, c.m4));
                lv.hi[p] = _mm256_shuffle_epi8(c.values, _mm256_and_si256(q4h, c.m4));
            }
        }
        lv
    }
}

/// One Q8_K block's side of an IQ4_XS block dot: per piece p the
/// activations of the low nibbles (`a[0..16] | a[32..48]` of its 64) and of
/// the high ones (`a[16..32] | a[48..64]`), and −128·(sum of sub-block j's
/// activations) in the lane order of [`Iq4Consts`] (the grid's bias).
///
/// # Safety
/// The caller must have AVX2 enabled.
#[inline(always)]
pub(crate) unsafe fn iq4_xs_acts(yb: &BlockQ8K, c: &Iq4Consts) -> ([__m256i; 8], __m256i) {
    // SAFETY: loads read whole block fields; the caller enables AVX2.
    unsafe {
        let bias = _mm256_madd_epi16(load_bsums(&yb.bsums), c.neg128);
        let bias = _mm256_permutevar8x32_epi32(bias, c.order);
        let acts = std::array::from_fn(|k| {
            let a = &yb.qs[64 * (k / 2)..64 * (k / 2) + 64];
            let o = 16 * (k % 2);
            load_halves(&a[o..o + 16], &a[32 + o..48 + o])
        });
        (acts, bias)
    }
}

/// One Q8_K block's side of the IQ4_XS two-row kernel, laid out once per
/// mat-vec call ([`iq4_xs_prepare`]) instead of once per row pair: the
/// half-swapped activation loads of [`iq4_xs_acts`] become plain 32-byte
/// loads (the inserts and the bias permute ran on the shuffle ports the
/// two-row kernel is bound by). The same bytes as
/// [`iq4_xs_acts`] builds, so the same bits.
#[derive(Clone, Copy)]
#[repr(C)]
pub(crate) struct Iq4Acts {
    pub(crate) acts: [__m256i; 8],
    pub(crate) bias: __m256i,
    pub(crate) d: f32,
}

/// Most Q8_K blocks [`iq4_xs_prepare`] lays out (a row of 32768): its
/// buffer is on the stack, 10 KiB per 32 blocks.
pub(crate) const IQ4_PREPARED_BLOCKS: usize = 128;

/// Lays out `y` (at most [`IQ4_PREPARED_BLOCKS`] blocks) for the IQ4_XS
/// two-row kernel and hands the layout to `f`; `false`, calling nothing,
/// when `y` is longer.
#[target_feature(enable = "avx2")]
pub(crate) fn iq4_xs_prepare(y: &[BlockQ8K], f: &mut dyn FnMut(&[Iq4Acts])) -> bool {
    if y.len() > IQ4_PREPARED_BLOCKS {
        return false;
    }
    let mut buf = [std::mem::MaybeUninit::<Iq4Acts>::uninit(); IQ4_PREPARED_BLOCKS];
    let c = Iq4Consts::new();
    for (slot, yb) in buf.iter_mut().zip(y) {
        // SAFETY: AVX2 is enabled here; `iq4_xs_acts` reads whole fields.
        let (acts, bias) = unsafe { iq4_xs_acts(yb, &c) };
        slot.write(Iq4Acts {
            acts,
            bias,
            d: yb.d,
        });
    }
    // SAFETY: the first `y.len()` slots were written just above, and
    // `MaybeUninit<T>` has `T`'s layout.
    let ready = unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<Iq4Acts>(), y.len()) };
    f(ready);
    true
}

/// The eight i32 lanes of one IQ4_XS block's dot (lane i: sub-block
/// ORDER[i]'s exact `ls·Σ grid·a`): four `dpbusd` pairs, folded
/// ([`fold4_i32`]) into one i32 per sub-block (order 0,2,4,6 | 1,3,5,7),
/// the bias removed, one `mullo` by the scales.
///
/// # Safety
/// The caller must have AVX512 F/VL/VNNI and AVX2 enabled.
#[inline(always)]
pub(crate) unsafe fn iq4_xs_sumi(lv: &Iq4Levels, acts: &[__m256i; 8], bias: __m256i) -> __m256i {
    // SAFETY: register-only intrinsics; the caller enables the features.
    unsafe {
        let dots: [__m256i; 4] = std::array::from_fn(|p| {
            let d = _mm256_dpbusd_epi32(_mm256_setzero_si256(), lv.lo[p], acts[2 * p]);
            _mm256_dpbusd_epi32(d, lv.hi[p], acts[2 * p + 1])
        });
        // [0,0,2,2 | 1,1,3,3] and [4,4,6,6 | 5,5,7,7], then [0,2,4,6 | 1,3,5,7].
        let per_sub = _mm256_add_epi32(fold4_i32(dots), bias);
        _mm256_mullo_epi32(per_sub, lv.ls)
    }
}

/// `yd · xb.d` in every lane: the f16 converted in a vector register (a
/// broadcast load, no insert into a scalar one).
///
/// # Safety
/// The caller must have AVX2 and F16C enabled.
#[inline(always)]
pub(crate) unsafe fn iq4_xs_d(yd: f32, xb: &BlockIq4Xs) -> __m256 {
    // SAFETY: register-only intrinsics; the caller enables the features.
    unsafe {
        let xd = _mm256_cvtph_ps(_mm_set1_epi16(xb.d.to_bits() as i16));
        _mm256_mul_ps(_mm256_set1_ps(yd), xd)
    }
}

/// The IQ4_XS row sum: the two 128-bit halves of `acc`, then
/// [`hsum128`].
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn iq4_xs_hsum(acc: __m256) -> f32 {
    hsum128(_mm_add_ps(
        _mm256_castps256_ps128(acc),
        _mm256_extractf128_ps::<1>(acc),
    ))
}

/// One IQ4_XS row against `C` Q8_K rows (the weight side unpacked once
/// per block), the sub-block scales applied once per super-block ([`iq4_xs_levels`], [`iq4_xs_acts`], [`iq4_xs_sumi`]): one
/// 8-lane FMA per block, `d` times the lanes. The i32 lanes are exact; a
/// lane still holding bias (the bias cancels only across lanes) can pass
/// 2^24 and round once when converted, which happens only when Σ|w·a| is far
/// larger still (see the bias test). The `pshufb` and `vpermb` forms give
/// the same bits, and so does the two-row mat-vec kernel (`gemm_kq`).
///
/// # Safety
/// The caller must have AVX512 F/BW/VL/VNNI, AVX2, FMA and F16C enabled,
/// and AVX512-VBMI when `VBMI`.
#[inline(always)]
pub(crate) unsafe fn iq4_xs_cols<const VBMI: bool, const C: usize>(
    x: &[BlockIq4Xs],
    y: [&[BlockQ8K]; C],
) -> [f32; C] {
    // SAFETY: the caller enables every feature the helpers need.
    unsafe {
        let c = Iq4Consts::new();
        let mut acc = [_mm256_setzero_ps(); C];
        for (b, xb) in x.iter().enumerate() {
            let lv = iq4_xs_levels::<VBMI>(xb, &c);
            for (col, a) in acc.iter_mut().enumerate() {
                let yb = &y[col][b];
                let (acts, bias) = iq4_xs_acts(yb, &c);
                let sumi = iq4_xs_sumi(&lv, &acts, bias);
                *a = _mm256_fmadd_ps(iq4_xs_d(yb.d, xb), _mm256_cvtepi32_ps(sumi), *a);
            }
        }
        std::array::from_fn(|c| iq4_xs_hsum(acc[c]))
    }
}

/// IQ4_XS · Q8_K ([`iq4_xs_cols`] of one row), the grid looked up with
/// `pshufb`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(crate) fn iq4_xs(x: &[BlockIq4Xs], y: &[BlockQ8K]) -> f32 {
    // SAFETY: this function enables every feature the body needs.
    unsafe { iq4_xs_cols::<false, 1>(x, [y])[0] }
}

/// The same looking the grid up with `vpermb` (one op fewer per
/// nibble: no mask); the same bits as [`iq4_xs`].
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c")]
pub(crate) fn iq4_xs_vbmi(x: &[BlockIq4Xs], y: &[BlockQ8K]) -> f32 {
    // SAFETY: this function enables every feature the body needs.
    unsafe { iq4_xs_cols::<true, 1>(x, [y])[0] }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scalar;

    /// The IQ4_XS weights `w` against activations `a`: `a` quantised to Q8_K
    /// (aligned words), the scalar dot, and the tolerance `1e-5·Σ|w·a|` of
    /// the dequantised rows.
    fn want_and_tol(w: &[u16], a: &[f32]) -> (Vec<u32>, f32, f32) {
        let n = a.len();
        let mut q = vec![0u32; 73 * (n / 256)];
        scalar::quantize_row(GgmlType::Q8_K, a, bytemuck::cast_slice_mut(&mut q), None);
        let (wb, qb): (&[u8], &[u8]) = (bytemuck::cast_slice(w), bytemuck::cast_slice(&q));
        let want = scalar::vec_dot(GgmlType::IQ4_XS, n, wb, qb);
        let mut wd = vec![0.0f32; n];
        let mut ad = vec![0.0f32; n];
        scalar::dequantize_row(GgmlType::IQ4_XS, wb, &mut wd);
        scalar::dequantize_row(GgmlType::Q8_K, qb, &mut ad);
        let tol: f32 = 1e-5 * wd.iter().zip(&ad).map(|(x, y)| (x * y).abs()).sum::<f32>();
        (q, want, tol)
    }

    /// The +128 bias of the grid makes the per-lane partial sums large where
    /// the true dot is small (every level +1, activations and scales at their
    /// extremes); the kernel must still meet the tier tolerance there.
    #[test]
    fn iq4_xs_kernels_meet_the_tolerance_when_the_bias_dwarfs_the_dot() {
        if !(is_x86_feature_detected!("avx512vnni") && crate::Isa::Avx512.available()) {
            eprintln!("*** SKIPPING: no AVX512-VNNI ***");
            return;
        }
        let nb = 16;
        let n = 256 * nb;
        // Nibble 8 is the grid's +1; scales 63 (unbiased +31) or 0 (−32).
        for (nibbles, scale_l, scale_h) in [
            (0x88u8, 0xFFu8, 0xFFFFu16),
            (0x88, 0, 0),
            (0xFF, 0xFF, 0xFFFF),
        ] {
            let mut w = vec![0u16; 68 * nb];
            let wb: &mut [u8] = bytemuck::cast_slice_mut(&mut w);
            for blk in wb.chunks_exact_mut(136) {
                blk[..2].copy_from_slice(&half::f16::from_f32(0.01).to_le_bytes());
                blk[2..4].copy_from_slice(&scale_h.to_le_bytes());
                blk[4..8].fill(scale_l);
                blk[8..].fill(nibbles);
            }
            for a_val in [1.0f32, -1.0] {
                let (q, want, tol) = want_and_tol(&w, &vec![a_val; n]);
                let (wb, qb): (&[u8], &[u8]) = (bytemuck::cast_slice(&w), bytemuck::cast_slice(&q));
                let got = vec_dot_fn(GgmlType::IQ4_XS).unwrap()(n, wb, qb);
                assert!(
                    (got - want).abs() <= tol,
                    "{nibbles:#x} {scale_l:#x} {a_val}: {got} vs {want} (tolerance {tol})"
                );
            }
        }
    }

    /// The table hands out one IQ4_XS kernel per host; both are checked here
    /// against the scalar reference on random blocks (every scale value).
    #[test]
    fn both_iq4_xs_kernels_match_scalar_at_awkward_lengths() {
        if !(is_x86_feature_detected!("avx512vnni") && crate::Isa::Avx512.available()) {
            eprintln!("*** SKIPPING: no AVX512-VNNI ***");
            return;
        }
        let vbmi = is_x86_feature_detected!("avx512vbmi");
        let mut s = 0x1234_5678_9abc_def1u64;
        let mut next = move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        for nb in [1usize, 2, 3, 7, 9, 17, 33] {
            let n = 256 * nb;
            let mut w = vec![0u16; 68 * nb];
            let wb: &mut [u8] = bytemuck::cast_slice_mut(&mut w);
            for b in wb.iter_mut() {
                *b = next() as u8;
            }
            for blk in wb.chunks_exact_mut(136) {
                let d = half::f16::from_f32((next() % 1000) as f32 * 1e-5);
                blk[..2].copy_from_slice(&d.to_le_bytes());
            }
            let a: Vec<f32> = (0..n)
                .map(|_| (next() % 2001) as f32 / 1000.0 - 1.0)
                .collect();
            let (q, want, tol) = want_and_tol(&w, &a);
            let (wb, qb): (&[u8], &[u8]) = (bytemuck::cast_slice(&w), bytemuck::cast_slice(&q));
            let got = vec_dot_iq4_xs(n, wb, qb);
            assert!(
                (got - want).abs() <= tol,
                "vnni {nb} blocks: {got} vs {want}"
            );
            if vbmi {
                let got = vec_dot_iq4_xs_vbmi(n, wb, qb);
                assert!(
                    (got - want).abs() <= tol,
                    "vbmi {nb} blocks: {got} vs {want}"
                );
            }
        }
    }
}
