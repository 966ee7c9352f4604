//! AVX-512 (F/BW/VL, with VNNI and BF16 where detected) kernels for the
//! 32-element block types and the float types.
//!
//! Every dot here equals, bit for bit, the one llama.cpp's x86 build runs on
//! an AVX-512 host (its quantised dots are AVX2 code even there; its float
//! dots are `vec.cpp`'s AVX-512 forms), so the default tier reproduces
//! llama.cpp's logits. Block dots put two blocks in one 512-bit register
//! (lanes 0..8 the first, 8..16 the second) and take the byte dot with
//! `vpdpbusd` when AVX-512 VNNI is present (else `vpmaddubsw` +
//! `vpmaddwd`): the i32 lanes are exact and equal to ggml's 256-bit ones.
//! Only the f32 steps keep ggml's order: each half is fused into an 8-lane
//! accumulator block after block, one horizontal sum per call. The Q8_0/Q8_1
//! activation quantisers are in `quant`.

use std::arch::x86_64::*;

use half::{bf16, f16};

use super::has_vnni;
use crate::blocks::as_blocks;
use crate::cpu::Isa;
use crate::scalar::iq4_nl::BlockIq4Nl;
use crate::scalar::q4_0::BlockQ4_0;
use crate::scalar::q4_1::BlockQ4_1;
use crate::scalar::q5_0::BlockQ5_0;
use crate::scalar::q5_1::BlockQ5_1;
use crate::scalar::q8_0::BlockQ8_0;
use crate::scalar::q8_1::BlockQ8_1;
use crate::sig::{QuantizeFn, VecDotFn};
use crate::x86::avx2::legacy::{f16_to_f32, halves8, hsum_ps, scale_products, AsymBlock, SymBlock};
use crate::GgmlType;

/// This tier's dot product for `ty`, when the host has AVX-512 F/BW/VL.
pub fn vec_dot_fn(ty: GgmlType) -> Option<VecDotFn> {
    if !Isa::Avx512.available() {
        return None;
    }
    let vnni = has_vnni();
    Some(match (ty, vnni) {
        (GgmlType::Q4_0, true) => vec_dot_q4_0_vnni,
        (GgmlType::Q4_0, false) => vec_dot_q4_0,
        (GgmlType::Q5_0, true) => vec_dot_q5_0_vnni,
        (GgmlType::Q5_0, false) => vec_dot_q5_0,
        (GgmlType::Q8_0, true) => vec_dot_q8_0_vnni,
        (GgmlType::Q8_0, false) => vec_dot_q8_0,
        (GgmlType::IQ4_NL, true) => vec_dot_iq4_nl_vnni,
        (GgmlType::IQ4_NL, false) => vec_dot_iq4_nl,
        (GgmlType::Q4_1, true) => vec_dot_q4_1_vnni,
        (GgmlType::Q4_1, false) => vec_dot_q4_1,
        (GgmlType::Q5_1, true) => vec_dot_q5_1_vnni,
        (GgmlType::Q5_1, false) => vec_dot_q5_1,
        (GgmlType::F32, _) => vec_dot_f32,
        (GgmlType::F16, _) => vec_dot_f16,
        (GgmlType::BF16, _) if is_x86_feature_detected!("avx512bf16") => vec_dot_bf16_dp,
        (GgmlType::BF16, _) => vec_dot_bf16,
        _ => return None,
    })
}

