//! One self-speculative round (docs/DESIGN.md §4.2): draft → one batched verify pass
//! over `[t_n, d_1 … d_D]` → accept → commit (replay, docs/DESIGN.md §5) → the
//! accepted drafts + 1 tokens. [`Speculator::iterate`] owns the round only:
//! acceptance is in `verify`, drafting in `draft`, the choice of D in
//! `adaptive`; the loop around rounds is the engine's one generation loop
//! (`engine::generate` on a session, `engine::generate_tokens` on a bare model).
//!
//! ```text
//! let mut spec = Speculator::new(SpecConfig::default());
//! spec.iterate(&model, &mut state, &mut sampler, &mut DiffusionDrafter,
//!              &history, remaining, true, &mut out)?;   // out: accepted + 1 tokens
//! ```

use std::time::Instant;

use thiserror::Error;

use crate::model::{ForwardError, LogitsFor, Model, State};
use crate::sample::{softmax, Sampler};

use super::adaptive::{Adaptive, Why};
use super::draft::{DraftCtx, Drafter};
use super::stats::SpecStats;
use super::verify::{accept_greedy, accept_sampled, dense, residual, Relaxation, Verdict};

/// How the loop drafts and accepts.
#[derive(Clone, Debug, PartialEq)]
pub struct SpecConfig {
    /// Speculate at all (`--spec-type draft-self`); off = plain decoding.
    pub enabled: bool,
    /// `--spec-draft-n-max` (15) and `--spec-draft-n-min` (0).
    pub n_max: usize,
    pub n_min: usize,
    /// `--spec-draft-p-min`: cut the draft at the first position whose draft
    /// probability is below this (0 = never).
    pub p_min: f32,
    /// Choose D from measured acceptance and costs (else always `n_max`).
    pub adaptive: bool,
    /// `--spec-accept-ratio` (1 = exact) and `--spec-accept-delta` (nats):
    /// the entropy-relaxed greedy rule, greedy only.
    pub accept_ratio: f32,
    pub accept_delta: f32,
    /// Tokens to generate (`-n`), the first one included.
    pub n_predict: usize,
    /// Stop after emitting any of these (end of generation).
    pub stop: Vec<u32>,
}

impl Default for SpecConfig {
    fn default() -> SpecConfig {
        SpecConfig {
            enabled: true,
            n_max: 15,
            n_min: 0,
            p_min: 0.0,
            adaptive: true,
            accept_ratio: 1.0,
            accept_delta: 0.0,
            n_predict: 128,
            stop: Vec::new(),
        }
    }
}

#[derive(Debug, Error)]
pub enum SpecError {
    #[error(transparent)]
    Forward(#[from] ForwardError),
    #[error("the prompt is empty")]
    EmptyPrompt,
    #[error("--spec-draft-n-min {n_min} exceeds --spec-draft-n-max {n_max}")]
    DraftRange { n_min: usize, n_max: usize },
    #[error("a draft of {0} tokens does not fit the batch size")]
    DraftTooLong(usize),
}

/// A round's state across rounds: configuration, the adaptive controllers
/// (one per stage of the drafter: a chain prices each of its drafters on its
/// own) and the statistics. `iterate` is one draft → verify → accept → commit round;
/// the session's step (`engine::SpecStep`) and `engine::generate_tokens` call it.
#[derive(Debug)]
pub struct Speculator {
    pub cfg: SpecConfig,
    pub stats: SpecStats,
    adaptive: Vec<Adaptive>,
}

impl Speculator {
    pub fn new(cfg: SpecConfig) -> Speculator {
        Speculator {
            stats: SpecStats::new(cfg.n_max),
            adaptive: vec![Adaptive::new(cfg.n_min, cfg.n_max)],
            cfg,
        }
    }

    /// Zeroes the statistics; the adaptive controller keeps what it learnt.
    pub fn reset_stats(&mut self) {
        self.stats = SpecStats::new(self.cfg.n_max);
    }

