//! The generation loop: prefill, then steps until an end-of-generation token, the
//! token limit, a full context or the caller's stop.
//!
//! ```text
//! logits = prefill(prompt)                     (reusing what the session holds)
//! t      = sample(logits)
//! loop:  t is EOG        → stop (Eog; t is not emitted)
//!        emit t           → stop when the sink says so (Stopped)
//!        n_predict tokens → stop (Limit)
//!        context full     → stop (ContextFull)
//!        step: evaluate t, sample what follows (one token for PlainStep,
//!              accepted drafts + 1 for a speculative driver)
//! ```
//! Everything model-specific about a step lives behind [`Step`]; the loop owns
//! text decoding, thinking flags, limits and timings.

use std::collections::VecDeque;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Instant;

use crate::model::Stats;
use crate::sample::Sampler;
use crate::tokenizer::StreamDecoder;

use super::load::LoadedModel;
use super::session::{Prefill, Session};
use super::EngineError;

/// Why generation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// An end-of-generation token was sampled.
    Eog,
    /// `n_predict` tokens were generated.
    Limit,
    /// The context has no position left for the next token.
    ContextFull,
    /// The sink asked to stop.
    Stopped,
}

impl StopReason {
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::Eog => "eog",
            StopReason::Limit => "limit",
            StopReason::ContextFull => "context_full",
            StopReason::Stopped => "stopped",
        }
    }
}

/// What one [`Step`] cost and did.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StepStats {
    /// Milliseconds in forward passes, and how many passes.
    pub eval_ms: f64,
    pub eval_runs: usize,
    /// Milliseconds in the sampler, and how many draws.
    pub sample_ms: f64,
    pub sample_runs: usize,
    /// Speculative rounds only: drafts proposed and accepted.
    pub drafted: usize,
    pub accepted: usize,
}

/// One way of advancing generation. [`PlainStep`] decodes one token; a
/// speculative driver drafts and verifies several.
pub trait Step {
    /// `history` is the prompt and every generated token; its last token is the
    /// newest sampled one, not yet in `session`. The step must evaluate it and
    /// push at least one following token to `out`; every pushed token but the last
    /// must be evaluated as well (the last is the next "newest sampled" token).
    /// `remaining` is how many tokens the loop can still emit (at least 1;
    /// `usize::MAX` without a limit): a step that pushes more wastes the work.
    fn step(&mut self, io: StepIo) -> Result<StepStats, EngineError>;
}

/// What a [`Step`] works with.
pub struct StepIo<'a> {
    pub session: &'a mut Session,
    pub sampler: &'a mut Sampler,
    pub history: &'a [u32],
    pub remaining: usize,
    pub out: &'a mut Vec<u32>,
}

/// Plain autoregressive decoding: one forward pass, one sample.
#[derive(Clone, Copy, Debug, Default)]
pub struct PlainStep;

impl Step for PlainStep {
    fn step(&mut self, io: StepIo) -> Result<StepStats, EngineError> {
        let (session, sampler, history, out) = (io.session, io.sampler, io.history, io.out);
        let Some(&last) = history.last() else {
            return Err(EngineError::EmptyPrompt);
        };
        let t0 = Instant::now();
        let logits = session.decode(last)?;
        let t1 = Instant::now();
        let next = sampler.sample(logits, history);
        sampler.record(logits, next);
        out.push(next);
        Ok(StepStats {
            eval_ms: ms(t1 - t0),
            eval_runs: 1,
            sample_ms: ms(t1.elapsed()),
            sample_runs: 1,
            ..StepStats::default()
        })
    }
}