/// Every dot product this tier has for `ty` that the host can run, named
/// (`"bw"`, `"vnni"`, `"bf16"`): `vec_dot_fn` picks one by detection, tests
/// and benches check them all.
// Same shape as aarch64/neon/legacy.rs::vec_dot_variants (and neon/lowbit.rs, lowbit.rs here): the
// tiers differ in detection (VNNI vs dotprod), variant names and kernels, and only one of the two
// compiles per target; each family file lists its own types.
pub fn vec_dot_variants(ty: GgmlType) -> Vec<(&'static str, VecDotFn)> {
    if !Isa::Avx512.available() {
        return Vec::new();
    }
    match ty {
        GgmlType::Q4_0 => super::variant_pair(vec_dot_q4_0, vec_dot_q4_0_vnni),
        GgmlType::Q5_0 => super::variant_pair(vec_dot_q5_0, vec_dot_q5_0_vnni),
        GgmlType::Q8_0 => super::variant_pair(vec_dot_q8_0, vec_dot_q8_0_vnni),
        GgmlType::IQ4_NL => super::variant_pair(vec_dot_iq4_nl, vec_dot_iq4_nl_vnni),
        GgmlType::Q4_1 => super::variant_pair(vec_dot_q4_1, vec_dot_q4_1_vnni),
        GgmlType::Q5_1 => super::variant_pair(vec_dot_q5_1, vec_dot_q5_1_vnni),
        GgmlType::F32 => vec![("f", vec_dot_f32 as VecDotFn)],
        GgmlType::F16 => vec![("f", vec_dot_f16 as VecDotFn)],
        GgmlType::BF16 => {
            let mut v = vec![("bw", vec_dot_bf16 as VecDotFn)];
            if is_x86_feature_detected!("avx512bf16") {
                v.push(("bf16", vec_dot_bf16_dp));
            }
            v
        }
        _ => Vec::new(),
    }
}

/// None: `quant` and the AVX2 tier serve this tier (see the module comment).
pub fn quantize_fn(_act_ty: GgmlType) -> Option<QuantizeFn> {
    None
}

/// Two 256-bit halves into one register.
///
/// # Safety
/// The caller must have AVX-512F enabled.
#[inline(always)]
pub(crate) unsafe fn join(lo: __m256i, hi: __m256i) -> __m512i {
    // SAFETY: register-only intrinsics; AVX-512F is enabled by the caller.
    unsafe { _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi) }
}

/// Unsigned × signed byte dot into 16 exact i32 lanes (4 products per lane).
///
/// # Safety
/// The caller must have AVX-512F/BW enabled, and AVX-512 VNNI when `VNNI`.
#[inline(always)]
unsafe fn dot_us_i<const VNNI: bool>(u: __m512i, s: __m512i) -> __m512i {
    // SAFETY: register-only intrinsics; the features are enabled by the caller.
    unsafe {
        if VNNI {
            _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, s)
        } else {
            _mm512_madd_epi16(_mm512_maddubs_epi16(u, s), _mm512_set1_epi16(1))
        }
    }
}

/// Unsigned × signed byte dot into 16 f32 lanes (4 products per lane).
///
/// # Safety
/// As [`dot_us_i`].
#[inline(always)]
unsafe fn dot_us<const VNNI: bool>(u: __m512i, s: __m512i) -> __m512 {
    // SAFETY: register-only intrinsics; the features are enabled by the caller.
    unsafe { _mm512_cvtepi32_ps(dot_us_i::<VNNI>(u, s)) }
}

/// Signed × signed byte dot: |x| × (y negated where x < 0), valid for y ≠ -128.
///
/// # Safety
/// As [`dot_us`].
#[inline(always)]
pub(crate) unsafe fn dot_ss<const VNNI: bool>(x: __m512i, y: __m512i) -> __m512 {
    // SAFETY: register-only intrinsics; the features are enabled by the caller.
    unsafe {
        let neg = _mm512_movepi8_mask(x);
        let sy = _mm512_mask_sub_epi8(y, neg, _mm512_setzero_si512(), y);
        dot_us::<VNNI>(_mm512_abs_epi8(x), sy)
    }
}

/// The two 8-lane halves of `v` (lanes 0..8, lanes 8..16).
///
/// # Safety
/// The caller must have AVX-512F enabled.
#[inline(always)]
pub(crate) unsafe fn split(v: __m512) -> [__m256; 2] {
    // SAFETY: register-only intrinsics; AVX-512F is enabled by the caller.
    unsafe {
        [
            _mm512_castps512_ps256(v),
            _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v))),
        ]
    }
}