    /// One iteration. `history` is every token so far; its last is the
    /// anchor t_n, not yet in `state` (which holds `history.len() − 1`
    /// positions). Pushes accepted + 1 tokens to `out` (at most `remaining`):
    /// all but the last are committed to `state`, the last is the new anchor.
    ///
    /// `draft` false makes this round a plain step whatever the configuration
    /// (a caller's timed probe of the plain cost).
    #[allow(clippy::too_many_arguments)]
    pub fn iterate(
        &mut self,
        model: &Model,
        state: &mut State,
        sampler: &mut Sampler,
        drafter: &mut dyn Drafter,
        history: &[u32],
        remaining: usize,
        draft: bool,
        out: &mut Vec<u32>,
    ) -> Result<(), SpecError> {
        let stages = if self.cfg.adaptive {
            drafter.stages().max(1)
        } else {
            1
        };
        if self.adaptive.len() != stages {
            let (n_min, n_max) = (self.cfg.n_min, self.cfg.n_max);
            self.adaptive
                .resize_with(stages, || Adaptive::new(n_min, n_max));
        }
        let cfg = &self.cfg;
        let stats = &mut self.stats;
        let adaptive = &mut self.adaptive;
        let anchor = *history.last().ok_or(SpecError::EmptyPrompt)?;
        let n = state.n_past();
        let sampling = sampler.params().temp > 0.0;
        let relax = (!sampling && cfg.accept_ratio < 1.0).then_some(Relaxation {
            ratio: cfg.accept_ratio,
            delta: cfg.accept_delta,
        });
        // Room: the emitted count (every iteration emits accepted + 1) and
        // the context (the verify pass holds D+1 positions from n).
        let room_ctx = state.kv.n_ctx().saturating_sub(n + 1);
        let cap = remaining
            .saturating_sub(1)
            .min(room_ctx)
            .min(state.max_batch.saturating_sub(1));

        // Stage by stage (a chain's drafters in order, each priced by its
        // own controller): the first that chooses to draft and proposes
        // drafts takes the round; when none does, it is a plain step.
        let mut drafts = super::draft::Draft::default();
        let mut stage = 0;
        let mut chose_plain = true;
        let stages_asked = if cfg.enabled && draft { stages } else { 0 };
        for (s, a) in adaptive.iter_mut().enumerate().take(stages_asked) {
            let d_want = if cfg.adaptive {
                let d = a.choose(cap);
                if a.why != Why::NoRoom {
                    stats.why = Some(a.why);
                }
                d
            } else if cap >= cfg.n_min.max(1) {
                stats.why = Some(Why::Fixed);
                cfg.n_max.min(cap)
            } else {
                0
            };
            if d_want == 0 {
                // A timed plain step, or no room: the round is plain
                // whatever the later stages would choose.
                if matches!(a.why, Why::Probe | Why::NoRoom | Why::Measuring) {
                    break;
                }
                continue;
            }
            chose_plain = false;
            let t0 = Instant::now();
            let ctx = DraftCtx {
                model,
                state: &mut *state,
                anchor,
                pos: n,
                n_max: d_want,
                p_min: cfg.p_min,
                history,
                sampler: &mut *sampler,
                sampling,
            };
            drafts = match stages {
                1 => drafter.draft(ctx)?,
                _ => drafter.draft_stage(s, ctx)?,
            };
            drafts.tokens.truncate(d_want);
            let ns = t0.elapsed().as_nanos() as u64;
            stats.draft_ns += ns;
            stats.draft_passes += 1;
            // A drafter catching up on plain steps did not pay that for
            // drafting: the controller prices the draft without it.
            let catch_up = drafter.take_catch_up_ns().min(ns);
            a.record_draft(d_want + 1, ns - catch_up);
            if drafts.tokens.len() >= cfg.n_min.max(1) {
                stats.explore_rounds += (cfg.adaptive && a.why == Why::Explore) as u64;
                stage = s;
                break;
            }
            drafts.tokens.clear();
        }
        stats.plain_chosen += (stages_asked > 0 && cfg.adaptive && chose_plain) as u64;

        if drafts.tokens.is_empty() {
            // Plain decoding step.
            let t0 = Instant::now();
            let logits = model.forward(state, &[anchor], n, LogitsFor::Last)?;
            let next = sampler.sample(logits, history);
            sampler.record(logits, next);
            let ns = t0.elapsed().as_nanos() as u64;
            stats.plain_ns += ns;
            stats.plain_passes += 1;
            for a in adaptive.iter_mut() {
                a.record_plain(ns);
            }
            out.push(next);
            return Ok(());
        }

        // Verify pass over [t_n, d_1 … d_D].
        let d = drafts.tokens.len();
        let mut block = Vec::with_capacity(d + 1);
        block.push(anchor);
        block.extend_from_slice(&drafts.tokens);
        let t0 = Instant::now();
        let v = model.n_vocab();
        let ys = model.forward_verify(state, &block, n, LogitsFor::All)?;
        let verify_ns = t0.elapsed().as_nanos() as u64;
        stats.verify_ns += verify_ns;
        stats.verify_passes += 1;

        // Accept d_{j+1} against y_j until the first rejection.
        let mut accepted = 0;
        let mut relaxed = 0;
        let mut next = None;
        let mut hist = history.to_vec();
        for j in 0..d {
            let y = &ys[j * v..(j + 1) * v];
            let dj = drafts.tokens[j];
            if sampling {
                let p = dense(&sampler.probs(y, &hist), v);
                let q = &drafts.dists[j];
                if accept_sampled(dj, &p, q, sampler.uniform()) {
                    accepted += 1;
                    hist.push(dj);
                    sampler.record(y, dj);
                } else {
                    let t = sampler.sample_from(&residual(&p, q));
                    sampler.record(y, t);
                    next = Some(t);
                    break;
                }
            } else {
                let verdict = match relax {
                    Some(_) => accept_greedy(dj, &softmax(y), relax),
                    None if super::verify::accept_exact(dj, y) => Verdict::Exact,
                    None => Verdict::Rejected,
                };
                if verdict.accepted() {
                    accepted += 1;
                    relaxed += (verdict == Verdict::Relaxed) as usize;
                    hist.push(dj);
                    sampler.record(y, dj);
                } else {
                    let t = sampler.sample(y, &hist);
                    sampler.record(y, t);
                    next = Some(t);
                    break;
                }
            }
        }
        let next = match next {
            Some(t) => t,
            None => {
                let y = &ys[d * v..(d + 1) * v];
                let t = sampler.sample(y, &hist);
                sampler.record(y, t);
                t
            }
        };
        stats.record_iteration(d, accepted, relaxed);

        // Keep the anchor and the accepted drafts (docs/DESIGN.md §5 replay).
        let t1 = Instant::now();
        model.commit_verify(state, accepted + 1)?;
        stats.rollback_ns += t1.elapsed().as_nanos() as u64;
        // The controller prices the round's whole cost after drafting: the
        // pass, the acceptance and the commit (a plain step's price holds
        // its sampling too).
        let round_ns = t0.elapsed().as_nanos() as u64;
        adaptive[stage].record_verify(d + 1, round_ns, d, accepted);
        out.extend_from_slice(&drafts.tokens[..accepted]);
        out.push(next);
        Ok(())
    }
}
