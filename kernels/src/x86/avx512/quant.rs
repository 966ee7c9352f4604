//! AVX-512 activation quantisers into Q8_0, Q8_1 and Q8_K, bit-exact with the
//! scalar reference.
//!
//! Q8_0/Q8_1: a block is two 16-lane registers; the activation form of the
//! scalar reference (`quantize_act`): `d = amax/127`, levels
//! `round_half_even(x·(127/amax))`, as ggml converts activations on x86.
//! Q8_K: the first largest-magnitude element found with a compare mask,
//! levels rounded to nearest even (`vcvtps2dq` with explicit rounding), which
//! equals ggml's `nearest_int` for |v| < 2²², capped at 127, narrowed with
//! saturation; `bsums` from `vpsadbw` on the levels biased to unsigned.

use std::arch::x86_64::*;

use half::f16;

use crate::blocks::as_blocks_mut;
use crate::cpu::Isa;
use crate::scalar::q8_0::BlockQ8_0;
use crate::scalar::q8_1::BlockQ8_1;
use crate::scalar::q8_k::BlockQ8K;
use crate::sig::QuantizeFn;
use crate::GgmlType;

const QK_K: usize = 256;

/// This tier's quantiser into `act_ty`, when the host has AVX-512 F/BW/VL.
pub fn quantize_fn(act_ty: GgmlType) -> Option<QuantizeFn> {
    if !Isa::Avx512.available() {
        return None;
    }
    match act_ty {
        GgmlType::Q8_0 => Some(quantize_q8_0),
        GgmlType::Q8_1 => Some(quantize_q8_1),
        GgmlType::Q8_K => Some(quantize_q8_k),
        _ => None,
    }
}

// Same safe entries as aarch64/neon/legacy.rs::quantize_q8_0/q8_1: each tier states its own
// availability check in the SAFETY line, and only one of the two compiles per target.
fn quantize_q8_0(src: &[f32], dst: &mut [u8]) {
    let b: &mut [BlockQ8_0] = as_blocks_mut(&mut dst[..src.len() / 32 * 34]);
    // SAFETY: handed out by `quantize_fn` only when `Isa::Avx512.available()`.
    unsafe { q8_0_quant(src, b) }
}

fn quantize_q8_1(src: &[f32], dst: &mut [u8]) {
    let b: &mut [BlockQ8_1] = as_blocks_mut(&mut dst[..src.len() / 32 * 36]);
    // SAFETY: handed out by `quantize_fn` only when `Isa::Avx512.available()`.
    unsafe { q8_1_quant(src, b) }
}

fn quantize_q8_k(src: &[f32], dst: &mut [u8]) {
    let blocks: &mut [BlockQ8K] = as_blocks_mut(dst);
    assert_eq!(blocks.len() * QK_K, src.len(), "Q8_K quantize length");
    // SAFETY: handed out by `quantize_fn` only when `Isa::Avx512.available()`.
    unsafe { q8_k_quant(src, blocks) }
}

/// 16 floats at `off` of `x`.
///
/// # Safety
/// The caller must have AVX-512F enabled.
#[inline(always)]
unsafe fn load16(x: &[f32], off: usize) -> __m512 {
    let s: &[f32; 16] = x[off..off + 16].try_into().unwrap();
    // SAFETY: `s` is 16 readable floats and `loadu` has no alignment requirement.
    unsafe { _mm512_loadu_ps(s.as_ptr()) }
}

/// Stores 16 i32 lanes (all in −127..=127) as 16 bytes at `off` of `qs`.
///
/// # Safety
/// The caller must have AVX-512F enabled.
#[inline(always)]
unsafe fn store16(qs: &mut [i8], off: usize, v: __m512i) {
    let out: &mut [i8; 16] = (&mut qs[off..off + 16]).try_into().unwrap();
    // SAFETY: `out` is 16 writable bytes and `storeu` has no alignment requirement.
    unsafe { _mm_storeu_si128(out.as_mut_ptr().cast(), _mm512_cvtsepi32_epi8(v)) }
}

/// One 32-element activation block as the scalar `q8_0::quantize_block_act`
/// (ggml's x86 activation converter): `d = amax/127`, levels
/// `round_half_even(x·(127/amax))`; stores the levels and returns `(d, Σ levels)`.
///
/// # Safety
/// The caller must have AVX-512F enabled.
#[inline(always)]
unsafe fn q8_block(x: &[f32], qs: &mut [i8; 32]) -> (f32, i32) {
    // SAFETY: loads read x[0..32], stores write qs (bounds-checked); AVX-512F
    // is enabled by the caller.
    unsafe {
        let v = [load16(x, 0), load16(x, 16)];
        let amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v[0]), _mm512_abs_ps(v[1])));
        let d = amax / 127.0;
        let id = _mm512_set1_ps(if amax != 0.0 { 127.0 / amax } else { 0.0 });
        // `cvtps` rounds to nearest even under the default MXCSR mode.
        let q = [
            _mm512_cvtps_epi32(_mm512_mul_ps(v[0], id)),
            _mm512_cvtps_epi32(_mm512_mul_ps(v[1], id)),
        ];
        store16(qs, 0, q[0]);
        store16(qs, 16, q[1]);
        (d, _mm512_reduce_add_epi32(_mm512_add_epi32(q[0], q[1])))
    }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