/// Lane `k` of `v` in all 8 lanes.
///
/// # Safety
/// The caller must have AVX2 enabled.
#[inline(always)]
unsafe fn lane(v: __m128, k: i32) -> __m256 {
    // SAFETY: register-only intrinsics; AVX2 is enabled by the caller.
    unsafe { _mm256_permutevar8x32_ps(_mm256_castps128_ps256(v), _mm256_set1_epi32(k)) }
}

/// Four blocks' scale products `d` and byte dots (`p01`: blocks 0 and 1 in
/// lanes 0..8 / 8..16, `p23`: blocks 2 and 3) fused into the 8-lane f32
/// accumulators in ggml's AVX2 order: block by block `acc = fma(d_k, lanes_k,
/// acc)` into one accumulator, or with `PAIRS` (IQ4_NL) even blocks into
/// `acc[0]` and odd ones into `acc[1]`.
///
/// # Safety
/// The caller must have AVX-512F, AVX2 and FMA enabled.
#[inline(always)]
pub(crate) unsafe fn fuse4<const PAIRS: bool>(
    d: __m128,
    p01: __m512,
    p23: __m512,
    acc: &mut [__m256; 2],
) {
    // SAFETY: register-only intrinsics; the caller enables the features.
    unsafe {
        let [p0, p1] = split(p01);
        let [p2, p3] = split(p23);
        for (k, p) in [p0, p1, p2, p3].into_iter().enumerate() {
            let a = if PAIRS { k & 1 } else { 0 };
            acc[a] = _mm256_fmadd_ps(lane(d, k as i32), p, acc[a]);
        }
    }
}

/// The blocks after the last whole group of four, then the final sum, in
/// ggml's order (see [`fuse4`]): without `PAIRS`, each block `fma`ed into
/// `acc[0]` and one horizontal sum; with `PAIRS`, a pair into `acc[0]`,
/// `acc[1]`, the sum of both reduced, then an odd last block added in scalar
/// `sum = fma(dy·dx, Σ, sum)`.
///
/// # Safety
/// As [`dot_sym`].
#[inline(always)]
pub(crate) unsafe fn sym_tail<B: SymBlock, const VNNI: bool, const PAIRS: bool>(
    xr: &[B],
    yr: &[BlockQ8_0],
    mut acc: [__m256; 2],
) -> f32 {
    // SAFETY: register-only work on the blocks' bytes; the caller enables the features.
    unsafe {
        let mut k = 0;
        while k + 2 <= xr.len() {
            let p = split(dot_ss::<VNNI>(
                join(xr[k].levels(), xr[k + 1].levels()),
                join(yr[k].levels(), yr[k + 1].levels()),
            ));
            for h in 0..2 {
                let d = _mm256_set1_ps(xr[k + h].scale() * yr[k + h].scale());
                let a = if PAIRS { h } else { 0 };
                acc[a] = _mm256_fmadd_ps(d, p[h], acc[a]);
            }
            k += 2;
        }
        if k == xr.len() {
            return hsum_ps(_mm256_add_ps(acc[0], acc[1]));
        }
        let (bx, by) = (&xr[k], &yr[k]);
        let [p, _] = split(dot_ss::<VNNI>(
            join(bx.levels(), bx.levels()),
            join(by.levels(), by.levels()),
        ));
        if PAIRS {
            let lanes = _mm256_cvtps_epi32(p);
            let l = _mm_add_epi32(
                _mm256_castsi256_si128(lanes),
                _mm256_extracti128_si256::<1>(lanes),
            );
            let l = _mm_add_epi32(l, _mm_unpackhi_epi64(l, l));
            let l = _mm_add_epi32(l, _mm_shuffle_epi32::<1>(l));
            let sumi = _mm_cvtsi128_si32(l) as f32;
            let sum = hsum_ps(_mm256_add_ps(acc[0], acc[1]));
            (by.scale() * bx.scale()).mul_add(sumi, sum)
        } else {
            let d = _mm256_set1_ps(bx.scale() * by.scale());
            hsum_ps(_mm256_fmadd_ps(d, p, acc[0]))
        }
    }
}

