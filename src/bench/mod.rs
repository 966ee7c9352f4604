//! `clover bench`'s measuring rig, llama-bench style.
//!
//! - **pp**: one forward of `n_prompt` random tokens (fixed seed) from an empty
//!   state, after `n_depth` untimed tokens of context; batches of `n_ubatch`.
//! - **tg**: `n_gen` single-token forward steps with random tokens, from an
//!   empty state (after the depth context), as llama-bench's `test_gen`.
//! - Before the repetitions one warm-up: the whole prompt for pp, one token
//!   for tg (llama-bench does the same). Each repetition starts from `reset()`.
//!
//! Timings run on a rayon pool of `n_threads` threads.

pub mod gen;
pub mod membw;
pub mod passes;
pub mod report;
pub mod traffic;

use std::time::Instant;

use kernels::GgmlType;

use crate::model::{ForwardError, LogitsFor, Model, State, StateError, StateOptions};

pub use report::{Decode, ModelInfo, TestResult, TestSpec};
pub use traffic::Traffic;

/// Random token ids in `0..n_vocab` from a fixed seed (splitmix64).
#[derive(Clone, Debug)]
pub struct TokenRng(u64);

impl TokenRng {
    pub fn new(seed: u64) -> TokenRng {
        TokenRng(seed)
    }

    pub fn next_token(&mut self, n_vocab: usize) -> u32 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z % n_vocab as u64) as u32
    }

    pub fn tokens(&mut self, n: usize, n_vocab: usize) -> Vec<u32> {
        (0..n).map(|_| self.next_token(n_vocab)).collect()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error(transparent)]
    State(#[from] StateError),
    #[error(transparent)]
    Forward(#[from] ForwardError),
    #[error(transparent)]
    Engine(#[from] crate::engine::EngineError),
}

/// A test's samples plus, for tg, the traffic of its last repetition.
#[derive(Debug)]
pub struct Measured {
    pub result: TestResult,
    pub traffic: Option<Traffic>,
    /// Nanoseconds of the first forward call of this test (the warm-up).
    pub first_forward_ns: u64,
    /// With `profile`: time and bytes by op kind over the timed repetitions.
    pub profile: Option<crate::model::profile::Profile>,
}

/// Runs one test `reps` times (call inside the pool of `spec.n_threads`);
/// with `profile`, the timed parts run under the op profiler
/// ([`crate::model::profile`]).
pub fn run_test(
    model: &Model,
    spec: TestSpec,
    reps: usize,
    (type_k, type_v): (GgmlType, GgmlType),
    seed: u64,
    profile: bool,
) -> Result<Measured, BenchError> {
    use crate::model::profile as prof;
    let n_vocab = model.n_vocab();
    let mut state = model.new_state(StateOptions {
        n_ctx: (spec.n_depth + spec.n_prompt + spec.n_gen).max(1),
        max_batch: spec.n_ubatch.min(spec.n_batch).max(1),
        type_k,
        type_v,
        mtp: false,
    })?;
    let mut rng = TokenRng::new(seed);

    // Warm-up: the whole prompt, or one decode step.
    let t0 = Instant::now();
    if spec.n_prompt > 0 {
        let toks = rng.tokens(spec.n_prompt, n_vocab);
        model.forward(&mut state, &toks, 0, LogitsFor::Last)?;
    } else if spec.n_gen > 0 {
        let tok = rng.next_token(n_vocab);
        model.forward(&mut state, &[tok], 0, LogitsFor::Last)?;
    }
    let first_forward_ns = t0.elapsed().as_nanos() as u64;

    let mut samples = Vec::with_capacity(reps);
    let mut profiled = None;
    for _ in 0..reps {
        state.reset();
        if spec.n_depth > 0 {
            let ctx = rng.tokens(spec.n_depth, n_vocab);
            model.forward(&mut state, &ctx, 0, LogitsFor::Last)?;
        }
        state.stats.clear();
        if profile {
            prof::start();
        }
        let t = Instant::now();
        let r = run_timed(model, &mut state, spec, &mut rng);
        samples.push(t.elapsed().as_nanos() as u64);
        if profile {
            let p = prof::finish();
            profiled.get_or_insert_with(prof::Profile::default).add(&p);
        }
        r?;
    }
    let traffic = (spec.n_gen > 0 && spec.n_prompt == 0)
        .then(|| traffic::decode_traffic(model, &state, spec.n_depth, spec.n_gen));
    Ok(Measured {
        result: TestResult {
            spec,
            samples_ns: samples,
        },
        traffic,
        first_forward_ns,
        profile: profiled,
    })
}

/// The timed part: the prompt, then the decode steps.
fn run_timed(
    model: &Model,
    state: &mut State,
    spec: TestSpec,
    rng: &mut TokenRng,
) -> Result<(), ForwardError> {
    let n_vocab = model.n_vocab();
    if spec.n_prompt > 0 {
        let toks = rng.tokens(spec.n_prompt, n_vocab);
        let pos = state.n_past();
        model.forward(state, &toks, pos, LogitsFor::Last)?;
    }
    for _ in 0..spec.n_gen {
        let tok = rng.next_token(n_vocab);
        let pos = state.n_past();
        model.forward(state, &[tok], pos, LogitsFor::Last)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_rng_is_deterministic_and_in_range() {
        let a = TokenRng::new(7).tokens(1000, 448);
        let b = TokenRng::new(7).tokens(1000, 448);
        assert_eq!(a, b);
        assert!(a.iter().all(|&t| t < 448));
        // Not constant: at least half the vocabulary is hit.
        let mut seen = [false; 448];
        a.iter().for_each(|&t| seen[t as usize] = true);
        assert!(seen.iter().filter(|&&s| s).count() > 224);
        assert_ne!(TokenRng::new(8).tokens(16, 448), a[..16].to_vec());
    }
}
