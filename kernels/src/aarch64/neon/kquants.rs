//! NEON dot products of the 256-element weight types with Q8_K activations
//! (Q4_K, Q5_K, Q6_K, IQ4_XS), using the Armv8.2 `sdot` instruction.
//!
//! Per 16 weights: levels unpacked to i8, `sdot` against the activations into
//! four i32 lanes, the sub-block scale applied with `mla` by a scalar; one f32
//! `mla` per super-block, one horizontal sum per row. Q2_K, Q3_K and the Q8_K
//! quantiser are in `lowbit`.
//!
//! `vdotq_s32` is not yet stable in Rust, so `sdot` is issued through `asm!`
//! in one helper. Kernels are handed out only when the CPU reports `dotprod`
//! (the table asks this tier only when `Isa::Neon.available()`).

use std::arch::aarch64::*;
use std::arch::asm;

use crate::scalar::iq4_grid::KVALUES_IQ4NL;
use crate::scalar::iq4_xs::BlockIq4Xs;
use crate::scalar::kquant_search::unpack_scale_min_k4;
use crate::scalar::q4_k::BlockQ4K;
use crate::scalar::q5_k::BlockQ5K;
use crate::scalar::q6_k::BlockQ6K;
use crate::scalar::q8_k::{rows, BlockQ8K};
use crate::sig::{QuantizeFn, VecDotFn};
use crate::GgmlType;

pub fn vec_dot_fn(ty: GgmlType) -> Option<VecDotFn> {
    if !std::arch::is_aarch64_feature_detected!("dotprod") {
        return None;
    }
    match ty {
        GgmlType::Q4_K => Some(vec_dot_q4_k),
        GgmlType::Q5_K => Some(vec_dot_q5_k),
        GgmlType::Q6_K => Some(vec_dot_q6_k),
        GgmlType::IQ4_XS => Some(vec_dot_iq4_xs),
        _ => None,
    }
}

pub fn quantize_fn(_act_ty: GgmlType) -> Option<QuantizeFn> {
    None
}

macro_rules! safe_entry {
    ($name:ident, $block:ty, $body:ident) => {
        fn $name(n: usize, w: &[u8], act: &[u8]) -> f32 {
            let (x, y) = rows::<$block>(n, w, act);
            // SAFETY: `vec_dot_fn` hands this out only after detecting
            // `dotprod`, and the kernel table consults it only for the NEON
            // tier, built only when `Isa::Neon.available()` confirmed NEON.
            unsafe { $body(x, y) }
        }
    };
}

safe_entry!(vec_dot_q4_k, BlockQ4K, q4_k);
safe_entry!(vec_dot_q5_k, BlockQ5K, q5_k);
safe_entry!(vec_dot_q6_k, BlockQ6K, q6_k);
safe_entry!(vec_dot_iq4_xs, BlockIq4Xs, iq4_xs);

/// `acc + Σ_{4 consecutive} a·b` per i32 lane (`sdot`).
#[inline]
#[target_feature(enable = "neon,dotprod")]
fn sdot(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
    let mut r = acc;
    // SAFETY: `sdot` reads and writes only the three vector registers named;
    // this fn is compiled with `dotprod` and only reached after detecting it.
    unsafe {
        asm!(
            "sdot {0:v}.4s, {1:v}.16b, {2:v}.16b",
            inout(vreg) r,
            in(vreg) a,
            in(vreg) b,
            options(pure, nomem, nostack, preserves_flags)
        );
    }
    r
}

#[inline]
#[target_feature(enable = "neon")]
fn ld_u8(b: &[u8], off: usize) -> uint8x16_t {
    let s: &[u8; 16] = b[off..off + 16].try_into().unwrap();
    // SAFETY: `s` is 16 readable bytes; `vld1q` has no alignment requirement.
    unsafe { vld1q_u8(s.as_ptr()) }
}

#[inline]
#[target_feature(enable = "neon")]
fn ld_i8(b: &[i8], off: usize) -> int8x16_t {
    let s: &[i8; 16] = b[off..off + 16].try_into().unwrap();
    // SAFETY: `s` is 16 readable bytes; `vld1q` has no alignment requirement.
    unsafe { vld1q_s8(s.as_ptr()) }
}

