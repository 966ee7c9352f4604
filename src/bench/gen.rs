//! Greedy-generation tests for `clover bench --spec-type`: what self-speculation
//! buys in wall-clock time, measured the same way for both decoders.
//!
//! - **tgN greedy**: plain greedy decoding of N tokens after a text prompt
//!   (`engine::generate_tokens` with speculation off: one forward per token).
//! - **tgN draft-self**: the same N tokens through the self-speculative loop
//!   (diffusion draft → batched verify → commit, DESIGN §4.2), exact greedy
//!   acceptance, so the tokens are identical to the plain run's.
//!
//! One `Speculator` serves the untimed warm-up and every repetition, so the
//! adaptive controller's estimates carry over and the repetitions measure the
//! steady state (as a chat's later turns do).
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
use crate::spec::{DiffusionDrafter, Drafter, SpecConfig, SpecStats, Speculator};

use super::report::{TestResult, TestSpec};
use super::{BenchError, Measured};

/// How a generation test decodes.
#[derive(Clone, Debug, PartialEq)]
pub struct GenMode {
    /// Self-speculation on (`draft-self`) or plain greedy.
    pub draft_self: bool,
    /// How drafts are made and accepted (`clover bench`'s `--spec-*` flags).
    pub spec: SpecConfig,
    /// Simulated acceptance (`--spec-replay`): the drafts' acceptance follows
    /// this profile (the passes still run for real; see `spec::replay`).
    pub replay: Option<Profile>,
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

/// Runs one generation test `reps` times after one untimed warm-up (call
/// inside the pool of `spec.n_threads`).
#[allow(clippy::too_many_arguments)]
pub fn run_gen_test(
    model: &Model,
    spec: TestSpec,
    reps: usize,
    type_k: GgmlType,
    type_v: GgmlType,
    prompt: &[u32],
    mode: GenMode,
) -> Result<GenMeasured, BenchError> {
    let n_gen = spec.n_gen;
    let mut state = model.new_state(StateOptions {
        n_ctx: prompt.len() + n_gen + mode.spec.n_max + 2,
        max_batch: spec.n_ubatch.min(spec.n_batch).max(mode.spec.n_max + 1),
        type_k,
        type_v,
    })?;
    let cfg = SpecConfig {
        enabled: mode.draft_self,
        n_predict: n_gen + 1,
        stop: Vec::new(),
        ..mode.spec.clone()
    };
    let run =
        |state: &mut crate::model::State, spec: &mut Speculator, drafter: &mut dyn Drafter| {
            state.reset();
            let mut sampler = Sampler::new(SamplerParams::greedy());
            generate_tokens_with(
                spec,
                model,
                state,
                prompt,
                &mut sampler,
                drafter,
                &mut |_| true,
            )
        };
    // One speculator for the warm-up and every repetition: the adaptive
    // controller learns its costs and acceptance in the untimed warm-up, and
    // the repetitions measure the steady state (as a chat's later turns).
    let mut speculator = Speculator::new(cfg.clone());
    // The first generation's time (the bench's "first token" line).
    let t0 = std::time::Instant::now();
    let mut first_forward_ns = None;
    let replay = match &mode.replay {
        Some(profile) => {
            // A plain warm-up first: its tokens are the continuation the
            // replaying drafter proposes.
            let mut plain = Speculator::new(SpecConfig {
                enabled: false,
                ..cfg.clone()
            });
            let warm = run(&mut state, &mut plain, &mut DiffusionDrafter)?;
            first_forward_ns = Some(t0.elapsed().as_nanos() as u64);
            let mut seq = prompt.to_vec();
            seq.extend_from_slice(&warm.tokens);
            Some((seq, profile))
        }
        None => None,
    };
    let mut samples = Vec::with_capacity(reps);
    let mut stats = SpecStats::new(mode.spec.n_max);
    let mut tokens = Vec::new();
    // Repetition 0 is the warm-up.
    for rep in 0..=reps {
        let g = match &replay {
            Some((seq, profile)) => {
                let mut d = ReplayDrafter::new(
                    DiffusionDrafter,
                    seq.clone(),
                    (*profile).clone(),
                    rep as u64,
                );
                run(&mut state, &mut speculator, &mut d)?
            }
            None => run(&mut state, &mut speculator, &mut DiffusionDrafter)?,
        };
        if rep == 0 {
            first_forward_ns.get_or_insert(t0.elapsed().as_nanos() as u64);
            continue;
        }
        samples.push(g.stats.total_ns.max(1));
        add_stats(&mut stats, &g.stats);
        tokens = g.tokens;
    }
    Ok(GenMeasured {
        measured: Measured {
            result: TestResult {
                spec,
                samples_ns: samples,
            },
            traffic: None,
            first_forward_ns: first_forward_ns.unwrap_or(0),
        },
        stats,
        tokens,
    })
}
