//! The machine's streaming read bandwidth: the yardstick for decode, which
//! streams every active weight once per token (DESIGN, STYLE habit 12).
//!
//! A buffer far larger than the caches is filled once (so its pages exist),
//! then summed by `threads` workers over disjoint chunks; the best of `reps`
//! passes is reported, as STREAM does.

use std::time::Instant;

use rayon::prelude::*;

/// Result of one bandwidth measurement.
#[derive(Clone, Copy, Debug)]
pub struct Bandwidth {
    pub bytes: usize,
    pub threads: usize,
    /// Best pass, bytes per second.
    pub best: f64,
    /// Mean over passes, bytes per second.
    pub mean: f64,
}

/// Sums `buf` with the current rayon pool; the sum keeps the reads alive.
fn read_pass(buf: &[u64]) -> u64 {
    buf.par_chunks(1 << 16)
        .map(|c| {
            // Four independent accumulators so the adds do not serialise.
            let mut acc = [0u64; 4];
            for q in c.chunks_exact(4) {
                acc[0] = acc[0].wrapping_add(q[0]);
                acc[1] = acc[1].wrapping_add(q[1]);
                acc[2] = acc[2].wrapping_add(q[2]);
                acc[3] = acc[3].wrapping_add(q[3]);
            }
            let tail: u64 = c.chunks_exact(4).remainder().iter().sum();
            acc.iter().fold(tail, |a, &b| a.wrapping_add(b))
        })
        .reduce(|| 0, u64::wrapping_add)
}

/// Reads a `mib` MiB buffer `reps` times on a pool of `threads` threads.
pub fn measure(mib: usize, threads: usize, reps: usize) -> Result<Bandwidth, String> {
    if mib == 0 || threads == 0 || reps == 0 {
        return Err("membw: size, threads and repetitions must be at least 1".into());
    }
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .map_err(|e| format!("membw: thread pool: {e}"))?;
    let words = mib << 17;
    let buf: Vec<u64> = pool.install(|| {
        (0..words as u64)
            .into_par_iter()
            .map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15))
            .collect()
    });
    let bytes = words * 8;
    let mut rates = Vec::with_capacity(reps);
    pool.install(|| {
        // One untimed pass warms the TLB and the pool.
        std::hint::black_box(read_pass(&buf));
        for _ in 0..reps {
            let t0 = Instant::now();
            std::hint::black_box(read_pass(std::hint::black_box(&buf)));
            rates.push(bytes as f64 / t0.elapsed().as_secs_f64());
        }
    });
    Ok(Bandwidth {
        bytes,
        threads,
        best: rates.iter().cloned().fold(0.0, f64::max),
        mean: rates.iter().sum::<f64>() / rates.len() as f64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_pass_sums_every_word() {
        let buf: Vec<u64> = (1..=100_003).collect();
        assert_eq!(read_pass(&buf), 100_003 * 100_004 / 2);
    }

    #[test]
    fn measure_rejects_zero_sizes() {
        assert!(measure(0, 1, 1).is_err());
        assert!(measure(1, 0, 1).is_err());
    }

    #[test]
    fn measure_reports_the_buffer_it_read() {
        let bw = measure(1, 1, 2).unwrap();
        assert_eq!(bw.bytes, 1 << 20);
        assert!(bw.best > 0.0 && bw.best >= bw.mean);
    }
}
