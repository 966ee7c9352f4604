//! NEON kernels for the 32-element block types and the float types, with the
//! Armv8.2 dot-product instruction (`sdot`) where detected.
//!
//! Block levels are loaded as two signed byte vectors (the unsigned Q4_1/Q5_1
//! levels, ≤ 31, are valid signed bytes too), so one signed × signed integer
//! dot serves every type: `sdot` (via inline assembly: the intrinsic is not
//! stable yet) or `smull` + pairwise widening adds. Per block the 4 i32 lanes
//! are converted and fused into one of two f32 accumulators with the block's
//! scale product; one horizontal sum per call.
//!
//! F16 values are widened with integer operations (stable Rust does not
//! expose the half-precision vector types yet); for the same reason the F16
//! quantiser narrows with `fcvtn` through inline assembly (IEEE round to
//! nearest even, as the scalar `half` conversion).

use std::arch::aarch64::*;
use std::arch::asm;

use half::bf16;

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

/// This tier's dot product for `ty`, when the host has NEON.
pub fn vec_dot_fn(ty: GgmlType) -> Option<VecDotFn> {
    let variants = vec_dot_variants(ty);
    variants.last().map(|(_, f)| *f)
}

/// Every dot product this tier has for `ty` that the host can run, named
/// (`"neon"`, `"dotprod"`), fastest last: `vec_dot_fn` takes the last, tests
/// check them all.
pub fn vec_dot_variants(ty: GgmlType) -> Vec<(&'static str, VecDotFn)> {
    if !Isa::Neon.available() {
        return Vec::new();
    }
    match ty {
        GgmlType::Q4_0 => super::variant_pair(vec_dot_q4_0, vec_dot_q4_0_dp),
        GgmlType::Q4_1 => super::variant_pair(vec_dot_q4_1, vec_dot_q4_1_dp),
        GgmlType::Q5_0 => super::variant_pair(vec_dot_q5_0, vec_dot_q5_0_dp),
        GgmlType::Q5_1 => super::variant_pair(vec_dot_q5_1, vec_dot_q5_1_dp),
        GgmlType::Q8_0 => super::variant_pair(vec_dot_q8_0, vec_dot_q8_0_dp),
        GgmlType::IQ4_NL => super::variant_pair(vec_dot_iq4_nl, vec_dot_iq4_nl_dp),
        GgmlType::F32 => vec![("neon", vec_dot_f32 as VecDotFn)],
        GgmlType::F16 => vec![("neon", vec_dot_f16 as VecDotFn)],
        GgmlType::BF16 => vec![("neon", vec_dot_bf16 as VecDotFn)],
        _ => Vec::new(),
    }
}

/// This tier's activation quantiser into `act_ty`, when the host has NEON.
pub fn quantize_fn(act_ty: GgmlType) -> Option<QuantizeFn> {
    if !Isa::Neon.available() {
        return None;
    }
    Some(match act_ty {
        GgmlType::Q8_0 => quantize_q8_0,
        GgmlType::Q8_1 => quantize_q8_1,
        GgmlType::BF16 => quantize_bf16,
        GgmlType::F16 => quantize_f16,
        _ => return None,
    })
}

// ---------------------------------------------------------------------------
// Block levels.

/// A weight block: scale, optional minimum, and its 32 levels as two signed
/// byte vectors (elements 0..16 and 16..32).
trait Block: bytemuck::Pod {
    fn scale(&self) -> f32;
    fn min(&self) -> f32 {
        0.0
    }
    /// # Safety
    /// The caller must have NEON enabled.
    unsafe fn levels(&self) -> [int8x16_t; 2];
}

/// Low and high nibbles of 16 bytes.
///
/// # Safety
/// The caller must have NEON enabled.
#[inline(always)]
unsafe fn nibbles(qs: &[u8; 16]) -> [uint8x16_t; 2] {
    // SAFETY: reads the 16 bytes of `qs`; NEON is enabled by the caller.
    unsafe {
        let q = vld1q_u8(qs.as_ptr());
        [vandq_u8(q, vdupq_n_u8(0x0f)), vshrq_n_u8::<4>(q)]
    }
}

