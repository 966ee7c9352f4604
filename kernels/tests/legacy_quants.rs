//! The 32-element block types against bounds derived from their formats:
//! round-trip error, dot product against dequantise-then-dot, and the
//! importance-weighted search against the plain one.

mod common;

use common::{dequantize, f16_at, quantize, test_row, Buf, Rng};
use kernels::{scalar, GgmlType};

const N: usize = 32 * 24;

/// Largest |x − x̂| per block must stay under `bound(block bytes, block input,
/// element)`.
fn check_round_trip(ty: GgmlType, bound: impl Fn(&[u8], &[f32], f32) -> f32) {
    let mut rng = Rng::new(7);
    let x = test_row(&mut rng, N);
    let q = quantize(ty, &x, None);
    let y = dequantize(ty, &q, N);
    for (b, (xb, yb)) in x.chunks(32).zip(y.chunks(32)).enumerate() {
        let bytes = &q.bytes()[b * ty.type_size()..(b + 1) * ty.type_size()];
        for (j, (&xv, &yv)) in xb.iter().zip(yb).enumerate() {
            let limit = bound(bytes, xb, xv);
            assert!(
                (xv - yv).abs() <= limit,
                "{ty} block {b} element {j}: {xv} → {yv}, error {} > bound {limit}",
                (xv - yv).abs()
            );
        }
    }
}

fn amax(x: &[f32]) -> f32 {
    x.iter().fold(0f32, |m, v| m.max(v.abs()))
}

/// Slack for the f32 roundings of x·(1/d) and of the dequantised product.
fn slack(x: &[f32]) -> f32 {
    amax(x) * 4.0 * f32::EPSILON
}

#[test]
fn q8_0_round_trip_error_is_at_most_half_a_step() {
    // Levels round(x/d) with d = amax/127: |x − q·d| ≤ d/2; storing d as f16
    // adds |q|·|d − d16| ≤ 127·|d − d16|.
    check_round_trip(GgmlType::Q8_0, |b, xb, _| {
        let d = amax(xb) / 127.0;
        d / 2.0 + 127.0 * (d - f16_at(b, 0)).abs() + slack(xb)
    });
}

#[test]
fn q8_1_round_trip_error_is_at_most_half_a_step() {
    check_round_trip(GgmlType::Q8_1, |b, xb, _| {
        let d = amax(xb) / 127.0;
        d / 2.0 + 127.0 * (d - f16_at(b, 0)).abs() + slack(xb)
    });
}

/// Symmetric 2^k-level types: `d = max/−half`, level = round-half-up of x/d
/// clamped at half − 1; the element at +half (the opposite sign of `max` at
/// full magnitude, or within half a step of it) loses up to one step.
fn symmetric_bound(half: f32) -> impl Fn(&[u8], &[f32], f32) -> f32 {
    move |b, xb, x| {
        let mut max = 0f32;
        for &v in xb {
            if v.abs() > max.abs() {
                max = v;
            }
        }
        let d = max / -half;
        let d16 = f16_at(b, 0);
        let steps = if d != 0.0 && x / d > half - 0.5 {
            1.0
        } else {
            0.5
        };
        steps * d.abs() + half * (d - d16).abs() + slack(xb)
    }
}

#[test]
fn q4_0_round_trip_error_is_at_most_half_a_step_except_at_the_clamp() {
    check_round_trip(GgmlType::Q4_0, symmetric_bound(8.0));
}

#[test]
fn q5_0_round_trip_error_is_at_most_half_a_step_except_at_the_clamp() {
    check_round_trip(GgmlType::Q5_0, symmetric_bound(16.0));
}

/// Min/max types: `d = (max − min)/nmax`, levels round((x − min)/d) ∈ [0, nmax];
/// f16 storage of d and m adds nmax·|d − d16| + |min − m16|.
fn affine_bound(nmax: f32) -> impl Fn(&[u8], &[f32], f32) -> f32 {
    move |b, xb, _| {
        let min = xb.iter().fold(f32::MAX, |m, &v| m.min(v));
        let max = xb.iter().fold(-f32::MAX, |m, &v| m.max(v));
        let d = (max - min) / nmax;
        d / 2.0 + nmax * (d - f16_at(b, 0)).abs() + (min - f16_at(b, 2)).abs() + slack(xb)
    }
}

// One test per type, alike to the symmetric ones above: each names its type and error bound.
#[test]
fn q4_1_round_trip_error_is_at_most_half_a_step() {
    check_round_trip(GgmlType::Q4_1, affine_bound(15.0));
}

#[test]
fn q5_1_round_trip_error_is_at_most_half_a_step() {
    check_round_trip(GgmlType::Q5_1, affine_bound(31.0));
}

