//! NEON dot products of Q2_K and Q3_K with Q8_K activations, and the Q8_K
//! activation quantiser.
//!
//! Per 16 weights: the 2-bit (Q2_K) or 3-bit (Q3_K, high bit from `hmask`)
//! levels unpacked to i8, an integer dot against the activations into four
//! i32 lanes (`sdot` where the CPU has the dot-product extension, else
//! `smull` + pairwise widening adds), the sub-block scale applied with `mla`
//! by a scalar; one f32 `mla` per super-block, one horizontal sum per row. The
//! Q2_K sub-block mins go through the activation `bsums`.
//!
//! The Q8_K quantiser is bit-exact with the scalar reference: the same first
//! largest-magnitude element, the same f32 `iscale`, and `fcvtns` (round to
//! nearest, ties to even) equals ggml's `nearest_int` for |v| < 2²².

use std::arch::aarch64::*;
use std::arch::asm;

use crate::blocks::as_blocks_mut;
use crate::cpu::Isa;
use crate::scalar::q2_k::BlockQ2K;
use crate::scalar::q3_k::BlockQ3K;
use crate::scalar::q8_k::{rows, BlockQ8K};
use crate::sig::{QuantizeFn, VecDotFn};
use crate::GgmlType;

const QK_K: usize = 256;

/// This family's dot product for `ty` (the fastest variant the host runs).
pub fn vec_dot_fn(ty: GgmlType) -> Option<VecDotFn> {
    vec_dot_variants(ty).last().map(|(_, f)| *f)
}

/// Every Q2_K / Q3_K dot this host can run, named (`"neon"`, `"dotprod"`),
/// fastest last: `vec_dot_fn` takes the last, tests check them all.
// Same head as legacy.rs::vec_dot_variants (the availability check, then variant_pair per type):
// each family file lists its own types and kernels, and mod.rs::vec_dot_fn asks them in turn.
pub fn vec_dot_variants(ty: GgmlType) -> Vec<(&'static str, VecDotFn)> {
    if !Isa::Neon.available() {
        return Vec::new();
    }
    match ty {
        GgmlType::Q2_K => super::variant_pair(vec_dot_q2_k, vec_dot_q2_k_dp),
        GgmlType::Q3_K => super::variant_pair(vec_dot_q3_k, vec_dot_q3_k_dp),
        _ => Vec::new(),
    }
}

/// The Q8_K quantiser, when the host has NEON.
pub fn quantize_fn(act_ty: GgmlType) -> Option<QuantizeFn> {
    if !Isa::Neon.available() {
        return None;
    }
    match act_ty {
        GgmlType::Q8_K => Some(quantize_q8_k),
        _ => None,
    }
}

macro_rules! entry {
    ($name:ident, $body:ident, $dot:literal, $features:literal, $block:ty, $kernel:ident) => {
        #[target_feature(enable = $features)]
        fn $body(x: &[$block], y: &[BlockQ8K]) -> f32 {
            // SAFETY: this function enables every feature the kernel needs.
            unsafe { $kernel::<$dot>(x, y) }
        }

        fn $name(n: usize, w: &[u8], act: &[u8]) -> f32 {
            let (x, y) = rows::<$block>(n, w, act);
            // SAFETY: `vec_dot_variants` hands this out only when
            // `Isa::Neon.available()` and, for the `_dp` variants, the
            // dot-product extension is detected.
            unsafe { $body(x, y) }
        }
    };
}

entry!(vec_dot_q2_k, q2_k_neon, false, "neon", BlockQ2K, q2_k);
entry!(
    vec_dot_q2_k_dp,
    q2_k_dot,
    true,
    "neon,dotprod",
    BlockQ2K,
    q2_k
);
entry!(vec_dot_q3_k, q3_k_neon, false, "neon", BlockQ3K, q3_k);
entry!(
    vec_dot_q3_k_dp,
    q3_k_dot,
    true,
    "neon,dotprod",
    BlockQ3K,
    q3_k
);

