//! Small f32 ops, evaluated in the same order as ggml's CPU backend.
//!
//! - rmsnorm: `y = x · (1/√(mean(x²) + eps)) · w`, Σx² in f64 (norm weights
//!   already include the +1 of the zero-centred form: multiply only).
//! - l2norm (the GDN form): `x / √(Σx² + eps)`, computed as ggml does:
//!   `rms_norm(x, eps/n) · (1/√n)`.
//! - silu `x/(1+e^−x)`, sigmoid `1/(1+e^−x)`, softplus `x > 20 ? x : ln(1+eˣ)`.
//! - softmax: `e^(x−max) / Σ`, Σ in f64, multiplied by `1/Σ`.
//! - rope (NeoX, partial): for pair i < n_rot/2, `θ_i = p · base^(−2i/n_rot)`
//!   with the angle built in f32 as ggml does (`θ ← θ · base^(−2/n_rot)` per
//!   pair), rotating `(x_i, x_{i+n_rot/2})`; dims ≥ n_rot are untouched.

/// `out = rmsnorm(x) ⊙ w`.
pub fn rmsnorm(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let scale = rms_scale(x, eps);
    for ((o, &xi), &wi) in out.iter_mut().zip(x).zip(w) {
        *o = xi * scale * wi;
    }
}

/// In place `x = rmsnorm(x) ⊙ w`.
pub fn rmsnorm_inplace(x: &mut [f32], w: &[f32], eps: f32) {
    let scale = rms_scale(x, eps);
    for (xi, &wi) in x.iter_mut().zip(w) {
        *xi = *xi * scale * wi;
    }
}

fn rms_scale(x: &[f32], eps: f32) -> f32 {
    let sum: f64 = x.iter().map(|&v| (v * v) as f64).sum();
    let mean = (sum / x.len() as f64) as f32;
    1.0 / (mean + eps).sqrt()
}

/// In place L2 normalisation, llama.cpp's GDN form (see the module doc).
pub fn l2norm_inplace(x: &mut [f32], eps: f32) {
    let n = x.len() as f32;
    let scale = rms_scale(x, eps / n);
    let post = 1.0 / n.sqrt();
    for v in x.iter_mut() {
        *v = (*v * scale) * post;
    }
}

#[inline]
pub fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

#[inline]
pub fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

#[inline]
pub fn softplus(x: f32) -> f32 {
    if x > 20.0 {
        x
    } else {
        (1.0 + x.exp()).ln()
    }
}

/// In place softmax.
pub fn softmax_inplace(x: &mut [f32]) {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0.0f64;
    for v in x.iter_mut() {
        *v = (*v - max).exp();
        sum += *v as f64;
    }
    let inv = (1.0 / sum) as f32;
    for v in x.iter_mut() {
        *v *= inv;
    }
}

/// cos/sin of every rotated pair at one position.
#[derive(Clone, Debug)]
pub struct RopeCache {
    pub cos: Vec<f32>,
    pub sin: Vec<f32>,
    theta_scale: f32,
}

impl RopeCache {
    pub fn new(n_rot: usize, base: f32) -> RopeCache {
        RopeCache {
            cos: vec![0.0; n_rot / 2],
            sin: vec![0.0; n_rot / 2],
            theta_scale: base.powf(-2.0 / n_rot as f32),
        }
    }

    /// Fills the table for position `p`.
    pub fn set_position(&mut self, p: usize) {
        let mut theta = p as f32;
        for (c, s) in self.cos.iter_mut().zip(self.sin.iter_mut()) {
            *c = theta.cos();
            *s = theta.sin();
            theta *= self.theta_scale;
        }
    }

