//! AVX-512 multi-row product for F32 weights (`GemmFn`): one weight row
//! against up to [`COLS`] F32 activation rows at once.
//!
//! ```text
//! out[i·stride + t] = Σ_k W[i][k] · x[t][k]      i < w_rows, t < act_rows
//! ```
//!
//! Each 16-lane chunk of the weight row is loaded once and multiplied into
//! every activation row of the group, instead of once per (row, activation)
//! pair as a loop over `vec_dot` does.
//!
//! **Bit-exact with this tier's one-row F32 dot** (`legacy::vec_dot_f32`,
//! llama.cpp's `ggml_vec_dot_f32` order): every output keeps that kernel's
//! four 16-lane accumulators over blocks of 64, the same FMAs in the same
//! order, the same fold `(a0 + a2) + (a1 + a3)` and reduction, and the same
//! scalar leftovers (`legacy::f32_leftovers`). Only the weight loads are
//! shared.

use std::arch::x86_64::*;

use crate::blocks::as_blocks;
use crate::sig::GemmFn;

use super::gemm::check_shapes;
use super::legacy::{f32_leftovers, reduce16};

/// Activation rows one kernel call serves (4 × 4 accumulators and the four
/// weight chunks of a step fit the 32 vector registers).
pub const COLS: usize = 4;

/// The multi-row F32 kernel, when the host has the AVX-512 tier.
pub fn gemm_fn() -> Option<GemmFn> {
    crate::Isa::Avx512.available().then_some(gemm_f32 as GemmFn)
}

fn gemm_f32(
    n: usize,
    w: &[u8],
    w_rows: usize,
    act: &[u8],
    act_rows: usize,
    out: &mut [f32],
    out_stride: usize,
) {
    let row = n * 4;
    if !check_shapes(
        n,
        (w.len(), row, w_rows),
        (act.len(), row, act_rows),
        out.len(),
        out_stride,
    ) {
        return;
    }
    let a_row = |t: usize| -> &[f32] { as_blocks(&act[t * row..(t + 1) * row]) };
    for i in 0..w_rows {
        let x: &[f32] = as_blocks(&w[i * row..(i + 1) * row]);
        let o = &mut out[i * out_stride..i * out_stride + act_rows];
        let mut t = 0;
        while t < act_rows {
            let c = (act_rows - t).min(COLS);
            let o = &mut o[t..t + c];
            // SAFETY: `gemm_fn` hands this out only when `Isa::Avx512.available()`
            // (AVX-512 F/BW/VL, AVX2, FMA, F16C): every feature the kernel enables.
            unsafe {
                match c {
                    4 => o.copy_from_slice(&f32_cols::<4>(
                        x,
                        [a_row(t), a_row(t + 1), a_row(t + 2), a_row(t + 3)],
                    )),
                    3 => {
                        o.copy_from_slice(&f32_cols::<3>(x, [a_row(t), a_row(t + 1), a_row(t + 2)]))
                    }
                    2 => o.copy_from_slice(&f32_cols::<2>(x, [a_row(t), a_row(t + 1)])),
                    _ => o.copy_from_slice(&f32_cols::<1>(x, [a_row(t)])),
                }
            }
            t += c;
        }
    }
}

/// One weight row `x` against `C` activation rows, each as `f32_avx512`.
// Index loops: one weight chunk feeds accumulator k of every row c.
#[allow(clippy::needless_range_loop)]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
fn f32_cols<const C: usize>(x: &[f32], y: [&[f32]; C]) -> [f32; C] {
    let n = x.len();
    assert!(
        y.iter().all(|r| r.len() == n),
        "gemm_f32: row lengths differ"
    );
    // SAFETY: reads the 16 floats at i..i+16, bounds-checked by the slice index.
    let load = |s: &[f32], i: usize| unsafe { _mm512_loadu_ps(s[i..i + 16].as_ptr()) };
    let np = n - n % 64;
    let mut acc = [[_mm512_setzero_ps(); 4]; C];
    let mut i = 0;
    while i < np {
        for k in 0..4 {
            let wv = load(x, i + 16 * k);
            for c in 0..C {
                acc[c][k] = _mm512_fmadd_ps(wv, load(y[c], i + 16 * k), acc[c][k]);
            }
        }
        i += 64;
    }
    let mut out = [0.0f32; C];
    for c in 0..C {
        let a = &acc[c];
        let s = _mm512_add_ps(_mm512_add_ps(a[0], a[2]), _mm512_add_ps(a[1], a[3]));
        // SAFETY: register-only; AVX-512F and AVX are enabled here.
        let sum = unsafe { reduce16(s) };
        let yc = y[c];
        out[c] = f32_leftovers(np, n, sum, |j| x[j] * yc[j], |j, s| x[j].mul_add(yc[j], s));
    }
    out
}