/// Σ_blocks dx·dy·(x·y) for signed-level weights against Q8_0, bit for bit
/// in the order of ggml's x86 dots (`ggml_vec_dot_q8_0_q8_0`, `q4_0`,
/// `q5_0`: AVX2 code even in an AVX-512 build; `PAIRS`: `iq4_nl`), see
/// [`fuse4`] and [`sym_tail`]. The byte dots run two blocks per 512-bit
/// register; their i32 lanes are exact, so only the f32 steps need ggml's
/// order.
///
/// # Safety
/// The caller must have AVX-512F/BW/VL, AVX2, FMA and F16C enabled, and
/// AVX-512 VNNI when `VNNI`.
#[inline(always)]
unsafe fn dot_sym<B: SymBlock, const VNNI: bool, const PAIRS: bool>(
    x: &[B],
    y: &[BlockQ8_0],
) -> f32 {
    // SAFETY: block accesses are through slices; intrinsics need only the
    // features the caller enables.
    unsafe {
        let mut acc = [_mm256_setzero_ps(); 2];
        let mut xs = x.chunks_exact(4);
        let mut ys = y.chunks_exact(4);
        for (xq, yq) in (&mut xs).zip(&mut ys) {
            let d = scale_products(xq, yq);
            let p01 = dot_ss::<VNNI>(
                join(xq[0].levels(), xq[1].levels()),
                join(yq[0].levels(), yq[1].levels()),
            );
            let p23 = dot_ss::<VNNI>(
                join(xq[2].levels(), xq[3].levels()),
                join(yq[2].levels(), yq[3].levels()),
            );
            fuse4::<PAIRS>(d, p01, p23, &mut acc);
        }
        sym_tail::<B, VNNI, PAIRS>(xs.remainder(), ys.remainder(), acc)
    }
}

