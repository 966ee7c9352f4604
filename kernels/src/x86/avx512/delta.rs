//! AVX-512 kernels of the gated delta rule (docs/DESIGN.md §2.1): one token
//! over a value head's state rows ([`delta_rows`]), a verify pass's replay of
//! stashed positions ([`delta_replay`]) and several positions with
//! read-outs from a state kept in registers ([`delta_steps`]). Every row keeps
//! the F32 dot's lanes and order of this tier (`legacy::f32_avx512`), so the
//! bits are those of the one-token steps through the table.

use std::arch::x86_64::*;

use super::legacy::{f32_avx512, reduce16};

/// One token of the gated delta rule over the rows of one value head's
/// state (`s` is `[d_v][d_k]`, `s[j]` row j): per row, `row *= decay`
/// (`ggml_vec_scale_f32`), `m = row·k` (this tier's F32 dot, [`f32_avx512`]),
/// `δ = (v_j − m)·β`, `row += δ·k` (`ggml_vec_mad_f32`, fused) and
/// `out_j = (row·q)·scale` (with `out` empty, no read-out: the state update
/// alone, and `q` may be empty too). Four rows at a time when `d_k` is whole 64-steps:
/// their dots are independent chains, interleaved (one row's dot is a short
/// serial chain, mostly reduction latency); each row keeps exactly
/// `f32_avx512`'s lanes and order, so the bits are those of the steps one by
/// one through the table.
#[allow(clippy::too_many_arguments)]
pub fn delta_rows(
    s: &mut [f32],
    q: &[f32],
    k: &[f32],
    v: &[f32],
    decay: f32,
    beta: f32,
    scale: f32,
    out: &mut [f32],
) {
    assert!(
        crate::Isa::Avx512.available(),
        "delta_rows needs the AVX-512 tier"
    );
    let dk = k.len();
    assert!(s.len() >= v.len() * dk, "delta_rows: state shape");
    if out.is_empty() {
        // SAFETY: as below; no read-out reads `q`.
        unsafe { delta_rows_avx512::<false>(s, q, k, v, decay, beta, scale, out) }
    } else {
        assert!(q.len() == dk && out.len() >= v.len(), "delta_rows: shapes");
        // SAFETY: the features `delta_rows_avx512` enables were checked above;
        // the shapes it indexes by pointer were checked too.
        unsafe { delta_rows_avx512::<true>(s, q, k, v, decay, beta, scale, out) }
    }
}

/// # Safety
/// AVX-512F, AVX2 and FMA available; `s.len() ≥ v.len()·k.len()`; with
/// `OUT`, `q.len() == k.len()` and `out.len() ≥ v.len()`.
// The parameter list repeats `delta_rows`'s: that is the safe entry the
// table hands out, this the `#[target_feature]` body it calls once checked.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
unsafe fn delta_rows_avx512<const OUT: bool>(
    s: &mut [f32],
    q: &[f32],
    k: &[f32],
    v: &[f32],
    decay: f32,
    beta: f32,
    scale: f32,
    out: &mut [f32],
) {
    const G: usize = 4;
    let dk = k.len();
    let dv = v.len();
    let grouped = if dk.is_multiple_of(64) {
        dv - dv % G
    } else {
        0
    };
    // SAFETY: every pointer below is `s`'s row `j + r < dv` at
    // `i + 16·c + 16 ≤ dk`, or `k` / `q` (read-out only) at `i + 16·c + 16 ≤ dk`.
    unsafe {
        let (dvec, sp) = (_mm512_set1_ps(decay), s.as_mut_ptr());
        let mut j = 0;
        while j < grouped {
            let row = |r: usize, i: usize| sp.add((j + r) * dk + i);
            // Decay the rows and predict: m_r = row_r · k.
            let mut acc = [[_mm512_setzero_ps(); 4]; G];
            for i in (0..dk).step_by(64) {
                for c in 0..4 {
                    let kc = _mm512_loadu_ps(k.as_ptr().add(i + 16 * c));
                    for (r, a) in acc.iter_mut().enumerate() {
                        let x = _mm512_mul_ps(_mm512_loadu_ps(row(r, i + 16 * c)), dvec);
                        _mm512_storeu_ps(row(r, i + 16 * c), x);
                        a[c] = _mm512_fmadd_ps(x, kc, a[c]);
                    }
                }
            }
            let delta: [__m512; G] =
                std::array::from_fn(|r| _mm512_set1_ps((v[j + r] - fold4(&acc[r])) * beta));
            // Correct and read out: row_r += δ_r·k, o_r = row_r · q.
            let mut acc = [[_mm512_setzero_ps(); 4]; G];
            for i in (0..dk).step_by(64) {
                for c in 0..4 {
                    let kc = _mm512_loadu_ps(k.as_ptr().add(i + 16 * c));
                    for (r, a) in acc.iter_mut().enumerate() {
                        let x = _mm512_fmadd_ps(kc, delta[r], _mm512_loadu_ps(row(r, i + 16 * c)));
                        _mm512_storeu_ps(row(r, i + 16 * c), x);
                        if OUT {
                            a[c] = _mm512_fmadd_ps(
                                x,
                                _mm512_loadu_ps(q.as_ptr().add(i + 16 * c)),
                                a[c],
                            );
                        }
                    }
                }
            }
            if OUT {
                for (r, a) in acc.iter().enumerate() {
                    out[j + r] = fold4(a) * scale;
                }
            }
            j += G;
        }
    }
    for j in grouped..dv {
        let row = &mut s[j * dk..(j + 1) * dk];
        for x in row.iter_mut() {
            *x *= decay;
        }
        // `f32_avx512`'s features are this function's.
        let delta = (v[j] - f32_avx512(row, k)) * beta;
        for (x, &ki) in row.iter_mut().zip(k) {
            *x = ki.mul_add(delta, *x);
        }
        if OUT {
            out[j] = f32_avx512(row, q) * scale;
        }
    }
}

