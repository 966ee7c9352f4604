//! The gated-delta-rule row step (`KernelTable::delta_rows`) against the
//! same steps one by one through the table: decay, the tier's F32 dot, the
//! fused update, the read-out dot. State and outputs must be the same bits,
//! at the model's head size and at shapes that leave rows or elements over.

use kernels::{GgmlType, Isa, KernelTable};

fn dot(kt: &KernelTable, a: &[f32], b: &[f32]) -> f32 {
    kt.vec_dot(GgmlType::F32)(a.len(), bytemuck::cast_slice(a), bytemuck::cast_slice(b))
}

/// xorshift floats in [-1, 1).
fn floats(seed: u64, n: usize) -> Vec<f32> {
    let mut s = seed | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

#[test]
fn delta_rows_equals_the_steps_one_by_one_bit_for_bit() {
    let mut checked = 0;
    for isa in Isa::all_available() {
        let kt = KernelTable::new(isa);
        let Some(rows) = kt.delta_rows() else {
            continue;
        };
        // (d_k, d_v): the 35B head, the tiny model's, rows left over after
        // groups of four, and lengths that are not whole 64-steps.
        for (dk, dv) in [
            (128usize, 128usize),
            (64, 64),
            (128, 7),
            (64, 3),
            (37, 5),
            (100, 6),
            (130, 4),
        ] {
            let seed = (dk * 1000 + dv) as u64;
            let s0 = floats(seed, dk * dv);
            let (q, k, v) = (
                floats(seed + 1, dk),
                floats(seed + 2, dk),
                floats(seed + 3, dv),
            );
            let (decay, beta, scale) = (0.93f32, 0.61f32, 1.0 / (dk as f32).sqrt());
            let mut s_got = s0.clone();
            let mut o_got = vec![f32::NAN; dv];
            rows(&mut s_got, &q, &k, &v, decay, beta, scale, &mut o_got);
            let mut s_want = s0.clone();
            let mut o_want = vec![f32::NAN; dv];
            for (j, row) in s_want.chunks_exact_mut(dk).enumerate() {
                row.iter_mut().for_each(|x| *x *= decay);
                let delta = (v[j] - dot(&kt, row, &k)) * beta;
                for (x, &ki) in row.iter_mut().zip(&k) {
                    *x = ki.mul_add(delta, *x);
                }
                o_want[j] = dot(&kt, row, &q) * scale;
            }
            let bits = |x: &[f32]| x.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&s_got), bits(&s_want), "{isa} state, {dk} x {dv}");
            assert_eq!(bits(&o_got), bits(&o_want), "{isa} read-out, {dk} x {dv}");
            assert_ne!(s_got, s0, "the state moved");
            // The update alone (no read-out): the same state.
            let mut s_upd = s0.clone();
            rows(&mut s_upd, &[], &k, &v, decay, beta, scale, &mut []);
            assert_eq!(
                bits(&s_upd),
                bits(&s_want),
                "{isa} update only, {dk} x {dv}"
            );
            checked += 1;
        }
    }
    if checked == 0 {
        eprintln!("*** SKIPPING: no tier with a delta-rule row step on this host ***");
    }
}

/// `n` delta-rule steps over keys `ks` (`dk` each) and values `vs` (`dv`
/// each), decay and beta from the pairs of `gb`; position t reads out with
/// query t of `qs` where `read_out(t)`, else not at all.
fn replay_steps<'a>(
    (dk, dv, n): (usize, usize, usize),
    ks: &'a [f32],
    vs: &'a [f32],
    qs: &'a [f32],
    gb: &[f32],
    read_out: impl Fn(usize) -> bool,
) -> Vec<kernels::isa::ReplayStep<'a>> {
    (0..n)
        .map(|t| kernels::isa::ReplayStep {
            k: &ks[t * dk..(t + 1) * dk],
            v: &vs[t * dv..(t + 1) * dv],
            q: match read_out(t) {
                true => &qs[t * dk..(t + 1) * dk],
                false => &[],
            },
            decay: (gb[2 * t] - 1.0).exp(),
            beta: gb[2 * t + 1].abs(),
        })
        .collect()
}

