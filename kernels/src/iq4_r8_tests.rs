use super::*;
use crate::matmul::{self, QActs, QExperts, QMatrix};
use crate::{scalar, GgmlType, Isa, KernelTable};

fn rnd_stream(mut s: u64) -> impl FnMut() -> f32 {
    move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
}

/// 8-byte aligned storage for `len` bytes.
fn words(len: usize) -> Vec<u64> {
    vec![0u64; len.div_ceil(8)]
}

/// `rows` random IQ4_XS rows of `n` (a few rows with a large first weight,
/// so that scales and `d` vary) and `tokens` Q8_K rows.
fn fixture(n: usize, rows: usize, tokens: usize, seed: u64) -> (Vec<u64>, Vec<u64>) {
    let mut rnd = rnd_stream(seed);
    let rb = GgmlType::IQ4_XS.row_bytes(n as u64).unwrap() as usize;
    let mut w = words(rb * rows);
    let wb: &mut [u8] = &mut bytemuck::cast_slice_mut(&mut w)[..rb * rows];
    for (i, r) in wb.chunks_exact_mut(rb).enumerate() {
        let mut src: Vec<f32> = (0..n).map(|_| rnd()).collect();
        src[i % n] *= 1.0 + (i % 5) as f32 * 20.0;
        scalar::quantize_row(GgmlType::IQ4_XS, &src, r, None);
    }
    let ab = GgmlType::Q8_K.row_bytes(n as u64).unwrap() as usize;
    let mut a = words(ab * tokens);
    let abytes: &mut [u8] = &mut bytemuck::cast_slice_mut(&mut a)[..ab * tokens];
    for r in abytes.chunks_exact_mut(ab) {
        let src: Vec<f32> = (0..n).map(|_| rnd() * 3.0).collect();
        scalar::quantize_row(GgmlType::Q8_K, &src, r, None);
    }
    (w, a)
}

fn packed_of(n: usize, rows: usize, w: &[u64]) -> Vec<u64> {
    let rb = GgmlType::IQ4_XS.row_bytes(n as u64).unwrap() as usize;
    let mut p = words(packed_bytes(n, rows));
    let src: &[u8] = &bytemuck::cast_slice(w)[..rb * rows];
    repack(
        n,
        rows,
        src,
        &mut bytemuck::cast_slice_mut(&mut p)[..packed_bytes(n, rows)],
    );
    p
}

fn bytes(v: &[u64]) -> &[u8] {
    bytemuck::cast_slice(v)
}

/// The reference's outputs, `[row][token]`.
fn reference(n: usize, rows: usize, tokens: usize, p: &[u64], a: &[u64]) -> Vec<f32> {
    let mut out = vec![0f32; rows * tokens];
    gemm_ref(n, bytes(p), rows, bytes(a), tokens, &mut out, tokens);
    out
}

#[test]
fn the_repacked_sum_is_the_dot_of_the_dequantised_rows() {
    for (n, rows) in [(256, 8), (768, 16), (4096, 8)] {
        let tokens = 3;
        let (w, a) = fixture(n, rows, tokens, 7 + n as u64);
        let p = packed_of(n, rows, &w);
        let got = reference(n, rows, tokens, &p, &a);
        let (rb, ab) = (
            GgmlType::IQ4_XS.row_bytes(n as u64).unwrap() as usize,
            GgmlType::Q8_K.row_bytes(n as u64).unwrap() as usize,
        );
        let mut wf = vec![0f32; n];
        let mut af = vec![0f32; n];
        for r in 0..rows {
            scalar::dequantize_row(GgmlType::IQ4_XS, &bytes(&w)[r * rb..(r + 1) * rb], &mut wf);
            for t in 0..tokens {
                scalar::dequantize_row(GgmlType::Q8_K, &bytes(&a)[t * ab..(t + 1) * ab], &mut af);
                let exact: f64 = wf.iter().zip(&af).map(|(x, y)| *x as f64 * *y as f64).sum();
                let size: f64 = wf
                    .iter()
                    .zip(&af)
                    .map(|(x, y)| (*x as f64 * *y as f64).abs())
                    .sum();
                let v = got[r * tokens + t] as f64;
                assert!(
                    (v - exact).abs() <= 1e-6 * size,
                    "n {n} row {r} token {t}: {v} vs {exact} (Σ|w·a| {size})"
                );
                // And the file-layout dot of this tier table agrees to rounding.
                let plain = scalar::vec_dot(
                    GgmlType::IQ4_XS,
                    n,
                    &bytes(&w)[r * rb..(r + 1) * rb],
                    &bytes(&a)[t * ab..(t + 1) * ab],
                ) as f64;
                assert!((v - plain).abs() <= 1e-6 * size, "{v} vs plain {plain}");
            }
        }
    }
}

#[test]
fn every_packed_kernel_gives_the_references_bits() {
    let mut tested = 0;
    for isa in Isa::all_available() {
        let kt = KernelTable::new(isa);
        let Some(g) = kt.packed_gemm(GgmlType::IQ4_XS) else {
            continue;
        };
        for (n, rows) in [(256, 8), (768, 24), (4096, 16)] {
            for tokens in 1..=9 {
                let (w, a) = fixture(n, rows, tokens, 11 + tokens as u64);
                let p = packed_of(n, rows, &w);
                let want = reference(n, rows, tokens, &p, &a);
                // A wider output stride, with a sentinel in the gaps.
                let stride = tokens + 2;
                let mut out = vec![f32::NAN; rows * stride];
                g(n, bytes(&p), rows, bytes(&a), tokens, &mut out, stride);
                for r in 0..rows {
                    for t in 0..tokens {
                        assert_eq!(
                            out[r * stride + t].to_bits(),
                            want[r * tokens + t].to_bits(),
                            "{isa} n {n} row {r} token {t} of {tokens}"
                        );
                    }
                    assert!(out[r * stride + tokens].is_nan(), "wrote past its columns");
                }
                tested += 1;
            }
        }
    }
    if tested == 0 {
        eprintln!("###  no tier here has a repacked IQ4_XS kernel (AVX-512 VNNI + VBMI)");
    }
}

