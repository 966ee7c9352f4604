use super::*;

/// Parameters with every filter off, temperature 1 and a fixed seed.
fn plain() -> SamplerParams {
    SamplerParams {
        temp: 1.0,
        top_k: 0,
        top_p: 1.0,
        min_p: 0.0,
        seed: Some(7),
        ..SamplerParams::default()
    }
}

fn ln(x: &[f64]) -> Vec<f32> {
    x.iter().map(|v| v.ln() as f32).collect()
}

fn assert_dist(got: &[(u32, f32)], want: &[(u32, f64)]) {
    assert_eq!(got.len(), want.len(), "got {got:?}, want {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert_eq!(g.0, w.0, "got {got:?}, want {want:?}");
        assert!(
            (g.1 as f64 - w.1).abs() < 1e-5,
            "got {got:?}, want {want:?}"
        );
    }
}

#[test]
fn defaults_are_llama_cpp_defaults() {
    let p = SamplerParams::default();
    assert_eq!(p.temp, 0.8);
    assert_eq!(p.top_k, 40);
    assert_eq!(p.top_p, 0.95);
    assert_eq!(p.min_p, 0.05);
    assert_eq!(p.repeat_penalty, 1.0);
    assert_eq!(p.repeat_last_n, 64);
    assert_eq!(p.presence_penalty, 0.0);
    assert_eq!(p.frequency_penalty, 0.0);
    assert!(!p.penalties_enabled());
}

#[test]
fn splitmix64_matches_reference_output_for_seed_zero() {
    let mut s = 0u64;
    assert_eq!(splitmix64(&mut s), 0xe220_a839_7b1d_cdaf);
}

#[test]
fn xoshiro256starstar_matches_reference_sequence() {
    // State [1, 2, 3, 4]: first output rotl(2·5, 7)·9 = 11520, second 0 (s1 becomes 0).
    let mut r = Rng::from_state([1, 2, 3, 4]);
    assert_eq!(r.next_u64(), 11520);
    assert_eq!(r.next_u64(), 0);
    assert_eq!(r.next_u64(), 1_509_978_240);
    assert_eq!(r.next_u64(), 1_215_971_899_390_074_240);
}

#[test]
fn argmax_breaks_ties_to_lowest_id_and_skips_nan() {
    assert_eq!(argmax(&[1.0, 3.0, 3.0, 2.0]), 1);
    assert_eq!(argmax(&[f32::NAN, -1.0, -1.0]), 1);
    assert_eq!(argmax(&[f32::NEG_INFINITY, f32::NEG_INFINITY]), 0);
    assert_eq!(argmax(&[]), 0);
}

#[test]
fn softmax_matches_hand_values_and_survives_infinities() {
    // softmax([0, ln 3]) = [1/4, 3/4]
    let p = softmax(&[0.0, 3f32.ln()]);
    assert!((p[0] - 0.25).abs() < 1e-6 && (p[1] - 0.75).abs() < 1e-6);
    assert_eq!(
        softmax(&[f32::INFINITY, 1.0, f32::INFINITY]),
        [0.5, 0.0, 0.5]
    );
    assert_eq!(softmax(&[f32::NEG_INFINITY, f32::NEG_INFINITY]), [0.5, 0.5]);
    // Large logits do not overflow.
    let p = softmax(&[1000.0, 1000.0]);
    assert_eq!(p, [0.5, 0.5]);
}

#[test]
fn top_k_keeps_the_k_largest_logits() {
    let s = Sampler::new(SamplerParams {
        top_k: 2,
        ..plain()
    });
    // Survivors 5 and 4: e/(e+1), 1/(e+1).
    let e = std::f64::consts::E;
    assert_dist(
        &s.probs(&[1.0, 5.0, 3.0, 4.0, 2.0], &[]),
        &[(1, e / (e + 1.0)), (3, 1.0 / (e + 1.0))],
    );
}

