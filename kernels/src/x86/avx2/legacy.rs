//! AVX2 (+FMA, F16C) kernels for the 32-element block types and the float
//! types: dot products against the activation layouts and the activation
//! quantisers (Q8_0, Q8_1, F16, BF16), bit-exact with `scalar`.
//!
//! Dots: each block's 32 levels are one 256-bit register; the integer dot is
//! `maddubs` (u8 × i8 → i16 pairs) then `madd` with ones (→ 8 × i32), exact for
//! every level range here because activation levels lie in [-127, 127] (our
//! Q8 quantisers never produce -128). The 8 lanes are converted to f32 and
//! fused into two f32 accumulators with the block's scale product, two blocks
//! per iteration; one horizontal sum at the end.

use std::arch::x86_64::*;

use bytemuck::Pod;
use half::{bf16, f16};

use crate::blocks::{as_blocks, as_blocks_mut};
use crate::cpu::Isa;
use crate::scalar::iq4_nl::{BlockIq4Nl, KVALUES};
use crate::scalar::q4_0::BlockQ4_0;
use crate::scalar::q4_1::BlockQ4_1;
use crate::scalar::q5_0::BlockQ5_0;
use crate::scalar::q5_1::BlockQ5_1;
use crate::scalar::q8_0::BlockQ8_0;
use crate::scalar::q8_1::BlockQ8_1;
use crate::sig::{QuantizeFn, VecDotFn};
use crate::GgmlType;

/// This tier's dot product for `ty`, when the host has AVX2, FMA and F16C.
pub fn vec_dot_fn(ty: GgmlType) -> Option<VecDotFn> {
    if !Isa::Avx2.available() {
        return None;
    }
    Some(match ty {
        GgmlType::Q4_0 => vec_dot_q4_0,
        GgmlType::Q4_1 => vec_dot_q4_1,
        GgmlType::Q5_0 => vec_dot_q5_0,
        GgmlType::Q5_1 => vec_dot_q5_1,
        GgmlType::Q8_0 => vec_dot_q8_0,
        GgmlType::IQ4_NL => vec_dot_iq4_nl,
        GgmlType::F32 => vec_dot_f32,
        GgmlType::F16 => vec_dot_f16,
        GgmlType::BF16 => vec_dot_bf16,
        _ => return None,
    })
}

/// This tier's activation quantiser into `act_ty`, when the host has AVX2.
pub fn quantize_fn(act_ty: GgmlType) -> Option<QuantizeFn> {
    if !Isa::Avx2.available() {
        return None;
    }
    Some(match act_ty {
        GgmlType::Q8_0 => quantize_q8_0,
        GgmlType::Q8_1 => quantize_q8_1,
        GgmlType::F16 => quantize_f16,
        GgmlType::BF16 => quantize_bf16,
        _ => return None,
    })
}

// ---------------------------------------------------------------------------
// Shared pieces (also used by the AVX-512 tier, whose entry points enable AVX2).

/// A weight block whose 32 levels are signed bytes (`x = d·level`).
pub(crate) trait SymBlock: Pod {
    /// The raw f16 bits of the scale.
    fn d_bits(&self) -> u16;
    /// # Safety
    /// The caller must have AVX2 and F16C enabled.
    unsafe fn scale(&self) -> f32;
    /// The 32 signed levels in element order, each in [-128, 127].
    ///
    /// # Safety
    /// The caller must have AVX2 enabled.
    unsafe fn levels(&self) -> __m256i;
}

/// A weight block with levels in [0, 31] and a minimum (`x = d·level + m`).
pub(crate) trait AsymBlock: Pod {
    /// The raw f16 bits of the scale and of the minimum.
    fn dm_bits(&self) -> [u16; 2];
    /// # Safety
    /// The caller must have AVX2 and F16C enabled.
    unsafe fn scale(&self) -> f32;
    /// # Safety
    /// The caller must have AVX2 and F16C enabled.
    unsafe fn min(&self) -> f32;
    /// # Safety
    /// The caller must have AVX2 enabled.
    unsafe fn levels(&self) -> __m256i;
}

/// f16 → f32 by F16C (exact).
///
/// # Safety
/// The caller must have F16C enabled.
#[inline(always)]
pub(crate) unsafe fn f16_to_f32(h: f16) -> f32 {
    // SAFETY: register-only intrinsics; F16C is enabled by the caller.
    unsafe { _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h.to_bits() as i32))) }
}

/// The 32 nibbles of 16 bytes, low nibbles (elements 0..16) first.
///
/// # Safety
/// The caller must have AVX2 enabled.
#[inline(always)]
unsafe fn nibbles(qs: &[u8; 16]) -> __m256i {
    // SAFETY: the load reads exactly the 16 bytes of `qs`; AVX2 is enabled by the caller.
    unsafe {
        let t = _mm_loadu_si128(qs.as_ptr().cast());
        let b = _mm256_set_m128i(_mm_srli_epi16(t, 4), t);
        _mm256_and_si256(b, _mm256_set1_epi8(0x0f))
    }
}