/// Options of one generation.
#[derive(Clone, Copy, Debug, Default)]
pub struct GenOptions {
    /// Most tokens to generate; `None`: until EOG or a full context.
    pub n_predict: Option<usize>,
    /// The prompt ends inside a `<think>` block (e.g. a template that opens it).
    pub starts_thinking: bool,
    /// Checkpoint the recurrent state before the prompt's last token, so that
    /// the same prompt again, or any prompt sharing it up to there, restarts
    /// there (`Session::prefill_checkpointed`).
    pub checkpoint_prompt: bool,
    /// End-of-generation tokens do not end generation (they are emitted as
    /// the control tokens they are): llama-server's `ignore_eos`.
    pub ignore_eos: bool,
}

/// What the loop reports while it runs.
#[derive(Debug)]
pub enum GenEvent<'a> {
    /// The prompt is in the state.
    Prefilled(Prefill),
    /// A generated token and the text it completed (possibly empty: part of a
    /// UTF-8 character, or a control token, whose text is never shown).
    /// `thinking`: the token is inside `<think>…</think>` or is one of the tags;
    /// `tag`: it is `<think>` or `</think>`.
    Token {
        id: u32,
        text: &'a str,
        thinking: bool,
        tag: bool,
    },
    /// Text held back at the end (an incomplete UTF-8 sequence, as U+FFFD).
    Tail { text: &'a str, thinking: bool },
    /// A step ran; `stats` holds its per-layer timings and expert selections.
    Stepped {
        stats: &'a Stats,
        step: &'a StepStats,
    },
}

/// Timings of a generation, in llama.cpp's terms.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Timings {
    pub load_ms: f64,
    /// Prompt tokens evaluated (reused ones excluded) and their time.
    pub prompt_ms: f64,
    pub prompt_tokens: usize,
    /// Decoding forward passes and their time.
    pub eval_ms: f64,
    pub eval_runs: usize,
    pub sample_ms: f64,
    pub sample_runs: usize,
    /// From the start of the prefill to the end of the loop.
    pub total_ms: f64,
}

impl Timings {
    /// Prompt tokens per second (0 when nothing was evaluated).
    pub fn prompt_tps(&self) -> f64 {
        rate(self.prompt_tokens, self.prompt_ms)
    }

    /// Decoding forward passes per second (0 when none ran).
    pub fn eval_tps(&self) -> f64 {
        rate(self.eval_runs, self.eval_ms)
    }

    /// The `llama_perf_*_print` lines, labels and layout as llama.cpp prints them
    /// (counts floored at 1 as llama.cpp does).
    pub fn llama_perf(&self) -> String {
        let per = |ms: f64, n: usize| {
            let n = n.max(1) as f64;
            (ms / n, 1e3 / ms * n)
        };
        let (s_per, s_tps) = per(self.sample_ms, self.sample_runs);
        let (p_per, p_tps) = per(self.prompt_ms, self.prompt_tokens);
        let (e_per, e_tps) = per(self.eval_ms, self.eval_runs);
        let mut s = String::new();
        s += &format!(
            "llama_perf_sampler_print:    sampling time = {:10.2} ms / {:5} runs   ({:8.2} ms per token, {:8.2} tokens per second)\n",
            self.sample_ms, self.sample_runs.max(1), s_per, s_tps
        );
        s += &format!(
            "llama_perf_context_print:        load time = {:10.2} ms\n",
            self.load_ms
        );
        s += &format!(
            "llama_perf_context_print: prompt eval time = {:10.2} ms / {:5} tokens ({:8.2} ms per token, {:8.2} tokens per second)\n",
            self.prompt_ms, self.prompt_tokens.max(1), p_per, p_tps
        );
        s += &format!(
            "llama_perf_context_print:        eval time = {:10.2} ms / {:5} runs   ({:8.2} ms per token, {:8.2} tokens per second)\n",
            self.eval_ms, self.eval_runs.max(1), e_per, e_tps
        );
        s += &format!(
            "llama_perf_context_print:       total time = {:10.2} ms / {:5} tokens\n",
            self.total_ms,
            self.prompt_tokens.max(1) + self.eval_runs.max(1)
        );
        s
    }
}

