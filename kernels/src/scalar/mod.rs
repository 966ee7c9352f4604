//! The scalar reference: the specification every SIMD kernel is tested against.
//! Never deleted, never "optimised" past plain readable loops.
//!
//! Each type module exposes, over raw little-endian bytes:
//! - `dequantize(src: &[u8], dst: &mut [f32])`
//! - `quantize(src: &[f32], dst: &mut [u8], imatrix: Option<&[f32]>)`
//! - `vec_dot(n: usize, w: &[u8], act: &[u8]) -> f32`, `act` in the weight
//!   type's `vec_dot_type()` layout, f32 accumulation.

pub mod float;
pub mod iq4_grid;
pub mod iq4_nl;
pub mod iq4_xs;
pub mod kquant_search;
pub mod legacy_search;
pub mod q2_k;
pub mod q3_k;
pub mod q4_0;
pub mod q4_1;
pub mod q4_k;
pub mod q5_0;
pub mod q5_1;
pub mod q5_k;
pub mod q6_k;
pub mod q8_0;
pub mod q8_1;
pub mod q8_k;

use crate::GgmlType;

/// Dequantises `dst.len()` elements of type `ty` from `src`.
pub fn dequantize_row(ty: GgmlType, src: &[u8], dst: &mut [f32]) {
    match ty {
        GgmlType::F32 => float::dequantize_f32(src, dst),
        GgmlType::F16 => float::dequantize_f16(src, dst),
        GgmlType::BF16 => float::dequantize_bf16(src, dst),
        GgmlType::Q4_0 => q4_0::dequantize(src, dst),
        GgmlType::Q4_1 => q4_1::dequantize(src, dst),
        GgmlType::Q5_0 => q5_0::dequantize(src, dst),
        GgmlType::Q5_1 => q5_1::dequantize(src, dst),
        GgmlType::Q8_0 => q8_0::dequantize(src, dst),
        GgmlType::Q8_1 => q8_1::dequantize(src, dst),
        GgmlType::Q2_K => q2_k::dequantize(src, dst),
        GgmlType::Q3_K => q3_k::dequantize(src, dst),
        GgmlType::Q4_K => q4_k::dequantize(src, dst),
        GgmlType::Q5_K => q5_k::dequantize(src, dst),
        GgmlType::Q6_K => q6_k::dequantize(src, dst),
        GgmlType::Q8_K => q8_k::dequantize(src, dst),
        GgmlType::IQ4_NL => iq4_nl::dequantize(src, dst),
        GgmlType::IQ4_XS => iq4_xs::dequantize(src, dst),
    }
}

/// [`quantize_row`] as ggml's `ggml_quantize_chunk` (what llama-quantize
/// calls) rather than the `quantize_row_*_ref` functions: the same for every
/// type but IQ4_NL, whose chunk quantizer always searches 15 trial scales
/// (`ntry = 7`) where its `_ref` refits once.
pub fn quantize_chunk_row(ty: GgmlType, src: &[f32], dst: &mut [u8], imatrix: Option<&[f32]>) {
    match ty {
        GgmlType::IQ4_NL => iq4_nl::quantize_searched(src, dst, imatrix),
        _ => quantize_row(ty, src, dst, imatrix),
    }
}

/// Quantises `src` into `dst` (exactly `ty.row_bytes(src.len())` bytes),
/// optionally weighting the scale search by an importance matrix of
/// `src.len()` entries.
pub fn quantize_row(ty: GgmlType, src: &[f32], dst: &mut [u8], imatrix: Option<&[f32]>) {
    match ty {
        GgmlType::F32 => float::quantize_f32(src, dst),
        GgmlType::F16 => float::quantize_f16(src, dst),
        GgmlType::BF16 => float::quantize_bf16(src, dst),
        GgmlType::Q4_0 => q4_0::quantize(src, dst, imatrix),
        GgmlType::Q4_1 => q4_1::quantize(src, dst, imatrix),
        GgmlType::Q5_0 => q5_0::quantize(src, dst, imatrix),
        GgmlType::Q5_1 => q5_1::quantize(src, dst, imatrix),
        GgmlType::Q8_0 => q8_0::quantize(src, dst, imatrix),
        GgmlType::Q8_1 => q8_1::quantize(src, dst, imatrix),
        GgmlType::Q2_K => q2_k::quantize(src, dst, imatrix),
        GgmlType::Q3_K => q3_k::quantize(src, dst, imatrix),
        GgmlType::Q4_K => q4_k::quantize(src, dst, imatrix),
        GgmlType::Q5_K => q5_k::quantize(src, dst, imatrix),
        GgmlType::Q6_K => q6_k::quantize(src, dst, imatrix),
        GgmlType::Q8_K => q8_k::quantize(src, dst, imatrix),
        GgmlType::IQ4_NL => iq4_nl::quantize(src, dst, imatrix),
        GgmlType::IQ4_XS => iq4_xs::quantize(src, dst, imatrix),
    }
}

/// Dot product of `n` weights of type `ty` with `n` activations already in
/// `ty.vec_dot_type()` layout.
pub fn vec_dot(ty: GgmlType, n: usize, w: &[u8], act: &[u8]) -> f32 {
    match ty {
        GgmlType::F32 => float::vec_dot_f32(n, w, act),
        GgmlType::F16 => float::vec_dot_f16(n, w, act),
        GgmlType::BF16 => float::vec_dot_bf16(n, w, act),
        GgmlType::Q4_0 => q4_0::vec_dot(n, w, act),
        GgmlType::Q4_1 => q4_1::vec_dot(n, w, act),
        GgmlType::Q5_0 => q5_0::vec_dot(n, w, act),
        GgmlType::Q5_1 => q5_1::vec_dot(n, w, act),
        GgmlType::Q8_0 => q8_0::vec_dot(n, w, act),
        GgmlType::Q8_1 => q8_1::vec_dot(n, w, act),
        GgmlType::Q2_K => q2_k::vec_dot(n, w, act),
        GgmlType::Q3_K => q3_k::vec_dot(n, w, act),
        GgmlType::Q4_K => q4_k::vec_dot(n, w, act),
        GgmlType::Q5_K => q5_k::vec_dot(n, w, act),
        GgmlType::Q6_K => q6_k::vec_dot(n, w, act),
        GgmlType::Q8_K => q8_k::vec_dot(n, w, act),
        GgmlType::IQ4_NL => iq4_nl::vec_dot(n, w, act),
        GgmlType::IQ4_XS => iq4_xs::vec_dot(n, w, act),
    }
}
