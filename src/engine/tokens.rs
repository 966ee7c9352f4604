//! Generation on a bare model and state, in token ids: the same loop as
//! [`super::generate()`] ([`super::generate::drive`]) without a session, a
//! tokenizer or text. Each step is one [`Speculator::iterate`] round (a plain
//! step when speculation is off or does not pay). The oracle tests of
//! speculation (`tests/spec_greedy.rs`, `tests/spec_sampling.rs`) and
//! `clover bench`'s generation tests run on it.
//!
//! ```text
//! let g = generate_tokens(&model, &mut state, &prompt, &SpecConfig::default(),
//!                         &mut sampler, &mut DiffusionDrafter, &mut |tok| { print(tok); true })?;
//! eprint!("{}", g.stats.report());
//! ```

use std::ops::ControlFlow;
use std::time::Instant;

use crate::model::{LogitsFor, Model, State};
use crate::sample::Sampler;
use crate::spec::{Drafter, SpecConfig, SpecError, SpecStats, Speculator};

use super::generate::{drive, Driver, Flow};
use super::EngineError;

/// The generated tokens and what it took.
#[derive(Clone, Debug)]
pub struct TokenGeneration {
    pub tokens: Vec<u32>,
    pub stats: SpecStats,
}

struct TokenDriver<'a, 'm> {
    model: &'a Model<'m>,
    state: &'a mut State,
    sampler: &'a mut Sampler,
    drafter: &'a mut dyn Drafter,
    spec: &'a mut Speculator,
    stop: &'a [u32],
    on_token: &'a mut dyn FnMut(u32) -> bool,
}

impl Driver for TokenDriver<'_, '_> {
    fn is_eog(&self, _: u32) -> bool {
        false
    }

    fn emit(&mut self, t: u32) -> Flow {
        let go = (self.on_token)(t) && !self.stop.contains(&t);
        Ok(if go {
            ControlFlow::Continue(())
        } else {
            ControlFlow::Break(())
        })
    }

    fn context_full(&self) -> bool {
        self.state.n_past() >= self.state.kv.n_ctx()
    }

    fn step(&mut self, history: &[u32], remaining: usize, out: &mut Vec<u32>) -> Flow {
        self.spec.iterate(
            self.model,
            self.state,
            self.sampler,
            self.drafter,
            history,
            remaining,
            true,
            out,
        )?;
        Ok(ControlFlow::Continue(()))
    }
}

/// Generates up to `cfg.n_predict` tokens after `prompt` into an empty `state`
/// (or one that already holds exactly the earlier context: the prompt is
/// appended at `state.n_past()`). `on_token` sees every emitted token in order
/// and returns `false` to stop; a token of `cfg.stop` is emitted, then ends
/// generation. With greedy sampling and the exact rule the output equals plain
/// greedy decoding token for token.
pub fn generate_tokens(
    model: &Model,
    state: &mut State,
    prompt: &[u32],
    cfg: &SpecConfig,
    sampler: &mut Sampler,
    drafter: &mut dyn Drafter,
    on_token: &mut dyn FnMut(u32) -> bool,
) -> Result<TokenGeneration, EngineError> {
    if cfg.n_min > cfg.n_max {
        return Err(SpecError::DraftRange {
            n_min: cfg.n_min,
            n_max: cfg.n_max,
        }
        .into());
    }
    let mut spec = Speculator::new(cfg.clone());
    generate_tokens_with(&mut spec, model, state, prompt, sampler, drafter, on_token)
}

/// [`generate_tokens`] with a speculator that outlives the generation: what
/// its adaptive controller learnt (acceptance, pass costs) carries over to the
/// next one, as in a chat. The returned statistics are this generation's (the
/// speculator's are reset first).
pub fn generate_tokens_with(
    spec: &mut Speculator,
    model: &Model,
    state: &mut State,
    prompt: &[u32],
    sampler: &mut Sampler,
    drafter: &mut dyn Drafter,
    on_token: &mut dyn FnMut(u32) -> bool,
) -> Result<TokenGeneration, EngineError> {
    if prompt.is_empty() {
        return Err(SpecError::EmptyPrompt.into());
    }
    spec.reset_stats();
    let n_predict = spec.cfg.n_predict;
    if n_predict == 0 {
        return Ok(TokenGeneration {
            tokens: Vec::new(),
            stats: spec.stats.clone(),
        });
    }
    // Prefill, then the first token: t_n, the anchor.
    let pos0 = state.n_past();
    let logits = model.forward(state, prompt, pos0, LogitsFor::Last)?;
    let first = sampler.sample(logits, prompt);
    sampler.record(logits, first);
    let loop_start = Instant::now();
    let stop = spec.cfg.stop.clone();
    let mut d = TokenDriver {
        model,
        state,
        sampler,
        drafter,
        spec,
        stop: &stop,
        on_token,
    };
    let driven = drive(&mut d, prompt, first, Some(n_predict), false)?;
    let mut stats = spec.stats.clone();
    stats.tokens_emitted = driven.tokens.len() as u64;
    stats.total_ns = loop_start.elapsed().as_nanos() as u64;
    Ok(TokenGeneration {
        tokens: driven.tokens,
        stats,
    })
}
