//! Weight bytes streamed per second by the 32-element block and float dots, per tier,
//! as a single-threaded mat-vec (`rows` dots of one activation row) over a
//! matrix larger than the last-level cache, next to a plain streaming read
//! of the same size (the single-thread memory bandwidth to compare against).
//!
//! A second table repeats a 1 MiB matrix (cache-resident): the kernels'
//! compute ceiling per core.
//!
//! `cargo run -p kernels --release --example legacy_throughput [MiB]`

mod common;

use common::Clock;
use std::hint::black_box;

use kernels::{scalar, GgmlType, Isa, KernelTable};

const N: usize = 4096;

fn main() {
    let mib: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(256);
    let bytes = mib << 20;

    // Reference: stream the same number of bytes as u64 xor-sums.
    let big: Vec<u64> = (0..bytes / 8).map(|i| i as u64).collect();
    let rate = bytes_per_sec(bytes, || {
        let s = big.chunks(8).fold(0u64, |a, c| {
            a.wrapping_add(c.iter().fold(0u64, |x, y| x ^ y))
        });
        black_box(s);
    });
    drop(big);
    println!("streaming read (u64 xor-sum): {:.1} GB/s", rate / 1e9);

    table(bytes, 1);
    table(1 << 20, bytes >> 20);
}

/// GB/s per type and tier over a `bytes` matrix, swept `reps` times.
fn table(bytes: usize, reps: usize) {
    println!("-- {} MiB matrix, {reps} sweep(s) per timing", bytes >> 20);
    let x: Vec<f32> = (0..N)
        .map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0)
        .collect();
    for ty in [
        GgmlType::Q8_0,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::IQ4_NL,
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::BF16,
    ] {
        let row_bytes = ty.row_bytes(N as u64).unwrap() as usize;
        let rows = bytes / row_bytes;
        let mut w = vec![0u32; (rows * row_bytes).div_ceil(4)];
        let wb: &mut [u8] = &mut bytemuck::cast_slice_mut(&mut w)[..rows * row_bytes];
        for r in wb.chunks_mut(row_bytes).take(16) {
            scalar::quantize_row(ty, &x, r, None);
        }
        for r in 16..rows {
            wb.copy_within(
                (r % 16) * row_bytes..(r % 16 + 1) * row_bytes,
                r * row_bytes,
            );
        }
        let act_ty = ty.vec_dot_type();
        let mut a = vec![0u32; (act_ty.row_bytes(N as u64).unwrap() as usize).div_ceil(4)];
        let ab: &mut [u8] =
            &mut bytemuck::cast_slice_mut(&mut a)[..act_ty.row_bytes(N as u64).unwrap() as usize];
        scalar::quantize_row(act_ty, &x, ab, None);
        let mut line = format!("{ty:7}");
        for isa in Isa::all_available() {
            let dot = KernelTable::new(isa).vec_dot(ty);
            let gbs = bytes_per_sec(reps * rows * row_bytes, || {
                let mut s = 0f32;
                for _ in 0..reps {
                    for r in wb.chunks(row_bytes) {
                        s += dot(N, r, ab);
                    }
                }
                black_box(s);
            }) / 1e9;
            line += &format!("  {isa}: {gbs:6.1} GB/s");
        }
        println!("{line}");
    }
}

/// Runs `sweep` (which touches `bytes`) until ≥ 0.4 s of CPU time has passed
/// (the CPU clock is tick-granular), returning bytes per second.
fn bytes_per_sec(bytes: usize, mut sweep: impl FnMut()) -> f64 {
    sweep(); // warm-up
    let t = Clock::start();
    let mut n = 0usize;
    while t.secs() < 0.4 {
        sweep();
        n += 1;
    }
    (n * bytes) as f64 / t.secs()
}
