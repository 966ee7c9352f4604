//! Per-pass costs of self-speculation: a plain one-token decode step against
//! a verify pass (`forward_verify` over k tokens, then `commit_verify` of
//! one), a draft pass (`forward_diffusion` over the anchor and k − 1
//! masks, logits of the k − 1 drafts, with a diffusion model) and an MTP
//! draft of k tokens (with an MTP block: the anchor's entry, then k − 1
//! chained steps, the block's cache otherwise up to date), each at the same
//! context depth.
//!
//! Every repetition times every pass kind and length once, interleaved, so
//! a machine whose load changes during the run skews all of them alike.
//! Reported per (kind, k): the median over repetitions and its ratio to the
//! median plain step.

use std::time::Instant;

use super::{BenchError, TokenRng};
use crate::model::profile::{self as prof, Profile};
use crate::model::{ForwardError, LogitsFor, Model, StateOptions};

/// What one timed pass runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PassKind {
    /// One token through `forward` (a plain decode step).
    Plain,
    /// `forward_verify` over k tokens plus `commit_verify` of one.
    Verify,
    /// `forward_diffusion` over the anchor and k − 1 masks.
    Draft,
    /// k drafts through the MTP block: `mtp_sync` of the anchor's entry,
    /// k − 1 `mtp_step`s.
    Mtp,
}

impl PassKind {
    pub fn name(self) -> &'static str {
        match self {
            PassKind::Plain => "plain",
            PassKind::Verify => "verify",
            PassKind::Draft => "draft",
            PassKind::Mtp => "mtp",
        }
    }
}

/// The samples of one pass kind and length.
#[derive(Clone, Debug)]
pub struct PassCost {
    pub kind: PassKind,
    pub tokens: usize,
    pub samples_ns: Vec<u64>,
    /// With profiling: time and bytes by op kind over the timed samples.
    pub profile: Option<Profile>,
}

impl PassCost {
    pub fn median_ns(&self) -> f64 {
        median(&self.samples_ns)
    }
}

/// The median of `v` (0 for none).
pub fn median(v: &[u64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let mut s = v.to_vec();
    s.sort_unstable();
    let m = s.len() / 2;
    if s.len() % 2 == 1 {
        s[m] as f64
    } else {
        (s[m - 1] + s[m]) as f64 / 2.0
    }
}

/// Times the plain step and, per k in `lengths`, the verify pass and the
/// drafts the model can make (diffusion, MTP), `reps` times interleaved,
/// after `depth` random tokens of context (call inside the thread pool to
/// measure with). With `profile`, each timed pass also runs under the op
/// profiler ([`prof`]), collected per kind and length.
pub fn pass_costs(
    model: &Model,
    lengths: &[usize],
    depth: usize,
    reps: usize,
    seed: u64,
    profile: bool,
) -> Result<Vec<PassCost>, BenchError> {
    let mask = model.config.mask_token_id.filter(|_| model.has_diffusion());
    let mut kinds = vec![PassKind::Verify];
    kinds.extend(mask.map(|_| PassKind::Draft));
    kinds.extend(model.has_mtp().then_some(PassKind::Mtp));
    if kinds.len() == 1 {
        return Err(ForwardError::NoDiffusion.into());
    }
    let kmax = lengths.iter().copied().max().unwrap_or(1).max(1);
    let n_vocab = model.n_vocab();
    let mut rng = TokenRng::new(seed);
    // Each repetition advances the context by one token per verify, fused
    // and plain pass (the committed anchor), so leave room for all of them
    // and a fused pass's block.
    let n_ctx = depth.max(1) + 2 * kmax + (reps + 1) * (2 * lengths.len() + 1) + 1;
    let mut state = model.new_state(StateOptions {
        max_batch: 2 * kmax + 1,
        mtp: model.has_mtp(),
        ..StateOptions::new(n_ctx)
    })?;
    // Every token the state holds, for the MTP block's cache.
    let mut hist = rng.tokens(depth.max(1), n_vocab);
    model.forward(&mut state, &hist, 0, LogitsFor::Last)?;
    let mut out = vec![PassCost {
        kind: PassKind::Plain,
        tokens: 1,
        samples_ns: Vec::new(),
        profile: None,
    }];
    for &k in lengths {
        for &kind in &kinds {
            out.push(PassCost {
                kind,
                tokens: k,
                samples_ns: Vec::new(),
                profile: None,
            });
        }
    }
    // One untimed round warms caches and scratch.
    for rep in 0..=reps {
        for cost in out.iter_mut() {
            let k = cost.tokens;
            let pos = state.n_past();
            let profiled = profile && rep > 0;
            if cost.kind == PassKind::Mtp {
                // The cache up to the position before the anchor, as the
                // loop leaves it after a round (untimed, unprofiled).
                hist.push(rng.next_token(n_vocab));
                model.mtp_sync(&mut state, &hist)?;
            }
            if profiled {
                prof::start();
            }
            let ns = match cost.kind {
                PassKind::Plain => {
                    let tok = rng.next_token(n_vocab);
                    let t = Instant::now();
                    model.forward(&mut state, &[tok], pos, LogitsFor::Last)?;
                    hist.push(tok);
                    t.elapsed().as_nanos() as u64
                }
                PassKind::Verify => {
                    let toks = rng.tokens(k, n_vocab);
                    let t = Instant::now();
                    model.forward_verify(&mut state, &toks, pos, LogitsFor::All)?;
                    model.commit_verify(&mut state, 1)?;
                    hist.push(toks[0]);
                    t.elapsed().as_nanos() as u64
                }
                PassKind::Mtp => {
                    let t = Instant::now();
                    let mut tok = crate::sample::argmax(model.mtp_sync(&mut state, &hist)?);
                    for _ in 1..k {
                        tok = crate::sample::argmax(model.mtp_step(&mut state, tok)?);
                    }
                    model.mtp_truncate(&mut state, pos + 1);
                    let ns = t.elapsed().as_nanos() as u64;
                    hist.pop();
                    ns
                }
                PassKind::Draft => {
                    let mask = mask.expect("a draft kind only with the diffusion path");
                    let mut block = vec![mask; k];
                    block[0] = rng.next_token(n_vocab);
                    let rows: Vec<usize> = (0..k.saturating_sub(1)).collect();
                    let t = Instant::now();
                    model.forward_diffusion(&mut state, &block, pos, LogitsFor::Indices(&rows))?;
                    t.elapsed().as_nanos() as u64
                }
            };
            if profiled {
                let p = prof::finish();
                cost.profile.get_or_insert_with(Profile::default).add(&p);
            }
            if rep > 0 {
                cost.samples_ns.push(ns);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::tiny::{tiny_config, TinyModel};

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&[5, 1, 3]), 3.0);
        assert_eq!(median(&[4, 1, 3, 2]), 2.5);
        assert_eq!(median(&[]), 0.0);
    }

    #[test]
    fn every_pass_kind_and_length_gets_one_sample_per_repetition() {
        let tm = TinyModel::random(tiny_config(4, 2), 3);
        let model = tm.model();
        let costs = pass_costs(&model, &[2, 4], 5, 3, 1, false).unwrap();
        let kinds: Vec<(PassKind, usize)> = costs.iter().map(|c| (c.kind, c.tokens)).collect();
        assert_eq!(
            kinds,
            [
                (PassKind::Plain, 1),
                (PassKind::Verify, 2),
                (PassKind::Draft, 2),
                (PassKind::Verify, 4),
                (PassKind::Draft, 4)
            ]
        );
        assert!(costs.iter().all(|c| c.samples_ns.len() == 3));
    }
}
