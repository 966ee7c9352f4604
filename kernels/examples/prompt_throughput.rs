//! Single-thread throughput of prompt-batch products ([`Mode::Prompt`]) on
//! an in-cache weight matrix (default 512 rows of 2048: a routed expert's
//! gate at full size), with 1, 4, 8, 12, 16, 32 and 512 activation rows (a
//! routed expert in a 512-token prefill sees about 16). The figure is the
//! minimum over many repetitions, so it is the compute ceiling on one core.
//! Q3_K, Q6_K, Q4_K, IQ4_XS, Q5_K and Q8_0 are shown both repacked (`r8`, what the loader does) and
//! plain. GFLOP/s counts 2·n_in·n_out·rows. A third argument `decode` times
//! [`Mode::Decode`] instead: the products of a decode step (1 row) and of a
//! verify pass or a server step (several rows, each with decoding's bits).
//!
//! `cargo run -p kernels --release --example prompt_throughput [n_out [reps [decode]]]`

mod common;

use common::{aligned, min_time};

use std::hint::black_box;
use std::time::Duration;

use kernels::matmul::{matmul, matmul_tile_len, QActs, QMatrix};
use kernels::{repack, GgmlType, Isa, KernelTable, Mode};

const N: usize = 2048;

fn main() {
    let mut args = std::env::args().skip(1);
    let n_out: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(512);
    let reps: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(40);
    let mode = match args.next().as_deref() {
        Some("decode") => Mode::Decode,
        _ => Mode::Prompt,
    };
    let mut rnd = common::rng();
    let one = common::one_thread();
    let kt = KernelTable::new(Isa::detect());
    println!(
        "-- {n_out} x {N} weights, one thread, min of {reps}, GFLOP/s ({})",
        kt.isa
    );
    // Each type packed and unpacked, alike pairs: the list states which layouts are timed.
    for (ty, packed) in [
        (GgmlType::Q3_K, true),
        (GgmlType::Q3_K, false),
        (GgmlType::Q6_K, true),
        (GgmlType::Q6_K, false),
        (GgmlType::Q4_K, true),
        (GgmlType::Q4_K, false),
        (GgmlType::IQ4_XS, true),
        (GgmlType::IQ4_XS, false),
        (GgmlType::Q5_K, true),
        (GgmlType::Q5_K, false),
        (GgmlType::Q8_0, true),
        (GgmlType::Q8_0, false),
    ] {
        let rb = ty.row_bytes(N as u64).unwrap() as usize;
        let w = common::random_rows(ty, N, n_out, &mut rnd);
        let wb: &[u8] = &bytemuck::cast_slice(&w)[..n_out * rb];
        let mut pk = aligned(repack::packed_bytes(ty, N, n_out));
        let m = QMatrix::new(ty, N, n_out, wb).unwrap();
        let m = if packed {
            let pb: &mut [u8] = bytemuck::cast_slice_mut(&mut pk);
            repack::repack(ty, N, n_out, wb, pb);
            m.with_packed(bytemuck::cast_slice(&pk)).unwrap()
        } else {
            m
        };
        let act_ty = ty.vec_dot_type();
        let alen = act_ty.row_bytes(N as u64).unwrap() as usize;
        let max_rows = 512;
        let a = common::random_rows(act_ty, N, max_rows, &mut rnd);
        let ab: &[u8] = &bytemuck::cast_slice(&a)[..alen * max_rows];
        let name = format!("{ty}{}", if packed { " r8" } else { "" });
        let mut line = format!("{name:10}");
        for rows in [1usize, 4, 8, 12, 16, 32, 512] {
            let x = QActs::new(act_ty, N, rows, &ab[..alen * rows]).unwrap();
            let mut out = vec![0f32; rows * n_out];
            let mut tile = vec![0f32; matmul_tile_len(rows)];
            let reps = if rows >= 512 { reps.div_ceil(8) } else { reps };
            let t = one.install(|| {
                min_time(reps, || {
                    matmul(&kt, &m, &x, &mut out, &mut tile, mode);
                    black_box(&out);
                })
            });
            let gf = |d: Duration| 2.0 * (N * n_out * rows) as f64 / d.as_secs_f64() / 1e9;
            line += &format!("  x{rows}: {:6.1}", gf(t));
        }
        println!("{line}");
    }
}