/// Σ_j mins[j/2]·bsums[j] (the Q4_K/Q5_K min term).
#[inline]
#[target_feature(enable = "neon")]
fn mins_dot_bsums(mins: &[u8; 8], bsums: &[i16; 16]) -> i32 {
    // SAFETY: `bsums` is 16 readable i16 and `mins` 8 readable bytes.
    let (b0, b1, m) = unsafe {
        (
            vld1q_s16(bsums.as_ptr()),
            vld1q_s16(bsums.as_ptr().add(8)),
            vld1_u8(mins.as_ptr()),
        )
    };
    let pairs = vpaddq_s16(b0, b1);
    let m = vreinterpretq_s16_u16(vmovl_u8(m));
    let p = vmlal_s16(
        vmull_s16(vget_low_s16(pairs), vget_low_s16(m)),
        vget_high_s16(pairs),
        vget_high_s16(m),
    );
    vaddvq_s32(p)
}

#[target_feature(enable = "neon,dotprod")]
fn q4_k(x: &[BlockQ4K], y: &[BlockQ8K]) -> f32 {
    let m4 = vdupq_n_u8(0xF);
    let mut acc = vdupq_n_f32(0.0);
    let mut acc_m = 0f32;
    for (xb, yb) in x.iter().zip(y) {
        let d = yb.d * xb.d.to_f32();
        let dmin = yb.d * xb.dmin.to_f32();
        let (sc, mins) = unpack_scale_min_k4(&xb.scales);
        acc_m += dmin * mins_dot_bsums(&mins, &yb.bsums) as f32;
        let mut sumi = vdupq_n_s32(0);
        for j in 0..4 {
            let q0 = ld_u8(&xb.qs, 32 * j);
            let q1 = ld_u8(&xb.qs, 32 * j + 16);
            let lo0 = vreinterpretq_s8_u8(vandq_u8(q0, m4));
            let lo1 = vreinterpretq_s8_u8(vandq_u8(q1, m4));
            let hi0 = vreinterpretq_s8_u8(vshrq_n_u8::<4>(q0));
            let hi1 = vreinterpretq_s8_u8(vshrq_n_u8::<4>(q1));
            let a = &yb.qs;
            let dl = sdot(
                sdot(vdupq_n_s32(0), lo0, ld_i8(a, 64 * j)),
                lo1,
                ld_i8(a, 64 * j + 16),
            );
            let dh = sdot(
                sdot(vdupq_n_s32(0), hi0, ld_i8(a, 64 * j + 32)),
                hi1,
                ld_i8(a, 64 * j + 48),
            );
            sumi = vmlaq_n_s32(sumi, dl, sc[2 * j] as i32);
            sumi = vmlaq_n_s32(sumi, dh, sc[2 * j + 1] as i32);
        }
        acc = vmlaq_n_f32(acc, vcvtq_f32_s32(sumi), d);
    }
    vaddvq_f32(acc) - acc_m
}

#[target_feature(enable = "neon,dotprod")]
fn q5_k(x: &[BlockQ5K], y: &[BlockQ8K]) -> f32 {
    let m4 = vdupq_n_u8(0xF);
    let sixteen = vdupq_n_u8(16);
    let mut acc = vdupq_n_f32(0.0);
    let mut acc_m = 0f32;
    for (xb, yb) in x.iter().zip(y) {
        let d = yb.d * xb.d.to_f32();
        let dmin = yb.d * xb.dmin.to_f32();
        let (sc, mins) = unpack_scale_min_k4(&xb.scales);
        acc_m += dmin * mins_dot_bsums(&mins, &yb.bsums) as f32;
        let qh = [ld_u8(&xb.qh, 0), ld_u8(&xb.qh, 16)];
        let high = |v: usize, bit: usize| {
            let m = vdupq_n_u8(1 << bit);
            vandq_u8(vceqq_u8(vandq_u8(qh[v], m), m), sixteen)
        };
        let mut sumi = vdupq_n_s32(0);
        for j in 0..4 {
            let a = &yb.qs;
            let mut dl = vdupq_n_s32(0);
            let mut dh = vdupq_n_s32(0);
            for v in 0..2 {
                let q = ld_u8(&xb.qs, 32 * j + 16 * v);
                let lo = vorrq_u8(vandq_u8(q, m4), high(v, 2 * j));
                let hi = vorrq_u8(vshrq_n_u8::<4>(q), high(v, 2 * j + 1));
                dl = sdot(dl, vreinterpretq_s8_u8(lo), ld_i8(a, 64 * j + 16 * v));
                dh = sdot(dh, vreinterpretq_s8_u8(hi), ld_i8(a, 64 * j + 32 + 16 * v));
            }
            // Same scale fold as the end of q4_k above: the blocks differ (Q5_K's fifth bit from qh
            // goes into the levels), and the tail sits inside each type's #[target_feature] fn.
            sumi = vmlaq_n_s32(sumi, dl, sc[2 * j] as i32);
            sumi = vmlaq_n_s32(sumi, dh, sc[2 * j + 1] as i32);
        }
        acc = vmlaq_n_f32(acc, vcvtq_f32_s32(sumi), d);
    }
    vaddvq_f32(acc) - acc_m
}

