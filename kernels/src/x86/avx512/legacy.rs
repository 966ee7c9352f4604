//! AVX-512 (F/BW/VL, with VNNI and BF16 where detected) kernels for the
//! 32-element block types and the float types.
//!
//! Block dots put two blocks in one 512-bit register (lanes 0..8 the first,
//! 8..16 the second), take the byte dot with `vpdpbusd` when AVX-512 VNNI is
//! present (else `vpmaddubsw` + `vpmaddwd`), and fuse the 16 i32 lanes into f32
//! accumulators with a per-half scale vector: four blocks per iteration, one
//! horizontal sum per call. The Q8_0/Q8_1 activation quantisers are in
//! `quant`; F16/BF16 are the AVX2 tier's (the table falls back to them).

use std::arch::x86_64::*;

use half::{bf16, f16};

use crate::blocks::as_blocks;
use crate::isa::{Isa, QuantizeFn, VecDotFn};
use crate::scalar::iq4_nl::BlockIq4Nl;
use crate::scalar::q4_0::BlockQ4_0;
use crate::scalar::q4_1::BlockQ4_1;
use crate::scalar::q5_0::BlockQ5_0;
use crate::scalar::q5_1::BlockQ5_1;
use crate::scalar::q8_0::BlockQ8_0;
use crate::scalar::q8_1::BlockQ8_1;
use crate::x86::avx2::legacy::{f16_to_f32, halves8, AsymBlock, SymBlock};
use crate::GgmlType;

