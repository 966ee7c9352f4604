//! Properties of the 256-element formats (Q2_K..Q6_K, IQ4_XS, Q8_K) and the
//! equivalence of every available SIMD tier with the scalar reference.

use kernels::{scalar, GgmlType, Isa, KernelTable};

const WEIGHT_TYPES: [GgmlType; 6] = [
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
    GgmlType::IQ4_XS,
];

/// Deterministic xorshift generator.
struct Rng(u64);

impl Rng {
    fn next_u32(&mut self) -> u32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 16) as u32
    }
    /// Uniform in [-1, 1).
    fn uni(&mut self) -> f32 {
        (self.next_u32() >> 8) as f32 / 8_388_608.0 - 1.0
    }
    /// Roughly standard normal (sum of four uniforms).
    fn gauss(&mut self) -> f32 {
        (self.uni() + self.uni() + self.uni() + self.uni()) * 0.866_025_4
    }
}

/// A zeroed byte buffer aligned for any block type (4 bytes).
fn buf(len: usize) -> Vec<u32> {
    vec![0u32; len.div_ceil(4)]
}

fn bytes(b: &[u32], len: usize) -> &[u8] {
    &bytemuck::cast_slice(b)[..len]
}

fn bytes_mut(b: &mut [u32], len: usize) -> &mut [u8] {
    &mut bytemuck::cast_slice_mut(b)[..len]
}

fn row_bytes(ty: GgmlType, n: usize) -> usize {
    ty.row_bytes(n as u64).unwrap() as usize
}

fn quantize(ty: GgmlType, x: &[f32], imatrix: Option<&[f32]>) -> (Vec<u32>, usize) {
    let len = row_bytes(ty, x.len());
    let mut b = buf(len);
    scalar::quantize_row(ty, x, bytes_mut(&mut b, len), imatrix);
    (b, len)
}

fn dequantize(ty: GgmlType, q: &[u32], len: usize, n: usize) -> Vec<f32> {
    let mut y = vec![0f32; n];
    scalar::dequantize_row(ty, bytes(q, len), &mut y);
    y
}

/// Levels per sub-block step: the largest error a round-to-nearest quantiser
/// with that many levels spread over a sub-block's range can make is half a
/// step; we allow one full step (the 6-bit or 4-bit rounding of the sub-block
/// scale and the searches' trade of range for fit move the step by a fraction).
fn levels(ty: GgmlType) -> (usize, f32) {
    // (sub-block size, number of steps across the full range −amax..amax)
    match ty {
        GgmlType::Q2_K => (16, 3.0),
        GgmlType::Q3_K => (16, 7.0),
        GgmlType::Q4_K => (32, 15.0),
        GgmlType::Q5_K => (32, 31.0),
        GgmlType::Q6_K => (16, 63.0),
        // the grid's widest gap (−127..−104 of 240 across the range)
        GgmlType::IQ4_XS => (32, 240.0 / 24.0),
        GgmlType::Q8_K => (256, 254.0),
        _ => unreachable!(),
    }
}

#[test]
fn quantise_then_dequantise_error_is_within_one_step_of_each_sub_block() {
    let mut rng = Rng(0x1234_5678_9abc_def1);
    let n = 256 * 8;
    let x: Vec<f32> = (0..n).map(|_| rng.gauss()).collect();
    for ty in WEIGHT_TYPES.into_iter().chain([GgmlType::Q8_K]) {
        let (q, len) = quantize(ty, &x, None);
        let y = dequantize(ty, &q, len, n);
        let (g, steps) = levels(ty);
        let mut worst = 0f32;
        for (xs, ys) in x.chunks(g).zip(y.chunks(g)) {
            let amax = xs.iter().fold(0f32, |m, v| m.max(v.abs()));
            let step = 2.0 * amax / steps;
            for (a, b) in xs.iter().zip(ys) {
                worst = worst.max((a - b).abs() / step);
            }
        }
        println!("{ty}: worst error {worst:.3} steps");
        assert!(
            worst <= 1.0,
            "{ty}: an element is off by {worst} sub-block steps"
        );
    }
}

#[test]
fn all_zero_input_quantises_to_exact_zeros() {
    let x = vec![0f32; 512];
    for ty in WEIGHT_TYPES.into_iter().chain([GgmlType::Q8_K]) {
        let (q, len) = quantize(ty, &x, None);
        let y = dequantize(ty, &q, len, x.len());
        assert!(y.iter().all(|v| *v == 0.0), "{ty}");
    }
}

/// Σ|wᵢ·aᵢ| over dequantised weights and activations, the scale of the f32
/// rounding error of any order of summation.
fn abs_dot(w: &[f32], a: &[f32]) -> f64 {
    w.iter()
        .zip(a)
        .map(|(x, y)| (*x as f64 * *y as f64).abs())
        .sum()
}