/// Σ x·y of 16 signed bytes into 4 i32 lanes.
///
/// # Safety
/// The caller must have NEON enabled, and the dot-product extension when `DOT`.
#[inline(always)]
unsafe fn idot16<const DOT: bool>(x: int8x16_t, y: int8x16_t) -> int32x4_t {
    // SAFETY: register-only instructions; the features are enabled by the caller.
    unsafe {
        if DOT {
            let mut acc = vdupq_n_s32(0);
            asm!(
                "sdot {acc:v}.4s, {x:v}.16b, {y:v}.16b",
                acc = inout(vreg) acc,
                x = in(vreg) x,
                y = in(vreg) y,
                options(pure, nomem, nostack, preserves_flags),
            );
            acc
        } else {
            // |x·y| ≤ 4·127, so a pair of products fits i16 before widening.
            let p0 = vmull_s8(vget_low_s8(x), vget_low_s8(y));
            let p1 = vmull_high_s8(x, y);
            vpadalq_s16(vpaddlq_s16(p0), p1)
        }
    }
}

/// 16 bytes at `off` of `b`.
///
/// # Safety
/// The caller must have NEON enabled.
#[inline(always)]
unsafe fn ld_u8(b: &[u8], off: usize) -> uint8x16_t {
    let s: &[u8; 16] = b[off..off + 16].try_into().unwrap();
    // SAFETY: `s` is 16 readable bytes; `vld1q` has no alignment requirement.
    unsafe { vld1q_u8(s.as_ptr()) }
}

/// 16 signed bytes at `off` of `b`.
///
/// # Safety
/// The caller must have NEON enabled.
#[inline(always)]
unsafe fn ld_i8(b: &[i8], off: usize) -> int8x16_t {
    let s: &[i8; 16] = b[off..off + 16].try_into().unwrap();
    // SAFETY: `s` is 16 readable bytes; `vld1q` has no alignment requirement.
    unsafe { vld1q_s8(s.as_ptr()) }
}

/// `(v >> 2k) & 3` for k = 0..4 (the four 2-bit planes of a `qs` byte).
///
/// # Safety
/// The caller must have NEON enabled.
#[inline(always)]
unsafe fn planes(v: uint8x16_t) -> [uint8x16_t; 4] {
    // SAFETY: register-only intrinsics; NEON is enabled by the caller.
    unsafe {
        let m3 = vdupq_n_u8(3);
        [
            vandq_u8(v, m3),
            vandq_u8(vshrq_n_u8::<2>(v), m3),
            vandq_u8(vshrq_n_u8::<4>(v), m3),
            vshrq_n_u8::<6>(v),
        ]
    }
}

/// Q2_K: `dall·Σ_j (sc_j & 15)·(q·a)_j − dmin·Σ_j (sc_j >> 4)·bsum_j`.
///
/// # Safety
/// The caller must have NEON enabled, and the dot-product extension when `DOT`.
#[inline(always)]
unsafe fn q2_k<const DOT: bool>(x: &[BlockQ2K], y: &[BlockQ8K]) -> f32 {
    // SAFETY: loads read whole block fields (bounds-checked slices); the
    // features are enabled by the caller.
    unsafe {
        let mut acc = vdupq_n_f32(0.0);
        let mut acc_m = 0f32;
        for (xb, yb) in x.iter().zip(y) {
            let dall = yb.d * xb.d.to_f32();
            let dmin = yb.d * xb.dmin.to_f32();
            let packed = vld1q_u8(xb.scales.as_ptr());
            let mins = vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(vshrq_n_u8::<4>(packed))));
            let mins_hi = vreinterpretq_s16_u16(vmovl_high_u8(vshrq_n_u8::<4>(packed)));
            let b0 = vld1q_s16(yb.bsums.as_ptr());
            let b1 = vld1q_s16(yb.bsums[8..].as_ptr());
            let m = vmlal_s16(
                vmull_s16(vget_low_s16(mins), vget_low_s16(b0)),
                vget_high_s16(mins),
                vget_high_s16(b0),
            );
            let m = vmlal_s16(m, vget_low_s16(mins_hi), vget_low_s16(b1));
            let m = vmlal_high_s16(m, mins_hi, b1);
            acc_m += dmin * vaddvq_s32(m) as f32;
            let sc = xb.scales.map(|s| (s & 0xF) as i32);
            let mut sumi = vdupq_n_s32(0);
            for h in 0..2 {
                let lo = planes(ld_u8(&xb.qs, 32 * h));
                let hi = planes(ld_u8(&xb.qs, 32 * h + 16));
                for k in 0..4 {
                    let off = 128 * h + 32 * k;
                    let j = 8 * h + 2 * k;
                    let d0 = idot16::<DOT>(vreinterpretq_s8_u8(lo[k]), ld_i8(&yb.qs, off));
                    let d1 = idot16::<DOT>(vreinterpretq_s8_u8(hi[k]), ld_i8(&yb.qs, off + 16));
                    sumi = vmlaq_n_s32(sumi, d0, sc[j]);
                    sumi = vmlaq_n_s32(sumi, d1, sc[j + 1]);
                }
            }
            acc = vmlaq_n_f32(acc, vcvtq_f32_s32(sumi), dall);
        }
        vaddvq_f32(acc) - acc_m
    }
}