fn has_vnni() -> bool {
    is_x86_feature_detected!("avx512vnni")
}

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
pub fn vec_dot_variants(ty: GgmlType) -> Vec<(&'static str, VecDotFn)> {
    if !Isa::Avx512.available() {
        return Vec::new();
    }
    let pair = |plain: VecDotFn, vnni: VecDotFn| {
        let mut v = vec![("bw", plain)];
        if has_vnni() {
            v.push(("vnni", vnni));
        }
        v
    };
    match ty {
        GgmlType::Q4_0 => pair(vec_dot_q4_0, vec_dot_q4_0_vnni),
        GgmlType::Q5_0 => pair(vec_dot_q5_0, vec_dot_q5_0_vnni),
        GgmlType::Q8_0 => pair(vec_dot_q8_0, vec_dot_q8_0_vnni),
        GgmlType::IQ4_NL => pair(vec_dot_iq4_nl, vec_dot_iq4_nl_vnni),
        GgmlType::Q4_1 => pair(vec_dot_q4_1, vec_dot_q4_1_vnni),
        GgmlType::Q5_1 => pair(vec_dot_q5_1, vec_dot_q5_1_vnni),
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

/// `a` in lanes 0..8, `b` in lanes 8..16.
///
/// # Safety
/// The caller must have AVX-512F enabled.
#[inline(always)]
unsafe fn halves(a: f32, b: f32) -> __m512 {
    // SAFETY: register-only intrinsics; AVX-512F is enabled by the caller.
    unsafe { _mm512_mask_blend_ps(0xff00, _mm512_set1_ps(a), _mm512_set1_ps(b)) }
}

/// Four scale products spread over two registers: lanes 0..8 / 8..16 of the
/// first hold `d[0]` / `d[1]`, of the second `d[2]` / `d[3]`.
///
/// # Safety
/// The caller must have AVX-512F enabled.
#[inline(always)]
pub(crate) unsafe fn spread4(d: __m128) -> (__m512, __m512) {
    // SAFETY: register-only intrinsics; AVX-512F is enabled by the caller.
    unsafe {
        let z = _mm512_castps128_ps512(d);
        let i01 = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
        let i23 = _mm512_setr_epi32(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
        (_mm512_permutexvar_ps(i01, z), _mm512_permutexvar_ps(i23, z))
    }
}

/// Unsigned × signed byte dot into 16 f32 lanes (4 products per lane).
///
/// # Safety
/// The caller must have AVX-512F/BW enabled, and AVX-512 VNNI when `VNNI`.
#[inline(always)]
unsafe fn dot_us<const VNNI: bool>(u: __m512i, s: __m512i) -> __m512 {
    // SAFETY: register-only intrinsics; the features are enabled by the caller.
    unsafe {
        let i = if VNNI {
            _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, s)
        } else {
            _mm512_madd_epi16(_mm512_maddubs_epi16(u, s), _mm512_set1_epi16(1))
        };
        _mm512_cvtepi32_ps(i)
    }
}

/// Signed × signed byte dot: |x| × (y negated where x < 0), valid for y ≠ -128.
///
/// # Safety
/// As [`dot_us`].
#[inline(always)]
unsafe fn dot_ss<const VNNI: bool>(x: __m512i, y: __m512i) -> __m512 {
    // SAFETY: register-only intrinsics; the features are enabled by the caller.
    unsafe {
        let neg = _mm512_movepi8_mask(x);
        let sy = _mm512_mask_sub_epi8(y, neg, _mm512_setzero_si512(), y);
        dot_us::<VNNI>(_mm512_abs_epi8(x), sy)
    }
}

/// One pair of blocks of signed-level weights: `acc + d·(x·y)` with `d` the
/// per-half scale products; `second` multiplies the second block's scale (0
/// for a lone block paired with itself: 0·p adds exactly 0).
///
/// # Safety
/// As [`dot_sym`].
#[inline(always)]
pub(crate) unsafe fn pair_sym<B: SymBlock, const VNNI: bool>(
    x: [&B; 2],
    y: [&BlockQ8_0; 2],
    second: f32,
    acc: __m512,
) -> __m512 {
    // SAFETY: register-only work on the blocks' bytes; the caller enables the features.
    unsafe {
        let d = halves(
            x[0].scale() * y[0].scale(),
            second * (x[1].scale() * y[1].scale()),
        );
        let p = dot_ss::<VNNI>(
            join(x[0].levels(), x[1].levels()),
            join(y[0].levels(), y[1].levels()),
        );
        _mm512_fmadd_ps(d, p, acc)
    }
}

/// Σ_blocks dx·dy·(x·y) for signed-level weights against Q8_0.
///
/// # Safety
/// The caller must have AVX-512F/BW/VL, AVX2, FMA and F16C enabled, and
/// AVX-512 VNNI when `VNNI`.
#[inline(always)]
unsafe fn dot_sym<B: SymBlock, const VNNI: bool>(x: &[B], y: &[BlockQ8_0]) -> f32 {
    // SAFETY: block accesses are through slices; intrinsics need only the
    // features the caller enables.
    unsafe {
        let mut acc = [_mm512_setzero_ps(); 2];
        let mut xs = x.chunks_exact(4);
        let mut ys = y.chunks_exact(4);
        for (xq, yq) in (&mut xs).zip(&mut ys) {
            let f = halves8(
                [
                    xq[0].d_bits(),
                    xq[1].d_bits(),
                    xq[2].d_bits(),
                    xq[3].d_bits(),
                ],
                [
                    yq[0].d_bits(),
                    yq[1].d_bits(),
                    yq[2].d_bits(),
                    yq[3].d_bits(),
                ],
            );
            let d = _mm_mul_ps(_mm256_castps256_ps128(f), _mm256_extractf128_ps(f, 1));
            let (d01, d23) = spread4(d);
            let p01 = dot_ss::<VNNI>(
                join(xq[0].levels(), xq[1].levels()),
                join(yq[0].levels(), yq[1].levels()),
            );
            let p23 = dot_ss::<VNNI>(
                join(xq[2].levels(), xq[3].levels()),
                join(yq[2].levels(), yq[3].levels()),
            );
            acc[0] = _mm512_fmadd_ps(d01, p01, acc[0]);
            acc[1] = _mm512_fmadd_ps(d23, p23, acc[1]);
        }
        let (xr, yr) = (xs.remainder(), ys.remainder());
        if xr.len() >= 2 {
            acc[0] = pair_sym::<B, VNNI>([&xr[0], &xr[1]], [&yr[0], &yr[1]], 1.0, acc[0]);
        }
        if xr.len() % 2 == 1 {
            let (bx, by) = (&xr[xr.len() - 1], &yr[xr.len() - 1]);
            acc[1] = pair_sym::<B, VNNI>([bx, bx], [by, by], 0.0, acc[1]);
        }
        _mm512_reduce_add_ps(_mm512_add_ps(acc[0], acc[1]))
    }
}

/// One pair of min-offset blocks: returns `acc + d·(x·y)` and adds the
/// blocks' `m·s` terms to `mins` (`second` as in [`pair_sym`]).
///
/// # Safety
/// As [`dot_sym`].
#[inline(always)]
unsafe fn pair_asym<B: AsymBlock, const VNNI: bool>(
    x: [&B; 2],
    y: [&BlockQ8_1; 2],
    second: f32,
    acc: __m512,
    mins: &mut f32,
) -> __m512 {
    // SAFETY: the loads read the 32 level bytes of each activation block; the
    // caller enables the features.
    unsafe {
        let d = halves(
            x[0].scale() * f16_to_f32(y[0].d),
            second * (x[1].scale() * f16_to_f32(y[1].d)),
        );
        *mins += x[0].min() * f16_to_f32(y[0].s);
        *mins += second * (x[1].min() * f16_to_f32(y[1].s));
        let ly = join(
            _mm256_loadu_si256(y[0].qs.as_ptr().cast()),
            _mm256_loadu_si256(y[1].qs.as_ptr().cast()),
        );
        let p = dot_us::<VNNI>(join(x[0].levels(), x[1].levels()), ly);
        _mm512_fmadd_ps(d, p, acc)
    }
}

/// Σ_blocks dx·dy·(x·y) + mx·sy for min-offset weights against Q8_1.
///
/// # Safety
/// As [`dot_sym`].
#[inline(always)]
unsafe fn dot_asym<B: AsymBlock, const VNNI: bool>(x: &[B], y: &[BlockQ8_1]) -> f32 {
    // SAFETY: block accesses are through slices; intrinsics need only the
    // features the caller enables.
    unsafe {
        let mut mins = 0f32;
        let mut acc = [_mm512_setzero_ps(); 2];
        let mut xs = x.chunks_exact(4);
        let mut ys = y.chunks_exact(4);
        let mut mins4 = _mm_setzero_ps();
        for (xq, yq) in (&mut xs).zip(&mut ys) {
            let xb = [
                xq[0].dm_bits(),
                xq[1].dm_bits(),
                xq[2].dm_bits(),
                xq[3].dm_bits(),
            ];
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
            mins4 = _mm_fmadd_ps(
                _mm256_extractf128_ps(fx, 1),
                _mm256_extractf128_ps(fy, 1),
                mins4,
            );
            let (d01, d23) = spread4(d);
            let ly = |k: usize| _mm256_loadu_si256(yq[k].qs.as_ptr().cast());
            let p01 = dot_us::<VNNI>(join(xq[0].levels(), xq[1].levels()), join(ly(0), ly(1)));
            let p23 = dot_us::<VNNI>(join(xq[2].levels(), xq[3].levels()), join(ly(2), ly(3)));
            acc[0] = _mm512_fmadd_ps(d01, p01, acc[0]);
            acc[1] = _mm512_fmadd_ps(d23, p23, acc[1]);
        }
        let m = _mm_add_ps(mins4, _mm_movehl_ps(mins4, mins4));
        mins += _mm_cvtss_f32(_mm_add_ss(m, _mm_movehdup_ps(m)));
        let (xr, yr) = (xs.remainder(), ys.remainder());
        if xr.len() >= 2 {
            let (xp, yp) = ([&xr[0], &xr[1]], [&yr[0], &yr[1]]);
            acc[0] = pair_asym::<B, VNNI>(xp, yp, 1.0, acc[0], &mut mins);
        }
        if xr.len() % 2 == 1 {
            let (bx, by) = (&xr[xr.len() - 1], &yr[xr.len() - 1]);
            acc[1] = pair_asym::<B, VNNI>([bx, bx], [by, by], 0.0, acc[1], &mut mins);
        }
        _mm512_reduce_add_ps(_mm512_add_ps(acc[0], acc[1])) + mins
    }
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
    dot_sym,
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
    dot_sym,
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
    dot_sym,
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
    dot_sym,
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
// Float dots: four 16-lane accumulators, a masked tail, one reduction.

/// Σ a·b for `n` elements given loaders of 16 lanes (`load(i, mask)` reads the
/// lanes of `mask` at `i..`, zeros elsewhere).
///
/// # Safety
/// The caller must have AVX-512F enabled; the loaders must be valid for every
/// `(i, mask)` with the masked lanes below `n`.
#[inline(always)]
unsafe fn dot_by16(
    n: usize,
    load_a: impl Fn(usize, __mmask16) -> __m512,
    load_b: impl Fn(usize, __mmask16) -> __m512,
) -> f32 {
    // SAFETY: register-only intrinsics; the loaders are the caller's.
    unsafe {
        let all: __mmask16 = 0xffff;
        let mut acc = [_mm512_setzero_ps(); 4];
        let mut i = 0;
        while i + 64 <= n {
            for (k, a) in acc.iter_mut().enumerate() {
                *a = _mm512_fmadd_ps(load_a(i + 16 * k, all), load_b(i + 16 * k, all), *a);
            }
            i += 64;
        }
        while i + 16 <= n {
            acc[0] = _mm512_fmadd_ps(load_a(i, all), load_b(i, all), acc[0]);
            i += 16;
        }
        if i < n {
            let m: __mmask16 = (1u16 << (n - i)) - 1;
            acc[1] = _mm512_fmadd_ps(load_a(i, m), load_b(i, m), acc[1]);
        }
        let s = _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3]));
        _mm512_reduce_add_ps(s)
    }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
fn f32_avx512(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    // SAFETY: the masked load touches only lanes below n (the loop's mask).
    let load =
        |s: &[f32], i: usize, m: __mmask16| unsafe { _mm512_maskz_loadu_ps(m, s[i..].as_ptr()) };
    // SAFETY: AVX-512F is enabled here; loads stay below n.
    unsafe { dot_by16(n, |i, m| load(a, i, m), |i, m| load(b, i, m)) }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
fn f16_avx512(a: &[f16], b: &[f16]) -> f32 {
    let n = a.len().min(b.len());
    // SAFETY: the masked load touches only lanes below n (the loop's mask);
    // AVX-512 BW/VL are enabled here.
    let load = |s: &[f16], i: usize, m: __mmask16| unsafe {
        _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, s[i..].as_ptr().cast()))
    };
    // SAFETY: AVX-512F is enabled here; loads stay below n.
    unsafe { dot_by16(n, |i, m| load(a, i, m), |i, m| load(b, i, m)) }
}

