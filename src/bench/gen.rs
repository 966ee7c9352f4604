//! Greedy-generation tests for `clover bench --spec-type`: what self-speculation
//! buys in wall-clock time, measured the same way for both decoders.
//!
//! - **tgN greedy**: plain greedy decoding of N tokens after a text prompt
//!   (`engine::generate_tokens` with speculation off: one forward per token).
//! - **tgN draft-self**: the same N tokens through the self-speculative loop
//!   (diffusion draft → batched verify → commit, docs/DESIGN.md §4.2), exact greedy
//!   acceptance, so the tokens are identical to the plain run's.
//!
//! One `Speculator` serves the untimed warm-up and every repetition, so the
//! adaptive controller's estimates carry over and the repetitions measure the
//! steady state (as a chat's later turns do). The modes of one test run their
//! repetitions interleaved ([`GenRunner`]): a machine whose speed drifts
//! during the run slows each mode alike, so their ratio holds.
//!
//! Random token ids (llama-bench's tg) would make every draft wrong, so these
//! tests decode real text. The prompt is processed before the clock starts;
//! the clock covers the decode loop only (`SpecStats::total_ns`), and the loop
//! is asked for N + 1 tokens so that it emits exactly N after the first (which
//! comes from the prompt pass). End-of-generation tokens do not stop the run.

use kernels::GgmlType;

use crate::engine::generate_tokens_with;
use crate::model::{Model, StateOptions};
use crate::sample::{Sampler, SamplerParams};
use crate::spec::replay::{Profile, ReplayDrafter};
use crate::spec::{DiffusionDrafter, Drafter, SpecChoice, SpecConfig, SpecStats, Speculator};

use super::report::{TestResult, TestSpec};
use super::{BenchError, Measured};

/// How a generation test decodes.
#[derive(Clone, Debug, PartialEq)]
pub struct GenMode {
    /// What drafts (`none`: plain decoding).
    pub choice: SpecChoice,
    /// How drafts are made and accepted (`clover bench`'s `--spec-*` flags).
    pub spec: SpecConfig,
    /// Simulated acceptance (`--spec-replay`): the drafts' acceptance follows
    /// this profile (the passes still run for real; see `spec::replay`).
    pub replay: Option<Profile>,
    /// Sampling temperature (`--gen-temp`; 0 = greedy). Above 0 each
    /// repetition draws from a fixed seed, llama.cpp's default chain.
    pub temp: f32,
}

/// The measured repetitions, and the speculation statistics summed over them.
#[derive(Debug)]
pub struct GenMeasured {
    pub measured: Measured,
    pub stats: SpecStats,
    /// The tokens of the last repetition (equal across repetitions and modes).
    pub tokens: Vec<u32>,
}

fn add_stats(sum: &mut SpecStats, s: &SpecStats) {
    let add = |a: &mut Vec<u64>, b: &[u64]| {
        if a.len() < b.len() {
            a.resize(b.len(), 0);
        }
        for (x, y) in a.iter_mut().zip(b) {
            *x += y;
        }
    };
    sum.drafts_proposed += s.drafts_proposed;
    sum.drafts_accepted += s.drafts_accepted;
    sum.accepted_relaxed += s.accepted_relaxed;
    add(&mut sum.proposed_by_pos, &s.proposed_by_pos);
    add(&mut sum.accepted_by_pos, &s.accepted_by_pos);
    add(&mut sum.reached_by_pos, &s.reached_by_pos);
    add(&mut sum.accepted_len_hist, &s.accepted_len_hist);
    sum.draft_passes += s.draft_passes;
    sum.verify_passes += s.verify_passes;
    sum.plain_passes += s.plain_passes;
    sum.tokens_emitted += s.tokens_emitted;
    sum.draft_ns += s.draft_ns;
    sum.verify_ns += s.verify_ns;
    sum.rollback_ns += s.rollback_ns;
    sum.plain_ns += s.plain_ns;
    sum.total_ns += s.total_ns;
    sum.explore_rounds += s.explore_rounds;
    sum.plain_chosen += s.plain_chosen;
    sum.why = s.why;
}

/// One generation test, set up (its state, speculator and, with replayed
/// acceptance, the known continuation) and warmed up, ready to run timed
/// repetitions one at a time: `clover bench` interleaves the repetitions of
/// the modes of one test, so that a machine's drifting speed weighs on each
/// mode alike and their ratio holds (call inside the pool of `spec.n_threads`).
pub struct GenRunner<'a, 'm> {
    model: &'a Model<'m>,
    params: SamplerParams,
    spec: TestSpec,
    prompt: &'a [u32],
    state: crate::model::State,
    speculator: Speculator,
    /// What drafts (`None` once taken for a run, and for plain decoding).
    drafter: Option<Box<dyn Drafter + Send>>,
    /// With replayed acceptance: the plain continuation and the profile.
    replay: Option<(Vec<u32>, Profile)>,
    first_forward_ns: u64,
    samples: Vec<u64>,
    stats: SpecStats,
    tokens: Vec<u32>,
    reps: u64,
}