#[cfg(test)]
mod tests {
    use crate::matmul::{check_dot_block, matmul, matmul_tile_len, matvec_serial};
    use crate::{GgmlType, Isa, KernelTable, Mode, QActs, QMatrix};

    /// Deterministic values in [−1, 1) (splitmix64).
    fn values(seed: u64, len: usize) -> Vec<f32> {
        let mut s = seed;
        (0..len)
            .map(|_| {
                s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
                let mut z = s;
                z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                z ^= z >> 31;
                (z >> 40) as f32 / (1u64 << 23) as f32 - 1.0
            })
            .collect()
    }

    fn bytes(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    /// Lengths that end in each path of the one-row kernel: only the masked
    /// tail, 16-steps, 64-steps, and every combination of them.
    const LENGTHS: [usize; 12] = [1, 7, 15, 16, 17, 63, 64, 65, 100, 128, 149, 256];

    fn table() -> Option<KernelTable> {
        if !Isa::Avx512.available() {
            eprintln!("*** SKIPPING: no AVX-512, the F32 gemm kernel is not exercised ***");
            return None;
        }
        Some(KernelTable::new(Isa::Avx512))
    }

    #[test]
    fn the_avx512_tier_hands_out_the_f32_multi_row_kernel_for_batches() {
        let Some(kt) = table() else { return };
        assert!(kt.gemm(GgmlType::F32).is_some());
        assert!(kt
            .gemm_for_batch(GgmlType::F32, 256, 4, Mode::Decode)
            .is_some());
        assert!(KernelTable::new(Isa::Scalar).gemm(GgmlType::F32).is_none());
    }

    #[test]
    fn f32_gemm_equals_the_tiers_f32_dot_bit_for_bit_at_awkward_lengths() {
        let Some(kt) = table() else { return };
        let dot = kt.vec_dot(GgmlType::F32);
        for n in LENGTHS {
            let (w_rows, max_t) = (5, 9);
            let wb = bytes(&values(n as u64, n * w_rows));
            let xb = bytes(&values(1000 + n as u64, n * max_t));
            let m = QMatrix::new(GgmlType::F32, n, w_rows, &wb).unwrap();
            let x = QActs::new(GgmlType::F32, n, max_t, &xb).unwrap();
            for (o, rows_w) in [(0, 1), (1, 2), (0, 5), (2, 3)] {
                for (t0, cols) in [(0, 1), (1, 2), (0, 3), (2, 4), (0, 5), (1, 7), (0, 9)] {
                    check_dot_block(&kt, &m, &x, dot, (o, rows_w), (t0, cols), "f32");
                }
            }
        }
    }

    #[test]
    fn an_f32_batch_matmul_equals_single_row_decode_bit_for_bit() {
        // What the speculative verify and the trained-model parity rely on.
        let Some(kt) = table() else { return };
        let n_out = 37;
        for n in [64, 149, 256] {
            let wb = bytes(&values(7 + n as u64, n * n_out));
            let m = QMatrix::new(GgmlType::F32, n, n_out, &wb).unwrap();
            for rows in [2usize, 3, 4, 5, 16, 21] {
                let xb = bytes(&values(77 + (n * rows) as u64, n * rows));
                let x = QActs::new(GgmlType::F32, n, rows, &xb).unwrap();
                let mut out = vec![f32::NAN; rows * n_out];
                let mut tile = vec![0.0; matmul_tile_len(rows)];
                let pool = rayon::ThreadPoolBuilder::new()
                    .num_threads(2)
                    .build()
                    .unwrap();
                pool.install(|| matmul(&kt, &m, &x, &mut out, &mut tile, Mode::Decode));
                let mut one = vec![f32::NAN; n_out];
                for t in 0..rows {
                    matvec_serial(&kt, &m, x.row(t), &mut one);
                    let got: Vec<u32> = out[t * n_out..(t + 1) * n_out]
                        .iter()
                        .map(|v| v.to_bits())
                        .collect();
                    let want: Vec<u32> = one.iter().map(|v| v.to_bits()).collect();
                    assert_eq!(got, want, "n={n} rows={rows} row {t}");
                }
            }
        }
    }
}