/// Q3_K's sixteen 6-bit scales, unbiased (`s − 32`), as i32 (ggml's 32-bit
/// masks on the twelve packed bytes).
#[inline(always)]
fn q3_k_scales(s: &[u8; 12]) -> [i32; 16] {
    const KMASK1: u32 = 0x0303_0303;
    const KMASK2: u32 = 0x0f0f_0f0f;
    let w = |i: usize| u32::from_le_bytes([s[4 * i], s[4 * i + 1], s[4 * i + 2], s[4 * i + 3]]);
    let (a0, a1, tmp) = (w(0), w(1), w(2));
    let words = [
        (a0 & KMASK2) | ((tmp & KMASK1) << 4),
        (a1 & KMASK2) | (((tmp >> 2) & KMASK1) << 4),
        ((a0 >> 4) & KMASK2) | (((tmp >> 4) & KMASK1) << 4),
        ((a1 >> 4) & KMASK2) | (((tmp >> 6) & KMASK1) << 4),
    ];
    std::array::from_fn(|j| ((words[j / 4] >> (8 * (j % 4))) & 0xFF) as i32 - 32)
}

/// Q3_K: `d·Σ_j (s_j − 32)·((low | high << 2) − 4)·a`.
///
/// # Safety
/// The caller must have NEON enabled, and the dot-product extension when `DOT`.
#[inline(always)]
unsafe fn q3_k<const DOT: bool>(x: &[BlockQ3K], y: &[BlockQ8K]) -> f32 {
    // SAFETY: loads read whole block fields (bounds-checked slices); the
    // features are enabled by the caller.
    unsafe {
        let four = vdupq_n_u8(4);
        let mut acc = vdupq_n_f32(0.0);
        for (xb, yb) in x.iter().zip(y) {
            let d = yb.d * xb.d.to_f32();
            let sc = q3_k_scales(&xb.scales);
            let hm = [ld_u8(&xb.hmask, 0), ld_u8(&xb.hmask, 16)];
            let mut sumi = vdupq_n_s32(0);
            for h in 0..2 {
                let (lo, hi) = (
                    planes(ld_u8(&xb.qs, 32 * h)),
                    planes(ld_u8(&xb.qs, 32 * h + 16)),
                );
                for (k, low) in lo.into_iter().zip(hi).enumerate() {
                    let low = [low.0, low.1];
                    let bit = vdupq_n_u8(1 << (4 * h + k));
                    let off = 128 * h + 32 * k;
                    let j = 8 * h + 2 * k;
                    for v in 0..2 {
                        // 4 where the high bit is set: level = low + 4·h − 4.
                        let high = vandq_u8(vtstq_u8(hm[v], bit), four);
                        let q = vsubq_s8(
                            vreinterpretq_s8_u8(vorrq_u8(low[v], high)),
                            vreinterpretq_s8_u8(four),
                        );
                        let dot = idot16::<DOT>(q, ld_i8(&yb.qs, off + 16 * v));
                        sumi = vmlaq_n_s32(sumi, dot, sc[j + v]);
                    }
                }
            }
            acc = vmlaq_n_f32(acc, vcvtq_f32_s32(sumi), d);
        }
        vaddvq_f32(acc)
    }
}