/// Σ_blocks dx·dy·(x·y) + mx·sy for min-offset weights against Q8_1, bit for
/// bit in the order of ggml's x86 `ggml_vec_dot_q4_1_q8_1` / `q5_1` (AVX2
/// code in an AVX-512 build): one 8-lane accumulator `acc = fma(dx·dy,
/// lanes, acc)` block by block, the `m·s` terms in scalar block order
/// (`summs = fma(m, s, summs)`, here in lane 0 of a register), result
/// `hsum(acc) + summs`. Four blocks per step share one f16 conversion; two
/// blocks' byte dots per 512-bit register.
///
/// # Safety
/// As [`dot_sym`].
#[inline(always)]
unsafe fn dot_asym<B: AsymBlock, const VNNI: bool>(x: &[B], y: &[BlockQ8_1]) -> f32 {
    // SAFETY: block accesses are through slices; the loads read the 32 level
    // bytes of each activation block; intrinsics need only the features the
    // caller enables.
    unsafe {
        let mut acc = _mm256_setzero_ps();
        let mut summs = _mm_setzero_ps();
        let ly = |b: &BlockQ8_1| _mm256_loadu_si256(b.qs.as_ptr().cast());
        let mut xs = x.chunks_exact(4);
        let mut ys = y.chunks_exact(4);
        for (xq, yq) in (&mut xs).zip(&mut ys) {
            let xb = [0, 1, 2, 3].map(|k| xq[k].dm_bits());
            let yb = [0, 1, 2, 3].map(|k| [yq[k].d.to_bits(), yq[k].s.to_bits()]);
            let fx = halves8(
                [xb[0][0], xb[1][0], xb[2][0], xb[3][0]],
                [xb[0][1], xb[1][1], xb[2][1], xb[3][1]],
            );
            let fy = halves8(
                [yb[0][0], yb[1][0], yb[2][0], yb[3][0]],
                [yb[0][1], yb[1][1], yb[2][1], yb[3][1]],
            );
            let d = _mm_mul_ps(_mm256_castps256_ps128(fx), _mm256_castps256_ps128(fy));
            let (m, sy) = (
                _mm256_extractf128_ps::<1>(fx),
                _mm256_extractf128_ps::<1>(fy),
            );
            let p01 = dot_us::<VNNI>(
                join(xq[0].levels(), xq[1].levels()),
                join(ly(&yq[0]), ly(&yq[1])),
            );
            let p23 = dot_us::<VNNI>(
                join(xq[2].levels(), xq[3].levels()),
                join(ly(&yq[2]), ly(&yq[3])),
            );
            let [p0, p1] = split(p01);
            let [p2, p3] = split(p23);
            for (k, p) in [p0, p1, p2, p3].into_iter().enumerate() {
                acc = _mm256_fmadd_ps(lane(d, k as i32), p, acc);
            }
            // Lane k of m and sy into lane 0, block by block.
            summs = _mm_fmadd_ss(m, sy, summs);
            summs = _mm_fmadd_ss(_mm_movehdup_ps(m), _mm_movehdup_ps(sy), summs);
            summs = _mm_fmadd_ss(_mm_movehl_ps(m, m), _mm_movehl_ps(sy, sy), summs);
            summs = _mm_fmadd_ss(
                _mm_shuffle_ps::<3>(m, m),
                _mm_shuffle_ps::<3>(sy, sy),
                summs,
            );
        }
        let mut summs = _mm_cvtss_f32(summs);
        for (bx, by) in xs.remainder().iter().zip(ys.remainder()) {
            let [p, _] = split(dot_us::<VNNI>(
                join(bx.levels(), bx.levels()),
                join(ly(by), ly(by)),
            ));
            let d = _mm256_set1_ps(bx.scale() * f16_to_f32(by.d));
            acc = _mm256_fmadd_ps(d, p, acc);
            summs = bx.min().mul_add(f16_to_f32(by.s), summs);
        }
        hsum_ps(acc) + summs
    }
}

/// [`dot_sym`] with one accumulator (Q4_0, Q5_0, Q8_0).
///
/// # Safety
/// As [`dot_sym`].
#[inline(always)]
unsafe fn dot_sym_seq<B: SymBlock, const VNNI: bool>(x: &[B], y: &[BlockQ8_0]) -> f32 {
    // SAFETY: the caller enables the features `dot_sym` needs.
    unsafe { dot_sym::<B, VNNI, false>(x, y) }
}

/// [`dot_sym`] with even / odd accumulators (IQ4_NL).
///
/// # Safety
/// As [`dot_sym`].
#[inline(always)]
unsafe fn dot_sym_pairs<B: SymBlock, const VNNI: bool>(x: &[B], y: &[BlockQ8_0]) -> f32 {
    // SAFETY: the caller enables the features `dot_sym` needs.
    unsafe { dot_sym::<B, VNNI, true>(x, y) }
}

macro_rules! block_dot {
    ($name:ident, $body:ident, $kernel:ident, $vnni:literal, $features:literal,
     $wb:ty, $wsize:expr, $ab:ty, $asize:expr) => {
        #[target_feature(enable = $features)]
        fn $body(x: &[$wb], y: &[$ab]) -> f32 {
            // SAFETY: this function enables every feature the kernel needs.
            unsafe { $kernel::<$wb, $vnni>(x, y) }
        }

        fn $name(n: usize, w: &[u8], act: &[u8]) -> f32 {
            let nb = n / 32;
            let x: &[$wb] = as_blocks(&w[..nb * $wsize]);
            let y: &[$ab] = as_blocks(&act[..nb * $asize]);
            // SAFETY: `vec_dot_fn` hands this function out only when
            // `Isa::Avx512.available()` (AVX-512 F/BW/VL, AVX2, FMA, F16C
            // detected) and, for the `_vnni` variants, AVX-512 VNNI is detected.
            unsafe { $body(x, y) }
        }
    };
}

