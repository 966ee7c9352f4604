//! Every SIMD tier on this host against the scalar reference, for the
//! 32-element block types and the float types: activation quantisers
//! bit-exact, dot products within 1e-5 of Σ|wᵢ·aᵢ| (the tiers sum the same exact
//! integer block dots and exact float products in another order; f32
//! reordering error is bounded by ~(terms)·2⁻²⁴·Σ|terms|, below 1e-5 for the
//! lengths here).

mod common;

use common::{dequantize, quantize, test_row, Buf, Rng};
use kernels::{scalar, GgmlType, Isa, KernelTable};

// The 32-element weight types, as at the head of avx512_ggml_order.rs::TYPES: each test
// file lists the set it covers (that one adds the K-quants).
const BLOCK_TYPES: [GgmlType; 6] = [
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::IQ4_NL,
];
const FLOAT_TYPES: [GgmlType; 3] = [GgmlType::F32, GgmlType::F16, GgmlType::BF16];
const BLOCK_COUNTS: [usize; 7] = [1, 2, 3, 7, 9, 17, 33];
const FLOAT_LENGTHS: [usize; 14] = [1, 2, 3, 7, 9, 15, 17, 33, 63, 64, 65, 129, 1000, 1057];

/// The SIMD tiers this host runs; says loudly which it cannot test.
fn simd_tiers() -> Vec<Isa> {
    for isa in Isa::ALL {
        if isa != Isa::Scalar && !isa.available() {
            eprintln!("!!! tier {isa} is NOT available on this host: SKIPPED !!!");
        }
    }
    Isa::all_available()
        .into_iter()
        .filter(|i| *i != Isa::Scalar)
        .collect()
}

/// Weight blocks of random bits with tame f16 scales: every level pattern
/// (Q8_0's −128 included) occurs.
fn random_blocks(ty: GgmlType, nb: usize, rng: &mut Rng) -> Buf {
    let mut b = Buf::for_row(ty, nb * 32);
    for v in b.bytes_mut().iter_mut() {
        *v = rng.next_u64() as u8;
    }
    let scale_fields: &[usize] = match ty {
        GgmlType::Q4_1 | GgmlType::Q5_1 => &[0, 2],
        _ => &[0],
    };
    for blk in b.bytes_mut().chunks_mut(ty.type_size()) {
        for &off in scale_fields {
            let s = half::f16::from_f32(rng.normal(0.05));
            blk[off..off + 2].copy_from_slice(&s.to_le_bytes());
        }
    }
    b
}

/// Activations with exact rounding ties: a block whose amax is 127 (d = 1)
/// and whose other elements are k + 0.5.
fn activation_row(rng: &mut Rng, n: usize) -> Vec<f32> {
    let mut x = test_row(rng, n);
    if n >= 64 {
        x[32] = 127.0;
        for j in 1..32 {
            x[32 + j] = (j as f32 - 16.0) * 3.0 + 0.5;
        }
    }
    x
}

/// The scalar activation converter: ggml's x86 form for Q8_0 / Q8_1 (ties
/// to even, `127/amax`), the weight quantiser for every other type.
fn quantize_activation(act_ty: GgmlType, x: &[f32]) -> Buf {
    let mut b = Buf::for_row(act_ty, x.len());
    match act_ty {
        GgmlType::Q8_0 => scalar::q8_0::quantize_act(x, b.bytes_mut()),
        GgmlType::Q8_1 => scalar::q8_1::quantize_act(x, b.bytes_mut()),
        _ => return quantize(act_ty, x, None),
    }
    b
}

fn check_quantiser(table: &KernelTable, act_ty: GgmlType, x: &[f32]) -> Buf {
    let reference = quantize_activation(act_ty, x);
    let mut got = Buf::for_row(act_ty, x.len());
    got.bytes_mut().fill(0xAA);
    (table.quantize(act_ty))(x, got.bytes_mut());
    assert_eq!(
        got.bytes(),
        reference.bytes(),
        "{} quantiser into {act_ty} differs from scalar at n = {}",
        table.isa,
        x.len()
    );
    reference
}

fn check_dot(table: &KernelTable, ty: GgmlType, n: usize, w: &Buf, a: &Buf) {
    check_dot_fn(table.isa.name(), table.vec_dot(ty), ty, n, w, a);
}

fn check_dot_fn(name: &str, dot: kernels::isa::VecDotFn, ty: GgmlType, n: usize, w: &Buf, a: &Buf) {
    let want = scalar::vec_dot(ty, n, w.bytes(), a.bytes());
    let got = dot(n, w.bytes(), a.bytes());
    let act_ty = ty.vec_dot_type();
    let (wf, af) = (dequantize(ty, w, n), dequantize(act_ty, a, n));
    let magnitude: f64 = wf
        .iter()
        .zip(&af)
        .map(|(x, y)| (*x as f64 * *y as f64).abs())
        .sum();
    let tol = 1e-5 * magnitude + f32::MIN_POSITIVE as f64;
    assert!(
        ((got - want) as f64).abs() <= tol,
        "{name} {ty} dot at n = {n}: {got} vs scalar {want} (tolerance {tol})"
    );
}