#[test]
fn vec_dot_equals_the_dot_of_the_dequantised_rows() {
    // The integer sums are exact; the only difference is f32 rounding of the
    // per-block products and of the running sum (a few ulps of each term), so
    // |err| ≤ 1e-6·Σ|wᵢaᵢ| (≈ 8 ulps) for 9 blocks is a generous bound.
    let mut rng = Rng(42);
    let n = 256 * 9;
    let x: Vec<f32> = (0..n).map(|_| rng.gauss()).collect();
    let a: Vec<f32> = (0..n).map(|_| rng.gauss()).collect();
    let (qa, alen) = quantize(GgmlType::Q8_K, &a, None);
    let ad = dequantize(GgmlType::Q8_K, &qa, alen, n);
    for ty in WEIGHT_TYPES.into_iter().chain([GgmlType::Q8_K]) {
        let (qw, wlen) = quantize(ty, &x, None);
        let wd = dequantize(ty, &qw, wlen, n);
        let want: f64 = wd.iter().zip(&ad).map(|(p, q)| *p as f64 * *q as f64).sum();
        let got = scalar::vec_dot(ty, n, bytes(&qw, wlen), bytes(&qa, alen));
        let tol = 1e-6 * abs_dot(&wd, &ad);
        assert!(
            (got as f64 - want).abs() <= tol,
            "{ty}: vec_dot {got}, dequantised dot {want}, tolerance {tol}"
        );
    }
}

#[test]
fn importance_matrix_lowers_the_weighted_error() {
    let mut rng = Rng(7);
    let n = 256 * 16;
    let x: Vec<f32> = (0..n).map(|_| rng.gauss()).collect();
    // A few columns matter a hundred times more than the rest.
    let w: Vec<f32> = (0..n)
        .map(|i| {
            if i % 11 == 0 || i % 37 == 5 {
                100.0
            } else {
                1.0
            }
        })
        .collect();
    for ty in WEIGHT_TYPES {
        let werr = |imatrix: Option<&[f32]>| -> f64 {
            let (q, len) = quantize(ty, &x, imatrix);
            let y = dequantize(ty, &q, len, n);
            (0..n)
                .map(|i| w[i] as f64 * ((x[i] - y[i]) as f64).powi(2))
                .sum()
        };
        let plain = werr(None);
        let weighted = werr(Some(&w));
        println!("{ty}: weighted error {plain:.4} without imatrix, {weighted:.4} with");
        assert!(
            weighted < plain,
            "{ty}: {weighted} with imatrix ≥ {plain} without"
        );
    }
}

/// Random weight blocks: random bytes everywhere (every level and scale bit
/// pattern), with the f16 super-block scales set to small finite values.
fn random_weights(ty: GgmlType, nblocks: usize, rng: &mut Rng) -> (Vec<u32>, usize) {
    let bs = ty.type_size();
    let f16_fields: &[usize] = match ty {
        GgmlType::Q2_K => &[80, 82],
        GgmlType::Q3_K => &[108],
        GgmlType::Q4_K | GgmlType::Q5_K => &[0, 2],
        GgmlType::Q6_K => &[208],
        GgmlType::IQ4_XS => &[0],
        _ => unreachable!(),
    };
    let len = bs * nblocks;
    let mut b = buf(len);
    let s = bytes_mut(&mut b, len);
    for v in s.iter_mut() {
        *v = rng.next_u32() as u8;
    }
    for blk in s.chunks_exact_mut(bs) {
        for &o in f16_fields {
            let h = half::f16::from_f32(rng.uni() * 0.01);
            blk[o..o + 2].copy_from_slice(&h.to_le_bytes());
        }
    }
    (b, len)
}

const AWKWARD_BLOCKS: [usize; 7] = [1, 2, 3, 7, 9, 17, 33];

fn tiers_under_test() -> Vec<Isa> {
    let avail = Isa::all_available();
    for isa in Isa::ALL {
        if !avail.contains(&isa) {
            eprintln!("*** SKIPPING tier {isa}: not available on this CPU ***");
        }
    }
    avail
}

