//! The AVX-512 tier sums in llama.cpp's order: on an AVX-512 host, every
//! AVX-512 dot (each variant: `bw`, `vnni`, ...) returns exactly the AVX2
//! tier's result, bit for bit. The AVX2 tier is the one checked against
//! llama.cpp's own outputs (`tests/llama_parity_fixtures.rs` runs both
//! tiers); ggml's x86 quantised dots are AVX2 code even in an AVX-512 build,
//! and our AVX2 float dots follow `vec.cpp`'s AVX-512 forms. Not covered:
//! IQ4_XS (its kernels sum in their own order) and BF16, whose AVX2 dot is
//! not ggml's: the AVX-512 BF16 dot without `vdpbf16ps` is checked against
//! ggml's `__AVX512F__` order written out below; the `vdpbf16ps` one has
//! ggml's loop structure around the same instruction (checked against the
//! scalar dot only, in `legacy_tiers`).
#![cfg(target_arch = "x86_64")]

mod common;

use common::{test_row, Buf, Rng};
use kernels::isa::VecDotFn;
use kernels::x86::avx512::{kquants, legacy, lowbit};
use kernels::{scalar, GgmlType, Isa, KernelTable};

/// Lengths in blocks: every remainder of the four-block and two-block steps.
const BLOCKS: [usize; 10] = [1, 2, 3, 4, 5, 6, 7, 9, 17, 33];
const FLOAT_LENGTHS: [usize; 12] = [1, 7, 8, 15, 16, 63, 64, 65, 72, 129, 1000, 4096];

const TYPES: [GgmlType; 13] = [
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::IQ4_NL,
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
    GgmlType::F32,
    GgmlType::F16,
];

fn tiers() -> Option<(KernelTable, KernelTable)> {
    if !Isa::Avx512.available() {
        eprintln!("!!! tier avx512 is NOT available on this host: SKIPPED !!!");
        return None;
    }
    Some((KernelTable::new(Isa::Avx2), KernelTable::new(Isa::Avx512)))
}

/// Every AVX-512 dot this host runs for `ty`, named.
fn variants(table: &KernelTable, ty: GgmlType) -> Vec<(&'static str, VecDotFn)> {
    let mut v = legacy::vec_dot_variants(ty);
    v.extend(lowbit::vec_dot_variants(ty));
    if let Some(f) = kquants::vec_dot_fn(ty) {
        v.push(("vnni", f));
    }
    v.push(("table", table.vec_dot(ty)));
    v
}

/// Random weight bytes (every level pattern) with tame f16 scales at the
/// type's scale offsets; floats from a test row.
fn weights(ty: GgmlType, n: usize, rng: &mut Rng) -> Buf {
    let mut b = Buf::for_row(ty, n);
    if matches!(ty, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16) {
        let x = test_row(rng, n);
        scalar::quantize_row(ty, &x, b.bytes_mut(), None);
        return b;
    }
    for v in b.bytes_mut().iter_mut() {
        *v = rng.next_u64() as u8;
    }
    let f16_fields: &[usize] = match ty {
        GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q4_K | GgmlType::Q5_K => &[0, 2],
        GgmlType::Q2_K => &[80, 82],
        GgmlType::Q3_K => &[108],
        GgmlType::Q6_K => &[208],
        _ => &[0],
    };
    for blk in b.bytes_mut().chunks_mut(ty.type_size()) {
        for &off in f16_fields {
            let s = half::f16::from_f32(rng.normal(0.05));
            blk[off..off + 2].copy_from_slice(&s.to_le_bytes());
        }
    }
    b
}