macro_rules! both {
    ($plain:ident, $vnni:ident, $pb:ident, $vb:ident, $kernel:ident, $wb:ty, $ws:expr, $ab:ty, $as_:expr) => {
        block_dot!(
            $plain,
            $pb,
            $kernel,
            false,
            "avx512f,avx512bw,avx512vl,avx2,fma,f16c",
            $wb,
            $ws,
            $ab,
            $as_
        );
        block_dot!(
            $vnni,
            $vb,
            $kernel,
            true,
            "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c",
            $wb,
            $ws,
            $ab,
            $as_
        );
    };
}

both!(
    vec_dot_q4_0,
    vec_dot_q4_0_vnni,
    q4_0_bw,
    q4_0_vnni,
    dot_sym_seq,
    BlockQ4_0,
    18,
    BlockQ8_0,
    34
);
both!(
    vec_dot_q5_0,
    vec_dot_q5_0_vnni,
    q5_0_bw,
    q5_0_vnni,
    dot_sym_seq,
    BlockQ5_0,
    22,
    BlockQ8_0,
    34
);
both!(
    vec_dot_q8_0,
    vec_dot_q8_0_vnni,
    q8_0_bw,
    q8_0_vnni,
    dot_sym_seq,
    BlockQ8_0,
    34,
    BlockQ8_0,
    34
);
both!(
    vec_dot_iq4_nl,
    vec_dot_iq4_nl_vnni,
    iq4_nl_bw,
    iq4_nl_vnni,
    dot_sym_pairs,
    BlockIq4Nl,
    18,
    BlockQ8_0,
    34
);
both!(
    vec_dot_q4_1,
    vec_dot_q4_1_vnni,
    q4_1_bw,
    q4_1_vnni,
    dot_asym,
    BlockQ4_1,
    20,
    BlockQ8_1,
    36
);
both!(
    vec_dot_q5_1,
    vec_dot_q5_1_vnni,
    q5_1_bw,
    q5_1_vnni,
    dot_asym,
    BlockQ5_1,
    24,
    BlockQ8_1,
    36
);

// ---------------------------------------------------------------------------
// Float dots, bit for bit in the order of ggml's `vec.cpp` as llama.cpp's
// x86 build compiles it on an AVX-512 host.

/// `_mm512_reduce_add_ps` as GCC defines it: the 256-bit halves added, then
/// the 128-bit halves, then lanes (0+2, 1+3), then those two.
///
/// # Safety
/// The caller must have AVX-512F and AVX enabled.
#[inline(always)]
pub(super) unsafe fn reduce16(v: __m512) -> f32 {
    // SAFETY: register-only intrinsics; the caller enables the features.
    unsafe {
        let [lo, hi] = split(v);
        hsum_ps(_mm256_add_ps(hi, lo))
    }
}