/// 0xFF in byte `j` where bit `j` of `qh` is set, else 0.
///
/// # Safety
/// The caller must have AVX2 enabled.
#[inline(always)]
unsafe fn bits_to_bytes(qh: [u8; 4]) -> __m256i {
    // SAFETY: register-only intrinsics; AVX2 is enabled by the caller.
    unsafe {
        let v = _mm256_set1_epi32(i32::from_le_bytes(qh));
        // Byte j takes byte j/8 of qh ...
        let pick = _mm256_set_epi64x(
            0x0303_0303_0303_0303,
            0x0202_0202_0202_0202,
            0x0101_0101_0101_0101,
            0,
        );
        let v = _mm256_shuffle_epi8(v, pick);
        // ... and is all ones iff bit j%8 was set once the other bits are forced on.
        let others = _mm256_set1_epi64x(0x7fbf_dfef_f7fb_fdfe_u64 as i64);
        _mm256_cmpeq_epi8(_mm256_or_si256(v, others), _mm256_set1_epi64x(-1))
    }
}

impl SymBlock for BlockQ8_0 {
    fn d_bits(&self) -> u16 {
        self.d.to_bits()
    }
    #[inline(always)]
    unsafe fn scale(&self) -> f32 {
        // SAFETY: F16C is enabled by the caller.
        unsafe { f16_to_f32(self.d) }
    }
    #[inline(always)]
    unsafe fn levels(&self) -> __m256i {
        // SAFETY: reads exactly the 32 level bytes; AVX2 is enabled by the caller.
        unsafe { _mm256_loadu_si256(self.qs.as_ptr().cast()) }
    }
}

impl SymBlock for BlockQ4_0 {
    fn d_bits(&self) -> u16 {
        self.d.to_bits()
    }
    #[inline(always)]
    unsafe fn scale(&self) -> f32 {
        // SAFETY: F16C is enabled by the caller.
        unsafe { f16_to_f32(self.d) }
    }
    #[inline(always)]
    unsafe fn levels(&self) -> __m256i {
        // SAFETY: AVX2 is enabled by the caller.
        unsafe { _mm256_sub_epi8(nibbles(&self.qs), _mm256_set1_epi8(8)) }
    }
}

impl SymBlock for BlockQ5_0 {
    fn d_bits(&self) -> u16 {
        self.d.to_bits()
    }
    #[inline(always)]
    unsafe fn scale(&self) -> f32 {
        // SAFETY: F16C is enabled by the caller.
        unsafe { f16_to_f32(self.d) }
    }
    #[inline(always)]
    unsafe fn levels(&self) -> __m256i {
        // SAFETY: AVX2 is enabled by the caller.
        unsafe {
            // Where the fifth bit is clear, q − 16 = q | 0xF0 as i8; where set, q4.
            let clear_hi = _mm256_andnot_si256(bits_to_bytes(self.qh), _mm256_set1_epi8(-16));
            _mm256_or_si256(nibbles(&self.qs), clear_hi)
        }
    }
}

impl SymBlock for BlockIq4Nl {
    fn d_bits(&self) -> u16 {
        self.d.to_bits()
    }
    #[inline(always)]
    unsafe fn scale(&self) -> f32 {
        // SAFETY: F16C is enabled by the caller.
        unsafe { f16_to_f32(self.d) }
    }
    #[inline(always)]
    unsafe fn levels(&self) -> __m256i {
        // SAFETY: the table load reads the 16 bytes of KVALUES; AVX2 is enabled by the caller.
        unsafe {
            let t = _mm_loadu_si128(KVALUES.as_ptr().cast());
            _mm256_shuffle_epi8(_mm256_set_m128i(t, t), nibbles(&self.qs))
        }
    }
}

impl AsymBlock for BlockQ4_1 {
    fn dm_bits(&self) -> [u16; 2] {
        [self.d.to_bits(), self.m.to_bits()]
    }
    #[inline(always)]
    unsafe fn scale(&self) -> f32 {
        // SAFETY: F16C is enabled by the caller.
        unsafe { f16_to_f32(self.d) }
    }
    #[inline(always)]
    unsafe fn min(&self) -> f32 {
        // SAFETY: F16C is enabled by the caller.
        unsafe { f16_to_f32(self.m) }
    }
    #[inline(always)]
    unsafe fn levels(&self) -> __m256i {
        // SAFETY: AVX2 is enabled by the caller.
        unsafe { nibbles(&self.qs) }
    }
}