#[test]
fn matrix_products_on_repacked_rows_keep_the_references_bits_for_every_batch() {
    for isa in Isa::all_available() {
        let kt = KernelTable::new(isa);
        if kt.packed_gemm(GgmlType::IQ4_XS).is_none() {
            continue;
        }
        // 1040 rows: more than one ROW_BLOCK of the tiled matmul and several
        // tasks per thread.
        let (n, rows, tokens) = (512, 1040, 10);
        let (w, a) = fixture(n, rows, tokens, 5);
        let p = packed_of(n, rows, &w);
        let want = reference(n, rows, tokens, &p, &a);
        let m = QMatrix::new(GgmlType::IQ4_XS, n, rows, bytes(&w))
            .unwrap()
            .with_packed(bytes(&p))
            .unwrap();
        let ab = GgmlType::Q8_K.row_bytes(n as u64).unwrap() as usize;
        let check = |got: &[f32], t: usize, what: &str| {
            for r in 0..rows {
                assert_eq!(
                    got[r].to_bits(),
                    want[r * tokens + t].to_bits(),
                    "{isa} {what}: row {r} token {t}"
                );
            }
        };
        let mut out = vec![0f32; rows];
        for t in 0..tokens {
            let x = &bytes(&a)[t * ab..(t + 1) * ab];
            matmul::matvec(&kt, &m, x, &mut out);
            check(&out, t, "matvec");
            matmul::matvec_serial(&kt, &m, x, &mut out);
            check(&out, t, "matvec_serial");
        }
        for batch in [2, 3, 8, 10] {
            let x = QActs::new(GgmlType::Q8_K, n, batch, bytes(&a)).unwrap();
            let mut tile = vec![0f32; matmul::matmul_tile_len(batch)];
            let mut out = vec![0f32; batch * rows];
            type Product = fn(&KernelTable, &QMatrix, &QActs, &mut [f32], &mut [f32]);
            let products: [(&str, Product); 3] = [
                ("matmul", matmul::matmul),
                ("matmul_prompt", matmul::matmul_prompt),
                ("matmul_vec_dot", matmul::matmul_vec_dot),
            ];
            for (what, f) in products {
                out.fill(f32::NAN);
                f(&kt, &m, &x, &mut out, &mut tile);
                for t in 0..batch {
                    check(&out[t * rows..(t + 1) * rows], t, what);
                }
            }
        }
    }
}

#[test]
fn the_expert_gather_takes_each_experts_repacked_rows() {
    for isa in Isa::all_available() {
        let kt = KernelTable::new(isa);
        if kt.packed_gemm(GgmlType::IQ4_XS).is_none() {
            continue;
        }
        let (n, n_out, n_expert, tokens) = (256, 48, 4, 6);
        let (w, a) = fixture(n, n_out * n_expert, tokens, 9);
        let rb = GgmlType::IQ4_XS.row_bytes(n as u64).unwrap() as usize;
        // Each expert repacked on its own, one after the other.
        let one = packed_bytes(n, n_out);
        let mut p = words(one * n_expert);
        for e in 0..n_expert {
            let src = &bytes(&w)[e * n_out * rb..(e + 1) * n_out * rb];
            repack(
                n,
                n_out,
                src,
                &mut bytemuck::cast_slice_mut(&mut p)[e * one..(e + 1) * one],
            );
        }
        let stack = QExperts::new(GgmlType::IQ4_XS, n, n_out, n_expert, bytes(&w))
            .unwrap()
            .with_packed(bytes(&p))
            .unwrap();
        let expert_of = [2, 0, 2, 3, 1, 2];
        let x = QActs::new(GgmlType::Q8_K, n, tokens, bytes(&a)).unwrap();
        let mut out = vec![f32::NAN; tokens * n_out];
        matmul::expert_gather(&kt, &stack, &expert_of, &x, &mut out);
        for (t, &e) in expert_of.iter().enumerate() {
            let mut want = vec![0f32; n_out];
            let pe = &bytes(&p)[e * one..(e + 1) * one];
            gemm_ref(n, pe, n_out, x.row(t), 1, &mut want, 1);
            for (o, v) in want.iter().enumerate() {
                assert_eq!(
                    out[t * n_out + o].to_bits(),
                    v.to_bits(),
                    "{isa} token {t} row {o}"
                );
            }
        }
    }
}

#[test]
fn only_packable_iq4_xs_matrices_take_repacked_rows() {
    let (w, _) = fixture(256, 16, 1, 3);
    let p = packed_of(256, 16, &w);
    let m = QMatrix::new(GgmlType::IQ4_XS, 256, 16, bytes(&w)).unwrap();
    assert!(m.with_packed(bytes(&p)).is_ok());
    assert!(m.with_packed(&bytes(&p)[..100]).is_err(), "short");
    let odd = QMatrix::new(GgmlType::IQ4_XS, 256, 12, bytes(&w)).unwrap();
    assert!(odd.with_packed(bytes(&p)).is_err(), "12 rows");
    let q8 = QMatrix::new(GgmlType::Q8_0, 256, 8, bytes(&w)).unwrap();
    assert!(q8.with_packed(bytes(&p)).is_err(), "Q8_0");
    assert!(!packable(128, 8) && !packable(256, 4) && packable(512, 24));
}
