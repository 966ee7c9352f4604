use super::*;
use crate::matmul::{self, QActs, QExperts, QMatrix};
use crate::{scalar, GgmlType, Isa, KernelTable, Mode};

const TYPES: [GgmlType; 6] = [
    GgmlType::IQ4_XS,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q3_K,
    GgmlType::Q6_K,
    GgmlType::Q8_0,
];

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

fn bytes(v: &[u64]) -> &[u8] {
    bytemuck::cast_slice(v)
}

fn row_bytes(ty: GgmlType, n: usize) -> usize {
    ty.row_bytes(n as u64).unwrap() as usize
}

/// `rows` random rows of `ty` (a few with one large weight, so that scales,
/// mins and `d` vary) and `tokens` activation rows (its `vec_dot_type`).
fn fixture(ty: GgmlType, n: usize, rows: usize, tokens: usize, seed: u64) -> (Vec<u64>, Vec<u64>) {
    let mut rnd = rnd_stream(seed);
    let rb = row_bytes(ty, n);
    let mut w = words(rb * rows);
    let wb: &mut [u8] = &mut bytemuck::cast_slice_mut(&mut w)[..rb * rows];
    for (i, r) in wb.chunks_exact_mut(rb).enumerate() {
        let mut src: Vec<f32> = (0..n).map(|_| rnd() + 0.3).collect();
        src[i % n] *= 1.0 + (i % 5) as f32 * 20.0;
        scalar::quantize_row(ty, &src, r, None);
    }
    let act = ty.vec_dot_type();
    let ab = row_bytes(act, n);
    let mut a = words(ab * tokens);
    let abytes: &mut [u8] = &mut bytemuck::cast_slice_mut(&mut a)[..ab * tokens];
    for r in abytes.chunks_exact_mut(ab) {
        let src: Vec<f32> = (0..n).map(|_| rnd() * 3.0).collect();
        scalar::quantize_row(act, &src, r, None);
    }
    (w, a)
}

fn packed_of(ty: GgmlType, n: usize, rows: usize, w: &[u64]) -> Vec<u64> {
    let pb = packed_bytes(ty, n, rows);
    let mut p = words(pb);
    let src = &bytes(w)[..row_bytes(ty, n) * rows];
    repack(
        ty,
        n,
        rows,
        src,
        &mut bytemuck::cast_slice_mut(&mut p)[..pb],
    );
    p
}

/// The reference's outputs, `[row][token]`.
fn reference(ty: GgmlType, n: usize, rows: usize, tokens: usize, p: &[u64], a: &[u64]) -> Vec<f32> {
    let mut out = vec![0f32; rows * tokens];
    gemm_ref(ty).unwrap()(n, bytes(p), rows, bytes(a), tokens, &mut out, tokens);
    out
}

