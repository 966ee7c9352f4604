//! Scale searches shared by the 256-element K-quant formats.
//!
//! These mirror ggml's `make_qx_quants`, `make_q3_quants`, `make_qkx2_quants`,
//! `make_qkx3_quants` and `make_qp_quants` operation for operation (same
//! constants, same f32 expression order, no fused multiply-adds), so that our
//! quantised bytes equal ggml's. Each function documents what it searches.

// Index loops mirror ggml's reference line by line (the order of f32 operations is the spec).
#![allow(clippy::needless_range_loop)]

/// ggml's `nearest_int`: round half to even through the 1.5·2²³ trick. Valid for
/// |v| ≤ 4194303, which every caller guarantees (quantised levels are small).
#[inline]
pub fn nearest_int(v: f32) -> i32 {
    let biased = v + 12_582_912.0;
    (biased.to_bits() & 0x007f_ffff) as i32 - 0x0040_0000
}

/// Below this the group is treated as all zero.
pub const GROUP_MAX_EPS: f32 = 1e-15;

/// The element of largest magnitude (the first of equal ones) and that
/// magnitude, as ggml's quantisers scan for it.
#[inline]
pub fn signed_absmax(x: &[f32]) -> (f32, f32) {
    let mut max = 0f32;
    let mut amax = 0f32;
    for &v in x {
        let ax = v.abs();
        if ax > amax {
            amax = ax;
            max = v;
        }
    }
    (max, amax)
}

