//! Single-thread batched-product throughput, before and after the multi-row
//! kernels, robust to a loaded machine: the figure is the **minimum** over
//! many repetitions of one product of an in-cache weight matrix (default 256
//! rows of 2048, as in `incache_throughput`) with 32, 64 and 512 activation
//! rows.
//!
//! "pairs" is the per-pair driver `matmul` used before (one table `vec_dot`
//! per weight row × activation row, activation rows in tiles of
//! `ACT_TILE`); "gemm" is `matmul` as it is now (the tier's `GemmFn` where it
//! has one). GFLOP/s counts 2·n_in·n_out·rows.
//!
//! `cargo run -p kernels --release --example gemm_throughput [n_out [reps]]`

mod common;

use common::min_time;

use std::hint::black_box;
use std::time::Duration;

use kernels::matmul::{matmul, matmul_tile_len, QActs, QMatrix, ACT_TILE};
use kernels::{GgmlType, Isa, KernelTable, Mode};

const N: usize = 2048;

/// The driver before the multi-row kernels, on one thread: `[o][t]` order.
fn pairs(kt: &KernelTable, w: &QMatrix, x: &QActs, out: &mut [f32]) {
    let dot = kt.vec_dot(w.ty);
    for t0 in (0..x.rows).step_by(ACT_TILE) {
        let t1 = (t0 + ACT_TILE).min(x.rows);
        for o in 0..w.n_out {
            let wr = w.row(o);
            for t in t0..t1 {
                out[o * x.rows + t] = dot(w.n_in, wr, x.row(t));
            }
        }
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n_out: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(256);
    let reps: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(30);
    let mut rnd = common::rng();
    let one = common::one_thread();
    println!("-- {n_out} x {N} weights, one thread, min of {reps}, GFLOP/s (pairs -> gemm, ratio)");
    // The type list and weight setup as in decode_order.rs::main: each example times its own
    // kernels over its own set of types.
    for ty in [
        GgmlType::Q4_K,
        GgmlType::Q8_0,
        GgmlType::Q3_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
        GgmlType::IQ4_XS,
    ] {
        let rb = ty.row_bytes(N as u64).unwrap() as usize;
        let w = common::random_rows(ty, N, n_out, &mut rnd);
        let m = QMatrix::new(ty, N, n_out, &bytemuck::cast_slice(&w)[..n_out * rb]).unwrap();
        let act_ty = ty.vec_dot_type();
        let alen = act_ty.row_bytes(N as u64).unwrap() as usize;
        let max_rows = 512;
        let a = common::random_rows(act_ty, N, max_rows, &mut rnd);
        let ab: &[u8] = &bytemuck::cast_slice(&a)[..alen * max_rows];
        let kt = KernelTable::new(Isa::detect());
        let mut line = format!("{ty:7} {}:", kt.isa);
        for rows in [32usize, 64, 512] {
            let x = QActs::new(act_ty, N, rows, &ab[..alen * rows]).unwrap();
            let mut out = vec![0f32; rows * n_out];
            let mut tile = vec![0f32; matmul_tile_len(rows)];
            let t_old = min_time(reps, || {
                pairs(&kt, &m, &x, &mut out);
                black_box(&out);
            });
            let t_new = one.install(|| {
                min_time(reps, || {
                    matmul(&kt, &m, &x, &mut out, &mut tile, Mode::Decode);
                    black_box(&out);
                })
            });
            let gf = |d: Duration| 2.0 * (N * n_out * rows) as f64 / d.as_secs_f64() / 1e9;
            line += &format!(
                "  x{rows}: {:5.1} -> {:5.1} ({:.2}x)",
                gf(t_old),
                gf(t_new),
                t_old.as_secs_f64() / t_new.as_secs_f64()
            );
        }
        println!("{line}");
    }
}