/// 0x10 in byte j (of elements 0..16 and 16..32) where bit j of `qh` is set.
///
/// # Safety
/// The caller must have NEON enabled.
#[inline(always)]
unsafe fn fifth_bits(qh: [u8; 4]) -> [uint8x16_t; 2] {
    const PICK_LO: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1];
    const PICK_HI: [u8; 16] = [2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3];
    const BIT: [u8; 16] = [1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128];
    // SAFETY: the loads read the 16-byte constant tables; NEON is enabled by the caller.
    unsafe {
        let v = vreinterpretq_u8_u32(vdupq_n_u32(u32::from_le_bytes(qh)));
        let bit = vld1q_u8(BIT.as_ptr());
        let sixteen = vdupq_n_u8(0x10);
        let lo = vtstq_u8(vqtbl1q_u8(v, vld1q_u8(PICK_LO.as_ptr())), bit);
        let hi = vtstq_u8(vqtbl1q_u8(v, vld1q_u8(PICK_HI.as_ptr())), bit);
        [vandq_u8(lo, sixteen), vandq_u8(hi, sixteen)]
    }
}

impl Block for BlockQ8_0 {
    fn scale(&self) -> f32 {
        self.d.to_f32()
    }
    #[inline(always)]
    unsafe fn levels(&self) -> [int8x16_t; 2] {
        // SAFETY: reads the 32 level bytes; NEON is enabled by the caller.
        unsafe { [vld1q_s8(self.qs.as_ptr()), vld1q_s8(self.qs[16..].as_ptr())] }
    }
}

impl Block for BlockQ4_0 {
    fn scale(&self) -> f32 {
        self.d.to_f32()
    }
    #[inline(always)]
    unsafe fn levels(&self) -> [int8x16_t; 2] {
        // SAFETY: NEON is enabled by the caller.
        unsafe {
            let [lo, hi] = nibbles(&self.qs);
            let eight = vdupq_n_s8(8);
            [
                vsubq_s8(vreinterpretq_s8_u8(lo), eight),
                vsubq_s8(vreinterpretq_s8_u8(hi), eight),
            ]
        }
    }
}

impl Block for BlockQ5_0 {
    fn scale(&self) -> f32 {
        self.d.to_f32()
    }
    #[inline(always)]
    unsafe fn levels(&self) -> [int8x16_t; 2] {
        // SAFETY: NEON is enabled by the caller.
        unsafe {
            let [lo, hi] = nibbles(&self.qs);
            let [blo, bhi] = fifth_bits(self.qh);
            let sixteen = vdupq_n_s8(16);
            [
                vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(lo, blo)), sixteen),
                vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(hi, bhi)), sixteen),
            ]
        }
    }
}

impl Block for BlockIq4Nl {
    fn scale(&self) -> f32 {
        self.d.to_f32()
    }
    #[inline(always)]
    unsafe fn levels(&self) -> [int8x16_t; 2] {
        // SAFETY: reads the 16-byte grid; NEON is enabled by the caller.
        unsafe {
            let grid = vld1q_s8(KVALUES.as_ptr());
            let [lo, hi] = nibbles(&self.qs);
            [vqtbl1q_s8(grid, lo), vqtbl1q_s8(grid, hi)]
        }
    }
}

impl Block for BlockQ4_1 {
    fn scale(&self) -> f32 {
        self.d.to_f32()
    }
    fn min(&self) -> f32 {
        self.m.to_f32()
    }
    #[inline(always)]
    unsafe fn levels(&self) -> [int8x16_t; 2] {
        // SAFETY: NEON is enabled by the caller.
        unsafe {
            let [lo, hi] = nibbles(&self.qs);
            [vreinterpretq_s8_u8(lo), vreinterpretq_s8_u8(hi)]
        }
    }
}

// Same scale/min accessors as the BlockQ4_1 impl above (as in x86/avx2/legacy.rs): a trait default
// cannot read the struct fields, and only levels() differs (Q5_1 adds the fifth bit from qh).
impl Block for BlockQ5_1 {
    fn scale(&self) -> f32 {
        self.d.to_f32()
    }
    fn min(&self) -> f32 {
        self.m.to_f32()
    }
    #[inline(always)]
    unsafe fn levels(&self) -> [int8x16_t; 2] {
        // SAFETY: NEON is enabled by the caller.
        unsafe {
            let [lo, hi] = nibbles(&self.qs);
            let [blo, bhi] = fifth_bits(self.qh);
            [
                vreinterpretq_s8_u8(vorrq_u8(lo, blo)),
                vreinterpretq_s8_u8(vorrq_u8(hi, bhi)),
            ]
        }
    }
}

