//! Mat-vec throughput per weight type × tier × thread count, in weight bytes
//! streamed per second, next to this machine's streaming-read bandwidth
//! measured in the same run over a buffer of the same size.
//!
//! Two sizes: a large matrix far beyond the last-level cache (the decode
//! case: memory-bound) and a small one that stays in cache (the kernel's
//! compute ceiling; each timing there repeats the sweep to ≥ 8 MiB so that the
//! hand-off to the rayon pool does not count). At the end a table gives, per
//! benchmark, the best single timing in GB/s and its share of the best
//! streaming read of the same size at the same thread count.
//!
//! The streaming read is the ceiling a mat-vec is measured against, so it
//! must be the fastest honest read of every byte that this benchmark knows.
//! Method: the buffer is split across the same rayon pool exactly as the
//! mat-vec driver splits its rows (about four `par_chunks` tasks per thread),
//! and each task reads its chunk front to back once, summing every word:
//! `stream/Nt` with 32-byte aligned 256-bit non-temporal loads (`vmovntdqa`,
//! two independent accumulators; the unaligned head word by word), and
//! `stream1/Nt` word by word (eight u64 accumulators, baseline target: the
//! plain read). The summary divides by the faster of the two, per thread
//! count, for wall and CPU time separately. On a machine shared with other
//! jobs read the CPU-time columns (each timing's slowest pool thread's own
//! run time): wall clock there counts preemption and swings widely.
//!
//! On the Zen 4 this was tuned on, `stream` read as fast as `stream1` or
//! faster, and faster than every mat-vec kernel, in every run (the
//! figures move with the other jobs' share of the memory system;
//! docs/PERFORMANCE.md has the paired ratios). Also measured there and
//! found slower or no faster than `stream`: unaligned 256-bit and 512-bit
//! loads (the weights buffer is a `Vec<u64>`, not line-aligned, and each
//! split line costs), 512-bit non-temporal loads, eight sub-streams side by
//! side per task (~27 / ~54), software prefetch 0.5–8 KiB ahead, and a C
//! reader (`gcc -O3 -march=native`, 64-byte aligned buffer: plain sum ~28,
//! aligned 256-bit loads ~30, 256-bit non-temporal ~31 on one thread).
//!
//! `IQ4_XS-r8/<tier>/Nt` and `Q4_K-r8/<tier>/Nt` are those matrices
//! repacked eight rows at a time (`kernels::repack`), as the loader repacks
//! them where the tier has that product; their GB/s count the repacked bytes
//! they stream (1.5 % and 2.8 % more than the file's).
//!
//! ```text
//! cargo bench -p kernels --bench matvec                      # 1 GiB + 256 KiB
//! CLOVER_BENCH_MIB=64 cargo bench -p kernels --bench matvec  # reduced mode
//! cargo bench -p kernels --bench matvec -- 'Q4_K/avx512'     # criterion filter
//! ```
//! `CLOVER_BENCH_PAIRED=N cargo bench -p kernels --bench matvec` instead
//! times N back-to-back pairs of a streaming read and a mat-vec per type and
//! thread count and prints the median ratio (see [`paired`]): the figure to
//! quote on a machine whose memory speed swings.
//!
//! Environment: `CLOVER_BENCH_MIB` (large size, default 1024),
//! `CLOVER_BENCH_SMALL_KIB` (small size, default 256; 0 skips it),
//! `CLOVER_BENCH_THREADS` (default `1,2`), `CLOVER_BENCH_SCALAR=1` (also time
//! the scalar tier on the large size; it always runs on the small one),
//! `CLOVER_BENCH_TIME_MS` (measurement time per benchmark, default 1000).

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, SamplingMode, Throughput};
use kernels::matmul::{matmul, quantize_rows, QActs, QMatrix};
use kernels::{repack, scalar, GgmlType, Isa, KernelTable, Mode};

/// One decode step's mat-vec: the plan for one activation row.
fn matvec(kt: &KernelTable, m: &QMatrix, x: &[u8], out: &mut [f32]) {
    let x = QActs::new(m.ty.vec_dot_type(), m.n_in, 1, x).expect("one activation row");
    matmul(kt, m, &x, out, &mut [], Mode::Decode);
}
use rayon::prelude::*;

