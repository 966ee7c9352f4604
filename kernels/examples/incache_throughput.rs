//! In-cache single-thread throughput of the decode dots, robust to a loaded
//! machine: each timing is one short sweep over a small matrix (default
//! 256 KiB of 4096-wide rows, cache-resident), and the figure is the
//! **minimum** over many repetitions (default 2000) — short runs are rarely
//! preempted, so the minimum is the kernel's compute ceiling on one core.
//!
//! Columns per type: each tier's table dot called row by row, and the
//! single-thread mat-vec driver (`matvec_serial`) for the same tier; for
//! Q4_K and IQ4_XS also the driver on the rows repacked eight at a time
//! (`r8`, where the tier has that product). GB/s of weight bytes.
//!
//! `cargo run -p kernels --release --example incache_throughput [KiB [reps]]`

mod common;

use common::{aligned, min_time};

use std::hint::black_box;
use std::time::Duration;

use kernels::matmul::{matvec_serial, QMatrix};
use kernels::{repack, scalar, GgmlType, Isa, KernelTable};

// The argument parsing as in decode_order.rs::main: each example takes its own arguments and
// defaults.
const N: usize = 4096;

fn main() {
    let mut args = std::env::args().skip(1);
    let kib: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(256);
    let reps: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(2000);
    let mut rnd = common::rng();
    let x: Vec<f32> = (0..N).map(|_| rnd()).collect();
    println!("-- {kib} KiB matrix of {N}-wide rows, min of {reps} sweeps, GB/s of weights");
    for ty in [
        GgmlType::Q4_K,
        GgmlType::IQ4_XS,
        GgmlType::Q6_K,
        GgmlType::Q8_0,
        GgmlType::Q5_K,
        GgmlType::Q2_K,
        GgmlType::Q3_K,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::IQ4_NL,
        GgmlType::F16,
        GgmlType::F32,
    ] {
        let rb = ty.row_bytes(N as u64).unwrap() as usize;
        let rows = (kib << 10) / rb;
        let mut w = aligned(rows * rb);
        let wb: &mut [u8] = &mut bytemuck::cast_slice_mut(&mut w)[..rows * rb];
        let mut src = vec![0f32; N];
        for r in wb.chunks_mut(rb) {
            src.iter_mut().for_each(|v| *v = rnd());
            scalar::quantize_row(ty, &src, r, None);
        }
        let wb: &[u8] = wb;
        let act_ty = ty.vec_dot_type();
        let alen = act_ty.row_bytes(N as u64).unwrap() as usize;
        let mut a = aligned(alen);
        let ab: &mut [u8] = &mut bytemuck::cast_slice_mut(&mut a)[..alen];
        scalar::quantize_row(act_ty, &x, ab, None);
        let ab: &[u8] = ab;
        let m = QMatrix::new(ty, N, rows, wb).unwrap();
        let mut out = vec![0f32; rows];
        let mut line = format!("{ty:7}");
        for isa in Isa::all_available() {
            if isa == Isa::Scalar {
                continue;
            }
            let kt = KernelTable::new(isa);
            let dot = kt.vec_dot(ty);
            let gbs = |d: Duration| (rows * rb) as f64 / d.as_secs_f64() / 1e9;
            let t_dot = min_time(reps, || {
                for (r, y) in wb.chunks(rb).zip(out.iter_mut()) {
                    *y = dot(N, r, ab);
                }
                black_box(&out);
            });
            let t_drv = min_time(reps, || {
                matvec_serial(&kt, &m, ab, &mut out);
                black_box(&out);
            });
            line += &format!("  {isa}: dot {:5.1} matvec {:5.1}", gbs(t_dot), gbs(t_drv));
            // Repacked eight rows at a time, as the loader does where the
            // tier has the product (GB/s of the repacked bytes).
            let rows8 = rows / repack::ROWS * repack::ROWS;
            if kt.packed_gemm(ty, kernels::Mode::Decode).is_some() && repack::packable(ty, N, rows8)
            {
                let pb = repack::packed_bytes(ty, N, rows8);
                let mut p = aligned(pb);
                let pbytes = &mut bytemuck::cast_slice_mut(&mut p)[..pb];
                repack::repack(ty, N, rows8, &wb[..rows8 * rb], pbytes);
                let m8 = QMatrix::new(ty, N, rows8, wb)
                    .unwrap()
                    .with_packed(bytemuck::cast_slice(&p))
                    .unwrap();
                let t_r8 = min_time(reps, || {
                    matvec_serial(&kt, &m8, ab, &mut out);
                    black_box(&out);
                });
                line += &format!(" r8 {:5.1}", pb as f64 / t_r8.as_secs_f64() / 1e9);
            }
        }
        println!("{line}");
    }
}
