//! Single-thread mat-vec from DRAM, the file's rows against the same rows
//! repacked ([`kernels::repack`]), alternating sweeps so that both see the
//! same machine (and, where the tier has it, the file's rows read in the
//! repacked product's order): many copies of one matrix laid end to end (default 768
//! MiB, far beyond the last-level cache), each multiplied once per sweep, as
//! a decode step walks its layers. Both buffers ask for 2 MiB pages, as the
//! model's mapping (recached) and its repacked copies get. Prints the median
//! GB/s of the file's bytes over the sweeps, and the median ratio.
//!
//! `cargo run -p kernels --release --example packed_stream [sweeps]`

mod common;

use std::hint::black_box;
use std::time::Instant;

use kernels::matmul::{matvec_serial, QMatrix};
use kernels::{repack, GgmlType, Isa, KernelTable};

fn huge(words: usize) -> Vec<u64> {
    let mut v: Vec<u64> = Vec::with_capacity(words);
    let (p, bytes) = (v.as_mut_ptr() as usize, words * 8);
    let start = p.next_multiple_of(2 << 20);
    let end = (p + bytes) / (2 << 20) * (2 << 20);
    if end > start {
        // SAFETY: inside the vector's allocation, before any touch.
        unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE) };
    }
    v.resize(words, 0);
    v
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    let sweeps: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(9);
    let mut rnd = common::rng();
    let kt = KernelTable::new(Isa::detect());
    let one = common::one_thread();
    let total = 768usize << 20;
    println!("-- {} MiB of matrices, one thread, {}", total >> 20, kt.isa);
    for (ty, n, n_out, what) in [
        (GgmlType::Q3_K, 2048, 512, "routed expert gate"),
        (GgmlType::Q3_K, 512, 2048, "routed expert down"),
        (GgmlType::Q6_K, 2048, 4096, "dense"),
        (GgmlType::Q8_0, 2048, 4096, "GDN gate"),
        (GgmlType::Q5_K, 2048, 512, "shared expert gate"),
        (GgmlType::Q5_K, 512, 2048, "shared expert down"),
        (GgmlType::Q4_K, 2048, 512, "q4_k expert gate"),
        (GgmlType::Q4_K, 2048, 4096, "q4_k dense"),
        (GgmlType::IQ4_XS, 2048, 512, "iq4_xs expert gate"),
    ] {
        let rb = ty.row_bytes(n as u64).unwrap() as usize;
        let size = rb * n_out;
        let copies = total / size;
        let proto = common::random_rows(ty, n, n_out, &mut rnd);
        let proto: &[u8] = &bytemuck::cast_slice(&proto)[..size];
        let mut file = huge((size * copies).div_ceil(8));
        let fb: &mut [u8] = bytemuck::cast_slice_mut(&mut file);
        for c in 0..copies {
            fb[c * size..(c + 1) * size].copy_from_slice(proto);
        }
        let psize = repack::packed_bytes(ty, n, n_out);
        let mut packed = huge((psize * copies).div_ceil(8));
        let pb: &mut [u8] = bytemuck::cast_slice_mut(&mut packed);
        let t = Instant::now();
        for c in 0..copies {
            let src = &fb[c * size..(c + 1) * size];
            repack::repack(ty, n, n_out, src, &mut pb[c * psize..(c + 1) * psize]);
        }
        let repack_gbs = (size * copies) as f64 / t.elapsed().as_secs_f64() / 1e9;
        let (fb, pb): (&[u8], &[u8]) = (bytemuck::cast_slice(&file), bytemuck::cast_slice(&packed));
        let at = ty.vec_dot_type();
        let act = common::random_rows(at, n, 1, &mut rnd);
        let x = &bytemuck::cast_slice::<u64, u8>(&act)[..at.row_bytes(n as u64).unwrap() as usize];
        let mut out = vec![0f32; n_out];
        let mats = |packed: bool| -> Vec<QMatrix> {
            (0..copies)
                .map(|c| {
                    let m = QMatrix::new(ty, n, n_out, &fb[c * size..(c + 1) * size]).unwrap();
                    match packed {
                        true => m.with_packed(&pb[c * psize..(c + 1) * psize]).unwrap(),
                        false => m,
                    }
                })
                .collect()
        };
        let (plain, rep) = (mats(false), mats(true));
        // The file's rows read in the repacked product's order, where the
        // tier has that kernel (what the loader keeps for Q6_K).
        let ordered: Option<Vec<QMatrix>> = kt
            .packed_order_rows(ty, kernels::Mode::Decode)
            .map(|_| rep.iter().map(|m| m.with_file_matvec()).collect());
        let mut gbs = [vec![], vec![], vec![]];
        let mut ratios = vec![];
        one.install(|| {
            for _ in 0..sweeps {
                let mut pair = [0f64; 3];
                let sets = [Some(&plain), Some(&rep), ordered.as_ref()];
                for (k, ms) in sets.into_iter().enumerate() {
                    let Some(ms) = ms else { continue };
                    let t = Instant::now();
                    for m in ms {
                        matvec_serial(&kt, m, x, &mut out);
                        black_box(&out);
                    }
                    pair[k] = (size * copies) as f64 / t.elapsed().as_secs_f64() / 1e9;
                    gbs[k].push(pair[k]);
                }
                ratios.push(pair[1] / pair[0]);
            }
        });
        let ordered = match gbs[2].is_empty() {
            true => String::new(),
            false => format!(
                ", file rows in the repacked order {:.1} GB/s",
                median(&mut gbs[2])
            ),
        };
        println!(
            "{ty} {n_out} x {n} ({what}): file {:.1} GB/s, repacked {:.1} GB/s{ordered}, repacked / file {:.2}; repacking {repack_gbs:.2} GB/s",
            median(&mut gbs[0]),
            median(&mut gbs[1]),
            median(&mut ratios)
        );
    }
}