/// Elements per weight row (a multiple of every block size).
const N_IN: usize = 4096;
/// Distinct quantized rows; the matrix repeats them (DRAM does not care).
const DISTINCT_ROWS: usize = 64;

const TYPES: [GgmlType; 11] = [
    GgmlType::Q8_0,
    GgmlType::Q4_0,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
    GgmlType::Q3_K,
    GgmlType::Q2_K,
    GgmlType::IQ4_XS,
    GgmlType::IQ4_NL,
    GgmlType::F16,
    GgmlType::BF16,
];

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

fn thread_counts() -> Vec<usize> {
    std::env::var("CLOVER_BENCH_THREADS")
        .ok()
        .map(|s| s.split(',').filter_map(|t| t.trim().parse().ok()).collect())
        .filter(|v: &Vec<usize>| !v.is_empty())
        .unwrap_or_else(|| vec![1, 2])
}

/// One reusable 8-byte aligned buffer, filled with one type's rows at a time.
struct Weights {
    words: Vec<u64>,
    filled: Option<GgmlType>,
}

impl Weights {
    /// Fills the first `rows` rows with `ty` (unless already filled) and
    /// returns the matrix.
    fn matrix(&mut self, ty: GgmlType, rows: usize) -> QMatrix<'_> {
        let rb = ty.row_bytes(N_IN as u64).unwrap() as usize;
        if self.filled != Some(ty) {
            let mut proto = vec![0u8; rb * DISTINCT_ROWS];
            let mut s = 0x2545_f491_4f6c_dd1du64;
            let mut src = vec![0.0f32; N_IN];
            for r in 0..DISTINCT_ROWS {
                for v in src.iter_mut() {
                    s ^= s << 13;
                    s ^= s >> 7;
                    s ^= s << 17;
                    *v = (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0;
                }
                scalar::quantize_row(ty, &src, &mut proto[r * rb..(r + 1) * rb], None);
            }
            let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut self.words);
            for (i, dst) in bytes.chunks_exact_mut(rb).enumerate() {
                let p = i % DISTINCT_ROWS;
                dst.copy_from_slice(&proto[p * rb..(p + 1) * rb]);
            }
            self.filled = Some(ty);
        }
        let bytes: &[u8] = bytemuck::cast_slice(&self.words);
        QMatrix::new(ty, N_IN, rows, bytes).unwrap()
    }
}

fn pool(threads: usize) -> rayon::ThreadPool {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("rayon pool")
}

/// The buffer split across the current pool exactly as [`matvec`] splits its
/// rows (about four `par_chunks` tasks per thread), each task reading its
/// chunk front to back word by word (eight u64 accumulators, whatever the
/// compiler makes of them for the baseline target).
fn stream_read_sequential(words: &[u64]) -> u64 {
    split_read(words, |c| {
        let mut acc = [0u64; 8];
        let mut it = c.chunks_exact(8);
        for ch in &mut it {
            for (a, v) in acc.iter_mut().zip(ch) {
                *a = a.wrapping_add(*v);
            }
        }
        acc.iter()
            .fold(sum(it.remainder()), |a, v| a.wrapping_add(*v))
    })
}

/// The streaming-read ceiling: the split of [`stream_read_sequential`], each
/// task reading its chunk front to back with 32-byte aligned 256-bit
/// non-temporal loads (`vmovntdqa`, two independent accumulators) where AVX2
/// is present; the unaligned head and the tail word by word.
fn stream_read(words: &[u64]) -> u64 {
    split_read(words, |c| {
        #[cfg(target_arch = "x86_64")]
        if is_x86_feature_detected!("avx2") {
            // Whole words up to the first 32-byte boundary.
            let head = c.as_ptr().align_offset(32).min(c.len());
            let body = (c.len() - head) / 8 * 8;
            let (h, rest) = c.split_at(head);
            let (b, t) = rest.split_at(body);
            // SAFETY: AVX2 was just detected; `b` starts 32-byte aligned.
            return unsafe { nt_avx2(b) }
                .wrapping_add(sum(h))
                .wrapping_add(sum(t));
        }
        sum(c)
    })
}