#[target_feature(enable = "neon,dotprod")]
fn q6_k(x: &[BlockQ6K], y: &[BlockQ8K]) -> f32 {
    let m4 = vdupq_n_u8(0xF);
    let m3 = vdupq_n_u8(3);
    let m32 = vdupq_n_s8(32);
    let mut acc = vdupq_n_f32(0.0);
    for (xb, yb) in x.iter().zip(y) {
        let d = yb.d * xb.d.to_f32();
        let mut sumi = vdupq_n_s32(0);
        for h in 0..2 {
            for v in 0..2 {
                let ql_a = ld_u8(&xb.ql, 64 * h + 16 * v);
                let ql_b = ld_u8(&xb.ql, 64 * h + 32 + 16 * v);
                let qh = ld_u8(&xb.qh, 32 * h + 16 * v);
                let q = [
                    vorrq_u8(vandq_u8(ql_a, m4), vshlq_n_u8::<4>(vandq_u8(qh, m3))),
                    vorrq_u8(
                        vandq_u8(ql_b, m4),
                        vshlq_n_u8::<4>(vandq_u8(vshrq_n_u8::<2>(qh), m3)),
                    ),
                    vorrq_u8(
                        vshrq_n_u8::<4>(ql_a),
                        vshlq_n_u8::<4>(vandq_u8(vshrq_n_u8::<4>(qh), m3)),
                    ),
                    vorrq_u8(vshrq_n_u8::<4>(ql_b), vshlq_n_u8::<4>(vshrq_n_u8::<6>(qh))),
                ];
                for (k, qk) in q.into_iter().enumerate() {
                    let w = vsubq_s8(vreinterpretq_s8_u8(qk), m32);
                    let off = 128 * h + 32 * k + 16 * v;
                    let dot = sdot(vdupq_n_s32(0), w, ld_i8(&yb.qs, off));
                    sumi = vmlaq_n_s32(sumi, dot, xb.scales[off / 16] as i32);
                }
            }
        }
        acc = vmlaq_n_f32(acc, vcvtq_f32_s32(sumi), d);
    }
    vaddvq_f32(acc)
}

#[target_feature(enable = "neon,dotprod")]
fn iq4_xs(x: &[BlockIq4Xs], y: &[BlockQ8K]) -> f32 {
    let m4 = vdupq_n_u8(0xF);
    // SAFETY: the grid is 16 readable bytes.
    let values = unsafe { vld1q_s8(KVALUES_IQ4NL.as_ptr()) };
    let mut acc = vdupq_n_f32(0.0);
    for (xb, yb) in x.iter().zip(y) {
        let d = yb.d * xb.d.to_f32();
        let mut sumi = vdupq_n_s32(0);
        for ib in 0..8 {
            let q = ld_u8(&xb.qs, 16 * ib);
            let lo = vqtbl1q_s8(values, vandq_u8(q, m4));
            let hi = vqtbl1q_s8(values, vshrq_n_u8::<4>(q));
            let dot = sdot(
                sdot(vdupq_n_s32(0), lo, ld_i8(&yb.qs, 32 * ib)),
                hi,
                ld_i8(&yb.qs, 32 * ib + 16),
            );
            sumi = vmlaq_n_s32(sumi, dot, xb.scale(ib));
        }
        acc = vmlaq_n_f32(acc, vcvtq_f32_s32(sumi), d);
    }
    vaddvq_f32(acc)
}