/// An activation block: scale, scaled sum (Q8_1 only) and 32 signed levels.
trait Act: bytemuck::Pod {
    fn scale(&self) -> f32;
    fn scaled_sum(&self) -> f32;
    fn qs(&self) -> &[i8; 32];
}

impl Act for BlockQ8_0 {
    fn scale(&self) -> f32 {
        self.d.to_f32()
    }
    fn scaled_sum(&self) -> f32 {
        0.0
    }
    fn qs(&self) -> &[i8; 32] {
        &self.qs
    }
}

impl Act for BlockQ8_1 {
    fn scale(&self) -> f32 {
        self.d.to_f32()
    }
    fn scaled_sum(&self) -> f32 {
        self.s.to_f32()
    }
    fn qs(&self) -> &[i8; 32] {
        &self.qs
    }
}

// ---------------------------------------------------------------------------
// Dots.

/// Σ x·y of 32 signed bytes into 4 i32 lanes.
///
/// # Safety
/// The caller must have NEON enabled, and the dot-product extension when `DOT`.
#[inline(always)]
unsafe fn idot<const DOT: bool>(x: [int8x16_t; 2], y: [int8x16_t; 2]) -> int32x4_t {
    // SAFETY: register-only instructions; the features are enabled by the caller.
    unsafe {
        if DOT {
            let mut acc = vdupq_n_s32(0);
            asm!(
                "sdot {acc:v}.4s, {x0:v}.16b, {y0:v}.16b",
                "sdot {acc:v}.4s, {x1:v}.16b, {y1:v}.16b",
                acc = inout(vreg) acc,
                x0 = in(vreg) x[0],
                y0 = in(vreg) y[0],
                x1 = in(vreg) x[1],
                y1 = in(vreg) y[1],
                options(pure, nomem, nostack),
            );
            acc
        } else {
            let p0 = vmull_s8(vget_low_s8(x[0]), vget_low_s8(y[0]));
            let p1 = vmull_high_s8(x[0], y[0]);
            let p2 = vmull_s8(vget_low_s8(x[1]), vget_low_s8(y[1]));
            let p3 = vmull_high_s8(x[1], y[1]);
            let s = vpaddlq_s16(p0);
            let s = vpadalq_s16(s, p1);
            let s = vpadalq_s16(s, p2);
            vpadalq_s16(s, p3)
        }
    }
}

/// Σ_blocks dx·dy·(x·y) + mx·sy (the min term is zero for symmetric types).
///
/// # Safety
/// The caller must have NEON enabled, and the dot-product extension when `DOT`.
#[inline(always)]
unsafe fn dot_blocks<B: Block, A: Act, const DOT: bool>(x: &[B], y: &[A]) -> f32 {
    // SAFETY: the loads read the 32 level bytes of each activation block; the
    // features are enabled by the caller.
    unsafe {
        let mut acc = [vdupq_n_f32(0.0); 2];
        let mut mins = 0f32;
        for (k, (bx, by)) in x.iter().zip(y).enumerate() {
            let qy = by.qs();
            let ly = [vld1q_s8(qy.as_ptr()), vld1q_s8(qy[16..].as_ptr())];
            let s = vcvtq_f32_s32(idot::<DOT>(bx.levels(), ly));
            let a = &mut acc[k & 1];
            *a = vfmaq_n_f32(*a, s, bx.scale() * by.scale());
            mins += bx.min() * by.scaled_sum();
        }
        vaddvq_f32(vaddq_f32(acc[0], acc[1])) + mins
    }
}

