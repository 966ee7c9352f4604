//! Routed experts from DRAM, as a decode step meets them: `LAYERS` layers
//! (default 40) of repacked gate, up and down stacks of `EXPERTS` experts
//! each (default 32; the model has 256), and per layer `expert_gather` over
//! rows routed to distinct random experts (`ROWS`, default 8,16,32: 8 is one
//! token's experts, 32 four tokens' with none shared). Prints weight GB/s
//! on one thread and on two; compare with `clover bench --membw`. The first
//! row count read is slower (its memory is read for the first time): list
//! one twice to see it.
//!
//! `LAYERS=10 EXPERTS=256 ROWS=8,8,32 cargo run -p kernels --release --example expert_stream [q3_k|q4_k|iq4_xs [sweeps]]`

mod common;

use std::hint::black_box;
use std::time::Instant;

use kernels::matmul::{expert_gather, QActs, QExperts};
use kernels::{repack, GgmlType, Isa, KernelTable, Mode};

const EMBD: usize = 2048;
const FF: usize = 512;

/// `src` copied into a buffer on 2 MiB pages where the system has them (as
/// the model's repacked copies are).
fn huge(src: &[u8]) -> Vec<u8> {
    let mut v: Vec<u8> = Vec::with_capacity(src.len() + (2 << 20));
    let p = v.as_mut_ptr() as usize;
    let (start, end) = (
        p.next_multiple_of(2 << 20),
        (p + src.len()) / (2 << 20) * (2 << 20),
    );
    if end > start {
        // SAFETY: inside the vector's allocation, before any touch.
        unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE) };
    }
    v.extend_from_slice(src);
    v
}

fn main() {
    let mut args = std::env::args().skip(1);
    let ty: GgmlType = match args.next().as_deref() {
        Some("q4_k") => GgmlType::Q4_K,
        Some("iq4_xs") => GgmlType::IQ4_XS,
        _ => GgmlType::Q3_K,
    };
    let sweeps: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(5);
    let env = |k: &str, d: usize| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let (layers, experts) = (env("LAYERS", 40), env("EXPERTS", 32));
    let mut rnd = common::rng();
    let kt = KernelTable::new(Isa::detect());
    // One stack per (layer, matrix): gate, up (EMBD -> FF) and down (FF -> EMBD).
    let shapes = [(EMBD, FF), (EMBD, FF), (FF, EMBD)];
    let mut stacks: Vec<(usize, usize, Vec<u8>, Vec<u8>)> = vec![];
    for _ in 0..layers {
        for &(n_in, n_out) in &shapes {
            let proto = common::random_rows(ty, n_in, n_out, &mut rnd);
            let size = ty.row_bytes(n_in as u64).unwrap() as usize * n_out;
            let proto: &[u8] = &bytemuck::cast_slice(&proto)[..size];
            let psize = repack::packed_bytes(ty, n_in, n_out);
            let mut pk1 = vec![0u8; psize];
            repack::repack(ty, n_in, n_out, proto, &mut pk1);
            let file: Vec<u8> = proto.repeat(experts);
            let packed = huge(&pk1.repeat(experts));
            stacks.push((n_in, n_out, file, packed));
        }
    }
    let total: usize = stacks.iter().map(|s| s.2.len()).sum();
    println!(
        "-- {ty}: {layers} layers x 3 stacks of {experts} experts, {} MiB, {}",
        total >> 20,
        kt.isa
    );
    let at = ty.vec_dot_type();
    let acts = |n: usize, rows: usize, rnd: &mut dyn FnMut() -> f32| {
        let a = common::random_rows(at, n, rows, &mut &mut *rnd);
        let len = at.row_bytes(n as u64).unwrap() as usize * rows;
        bytemuck::cast_slice::<u64, u8>(&a)[..len].to_vec()
    };
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let list = std::env::var("ROWS").unwrap_or("8,16,32".into());
    for rows in list.split(',').map(|r| r.parse::<usize>().unwrap()) {
        let xin = acts(EMBD, rows, &mut rnd);
        let xff = acts(FF, rows, &mut rnd);
        let mut out = vec![0f32; rows * EMBD];
        for threads in [1, 2] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            let mut rates = vec![];
            for _ in 0..sweeps {
                let mut bytes = 0usize;
                let t = Instant::now();
                for l in 0..layers {
                    let mut sel: Vec<usize> = (0..experts).collect();
                    for i in 0..rows.min(experts) {
                        let j = i + next() as usize % (experts - i);
                        sel.swap(i, j);
                    }
                    let sel = &sel[..rows.min(experts)];
                    for (m, (n_in, n_out, file, packed)) in
                        stacks[l * 3..l * 3 + 3].iter().enumerate()
                    {
                        let e = QExperts::new(ty, *n_in, *n_out, experts, file)
                            .unwrap()
                            .with_packed(packed)
                            .unwrap();
                        let x = match m {
                            2 => QActs::new(at, FF, rows, &xff).unwrap(),
                            _ => QActs::new(at, EMBD, rows, &xin).unwrap(),
                        };
                        pool.install(|| expert_gather(&kt, &e, sel, &x, &mut out, Mode::Decode));
                        black_box(&out);
                        bytes += sel.len() * file.len() / experts;
                    }
                }
                rates.push(bytes as f64 / t.elapsed().as_secs_f64() / 1e9);
            }
            rates.sort_by(f64::total_cmp);
            println!(
                "{rows:2} experts per layer, {threads} thread(s): {:5.1} GB/s (median of {sweeps})",
                rates[rates.len() / 2]
            );
        }
    }
}