// Same d/m accessors as the BlockQ4_1 impl above: a trait default cannot read the
// struct fields, and only levels() differs (Q5_1 adds the fifth bit from qh).
impl AsymBlock for BlockQ5_1 {
    fn dm_bits(&self) -> [u16; 2] {
        [self.d.to_bits(), self.m.to_bits()]
    }
    #[inline(always)]
    unsafe fn scale(&self) -> f32 {
        // SAFETY: F16C is enabled by the caller.
        unsafe { f16_to_f32(self.d) }
    }
    #[inline(always)]
    unsafe fn min(&self) -> f32 {
        // SAFETY: F16C is enabled by the caller.
        unsafe { f16_to_f32(self.m) }
    }
    #[inline(always)]
    unsafe fn levels(&self) -> __m256i {
        // SAFETY: AVX2 is enabled by the caller.
        unsafe {
            let hi = _mm256_and_si256(bits_to_bytes(self.qh), _mm256_set1_epi8(0x10));
            _mm256_or_si256(nibbles(&self.qs), hi)
        }
    }
}

/// Sum of the 8 lanes.
///
/// # Safety
/// The caller must have AVX enabled.
#[inline(always)]
pub(crate) unsafe fn hsum_ps(v: __m256) -> f32 {
    // SAFETY: register-only intrinsics; AVX is enabled by the caller.
    unsafe {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
    }
}

/// Unsigned × signed byte dot in 8 f32 lanes (each lane: 4 products summed).
///
/// # Safety
/// The caller must have AVX2 enabled.
#[inline(always)]
unsafe fn dot_us(u: __m256i, s: __m256i) -> __m256 {
    // SAFETY: register-only intrinsics; AVX2 is enabled by the caller.
    unsafe {
        let pairs = _mm256_maddubs_epi16(u, s);
        _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, _mm256_set1_epi16(1)))
    }
}

/// Signed × signed byte dot: |x| × (y with x's sign), valid for y ≠ -128.
///
/// # Safety
/// The caller must have AVX2 enabled.
#[inline(always)]
unsafe fn dot_ss(x: __m256i, y: __m256i) -> __m256 {
    // SAFETY: register-only intrinsics; AVX2 is enabled by the caller.
    unsafe { dot_us(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x)) }
}