#[test]
fn top_p_keeps_the_shortest_prefix_reaching_p() {
    let logits = ln(&[0.5, 0.3, 0.15, 0.05]);
    let s = Sampler::new(SamplerParams {
        top_p: 0.75,
        ..plain()
    });
    // 0.5 < 0.75 ≤ 0.8: two tokens, renormalised by 0.8.
    assert_dist(&s.probs(&logits, &[]), &[(0, 0.625), (1, 0.375)]);
    let s = Sampler::new(SamplerParams {
        top_p: 0.85,
        ..plain()
    });
    assert_dist(
        &s.probs(&logits, &[]),
        &[(0, 0.5 / 0.95), (1, 0.3 / 0.95), (2, 0.15 / 0.95)],
    );
    // min_keep overrides a tiny p.
    let s = Sampler::new(SamplerParams {
        top_p: 0.1,
        min_keep: 2,
        ..plain()
    });
    assert_dist(&s.probs(&logits, &[]), &[(0, 0.625), (1, 0.375)]);
}

#[test]
fn min_p_drops_tokens_below_the_relative_floor() {
    let logits = ln(&[0.05, 0.5, 0.15, 0.3]);
    let s = Sampler::new(SamplerParams {
        min_p: 0.2,
        ..plain()
    });
    // floor = 0.2 · 0.5 = 0.1: 0.05 goes.
    assert_dist(
        &s.probs(&logits, &[]),
        &[(1, 0.5 / 0.95), (3, 0.3 / 0.95), (2, 0.15 / 0.95)],
    );
}

#[test]
fn temperature_scales_logits_before_the_final_softmax() {
    let s = Sampler::new(SamplerParams {
        temp: 0.5,
        ..plain()
    });
    // [0, ln 2] / 0.5 = [0, ln 4]: probabilities 1/5, 4/5.
    assert_dist(&s.probs(&[0.0, 2f32.ln()], &[]), &[(1, 0.8), (0, 0.2)]);
}

#[test]
fn min_p_sees_untempered_logits() {
    // With temperature first, p^4 would push token 1 below the 0.2 floor (0.0081/0.0625);
    // llama.cpp's order keeps three tokens, then sharpens them: weights 0.5^4, 0.3^4, 0.15^4.
    let logits = ln(&[0.5, 0.3, 0.15, 0.05]);
    let s = Sampler::new(SamplerParams {
        min_p: 0.2,
        temp: 0.25,
        ..plain()
    });
    let w = [0.5f64.powi(4), 0.3f64.powi(4), 0.15f64.powi(4)];
    let z: f64 = w.iter().sum();
    assert_dist(
        &s.probs(&logits, &[]),
        &[(0, w[0] / z), (1, w[1] / z), (2, w[2] / z)],
    );
}

#[test]
fn repeat_penalty_divides_positive_and_multiplies_negative_logits() {
    let s = Sampler::new(SamplerParams {
        repeat_penalty: 2.0,
        ..plain()
    });
    // [2, -1, 3] with 0 and 1 seen → [1, -2, 3].
    let w = [1f64.exp(), (-2f64).exp(), 3f64.exp()];
    let z: f64 = w.iter().sum();
    assert_dist(
        &s.probs(&[2.0, -1.0, 3.0], &[0, 1, 1]),
        &[(2, w[2] / z), (0, w[0] / z), (1, w[1] / z)],
    );
}

#[test]
fn frequency_and_presence_penalties_subtract_per_count_and_once() {
    let s = Sampler::new(SamplerParams {
        frequency_penalty: 0.5,
        presence_penalty: 0.25,
        ..plain()
    });
    // Token 0 seen twice: 1 − 1 − 0.25 = −0.25; token 1 once: 1 − 0.5 − 0.25 = 0.25; token 2: 1.
    let w = [(-0.25f64).exp(), 0.25f64.exp(), 1f64.exp()];
    let z: f64 = w.iter().sum();
    assert_dist(
        &s.probs(&[1.0, 1.0, 1.0], &[0, 1, 0]),
        &[(2, w[2] / z), (1, w[1] / z), (0, w[0] / z)],
    );
}