macro_rules! block_dot {
    ($name:ident, $body:ident, $dot:literal, $features:literal, $wb:ty, $wsize:expr, $ab:ty, $asize:expr) => {
        #[target_feature(enable = $features)]
        fn $body(x: &[$wb], y: &[$ab]) -> f32 {
            // SAFETY: this function enables every feature the kernel needs.
            unsafe { dot_blocks::<$wb, $ab, $dot>(x, y) }
        }

        fn $name(n: usize, w: &[u8], act: &[u8]) -> f32 {
            let nb = n / 32;
            let x: &[$wb] = as_blocks(&w[..nb * $wsize]);
            let y: &[$ab] = as_blocks(&act[..nb * $asize]);
            // SAFETY: `vec_dot_variants` hands this function out only when
            // `Isa::Neon.available()` and, for the `_dp` variants, the
            // dot-product extension is detected.
            unsafe { $body(x, y) }
        }
    };
}

macro_rules! both {
    ($plain:ident, $dp:ident, $pb:ident, $db:ident, $wb:ty, $ws:expr, $ab:ty, $as_:expr) => {
        block_dot!($plain, $pb, false, "neon", $wb, $ws, $ab, $as_);
        block_dot!($dp, $db, true, "neon,dotprod", $wb, $ws, $ab, $as_);
    };
}

both!(
    vec_dot_q4_0,
    vec_dot_q4_0_dp,
    q4_0_neon,
    q4_0_dot,
    BlockQ4_0,
    18,
    BlockQ8_0,
    34
);
both!(
    vec_dot_q5_0,
    vec_dot_q5_0_dp,
    q5_0_neon,
    q5_0_dot,
    BlockQ5_0,
    22,
    BlockQ8_0,
    34
);
both!(
    vec_dot_q8_0,
    vec_dot_q8_0_dp,
    q8_0_neon,
    q8_0_dot,
    BlockQ8_0,
    34,
    BlockQ8_0,
    34
);
both!(
    vec_dot_iq4_nl,
    vec_dot_iq4_nl_dp,
    iq4_nl_neon,
    iq4_nl_dot,
    BlockIq4Nl,
    18,
    BlockQ8_0,
    34
);
both!(
    vec_dot_q4_1,
    vec_dot_q4_1_dp,
    q4_1_neon,
    q4_1_dot,
    BlockQ4_1,
    20,
    BlockQ8_1,
    36
);
both!(
    vec_dot_q5_1,
    vec_dot_q5_1_dp,
    q5_1_neon,
    q5_1_dot,
    BlockQ5_1,
    24,
    BlockQ8_1,
    36
);

/// The float dots' loop: four 4-lane FMA accumulators over 16-element
/// chunks (`load` converts 4 values to f32), the leftovers summed in scalar
/// order (`to_f32`), the accumulators folded `(0+1) + (2+3)`.
///
/// # Safety
/// The caller must have NEON enabled: it is inlined into each
/// `#[target_feature]` caller, which supplies its own conversion.
#[inline(always)]
unsafe fn dot16<T: Copy>(
    a: &[T],
    b: &[T],
    load: impl Fn(&[T]) -> float32x4_t,
    to_f32: impl Fn(T) -> f32,
) -> f32 {
    // SAFETY: register-only intrinsics; the loads are the caller's.
    unsafe {
        let mut acc = [vdupq_n_f32(0.0); 4];
        let mut ac = a.chunks_exact(16);
        let mut bc = b.chunks_exact(16);
        for (x, y) in (&mut ac).zip(&mut bc) {
            for (k, s) in acc.iter_mut().enumerate() {
                *s = vfmaq_f32(*s, load(&x[4 * k..]), load(&y[4 * k..]));
            }
        }
        let mut tail = 0f32;
        for (&x, &y) in ac.remainder().iter().zip(bc.remainder()) {
            tail += to_f32(x) * to_f32(y);
        }
        vaddvq_f32(vaddq_f32(
            vaddq_f32(acc[0], acc[1]),
            vaddq_f32(acc[2], acc[3]),
        )) + tail
    }
}

#[target_feature(enable = "neon")]
fn f32_neon(a: &[f32], b: &[f32]) -> f32 {
    // SAFETY: reads 4 floats at s..s+4 (bounds-checked by the slice).
    let load = |s: &[f32]| unsafe { vld1q_f32(s[..4].as_ptr()) };
    // SAFETY: NEON is enabled here.
    unsafe { dot16(a, b, load, |v| v) }
}