#[test]
fn every_tier_vec_dot_matches_scalar_at_awkward_lengths() {
    let mut rng = Rng(0xfeed);
    for isa in tiers_under_test() {
        let table = KernelTable::new(isa);
        for ty in WEIGHT_TYPES {
            for nb in AWKWARD_BLOCKS {
                let n = 256 * nb;
                let (w, wlen) = random_weights(ty, nb, &mut rng);
                let a: Vec<f32> = (0..n).map(|_| rng.gauss()).collect();
                let (qa, alen) = quantize(GgmlType::Q8_K, &a, None);
                let want = scalar::vec_dot(ty, n, bytes(&w, wlen), bytes(&qa, alen));
                let got = table.vec_dot(ty)(n, bytes(&w, wlen), bytes(&qa, alen));
                // Relative to Σ|wᵢaᵢ|: relative to the result itself is
                // ill-conditioned when the sum cancels.
                let wd = dequantize(ty, &w, wlen, n);
                let ad = dequantize(GgmlType::Q8_K, &qa, alen, n);
                let tol = 1e-5 * abs_dot(&wd, &ad);
                assert!(
                    ((got - want) as f64).abs() <= tol,
                    "{isa} {ty} at {nb} blocks: {got} vs scalar {want} (tolerance {tol})"
                );
            }
        }
    }
}

/// Checks each named dot of `variants(ty)` against the scalar reference at
/// every awkward length, on random weight blocks and Q8_K activations.
#[allow(dead_code)]
fn check_variants(tier: &str, ty: GgmlType, variants: &[(&str, kernels::isa::VecDotFn)]) {
    assert!(!variants.is_empty(), "{tier} has no {ty} dot");
    let names: Vec<&str> = variants.iter().map(|v| v.0).collect();
    eprintln!("{tier} variants tested for {ty}: {names:?}");
    let mut rng = Rng(0x5eed + ty.id() as u64);
    for nb in AWKWARD_BLOCKS {
        let n = 256 * nb;
        let (w, wlen) = random_weights(ty, nb, &mut rng);
        let a: Vec<f32> = (0..n).map(|_| rng.gauss()).collect();
        let (qa, alen) = quantize(GgmlType::Q8_K, &a, None);
        let want = scalar::vec_dot(ty, n, bytes(&w, wlen), bytes(&qa, alen));
        let wd = dequantize(ty, &w, wlen, n);
        let ad = dequantize(GgmlType::Q8_K, &qa, alen, n);
        let tol = 1e-5 * abs_dot(&wd, &ad);
        for (name, dot) in variants {
            let got = dot(n, bytes(&w, wlen), bytes(&qa, alen));
            assert!(
                ((got - want) as f64).abs() <= tol,
                "{tier}/{name} {ty} at {nb} blocks: {got} vs scalar {want} (tolerance {tol})"
            );
        }
    }
}

/// The AVX-512 Q2_K/Q3_K dots come as BW and VNNI variants; the table picks
/// one by detection, so both are checked here.
#[cfg(target_arch = "x86_64")]
#[test]
fn every_avx512_q2_k_and_q3_k_variant_matches_scalar() {
    use kernels::x86::avx512::lowbit::vec_dot_variants;
    if !Isa::Avx512.available() {
        eprintln!("*** SKIPPING avx512 Q2_K/Q3_K variants: not available on this CPU ***");
        return;
    }
    for ty in [GgmlType::Q2_K, GgmlType::Q3_K] {
        check_variants("avx512", ty, &vec_dot_variants(ty));
    }
}

/// The NEON Q2_K/Q3_K dots come as plain-NEON and `sdot` variants; the table
/// picks one by detection, so both are checked here.
// Mirrors every_avx512_q2_k_and_q3_k_variant_matches_scalar above: each test compiles only
// on its own target and names that target's module; the shared check is check_variants.
#[cfg(target_arch = "aarch64")]
#[test]
fn every_neon_q2_k_and_q3_k_variant_matches_scalar() {
    use kernels::aarch64::neon::lowbit::vec_dot_variants;
    if !Isa::Neon.available() {
        eprintln!("*** SKIPPING neon Q2_K/Q3_K variants: not available on this CPU ***");
        return;
    }
    for ty in [GgmlType::Q2_K, GgmlType::Q3_K] {
        let v = vec_dot_variants(ty);
        if v.len() < 2 {
            eprintln!("*** {ty}: no dotprod on this CPU, sdot variant SKIPPED ***");
        }
        check_variants("neon", ty, &v);
    }
}

#[test]
fn every_tier_q8_k_quantiser_is_bit_exact_with_scalar() {
    let mut rng = Rng(0xbeef);
    for isa in tiers_under_test() {
        let table = KernelTable::new(isa);
        for nb in AWKWARD_BLOCKS {
            let n = 256 * nb;
            let mut x: Vec<f32> = (0..n).map(|i| rng.gauss() * (1 + i % 5) as f32).collect();
            // A zero block, a block whose extreme is negative and repeated with
            // both signs, a block of halves (round-half-even ties).
            x[..256].fill(0.0);
            if nb > 1 {
                x[256 + 3] = -9.0;
                x[256 + 200] = 9.0;
            }
            if nb > 2 {
                for (i, v) in x[512..768].iter_mut().enumerate() {
                    *v = (i as f32 - 127.0) * 0.5;
                }
                x[512] = -127.0;
            }
            let len = row_bytes(GgmlType::Q8_K, n);
            let mut want = buf(len);
            let mut got = buf(len);
            scalar::quantize_row(GgmlType::Q8_K, &x, bytes_mut(&mut want, len), None);
            table.quantize(GgmlType::Q8_K)(&x, bytes_mut(&mut got, len));
            assert!(
                bytes(&got, len) == bytes(&want, len),
                "{isa} Q8_K quantiser differs from scalar at {nb} blocks"
            );
        }
    }
}

