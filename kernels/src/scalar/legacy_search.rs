//! Scale searches shared by the 32-element block types, written from ggml's
//! `ggml-quants.c` (`nearest_int`, `best_index_int8`, `make_qx_quants`,
//! `make_qkx3_quants`). The order of f32 operations follows ggml's so that an
//! importance-weighted quantisation picks the same scales ggml's would.

// ggml's `GROUP_MAX_EPS` and `nearest_int` (round half to even by the
// 1.5·2²³ trick) are the K-quants' own; one definition serves both families.
use super::kquant_search::signed_absmax;
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
pub fn make_qx_quants(nmax: i32, x: &[f32], out: &mut [u8], qw: &[f32]) -> f32 {
    let (max, amax) = signed_absmax(x);
    if amax < GROUP_MAX_EPS {
        out.fill(0);
        return 0.0;
    }
    let level = |iscale: f32, v: f32| nearest_int(iscale * v).clamp(-nmax, nmax - 1);
    let sums = |iscale: f32| {
        let (mut sumlx, mut suml2) = (0f32, 0f32);
        for (&v, &w) in x.iter().zip(qw) {
            let l = level(iscale, v) as f32;
            sumlx += w * v * l;
            suml2 += w * l * l;
        }
        (sumlx, suml2)
    };
    let mut iscale = -(nmax as f32) / max;
    for (o, &v) in out.iter_mut().zip(x) {
        *o = (level(iscale, v) + nmax) as u8;
    }
    let (sumlx, suml2) = sums(iscale);
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for is in -9..=9 {
        if is == 0 {
            continue;
        }
        iscale = -(nmax as f32 + 0.1 * is as f32) / max;
        let (sumlx, suml2) = sums(iscale);
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            for (o, &v) in out.iter_mut().zip(x) {
                *o = (level(iscale, v) + nmax) as u8;
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// Asymmetric search (`make_qkx3_quants` with `rmin = -0.9`, `rdelta = 0.05`,
/// 36 steps, squared error): levels in `[0, nmax]` in `out`; returns
/// `(scale, min)` with `x ≈ scale·l + min` and `min ≤ 0`.
pub fn make_qkx3_quants(nmax: i32, x: &[f32], weights: &[f32], out: &mut [u8]) -> (f32, f32) {
    const RMIN: f32 = -0.9;
    const RDELTA: f32 = 0.05;
    const NSTEP: i32 = 36;
    let n = x.len();
    let mut min = x[0];
    let mut max = x[0];
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..n {
        min = min.min(x[i]);
        max = max.max(x[i]);
        let w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max <= min {
        out.fill(0);
        return (0.0, min);
    }
    let mut iscale = nmax as f32 / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_mad = 0f32;
    for i in 0..n {
        let l = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
        out[i] = l as u8;
        let diff = scale * l as f32 + min - x[i];
        best_mad += weights[i] * (diff * diff);
    }
    let mut aux = [0u8; 32];
    let aux = &mut aux[..n];
    for is in 0..=NSTEP {
        iscale = (RMIN + RDELTA * is as f32 + nmax as f32) / (max - min);
        // The same refit as kquant_search.rs::make_qkx_quants, kept apart as
        // ggml keeps make_qkx3_quants: this search's min/max scan uses
        // f32::min/max, which treats a NaN element unlike that one's `<`.
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0f32, 0f32, 0f32);
        for i in 0..n {
            let l = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
            aux[i] = l as u8;
            let w = weights[i];
            let lf = l as f32;
            sum_l += w * lf;
            sum_l2 += w * lf * lf;
            sum_xl += w * lf * x[i];
        }
        let det = sum_w * sum_l2 - sum_l * sum_l;
        if det > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut mad = 0f32;
            for i in 0..n {
                let diff = this_scale * aux[i] as f32 + this_min - x[i];
                mad += weights[i] * (diff * diff);
            }
            if mad < best_mad {
                out.copy_from_slice(aux);
                best_mad = mad;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, min)
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