/// Sum of `b` (a whole number of 64-byte lines starting 32-byte aligned)
/// by non-temporal loads.
///
/// # Safety
/// The caller must have AVX2 enabled, and `b` must start 32-byte aligned.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn nt_avx2(b: &[u64]) -> u64 {
    use std::arch::x86_64::*;
    let mut acc = [_mm256_setzero_si256(); 2];
    for line in b.chunks_exact(8) {
        for (k, a) in acc.iter_mut().enumerate() {
            let q: &[u64; 4] = line[4 * k..4 * k + 4].try_into().unwrap();
            // SAFETY: `q` is 32 readable bytes, 32-byte aligned (the caller
            // aligned the start and lines are 64 bytes).
            let v = unsafe { _mm256_stream_load_si256(q.as_ptr().cast()) };
            *a = _mm256_add_epi64(*a, v);
        }
    }
    let mut out = [0u64; 4];
    // SAFETY: `out` is 32 writable bytes and `storeu` has no alignment requirement.
    unsafe { _mm256_storeu_si256(out.as_mut_ptr().cast(), _mm256_add_epi64(acc[0], acc[1])) };
    sum(&out)
}

/// A whole-buffer read returning the sum of its words.
type ReadFn = fn(&[u64]) -> u64;

fn split_read(words: &[u64], read: impl Fn(&[u64]) -> u64 + Sync + Send) -> u64 {
    let per = words
        .len()
        .div_ceil(rayon::current_num_threads() * 4)
        .max(1 << 12);
    words
        .par_chunks(per)
        .map(read)
        .reduce(|| 0, |a, b| a.wrapping_add(b))
}

fn sum(words: &[u64]) -> u64 {
    words.iter().fold(0, |a, v| a.wrapping_add(*v))
}

/// Best timing per benchmark id, for the closing table: bytes, best wall
/// time, best CPU time (the slowest pool thread's own run time, from
/// `/proc/thread-self/schedstat`; wall time where that is unreadable).
type Best = RefCell<BTreeMap<String, (u64, Duration, Duration)>>;

/// This thread's CPU time in nanoseconds, when the kernel reports it.
fn cpu_ns() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    s.split_whitespace().next()?.parse().ok()
}

/// Times `iters` runs of `f` on `pool` one by one, keeping the fastest by
/// wall clock and by CPU time; returns the total wall time.
fn timed(
    best: &Best,
    id: &str,
    bytes: usize,
    iters: u64,
    pool: &rayon::ThreadPool,
    mut f: impl FnMut(),
) -> Duration {
    let mut total = Duration::ZERO;
    let (mut min, mut min_cpu) = (Duration::MAX, Duration::MAX);
    for _ in 0..iters {
        let before = pool.broadcast(|_| cpu_ns());
        let t = Instant::now();
        f();
        let d = t.elapsed();
        let after = pool.broadcast(|_| cpu_ns());
        let cpu = before
            .iter()
            .zip(&after)
            .map(|(a, b)| match (a, b) {
                (Some(a), Some(b)) => Some(Duration::from_nanos(b.saturating_sub(*a))),
                _ => None,
            })
            .try_fold(Duration::ZERO, |m, c| c.map(|c| m.max(c)))
            .unwrap_or(d);
        total += d;
        min = min.min(d);
        min_cpu = min_cpu.min(cpu);
    }
    let mut b = best.borrow_mut();
    let e = b
        .entry(id.to_string())
        .or_insert((bytes as u64, Duration::MAX, Duration::MAX));
    e.1 = e.1.min(min);
    e.2 = e.2.min(min_cpu);
    total
}

fn size_label(bytes: usize) -> String {
    if bytes >= 1 << 20 {
        format!("{}MiB", bytes >> 20)
    } else {
        format!("{}KiB", bytes >> 10)
    }
}