/// Σ a·b for f32 (`ggml_vec_dot_f32`) or f16 rows (`ggml_vec_dot_f16`,
/// `F16`), given a loader of 16 converted lanes at `i`: four 16-lane FMA
/// accumulators over blocks of 64 (`GGML_F32_STEP`), folded `(s0+s2) +
/// (s1+s3)` and reduced as [`reduce16`]; the `n % 64` leftovers as GCC
/// compiled ggml's scalar loop: for f32, rounded products added in order,
/// the last `n % 8` fused; for f16, rounded products added in f64
/// (`ggml_float`).
///
/// # Safety
/// The caller must have AVX-512F, AVX2 and FMA enabled; `load(i)` must be
/// valid for every `i + 16 ≤ n − n % 64`.
#[inline(always)]
unsafe fn dot_step64<const F16: bool>(
    n: usize,
    load_a: impl Fn(usize) -> __m512,
    load_b: impl Fn(usize) -> __m512,
    prod: impl Fn(usize) -> f32,
    fused: impl Fn(usize, f32) -> f32,
) -> f32 {
    // SAFETY: register-only intrinsics; the loads are the caller's.
    unsafe {
        let np = n - n % 64;
        let mut acc = [_mm512_setzero_ps(); 4];
        let mut i = 0;
        while i < np {
            for (r, a) in acc.iter_mut().enumerate() {
                *a = _mm512_fmadd_ps(load_a(i + 16 * r), load_b(i + 16 * r), *a);
            }
            i += 64;
        }
        let s = _mm512_add_ps(_mm512_add_ps(acc[0], acc[2]), _mm512_add_ps(acc[1], acc[3]));
        let sum = reduce16(s);
        if F16 {
            let mut sum = sum as f64;
            for j in np..n {
                sum += prod(j) as f64;
            }
            return sum as f32;
        }
        f32_leftovers(np, n, sum, prod, fused)
    }
}

/// `ggml_vec_dot_f32`'s scalar leftovers `np..n` after the 64-steps, as GCC
/// compiled them: rounded products added in order, the last `(n − np) % 8`
/// fused.
#[inline(always)]
pub(super) fn f32_leftovers(
    np: usize,
    n: usize,
    mut sum: f32,
    prod: impl Fn(usize) -> f32,
    fused: impl Fn(usize, f32) -> f32,
) -> f32 {
    let fused_from = n - (n - np) % 8;
    for j in np..fused_from {
        sum += prod(j);
    }
    for j in fused_from..n {
        sum = fused(j, sum);
    }
    sum
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
pub(super) fn f32_avx512(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    // SAFETY: reads the 16 floats at i..i+16, bounds-checked by the slice index.
    let load = |s: &[f32], i: usize| unsafe { _mm512_loadu_ps(s[i..i + 16].as_ptr()) };
    let prod = |j: usize| a[j] * b[j];
    let fused = |j: usize, s: f32| a[j].mul_add(b[j], s);
    // SAFETY: AVX-512F, AVX2 and FMA are enabled here; loads stay below n.
    unsafe { dot_step64::<false>(n, |i| load(a, i), |i| load(b, i), prod, fused) }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
fn f16_avx512(a: &[f16], b: &[f16]) -> f32 {
    let n = a.len().min(b.len());
    // SAFETY: reads the 16 halves at i..i+16, bounds-checked by the slice index.
    let load = |s: &[f16], i: usize| unsafe {
        _mm512_cvtph_ps(_mm256_loadu_si256(s[i..i + 16].as_ptr().cast()))
    };
    let prod = |j: usize| a[j].to_f32() * b[j].to_f32();
    // SAFETY: AVX-512F, AVX2 and FMA are enabled here; loads stay below n.
    unsafe { dot_step64::<true>(n, |i| load(a, i), |i| load(b, i), prod, |_, s| s) }
}

/// 16 bf16 → f32: the bits shifted into the high half.
///
/// # Safety
/// The caller must have AVX-512F/BW/VL enabled.
#[inline(always)]
unsafe fn bf16x16(s: &[bf16]) -> __m512 {
    // SAFETY: reads the 16 values of `s[..16]` (bounds-checked).
    unsafe {
        let h = _mm256_loadu_si256(s[..16].as_ptr().cast());
        _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(h)))
    }
}

/// `ggml_vec_dot_bf16`'s leftovers and result: `sumf` (f64) plus each
/// rounded product from `i`, rounded to f32.
fn bf16_tail(a: &[bf16], b: &[bf16], i: usize, mut sumf: f64) -> f32 {
    for j in i..a.len().min(b.len()) {
        sumf += (a[j].to_f32() * b[j].to_f32()) as f64;
    }
    sumf as f32
}