impl<'a, 'm> GenRunner<'a, 'm> {
    /// Sets the test up and runs its untimed warm-up: one speculator serves the
    /// warm-up and every repetition, so the adaptive controller learns its
    /// costs and acceptance untimed and the repetitions measure the steady
    /// state (as a chat's later turns). With replayed acceptance a plain
    /// warm-up comes first: its tokens are the continuation the replaying
    /// drafter proposes.
    pub fn new(
        model: &'a Model<'m>,
        spec: TestSpec,
        type_k: GgmlType,
        type_v: GgmlType,
        prompt: &'a [u32],
        mode: GenMode,
    ) -> Result<Self, BenchError> {
        let n_gen = spec.n_gen;
        let state = model.new_state(StateOptions {
            n_ctx: prompt.len() + n_gen + mode.spec.n_max + 2,
            max_batch: spec.n_ubatch.min(spec.n_batch).max(mode.spec.n_max + 1),
            type_k,
            type_v,
            mtp: mode.choice.needs_mtp(),
        })?;
        let cfg = SpecConfig {
            enabled: !mode.choice.is_none(),
            n_predict: n_gen + 1,
            stop: Vec::new(),
            ..mode.spec.clone()
        };
        let params = match mode.temp {
            t if t > 0.0 => SamplerParams {
                temp: t,
                seed: Some(42),
                ..SamplerParams::default()
            },
            _ => SamplerParams::greedy(),
        };
        let mut r = GenRunner {
            model,
            params,
            spec,
            prompt,
            state,
            speculator: Speculator::new(cfg.clone()),
            drafter: mode.choice.drafter(),
            replay: None,
            first_forward_ns: 0,
            samples: Vec::new(),
            stats: SpecStats::new(mode.spec.n_max),
            tokens: Vec::new(),
            reps: 0,
        };
        let t0 = std::time::Instant::now();
        if let Some(profile) = mode.replay {
            let mut plain = Speculator::new(SpecConfig {
                enabled: false,
                ..cfg
            });
            let warm = r.generate(Some(&mut plain), &mut DiffusionDrafter)?;
            let mut seq = prompt.to_vec();
            seq.extend_from_slice(&warm.tokens);
            r.replay = Some((seq, profile));
        }
        r.run_once()?;
        r.first_forward_ns = t0.elapsed().as_nanos() as u64;
        Ok(r)
    }

    /// One generation from an empty state, on the runner's speculator (or
    /// on `other`: the plain warm-up of a replay).
    fn generate(
        &mut self,
        other: Option<&mut Speculator>,
        drafter: &mut dyn Drafter,
    ) -> Result<crate::engine::TokenGeneration, BenchError> {
        self.state.reset();
        let spec = other.unwrap_or(&mut self.speculator);
        let mut sampler = Sampler::new(self.params.clone());
        Ok(generate_tokens_with(
            spec,
            self.model,
            &mut self.state,
            self.prompt,
            &mut sampler,
            drafter,
            &mut |_| true,
        )?)
    }

    fn run_once(&mut self) -> Result<crate::engine::TokenGeneration, BenchError> {
        let g = match self.replay.clone() {
            Some((seq, profile)) => {
                // The choice's own drafter runs for its cost (draft-self's
                // diffusion pass, the MTP block's steps).
                let inner: Box<dyn Drafter + Send> = match self.drafter.take() {
                    Some(d) => d,
                    None => Box::new(DiffusionDrafter),
                };
                let mut d = ReplayDrafter::new(inner, seq, profile, self.reps);
                let g = self.generate(None, &mut d);
                self.drafter = Some(d.inner);
                g
            }
            None => {
                let mut drafter = self.drafter.take();
                let g = match drafter.as_mut() {
                    Some(d) => self.generate(None, d),
                    None => self.generate(None, &mut DiffusionDrafter),
                };
                self.drafter = drafter;
                g
            }
        };
        self.reps += 1;
        g
    }

    /// One timed repetition.
    pub fn rep(&mut self) -> Result<(), BenchError> {
        let g = self.run_once()?;
        self.samples.push(g.stats.total_ns.max(1));
        add_stats(&mut self.stats, &g.stats);
        self.tokens = g.tokens;
        Ok(())
    }

    pub fn finish(self) -> GenMeasured {
        GenMeasured {
            measured: Measured {
                result: TestResult {
                    spec: self.spec,
                    samples_ns: self.samples,
                },
                traffic: None,
                first_forward_ns: self.first_forward_ns,
                profile: None,
            },
            stats: self.stats,
            tokens: self.tokens,
        }
    }
}
