//! The multi-row kernels (`KernelTable::gemm`, through [`dot_block`] and
//! [`matmul`]) against the one-row `vec_dot` of the same tier: every output
//! must be the same bits, at shapes that are not multiples of the kernel's
//! column group, and at lengths that hit every remainder path.

use super::tests::{acts, pool, quantized, Rng, TYPES};
use super::*;
use crate::Isa;

/// Lengths in blocks of `ty`: 1, 2, 3, 5, 7, 9 and 17 blocks (the
/// 32-element kernels step four blocks at a time, then a pair, then one).
fn lengths(ty: GgmlType) -> Vec<usize> {
    [1, 2, 3, 5, 7, 9, 17].map(|b| b * ty.block_size()).to_vec()
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|y| y.to_bits()).collect()
}

#[test]
fn dot_block_equals_the_tiers_vec_dot_bit_for_bit_at_awkward_shapes() {
    for isa in Isa::all_available() {
        let kt = KernelTable::new(isa);
        for ty in TYPES {
            let dot = kt.vec_dot(ty);
            for n in lengths(ty) {
                let mut rng = Rng(n as u64 * 31 + ty.id() as u64);
                let w_rows = 5;
                let (wb, _) = quantized(ty, n, w_rows, &mut rng);
                let m = QMatrix::new(ty, n, w_rows, wb.bytes()).unwrap();
                let max_t = 13;
                let (xb, _) = acts(&kt, ty, n, max_t, &mut rng);
                let x = QActs::new(ty.vec_dot_type(), n, max_t, xb.bytes()).unwrap();
                // One activation column against 2, 3 and 5 weight rows is
                // the mat-vec path: row i of the first half paired with row
                // i of the second through the two-row kernels, then an odd
                // last row left to the one-row path.
                for (o, rows_w) in [(0, 1), (1, 2), (0, 5), (2, 3)] {
                    for (t0, cols) in [
                        (0, 1),
                        (1, 2),
                        (0, 3),
                        (2, 4),
                        (0, 5),
                        (1, 7),
                        (0, 9),
                        (0, 8),
                        (1, 12),
                    ] {
                        let label = format!("{isa} {ty}");
                        check_dot_block(&kt, &m, &x, dot, (o, rows_w), (t0, cols), &label);
                    }
                }
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[test]
fn the_avx512_tier_has_multi_row_kernels_for_the_k_quants_and_q8_0() {
    if !(Isa::Avx512.available() && std::is_x86_feature_detected!("avx512vnni")) {
        eprintln!("*** SKIPPING: no AVX512-VNNI, the gemm kernels are not exercised ***");
        return;
    }
    let kt = KernelTable::new(Isa::Avx512);
    for ty in [
        GgmlType::Q3_K,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
        GgmlType::Q8_0,
        GgmlType::Q4_0,
        GgmlType::Q5_0,
        GgmlType::IQ4_NL,
        GgmlType::IQ4_XS,
    ] {
        assert!(kt.gemm(ty).is_some(), "{ty}");
    }
    assert!(KernelTable::new(Isa::Scalar).gemm(GgmlType::Q4_K).is_none());
}

#[test]
fn matmul_equals_single_row_decode_bit_for_bit_for_every_type_and_tier() {
    // What the speculative verify batch relies on: a batch of rows gives
    // each row exactly what one-token decode (matvec) gives it.
    let n_out = 37;
    for isa in Isa::all_available() {
        let kt = KernelTable::new(isa);
        for ty in TYPES {
            let n = 2 * ty.block_size().max(256) + ty.block_size();
            let mut rng = Rng(500 + ty.id() as u64);
            let (wb, _) = quantized(ty, n, n_out, &mut rng);
            let m = QMatrix::new(ty, n, n_out, wb.bytes()).unwrap();
            for rows in [2usize, 3, ACT_TILE + 5] {
                let (xb, _) = acts(&kt, ty, n, rows, &mut rng);
                let x = QActs::new(ty.vec_dot_type(), n, rows, xb.bytes()).unwrap();
                let mut out = vec![f32::NAN; rows * n_out];
                let mut tile = vec![0.0; matmul_tile_len(rows)];
                pool(2).install(|| matmul(&kt, &m, &x, &mut out, &mut tile, Mode::Decode));
                let mut one = vec![f32::NAN; n_out];
                for t in 0..rows {
                    matvec_serial(&kt, &m, x.row(t), &mut one);
                    assert_eq!(
                        bits(&out[t * n_out..(t + 1) * n_out]),
                        bits(&one),
                        "{isa} {ty} rows={rows} row {t}"
                    );
                }
            }
        }
    }
}

#[test]
fn a_mat_vec_gives_every_row_the_tiers_weight_dot_bit_for_bit() {
    // Decode's product: with `n_out % 8 == 0` Q4_K takes the order of ggml's
    // repacked gemv (the table's `weight_dot`), through a two-row kernel
    // where the tier has one; every type's row must be that dot's bits.
    // IQ4_XS also at a length past the activation layout its AVX-512
    // two-row kernel prepares once per call (128 blocks), where every row
    // takes the one-row kernel instead.
    for isa in Isa::all_available() {
        let kt = KernelTable::new(isa);
        for ty in TYPES {
            let short = 3 * ty.block_size().max(256);
            let lengths = if ty == GgmlType::IQ4_XS {
                vec![short, 129 * 256]
            } else {
                vec![short]
            };
            for (n_out, n) in lengths.into_iter().flat_map(|n| [(40usize, n), (37, n)]) {
                let mut rng = Rng(900 + n_out as u64 + ty.id() as u64);
                let (wb, _) = quantized(ty, n, n_out, &mut rng);
                let m = QMatrix::new(ty, n, n_out, wb.bytes()).unwrap();
                let (xb, _) = acts(&kt, ty, n, 1, &mut rng);
                let x = QActs::new(ty.vec_dot_type(), n, 1, xb.bytes()).unwrap();
                let mut out = vec![f32::NAN; n_out];
                pool(2).install(|| matvec(&kt, &m, x.row(0), &mut out));
                let dot = kt.weight_dot(ty, n_out);
                let want: Vec<f32> = (0..n_out).map(|o| dot(n, m.row(o), x.row(0))).collect();
                assert_eq!(bits(&out), bits(&want), "{isa} {ty} n_out={n_out}");
            }
        }
    }
}

#[test]
fn grouping_rows_by_expert_gives_every_row_what_the_per_row_gather_gives() {
    // The MoE prefill path: the rows routed to one expert are gathered into
    // one batch and multiplied together (the multi-row kernels, tiles of
    // several rows); a decode step multiplies each row alone. Every output
    // must be the same bits either way, whatever the group sizes.
    let (n_out, n_expert) = (21, 4);
    // 13 rows: expert 1 gets 6 (a full group of 4 and a pair), expert 3
    // gets 5, expert 0 one row, expert 2 none.
    let expert_of = [1usize, 3, 1, 1, 0, 3, 3, 1, 3, 1, 3, 1, 1];
    for isa in Isa::all_available() {
        let kt = KernelTable::new(isa);
        for ty in TYPES {
            let n = 2 * ty.block_size().max(256);
            let mut rng = Rng(900 + ty.id() as u64);
            let (wb, _) = quantized(ty, n, n_out * n_expert, &mut rng);
            let e = QExperts::new(ty, n, n_out, n_expert, wb.bytes()).unwrap();
            let rows = expert_of.len();
            let (xb, _) = acts(&kt, ty, n, rows, &mut rng);
            let x = QActs::new(ty.vec_dot_type(), n, rows, xb.bytes()).unwrap();
            let mut per_row = vec![f32::NAN; rows * n_out];
            pool(2).install(|| expert_gather(&kt, &e, &expert_of, &x, &mut per_row, Mode::Decode));
            let rb = x.ty.row_bytes(n as u64).unwrap() as usize;
            for ex in 0..n_expert {
                let mine: Vec<usize> = (0..rows).filter(|&r| expert_of[r] == ex).collect();
                if mine.is_empty() {
                    continue;
                }
                let mut gathered = Vec::with_capacity(mine.len() * rb);
                for &r in &mine {
                    gathered.extend_from_slice(x.row(r));
                }
                // Realign: block structs hold f16/f32 fields.
                let mut buf = super::tests::Buf::new(gathered.len());
                buf.bytes_mut().copy_from_slice(&gathered);
                let g = QActs::new(x.ty, n, mine.len(), buf.bytes()).unwrap();
                let mut out = vec![f32::NAN; mine.len() * n_out];
                let mut tile = vec![0.0; matmul_tile_len(mine.len())];
                pool(2)
                    .install(|| matmul(&kt, &e.expert(ex), &g, &mut out, &mut tile, Mode::Decode));
                for (i, &r) in mine.iter().enumerate() {
                    assert_eq!(
                        bits(&out[i * n_out..(i + 1) * n_out]),
                        bits(&per_row[r * n_out..(r + 1) * n_out]),
                        "{isa} {ty} expert {ex}: row {r} grouped with {} others",
                        mine.len() - 1
                    );
                }
            }
        }
    }
}

#[test]
fn the_prompt_kernels_agree_with_vec_dot_to_rounding() {
    // Their own f32 order, exact integer sums: each output within a few
    // ulps of the summed magnitudes of the one-row dot, at token counts
    // that are not whole lane groups and weight rows not whole row groups.
    let mut checked = 0;
    for isa in Isa::all_available() {
        let kt = KernelTable::new(isa);
        for ty in TYPES.into_iter().chain([GgmlType::F32]) {
            let Some(g) = kt.prompt_gemm(ty, Mode::Prompt) else {
                continue;
            };
            checked += 1;
            let dot = kt.vec_dot(ty);
            // F32: whole groups of sixteen elements and a tail.
            let n = match ty {
                GgmlType::F32 => 53,
                _ => 3 * ty.block_size(),
            };
            let mut rng = Rng(900 + ty.id() as u64);
            let (w_rows, act_rows) = (11, 37);
            let (wb, _) = quantized(ty, n, w_rows, &mut rng);
            let m = QMatrix::new(ty, n, w_rows, wb.bytes()).unwrap();
            let (xb, _) = acts(&kt, ty, n, act_rows, &mut rng);
            let x = QActs::new(ty.vec_dot_type(), n, act_rows, xb.bytes()).unwrap();
            // Token-major: out[t·stride + i].
            let stride = w_rows + 2;
            let mut out = vec![f32::NAN; act_rows * stride];
            // SAFETY: `out` holds act_rows × stride floats, all ours.
            unsafe {
                g(
                    n,
                    m.rows(0, w_rows),
                    w_rows,
                    x.rows(0, act_rows),
                    act_rows,
                    out.as_mut_ptr(),
                    stride,
                )
            };
            // The magnitude scale of each dot: Σ|w|·|a| through the same dot
            // on sign-stripped copies is not available for packed types, so
            // bound by the largest |dot| over the batch (the sums are short).
            let mut worst = 0f32;
            let mut scale = 0f32;
            for t in 0..act_rows {
                for i in 0..w_rows {
                    let want = dot(n, m.row(i), x.row(t));
                    let got = out[t * stride + i];
                    worst = worst.max((got - want).abs());
                    scale = scale.max(want.abs());
                }
                assert!(
                    out[t * stride + w_rows].is_nan(),
                    "{isa} {ty} wrote past its columns"
                );
            }
            assert!(scale > 0.0, "{isa} {ty}: a zero batch tests nothing");
            assert!(
                worst <= 1e-5 * scale,
                "{isa} {ty}: prompt kernel off by {worst} (largest |dot| {scale})"
            );
            // Each output depends on its own row and token only: a smaller
            // product right after (reusing the kernel's buffers, with what
            // the first left in them) gives the same bits for its pairs.
            for (r0, nr, t0, nt) in [(2, 3, 20, 5), (0, 11, 0, 1), (8, 1, 17, 17)] {
                let mut small = vec![f32::NAN; nr * nt];
                // SAFETY: `small` holds nt × nr floats, all ours.
                unsafe {
                    g(
                        n,
                        m.rows(r0, nr),
                        nr,
                        x.rows(t0, nt),
                        nt,
                        small.as_mut_ptr(),
                        nr,
                    )
                };
                for i in 0..nr {
                    for t in 0..nt {
                        assert_eq!(
                            small[t * nr + i].to_bits(),
                            out[(t0 + t) * stride + r0 + i].to_bits(),
                            "{isa} {ty}: row {} token {} depends on its batch",
                            r0 + i,
                            t0 + t
                        );
                    }
                }
            }
        }
    }
    #[cfg(target_arch = "x86_64")]
    if Isa::Avx512.available() && std::is_x86_feature_detected!("avx512vnni") {
        assert!(
            checked >= 7,
            "the AVX-512 tier has Q6_K, Q5_K, Q4_K, Q3_K, IQ4_XS, Q8_0 and F32 prompt kernels"
        );
    }
    let _ = checked;
}