fn rate(n: usize, ms: f64) -> f64 {
    if n == 0 || ms <= 0.0 {
        0.0
    } else {
        n as f64 * 1e3 / ms
    }
}

fn ms(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The result of a generation.
#[derive(Clone, Debug, PartialEq)]
pub struct Generation {
    pub prompt: Vec<u32>,
    /// Generated tokens, the end-of-generation token excluded.
    pub tokens: Vec<u32>,
    /// Their text (control tokens contribute nothing).
    pub text: String,
    pub stop: StopReason,
    /// The end-of-generation token, when `stop` is `Eog`.
    pub eog: Option<u32>,
    pub prefill: Prefill,
    pub timings: Timings,
}

/// What [`drive`] advances: how a token is shown, which tokens end generation
/// unshown, and how the next tokens are made. [`generate`] drives a session and
/// its text; [`super::tokens::generate_tokens`] a bare model and state. A server
/// advancing several sequences per forward implements this per sequence.
/// Go on or stop, after a step or an emitted token.
pub(crate) type Flow = Result<ControlFlow<()>, EngineError>;

pub(crate) trait Driver {
    /// A token that ends generation without being emitted (end of generation).
    fn is_eog(&self, t: u32) -> bool;
    /// Shows an emitted token; `Break` stops after it.
    fn emit(&mut self, t: u32) -> Flow;
    /// No position is left for another step.
    fn context_full(&self) -> bool;
    /// Evaluates the newest token of `history` and pushes the tokens that follow
    /// to `out` (see [`Step::step`]). `Break` ends generation after the step
    /// (the tokens pushed are not emitted).
    fn step(&mut self, history: &[u32], remaining: usize, out: &mut Vec<u32>) -> Flow;
}

/// What [`drive`] produced.
pub(crate) struct Driven {
    pub tokens: Vec<u32>,
    pub stop: StopReason,
    pub eog: Option<u32>,
}

/// The one generation loop (see the module docs): `first` was sampled after
/// `prompt`; emits it and every token the steps produce until a stop.
/// `stopped`: the caller was already told to stop (nothing is emitted).
pub(crate) fn drive(
    driver: &mut dyn Driver,
    prompt: &[u32],
    first: u32,
    n_predict: Option<usize>,
    mut stopped: bool,
) -> Result<Driven, EngineError> {
    let mut history = prompt.to_vec();
    let mut tokens = Vec::new();
    let mut pending = VecDeque::from([first]);
    let mut out = Vec::new();
    let mut eog = None;
    let full = |tokens: &Vec<u32>| n_predict.is_some_and(|n| tokens.len() >= n);
    let stop = loop {
        if stopped {
            break StopReason::Stopped;
        }
        if full(&tokens) {
            break StopReason::Limit;
        }
        let Some(t) = pending.pop_front() else {
            // A step must push at least one token; treat a broken one as an error.
            return Err(EngineError::Options(
                "a generation step produced no token".into(),
            ));
        };
        if driver.is_eog(t) {
            eog = Some(t);
            break StopReason::Eog;
        }
        tokens.push(t);
        history.push(t);
        if driver.emit(t)?.is_break() {
            break StopReason::Stopped;
        }
        if full(&tokens) {
            break StopReason::Limit;
        }
        if !pending.is_empty() {
            continue;
        }
        if driver.context_full() {
            break StopReason::ContextFull;
        }
        out.clear();
        let remaining = n_predict.map_or(usize::MAX, |n| n - tokens.len());
        stopped = driver.step(&history, remaining, &mut out)?.is_break();
        pending.extend(out.iter().copied());
    };
    Ok(Driven { tokens, stop, eog })
}

/// [`generate`]'s driver: a session, its step, the text and the sink.
struct SessionDriver<'a, 'e> {
    session: &'a mut Session,
    sampler: &'a mut Sampler,
    step: &'a mut dyn Step,
    sink: &'a mut dyn FnMut(GenEvent<'_>) -> ControlFlow<()>,
    model: &'a LoadedModel,
    decoder: StreamDecoder<'a>,
    text: String,
    thinking: bool,
    ignore_eos: bool,
    timings: &'e mut Timings,
}