#[test]
fn penalties_only_look_at_the_last_n_tokens() {
    let params = SamplerParams {
        repeat_penalty: 2.0,
        repeat_last_n: 1,
        temp: 0.0,
        ..plain()
    };
    let mut s = Sampler::new(params.clone());
    // Logits [3, 2.5, 0], history [0, 2]: a window of 1 penalises only token 2.
    assert_eq!(s.sample(&[3.0, 2.5, 0.0], &[0, 2]), 0);
    // A window of 2 also penalises token 0: 3 / 2 = 1.5 < 2.5.
    let mut s = Sampler::new(SamplerParams {
        repeat_last_n: 2,
        ..params.clone()
    });
    assert_eq!(s.sample(&[3.0, 2.5, 0.0], &[0, 2]), 1);
    // repeat_last_n 0 disables the penalties altogether.
    let mut s = Sampler::new(SamplerParams {
        repeat_last_n: 0,
        ..params
    });
    assert_eq!(s.sample(&[3.0, 2.5], &[0, 0]), 0);
}

#[test]
fn greedy_equals_argmax_on_pseudo_random_logits() {
    let mut rng = Rng::from_seed(99);
    let mut s = Sampler::new(SamplerParams::greedy());
    for _ in 0..200 {
        let logits: Vec<f32> = (0..1000)
            .map(|_| (rng.next_f64() * 20.0 - 10.0) as f32)
            .collect();
        assert_eq!(s.sample(&logits, &[]), argmax(&logits));
        assert_eq!(s.probs(&logits, &[]), vec![(argmax(&logits), 1.0)]);
    }
    // Ties go to the lowest id.
    assert_eq!(s.sample(&[1.0, 3.0, 3.0], &[]), 1);
}

#[test]
fn same_seed_gives_the_same_sequence() {
    let logits: Vec<f32> = (0..100).map(|i| ((i * 37) % 11) as f32 * 0.3).collect();
    let run = |seed| {
        let mut s = Sampler::new(SamplerParams {
            seed: Some(seed),
            ..SamplerParams::default()
        });
        (0..200).map(|_| s.sample(&logits, &[])).collect::<Vec<_>>()
    };
    assert_eq!(run(1234), run(1234));
    assert_ne!(run(1234), run(1235));
}

#[test]
fn unseeded_samplers_draw_their_seed() {
    let a = Sampler::new(SamplerParams::default());
    let b = Sampler::new(SamplerParams {
        seed: Some(a.seed()),
        ..SamplerParams::default()
    });
    assert_eq!(a.seed(), b.seed());
}

#[test]
fn sampled_frequencies_match_the_filtered_distribution() {
    // Logits ln[0.4, 0.25, 0.15, 0.1, 0.06, 0.04], top_k 5 drops 0.04, min_p 0.2 drops
    // 0.06 (< 0.08), temperature 0.8 then reweights the four left as p^(1/0.8).
    let logits = ln(&[0.4, 0.25, 0.15, 0.1, 0.06, 0.04]);
    let params = SamplerParams {
        temp: 0.8,
        top_k: 5,
        top_p: 1.0,
        min_p: 0.2,
        seed: Some(42),
        ..SamplerParams::default()
    };
    let w: Vec<f64> = [0.4f64, 0.25, 0.15, 0.1]
        .iter()
        .map(|p| p.powf(1.0 / 0.8))
        .collect();
    let z: f64 = w.iter().sum();
    let want: Vec<f64> = w.iter().map(|x| x / z).collect();
    let mut s = Sampler::new(params);
    let got = s.probs(&logits, &[]);
    assert_dist(
        &got,
        &[(0, want[0]), (1, want[1]), (2, want[2]), (3, want[3])],
    );

    let n = 20_000usize;
    let mut counts = [0usize; 6];
    for _ in 0..n {
        counts[s.sample(&logits, &[]) as usize] += 1;
    }
    assert_eq!(counts[4] + counts[5], 0, "filtered tokens were drawn");
    let chi2: f64 = (0..4)
        .map(|i| {
            let e = want[i] * n as f64;
            (counts[i] as f64 - e).powi(2) / e
        })
        .sum();
    // 3 degrees of freedom: P(χ² > 16.27) = 0.001 for a correct sampler.
    assert!(chi2 < 16.27, "chi2 = {chi2}, counts {counts:?}");
}