/// BF16 without `vdpbf16ps`, as ggml's `__AVX512F__` path: two 16-lane
/// accumulators over blocks of 32 taking rounded products (`add(mul)`, not
/// fused), each reduced and added to an f64 sum, then the leftovers.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
fn bf16_avx512(a: &[bf16], b: &[bf16]) -> f32 {
    let n = a.len().min(b.len());
    // SAFETY: AVX-512F/BW/VL are enabled here; slices are bounds-checked.
    unsafe {
        let mut c = [_mm512_setzero_ps(); 2];
        let mut i = 0;
        while i + 32 <= n {
            for (h, ch) in c.iter_mut().enumerate() {
                let p = _mm512_mul_ps(bf16x16(&a[i + 16 * h..]), bf16x16(&b[i + 16 * h..]));
                *ch = _mm512_add_ps(p, *ch);
            }
            i += 32;
        }
        let sumf = reduce16(c[0]) as f64 + reduce16(c[1]) as f64;
        bf16_tail(a, b, i, sumf)
    }
}

/// BF16 with `vdpbf16ps` (ggml's `__AVX512BF16__` path): two accumulators
/// over blocks of 64, each reduced and added to an f64 sum, then the
/// leftovers. The instruction treats denormal inputs as zero, as ggml's does.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma,f16c")]
fn bf16_dp_avx512(a: &[bf16], b: &[bf16]) -> f32 {
    let n = a.len().min(b.len());
    // SAFETY: the loads read 32 values at i..i+32 (bounds-checked); `__m512i`
    // and `__m512bh` are both 64-byte plain vectors; AVX-512 BF16 is enabled here.
    unsafe {
        let load = |s: &[bf16], i: usize| -> __m512bh {
            std::mem::transmute(_mm512_loadu_si512(s[i..i + 32].as_ptr().cast()))
        };
        let mut c = [_mm512_setzero_ps(); 2];
        let mut i = 0;
        while i + 64 <= n {
            c[0] = _mm512_dpbf16_ps(c[0], load(a, i), load(b, i));
            c[1] = _mm512_dpbf16_ps(c[1], load(a, i + 32), load(b, i + 32));
            i += 64;
        }
        let sumf = reduce16(c[0]) as f64 + reduce16(c[1]) as f64;
        bf16_tail(a, b, i, sumf)
    }
}

// Same safe entries as avx2/legacy.rs::vec_dot_f32/f16/bf16: each tier wraps its own
// #[target_feature] kernels and states its own availability check in the SAFETY line; within the
// tier each entry casts its own element type for its own kernel (bf16_dp only where AVX-512 BF16 is
// detected).
// #[target_feature] kernels and states its own availability check in the SAFETY line.
fn vec_dot_f32(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let (a, b): (&[f32], &[f32]) = (as_blocks(&w[..n * 4]), as_blocks(&act[..n * 4]));
    // SAFETY: handed out by `vec_dot_fn` only when `Isa::Avx512.available()`.
    unsafe { f32_avx512(a, b) }
}

fn vec_dot_f16(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let (a, b): (&[f16], &[f16]) = (as_blocks(&w[..n * 2]), as_blocks(&act[..n * 2]));
    // SAFETY: handed out by `vec_dot_fn` only when `Isa::Avx512.available()`.
    unsafe { f16_avx512(a, b) }
}

fn vec_dot_bf16(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let (a, b): (&[bf16], &[bf16]) = (as_blocks(&w[..n * 2]), as_blocks(&act[..n * 2]));
    // SAFETY: handed out by `vec_dot_fn` only when `Isa::Avx512.available()`.
    unsafe { bf16_avx512(a, b) }
}

fn vec_dot_bf16_dp(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let (a, b): (&[bf16], &[bf16]) = (as_blocks(&w[..n * 2]), as_blocks(&act[..n * 2]));
    // SAFETY: handed out by `vec_dot_fn` only when `Isa::Avx512.available()`
    // and AVX-512 BF16 is detected.
    unsafe { bf16_dp_avx512(a, b) }
}