/// [`crate::sig::DeltaReplayFn`]: `steps` positions of [`delta_rows`]
/// without read-out, each pair of state rows loaded once and kept in
/// registers across the positions (a position's pass over the whole state
/// loaded and stored every row twice). Per row and position the same ops in
/// the same order as `delta_rows_avx512`'s grouped rows: decay, the dot in
/// four accumulators over 64-steps folded `(a0 + a2) + (a1 + a3)`, then
/// `row += δ·k` fused; so the same bits. Takes `d_k` of 64 or 128 only.
pub fn delta_replay(s: &mut [f32], steps: &[crate::sig::ReplayStep]) -> bool {
    if steps.iter().any(|p| !p.q.is_empty()) {
        return false;
    }
    delta_steps(s, None, true, steps, 0.0, &mut [])
}

/// [`crate::sig::DeltaStepsFn`]: [`delta_replay`]'s register-resident rows
/// with the read-outs of the positions that have a `q` (per row, after its
/// update, `delta_rows_avx512`'s read-out: the dot of the new row and `q` in
/// its four accumulators, folded, times `scale`), from `from` when given
/// and stored only with `store`. Takes `d_k` of 64 or 128 only.
pub fn delta_steps(
    s: &mut [f32],
    from: Option<&[f32]>,
    store: bool,
    steps: &[crate::sig::ReplayStep],
    scale: f32,
    out: &mut [f32],
) -> bool {
    let Some(first) = steps.first() else {
        return true;
    };
    let (dk, dv) = (first.k.len(), first.v.len());
    let state = dk * dv;
    if !crate::Isa::Avx512.available()
        || !(dk == 64 || dk == 128)
        || (store || from.is_none()) && s.len() < state
        || from.is_some_and(|f| f.len() < state)
        || out.len() < steps.len() * dv && steps.iter().any(|p| !p.q.is_empty())
        || steps
            .iter()
            .any(|p| p.k.len() != dk || p.v.len() != dv || !(p.q.is_empty() || p.q.len() == dk))
    {
        return false;
    }
    let src = from.map_or(s.as_ptr(), |f| f.as_ptr());
    let dst = if store {
        s.as_mut_ptr()
    } else {
        std::ptr::null_mut()
    };
    // SAFETY: the features were checked above, and so were the shapes the
    // kernel indexes by pointer; `src` and `dst` are each `d_v·d_k` long
    // (or `dst` null and unused without `store`), `out` `steps·d_v` where
    // a position reads out.
    unsafe {
        if dk == 64 {
            delta_steps_avx512::<4>(src, dst, dv, steps, scale, out.as_mut_ptr());
        } else {
            delta_steps_avx512::<8>(src, dst, dv, steps, scale, out.as_mut_ptr());
        }
    }
    true
}