#[target_feature(enable = "neon")]
fn bf16_neon(a: &[bf16], b: &[bf16]) -> f32 {
    // bf16 → f32 is the bits shifted into the high half.
    // SAFETY: reads 4 values at s..s+4 (bounds-checked by the slice).
    let load = |s: &[bf16]| unsafe {
        vreinterpretq_f32_u32(vshll_n_u16::<16>(vld1_u16(s[..4].as_ptr().cast())))
    };
    // SAFETY: NEON is enabled here.
    unsafe { dot16(a, b, load, bf16::to_f32) }
}

/// f16 bits → f32 for 4 lanes, exactly: the exponent and mantissa moved
/// into f32 position and rescaled by 2^112 (normals and subnormals alike),
/// infinities and NaNs given the all-ones exponent, then the sign.
#[target_feature(enable = "neon")]
fn f16x4_to_f32(h: uint16x4_t) -> float32x4_t {
    let h = vmovl_u16(h);
    let sign = vshlq_n_u32::<16>(vandq_u32(h, vdupq_n_u32(0x8000)));
    let em = vandq_u32(h, vdupq_n_u32(0x7fff));
    let shifted = vshlq_n_u32::<13>(em);
    let scaled = vmulq_f32(
        vreinterpretq_f32_u32(shifted),
        vdupq_n_f32(f32::from_bits(0x7780_0000)),
    );
    let special = vcgeq_u32(em, vdupq_n_u32(0x7c00));
    let inf_nan = vorrq_u32(shifted, vdupq_n_u32(0x7f80_0000));
    let mag = vbslq_u32(special, inf_nan, vreinterpretq_u32_f32(scaled));
    vreinterpretq_f32_u32(vorrq_u32(mag, sign))
}

#[target_feature(enable = "neon")]
fn f16_neon(a: &[half::f16], b: &[half::f16]) -> f32 {
    // SAFETY: reads 4 values at s..s+4 (bounds-checked by the slice).
    let load = |s: &[half::f16]| f16x4_to_f32(unsafe { vld1_u16(s[..4].as_ptr().cast()) });
    // SAFETY: NEON is enabled here.
    unsafe { dot16(a, b, load, half::f16::to_f32) }
}

// Same safe entries as x86/avx2/legacy.rs::vec_dot_f32/f16/bf16: each tier wraps its own
// #[target_feature] kernels and states its own availability check, and only one of the two compiles
// per target.
fn vec_dot_f16(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let (a, b): (&[half::f16], &[half::f16]) = (as_blocks(&w[..n * 2]), as_blocks(&act[..n * 2]));
    // SAFETY: handed out only when `Isa::Neon.available()`.
    unsafe { f16_neon(a, b) }
}

fn vec_dot_f32(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let (a, b): (&[f32], &[f32]) = (as_blocks(&w[..n * 4]), as_blocks(&act[..n * 4]));
    // SAFETY: handed out only when `Isa::Neon.available()`.
    unsafe { f32_neon(a, b) }
}

fn vec_dot_bf16(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let (a, b): (&[bf16], &[bf16]) = (as_blocks(&w[..n * 2]), as_blocks(&act[..n * 2]));
    // SAFETY: handed out only when `Isa::Neon.available()`.
    unsafe { bf16_neon(a, b) }
}

// ---------------------------------------------------------------------------
// Activation quantisers.

