//! Our block formats against the PyPI package `gguf` (llama.cpp's numpy code).
//!
//! Fixtures come from `scripts/gguf_oracle.py`; CI regenerates them live into
//! `$CLOVER_ORACLE_DIR` (and so checks against the oracle itself), otherwise
//! the committed copies in `tests/fixtures/gguf_oracle` are used.

mod common;

use std::path::PathBuf;

use common::f32s;
use kernels::{scalar, GgmlType};

fn oracle_dir() -> PathBuf {
    match std::env::var_os("CLOVER_ORACLE_DIR").filter(|d| !d.is_empty()) {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gguf_oracle"),
    }
}

fn read(name: &str) -> Vec<u8> {
    let path = oracle_dir().join(name);
    std::fs::read(&path)
        .unwrap_or_else(|e| panic!("missing oracle fixture {}: {e}", path.display()))
}

/// Our dequantisation of the oracle's blocks is bit-identical to gguf-py's.
fn dequantisation_matches_gguf_py(ty: GgmlType) {
    let blocks = read(&format!("{}.bin", ty.name()));
    let expected = f32s(&read(&format!("{}.f32", ty.name())));
    assert_eq!(
        ty.row_bytes(expected.len() as u64),
        Some(blocks.len() as u64),
        "fixture sizes for {ty}"
    );
    // Copy into an aligned buffer: fixtures are read into a Vec<u8> of any alignment.
    let mut aligned = vec![0u32; blocks.len().div_ceil(4)];
    let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut aligned);
    bytes[..blocks.len()].copy_from_slice(&blocks);
    let mut got = vec![0f32; expected.len()];
    scalar::dequantize_row(ty, &bytes[..blocks.len()], &mut got);
    for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
        assert_eq!(
            g.to_bits(),
            e.to_bits(),
            "{ty} element {i}: ours {g}, gguf-py {e}"
        );
    }
}

/// Our reference quantisation is byte-identical to gguf-py's, for the types it
/// can quantise.
fn quantisation_matches_gguf_py(ty: GgmlType) {
    let input = f32s(&read(&format!("{}.qin.f32", ty.name())));
    let expected = read(&format!("{}.qout.bin", ty.name()));
    let mut aligned = vec![0u32; expected.len().div_ceil(4)];
    let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut aligned);
    let got = &mut bytes[..expected.len()];
    scalar::quantize_row(ty, &input, got, None);
    assert_eq!(got.len(), expected.len());
    for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
        assert_eq!(g, e, "{ty} byte {i} (block {})", i / ty.type_size());
    }
}

macro_rules! dequant_tests {
    ($($test:ident => $ty:expr),* $(,)?) => {
        $(#[test] fn $test() { dequantisation_matches_gguf_py($ty) })*
    };
}

macro_rules! quant_tests {
    ($($test:ident => $ty:expr),* $(,)?) => {
        $(#[test] fn $test() { quantisation_matches_gguf_py($ty) })*
    };
}

dequant_tests! {
    dequant_f16_matches_gguf_py => GgmlType::F16,
    dequant_bf16_matches_gguf_py => GgmlType::BF16,
    dequant_q4_0_matches_gguf_py => GgmlType::Q4_0,
    dequant_q4_1_matches_gguf_py => GgmlType::Q4_1,
    dequant_q5_0_matches_gguf_py => GgmlType::Q5_0,
    dequant_q5_1_matches_gguf_py => GgmlType::Q5_1,
    dequant_q8_0_matches_gguf_py => GgmlType::Q8_0,
    dequant_iq4_nl_matches_gguf_py => GgmlType::IQ4_NL,
    dequant_q2_k_matches_gguf_py => GgmlType::Q2_K,
    dequant_q3_k_matches_gguf_py => GgmlType::Q3_K,
    dequant_q4_k_matches_gguf_py => GgmlType::Q4_K,
    dequant_q5_k_matches_gguf_py => GgmlType::Q5_K,
    dequant_q6_k_matches_gguf_py => GgmlType::Q6_K,
    dequant_iq4_xs_matches_gguf_py => GgmlType::IQ4_XS,
}

quant_tests! {
    quant_bf16_matches_gguf_py => GgmlType::BF16,
    quant_q4_0_matches_gguf_py => GgmlType::Q4_0,
    quant_q4_1_matches_gguf_py => GgmlType::Q4_1,
    quant_q5_0_matches_gguf_py => GgmlType::Q5_0,
    quant_q5_1_matches_gguf_py => GgmlType::Q5_1,
    quant_q8_0_matches_gguf_py => GgmlType::Q8_0,
}
