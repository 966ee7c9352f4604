//! Scale searches shared by the 32-element block types, written from ggml's
//! `ggml-quants.c` (`nearest_int`, `best_index_int8`, `make_qx_quants`,
//! `make_qkx3_quants`). The order of f32 operations follows ggml's so that an
//! importance-weighted quantisation picks the same scales ggml's would.

// ggml's `GROUP_MAX_EPS` and `nearest_int` (round half to even by the
// 1.5·2²³ trick) are the K-quants' own; one definition serves both families.
use super::kquant_search::{self, make_qkx_quants, AffineSearch};
pub use super::kquant_search::{nearest_int, GROUP_MAX_EPS};

/// C's `roundf`: round half away from zero.
#[inline]
pub fn round_away(x: f32) -> f32 {
    x.round()
}

/// Index of the entry of the sorted table `val` nearest to `x` (the upper one
/// on a tie), as ggml's `best_index_int8`.
pub fn best_index_int8(val: &[i8], x: f32) -> usize {
    let n = val.len();
    if x <= val[0] as f32 {
        return 0;
    }
    if x >= val[n - 1] as f32 {
        return n - 1;
    }
    let (mut ml, mut mu) = (0usize, n - 1);
    while mu - ml > 1 {
        let mav = (ml + mu) / 2;
        if x < val[mav] as f32 {
            mu = mav;
        } else {
            ml = mav;
        }
    }
    if x - (val[mu - 1] as f32) < (val[mu] as f32) - x {
        mu - 1
    } else {
        mu
    }
}

/// ggml's per-row variance term for importance weighting: Σx² / n.
pub fn row_sigma2(x: &[f32]) -> f32 {
    let mut s = 0f32;
    for v in x {
        s += v * v;
    }
    s / x.len() as f32
}

/// Weights `qw[j]·sqrt(sigma2 + x[j]²)`, as the `quantize_row_*_impl` functions.
pub fn importance_weights(x: &[f32], qw: &[f32], sigma2: f32, out: &mut [f32]) {
    for ((o, &xv), &q) in out.iter_mut().zip(x).zip(qw) {
        *o = q * (sigma2 + xv * xv).sqrt();
    }
}

/// Symmetric search (`make_qx_quants` with `rmse_type = 1` and weights):
/// levels `l ∈ [-nmax, nmax-1]` stored as `l + nmax` in `out`; returns the scale.
/// The K-quants' [`kquant_search::make_qx_quants`] with weights `qw`.
pub fn make_qx_quants(nmax: i32, x: &[f32], out: &mut [u8], qw: &[f32]) -> f32 {
    let mut l = [0i8; 32];
    let l = &mut l[..x.len()];
    let scale = kquant_search::make_qx_quants(x, nmax, l, Some(qw));
    for (o, &v) in out.iter_mut().zip(l.iter()) {
        *o = v as u8;
    }
    scale
}

/// Asymmetric search (`make_qkx3_quants` with `rmin = -0.9`, `rdelta = 0.05`,
/// 36 steps, squared error): levels in `[0, nmax]` in `out`; returns
/// `(scale, min)` with `x ≈ scale·l + min` and `min ≤ 0`. The K-quants'
/// [`make_qkx_quants`] with these weights, its min negated.
pub fn make_qkx3_quants(nmax: i32, x: &[f32], weights: &[f32], out: &mut [u8]) -> (f32, f32) {
    const SEARCH: AffineSearch = AffineSearch {
        rmin: -0.9,
        rdelta: 0.05,
        nstep: 36,
        use_mad: false,
    };
    let (scale, the_min) = make_qkx_quants(x, nmax, Some(weights), out, &SEARCH, true);
    (scale, -the_min)
}

/// The importance-weighted arm of the 32-element quantisers
/// (`quantize_row_*_impl`): σ² of the whole row, then per block its weights
/// `qw·sqrt(σ² + x²)` and `f(block, x, weights, levels)`, which searches and
/// packs.
pub fn weighted_blocks<B>(
    blocks: &mut [B],
    src: &[f32],
    qw: &[f32],
    mut f: impl FnMut(&mut B, &[f32], &[f32; 32], &mut [u8; 32]),
) {
    let sigma2 = row_sigma2(src);
    let mut weight = [0f32; 32];
    let mut l = [0u8; 32];
    for ((b, x), w) in blocks
        .iter_mut()
        .zip(src.chunks_exact(32))
        .zip(qw.chunks_exact(32))
    {
        importance_weights(x, w, sigma2, &mut weight);
        f(b, x, &weight, &mut l);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_int_rounds_ties_to_even() {
        assert_eq!(nearest_int(0.5), 0);
        assert_eq!(nearest_int(1.5), 2);
        assert_eq!(nearest_int(-2.5), -2);
        assert_eq!(nearest_int(-2.6), -3);
    }

    #[test]
    fn best_index_int8_takes_the_upper_entry_on_a_tie() {
        let v: [i8; 4] = [-10, 0, 10, 20];
        assert_eq!(best_index_int8(&v, -100.0), 0);
        assert_eq!(best_index_int8(&v, 4.9), 1);
        assert_eq!(best_index_int8(&v, 5.0), 2);
        assert_eq!(best_index_int8(&v, 99.0), 3);
    }
}