#[test]
fn the_repacked_sums_are_the_dots_of_the_dequantised_rows() {
    for ty in TYPES {
        for (n, rows) in [(256, 8), (768, 16), (4096, 8)] {
            let tokens = 3;
            let (w, a) = fixture(ty, n, rows, tokens, 7 + n as u64);
            let p = packed_of(ty, n, rows, &w);
            let got = reference(ty, n, rows, tokens, &p, &a);
            let (rb, ab) = (row_bytes(ty, n), row_bytes(ty.vec_dot_type(), n));
            let mut wf = vec![0f32; n];
            let mut af = vec![0f32; n];
            for r in 0..rows {
                let wr = &bytes(&w)[r * rb..(r + 1) * rb];
                scalar::dequantize_row(ty, wr, &mut wf);
                for t in 0..tokens {
                    let ar = &bytes(&a)[t * ab..(t + 1) * ab];
                    scalar::dequantize_row(ty.vec_dot_type(), ar, &mut af);
                    let terms = wf.iter().zip(&af).map(|(x, y)| *x as f64 * *y as f64);
                    let exact: f64 = terms.clone().sum();
                    let size: f64 = terms.map(f64::abs).sum();
                    let v = got[r * tokens + t] as f64;
                    assert!(
                        (v - exact).abs() <= 1e-6 * size,
                        "{ty} n {n} row {r} token {t}: {v} vs {exact} (Σ|w·a| {size})"
                    );
                }
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[test]
fn the_repacked_q4_k_sum_is_ggmls_repacked_q4_k_dot_bit_for_bit() {
    // The order clover's decoding already reproduces for Q4_K matrices of
    // n_out % 8 == 0 (ggml's repacked mat-vec, checked against llama.cpp).
    if !Isa::Avx2.available() {
        return;
    }
    let dot = KernelTable::new(Isa::Avx2).weight_dot(GgmlType::Q4_K, 8);
    let (n, rows, tokens) = (1024, 16, 3);
    let (w, a) = fixture(GgmlType::Q4_K, n, rows, tokens, 21);
    let p = packed_of(GgmlType::Q4_K, n, rows, &w);
    let got = reference(GgmlType::Q4_K, n, rows, tokens, &p, &a);
    let (rb, ab) = (row_bytes(GgmlType::Q4_K, n), row_bytes(GgmlType::Q8_K, n));
    for r in 0..rows {
        for t in 0..tokens {
            let want = dot(
                n,
                &bytes(&w)[r * rb..(r + 1) * rb],
                &bytes(&a)[t * ab..(t + 1) * ab],
            );
            assert_eq!(
                got[r * tokens + t].to_bits(),
                want.to_bits(),
                "row {r} token {t}"
            );
        }
    }
}

#[test]
fn every_packed_kernel_gives_the_references_bits() {
    let mut tested = 0;
    for isa in Isa::all_available() {
        let kt = KernelTable::new(isa);
        for ty in TYPES {
            let Some(g) = kt.packed_gemm(ty, Mode::Decode) else {
                continue;
            };
            for (n, rows) in [(256, 8), (768, 24), (4096, 16)] {
                for tokens in 1..=9 {
                    let (w, a) = fixture(ty, n, rows, tokens, 11 + tokens as u64);
                    let p = packed_of(ty, n, rows, &w);
                    let want = reference(ty, n, rows, tokens, &p, &a);
                    // A wider output stride, with a sentinel in the gaps.
                    let stride = tokens + 2;
                    let mut out = vec![f32::NAN; rows * stride];
                    g(n, bytes(&p), rows, bytes(&a), tokens, &mut out, stride);
                    for r in 0..rows {
                        for t in 0..tokens {
                            assert_eq!(
                                out[r * stride + t].to_bits(),
                                want[r * tokens + t].to_bits(),
                                "{isa} {ty} n {n} row {r} token {t} of {tokens}"
                            );
                        }
                        assert!(out[r * stride + tokens].is_nan(), "wrote past its columns");
                    }
                    tested += 1;
                }
            }
        }
    }
    if tested == 0 {
        eprintln!("###  no tier here has a repacked kernel (AVX-512 VNNI)");
    }
}

// The tier loop and its 'nothing tested' notice as in tests/delta_rows.rs: each test counts and
// reports its own kernel family.
#[test]
fn the_file_rows_kernels_in_the_packed_order_give_the_references_bits() {
    let mut tested = 0;
    for isa in Isa::all_available() {
        let kt = KernelTable::new(isa);
        for ty in TYPES {
            let Some(g) = kt.packed_order_rows(ty, Mode::Decode) else {
                continue;
            };
            assert!(kt.packed_order_rows(ty, Mode::Ggml).is_none());
            // 24 rows repacked; the file kernel also on 10 and 7 of them (a
            // task's rows need not be whole groups, nor even).
            let (n, rows) = (768, 24);
            for tokens in 1..=5 {
                let (w, a) = fixture(ty, n, rows, tokens, 29 + tokens as u64);
                let p = packed_of(ty, n, rows, &w);
                let want = reference(ty, n, rows, tokens, &p, &a);
                for take in [24, 10, 7] {
                    // The same bit-exact check as the stride test above, here of the file-row
                    // kernel on the first `take` rows against the packed reference.
                    let stride = tokens + 1;
                    let mut out = vec![f32::NAN; take * stride];
                    g(n, bytes(&w), take, bytes(&a), tokens, &mut out, stride);
                    for r in 0..take {
                        for t in 0..tokens {
                            assert_eq!(
                                out[r * stride + t].to_bits(),
                                want[r * tokens + t].to_bits(),
                                "{isa} {ty} {take} rows: row {r} token {t} of {tokens}"
                            );
                        }
                    }
                    tested += 1;
                }
            }
        }
    }
    if tested == 0 {
        eprintln!("###  no tier here has a file-rows kernel in a repacked order (AVX-512 GFNI)");
    }
}

#[test]
fn matrix_products_on_repacked_rows_keep_the_references_bits_for_every_batch() {
    for isa in Isa::all_available() {
        let kt = KernelTable::new(isa);
        for ty in TYPES {
            if kt.packed_gemm(ty, Mode::Decode).is_none() {
                continue;
            }
            // More than one block of the tiled matmul and several tasks per
            // thread.
            let tokens = 10;
            let (n, rows) = (512, crate::matmul::row_block(tokens) + 16);
            let (w, a) = fixture(ty, n, rows, tokens, 5);
            let p = packed_of(ty, n, rows, &w);
            let want = reference(ty, n, rows, tokens, &p, &a);
            let m = QMatrix::new(ty, n, rows, bytes(&w))
                .unwrap()
                .with_packed(bytes(&p))
                .unwrap();
            let ab = row_bytes(ty.vec_dot_type(), n);
            let check = |got: &[f32], t: usize, what: &str| {
                for r in 0..rows {
                    assert_eq!(
                        got[r].to_bits(),
                        want[r * tokens + t].to_bits(),
                        "{isa} {ty} {what}: row {r} token {t}"
                    );
                }
            };
            let mut out = vec![0f32; rows];
            // The file's rows kept beside the copy: a mat-vec may read them
            // (Q6_K on AVX-512), with the same bits.
            let file_mv = m.with_file_matvec();
            for t in 0..tokens {
                let x = &bytes(&a)[t * ab..(t + 1) * ab];
                matmul::matvec(&kt, &m, x, &mut out);
                check(&out, t, "matvec");
                matmul::matvec_serial(&kt, &m, x, &mut out);
                check(&out, t, "matvec_serial");
                matmul::matvec(&kt, &file_mv, x, &mut out);
                check(&out, t, "matvec on the file's rows");
            }
            for batch in [2, 3, 8, 10] {
                let x = QActs::new(ty.vec_dot_type(), n, batch, bytes(&a)).unwrap();
                let mut tile = vec![0f32; matmul::matmul_tile_len(batch)];
                let mut out = vec![0f32; batch * rows];
                // Every mode and a routed expert's (MUL_MAT_ID) matrix: the
                // plan takes the repacked rows for each.
                let mut expert = m;
                expert.expert = true;
                let products = [
                    ("matmul", Mode::Decode, &m),
                    ("matmul prompt", Mode::Prompt, &m),
                    ("matmul expert", Mode::Decode, &expert),
                ];
                for (what, mode, w) in products {
                    // A prompt batch of a type with a prompt kernel on the
                    // repacked rows takes that kernel instead (its own
                    // order: `prompt_kernels_on_repacked_rows_give_the_file_rows_bits`).
                    let prompt_kernel = kt.packed_prompt_gemm(ty, mode).is_some()
                        && batch >= matmul::packed_prompt_min_rows(ty);
                    if prompt_kernel {
                        continue;
                    }
                    out.fill(f32::NAN);
                    matmul::matmul(&kt, w, &x, &mut out, &mut tile, mode);
                    for t in 0..batch {
                        check(&out[t * rows..(t + 1) * rows], t, what);
                    }
                }
            }
        }
    }
}

#[test]
fn the_expert_gather_takes_each_experts_repacked_rows() {
    for isa in Isa::all_available() {
        let kt = KernelTable::new(isa);
        for ty in TYPES {
            if kt.packed_gemm(ty, Mode::Decode).is_none() {
                continue;
            }
            let (n, n_out, n_expert, tokens) = (256, 48, 4, 6);
            let (w, a) = fixture(ty, n, n_out * n_expert, tokens, 9);
            // The stack repacked as one matrix is each expert repacked on
            // its own, one after the other (n_out % 8 == 0).
            let p = packed_of(ty, n, n_out * n_expert, &w);
            let one = packed_bytes(ty, n, n_out);
            let stack = QExperts::new(ty, n, n_out, n_expert, bytes(&w))
                .unwrap()
                .with_packed(bytes(&p))
                .unwrap();
            let expert_of = [2, 0, 2, 3, 1, 2];
            let x = QActs::new(ty.vec_dot_type(), n, tokens, bytes(&a)).unwrap();
            let mut out = vec![f32::NAN; tokens * n_out];
            matmul::expert_gather(&kt, &stack, &expert_of, &x, &mut out, Mode::Decode);
            for (t, &e) in expert_of.iter().enumerate() {
                let mut want = vec![0f32; n_out];
                let pe = &bytes(&p)[e * one..(e + 1) * one];
                gemm_ref(ty).unwrap()(n, pe, n_out, x.row(t), 1, &mut want, 1);
                for (o, v) in want.iter().enumerate() {
                    let got = out[t * n_out + o];
                    assert_eq!(got.to_bits(), v.to_bits(), "{isa} {ty} token {t} row {o}");
                }
            }
        }
    }
}

#[test]
fn only_packable_matrices_take_repacked_rows() {
    for ty in TYPES {
        let (w, _) = fixture(ty, 256, 16, 1, 3);
        let p = packed_of(ty, 256, 16, &w);
        let m = QMatrix::new(ty, 256, 16, bytes(&w)).unwrap();
        assert!(m.with_packed(bytes(&p)).is_ok());
        assert!(m.with_packed(&bytes(&p)[..100]).is_err(), "short");
        let odd = QMatrix::new(ty, 256, 12, bytes(&w)).unwrap();
        assert!(odd.with_packed(bytes(&p)).is_err(), "12 rows");
        assert!(!packable(ty, 128, 8) && !packable(ty, 256, 4) && packable(ty, 512, 24));
    }
    let (w, _) = fixture(GgmlType::Q2_K, 256, 8, 1, 3);
    let q2 = QMatrix::new(GgmlType::Q2_K, 256, 8, bytes(&w)).unwrap();
    assert!(q2.with_packed(bytes(&w)).is_err(), "Q2_K");
    assert!(!packable(GgmlType::Q2_K, 256, 8));
}

#[test]
fn prompt_kernels_on_repacked_rows_give_the_file_rows_bits() {
    let mut tested = 0;
    for isa in Isa::all_available() {
        let kt = KernelTable::new(isa);
        for ty in TYPES {
            let (Some(file), Some(packed)) = (
                kt.prompt_gemm(ty, Mode::Prompt),
                kt.packed_prompt_gemm(ty, Mode::Prompt),
            ) else {
                continue;
            };
            // Whole groups of sixteen rows and a last group of eight.
            for (n, rows, tokens) in [(256, 8, 9), (768, 24, 8), (512, 48, 21)] {
                let (w, a) = fixture(ty, n, rows, tokens, 31 + rows as u64);
                let p = packed_of(ty, n, rows, &w);
                let stride = rows + 3;
                let run = |g: crate::sig::PromptFn, wb: &[u8]| {
                    let mut out = vec![f32::NAN; tokens * stride];
                    // SAFETY: `out` holds `tokens` rows of `stride >= rows`.
                    unsafe { g(n, wb, rows, bytes(&a), tokens, out.as_mut_ptr(), stride) };
                    out
                };
                let want = run(file, bytes(&w));
                let got = run(packed, bytes(&p));
                for t in 0..tokens {
                    for r in 0..stride {
                        let (x, y) = (got[t * stride + r], want[t * stride + r]);
                        assert!(
                            x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()),
                            "{isa} {ty} n {n} rows {rows}: token {t} row {r}: {x} vs {y}"
                        );
                    }
                }
                tested += 1;
            }
        }
    }
    if tested == 0 {
        eprintln!("###  no tier here has a prompt kernel on repacked rows (AVX-512 VNNI, GFNI)");
    }
}