// Same block loops as x86/avx2/legacy.rs::q8_0_quant_avx2/q8_1_quant_avx2: each is a
// #[target_feature] fn so that its own tier's block quantiser inlines into it.
fn q8_0_quant(src: &[f32], dst: &mut [BlockQ8_0]) {
    for (b, x) in dst.iter_mut().zip(src.chunks_exact(32)) {
        // SAFETY: this function has AVX-512F enabled.
        let (d, _) = unsafe { q8_block(x, &mut b.qs) };
        b.d = f16::from_f32(d);
    }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
fn q8_1_quant(src: &[f32], dst: &mut [BlockQ8_1]) {
    for (b, x) in dst.iter_mut().zip(src.chunks_exact(32)) {
        // SAFETY: this function has AVX-512F enabled.
        let (d, sum) = unsafe { q8_block(x, &mut b.qs) };
        b.d = f16::from_f32(d);
        b.s = f16::from_f32(sum as f32 * d);
    }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
fn q8_k_quant(src: &[f32], blocks: &mut [BlockQ8K]) {
    let cap = _mm512_set1_epi32(127);
    let bias = _mm512_set1_epi8(i8::MIN);
    for (b, x) in blocks.iter_mut().zip(src.chunks_exact(QK_K)) {
        let mut v = [_mm512_setzero_ps(); 16];
        for (g, vg) in v.iter_mut().enumerate() {
            // SAFETY: reads 16 floats at 16g of the 256-element block.
            *vg = unsafe { load16(x, 16 * g) };
        }
        // The amax scan, zero block and signed-max search as in
        // aarch64/neon/lowbit.rs::q8_k_quant_neon and avx2/kquants.rs::q8_k_quantize, each in its
        // own tier's intrinsics; only one of the NEON and x86 forms compiles per target.
        let mut m = _mm512_abs_ps(v[0]);
        for vg in &v[1..] {
            m = _mm512_max_ps(m, _mm512_abs_ps(*vg));
        }
        let amax = _mm512_reduce_max_ps(m);
        if amax == 0.0 {
            b.d = 0.0;
            b.qs = [0; QK_K];
            b.bsums = [0; 16];
            continue;
        }
        // The first element whose magnitude is amax carries the sign.
        let target = _mm512_set1_ps(amax);
        let mut max = amax;
        for (g, vg) in v.iter().enumerate() {
            let hit = _mm512_cmp_ps_mask::<_CMP_EQ_OQ>(_mm512_abs_ps(*vg), target);
            if hit != 0 {
                max = x[16 * g + hit.trailing_zeros() as usize];
                break;
            }
        }
        let iscale = -127.0 / max;
        let vs = _mm512_set1_ps(iscale);
        let mut half_sums = [_mm_setzero_si128(); 4];
        for (g, hs) in half_sums.iter_mut().enumerate() {
            // 64 levels: four 16-lane conversions narrowed to bytes and joined.
            let mut bytes = [_mm_setzero_si128(); 4];
            for (k, bk) in bytes.iter_mut().enumerate() {
                let q = _mm512_cvt_roundps_epi32::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
                    _mm512_mul_ps(v[4 * g + k], vs),
                );
                *bk = _mm512_cvtsepi32_epi8(_mm512_min_epi32(q, cap));
            }
            let z = _mm512_inserti32x4::<1>(_mm512_castsi128_si512(bytes[0]), bytes[1]);
            let z = _mm512_inserti32x4::<2>(z, bytes[2]);
            let z = _mm512_inserti32x4::<3>(z, bytes[3]);
            let out: &mut [i8; 64] = (&mut b.qs[64 * g..64 * g + 64]).try_into().unwrap();
            // SAFETY: `out` is 64 writable bytes and `storeu` has no alignment requirement.
            unsafe { _mm512_storeu_si512(out.as_mut_ptr().cast(), z) };
            // Sums of 8 levels biased by +128 each (xor 0x80 makes them unsigned).
            let sad = _mm512_sad_epu8(_mm512_xor_si512(z, bias), _mm512_setzero_si512());
            *hs = _mm512_cvtepi64_epi16(sad);
        }
        // Pairs of 8-sums are the 16-sums, each biased by 16·128.
        let off = _mm_set1_epi16(16 * 128);
        let lo = _mm_sub_epi16(_mm_hadd_epi16(half_sums[0], half_sums[1]), off);
        let hi = _mm_sub_epi16(_mm_hadd_epi16(half_sums[2], half_sums[3]), off);
        // SAFETY: `bsums` is 16 writable i16 and `storeu` has no alignment requirement.
        unsafe {
            _mm_storeu_si128(b.bsums.as_mut_ptr().cast(), lo);
            _mm_storeu_si128(b.bsums[8..].as_mut_ptr().cast(), hi);
        }
        b.d = 1.0 / iscale;
    }
}
