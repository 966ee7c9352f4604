//! F32, F16 and BF16: one element per "block"; f32 products summed in f64
//! (ggml's scalar `ggml_float`), the reference the f32-accumulating SIMD sums
//! are held to.
//!
//! F16 and BF16 weights are dotted with activations of their own type (ggml
//! converts the activation row first), so both operands are rounded.

use half::{bf16, f16};

use crate::blocks::{as_blocks, as_blocks_mut};

pub fn dequantize_f32(src: &[u8], dst: &mut [f32]) {
    let s: &[f32] = as_blocks(&src[..dst.len() * 4]);
    dst.copy_from_slice(s);
}

/// Every f16 converts to f32 exactly; `half`'s slice conversion does it 4 or
/// 8 at a time (F16C where the host has it), the same values as one by one.
pub fn dequantize_f16(src: &[u8], dst: &mut [f32]) {
    use half::slice::HalfFloatSliceExt;
    let s: &[f16] = as_blocks(&src[..dst.len() * 2]);
    s.convert_to_f32_slice(dst);
}

pub fn dequantize_bf16(src: &[u8], dst: &mut [f32]) {
    let s: &[bf16] = as_blocks(&src[..dst.len() * 2]);
    for (d, x) in dst.iter_mut().zip(s) {
        *d = x.to_f32();
    }
}

pub fn quantize_f32(src: &[f32], dst: &mut [u8]) {
    let d: &mut [f32] = as_blocks_mut(&mut dst[..src.len() * 4]);
    d.copy_from_slice(src);
}

/// Round to nearest even, as ggml's `GGML_FP32_TO_FP16`.
pub fn quantize_f16(src: &[f32], dst: &mut [u8]) {
    let d: &mut [f16] = as_blocks_mut(&mut dst[..src.len() * 2]);
    for (o, x) in d.iter_mut().zip(src) {
        *o = f16::from_f32(*x);
    }
}

/// Round to nearest even with NaNs kept quiet, as ggml's `ggml_compute_fp32_to_bf16`.
pub fn quantize_bf16(src: &[f32], dst: &mut [u8]) {
    let d: &mut [bf16] = as_blocks_mut(&mut dst[..src.len() * 2]);
    for (o, x) in d.iter_mut().zip(src) {
        *o = bf16::from_f32(*x);
    }
}

/// Σ x·y with each product rounded to f32 and the sum kept in f64, as ggml's
/// scalar `ggml_vec_dot_f32` (`ggml_float` is double). The more accurate sum
/// makes this the tighter reference for the reordered SIMD sums.
pub fn vec_dot_f32(n: usize, w: &[u8], act: &[u8]) -> f32 {
    let w: &[f32] = as_blocks(&w[..n * 4]);
    let a: &[f32] = as_blocks(&act[..n * 4]);
    w.iter().zip(a).map(|(x, y)| (x * y) as f64).sum::<f64>() as f32
}

/// F16 · F16: products are exact in f32 (11-bit significands), summed in f64
/// as ggml's scalar `ggml_vec_dot_f16`.
pub fn vec_dot_f16(n: usize, w: &[u8], act: &[u8]) -> f32 {
    dot_halves(n, w, act, f16::to_f32)
}

/// BF16 · BF16: products exact in f32 (8-bit significands), summed in f64 as
/// ggml's scalar `ggml_vec_dot_bf16`.
pub fn vec_dot_bf16(n: usize, w: &[u8], act: &[u8]) -> f32 {
    dot_halves(n, w, act, bf16::to_f32)
}

/// Σ x·y over `n` two-byte floats of type `T`: each product of the f32
/// conversions rounded to f32, the sum kept in f64.
fn dot_halves<T: bytemuck::Pod>(n: usize, w: &[u8], act: &[u8], to_f32: fn(T) -> f32) -> f32 {
    let w: &[T] = as_blocks(&w[..n * 2]);
    let a: &[T] = as_blocks(&act[..n * 2]);
    w.iter()
        .zip(a)
        .map(|(&x, &y)| (to_f32(x) * to_f32(y)) as f64)
        .sum::<f64>() as f32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f16_rows_convert_every_bit_pattern_as_one_by_one_conversion_does() {
        let all: Vec<u16> = (0..=u16::MAX).collect();
        // Odd lengths too: the slice conversion works in chunks of 4 / 8.
        for len in [all.len(), 13, 7, 1] {
            let src: &[u8] = bytemuck::cast_slice(&all[..len]);
            let mut got = vec![0.0f32; len];
            dequantize_f16(src, &mut got);
            for (i, (&g, &h)) in got.iter().zip(&all).enumerate() {
                let want = f16::from_bits(h).to_f32();
                assert!(
                    g.to_bits() == want.to_bits() || (g.is_nan() && want.is_nan()),
                    "[{i}] {h:#06x}: {g} vs {want}"
                );
            }
        }
    }
}