#[test]
fn iq4_nl_scale_refit_does_not_increase_the_weighted_error() {
    // The reference picks indices with d0 = max/−127 and then refits d by least
    // squares with weights x², so Σ x²(x − d·v)² ≤ Σ x²(x − d0·v)², up to the
    // f16 rounding of d.
    let mut rng = Rng::new(11);
    let x = test_row(&mut rng, N);
    let q = quantize(GgmlType::IQ4_NL, &x, None);
    let y = dequantize(GgmlType::IQ4_NL, &q, N);
    for (b, (xb, yb)) in x.chunks(32).zip(y.chunks(32)).enumerate() {
        let mut max = 0f32;
        for &v in xb {
            if v.abs() > max.abs() {
                max = v;
            }
        }
        if max == 0.0 {
            continue;
        }
        let d0 = max / -127.0;
        let d16 = f16_at(q.bytes(), b * 18) as f64;
        // In the weighted norm ‖·‖ (weights x²): ‖x − d16·v‖ ≤ ‖x − d·v‖ + |d − d16|·‖v‖
        // ≤ ‖x − d0·v‖ + 2⁻¹¹·|d16|·‖v‖ (d is the least-squares optimum).
        let (mut fitted, mut initial, mut vnorm) = (0f64, 0f64, 0f64);
        for (&xv, &yv) in xb.iter().zip(yb) {
            let (xv, yv) = (xv as f64, yv as f64);
            let v = yv / d16; // the grid value
            fitted += xv * xv * (xv - yv).powi(2);
            initial += xv * xv * (xv - d0 as f64 * v).powi(2);
            vnorm += xv * xv * v * v;
        }
        let limit = initial.sqrt() * (1.0 + 1e-5) + 2f64.powi(-11) * d16.abs() * vnorm.sqrt();
        assert!(
            fitted.sqrt() <= limit,
            "block {b}: {} > {limit}",
            fitted.sqrt()
        );
    }
}

/// Σ over the activation row of |ŵ·â| (the magnitude the dot's rounding scales with).
fn abs_dot(w: &[f32], a: &[f32]) -> f64 {
    w.iter()
        .zip(a)
        .map(|(x, y)| (*x as f64 * *y as f64).abs())
        .sum()
}

fn check_dot_matches_dequantised(ty: GgmlType) {
    let act_ty = ty.vec_dot_type();
    let mut rng = Rng::new(ty.id() as u64);
    for nb in [1usize, 2, 3, 7, 9, 17, 33] {
        let n = nb * 32;
        let w = quantize(ty, &test_row(&mut rng, n), None);
        let a = quantize(act_ty, &test_row(&mut rng, n), None);
        let (wf, af) = (dequantize(ty, &w, n), dequantize(act_ty, &a, n));
        let exact: f64 = wf.iter().zip(&af).map(|(x, y)| *x as f64 * *y as f64).sum();
        let got = scalar::vec_dot(ty, n, w.bytes(), a.bytes()) as f64;
        // The dot rounds each block term a few times and the running sum once
        // per block: (nb + 4)·2⁻²⁴ relative to Σ|terms|. The dequantised
        // values are themselves f32-rounded (2⁻²⁴ each). For Q4_1/Q5_1 the
        // activation sum s = d·Σq is stored as f16, so the min term differs
        // from m·Σ(d·q) by |m|·|s − d·Σq| per block.
        let mut tol = ((nb + 4) as f64 * 2f64.powi(-24) + 2f64.powi(-23)) * abs_dot(&wf, &af);
        if act_ty == GgmlType::Q8_1 {
            for b in 0..nb {
                let m = f16_at(w.bytes(), b * ty.type_size() + 2) as f64;
                let ab = &a.bytes()[b * 36..(b + 1) * 36];
                let sum_q: i32 = ab[4..].iter().map(|&q| q as i8 as i32).sum();
                let s_exact = f16_at(ab, 0) as f64 * sum_q as f64;
                tol += m.abs() * (f16_at(ab, 2) as f64 - s_exact).abs();
            }
        }
        assert!(
            (got - exact).abs() <= tol,
            "{ty} at {nb} blocks: vec_dot {got}, dequantised dot {exact}, tolerance {tol}"
        );
    }
}

// The assert and one-test-per-type list alike to
// ggml_c_oracle.rs::dot_matches_ggml_generic_up_to_fma: each file checks another reference (the
// dequantised dot here, ggml's generic dot there).
#[test]
fn q4_0_dot_equals_dequantised_dot() {
    check_dot_matches_dequantised(GgmlType::Q4_0);
}

#[test]
fn q4_1_dot_equals_dequantised_dot_up_to_the_stored_sum() {
    check_dot_matches_dequantised(GgmlType::Q4_1);
}

#[test]
fn q5_0_dot_equals_dequantised_dot() {
    check_dot_matches_dequantised(GgmlType::Q5_0);
}

#[test]
fn q5_1_dot_equals_dequantised_dot_up_to_the_stored_sum() {
    check_dot_matches_dequantised(GgmlType::Q5_1);
}

#[test]
fn q8_0_dot_equals_dequantised_dot() {
    check_dot_matches_dequantised(GgmlType::Q8_0);
}