    /// Rotates one head in place.
    pub fn apply(&self, x: &mut [f32]) {
        let half = self.cos.len();
        let (lo, hi) = x.split_at_mut(half);
        for i in 0..half {
            let (x0, x1) = (lo[i], hi[i]);
            lo[i] = x0 * self.cos[i] - x1 * self.sin[i];
            hi[i] = x0 * self.sin[i] + x1 * self.cos[i];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f32, b: f32, tol: f32) -> bool {
        (a - b).abs() <= tol * (1.0 + b.abs())
    }

    #[test]
    fn rmsnorm_matches_the_textbook_formula() {
        let x = [0.5f32, -1.25, 3.0, 0.0, 2.0];
        let w = [1.0f32, 2.0, 0.5, 3.0, -1.0];
        let eps = 1e-6;
        let mut out = [0.0; 5];
        rmsnorm(&x, &w, eps, &mut out);
        let ms = x.iter().map(|v| (*v as f64).powi(2)).sum::<f64>() / 5.0;
        for i in 0..5 {
            let want = x[i] as f64 / (ms + eps as f64).sqrt() * w[i] as f64;
            assert!(close(out[i], want as f32, 1e-6), "{i}");
        }
    }

    #[test]
    fn l2norm_matches_x_over_root_sum_of_squares_plus_eps() {
        let mut x = [3.0f32, 4.0, 0.0, -12.0];
        let eps = 1e-6;
        let norm = (9.0f64 + 16.0 + 144.0 + eps as f64).sqrt();
        let want: Vec<f32> = [3.0, 4.0, 0.0, -12.0]
            .iter()
            .map(|v| (v / norm) as f32)
            .collect();
        l2norm_inplace(&mut x, eps);
        for i in 0..4 {
            assert!(close(x[i], want[i], 1e-6), "{i}");
        }
        // eps dominates a zero vector instead of dividing by zero.
        let mut z = [0.0f32; 4];
        l2norm_inplace(&mut z, eps);
        assert_eq!(z, [0.0; 4]);
    }

    #[test]
    fn pointwise_functions_match_their_definitions() {
        for x in [-30.0f32, -3.0, -0.5, 0.0, 0.7, 5.0, 19.9, 20.5, 40.0] {
            let xd = x as f64;
            let sig = 1.0 / (1.0 + (-xd).exp());
            assert!(close(sigmoid(x), sig as f32, 1e-6));
            assert!(close(silu(x), (xd * sig) as f32, 1e-6));
            let sp = if x > 20.0 { xd } else { (1.0 + xd.exp()).ln() };
            assert!(close(softplus(x), sp as f32, 1e-6));
        }
        assert_eq!(softplus(20.5), 20.5);
    }

    #[test]
    fn softmax_sums_to_one_and_matches_exp_ratio() {
        let mut x = [1.0f32, 2.0, -1.0, 1000.0, 999.0];
        softmax_inplace(&mut x);
        let d = 1.0 + (-1.0f64).exp() + (-999.0f64).exp() * 3.0;
        assert!(close(x[3], (1.0 / d) as f32, 1e-6));
        assert!(close(x[4], ((-1.0f64).exp() / d) as f32, 1e-6));
        assert!(x[0] < 1e-30);
        assert!(close(x.iter().sum::<f32>(), 1.0, 1e-6));
    }

    #[test]
    fn rope_rotates_neox_pairs_by_explicit_angles_and_leaves_the_tail() {
        let (n_rot, base, head) = (8usize, 10000.0f32, 12usize);
        let mut rc = RopeCache::new(n_rot, base);
        let p = 7;
        rc.set_position(p);
        let x: Vec<f32> = (0..head).map(|i| (i as f32 * 0.37).sin() + 0.1).collect();
        let mut y = x.clone();
        rc.apply(&mut y[..n_rot]);
        for i in 0..n_rot / 2 {
            let th = p as f64 * (base as f64).powf(-2.0 * i as f64 / n_rot as f64);
            let (c, s) = (th.cos(), th.sin());
            let (a, b) = (x[i] as f64, x[i + n_rot / 2] as f64);
            assert!(close(y[i], (a * c - b * s) as f32, 1e-5), "pair {i}");
            assert!(
                close(y[i + n_rot / 2], (a * s + b * c) as f32, 1e-5),
                "pair {i}"
            );
        }
        assert_eq!(&y[n_rot..], &x[n_rot..]);
        // Position 0 is the identity.
        rc.set_position(0);
        let mut z = x.clone();
        rc.apply(&mut z[..n_rot]);
        assert_eq!(z, x);
    }
}
