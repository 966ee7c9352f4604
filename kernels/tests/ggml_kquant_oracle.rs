//! Our quantisers and dot products against ggml itself (a llama.cpp build's
//! libggml-base and libggml-cpu), for the types gguf-py cannot quantise:
//! Q2_K..Q6_K, IQ4_XS (reference and importance-weighted paths) and Q8_K;
//! the scalar dot against `ggml_vec_dot_*_q8_K_generic`, every tier's against
//! the build's SIMD `ggml_vec_dot_*_q8_K`.
//!
//! Fixtures in `tests/fixtures/ggml_kquants` come from
//! `scripts/ggml_kquant_oracle.sh` (which builds `scripts/ggml_kquant_oracle.c`
//! against those libraries and writes their outputs).

mod common;

use std::path::PathBuf;

use common::f32s;
use kernels::{scalar, GgmlType};

fn read(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/ggml_kquants")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("missing fixture {}: {e}", path.display()))
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

// One named test per type and mode, alike but for the names: a failure names the quantiser that
// left ggml's bytes.
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

/// ggml's dot products of its own `<T>.ref.bin` blocks with the Q8_K
/// quantisation of `act.f32`, over the first 1, 3, 7 and 16 blocks:
/// `[generic ×4, the build's SIMD ×4]`.
fn ggml_dots(ty: GgmlType) -> ([f32; 4], [f32; 4]) {
    let d = f32s(&read(&format!("{}.dot.f32", ty.name())));
    (d[0..4].try_into().unwrap(), d[4..8].try_into().unwrap())
}

const DOT_BLOCKS: [usize; 4] = [1, 3, 7, 16];

/// (weights as ggml quantised them, activations as Q8_K), both aligned.
fn dot_operands(ty: GgmlType) -> (Vec<u32>, usize, Vec<u32>, usize) {
    let w = read(&format!("{}.ref.bin", ty.name()));
    let mut wa = vec![0u32; w.len().div_ceil(4)];
    bytemuck::cast_slice_mut::<u32, u8>(&mut wa)[..w.len()].copy_from_slice(&w);
    let act = f32s(&read("act.f32"));
    let alen = GgmlType::Q8_K.row_bytes(act.len() as u64).unwrap() as usize;
    let mut aa = vec![0u32; alen.div_ceil(4)];
    scalar::quantize_row(
        GgmlType::Q8_K,
        &act,
        &mut bytemuck::cast_slice_mut::<u32, u8>(&mut aa)[..alen],
        None,
    );
    (wa, w.len(), aa, alen)
}

/// ggml-cpu is built with `-march=native`, and GCC contracts
/// `ggml_vec_dot_q4_K_q8_K_generic`'s (and Q5_K's) `sums[l] += d*aux32[l]` and
/// `sumf -= dmin*sumi` into FMAs (`vfmadd231ps`, `vfnmadd231ss` in the shared
/// object); our reference rounds each product, as an FMA-less ggml build does.
/// For those two types the results may differ by those roundings: a few ulps.
fn fused_in_this_ggml_build(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::Q4_K | GgmlType::Q5_K)
}

fn scalar_dot_matches_ggml_generic(ty: GgmlType) {
    let (generic, _) = ggml_dots(ty);
    let (wa, wlen, aa, alen) = dot_operands(ty);
    let w = &bytemuck::cast_slice::<u32, u8>(&wa)[..wlen];
    let a = &bytemuck::cast_slice::<u32, u8>(&aa)[..alen];
    for (nb, want) in DOT_BLOCKS.into_iter().zip(generic) {
        let bs = ty.type_size();
        let got = scalar::vec_dot(ty, 256 * nb, &w[..nb * bs], &a[..nb * 292]);
        if fused_in_this_ggml_build(ty) {
            let ulps = (got.to_bits() as i64 - want.to_bits() as i64).abs();
            assert!(
                ulps <= 8,
                "{ty} over {nb} blocks: ours {got}, ggml generic {want} ({ulps} ulps)"
            );
            continue;
        }
        assert_eq!(
            got.to_bits(),
            want.to_bits(),
            "{ty} over {nb} blocks: ours {got}, ggml generic {want}"
        );
    }
}

fn every_tier_dot_is_close_to_ggml_simd(ty: GgmlType) {
    let (generic, simd) = ggml_dots(ty);
    let (wa, wlen, aa, alen) = dot_operands(ty);
    let w = &bytemuck::cast_slice::<u32, u8>(&wa)[..wlen];
    let a = &bytemuck::cast_slice::<u32, u8>(&aa)[..alen];
    for isa in kernels::Isa::all_available() {
        let f = kernels::KernelTable::new(isa).vec_dot(ty);
        for (j, nb) in DOT_BLOCKS.into_iter().enumerate() {
            let bs = ty.type_size();
            let got = f(256 * nb, &w[..nb * bs], &a[..nb * 292]);
            // ggml's own two orders differ by rounding; ours must be as close
            // to its SIMD result as its generic one is, or within 1e-5 relative.
            let tol = (1e-5 * simd[j].abs()).max(2.0 * (generic[j] - simd[j]).abs());
            assert!(
                (got - simd[j]).abs() <= tol,
                "{isa} {ty} over {nb} blocks: {got}, ggml SIMD {}, generic {}",
                simd[j],
                generic[j]
            );
        }
    }
}

macro_rules! dot_tests {
    ($($exact:ident, $close:ident => $ty:expr;)*) => {
        $(
            #[test] fn $exact() { scalar_dot_matches_ggml_generic($ty) }
            #[test] fn $close() { every_tier_dot_is_close_to_ggml_simd($ty) }
        )*
    };
}

dot_tests! {
    q2_k_scalar_dot_is_ggml_generic_bit_for_bit, q2_k_every_tier_dot_is_close_to_ggml_simd => GgmlType::Q2_K;
    q3_k_scalar_dot_is_ggml_generic_bit_for_bit, q3_k_every_tier_dot_is_close_to_ggml_simd => GgmlType::Q3_K;
    q4_k_scalar_dot_is_ggml_generic_up_to_its_fmas, q4_k_every_tier_dot_is_close_to_ggml_simd => GgmlType::Q4_K;
    q5_k_scalar_dot_is_ggml_generic_up_to_its_fmas, q5_k_every_tier_dot_is_close_to_ggml_simd => GgmlType::Q5_K;
    q6_k_scalar_dot_is_ggml_generic_bit_for_bit, q6_k_every_tier_dot_is_close_to_ggml_simd => GgmlType::Q6_K;
    iq4_xs_scalar_dot_is_ggml_generic_bit_for_bit, iq4_xs_every_tier_dot_is_close_to_ggml_simd => GgmlType::IQ4_XS;
}