#[test]
fn sample_from_draws_from_unnormalised_weights() {
    let mut s = Sampler::new(SamplerParams {
        seed: Some(5),
        ..SamplerParams::default()
    });
    let dist = [(10u32, 3.0f32), (20, 0.0), (30, 1.0)];
    let n = 20_000;
    let mut c = [0usize; 3];
    for _ in 0..n {
        match s.sample_from(&dist) {
            10 => c[0] += 1,
            20 => c[1] += 1,
            30 => c[2] += 1,
            other => panic!("drew {other}"),
        }
    }
    assert_eq!(c[1], 0);
    // 1 degree of freedom: P(χ² > 10.83) = 0.001.
    let e = [0.75 * n as f64, 0.25 * n as f64];
    let chi2 = (c[0] as f64 - e[0]).powi(2) / e[0] + (c[2] as f64 - e[1]).powi(2) / e[1];
    assert!(chi2 < 10.83, "chi2 = {chi2}, counts {c:?}");
}

#[test]
fn nan_logits_are_never_sampled() {
    let mut s = Sampler::new(SamplerParams {
        top_k: 0,
        top_p: 1.0,
        min_p: 0.0,
        temp: 1.0,
        seed: Some(3),
        ..SamplerParams::default()
    });
    for _ in 0..1000 {
        assert_ne!(s.sample(&[0.0, f32::NAN, 0.0], &[]), 1);
    }
}

/// The k best tokens after penalties by brute force: penalise, sort everything, cut.
fn reference_top_k(p: &SamplerParams, logits: &[f32], history: &[u32], k: usize) -> Vec<u32> {
    let mut v: Vec<(u32, f32)> = logits
        .iter()
        .enumerate()
        .map(|(i, &l)| (i as u32, l))
        .collect();
    let start = history.len().saturating_sub(p.repeat_last_n as usize);
    let window = &history[start..];
    for (id, l) in v.iter_mut() {
        let count = window.iter().filter(|&&t| t == *id).count();
        if count > 0 {
            *l = if *l <= 0.0 {
                *l * p.repeat_penalty
            } else {
                *l / p.repeat_penalty
            };
            *l -= count as f32 * p.frequency_penalty + p.presence_penalty;
        }
    }
    v.sort_by(|a, b| b.1.partial_cmp(&a.1).unwrap().then(a.0.cmp(&b.0)));
    v.truncate(k);
    v.into_iter().map(|x| x.0).collect()
}

#[test]
fn streaming_top_k_matches_a_full_sort_with_penalties_and_ties() {
    let mut rng = Rng::from_seed(11);
    for case in 0..60 {
        let n = [50, 333, 5000][case % 3];
        let k = [1, 5, 40, 49][case % 4].min(n);
        // Quantised logits force many ties; ascending runs defeat the early threshold.
        let logits: Vec<f32> = (0..n)
            .map(|i| {
                if case % 5 == 0 {
                    i as f32 * 0.01
                } else {
                    (rng.next_f64() * 8.0).floor() as f32 - 4.0
                }
            })
            .collect();
        let history: Vec<u32> = (0..100)
            .map(|_| (rng.next_u64() % n as u64) as u32)
            .collect();
        let params = SamplerParams {
            temp: 1.0,
            top_k: k as i32,
            top_p: 1.0,
            min_p: 0.0,
            repeat_penalty: if case % 2 == 0 { 1.3 } else { 1.0 },
            frequency_penalty: if case % 3 == 0 { 0.2 } else { 0.0 },
            presence_penalty: 0.0,
            repeat_last_n: 64,
            seed: Some(1),
            ..SamplerParams::default()
        };
        let got: Vec<u32> = Sampler::new(params.clone())
            .probs(&logits, &history)
            .iter()
            .map(|x| x.0)
            .collect();
        assert_eq!(
            got,
            reference_top_k(&params, &logits, &history, k),
            "case {case}"
        );
        let greedy = SamplerParams {
            temp: 0.0,
            ..params.clone()
        };
        let want = reference_top_k(&params, &logits, &history, 1)[0];
        assert_eq!(
            Sampler::new(greedy).sample(&logits, &history),
            want,
            "case {case}"
        );
    }
}