// ---------------------------------------------------------------- Q8_K quantiser

fn quantize_q8_k(src: &[f32], dst: &mut [u8]) {
    let blocks: &mut [BlockQ8K] = as_blocks_mut(dst);
    assert_eq!(blocks.len() * QK_K, src.len(), "Q8_K quantize length");
    // SAFETY: handed out by `quantize_fn` only when `Isa::Neon.available()`.
    unsafe { q8_k_quant_neon(src, blocks) }
}

#[target_feature(enable = "neon")]
fn q8_k_quant_neon(src: &[f32], blocks: &mut [BlockQ8K]) {
    for (b, x) in blocks.iter_mut().zip(src.chunks_exact(QK_K)) {
        let x: &[f32; QK_K] = x.try_into().unwrap();
        // SAFETY: reads x[4k..4k+4] for k < 64 of the 256-element block.
        let v: [float32x4_t; 64] =
            std::array::from_fn(|k| unsafe { vld1q_f32(x[4 * k..].as_ptr()) });
        let mut m = vabsq_f32(v[0]);
        for vk in &v[1..] {
            m = vmaxq_f32(m, vabsq_f32(*vk));
        }
        let amax = vmaxvq_f32(m);
        if amax == 0.0 {
            b.d = 0.0;
            b.qs = [0; QK_K];
            b.bsums = [0; 16];
            continue;
        }
        // The first element whose magnitude is amax carries the sign.
        let mut max = amax;
        for (k, vk) in v.iter().enumerate() {
            if vmaxvq_u32(vceqq_f32(vabsq_f32(*vk), vdupq_n_f32(amax))) != 0 {
                let i = (0..4).find(|&i| x[4 * k + i].abs() == amax).unwrap_or(0);
                max = x[4 * k + i];
                break;
            }
        }
        let iscale = -127.0 / max;
        let cap = vdupq_n_s32(127);
        for g in 0..16 {
            let q: [int32x4_t; 4] = std::array::from_fn(|k| {
                vminq_s32(vcvtnq_s32_f32(vmulq_n_f32(v[4 * g + k], iscale)), cap)
            });
            let s = vaddq_s32(vaddq_s32(q[0], q[1]), vaddq_s32(q[2], q[3]));
            b.bsums[g] = vaddvq_s32(s) as i16;
            let lo = vcombine_s16(vqmovn_s32(q[0]), vqmovn_s32(q[1]));
            let hi = vcombine_s16(vqmovn_s32(q[2]), vqmovn_s32(q[3]));
            let out: &mut [i8; 16] = (&mut b.qs[16 * g..16 * g + 16]).try_into().unwrap();
            // SAFETY: `out` is 16 writable bytes; `vst1q` has no alignment requirement.
            unsafe {
                vst1q_s8(
                    out.as_mut_ptr(),
                    vcombine_s8(vqmovn_s16(lo), vqmovn_s16(hi)),
                )
            };
        }
        b.d = 1.0 / iscale;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q3_k_scale_unpacking_matches_the_scalar_reference() {
        let mut s = [0u8; 12];
        for seed in 0..64u32 {
            for (i, v) in s.iter_mut().enumerate() {
                *v = (seed.wrapping_mul(2_654_435_761).rotate_left(i as u32 * 3) >> 7) as u8;
            }
            let want = crate::scalar::q3_k::unpack_scales(&s).map(|v| v as i32);
            assert_eq!(q3_k_scales(&s), want, "scales {s:?}");
        }
    }
}