impl Driver for SessionDriver<'_, '_> {
    fn is_eog(&self, t: u32) -> bool {
        !self.ignore_eos && self.model.tokenizer.is_eog(t)
    }

    fn emit(&mut self, t: u32) -> Flow {
        let (open, close) = match self.model.think_tokens {
            Some((o, c)) => (t == o, t == c),
            None => (false, false),
        };
        self.thinking |= open;
        let piece = if self.model.tokenizer.is_control(t) {
            String::new()
        } else {
            self.decoder.push(t)?
        };
        self.text.push_str(&piece);
        let flow = (self.sink)(GenEvent::Token {
            id: t,
            text: &piece,
            thinking: self.thinking,
            tag: open || close,
        });
        self.thinking &= !close;
        Ok(flow)
    }

    fn context_full(&self) -> bool {
        self.session.n_past() >= self.session.n_ctx()
    }

    fn step(&mut self, history: &[u32], remaining: usize, out: &mut Vec<u32>) -> Flow {
        self.session.state.stats.clear();
        let s = self.step.step(StepIo {
            session: self.session,
            sampler: self.sampler,
            history,
            remaining,
            out,
        })?;
        let t = &mut *self.timings;
        t.eval_ms += s.eval_ms;
        t.eval_runs += s.eval_runs;
        t.sample_ms += s.sample_ms;
        t.sample_runs += s.sample_runs;
        Ok((self.sink)(GenEvent::Stepped {
            stats: &self.session.state.stats,
            step: &s,
        }))
    }
}

/// Generates from `prompt` (see the module docs). `sink` sees every event and can
/// end generation by returning `ControlFlow::Break`.
pub fn generate(
    session: &mut Session,
    prompt: &[u32],
    sampler: &mut Sampler,
    step: &mut dyn Step,
    opts: &GenOptions,
    sink: &mut dyn FnMut(GenEvent<'_>) -> ControlFlow<()>,
) -> Result<Generation, EngineError> {
    let t_start = Instant::now();
    let model = Arc::clone(session.model());
    let mut timings = Timings {
        load_ms: model.load_ms,
        ..Timings::default()
    };
    let (prefill, logits) = match opts.checkpoint_prompt {
        true => session.prefill_checkpointed(prompt)?,
        false => session.prefill(prompt)?,
    };
    let t0 = Instant::now();
    let first = sampler.sample(logits, prompt);
    sampler.record(logits, first);
    timings.sample_ms += ms(t0.elapsed());
    timings.sample_runs += 1;
    timings.prompt_ms = prefill.ms;
    timings.prompt_tokens = prefill.evaluated;
    let stopped = sink(GenEvent::Prefilled(prefill)).is_break();
    let mut d = SessionDriver {
        session,
        sampler,
        step,
        sink,
        model: &model,
        decoder: model.tokenizer.stream_decoder(),
        text: String::new(),
        thinking: opts.starts_thinking,
        ignore_eos: opts.ignore_eos,
        timings: &mut timings,
    };
    let driven = drive(&mut d, prompt, first, opts.n_predict, stopped)?;
    let mut text = std::mem::take(&mut d.text);
    let tail = d.decoder.finish();
    if !tail.is_empty() {
        text.push_str(&tail);
        let _ = (d.sink)(GenEvent::Tail {
            text: &tail,
            thinking: d.thinking,
        });
    }
    timings.total_ms = ms(t_start.elapsed());
    Ok(Generation {
        prompt: prompt.to_vec(),
        tokens: driven.tokens,
        text,
        stop: driven.stop,
        eog: driven.eog,
        prefill,
        timings,
    })
}
