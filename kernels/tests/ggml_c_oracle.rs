//! Our quantisers against ggml's own C code (libggml-base from the llama.cpp
//! sources), for what gguf-py cannot check: the importance-weighted searches,
//! IQ4_NL's reference quantiser and Q8_1 (with its stored sum).
//!
//! Fixtures come from `scripts/ggml_c_oracle.py`; `$CLOVER_GGML_C_DIR`
//! overrides the committed copies in `tests/fixtures/ggml_c`.

mod common;

use std::path::PathBuf;

use common::f32s;
use common::Buf;
use kernels::{scalar, GgmlType};

fn read(name: &str) -> Vec<u8> {
    let dir = match std::env::var_os("CLOVER_GGML_C_DIR") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/ggml_c"),
    };
    let path = dir.join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("missing fixture {}: {e}", path.display()))
}

fn matches_ggml(ty: GgmlType, case: &str, weighted: bool) {
    let stem = format!("{}.{case}", ty.name());
    let x = f32s(&read(&format!("{stem}.qin.f32")));
    let expected = read(&format!("{stem}.qout.bin"));
    let imatrix = weighted.then(|| f32s(&read(&format!("{stem}.imatrix.f32"))));
    let mut got = Buf::for_row(ty, x.len());
    scalar::quantize_row(ty, &x, got.bytes_mut(), imatrix.as_deref());
    assert_eq!(got.bytes().len(), expected.len());
    for (i, (g, e)) in got.bytes().iter().zip(&expected).enumerate() {
        assert_eq!(g, e, "{stem}: byte {i} (block {})", i / ty.type_size());
    }
}

// One test per type and fixture, alike but for the arguments: each names its type, so a failure
// says which quantiser left ggml's bytes.
#[test]
fn q4_0_weighted_search_matches_ggml() {
    matches_ggml(GgmlType::Q4_0, "weighted", true);
}

#[test]
fn q4_1_weighted_search_matches_ggml() {
    matches_ggml(GgmlType::Q4_1, "weighted", true);
}

#[test]
fn q5_0_weighted_search_matches_ggml() {
    matches_ggml(GgmlType::Q5_0, "weighted", true);
}

#[test]
fn q5_1_weighted_search_matches_ggml() {
    matches_ggml(GgmlType::Q5_1, "weighted", true);
}

#[test]
fn iq4_nl_weighted_search_matches_ggml() {
    matches_ggml(GgmlType::IQ4_NL, "weighted", true);
}

#[test]
fn iq4_nl_reference_quantiser_matches_ggml() {
    matches_ggml(GgmlType::IQ4_NL, "ref", false);
}

#[test]
fn q8_1_reference_quantiser_matches_ggml() {
    matches_ggml(GgmlType::Q8_1, "ref", false);
}

fn dot_fixture(ty: GgmlType) -> (f32, f32, f32) {
    let stem = format!("{}.dot", ty.name());
    let (w_raw, a_raw) = (
        read(&format!("{stem}.w.bin")),
        read(&format!("{stem}.a.bin")),
    );
    let expected = f32s(&read(&format!("{stem}.f32")));
    let n = w_raw.len() / ty.type_size() * 32;
    let mut w = Buf::zeroed(w_raw.len());
    w.bytes_mut().copy_from_slice(&w_raw);
    let mut a = Buf::zeroed(a_raw.len());
    a.bytes_mut().copy_from_slice(&a_raw);
    let got = scalar::vec_dot(ty, n, w.bytes(), a.bytes());
    (got, expected[0], expected[1])
}

/// Our scalar dot against ggml's scalar (`_generic`) dot on ggml-quantised
/// rows: the same integer block dots and the same f32 operations in the same
/// order, so the results are bit-identical.
fn dot_matches_ggml_generic(ty: GgmlType) {
    let (got, generic, simd) = dot_fixture(ty);
    assert_eq!(
        got.to_bits(),
        generic.to_bits(),
        "{ty}: ours {got}, ggml generic {generic}, ggml SIMD {simd}"
    );
}

#[test]
fn q4_0_dot_matches_ggml_generic() {
    dot_matches_ggml_generic(GgmlType::Q4_0);
}

#[test]
fn q8_0_dot_matches_ggml_generic() {
    dot_matches_ggml_generic(GgmlType::Q8_0);
}

#[test]
fn iq4_nl_dot_matches_ggml_generic() {
    dot_matches_ggml_generic(GgmlType::IQ4_NL);
}

/// Q4_1/Q5_1: the -march=native build contracts the block term
/// `(dx·dy)·sumi + mx·sy` into one FMA (recomputing with that contraction
/// reproduces its value bit for bit); we keep the source's two roundings, so
/// the sums agree to a few f32 ulps.
fn dot_matches_ggml_generic_up_to_fma(ty: GgmlType) {
    let (got, generic, simd) = dot_fixture(ty);
    let tol = 8.0 * f32::EPSILON * generic.abs();
    assert!(
        (got - generic).abs() <= tol,
        "{ty}: ours {got}, ggml generic {generic}, ggml SIMD {simd}"
    );
}

#[test]
fn q4_1_dot_matches_ggml_generic_up_to_fma_contraction() {
    dot_matches_ggml_generic_up_to_fma(GgmlType::Q4_1);
}

#[test]
fn q5_1_dot_matches_ggml_generic_up_to_fma_contraction() {
    dot_matches_ggml_generic_up_to_fma(GgmlType::Q5_1);
}

/// Q5_0: the local build of `ggml_vec_dot_q5_0_q8_0_generic` is wrong (a
/// block of all-zero levels against all-one activations gives 7680, not −512;
/// its source is right, the build is not), so ggml's SIMD dot is the
/// reference here, within f32 reordering.
#[test]
fn q5_0_dot_matches_ggml_simd() {
    let (got, _generic, simd) = dot_fixture(GgmlType::Q5_0);
    assert!(
        (got - simd).abs() <= 1e-6 * simd.abs(),
        "Q5_0: ours {got}, ggml SIMD {simd}"
    );
}