fn bench_size(c: &mut Criterion, bytes: usize, large: bool, best: &Best) {
    let label = size_label(bytes);
    let threads = thread_counts();
    let pools: Vec<(usize, rayon::ThreadPool)> = threads.iter().map(|&t| (t, pool(t))).collect();
    // Written, not just allocated: untouched zero pages all map to one
    // physical page and would stream from cache.
    let words: Vec<u64> = (0..bytes as u64 / 8)
        .map(|i| i.wrapping_mul(0x9e37_79b9))
        .collect();
    let weights = RefCell::new(Weights {
        words,
        filled: None,
    });
    // Sweeps per timing: one over the large matrix; enough over the small one
    // (≥ 8 MiB) that the thread hand-off of `install` does not count.
    let reps = if large {
        1
    } else {
        (8usize << 20).div_ceil(bytes)
    };
    let time = Duration::from_millis(env_usize("CLOVER_BENCH_TIME_MS", 1000) as u64);

    let mut g = c.benchmark_group(format!("read_{label}"));
    g.sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .warm_up_time(time / 2)
        .measurement_time(time)
        .throughput(Throughput::BytesDecimal((reps * bytes) as u64));
    let reads: [(&str, ReadFn); 2] = [("stream", stream_read), ("stream1", stream_read_sequential)];
    for (t, p) in &pools {
        for (name, read) in reads {
            let id = format!("{name}/{t}t");
            let key = format!("{label} {name} {t}t");
            g.bench_function(&id, |b| {
                b.iter_custom(|iters| {
                    let w = weights.borrow();
                    let words: &[u64] = &w.words;
                    timed(best, &key, reps * bytes, iters, p, || {
                        p.install(|| {
                            for _ in 0..reps {
                                black_box(read(black_box(words)));
                            }
                        });
                    })
                })
            });
        }
    }
    g.finish();

    let mut g = c.benchmark_group(format!("matvec_{label}"));
    g.sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .warm_up_time(time / 2)
        .measurement_time(time);
    let scalar_large = std::env::var("CLOVER_BENCH_SCALAR").is_ok_and(|v| v == "1");
    for ty in TYPES {
        let rb = ty.row_bytes(N_IN as u64).unwrap() as usize;
        let rows = bytes / rb;
        g.throughput(Throughput::BytesDecimal((reps * rows * rb) as u64));
        let act_ty = ty.vec_dot_type();
        for isa in Isa::all_available() {
            if isa == Isa::Scalar && large && !scalar_large {
                continue;
            }
            let kt = KernelTable::new(isa);
            let x: Vec<f32> = (0..N_IN)
                .map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0)
                .collect();
            let mut xq = vec![0u64; (act_ty.row_bytes(N_IN as u64).unwrap() as usize).div_ceil(8)];
            let xb: &mut [u8] = bytemuck::cast_slice_mut(&mut xq);
            let xb = &mut xb[..act_ty.row_bytes(N_IN as u64).unwrap() as usize];
            quantize_rows(&kt, act_ty, &x, N_IN, xb);
            let xb: &[u8] = xb;
            let mut out = vec![0.0f32; rows];
            for (t, p) in &pools {
                let id = format!("{ty}/{isa}/{t}t");
                let key = format!("{label} {ty} {isa} {t}t");
                g.bench_function(&id, |b| {
                    b.iter_custom(|iters| {
                        let mut w = weights.borrow_mut();
                        let m = w.matrix(ty, rows);
                        timed(best, &key, reps * rows * rb, iters, p, || {
                            p.install(|| {
                                for _ in 0..reps {
                                    matvec(&kt, &m, xb, &mut out);
                                    black_box(&out);
                                }
                            });
                        })
                    })
                });
            }
            // The same matrix repacked eight rows at a time, as the loader
            // repacks them where this tier has the product (kernels::repack):
            // GB/s of the repacked bytes it streams.
            let rows = rows / repack::ROWS * repack::ROWS;
            if kt.packed_gemm(ty, Mode::Decode).is_none() || !repack::packable(ty, N_IN, rows) {
                continue;
            }
            let pb = repack::packed_bytes(ty, N_IN, rows);
            let mut packed = vec![0u64; pb.div_ceil(8)];
            {
                let mut w = weights.borrow_mut();
                let m = w.matrix(ty, rows);
                repack::repack(
                    ty,
                    N_IN,
                    rows,
                    m.rows(0, rows),
                    &mut bytemuck::cast_slice_mut(&mut packed)[..pb],
                );
            }
            g.throughput(Throughput::BytesDecimal((reps * pb) as u64));
            // Same thread-pool loop as the file-row bench above: this one times the repacked (-r8)
            // product under its own id and key.
            for (t, p) in &pools {
                let id = format!("{ty}-r8/{isa}/{t}t");
                let key = format!("{label} {ty}-r8 {isa} {t}t");
                g.bench_function(&id, |b| {
                    b.iter_custom(|iters| {
                        let mut w = weights.borrow_mut();
                        let m = w
                            .matrix(ty, rows)
                            .with_packed(bytemuck::cast_slice(&packed))
                            .expect("repacked above");
                        timed(best, &key, reps * pb, iters, p, || {
                            p.install(|| {
                                for _ in 0..reps {
                                    matvec(&kt, &m, xb, &mut out);
                                    black_box(&out);
                                }
                            });
                        })
                    })
                });
            }
            g.throughput(Throughput::BytesDecimal((reps * rows * rb) as u64));
        }
    }
    g.finish();
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// Best timing per benchmark in GB/s, by wall clock and by CPU time, each
/// with its share of the same size's best streaming read (same clock, same
/// thread count).
fn summary(best: &Best) {
    let b = best.borrow();
    if b.is_empty() {
        return;
    }
    let gbs = |bytes: u64, d: Duration| bytes as f64 / d.as_secs_f64() / 1e9;
    println!(
        "\n best timing, GB/s and % of the same run's fastest streaming read (best of stream*); loadavg {}",
        loadavg()
    );
    println!(
        " {:<30} {:>8} {:>7} {:>9} {:>7}",
        "benchmark", "wall", "% read", "cpu-time", "% read"
    );
    for (k, &(bytes, wall, cpu)) in b.iter() {
        let size = k.split(' ').next().unwrap_or("");
        let threads = k.rsplit(' ').next().unwrap_or("");
        // The ceiling: the fastest of the streaming reads (all read the same
        // bytes; wall and CPU time each taken at its own best).
        let read = b
            .iter()
            .filter(|(r, _)| {
                r.starts_with(&format!("{size} stream")) && r.ends_with(&format!(" {threads}"))
            })
            .map(|(_, r)| *r)
            .reduce(|m, r| (m.0, m.1.min(r.1), m.2.min(r.2)));
        let read = read.as_ref();
        let pct = |mine: f64, pick: fn(&(u64, Duration, Duration)) -> Duration| match read {
            Some(r) => format!("{:>6.0}%", 100.0 * mine / gbs(r.0, pick(r))),
            None => "      -".into(),
        };
        let (w, c) = (gbs(bytes, wall), gbs(bytes, cpu));
        println!(
            " {:<30} {:>8.2} {} {:>9.2} {}",
            k,
            w,
            pct(w, |r| r.1),
            c,
            pct(c, |r| r.2)
        );
    }
}

