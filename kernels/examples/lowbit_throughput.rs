//! Single-thread throughput of the Q2_K / Q3_K dots and the Q8 activation
//! quantisers, every tier and every AVX-512 variant side by side, timed by
//! this thread's CPU time (the machine may be shared).
//!
//! Dots: GB/s of weights over a cache-resident matrix (`MiB`, default 1) of
//! 4096-wide rows, the kernels' compute ceiling. Quantisers: Gelem/s over a
//! 4096-element row.
//!
//! `cargo run -p kernels --release --example lowbit_throughput [MiB]`

mod common;

use common::Clock;
use std::hint::black_box;

use kernels::isa::VecDotFn;
use kernels::{scalar, GgmlType, Isa, KernelTable};

const N: usize = 4096;

/// Best of three 0.3 s runs of `sweep` (which handles `units`), units/s.
fn rate(units: usize, mut sweep: impl FnMut()) -> f64 {
    sweep();
    let mut best = 0f64;
    for _ in 0..3 {
        let t = Clock::start();
        let mut n = 0usize;
        while t.secs() < 0.3 {
            sweep();
            n += 1;
        }
        best = best.max((n * units) as f64 / t.secs());
    }
    best
}

fn aligned(len: usize) -> Vec<u32> {
    vec![0u32; len.div_ceil(4)]
}

/// The AVX-512 Q2_K/Q3_K variants, named (none off x86-64).
fn avx512_variants(ty: GgmlType) -> Vec<(String, VecDotFn)> {
    #[cfg(target_arch = "x86_64")]
    return kernels::x86::avx512::lowbit::vec_dot_variants(ty)
        .into_iter()
        .map(|(name, f)| (format!("avx512/{name}"), f))
        .collect();
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = ty;
        Vec::new()
    }
}

fn main() {
    let mib: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let x: Vec<f32> = (0..N)
        .map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0)
        .collect();
    let mut qa = aligned(GgmlType::Q8_K.row_bytes(N as u64).unwrap() as usize);
    let alen = GgmlType::Q8_K.row_bytes(N as u64).unwrap() as usize;
    scalar::quantize_row(
        GgmlType::Q8_K,
        &x,
        &mut bytemuck::cast_slice_mut(&mut qa)[..alen],
        None,
    );
    let ab: &[u8] = &bytemuck::cast_slice(&qa)[..alen];
    println!("-- dots, {mib} MiB matrix of {N}-wide rows (GB/s of weights)");
    for ty in [GgmlType::Q2_K, GgmlType::Q3_K] {
        let rb = ty.row_bytes(N as u64).unwrap() as usize;
        let rows = (mib << 20) / rb;
        let mut w = aligned(rows * rb);
        let wb: &mut [u8] = &mut bytemuck::cast_slice_mut(&mut w)[..rows * rb];
        for r in wb.chunks_mut(rb).take(16) {
            scalar::quantize_row(ty, &x, r, None);
        }
        for r in 16..rows {
            wb.copy_within((r % 16) * rb..(r % 16 + 1) * rb, r * rb);
        }
        let wb: &[u8] = wb;
        let dots: Vec<(String, VecDotFn)> = Isa::all_available()
            .into_iter()
            .map(|isa| (format!("{isa}(table)"), KernelTable::new(isa).vec_dot(ty)))
            .chain(avx512_variants(ty))
            .collect();
        let mut line = format!("{ty:5}");
        for (name, dot) in dots {
            let gbs = rate(rows * rb, || {
                let mut s = 0f32;
                // The timed dot loop as in legacy_throughput.rs::table: this example times each
                // named variant through its own rate().
                for r in wb.chunks(rb) {
                    s += dot(N, r, ab);
                }
                black_box(s);
            }) / 1e9;
            line += &format!("  {name}: {gbs:5.1}");
        }
        println!("{line}");
    }
    println!("-- quantisers, {N}-element row (Gelem/s)");
    for act_ty in [GgmlType::Q8_0, GgmlType::Q8_1, GgmlType::Q8_K] {
        let len = act_ty.row_bytes(N as u64).unwrap() as usize;
        let mut out = aligned(len);
        let mut line = format!("{act_ty:5}");
        for isa in Isa::all_available() {
            let q = KernelTable::new(isa).quantize(act_ty);
            let ob: &mut [u8] = &mut bytemuck::cast_slice_mut(&mut out)[..len];
            // 256 rows per sweep: reading the clock costs microseconds.
            let r = rate(256 * N, || {
                for _ in 0..256 {
                    q(black_box(&x), ob);
                    black_box(&ob);
                }
            }) / 1e9;
            line += &format!("  {isa}: {r:5.2}");
        }
        println!("{line}");
    }
}