#[test]
fn iq4_nl_dot_equals_dequantised_dot() {
    check_dot_matches_dequantised(GgmlType::IQ4_NL);
}

#[test]
fn q8_1_stores_the_scaled_sum_of_its_levels() {
    let mut rng = Rng::new(5);
    let x = test_row(&mut rng, N);
    let q = quantize(GgmlType::Q8_1, &x, None);
    for b in q.bytes().chunks(36) {
        let sum: i32 = b[4..].iter().map(|&v| v as i8 as i32).sum();
        // s is f16(d_f32·Σq); d16 is f16(d_f32), so the two agree to f16 rounding.
        let expect = half::f16::from_f32(sum as f32 * f16_at(b, 0)).to_f32();
        let got = f16_at(b, 2);
        assert!(
            (got - expect).abs() <= expect.abs() * 2f32.powi(-10) + 1e-7,
            "{got} vs {expect}"
        );
    }
}

#[test]
fn q8_levels_round_half_away_from_zero() {
    // amax 127 gives d = 1 exactly, so x·(1/d) hits the ties themselves.
    let mut x = vec![0f32; 32];
    x[0] = 127.0;
    x[1] = 2.5;
    x[2] = -2.5;
    x[3] = 0.5;
    x[4] = -0.5;
    x[5] = 0.49999997;
    let q = quantize(GgmlType::Q8_0, &x, None);
    let levels: Vec<i8> = q.bytes()[2..8].iter().map(|&v| v as i8).collect();
    assert_eq!(levels, [127, 3, -3, 1, -1, 0]);
}

/// Importance-weighted squared error Σ imatrix·(x − x̂)².
fn weighted_error(ty: GgmlType, x: &[f32], imatrix: &[f32], use_imatrix: bool) -> f64 {
    let q = quantize(ty, x, use_imatrix.then_some(imatrix));
    let y = dequantize(ty, &q, x.len());
    x.iter()
        .zip(&y)
        .zip(imatrix)
        .map(|((a, b), w)| *w as f64 * ((a - b) as f64).powi(2))
        .sum()
}

fn check_imatrix_helps(ty: GgmlType) {
    // Each block: one large outlier the plain quantiser spends its range on,
    // while the importance matrix says only the small elements matter.
    let mut rng = Rng::new(99);
    let n = 32 * 16;
    let mut x: Vec<f32> = (0..n).map(|_| rng.normal(1.0)).collect();
    let mut imatrix = vec![1f32; n];
    for b in 0..n / 32 {
        x[b * 32 + (b * 7) % 32] = 6.0 * if b % 2 == 0 { 1.0 } else { -1.0 };
        imatrix[b * 32 + (b * 7) % 32] = 1e-4;
    }
    let plain = weighted_error(ty, &x, &imatrix, false);
    let weighted = weighted_error(ty, &x, &imatrix, true);
    assert!(
        weighted < plain * 0.9,
        "{ty}: weighted error with imatrix {weighted}, without {plain}"
    );
}

#[test]
fn q4_0_imatrix_reduces_weighted_error() {
    check_imatrix_helps(GgmlType::Q4_0);
}

#[test]
fn q4_1_imatrix_reduces_weighted_error() {
    check_imatrix_helps(GgmlType::Q4_1);
}

#[test]
fn q5_0_imatrix_reduces_weighted_error() {
    check_imatrix_helps(GgmlType::Q5_0);
}

#[test]
fn q5_1_imatrix_reduces_weighted_error() {
    check_imatrix_helps(GgmlType::Q5_1);
}

#[test]
fn iq4_nl_imatrix_reduces_weighted_error() {
    check_imatrix_helps(GgmlType::IQ4_NL);
}

#[test]
fn all_zero_blocks_quantise_to_zero() {
    // The 32-element quantised types, as in types.rs::GgmlType::ALL: the test names the set
    // it covers rather than filtering ALL.
    for ty in [
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q8_0,
        GgmlType::Q8_1,
        GgmlType::IQ4_NL,
    ] {
        let x = vec![0f32; 64];
        for imatrix in [None, Some(&[1f32; 64][..])] {
            let q = quantize(ty, &x, imatrix);
            assert!(dequantize(ty, &q, 64).iter().all(|v| *v == 0.0), "{ty}");
        }
    }
    let _ = Buf::zeroed(0);
}

#[test]
fn an_all_zero_iq4_nl_block_is_ggmls_with_the_search() {
    // ggml's quantize_iq4_nl: scale 0, and each level still chosen for 0 · x,
    // the one nearest 0 (index 8, value 1): bytes 0x88 (as llama-quantize
    // writes a zero row of a converter's embedding).
    let x = [0f32; 32];
    let mut q = [0u8; 18];
    scalar::iq4_nl::quantize_searched(&x, &mut q, None);
    assert_eq!(&q[..2], &[0, 0]);
    assert!(q[2..].iter().all(|&b| b == 0x88), "{q:?}");
}