/// One Q8 activation block as the scalar `q8_0::quantize_block_act` (ggml's
/// x86 converter, so every tier gives the same levels): `fcvtns` rounds half
/// to even. Returns `(d, Σ levels)`.
#[target_feature(enable = "neon")]
fn quantize_q8_block(x: &[f32], qs: &mut [i8; 32]) -> (f32, i32) {
    let x = &x[..32];
    // SAFETY: reads x[4k..4k+4] for k < 8 (bounds-checked above).
    let v: [float32x4_t; 8] = std::array::from_fn(|k| unsafe { vld1q_f32(x[4 * k..].as_ptr()) });
    let mut m = vabsq_f32(v[0]);
    for vk in &v[1..] {
        m = vmaxq_f32(m, vabsq_f32(*vk));
    }
    let amax = vmaxvq_f32(m);
    let d = amax / 127.0;
    let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
    let q: [int32x4_t; 8] = std::array::from_fn(|k| vcvtnq_s32_f32(vmulq_n_f32(v[k], id)));
    let mut sum = q[0];
    for qk in &q[1..] {
        sum = vaddq_s32(sum, *qk);
    }
    for h in 0..2 {
        let lo = vcombine_s16(vqmovn_s32(q[4 * h]), vqmovn_s32(q[4 * h + 1]));
        let hi = vcombine_s16(vqmovn_s32(q[4 * h + 2]), vqmovn_s32(q[4 * h + 3]));
        // SAFETY: writes the 16 bytes at 16h..16h+16 of `qs`.
        unsafe {
            vst1q_s8(
                qs[16 * h..].as_mut_ptr(),
                vcombine_s8(vqmovn_s16(lo), vqmovn_s16(hi)),
            )
        };
    }
    (d, vaddvq_s32(sum))
}

#[target_feature(enable = "neon")]
fn q8_0_quant_neon(src: &[f32], dst: &mut [BlockQ8_0]) {
    for (b, x) in dst.iter_mut().zip(src.chunks_exact(32)) {
        let (d, _) = quantize_q8_block(x, &mut b.qs);
        b.d = half::f16::from_f32(d);
    }
}

#[target_feature(enable = "neon")]
fn q8_1_quant_neon(src: &[f32], dst: &mut [BlockQ8_1]) {
    for (b, x) in dst.iter_mut().zip(src.chunks_exact(32)) {
        let (d, sum) = quantize_q8_block(x, &mut b.qs);
        b.d = half::f16::from_f32(d);
        b.s = half::f16::from_f32(sum as f32 * d);
    }
}

/// ggml's fp32 → bf16 on 4 lanes: NaN → quiet NaN, else round to nearest even.
#[target_feature(enable = "neon")]
fn bf16_round(u: uint32x4_t) -> uint16x4_t {
    let nan = vcgtq_u32(
        vandq_u32(u, vdupq_n_u32(0x7fff_ffff)),
        vdupq_n_u32(0x7f80_0000),
    );
    let hi = vshrq_n_u32::<16>(u);
    let quiet = vorrq_u32(hi, vdupq_n_u32(0x40));
    let bias = vaddq_u32(vdupq_n_u32(0x7fff), vandq_u32(hi, vdupq_n_u32(1)));
    let rounded = vshrq_n_u32::<16>(vaddq_u32(u, bias));
    vmovn_u32(vbslq_u32(nan, quiet, rounded))
}

#[target_feature(enable = "neon")]
fn bf16_quant_neon(src: &[f32], dst: &mut [bf16]) {
    let mut s = src.chunks_exact(4);
    let mut d = dst.chunks_exact_mut(4);
    for (x, o) in (&mut s).zip(&mut d) {
        // SAFETY: reads the 4 floats of `x`, writes the 4 values of `o`.
        unsafe {
            let r = bf16_round(vld1q_u32(x.as_ptr().cast()));
            vst1_u16(o.as_mut_ptr().cast(), r);
        }
    }
    for (o, x) in d.into_remainder().iter_mut().zip(s.remainder()) {
        *o = bf16::from_f32(*x);
    }
}