#[test]
fn delta_replay_equals_delta_rows_position_by_position_bit_for_bit() {
    use kernels::isa::ReplayStep;
    let mut checked = 0;
    for isa in Isa::all_available() {
        let kt = KernelTable::new(isa);
        let (Some(rows), Some(replay)) = (kt.delta_rows(), kt.delta_replay()) else {
            continue;
        };
        // Both head sizes it takes, odd row counts (a lone last row), one
        // position and a whole 16-token verify.
        for (dk, dv, n) in [
            (128usize, 128usize, 16usize),
            (64, 64, 16),
            (64, 7, 5),
            (128, 3, 1),
        ] {
            let s0 = floats(3 + dk as u64, dk * dv);
            let ks = floats(5, n * dk);
            let vs = floats(7, n * dv);
            let gb = floats(11, 2 * n);
            let steps = replay_steps((dk, dv, n), &ks, &vs, &[], &gb, |_| false);
            let mut want = s0.clone();
            for p in &steps {
                rows(&mut want, &[], p.k, p.v, p.decay, p.beta, 0.0, &mut []);
            }
            let mut got = s0.clone();
            assert!(replay(&mut got, &steps), "{isa} took no ({dk}, {dv})");
            for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                assert_eq!(
                    a.to_bits(),
                    b.to_bits(),
                    "{isa} ({dk}, {dv}, {n}) element {i}"
                );
            }
            assert_ne!(got, s0, "the state moved");
            checked += 1;
        }
        // Shapes it does not take: nothing done.
        let mut s = floats(1, 37 * 5);
        let k = floats(2, 37);
        let v = floats(3, 5);
        let before = s.clone();
        let step = ReplayStep {
            k: &k,
            v: &v,
            q: &[],
            decay: 0.9,
            beta: 0.5,
        };
        assert!(!replay(&mut s, &[step]));
        assert_eq!(s, before);
    }
    if checked == 0 {
        eprintln!("###  no tier here has a delta replay kernel");
    }
}

// Same tier loop and shape setup as the delta_replay test above; this one checks
// another kernel, delta_steps (read-outs; in place, from a source, not stored).
#[test]
fn delta_steps_equal_delta_rows_with_read_outs_bit_for_bit() {
    use kernels::isa::ReplayStep;
    let mut checked = 0;
    for isa in Isa::all_available() {
        let kt = KernelTable::new(isa);
        let (Some(rows), Some(steps_fn)) = (kt.delta_rows(), kt.delta_steps()) else {
            continue;
        };
        for (dk, dv, n) in [
            (128usize, 128usize, 4usize),
            (128, 128, 16),
            (64, 64, 5),
            (64, 7, 3),
            (128, 3, 1),
        ] {
            let s0 = floats(13 + dk as u64, dk * dv);
            let ks = floats(17, n * dk);
            let qs = floats(19, n * dk);
            let vs = floats(23, n * dv);
            let gb = floats(29, 2 * n);
            let scale = 1.0 / (dk as f32).sqrt();
            // Every other position without a read-out, to check both kinds.
            let read_out = |t: usize| !(t % 2 == 1 && n > 2);
            let steps = replay_steps((dk, dv, n), &ks, &vs, &qs, &gb, read_out);
            let mut want = s0.clone();
            let mut o_want = vec![f32::NAN; n * dv];
            for (t, p) in steps.iter().enumerate() {
                let o = &mut o_want[t * dv..(t + 1) * dv];
                if p.q.is_empty() {
                    rows(&mut want, &[], p.k, p.v, p.decay, p.beta, 0.0, &mut []);
                } else {
                    rows(&mut want, p.q, p.k, p.v, p.decay, p.beta, scale, o);
                }
            }
            let same = |got: &[f32], want: &[f32], what: &str| {
                for (i, (a, b)) in got.iter().zip(want).enumerate() {
                    assert_eq!(
                        a.to_bits(),
                        b.to_bits(),
                        "{isa} ({dk}, {dv}, {n}) {what} {i}"
                    );
                }
            };
            // In place, stored.
            let mut got = s0.clone();
            let mut o_got = vec![f32::NAN; n * dv];
            assert!(steps_fn(&mut got, None, true, &steps, scale, &mut o_got));
            same(&got, &want, "state in place");
            same(&o_got, &o_want, "read-out in place");
            // From another state, stored: the source untouched.
            let mut got = vec![0f32; dk * dv];
            let mut o_got = vec![f32::NAN; n * dv];
            assert!(steps_fn(
                &mut got,
                Some(&s0),
                true,
                &steps,
                scale,
                &mut o_got
            ));
            same(&got, &want, "state from a source");
            same(&o_got, &o_want, "read-out from a source");
            // From another state, not stored: only the read-outs.
            let mut o_got = vec![f32::NAN; n * dv];
            assert!(steps_fn(
                &mut [],
                Some(&s0),
                false,
                &steps,
                scale,
                &mut o_got
            ));
            same(&o_got, &o_want, "read-out alone");
            checked += 1;
        }
        // Shapes it does not take: nothing done.
        let (k, v, q) = (floats(2, 37), floats(3, 5), floats(4, 37));
        let step = ReplayStep {
            k: &k,
            v: &v,
            q: &q,
            decay: 0.9,
            beta: 0.5,
        };
        let mut s = floats(1, 37 * 5);
        let before = s.clone();
        let mut o = vec![0f32; 5];
        assert!(!steps_fn(&mut s, None, true, &[step], 0.1, &mut o));
        assert_eq!(s, before);
        // A read-out that does not fit `out`.
        let (k, v, q) = (floats(2, 64), floats(3, 4), floats(4, 64));
        let step = ReplayStep {
            k: &k,
            v: &v,
            q: &q,
            decay: 0.9,
            beta: 0.5,
        };
        let mut s = floats(1, 64 * 4);
        assert!(!steps_fn(&mut s, None, true, &[step, step], 0.1, &mut o));
    }
    if checked == 0 {
        eprintln!("###  no tier here has a delta steps kernel");
    }
}
