//! Our quantisers against ggml itself (libggml-base of a llama.cpp build), for
//! the types gguf-py cannot quantise: Q2_K..Q6_K, IQ4_XS (reference and
//! importance-weighted paths) and Q8_K.
//!
//! Fixtures in `tests/fixtures/ggml_kquants` come from
//! `scripts/ggml_kquant_oracle.sh` (which builds `scripts/ggml_kquant_oracle.c`
//! against libggml-base and calls `quantize_row_*_ref` / `quantize_*`).

use std::path::PathBuf;

use kernels::{scalar, GgmlType};

fn read(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/ggml_kquants")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("missing fixture {}: {e}", path.display()))
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn quantisation_matches_ggml(ty: GgmlType, weighted: bool) {
    let input = f32s(&read("input.f32"));
    let imatrix = f32s(&read("imatrix.f32"));
    let kind = if weighted { "imat" } else { "ref" };
    let expected = read(&format!("{}.{kind}.bin", ty.name()));
    assert_eq!(
        ty.row_bytes(input.len() as u64),
        Some(expected.len() as u64)
    );
    let mut aligned = vec![0u32; expected.len().div_ceil(4)];
    let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut aligned);
    let got = &mut bytes[..expected.len()];
    scalar::quantize_row(ty, &input, got, weighted.then_some(&imatrix[..]));
    let bad: Vec<usize> = (0..expected.len())
        .filter(|&i| got[i] != expected[i])
        .collect();
    assert!(
        bad.is_empty(),
        "{ty} ({kind}): {} bytes differ from ggml, first at byte {} (block {}): ours {:#04x}, ggml {:#04x}",
        bad.len(),
        bad[0],
        bad[0] / ty.type_size(),
        got[bad[0]],
        expected[bad[0]]
    );
}

macro_rules! oracle_tests {
    ($($test:ident => $ty:expr, $weighted:expr;)*) => {
        $(#[test] fn $test() { quantisation_matches_ggml($ty, $weighted) })*
    };
}

oracle_tests! {
    q2_k_reference_quantisation_matches_ggml_bytes => GgmlType::Q2_K, false;
    q3_k_reference_quantisation_matches_ggml_bytes => GgmlType::Q3_K, false;
    q4_k_reference_quantisation_matches_ggml_bytes => GgmlType::Q4_K, false;
    q5_k_reference_quantisation_matches_ggml_bytes => GgmlType::Q5_K, false;
    q6_k_reference_quantisation_matches_ggml_bytes => GgmlType::Q6_K, false;
    iq4_xs_reference_quantisation_matches_ggml_bytes => GgmlType::IQ4_XS, false;
    q8_k_quantisation_matches_ggml_bytes => GgmlType::Q8_K, false;
    q2_k_imatrix_quantisation_matches_ggml_bytes => GgmlType::Q2_K, true;
    q3_k_imatrix_quantisation_matches_ggml_bytes => GgmlType::Q3_K, true;
    q4_k_imatrix_quantisation_matches_ggml_bytes => GgmlType::Q4_K, true;
    q5_k_imatrix_quantisation_matches_ggml_bytes => GgmlType::Q5_K, true;
    q6_k_imatrix_quantisation_matches_ggml_bytes => GgmlType::Q6_K, true;
    iq4_xs_imatrix_quantisation_matches_ggml_bytes => GgmlType::IQ4_XS, true;
}