/// top_p then min_p by brute force over a full sort, with no top_k: the surviving ids.
fn reference_nucleus(logits: &[f32], top_p: f32, min_p: f32) -> Vec<u32> {
    let mut v: Vec<(u32, f32)> = logits
        .iter()
        .enumerate()
        .map(|(i, &l)| (i as u32, l))
        .collect();
    v.sort_by(|a, b| b.1.partial_cmp(&a.1).unwrap().then(a.0.cmp(&b.0)));
    let max = v[0].1 as f64;
    let z: f64 = v.iter().map(|x| (x.1 as f64 - max).exp()).sum();
    let mut cum = 0.0;
    let mut keep = v.len();
    for (i, x) in v.iter().enumerate() {
        cum += (x.1 as f64 - max).exp() / z;
        if cum >= top_p as f64 {
            keep = i + 1;
            break;
        }
    }
    v.truncate(keep);
    if min_p > 0.0 {
        let floor = v[0].1 + min_p.ln();
        v.retain(|x| x.1 >= floor);
    }
    v.into_iter().map(|x| x.0).collect()
}

#[test]
fn top_p_and_min_p_without_top_k_match_a_full_sort_on_a_large_vocab() {
    let mut rng = Rng::from_seed(21);
    for case in 0..12 {
        let n = 20_000;
        // Spread 4: flat, the 256 best hold ~5% of the mass, so top_p falls back to a full
        // sort. Spread 300: the 256 best span ~3.8 nats and hold ~98%, so the partial sort
        // decides.
        let spread = if case % 2 == 0 { 4.0 } else { 300.0 };
        let logits: Vec<f32> = (0..n)
            .map(|_| ((rng.next_f64() * spread) as f32 * 8.0).round() / 8.0)
            .collect();
        let (top_p, min_p) = [(0.9, 0.0), (1.0, 0.05), (0.95, 0.05)][case % 3];
        let params = SamplerParams {
            temp: 1.0,
            top_k: 0,
            top_p,
            min_p,
            seed: Some(1),
            ..SamplerParams::default()
        };
        let got: Vec<u32> = Sampler::new(params)
            .probs(&logits, &[])
            .iter()
            .map(|x| x.0)
            .collect();
        assert_eq!(got, reference_nucleus(&logits, top_p, min_p), "case {case}");
    }
}

