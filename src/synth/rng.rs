//! The random number generator of the synthetic weights: SplitMix64, with
//! one generator per chunk of a tensor (`Rng::for_chunk`) so that the bytes
//! do not depend on the order in which chunks are generated. Both fills
//! (`weights.rs`, `direct.rs`) draw from it.

/// SplitMix64: small, fast, and good enough for weights.
#[derive(Clone, Debug)]
pub struct Rng {
    state: u64,
    /// The second normal of the last Box–Muller pair.
    spare: Option<f64>,
}

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng {
            state: seed,
            spare: None,
        }
    }

    /// A generator for chunk `chunk` of tensor `tensor` under `seed`.
    pub fn for_chunk(seed: u64, tensor: usize, chunk: usize) -> Rng {
        let mut r = Rng::new(seed ^ 0x243F_6A88_85A3_08D3);
        let a = r.next_u64() ^ (tensor as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let mut r = Rng::new(a);
        let b = r.next_u64() ^ (chunk as u64).wrapping_mul(0xD1B5_4A32_D192_ED03);
        let mut r = Rng::new(b);
        r.next_u64();
        r
    }

    pub fn next_u64(&mut self) -> u64 {
        crate::sample::splitmix64(&mut self.state)
    }

    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in [lo, hi).
    pub fn range(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.uniform()
    }

    /// Standard normal (Box–Muller; each pair of uniforms gives two values).
    pub fn normal(&mut self) -> f64 {
        if let Some(z) = self.spare.take() {
            return z;
        }
        let u1 = 1.0 - self.uniform(); // (0, 1]
        let u2 = self.uniform();
        let r = (-2.0 * u1.ln()).sqrt();
        let (sin, cos) = (std::f64::consts::TAU * u2).sin_cos();
        self.spare = Some(r * sin);
        r * cos
    }
}