/// # Safety
/// AVX-512F, AVX2 and FMA available; every step's `k` (and non-empty `q`)
/// has `16·NC` elements and `v` has `dv`; `src` holds `dv·16·NC` floats;
/// `dst`, unless null, too; `out` holds `steps.len()·dv` floats if any step
/// has a `q`. `src` and `dst` may be the same rows.
// The loops walk chunk c of every row of a register tile `x[row][chunk]`.
#[allow(clippy::needless_range_loop)]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
unsafe fn delta_steps_avx512<const NC: usize>(
    src: *const f32,
    dst: *mut f32,
    dv: usize,
    steps: &[crate::sig::ReplayStep],
    scale: f32,
    out: *mut f32,
) {
    const G: usize = 2;
    let dk = 16 * NC;
    // SAFETY: rows `j + r < dv` at `16·c + 16 ≤ dk`; keys and queries at
    // `16·c + 16 ≤ dk`; outputs at `t·dv + j + r < steps·dv`.
    unsafe {
        let mut j = 0;
        while j < dv {
            let g = G.min(dv - j);
            let mut x = [[_mm512_setzero_ps(); NC]; G];
            for (r, xr) in x.iter_mut().enumerate().take(g) {
                for (c, xc) in xr.iter_mut().enumerate() {
                    *xc = _mm512_loadu_ps(src.add((j + r) * dk + 16 * c));
                }
            }
            for (t, p) in steps.iter().enumerate() {
                let dvec = _mm512_set1_ps(p.decay);
                let kp = p.k.as_ptr();
                let mut acc = [[_mm512_setzero_ps(); 4]; G];
                for c in 0..NC {
                    let kc = _mm512_loadu_ps(kp.add(16 * c));
                    for r in 0..G {
                        x[r][c] = _mm512_mul_ps(x[r][c], dvec);
                        acc[r][c % 4] = _mm512_fmadd_ps(x[r][c], kc, acc[r][c % 4]);
                    }
                }
                let delta: [__m512; G] = std::array::from_fn(|r| {
                    let vr = if r < g { p.v[j + r] } else { 0.0 };
                    _mm512_set1_ps((vr - fold4(&acc[r])) * p.beta)
                });
                for c in 0..NC {
                    let kc = _mm512_loadu_ps(kp.add(16 * c));
                    for r in 0..G {
                        x[r][c] = _mm512_fmadd_ps(kc, delta[r], x[r][c]);
                    }
                }
                if !p.q.is_empty() {
                    let qp = p.q.as_ptr();
                    let mut acc = [[_mm512_setzero_ps(); 4]; G];
                    for c in 0..NC {
                        let qc = _mm512_loadu_ps(qp.add(16 * c));
                        for r in 0..G {
                            acc[r][c % 4] = _mm512_fmadd_ps(x[r][c], qc, acc[r][c % 4]);
                        }
                    }
                    for r in 0..g {
                        *out.add(t * dv + j + r) = fold4(&acc[r]) * scale;
                    }
                }
            }
            if !dst.is_null() {
                for (r, xr) in x.iter().enumerate().take(g) {
                    for (c, xc) in xr.iter().enumerate() {
                        _mm512_storeu_ps(dst.add((j + r) * dk + 16 * c), *xc);
                    }
                }
            }
            j += g;
        }
    }
}

/// One row's four 16-lane accumulators summed to one f32: `(a0 + a2) +
/// (a1 + a3)`, then the tier's lane reduction, in the order both the
/// one-token rows and the several-position kernel sum them.
///
/// # Safety
/// The caller must have AVX-512F enabled.
#[inline(always)]
unsafe fn fold4(a: &[__m512; 4]) -> f32 {
    // SAFETY: register-only; the caller enables the features.
    unsafe {
        reduce16(_mm512_add_ps(
            _mm512_add_ps(a[0], a[2]),
            _mm512_add_ps(a[1], a[3]),
        ))
    }
}
