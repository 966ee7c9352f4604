//! Helpers shared by the kernel examples (each example compiles the ones it
//! uses).
#![allow(dead_code)]

use std::time::{Duration, Instant};

/// Fastest of `reps` runs of `f`, after one untimed run.
pub fn min_time(reps: usize, mut f: impl FnMut()) -> Duration {
    f();
    let mut best = Duration::MAX;
    for _ in 0..reps {
        let t = Instant::now();
        f();
        best = best.min(t.elapsed());
    }
    best
}

/// A xorshift source of floats in [-1, 1): the same sequence in every
/// example.
pub fn rng() -> impl FnMut() -> f32 {
    let mut s = 0x2545_f491_4f6c_dd1du64;
    move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
}

/// Zeroed 8-byte words holding at least `len` bytes.
pub fn aligned(len: usize) -> Vec<u64> {
    vec![0u64; len.div_ceil(8)]
}

/// `rows` rows of `n` random values (from `rnd`) quantized to `ty`, in an
/// aligned buffer whose first `rows · ty.row_bytes(n)` bytes they fill.
pub fn random_rows(
    ty: kernels::GgmlType,
    n: usize,
    rows: usize,
    rnd: &mut impl FnMut() -> f32,
) -> Vec<u64> {
    let rb = ty.row_bytes(n as u64).unwrap() as usize;
    let mut buf = aligned(rows * rb);
    let bytes: &mut [u8] = &mut bytemuck::cast_slice_mut(&mut buf)[..rows * rb];
    let mut src = vec![0f32; n];
    for r in bytes.chunks_mut(rb) {
        src.iter_mut().for_each(|v| *v = rnd());
        kernels::scalar::quantize_row(ty, &src, r, None);
    }
    buf
}

/// A rayon pool of one thread (single-core figures).
pub fn one_thread() -> rayon::ThreadPool {
    rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap()
}

/// This thread's CPU time in seconds (Linux `schedstat`), so that a shared,
/// overloaded machine measures the kernel rather than the scheduler; wall
/// time elsewhere.
pub struct Clock(Option<u64>, Instant);

impl Clock {
    fn cpu_ns() -> Option<u64> {
        let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
        s.split_whitespace().next()?.parse().ok()
    }
    pub fn start() -> Clock {
        Clock(Clock::cpu_ns(), Instant::now())
    }
    pub fn secs(&self) -> f64 {
        match (self.0, Clock::cpu_ns()) {
            (Some(a), Some(b)) => (b - a) as f64 / 1e9,
            _ => self.1.elapsed().as_secs_f64(),
        }
    }
}
