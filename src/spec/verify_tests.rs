use super::*;
use crate::sample::{Sampler, SamplerParams};

#[test]
fn exact_greedy_accepts_only_the_argmax() {
    let logits = [0.1, 2.0, -1.0, 1.9];
    assert!(accept_exact(1, &logits));
    assert!(!accept_exact(3, &logits));
    assert!(!accept_exact(0, &logits));
}

#[test]
fn exact_greedy_breaks_ties_to_the_lower_id() {
    let logits = [1.0, 3.0, 3.0];
    assert!(accept_exact(1, &logits));
    assert!(!accept_exact(2, &logits));
}

#[test]
fn entropy_of_uniform_is_ln_n_and_of_a_point_mass_is_zero() {
    assert!((entropy(&[0.25; 4]) - 4f64.ln()).abs() < 1e-12);
    assert_eq!(entropy(&[0.0, 1.0, 0.0]), 0.0);
}

#[test]
fn relaxed_greedy_accepts_a_near_tie_only_when_the_target_is_unsure() {
    let relax = Some(Relaxation {
        ratio: 0.8,
        delta: 0.5,
    });
    // Near tie, high entropy: relaxed.
    let p = [0.4, 0.35, 0.25];
    assert!(entropy(&p) > 0.5);
    assert_eq!(accept_greedy(1, &p, relax), Verdict::Relaxed);
    assert_eq!(accept_greedy(0, &p, relax), Verdict::Exact);
    // Too far below the max: rejected.
    assert_eq!(accept_greedy(2, &p, relax), Verdict::Rejected);
    // Near tie but low entropy (δ above H): rejected.
    let strict = Some(Relaxation {
        ratio: 0.8,
        delta: 2.0,
    });
    assert_eq!(accept_greedy(1, &p, strict), Verdict::Rejected);
    // Without relaxation, or with ratio 1, only the argmax passes.
    assert_eq!(accept_greedy(1, &p, None), Verdict::Rejected);
    let one = Some(Relaxation {
        ratio: 1.0,
        delta: 0.0,
    });
    assert_eq!(accept_greedy(1, &[0.5, 0.5, 0.0], one), Verdict::Rejected);
}

#[test]
fn relaxed_greedy_rejects_an_out_of_vocabulary_draft() {
    let relax = Some(Relaxation {
        ratio: 0.1,
        delta: 0.0,
    });
    assert_eq!(accept_greedy(7, &[0.5, 0.5], relax), Verdict::Rejected);
}

#[test]
fn sampled_acceptance_is_min_one_p_over_q() {
    let p = [0.2, 0.8];
    let q = [0.4, 0.6];
    // p/q = 0.5 for token 0.
    assert!(accept_sampled(0, &p, &q, 0.49));
    assert!(!accept_sampled(0, &p, &q, 0.5));
    // p ≥ q: always accepted.
    assert!(accept_sampled(1, &p, &q, 0.999_999));
    // q(d) = 0: rejected.
    assert!(!accept_sampled(0, &p, &[0.0, 1.0], 0.0));
}

#[test]
fn residual_is_the_positive_part_of_p_minus_q() {
    let r = residual(&[0.5, 0.3, 0.2], &[0.2, 0.5, 0.3]);
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].0, 0);
    assert!((r[0].1 - 0.3).abs() < 1e-6);
    // p == q: falls back to p.
    let r = residual(&[0.5, 0.5], &[0.5, 0.5]);
    assert_eq!(r, vec![(0, 0.5), (1, 0.5)]);
}

/// One speculative step on a fixed pair (p, q): d ~ q, accept with
/// min(1, p/q), else draw from the residual.
fn spec_step(p: &[f32], q: &[f32], s: &mut Sampler) -> u32 {
    let qs: Vec<(u32, f32)> = q.iter().enumerate().map(|(i, &x)| (i as u32, x)).collect();
    let d = s.sample_from(&qs);
    if accept_sampled(d, p, q, s.uniform()) {
        d
    } else {
        s.sample_from(&residual(p, q))
    }
}

/// Pearson chi-square of observed counts against expected probabilities.
fn chi_square(counts: &[u64], p: &[f32]) -> f64 {
    let n: u64 = counts.iter().sum();
    counts
        .iter()
        .zip(p)
        .map(|(&c, &pi)| {
            let e = n as f64 * pi as f64;
            (c as f64 - e).powi(2) / e
        })
        .sum()
}

#[test]
fn speculative_sampling_reproduces_the_target_distribution() {
    // 5-token vocabulary, draft far from target (one token the draft never
    // proposes, one it over-proposes). 200 000 draws, 4 degrees of freedom:
    // the 0.999 quantile of χ²(4) is 18.47. The draft distribution itself
    // fails the same test by orders of magnitude.
    let p = [0.10f32, 0.30, 0.05, 0.35, 0.20];
    let q = [0.40f32, 0.10, 0.00, 0.25, 0.25];
    let mut s = Sampler::new(SamplerParams {
        seed: Some(1234),
        ..SamplerParams::default()
    });
    let n = 200_000;
    let mut counts = [0u64; 5];
    for _ in 0..n {
        counts[spec_step(&p, &q, &mut s) as usize] += 1;
    }
    let chi = chi_square(&counts, &p);
    assert!(chi < 18.47, "chi-square {chi} for counts {counts:?}");
    let q_safe = [0.40f32, 0.10, 1e-9, 0.25, 0.25];
    let chi_q = chi_square(&counts, &q_safe);
    assert!(chi_q > 1000.0, "the test cannot tell p from q: {chi_q}");
}

#[test]
fn dense_scatters_sparse_probabilities() {
    assert_eq!(dense(&[(2, 0.5), (0, 0.25)], 4), vec![0.25, 0.0, 0.5, 0.0]);
}