#[test]
fn simd_tiers_match_scalar_for_legacy_blocks_at_odd_lengths() {
    for isa in simd_tiers() {
        let table = KernelTable::new(isa);
        for ty in BLOCK_TYPES {
            let mut rng = Rng::new(1000 + ty.id() as u64);
            for nb in BLOCK_COUNTS {
                let n = nb * 32;
                let a = check_quantiser(&table, ty.vec_dot_type(), &activation_row(&mut rng, n));
                let w = quantize(ty, &test_row(&mut rng, n), None);
                check_dot(&table, ty, n, &w, &a);
                check_dot(&table, ty, n, &random_blocks(ty, nb, &mut rng), &a);
            }
        }
    }
}

// Same tier loop as the block-type test above: the float types take other lengths, tie and overflow
// cases and no random blocks.
#[test]
fn simd_tiers_match_scalar_for_float_types_at_odd_lengths() {
    for isa in simd_tiers() {
        let table = KernelTable::new(isa);
        for ty in FLOAT_TYPES {
            let mut rng = Rng::new(2000 + ty.id() as u64);
            for n in FLOAT_LENGTHS {
                let mut x = activation_row(&mut rng, n);
                if n > 40 {
                    // Round-to-even ties, overflow and subnormals for the converters.
                    x[33] = 1.0 + 2f32.powi(-11); // f16 tie
                    x[34] = 1.0 + 2f32.powi(-8); // bf16 tie
                    x[35] = 70000.0; // f16 overflow
                    x[36] = 3e-6; // f16 subnormal
                    x[37] = 1e-39; // f32/bf16 subnormal
                }
                check_quantiser(&table, ty, &x);
                if n > 40 {
                    x[35] = 7.0; // keep the dot finite
                }
                let a = check_quantiser(&table, ty, &x);
                let w = quantize(ty, &test_row(&mut rng, n), None);
                check_dot(&table, ty, n, &w, &a);
            }
        }
    }
}

#[test]
fn q8_1_quantiser_matches_scalar_on_every_tier() {
    for isa in simd_tiers() {
        let table = KernelTable::new(isa);
        let mut rng = Rng::new(3);
        for nb in BLOCK_COUNTS {
            check_quantiser(&table, GgmlType::Q8_1, &activation_row(&mut rng, nb * 32));
        }
    }
}

/// Every dot variant a tier offers (`variants(ty)`, named) against the
/// scalar reference, for the block and float types, with data from `seed`.
fn check_tier_variants(
    isa: Isa,
    tier: &str,
    seed: u64,
    variants: impl Fn(GgmlType) -> Vec<(&'static str, kernels::isa::VecDotFn)>,
) {
    if !isa.available() {
        eprintln!("!!! tier {tier} is NOT available on this host: variants SKIPPED !!!");
        return;
    }
    for ty in BLOCK_TYPES.into_iter().chain(FLOAT_TYPES) {
        let variants = variants(ty);
        assert!(!variants.is_empty(), "{ty} has no {tier} dot");
        let names: Vec<&str> = variants.iter().map(|v| v.0).collect();
        eprintln!("{tier} variants tested for {ty}: {names:?}");
        let mut rng = Rng::new(seed + ty.id() as u64);
        for nb in BLOCK_COUNTS {
            let n = nb * 32 + if ty.block_size() == 1 { 5 } else { 0 };
            let a = quantize(ty.vec_dot_type(), &activation_row(&mut rng, n), None);
            let w = if ty.block_size() == 1 {
                quantize(ty, &test_row(&mut rng, n), None)
            } else {
                random_blocks(ty, nb, &mut rng)
            };
            for (name, dot) in &variants {
                check_dot_fn(&format!("{tier}/{name}"), *dot, ty, n, &w, &a);
            }
        }
    }
}

/// The AVX-512 tier picks VNNI / BF16 variants by detection; the fallbacks a
/// host without them would get are checked here too.
#[cfg(target_arch = "x86_64")]
#[test]
fn every_avx512_variant_matches_scalar() {
    use kernels::x86::avx512::legacy::vec_dot_variants;
    check_tier_variants(Isa::Avx512, "avx512", 4000, vec_dot_variants);
}

/// The NEON tier picks the `sdot` variant where detected; the plain NEON
/// fallback is checked here too.
#[cfg(target_arch = "aarch64")]
#[test]
fn every_neon_variant_matches_scalar() {
    use kernels::aarch64::neon::legacy::vec_dot_variants;
    check_tier_variants(Isa::Neon, "neon", 5000, vec_dot_variants);
}
