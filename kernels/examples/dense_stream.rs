//! Dense products from DRAM, as a decode step or a verify pass meets them:
//! `L` copies (default 40) of one repacked matrix (default Q6_K, 8192 × 2048,
//! a GDN layer's `attn_qkv`), each multiplied once per sweep by 1, 4 and 16
//! activation rows, on one thread and on two. Prints weight GB/s (median of
//! the sweeps) and, per row count, the cost of a pass in one-row passes.
//!
//! `cargo run -p kernels --release --example dense_stream [q6_k|q8_0|q5_k [n_out [sweeps]]]`

mod common;

use std::hint::black_box;
use std::time::Instant;

use kernels::matmul::{matmul, matmul_tile_len, QActs, QMatrix};
use kernels::{repack, GgmlType, Isa, KernelTable, Mode};

const N: usize = 2048;

fn main() {
    let mut args = std::env::args().skip(1);
    let ty = match args.next().as_deref() {
        Some("q8_0") => GgmlType::Q8_0,
        Some("q5_k") => GgmlType::Q5_K,
        _ => GgmlType::Q6_K,
    };
    let n_out: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(8192);
    let sweeps: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(7);
    let layers: usize = std::env::var("LAYERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40);
    let mut rnd = common::rng();
    let kt = KernelTable::new(Isa::detect());
    let size = ty.row_bytes(N as u64).unwrap() as usize * n_out;
    let psize = repack::packed_bytes(ty, N, n_out);
    let proto = common::random_rows(ty, N, n_out, &mut rnd);
    let proto: &[u8] = &bytemuck::cast_slice(&proto)[..size];
    let mut pk = vec![0u8; psize];
    repack::repack(ty, N, n_out, proto, &mut pk);
    let (file, packed) = (proto.repeat(layers), pk.repeat(layers));
    let mats: Vec<QMatrix> = (0..layers)
        .map(|l| {
            let m = QMatrix::new(ty, N, n_out, &file[l * size..(l + 1) * size])
                .unwrap()
                .with_packed(&packed[l * psize..(l + 1) * psize])
                .unwrap();
            match kt.packed_order_rows(ty, Mode::Decode) {
                Some(_) => m.with_file_matvec(),
                None => m,
            }
        })
        .collect();
    println!(
        "-- {ty} {n_out} x {N}, {layers} copies ({} MiB), {}",
        (layers * size) >> 20,
        kt.isa
    );
    let at = ty.vec_dot_type();
    let alen = at.row_bytes(N as u64).unwrap() as usize;
    let a = common::random_rows(at, N, 16, &mut rnd);
    let ab: &[u8] = &bytemuck::cast_slice(&a)[..alen * 16];
    for threads in [1, 2] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        let mut one = 0f64;
        for rows in [1usize, 4, 16] {
            let x = QActs::new(at, N, rows, &ab[..alen * rows]).unwrap();
            let mut out = vec![0f32; rows * n_out];
            let mut tile = vec![0f32; matmul_tile_len(rows)];
            let mut times = vec![];
            pool.install(|| {
                for _ in 0..sweeps {
                    let t = Instant::now();
                    for m in &mats {
                        matmul(&kt, m, &x, &mut out, &mut tile, Mode::Decode);
                        black_box(&out);
                    }
                    times.push(t.elapsed().as_secs_f64());
                }
            });
            times.sort_by(f64::total_cmp);
            let t = times[times.len() / 2];
            if rows == 1 {
                one = t;
            }
            println!(
                "{threads} thread(s), {rows:2} rows: {:5.1} GB/s, {:.2} one-row passes",
                (layers * size) as f64 / t / 1e9,
                t / one
            );
        }
    }
}