/// This thread's CPU time in seconds (Linux `/proc/thread-self/stat`, 10 ms
/// ticks), so that timings on a shared machine count only our own cycles;
/// falls back to wall time elsewhere.
fn cpu_seconds(wall: std::time::Instant) -> f64 {
    std::fs::read_to_string("/proc/thread-self/stat")
        .ok()
        .and_then(|s| {
            let rest = &s[s.rfind(')')? + 2..];
            let f: Vec<&str> = rest.split_whitespace().collect();
            let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
            Some(ticks / 100.0)
        })
        .unwrap_or_else(|| wall.elapsed().as_secs_f64())
}

/// Single-thread read bandwidth (AVX2 loads, or plain u64 sums elsewhere).
fn read_bandwidth_gbs(buf: &[u64]) -> f64 {
    (0..4).map(|_| read_bandwidth_once(buf)).fold(0.0, f64::max)
}

fn read_bandwidth_once(buf: &[u64]) -> f64 {
    let t = std::time::Instant::now();
    let c0 = cpu_seconds(t);
    let mut reps = 0;
    let mut sink = 0u64;
    while cpu_seconds(t) - c0 < 0.2 {
        let mut acc = [0u64; 4];
        for c in buf.chunks_exact(4) {
            for k in 0..4 {
                acc[k] = acc[k].wrapping_add(c[k]);
            }
        }
        sink = sink.wrapping_add(acc.iter().fold(0, |a, b| a ^ b));
        reps += 1;
    }
    std::hint::black_box(sink);
    (buf.len() * 8 * reps) as f64 / (cpu_seconds(t) - c0) / 1e9
}

#[test]
#[ignore = "timing: run with --ignored --nocapture on a quiet machine"]
fn matvec_bandwidth_per_tier() {
    let n = 4096;
    let bytes_target = 96 << 20; // well past the last-level cache
    let mut rng = Rng(3);
    let stream: Vec<u64> = (0..bytes_target / 8).map(|i| i as u64).collect();
    println!(
        "read bandwidth (1 thread): {:.1} GB/s",
        read_bandwidth_gbs(&stream)
    );
    drop(stream);
    let a: Vec<f32> = (0..n).map(|_| rng.gauss()).collect();
    let (qa, alen) = quantize(GgmlType::Q8_K, &a, None);
    for ty in [
        GgmlType::Q4_K,
        GgmlType::IQ4_XS,
        GgmlType::Q6_K,
        GgmlType::Q5_K,
        GgmlType::Q3_K,
        GgmlType::Q2_K,
    ] {
        let rb = row_bytes(ty, n);
        // From DRAM (96 MiB) and from L2 (256 KiB): the second is the kernel's
        // compute ceiling, which must sit well above the first.
        for (label, total) in [("DRAM", bytes_target), ("L2", 256 << 10)] {
            let rows = total / rb;
            let (w, wlen) = random_weights(ty, rows * n / 256, &mut rng);
            let wb = bytes(&w, wlen);
            for isa in Isa::all_available() {
                if isa == Isa::Scalar {
                    continue;
                }
                let f = KernelTable::new(isa).vec_dot(ty);
                // Best of four 0.2 s trials (the machine may be shared).
                let mut gbs = 0f64;
                for _ in 0..4 {
                    let t = std::time::Instant::now();
                    let c0 = cpu_seconds(t);
                    let mut reps = 0;
                    let mut s = 0f32;
                    // Re-read the clock only every ~8 MiB of weights.
                    let inner = (8 << 20) / wlen + 1;
                    while cpu_seconds(t) - c0 < 0.2 {
                        for _ in 0..inner {
                            for r in 0..rows {
                                s += f(n, &wb[r * rb..(r + 1) * rb], bytes(&qa, alen));
                            }
                        }
                        reps += inner;
                    }
                    std::hint::black_box(s);
                    gbs = gbs.max((wlen * reps) as f64 / (cpu_seconds(t) - c0) / 1e9);
                }
                println!("{ty} {isa} ({label}): {gbs:.1} GB/s of weights");
            }
        }
    }
}