/// Symmetric levels `L[i] - nmax ∈ [-nmax, nmax-1]` and a scale minimising the
/// weighted squared error; weights are `qw` or, without it, `x²`
/// (`rmse_type == 1` in ggml, the only form the K-quants use). Tries 18 scales
/// around `nmax / max` and refits the scale in closed form for each.
pub fn make_qx_quants(x: &[f32], nmax: i32, l_out: &mut [i8], qw: Option<&[f32]>) -> f32 {
    let n = x.len();
    let (max, amax) = signed_absmax(x);
    if amax < GROUP_MAX_EPS {
        l_out[..n].fill(0);
        return 0.0;
    }
    let weight = |i: usize| match qw {
        Some(w) => w[i],
        None => x[i] * x[i],
    };
    let mut iscale = -(nmax as f32) / max;
    let mut sumlx = 0f32;
    let mut suml2 = 0f32;
    for i in 0..n {
        let l = nearest_int(iscale * x[i]).clamp(-nmax, nmax - 1);
        l_out[i] = (l + nmax) as i8;
        let w = weight(i);
        sumlx += w * x[i] * l as f32;
        suml2 += w * l as f32 * l as f32;
    }
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for is in -9..=9 {
        if is == 0 {
            continue;
        }
        iscale = -(nmax as f32 + 0.1 * is as f32) / max;
        sumlx = 0.0;
        suml2 = 0.0;
        for i in 0..n {
            let l = nearest_int(iscale * x[i]).clamp(-nmax, nmax - 1);
            let w = weight(i);
            sumlx += w * x[i] * l as f32;
            suml2 += w * l as f32 * l as f32;
        }
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            for i in 0..n {
                let l = nearest_int(iscale * x[i]);
                l_out[i] = (nmax + l.clamp(-nmax, nmax - 1)) as i8;
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// Q3_K's reference search: symmetric levels weighted by `x²`, then up to five
/// passes of per-element coordinate descent on the levels.
pub fn make_q3_quants(x: &[f32], nmax: i32, l_out: &mut [i8]) -> f32 {
    let n = x.len();
    let (max, amax) = signed_absmax(x);
    if amax < GROUP_MAX_EPS {
        l_out[..n].fill(0);
        return 0.0;
    }
    let iscale = -(nmax as f32) / max;
    let mut sumlx = 0f32;
    let mut suml2 = 0f32;
    for i in 0..n {
        let l = nearest_int(iscale * x[i]).clamp(-nmax, nmax - 1);
        l_out[i] = l as i8;
        let w = x[i] * x[i];
        sumlx += w * x[i] * l as f32;
        suml2 += w * l as f32 * l as f32;
    }
    for _ in 0..5 {
        let mut n_changed = 0;
        for i in 0..n {
            let w = x[i] * x[i];
            let li = l_out[i] as f32;
            let mut slx = sumlx - w * x[i] * li;
            if slx > 0.0 {
                let mut sl2 = suml2 - w * li * li;
                let new_l = nearest_int(x[i] * sl2 / slx).clamp(-nmax, nmax - 1);
                if new_l != l_out[i] as i32 {
                    slx += w * x[i] * new_l as f32;
                    sl2 += w * new_l as f32 * new_l as f32;
                    if sl2 > 0.0 && slx * slx * suml2 > sumlx * sumlx * sl2 {
                        l_out[i] = new_l as i8;
                        sumlx = slx;
                        suml2 = sl2;
                        n_changed += 1;
                    }
                }
            }
        }
        if n_changed == 0 {
            break;
        }
    }
    for l in l_out[..n].iter_mut() {
        *l += nmax as i8;
    }
    if suml2 > 0.0 {
        sumlx / suml2
    } else {
        0.0
    }
}

/// Which weights and error measure an asymmetric (scale + min) search uses.
pub struct AffineSearch {
    pub rmin: f32,
    pub rdelta: f32,
    pub nstep: i32,
    /// Absolute error instead of squared.
    pub use_mad: bool,
}

/// Asymmetric levels `L[i] ∈ [0, nmax]` with `x ≈ scale·L − the_min`, searched
/// over `nstep + 1` candidate inverse scales `(rmin + rdelta·is + nmax)/(max − min)`,
/// each refitted by weighted least squares. Returns `(scale, the_min)`.
///
/// `weights: Some` is ggml's `make_qkx2_quants` (and `make_qkx3_quants` with
/// weights); `None` is `make_qkx3_quants` with its default `x²` weights.
pub fn make_qkx_quants(
    x: &[f32],
    nmax: i32,
    weights: Option<&[f32]>,
    l_out: &mut [u8],
    p: &AffineSearch,
    max_le_min_is_flat: bool,
) -> (f32, f32) {
    let n = x.len();
    let weight = |i: usize| match weights {
        Some(w) => w[i],
        None => x[i] * x[i],
    };
    let mut min = x[0];
    let mut max = x[0];
    let mut sum_w = weight(0);
    let mut sum_x = sum_w * x[0];
    for i in 1..n {
        if x[i] < min {
            min = x[i];
        }
        if x[i] > max {
            max = x[i];
        }
        let w = weight(i);
        sum_w += w;
        sum_x += w * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    // qkx2 tests `max == min`, qkx3 `max <= min`; they differ only for NaN input.
    let flat = if max_le_min_is_flat {
        max <= min
    } else {
        max == min
    };
    if flat {
        l_out[..n].fill(0);
        return (0.0, -min);
    }
    let err = |d: f32| if p.use_mad { d.abs() } else { d * d };
    let mut iscale = nmax as f32 / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_error = 0f32;
    for i in 0..n {
        let l = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
        l_out[i] = l as u8;
        let diff = scale * l_out[i] as f32 + min - x[i];
        best_error += weight(i) * err(diff);
    }
    if p.nstep < 1 {
        return (scale, -min);
    }
    let mut laux = [0u8; 32];
    for is in 0..=p.nstep {
        iscale = (p.rmin + p.rdelta * is as f32 + nmax as f32) / (max - min);
        let mut sum_l = 0f32;
        let mut sum_l2 = 0f32;
        let mut sum_xl = 0f32;
        for i in 0..n {
            let l = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
            laux[i] = l as u8;
            let w = weight(i);
            let lf = l as f32;
            sum_l += w * lf;
            sum_l2 += w * lf * lf;
            sum_xl += w * lf * x[i];
        }
        let d = sum_w * sum_l2 - sum_l * sum_l;
        if d > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / d;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / d;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut cur_error = 0f32;
            for i in 0..n {
                let diff = this_scale * laux[i] as f32 + this_min - x[i];
                cur_error += weight(i) * err(diff);
            }
            if cur_error < best_error {
                l_out[..n].copy_from_slice(&laux[..n]);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

/// Non-negative levels `L[i] ∈ [0, nmax]` for a set of (non-negative) sub-block
/// scales or mins, weighted by `qw`: ggml's `make_qp_quants`, used to quantise
/// the per-sub-block scales themselves in the importance-weighted paths.
pub fn make_qp_quants(x: &[f32], nmax: i32, l_out: &mut [u8], qw: &[f32]) -> f32 {
    let n = x.len();
    let mut max = 0f32;
    for &v in x {
        max = if max > v { max } else { v };
    }
    if max < GROUP_MAX_EPS {
        l_out[..n].fill(0);
        return 0.0;
    }
    let mut iscale = nmax as f32 / max;
    for i in 0..n {
        l_out[i] = nearest_int(iscale * x[i]) as u8;
    }
    let scale = 1.0 / iscale;
    let mut best_mse = 0f32;
    for i in 0..n {
        let diff = x[i] - scale * l_out[i] as f32;
        best_mse += qw[i] * diff * diff;
    }
    for is in -4..=4 {
        if is == 0 {
            continue;
        }
        let iscale_is = (0.1 * is as f32 + nmax as f32) / max;
        let scale_is = 1.0 / iscale_is;
        let mut mse = 0f32;
        for i in 0..n {
            let l = nearest_int(iscale_is * x[i]).min(nmax);
            let diff = x[i] - scale_is * l as f32;
            mse += qw[i] * diff * diff;
        }
        if mse < best_mse {
            best_mse = mse;
            iscale = iscale_is;
        }
    }
    let mut sumlx = 0f32;
    let mut suml2 = 0f32;
    for i in 0..n {
        let l = nearest_int(iscale * x[i]).min(nmax);
        l_out[i] = l as u8;
        let w = qw[i];
        sumlx += w * x[i] * l as f32;
        suml2 += w * l as f32 * l as f32;
    }
    // The five passes of coordinate descent as in make_q3_quants above, kept apart as ggml keeps
    // them: u8 levels in [0, nmax] weighted by qw here, i8 levels in [-nmax, nmax-1] weighted by x²
    // there, and sl2 > 0 is tested before the new level here, after it there.
    for _ in 0..5 {
        let mut n_changed = 0;
        for i in 0..n {
            let w = qw[i];
            let li = l_out[i] as f32;
            let mut slx = sumlx - w * x[i] * li;
            let mut sl2 = suml2 - w * li * li;
            if slx > 0.0 && sl2 > 0.0 {
                let new_l = nearest_int(x[i] * sl2 / slx).min(nmax);
                if new_l != l_out[i] as i32 {
                    slx += w * x[i] * new_l as f32;
                    sl2 += w * new_l as f32 * new_l as f32;
                    if slx * slx * suml2 > sumlx * sumlx * sl2 {
                        l_out[i] = new_l as u8;
                        sumlx = slx;
                        suml2 = sl2;
                        n_changed += 1;
                    }
                }
            }
        }
        if n_changed == 0 {
            break;
        }
    }
    if suml2 > 0.0 {
        sumlx / suml2
    } else {
        0.0
    }
}

/// Unpacks the 6-bit scale and min of sub-block `j` (0..8) from the 12-byte
/// `scales` field shared by Q4_K and Q5_K.
#[inline]
pub fn get_scale_min_k4(j: usize, q: &[u8; 12]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// Packs eight 6-bit scales and mins into Q4_K/Q5_K's 12-byte field
/// (the inverse of [`get_scale_min_k4`]).
pub fn pack_scale_min_k4(ls: &[u8; 8], lm: &[u8; 8]) -> [u8; 12] {
    let mut s = [0u8; 12];
    for j in 0..8 {
        if j < 4 {
            s[j] = ls[j];
            s[j + 4] = lm[j];
        } else {
            s[j + 4] = (ls[j] & 0xF) | ((lm[j] & 0xF) << 4);
            s[j - 4] |= (ls[j] >> 4) << 6;
            s[j] |= (lm[j] >> 4) << 6;
        }
    }
    s
}

/// Unpacks Q4_K/Q5_K's 12-byte field into eight scales and eight mins.
#[inline]
pub fn unpack_scale_min_k4(q: &[u8; 12]) -> ([u8; 8], [u8; 8]) {
    let mut sc = [0u8; 8];
    let mut m = [0u8; 8];
    for j in 0..8 {
        (sc[j], m[j]) = get_scale_min_k4(j, q);
    }
    (sc, m)
}

/// Packs 256 2-bit levels the way Q2_K and Q3_K store them: byte `l` of each
/// 32-byte group holds elements `l`, `l+32`, `l+64`, `l+96` of its 128.
pub fn pack_2bit(l: &[u8; 256], qs: &mut [u8; 64]) {
    for j in (0..256).step_by(128) {
        for i in 0..32 {
            qs[j / 4 + i] =
                l[j + i] | (l[j + i + 32] << 2) | (l[j + i + 64] << 4) | (l[j + i + 96] << 6);
        }
    }
}