#[test]
fn logprobs_are_log_softmax_with_the_top_alternatives_in_order() {
    let logits = [1.0f32, 3.0, 3.0, -2.0, 0.5, f32::NEG_INFINITY];
    let z: f64 = logits.iter().map(|&l| (l as f64).exp()).sum();
    let want = |i: u32| ((logits[i as usize] as f64).exp() / z).ln() as f32;
    let r = logprobs(&logits, 4, 3);
    assert_eq!(r.id, 4);
    assert!((r.logprob - want(4)).abs() < 1e-6, "{r:?}");
    // The tie at 3.0 goes to the lower id.
    assert_eq!(r.top.iter().map(|t| t.0).collect::<Vec<_>>(), [1, 2, 0]);
    for &(i, l) in &r.top {
        assert!((l - want(i)).abs() < 1e-6, "{r:?}");
    }
    let none = logprobs(&logits, 5, 0);
    assert!(none.top.is_empty() && none.logprob == f32::NEG_INFINITY);
    // More alternatives than tokens: every token, impossible one last.
    let all = logprobs(&logits, 0, 20);
    assert_eq!(
        all.top.iter().map(|t| t.0).collect::<Vec<_>>(),
        [1, 2, 0, 4, 3, 5]
    );

    // A sampler records only once asked, every call, in order.
    let mut s = Sampler::new(SamplerParams::default());
    s.record(&logits, 1);
    let q = s.log_probs(2);
    s.record(&logits, 2);
    s.record(&logits, 0);
    let got: Vec<(u32, usize)> = q
        .lock()
        .unwrap()
        .iter()
        .map(|r| (r.id, r.top.len()))
        .collect();
    assert_eq!(got, [(2, 2), (0, 2)]);
}

/// Allows even token ids only, and counts what it was told was emitted.
#[derive(Clone, Debug, Default)]
struct EvenOnly {
    seen: Vec<u32>,
}

impl crate::constrain::Constraint for EvenOnly {
    fn allows(&self, id: u32) -> bool {
        id.is_multiple_of(2)
    }
    fn accept(&mut self, id: u32) {
        self.seen.push(id);
    }
    fn box_clone(&self) -> Box<dyn crate::constrain::Constraint> {
        Box::new(self.clone())
    }
}

#[test]
fn a_constraint_keeps_the_draw_it_allows_and_masks_the_rest() {
    let logits = [0.5f32, 3.0, 2.0, 2.5, -1.0, 1.0];
    let mut greedy = Sampler::new(SamplerParams {
        temp: 0.0,
        ..plain()
    });
    assert_eq!(greedy.sample(&logits, &[]), 1);
    greedy.constrain(Box::new(EvenOnly::default()));
    // The best allowed token, not the best one.
    assert_eq!(greedy.sample(&logits, &[]), 2);
    assert_eq!(greedy.sample(&[0.0, 0.0, 1.0, 0.0], &[]), 2);
    // Sampling: always an allowed token, each of them seen.
    let mut s = Sampler::new(SamplerParams {
        temp: 1.5,
        top_k: 0,
        top_p: 1.0,
        min_p: 0.0,
        seed: Some(7),
        ..plain()
    });
    s.constrain(Box::new(EvenOnly::default()));
    let mut seen = [0usize; 6];
    for _ in 0..600 {
        seen[s.sample(&logits, &[]) as usize] += 1;
    }
    assert!(seen.iter().skip(1).step_by(2).all(|&n| n == 0), "{seen:?}");
    assert!(seen.iter().step_by(2).all(|&n| n > 0), "{seen:?}");
}

#[test]
fn logit_bias_moves_and_bans_tokens() {
    let logits = [0.5f32, 3.0, 2.0, 2.5];
    let mut s = Sampler::new(SamplerParams {
        temp: 0.0,
        ..plain()
    });
    s.set_logit_bias(vec![(1, f32::NEG_INFINITY)]);
    assert_eq!(s.sample(&logits, &[]), 3);
    s.set_logit_bias(vec![(1, f32::NEG_INFINITY), (0, 2.1), (99, 50.0)]);
    assert_eq!(s.sample(&logits, &[]), 0);
    let p = s.probs(&logits, &[]);
    assert_eq!(p, [(0, 1.0)]);
    // Log-probabilities stay the model's own.
    let q = s.log_probs(0);
    let t = s.sample(&logits, &[]);
    s.record(&logits, t);
    let r = q.lock().unwrap()[0].clone();
    assert!((r.logprob - logprobs(&logits, 0, 0).logprob).abs() < 1e-7);
    assert!(r.logprob < logprobs(&logits, 1, 0).logprob);
}