/// Eight f16 values (as bits) → f32: `a` in lanes 0..4, `b` in lanes 4..8.
///
/// # Safety
/// The caller must have AVX2 and F16C enabled.
#[inline(always)]
pub(crate) unsafe fn halves8(a: [u16; 4], b: [u16; 4]) -> __m256 {
    // SAFETY: register-only intrinsics; the caller enables the features.
    unsafe {
        let h = _mm_setr_epi16(
            a[0] as i16,
            a[1] as i16,
            a[2] as i16,
            a[3] as i16,
            b[0] as i16,
            b[1] as i16,
            b[2] as i16,
            b[3] as i16,
        );
        _mm256_cvtph_ps(h)
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

/// Σ_blocks dx·dy·(x·y) for signed-level weights against Q8_0, in ggml's
/// x86 order (`ggml_vec_dot_q8_0_q8_0` and the Q4_0 / Q5_0 twins, AVX2 path,
/// also llamafile's tinyBLAS_Q0_AVX per output): one f32 accumulator, block
/// by block `acc = fma(dx·dy, lanes, acc)`, then one horizontal sum. Four
/// blocks per iteration share one scale conversion and one multiply (the
/// same f32 products as the scalar code).
///
/// # Safety
/// The caller must have AVX2, FMA and F16C enabled.
#[inline(always)]
unsafe fn dot_sym<B: SymBlock>(x: &[B], y: &[BlockQ8_0]) -> f32 {
    // SAFETY: every block access is through slices; intrinsics need only the
    // features the caller enables.
    unsafe {
        let mut acc = _mm256_setzero_ps();
        let mut xs = x.chunks_exact(4);
        let mut ys = y.chunks_exact(4);
        for (xq, yq) in (&mut xs).zip(&mut ys) {
            let d = scale_products(xq, yq);
            for k in 0..4 {
                let p = dot_ss(xq[k].levels(), yq[k].levels());
                acc = _mm256_fmadd_ps(lane(d, k as i32), p, acc);
            }
        }
        for (bx, by) in xs.remainder().iter().zip(ys.remainder()) {
            let d = _mm256_set1_ps(bx.scale() * by.scale());
            acc = _mm256_fmadd_ps(d, dot_ss(bx.levels(), by.levels()), acc);
        }
        hsum_ps(acc)
    }
}

/// The four `dx·dy` products of four block pairs.
///
/// # Safety
/// The caller must have AVX2 and F16C enabled.
#[inline(always)]
pub(crate) unsafe fn scale_products<B: SymBlock>(xq: &[B], yq: &[BlockQ8_0]) -> __m128 {
    // SAFETY: register-only intrinsics; the caller enables the features.
    unsafe {
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
        _mm_mul_ps(_mm256_castps256_ps128(f), _mm256_extractf128_ps(f, 1))
    }
}

/// [`dot_sym`] in the order of ggml's x86 `ggml_vec_dot_iq4_nl_q8_0`: block
/// pairs into two accumulators (even, odd), their sum reduced once, then an
/// odd last block added in scalar `sumf = fma(dx·dy, Σ, sumf)` (GCC contracts
/// ggml's `sumf += d * sumi`).
///
/// # Safety
/// The caller must have AVX2, FMA and F16C enabled.
#[inline(always)]
unsafe fn dot_sym_pairs<B: SymBlock>(x: &[B], y: &[BlockQ8_0]) -> f32 {
    // SAFETY: every block access is through slices; intrinsics need only the
    // features the caller enables.
    unsafe {
        let mut acc = [_mm256_setzero_ps(); 2];
        let mut xs = x.chunks_exact(4);
        let mut ys = y.chunks_exact(4);
        for (xq, yq) in (&mut xs).zip(&mut ys) {
            let d = scale_products(xq, yq);
            for k in 0..4 {
                let p = dot_ss(xq[k].levels(), yq[k].levels());
                acc[k & 1] = _mm256_fmadd_ps(lane(d, k as i32), p, acc[k & 1]);
            }
        }
        let (xr, yr) = (xs.remainder(), ys.remainder());
        let pairs = xr.len() / 2 * 2;
        for k in 0..pairs {
            let d = _mm256_set1_ps(xr[k].scale() * yr[k].scale());
            let p = dot_ss(xr[k].levels(), yr[k].levels());
            acc[k & 1] = _mm256_fmadd_ps(d, p, acc[k & 1]);
        }
        let mut sum = hsum_ps(_mm256_add_ps(acc[0], acc[1]));
        for (bx, by) in xr[pairs..].iter().zip(&yr[pairs..]) {
            let lanes = _mm256_cvtps_epi32(dot_ss(bx.levels(), by.levels()));
            let l = _mm_add_epi32(
                _mm256_castsi256_si128(lanes),
                _mm256_extracti128_si256(lanes, 1),
            );
            let l = _mm_add_epi32(l, _mm_unpackhi_epi64(l, l));
            let l = _mm_add_epi32(l, _mm_shuffle_epi32(l, 1));
            let sumi = _mm_cvtsi128_si32(l) as f32;
            sum = (by.scale() * bx.scale()).mul_add(sumi, sum);
        }
        sum
    }
}

/// Σ_blocks dx·dy·(x·y) + mx·sy for min-offset weights against Q8_1, in
/// ggml's x86 order (`ggml_vec_dot_q4_1_q8_1` / `q5_1`, AVX2 path): one f32
/// accumulator `acc = fma(dx·dy, lanes, acc)` block by block, the `m·s` terms
/// summed in scalar block order (`summs = fma(m, s, summs)`: GCC contracts
/// ggml's `summs += m * s`), result `hsum(acc) + summs`.
///
/// # Safety
/// The caller must have AVX2, FMA and F16C enabled.
#[inline(always)]
unsafe fn dot_asym<B: AsymBlock>(x: &[B], y: &[BlockQ8_1]) -> f32 {
    // SAFETY: every block access is through slices; intrinsics need only the
    // features the caller enables.
    unsafe {
        let mut acc = _mm256_setzero_ps();
        let mut summs = 0f32;
        for (bx, by) in x.iter().zip(y) {
            let d = _mm256_set1_ps(bx.scale() * f16_to_f32(by.d));
            let ly = _mm256_loadu_si256(by.qs.as_ptr().cast());
            acc = _mm256_fmadd_ps(d, dot_us(bx.levels(), ly), acc);
            summs = bx.min().mul_add(f16_to_f32(by.s), summs);
        }
        hsum_ps(acc) + summs
    }
}

macro_rules! block_dot {
    ($name:ident, $body:ident, $kernel:ident, $wb:ty, $wsize:expr, $ab:ty, $asize:expr) => {
        #[target_feature(enable = "avx2,fma,f16c")]
        fn $body(x: &[$wb], y: &[$ab]) -> f32 {
            // SAFETY: this function has AVX2, FMA and F16C enabled.
            unsafe { $kernel(x, y) }
        }

        fn $name(n: usize, w: &[u8], act: &[u8]) -> f32 {
            let nb = n / 32;
            let x: &[$wb] = as_blocks(&w[..nb * $wsize]);
            let y: &[$ab] = as_blocks(&act[..nb * $asize]);
            // SAFETY: `vec_dot_fn` hands this function out only when
            // `Isa::Avx2.available()` (AVX2, FMA and F16C detected).
            unsafe { $body(x, y) }
        }
    };
}

block_dot!(
    vec_dot_q4_0,
    q4_0_avx2,
    dot_sym,
    BlockQ4_0,
    18,
    BlockQ8_0,
    34
);
block_dot!(
    vec_dot_q5_0,
    q5_0_avx2,
    dot_sym,
    BlockQ5_0,
    22,
    BlockQ8_0,
    34
);
block_dot!(
    vec_dot_q8_0,
    q8_0_avx2,
    dot_sym,
    BlockQ8_0,
    34,
    BlockQ8_0,
    34
);
block_dot!(
    vec_dot_iq4_nl,
    iq4_nl_avx2,
    dot_sym_pairs,
    BlockIq4Nl,
    18,
    BlockQ8_0,
    34
);
block_dot!(
    vec_dot_q4_1,
    q4_1_avx2,
    dot_asym,
    BlockQ4_1,
    20,
    BlockQ8_1,
    36
);
block_dot!(
    vec_dot_q5_1,
    q5_1_avx2,
    dot_asym,
    BlockQ5_1,
    24,
    BlockQ8_1,
    36
);

// ---------------------------------------------------------------------------
// Float dots: four 8-lane FMA accumulators, exact conversions to f32.

/// Σ a·b over f32 slices of equal length, 32 elements per iteration.
///
/// # Safety
/// The caller must have AVX2 and FMA enabled; `load(i)` must be valid for every
/// `i + 8 ≤ n` and return elements `i..i+8`.
#[inline(always)]
unsafe fn dot_by8(
    n: usize,
    load_a: impl Fn(usize) -> __m256,
    load_b: impl Fn(usize) -> __m256,
    tail: impl Fn(usize) -> f32,
) -> f32 {
    // SAFETY: register-only intrinsics; the loads are the caller's, valid below n.
    unsafe {
        let mut acc = [_mm256_setzero_ps(); 4];
        let mut i = 0;
        while i + 32 <= n {
            for (k, a) in acc.iter_mut().enumerate() {
                *a = _mm256_fmadd_ps(load_a(i + 8 * k), load_b(i + 8 * k), *a);
            }
            i += 32;
        }
        while i + 8 <= n {
            acc[0] = _mm256_fmadd_ps(load_a(i), load_b(i), acc[0]);
            i += 8;
        }
        let mut t = 0f32;
        for j in i..n {
            t += tail(j);
        }
        let s = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
        hsum_ps(s) + t
    }
}

/// `ggml_vec_dot_f32` / `_f16`'s AVX2 blocks of 64 (`GGML_F32_STEP`), given
/// a loader of 8 converted lanes at `i`: four accumulators of two 8-lane
/// halves, folded `(s0+s2) + (s1+s3)` per half, the halves added (1 + 0) and
/// summed. Returns where the scalar leftovers start and the sum so far.
///
/// # Safety
/// The caller must have AVX2 and FMA enabled; `load(i)` must be valid for
/// every `i + 8 ≤ n − n % 64`.
#[inline(always)]
unsafe fn step64(
    n: usize,
    load_a: impl Fn(usize) -> __m256,
    load_b: impl Fn(usize) -> __m256,
) -> (usize, f32) {
    // SAFETY: register-only intrinsics; the loads are the caller's.
    unsafe {
        let np = n - n % 64;
        let mut acc = [[_mm256_setzero_ps(); 2]; 4];
        let mut i = 0;
        while i < np {
            for (r, ar) in acc.iter_mut().enumerate() {
                for (h, a8) in ar.iter_mut().enumerate() {
                    let o = i + 16 * r + 8 * h;
                    *a8 = _mm256_fmadd_ps(load_a(o), load_b(o), *a8);
                }
            }
            i += 64;
        }
        let fold = |h: usize| {
            _mm256_add_ps(
                _mm256_add_ps(acc[0][h], acc[2][h]),
                _mm256_add_ps(acc[1][h], acc[3][h]),
            )
        };
        (np, hsum_ps(_mm256_add_ps(fold(1), fold(0))))
    }
}

/// Σ a·b in the order of ggml's `ggml_vec_dot_f32` as llama.cpp's x86
/// builds compile it on AVX-512 hosts (the oracle's order; `GGML_F32_STEP`
/// 64, 16 lanes): four 16-lane accumulators (here two 8-lane halves each)
/// take fused products over blocks of 64, are folded `(s0+s2) + (s1+s3)` and
/// reduced as `_mm512_reduce_add_ps`; the `n % 64` leftovers are added in
/// order as GCC compiled ggml's `sumf += x[i]*y[i]`: rounded products
/// (16-wide, then 8-wide) then fused multiply-adds for the last `n % 8`.
#[target_feature(enable = "avx2,fma,f16c")]
fn f32_avx2(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    // SAFETY: reads the 8 floats at i..i+8, bounds-checked by the slice index.
    let load = |s: &[f32], i: usize| unsafe { _mm256_loadu_ps(s[i..i + 8].as_ptr()) };
    // SAFETY: AVX2 and FMA are enabled here; loads stay below n.
    let (np, mut sum) = unsafe { step64(n, |i| load(a, i), |i| load(b, i)) };
    let fused_from = n - (n - np) % 8;
    for j in np..fused_from {
        sum += a[j] * b[j];
    }
    for j in fused_from..n {
        sum = a[j].mul_add(b[j], sum);
    }
    sum
}

/// One output of llamafile's F32 tinyBLAS as llama.cpp's x86 builds compile
/// it on AVX-512 hosts: 16 lanes (here two 8-lane halves), lane `l` taking
/// fused `a_i·b_i` for `i ≡ l (mod 16)` in order, then
/// `_mm512_reduce_add_ps`. `n % 16 == 0` (ggml's condition for this path);
/// a ragged tail, never passed by `matmul`, is added in order.
#[target_feature(enable = "avx2,fma,f16c")]
fn f32_gemm_avx2(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    // SAFETY: reads the 8 floats at i..i+8, bounds-checked by the slice index.
    let load = |s: &[f32], i: usize| unsafe { _mm256_loadu_ps(s[i..i + 8].as_ptr()) };
    let (mut lo, mut hi) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    let whole = n - n % 16;
    for i in (0..whole).step_by(16) {
        lo = _mm256_fmadd_ps(load(a, i), load(b, i), lo);
        hi = _mm256_fmadd_ps(load(a, i + 8), load(b, i + 8), hi);
    }
    // SAFETY: register-only intrinsics; AVX is enabled here.
    let mut sum = unsafe { hsum_ps(_mm256_add_ps(hi, lo)) };
    for j in whole..n {
        sum += a[j] * b[j];
    }
    sum
}

fn gemm_dot_f32(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let (a, b): (&[f32], &[f32]) = (as_blocks(&w[..n * 4]), as_blocks(&act[..n * 4]));
    // SAFETY: handed out by `gemm_f32_fn` only when `Isa::Avx2.available()`.
    unsafe { f32_gemm_avx2(a, b) }
}

/// The batched-product F32 dot (see `f32_gemm_avx2`), when the host has AVX2.
pub fn gemm_f32_fn() -> Option<VecDotFn> {
    Isa::Avx2.available().then_some(gemm_dot_f32 as VecDotFn)
}

/// Σ a·b of f16 rows in the order of ggml's `ggml_vec_dot_f16` on AVX-512
/// hosts (as [`f32_avx2`] on the exactly converted values, but the
/// `n % 64` leftovers are rounded products added in f64, `ggml_float`).
#[target_feature(enable = "avx2,fma,f16c")]
fn f16_avx2(a: &[f16], b: &[f16]) -> f32 {
    let n = a.len().min(b.len());
    // SAFETY: reads the 8 halves at i..i+8, bounds-checked by the slice index.
    let load = |s: &[f16], i: usize| unsafe {
        _mm256_cvtph_ps(_mm_loadu_si128(s[i..i + 8].as_ptr().cast()))
    };
    // SAFETY: AVX2 and FMA are enabled here; loads stay below n.
    let (np, sum) = unsafe { step64(n, |i| load(a, i), |i| load(b, i)) };
    let mut sum = sum as f64;
    for j in np..n {
        sum += (a[j].to_f32() * b[j].to_f32()) as f64;
    }
    sum as f32
}

/// One output of llamafile's F16 tinyBLAS (AVX-512 build): as
/// [`f32_gemm_avx2`] on the converted values.
#[target_feature(enable = "avx2,fma,f16c")]
fn f16_gemm_avx2(a: &[f16], b: &[f16]) -> f32 {
    let n = a.len().min(b.len());
    // SAFETY: reads the 8 halves at i..i+8, bounds-checked by the slice index.
    let load = |s: &[f16], i: usize| unsafe {
        _mm256_cvtph_ps(_mm_loadu_si128(s[i..i + 8].as_ptr().cast()))
    };
    let (mut lo, mut hi) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    let whole = n - n % 16;
    for i in (0..whole).step_by(16) {
        lo = _mm256_fmadd_ps(load(a, i), load(b, i), lo);
        hi = _mm256_fmadd_ps(load(a, i + 8), load(b, i + 8), hi);
    }
    // SAFETY: register-only intrinsics; AVX is enabled here.
    let mut sum = unsafe { hsum_ps(_mm256_add_ps(hi, lo)) };
    for j in whole..n {
        sum += a[j].to_f32() * b[j].to_f32();
    }
    sum
}

fn gemm_dot_f16(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let (a, b): (&[f16], &[f16]) = (as_blocks(&w[..n * 2]), as_blocks(&act[..n * 2]));
    // SAFETY: handed out by `gemm_f16_fn` only when `Isa::Avx2.available()`.
    unsafe { f16_gemm_avx2(a, b) }
}

/// The batched-product F16 dot (see `f16_gemm_avx2`), when the host has AVX2.
pub fn gemm_f16_fn() -> Option<VecDotFn> {
    Isa::Avx2.available().then_some(gemm_dot_f16 as VecDotFn)
}

/// bf16 → f32 of 8 values: the bits shifted into the high half.
///
/// # Safety
/// The caller must have AVX2 enabled.
#[inline(always)]
pub(crate) unsafe fn bf16x8_to_f32(s: &[bf16]) -> __m256 {
    // SAFETY: reads the 8 values of `s[..8]` (bounds-checked); AVX2 is enabled by the caller.
    unsafe {
        let h = _mm_loadu_si128(s[..8].as_ptr().cast());
        _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16))
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
fn bf16_avx2(a: &[bf16], b: &[bf16]) -> f32 {
    // SAFETY: bf16x8_to_f32 needs AVX2, enabled here; the slices are bounds-checked.
    let load = |s: &[bf16], i: usize| unsafe { bf16x8_to_f32(&s[i..]) };
    let tail = |j: usize| a[j].to_f32() * b[j].to_f32();
    // SAFETY: this function has AVX2 and FMA enabled.
    unsafe { dot_by8(a.len(), |i| load(a, i), |i| load(b, i), tail) }
}

fn vec_dot_f32(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let (a, b): (&[f32], &[f32]) = (as_blocks(&w[..n * 4]), as_blocks(&act[..n * 4]));
    // SAFETY: handed out by `vec_dot_fn` only when `Isa::Avx2.available()`.
    unsafe { f32_avx2(a, b) }
}

fn vec_dot_f16(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let (a, b): (&[f16], &[f16]) = (as_blocks(&w[..n * 2]), as_blocks(&act[..n * 2]));
    // SAFETY: handed out by `vec_dot_fn` only when `Isa::Avx2.available()`.
    unsafe { f16_avx2(a, b) }
}

fn vec_dot_bf16(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let (a, b): (&[bf16], &[bf16]) = (as_blocks(&w[..n * 2]), as_blocks(&act[..n * 2]));
    // SAFETY: handed out by `vec_dot_fn` only when `Isa::Avx2.available()`.
    unsafe { bf16_avx2(a, b) }
}

// ---------------------------------------------------------------------------
// Activation quantisers.

/// One Q8 activation block as the scalar `q8_0::quantize_block_act` (ggml's
/// x86 `quantize_row_q8_0`): stores the levels and returns `(d, Σ levels)`.
///
/// # Safety
/// The caller must have AVX2 enabled.
#[inline(always)]
unsafe fn quantize_q8_block(x: &[f32], qs: &mut [i8; 32]) -> (f32, i32) {
    // SAFETY: loads read x[0..32] (bounds-checked), the store writes the 32
    // bytes of `qs`; AVX2 is enabled by the caller.
    unsafe {
        let x = &x[..32];
        // Plain arrays, not closures: a closure here would not inherit the
        // caller's target features.
        let v = [
            _mm256_loadu_ps(x.as_ptr()),
            _mm256_loadu_ps(x[8..].as_ptr()),
            _mm256_loadu_ps(x[16..].as_ptr()),
            _mm256_loadu_ps(x[24..].as_ptr()),
        ];
        let sign_bit = _mm256_set1_ps(-0.0);
        let mut m = _mm256_andnot_ps(sign_bit, v[0]);
        for vk in &v[1..] {
            m = _mm256_max_ps(m, _mm256_andnot_ps(sign_bit, *vk));
        }
        let m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        let m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        let amax = _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4)));
        let d = amax / 127.0;
        let id = _mm256_set1_ps(if amax != 0.0 { 127.0 / amax } else { 0.0 });
        const RNE: i32 = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
        let r = [
            _mm256_round_ps::<RNE>(_mm256_mul_ps(v[0], id)),
            _mm256_round_ps::<RNE>(_mm256_mul_ps(v[1], id)),
            _mm256_round_ps::<RNE>(_mm256_mul_ps(v[2], id)),
            _mm256_round_ps::<RNE>(_mm256_mul_ps(v[3], id)),
        ];
        let sum = _mm256_add_ps(_mm256_add_ps(r[0], r[1]), _mm256_add_ps(r[2], r[3]));
        let i = [
            _mm256_cvttps_epi32(r[0]),
            _mm256_cvttps_epi32(r[1]),
            _mm256_cvttps_epi32(r[2]),
            _mm256_cvttps_epi32(r[3]),
        ];
        let p = _mm256_packs_epi16(
            _mm256_packs_epi32(i[0], i[1]),
            _mm256_packs_epi32(i[2], i[3]),
        );
        let p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256(qs.as_mut_ptr().cast(), p);
        (d, hsum_ps(sum) as i32)
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
fn q8_0_quant_avx2(src: &[f32], dst: &mut [BlockQ8_0]) {
    for (b, x) in dst.iter_mut().zip(src.chunks_exact(32)) {
        // SAFETY: this function has AVX2 enabled.
        let (d, _) = unsafe { quantize_q8_block(x, &mut b.qs) };
        b.d = f16::from_f32(d);
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
fn q8_1_quant_avx2(src: &[f32], dst: &mut [BlockQ8_1]) {
    for (b, x) in dst.iter_mut().zip(src.chunks_exact(32)) {
        // SAFETY: this function has AVX2 enabled.
        let (d, sum) = unsafe { quantize_q8_block(x, &mut b.qs) };
        b.d = f16::from_f32(d);
        b.s = f16::from_f32(sum as f32 * d);
    }
}

fn quantize_q8_0(src: &[f32], dst: &mut [u8]) {
    let b: &mut [BlockQ8_0] = as_blocks_mut(&mut dst[..src.len() / 32 * 34]);
    // SAFETY: handed out by `quantize_fn` only when `Isa::Avx2.available()`.
    unsafe { q8_0_quant_avx2(src, b) }
}

fn quantize_q8_1(src: &[f32], dst: &mut [u8]) {
    let b: &mut [BlockQ8_1] = as_blocks_mut(&mut dst[..src.len() / 32 * 36]);
    // SAFETY: handed out by `quantize_fn` only when `Isa::Avx2.available()`.
    unsafe { q8_1_quant_avx2(src, b) }
}

#[target_feature(enable = "avx2,fma,f16c")]
fn f16_quant_avx2(src: &[f32], dst: &mut [f16]) {
    let mut s = src.chunks_exact(8);
    let mut d = dst.chunks_exact_mut(8);
    for (x, o) in (&mut s).zip(&mut d) {
        // SAFETY: reads the 8 floats of `x`, writes the 8 halves of `o`; F16C
        // is enabled here. Rounding is to nearest even, as `f16::from_f32`.
        unsafe {
            let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm256_loadu_ps(x.as_ptr()));
            _mm_storeu_si128(o.as_mut_ptr().cast(), h);
        }
    }
    for (o, x) in d.into_remainder().iter_mut().zip(s.remainder()) {
        *o = f16::from_f32(*x);
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
fn bf16_quant_avx2(src: &[f32], dst: &mut [bf16]) {
    let mut s = src.chunks_exact(16);
    let mut d = dst.chunks_exact_mut(16);
    for (x, o) in (&mut s).zip(&mut d) {
        // SAFETY: reads the 16 floats of `x`, writes the 16 values of `o`;
        // AVX2 is enabled here.
        unsafe {
            let r0 = bf16_round(_mm256_loadu_si256(x.as_ptr().cast()));
            let r1 = bf16_round(_mm256_loadu_si256(x[8..].as_ptr().cast()));
            let p = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_packus_epi32(r0, r1));
            _mm256_storeu_si256(o.as_mut_ptr().cast(), p);
        }
    }
    for (o, x) in d.into_remainder().iter_mut().zip(s.remainder()) {
        *o = bf16::from_f32(*x);
    }
}

/// ggml's `ggml_compute_fp32_to_bf16` on 8 lanes (result in the low 16 bits):
/// NaN → quiet NaN, otherwise round to nearest even.
///
/// # Safety
/// The caller must have AVX2 enabled.
#[inline(always)]
unsafe fn bf16_round(u: __m256i) -> __m256i {
    // SAFETY: register-only intrinsics; AVX2 is enabled by the caller.
    unsafe {
        let abs = _mm256_and_si256(u, _mm256_set1_epi32(0x7fff_ffff));
        let nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7f80_0000));
        let hi = _mm256_srli_epi32::<16>(u);
        let quiet = _mm256_or_si256(hi, _mm256_set1_epi32(0x40));
        let lsb = _mm256_and_si256(hi, _mm256_set1_epi32(1));
        let bias = _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb);
        let rounded = _mm256_srli_epi32::<16>(_mm256_add_epi32(u, bias));
        _mm256_blendv_epi8(rounded, quiet, nan)
    }
}

fn quantize_f16(src: &[f32], dst: &mut [u8]) {
    let d: &mut [f16] = as_blocks_mut(&mut dst[..src.len() * 2]);
    // SAFETY: handed out by `quantize_fn` only when `Isa::Avx2.available()`.
    unsafe { f16_quant_avx2(src, d) }
}

fn quantize_bf16(src: &[f32], dst: &mut [u8]) {
    let d: &mut [bf16] = as_blocks_mut(&mut dst[..src.len() * 2]);
    // SAFETY: handed out by `quantize_fn` only when `Isa::Avx2.available()`.
    unsafe { bf16_quant_avx2(src, d) }
}
