//! Single-thread cost of a product of 1..16 activation rows through
//! decoding's kernels (`Mode::Decode`) and through the prompt kernel, in
//! weight GB/s (min over repetitions of an in-cache matrix).
//!
//! `cargo run -p kernels --release --example decode_order [n_out [reps]]`

mod common;

use common::min_time;

use std::hint::black_box;
use std::time::Duration;

use kernels::matmul::{matmul, matmul_tile_len, QActs, QMatrix};
use kernels::{repack, GgmlType, Isa, KernelTable, Mode};

const N: usize = 2048;

fn main() {
    let mut args = std::env::args().skip(1);
    let n_out: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(512);
    let reps: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(50);
    let mut rnd = common::rng();
    let one = common::one_thread();
    let kt = KernelTable::new(Isa::detect());
    println!("-- {n_out} x {N}, one thread, weight GB/s: decode kernels (file rows / repacked) / prompt kernel");
    for ty in [
        GgmlType::Q3_K,
        GgmlType::Q6_K,
        GgmlType::Q8_0,
        GgmlType::Q5_K,
        GgmlType::Q4_K,
    ] {
        let rb = ty.row_bytes(N as u64).unwrap() as usize;
        let w = common::random_rows(ty, N, n_out, &mut rnd);
        let wb: &[u8] = &bytemuck::cast_slice(&w)[..n_out * rb];
        let m = QMatrix::new(ty, N, n_out, wb).unwrap();
        let mut pk = vec![0u8; repack::packed_bytes(ty, N, n_out)];
        repack::repack(ty, N, n_out, wb, &mut pk);
        let mp = m.with_packed(&pk).unwrap();
        // A mat-vec reads the file's rows in the repacked order where the
        // tier has that kernel (as the loader sets it up).
        let mp = match kt.packed_order_rows(ty, Mode::Decode) {
            Some(_) => mp.with_file_matvec(),
            None => mp,
        };
        let act_ty = ty.vec_dot_type();
        let alen = act_ty.row_bytes(N as u64).unwrap() as usize;
        let a = common::random_rows(act_ty, N, 16, &mut rnd);
        let ab: &[u8] = &bytemuck::cast_slice(&a)[..alen * 16];
        let Some(g) = kt.prompt_gemm(ty, Mode::Prompt) else {
            continue;
        };
        let mut line = format!("{ty:7}");
        for rows in [1usize, 2, 4, 8, 16] {
            let x = QActs::new(act_ty, N, rows, &ab[..alen * rows]).unwrap();
            let mut out = vec![0f32; rows * n_out];
            let mut tile = vec![0f32; matmul_tile_len(rows)];
            let t_dec = one.install(|| {
                min_time(reps, || {
                    matmul(&kt, &m, &x, &mut out, &mut tile, Mode::Decode);
                    black_box(&out);
                })
            });
            let t_pk = one.install(|| {
                min_time(reps, || {
                    matmul(&kt, &mp, &x, &mut out, &mut tile, Mode::Decode);
                    black_box(&out);
                })
            });
            let t_pr = min_time(reps, || {
                // SAFETY: `out` holds rows x n_out floats.
                unsafe { g(N, wb, n_out, x.rows(0, rows), rows, out.as_mut_ptr(), n_out) };
                black_box(&out);
            });
            let gb = |d: Duration| wb.len() as f64 / d.as_secs_f64() / 1e9;
            line += &format!(
                "  x{rows}: {:5.1} / {:5.1} / {:5.1}",
                gb(t_dec),
                gb(t_pk),
                gb(t_pr)
            );
        }
        println!("{line}");
    }
}