/// f32 → f16 on 4 lanes with `fcvtn` (round to nearest even under the
/// default FPCR; overflow to ±inf, subnormals kept, NaN quieted).
#[inline]
#[target_feature(enable = "neon")]
fn f16_narrow(v: float32x4_t) -> uint16x4_t {
    let r: uint16x4_t;
    // SAFETY: `fcvtn` reads and writes only the two vector registers named.
    unsafe {
        asm!(
            "fcvtn {r:v}.4h, {v:v}.4s",
            r = out(vreg) r,
            v = in(vreg) v,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    r
}

#[target_feature(enable = "neon")]
fn f16_quant_neon(src: &[f32], dst: &mut [half::f16]) {
    let mut s = src.chunks_exact(4);
    let mut d = dst.chunks_exact_mut(4);
    for (x, o) in (&mut s).zip(&mut d) {
        // SAFETY: reads the 4 floats of `x`, writes the 4 values of `o`.
        unsafe { vst1_u16(o.as_mut_ptr().cast(), f16_narrow(vld1q_f32(x.as_ptr()))) };
    }
    for (o, x) in d.into_remainder().iter_mut().zip(s.remainder()) {
        *o = half::f16::from_f32(*x);
    }
}

fn quantize_f16(src: &[f32], dst: &mut [u8]) {
    let d: &mut [half::f16] = as_blocks_mut(&mut dst[..src.len() * 2]);
    // SAFETY: handed out by `quantize_fn` only when `Isa::Neon.available()`.
    unsafe { f16_quant_neon(src, d) }
}

fn quantize_q8_0(src: &[f32], dst: &mut [u8]) {
    let b: &mut [BlockQ8_0] = as_blocks_mut(&mut dst[..src.len() / 32 * 34]);
    // SAFETY: handed out by `quantize_fn` only when `Isa::Neon.available()`.
    unsafe { q8_0_quant_neon(src, b) }
}

fn quantize_q8_1(src: &[f32], dst: &mut [u8]) {
    let b: &mut [BlockQ8_1] = as_blocks_mut(&mut dst[..src.len() / 32 * 36]);
    // SAFETY: handed out by `quantize_fn` only when `Isa::Neon.available()`.
    unsafe { q8_1_quant_neon(src, b) }
}

fn quantize_bf16(src: &[f32], dst: &mut [u8]) {
    let d: &mut [bf16] = as_blocks_mut(&mut dst[..src.len() * 2]);
    // SAFETY: handed out by `quantize_fn` only when `Isa::Neon.available()`.
    unsafe { bf16_quant_neon(src, d) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f16_narrowing_matches_half_for_ties_overflow_subnormals_and_nan() {
        if !Isa::Neon.available() {
            eprintln!("!!! NEON not available: SKIPPED !!!");
            return;
        }
        // Every f32 whose low 13 mantissa bits are 0, 0x1000 (a tie), 0x1001
        // or 0x0fff, for every exponent and sign and a spread of high
        // mantissas: ties both ways, overflow, subnormals, inf and NaN.
        let mut xs = Vec::new();
        for sign in [0u32, 1] {
            for exp in 0..256u32 {
                for hi in [0u32, 1, 0x155, 0x2aa, 0x3fe, 0x3ff] {
                    for lo in [0u32, 0x1000, 0x1001, 0x0fff] {
                        xs.push(f32::from_bits((sign << 31) | (exp << 23) | (hi << 13) | lo));
                    }
                }
            }
        }
        let mut out = vec![half::f16::ZERO; xs.len()];
        f16_quant_neon_checked(&xs, &mut out);
        for (x, o) in xs.iter().zip(&out) {
            let want = half::f16::from_f32(*x);
            assert!(
                o.to_bits() == want.to_bits() || (o.is_nan() && want.is_nan()),
                "f32 {:#010x}: {:#06x} vs half {:#06x}",
                x.to_bits(),
                o.to_bits(),
                want.to_bits()
            );
        }
    }

    fn f16_quant_neon_checked(src: &[f32], dst: &mut [half::f16]) {
        // SAFETY: the caller checked `Isa::Neon.available()`.
        unsafe { f16_quant_neon(src, dst) }
    }

    #[test]
    fn f16_widening_is_exact_for_every_bit_pattern() {
        if !Isa::Neon.available() {
            eprintln!("!!! NEON not available: SKIPPED !!!");
            return;
        }
        for chunk in 0..(1u32 << 16) / 4 {
            let bits: [u16; 4] = std::array::from_fn(|k| (chunk * 4 + k as u32) as u16);
            let mut out = [0f32; 4];
            // SAFETY: NEON is available (checked above); the load reads the 4
            // values of `bits`, the store writes the 4 floats of `out`.
            unsafe { vst1q_f32(out.as_mut_ptr(), f16x4_to_f32(vld1_u16(bits.as_ptr()))) };
            for (b, o) in bits.iter().zip(out) {
                let want = half::f16::from_bits(*b).to_f32();
                assert!(
                    o.to_bits() == want.to_bits() || (o.is_nan() && want.is_nan()),
                    "f16 {b:#06x}: {o} vs {want}"
                );
            }
        }
    }
}