/// 16 bf16 (masked) → f32: the bits shifted into the high half.
///
/// # Safety
/// The caller must have AVX-512F/BW/VL enabled and the masked lanes in bounds.
#[inline(always)]
unsafe fn bf16x16(s: &[bf16], m: __mmask16) -> __m512 {
    // SAFETY: the masked load touches only the lanes of `m`, in bounds by the caller.
    unsafe {
        let h = _mm256_maskz_loadu_epi16(m, s.as_ptr().cast());
        _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(h)))
    }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
fn bf16_avx512(a: &[bf16], b: &[bf16]) -> f32 {
    let n = a.len().min(b.len());
    // SAFETY: AVX-512F/BW/VL are enabled here; dot_by16 masks lanes ≥ n.
    unsafe { dot_by16(n, |i, m| bf16x16(&a[i..], m), |i, m| bf16x16(&b[i..], m)) }
}

/// BF16 with `vdpbf16ps`: 32 pairs per instruction, products exact in f32.
/// The instruction treats denormal inputs as zero; their products are below
/// 2^-126 · 2^8 and vanish in any f32 sum of normal terms.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma,f16c")]
fn bf16_dp_avx512(a: &[bf16], b: &[bf16]) -> f32 {
    let n = a.len().min(b.len());
    // SAFETY: masked loads touch only lanes below n; `__m512i` and `__m512bh`
    // are both 64-byte plain vectors; AVX-512 BF16 is enabled here.
    unsafe {
        let load = |s: &[bf16], i: usize, m: __mmask32| -> __m512bh {
            std::mem::transmute(_mm512_maskz_loadu_epi16(m, s[i..].as_ptr().cast()))
        };
        let mut acc = [_mm512_setzero_ps(); 2];
        let mut i = 0;
        while i + 64 <= n {
            acc[0] = _mm512_dpbf16_ps(acc[0], load(a, i, u32::MAX), load(b, i, u32::MAX));
            acc[1] = _mm512_dpbf16_ps(acc[1], load(a, i + 32, u32::MAX), load(b, i + 32, u32::MAX));
            i += 64;
        }
        while i < n {
            let m: __mmask32 = if n - i >= 32 {
                u32::MAX
            } else {
                (1u32 << (n - i)) - 1
            };
            acc[0] = _mm512_dpbf16_ps(acc[0], load(a, i, m), load(b, i, m));
            i += 32;
        }
        _mm512_reduce_add_ps(_mm512_add_ps(acc[0], acc[1]))
    }
}

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
