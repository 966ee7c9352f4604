//! Single-thread mat-vec throughput at the model's decode shapes, **from
//! DRAM**: many copies of one matrix shape laid end to end (default 768 MiB,
//! far beyond the last-level cache), each multiplied once per sweep, as a
//! decode step walks its layers. Columns: the mat-vec driver
//! (`matvec_serial`, the tier's multi-row kernel where it has one) and the
//! table `vec_dot` called row by row. GB/s of weight bytes.
//!
//! In-cache figures (`incache_throughput`) cannot show how a kernel's access
//! pattern meets the hardware prefetcher: pairing adjacent weight rows ran
//! 2.7–3× slower from DRAM than in cache, which only this sweep showed.
//!
//! `MIB=4 REPS=200` makes it an in-cache run of the same shapes.
//!
//! `cargo run -p kernels --release --example stream_shapes`

mod common;

use std::hint::black_box;
use std::time::Instant;

use kernels::matmul::{matvec_serial, QMatrix};
use kernels::{scalar, GgmlType, Isa, KernelTable};

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let mut rnd = common::rng();
    let total = env("MIB", 768) << 20;
    let reps = env("REPS", 1);
    let kt = KernelTable::new(Isa::detect());
    println!(
        "-- {} MiB of matrices, {reps} sweep(s), one thread, {}",
        total >> 20,
        kt.isa
    );
    // 35B-A3B: attention gate, GDN qkv / output head rows, shared expert
    // gate|up, routed expert gate|up and down.
    for (ty, n_in, n_out) in [
        (GgmlType::Q8_0, 2048usize, 4096usize),
        (GgmlType::Q6_K, 2048, 4096),
        (GgmlType::Q5_K, 2048, 512),
        (GgmlType::Q3_K, 2048, 512),
        (GgmlType::Q3_K, 512, 2048),
    ] {
        let rb = ty.row_bytes(n_in as u64).unwrap() as usize;
        let mb = rb * n_out;
        let nm = (total / mb).max(1);
        // 64 distinct quantized rows, repeated (DRAM does not care).
        let mut proto = vec![0u8; rb * 64];
        let mut src = vec![0f32; n_in];
        for r in proto.chunks_mut(rb) {
            src.iter_mut().for_each(|v| *v = rnd());
            scalar::quantize_row(ty, &src, r, None);
        }
        let mut w = vec![0u64; (nm * mb).div_ceil(8)];
        let wb: &mut [u8] = &mut bytemuck::cast_slice_mut(&mut w)[..nm * mb];
        for (i, r) in wb.chunks_mut(rb).enumerate() {
            r.copy_from_slice(&proto[(i % 64) * rb..(i % 64 + 1) * rb]);
        }
        let wb: &[u8] = wb;
        let x: Vec<f32> = (0..n_in).map(|_| rnd()).collect();
        let act = ty.vec_dot_type();
        let mut ab = vec![0u8; act.row_bytes(n_in as u64).unwrap() as usize];
        scalar::quantize_row(act, &x, &mut ab, None);
        let dot = kt.vec_dot(ty);
        let mut out = vec![0f32; n_out];
        let gb = (nm * mb * reps) as f64 / 1e9;
        // ORDER=random: the matrices in a shuffled order, as routed experts.
        let mut order: Vec<usize> = (0..nm).collect();
        if std::env::var("ORDER").is_ok_and(|v| v == "random") {
            for i in (1..nm).rev() {
                order.swap(i, (rnd().abs() * 1e6) as usize % (i + 1));
            }
        }
        for round in 0..3 {
            let t = Instant::now();
            for &m in order.iter().cycle().take(nm * reps) {
                let q = QMatrix::new(ty, n_in, n_out, &wb[m * mb..(m + 1) * mb]).unwrap();
                matvec_serial(&kt, &q, &ab, &mut out);
                black_box(&out);
            }
            let t_drv = t.elapsed().as_secs_f64();
            let t = Instant::now();
            for &m in order.iter().cycle().take(nm * reps) {
                for (r, y) in wb[m * mb..(m + 1) * mb].chunks(rb).zip(out.iter_mut()) {
                    *y = dot(n_in, r, &ab);
                }
                black_box(&out);
            }
            let t_dot = t.elapsed().as_secs_f64();
            println!(
                "{ty:7} {n_out:>4} x {n_in:<4} sweep {round}: matvec {:5.1}  vec_dot per row {:5.1}",
                gb / t_drv,
                gb / t_dot
            );
        }
    }
}