#[test]
fn every_avx512_dot_equals_the_avx2_dot_bit_for_bit() {
    let Some((avx2, avx512)) = tiers() else {
        return;
    };
    let mut rng = Rng::new(0x0bde_7a11);
    for ty in TYPES {
        let block = ty.block_size();
        let lengths: Vec<usize> = if block == 1 {
            FLOAT_LENGTHS.to_vec()
        } else {
            BLOCKS.iter().map(|b| b * block).collect()
        };
        let act_ty = ty.vec_dot_type();
        let vs = variants(&avx512, ty);
        eprintln!("{ty}: {:?}", vs.iter().map(|v| v.0).collect::<Vec<_>>());
        for n in lengths {
            for _ in 0..4 {
                let w = weights(ty, n, &mut rng);
                let x = test_row(&mut rng, n);
                let mut a = Buf::for_row(act_ty, n);
                (avx2.quantize(act_ty))(&x, a.bytes_mut());
                let want = (avx2.vec_dot(ty))(n, w.bytes(), a.bytes());
                for (name, dot) in &vs {
                    let got = dot(n, w.bytes(), a.bytes());
                    assert_eq!(
                        got.to_bits(),
                        want.to_bits(),
                        "avx512/{name} {ty} at n = {n}: {got:e} vs avx2 {want:e}"
                    );
                }
            }
        }
    }
}

/// `_mm512_reduce_add_ps` as GCC defines it.
fn reduce16(v: &[f32; 16]) -> f32 {
    let t: Vec<f32> = (0..8).map(|l| v[l + 8] + v[l]).collect();
    let u: Vec<f32> = (0..4).map(|l| t[l + 4] + t[l]).collect();
    (u[0] + u[2]) + (u[1] + u[3])
}

/// ggml's `ggml_vec_dot_bf16`, `__AVX512F__` path (no AVX512-BF16): two
/// 16-lane accumulators over blocks of 32 (bf16 products are exact in f32,
/// so fused or not makes no difference), each reduced, summed in f64 with
/// the leftover products.
fn ggml_bf16_avx512f(a: &[half::bf16], b: &[half::bf16]) -> f32 {
    let n = a.len();
    let mut c = [[0f32; 16]; 2];
    let mut i = 0;
    while i + 32 <= n {
        for (h, ch) in c.iter_mut().enumerate() {
            for (l, v) in ch.iter_mut().enumerate() {
                let j = i + 16 * h + l;
                *v += a[j].to_f32() * b[j].to_f32();
            }
        }
        i += 32;
    }
    let mut sumf = 0f64;
    sumf += reduce16(&c[0]) as f64;
    sumf += reduce16(&c[1]) as f64;
    for j in i..n {
        sumf += (a[j].to_f32() * b[j].to_f32()) as f64;
    }
    sumf as f32
}

#[test]
fn avx512_bf16_dot_without_dpbf16_sums_in_ggml_order() {
    if tiers().is_none() {
        return;
    }
    let dot = legacy::vec_dot_variants(GgmlType::BF16)
        .into_iter()
        .find(|v| v.0 == "bw")
        .expect("the AVX-512 BF16 dot without dpbf16")
        .1;
    let mut rng = Rng::new(0xbf16);
    for n in FLOAT_LENGTHS {
        let (x, y) = (test_row(&mut rng, n), test_row(&mut rng, n));
        let (mut wb, mut ab) = (
            Buf::for_row(GgmlType::BF16, n),
            Buf::for_row(GgmlType::BF16, n),
        );
        scalar::quantize_row(GgmlType::BF16, &x, wb.bytes_mut(), None);
        scalar::quantize_row(GgmlType::BF16, &y, ab.bytes_mut(), None);
        let to = |b: &Buf| -> Vec<half::bf16> {
            b.bytes()
                .chunks_exact(2)
                .map(|c| half::bf16::from_le_bytes([c[0], c[1]]))
                .collect()
        };
        let want = ggml_bf16_avx512f(&to(&wb), &to(&ab));
        let got = dot(n, wb.bytes(), ab.bytes());
        assert_eq!(
            got.to_bits(),
            want.to_bits(),
            "BF16 at n = {n}: {got:e} vs ggml {want:e}"
        );
    }
}