/// `CLOVER_BENCH_PAIRED=N`: instead of the criterion benchmarks, for each of
/// Q4_K, IQ4_XS, Q6_K and Q8_0 as this CPU's best tier runs them (Q4_K and
/// IQ4_XS repacked where it has that product, as the loader does) and each
/// thread count, N pairs of one streaming read ([`stream_read`]) and one
/// mat-vec over the large size, back to back. Prints per type the median of
/// the pairs' ratios with its range, and the median GB/s of each side. This
/// machine's memory speed swings by half within seconds, so the ratio of two
/// bests taken minutes apart says more about the swing than the kernel.
fn paired(bytes: usize, n: usize) {
    let isa = Isa::detect();
    let kt = KernelTable::new(isa);
    let pools: Vec<(usize, rayon::ThreadPool)> =
        thread_counts().iter().map(|&t| (t, pool(t))).collect();
    let mut weights = Weights {
        words: (0..bytes as u64 / 8)
            .map(|i| i.wrapping_mul(0x9e37_79b9))
            .collect(),
        filled: None,
    };
    let gbs = |b: usize, d: Duration| b as f64 / d.as_secs_f64() / 1e9;
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!(
        "paired: {n} pairs of (stream, mat-vec) per line, {isa} tier, {} MiB",
        bytes >> 20
    );
    for ty in [
        GgmlType::Q4_K,
        GgmlType::IQ4_XS,
        GgmlType::Q6_K,
        GgmlType::Q8_0,
        GgmlType::Q3_K,
    ] {
        let rb = ty.row_bytes(N_IN as u64).unwrap() as usize;
        let rows = bytes / rb / repack::ROWS * repack::ROWS;
        weights.matrix(ty, rows);
        let words = &weights.words;
        let m = QMatrix::new(ty, N_IN, rows, bytemuck::cast_slice(words)).unwrap();
        let mut packed = Vec::new();
        let (m, kbytes, label) = if kt.packed_gemm(ty, Mode::Decode).is_some() {
            let pb = repack::packed_bytes(ty, N_IN, rows);
            packed = vec![0u64; pb.div_ceil(8)];
            let dst = &mut bytemuck::cast_slice_mut(&mut packed)[..pb];
            repack::repack(ty, N_IN, rows, m.rows(0, rows), dst);
            let m = m
                .with_packed(bytemuck::cast_slice(&packed))
                .expect("repacked");
            (m, pb, format!("{ty}-r8"))
        } else {
            (m, rows * rb, format!("{ty}"))
        };
        let act_ty = ty.vec_dot_type();
        let x: Vec<f32> = (0..N_IN)
            .map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0)
            .collect();
        let ab = act_ty.row_bytes(N_IN as u64).unwrap() as usize;
        let mut xq = vec![0u64; ab.div_ceil(8)];
        let xb = &mut bytemuck::cast_slice_mut(&mut xq)[..ab];
        quantize_rows(&kt, act_ty, &x, N_IN, xb);
        let xb: &[u8] = xb;
        let mut out = vec![0f32; rows];
        for (t, p) in &pools {
            let (mut ratio, mut read, mut kern) = (Vec::new(), Vec::new(), Vec::new());
            for _ in 0..n {
                let t0 = Instant::now();
                p.install(|| black_box(stream_read(black_box(words))));
                let ts = t0.elapsed();
                let t0 = Instant::now();
                p.install(|| matvec(&kt, &m, xb, &mut out));
                let tk = t0.elapsed();
                black_box(&out);
                read.push(gbs(bytes, ts));
                kern.push(gbs(kbytes, tk));
                ratio.push(gbs(kbytes, tk) / gbs(bytes, ts));
            }
            let (lo, hi) = (
                ratio.iter().copied().fold(f64::MAX, f64::min),
                ratio.iter().copied().fold(0f64, f64::max),
            );
            println!(
                " {label:<10} {t}t  median {:>4.0} % of the stream [{:.0}–{:.0} %]   mat-vec {:5.2} GB/s, stream {:5.2} GB/s",
                100.0 * median(&mut ratio),
                100.0 * lo,
                100.0 * hi,
                median(&mut kern),
                median(&mut read)
            );
        }
        drop(packed);
    }
}

fn main() {
    println!("loadavg at start: {}", loadavg());
    if let Some(n) = std::env::var("CLOVER_BENCH_PAIRED")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        paired(env_usize("CLOVER_BENCH_MIB", 1024) << 20, n);
        return;
    }
    let mut c = Criterion::default().configure_from_args();
    let best: Best = RefCell::new(BTreeMap::new());
    let large = env_usize("CLOVER_BENCH_MIB", 1024) << 20;
    let small = env_usize("CLOVER_BENCH_SMALL_KIB", 256) << 10;
    if large > 0 {
        bench_size(&mut c, large, true, &best);
    }
    if small > 0 {
        bench_size(&mut c, small, false, &best);
    }
    c.final_summary();
    summary(&best);
}
