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
    fn step(
        &mut self,
        session: &mut Session,
        sampler: &mut Sampler,
        history: &[u32],
        remaining: usize,
        out: &mut Vec<u32>,
    ) -> Result<StepStats, EngineError>;
}

/// Plain autoregressive decoding: one forward pass, one sample.
#[derive(Clone, Copy, Debug, Default)]
pub struct PlainStep;

impl Step for PlainStep {
    fn step(
        &mut self,
        session: &mut Session,
        sampler: &mut Sampler,
        history: &[u32],
        _remaining: usize,
        out: &mut Vec<u32>,
    ) -> Result<StepStats, EngineError> {
        let Some(&last) = history.last() else {
            return Err(EngineError::EmptyPrompt);
        };
        let t0 = Instant::now();
        let logits = session.decode(last)?;
        let t1 = Instant::now();
        out.push(sampler.sample(logits, history));
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
    /// Checkpoint the recurrent state after the prompt (see `Session::prefill`).
    pub checkpoint_after_prompt: bool,
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
    let tok = &model.tokenizer;
    let mut timings = Timings {
        load_ms: model.load_ms,
        ..Timings::default()
    };
    let (prefill, logits) = session.prefill(prompt)?;
    let t0 = Instant::now();
    let first = sampler.sample(logits, prompt);
    timings.sample_ms += ms(t0.elapsed());
    timings.sample_runs += 1;
    timings.prompt_ms = prefill.ms;
    timings.prompt_tokens = prefill.evaluated;
    if opts.checkpoint_after_prompt {
        session.checkpoint();
    }
    let mut history = prompt.to_vec();
    let mut tokens = Vec::new();
    let mut text = String::new();
    let mut decoder = tok.stream_decoder();
    let mut thinking = opts.starts_thinking;
    let mut pending = VecDeque::from([first]);
    let mut out = Vec::new();
    let mut eog = None;
    let mut stopped = sink(GenEvent::Prefilled(prefill)).is_break();
    let stop = loop {
        if stopped {
            break StopReason::Stopped;
        }
        if opts.n_predict.is_some_and(|n| tokens.len() >= n) {
            break StopReason::Limit;
        }
        let Some(t) = pending.pop_front() else {
            // A step must push at least one token; treat a broken one as an error.
            return Err(EngineError::Options(
                "a generation step produced no token".into(),
            ));
        };
        if tok.is_eog(t) {
            eog = Some(t);
            break StopReason::Eog;
        }
        tokens.push(t);
        history.push(t);
        let (open, close) = match model.think_tokens {
            Some((o, c)) => (t == o, t == c),
            None => (false, false),
        };
        thinking |= open;
        let piece = if tok.is_control(t) {
            String::new()
        } else {
            decoder.push(t)?
        };
        text.push_str(&piece);
        let flow = sink(GenEvent::Token {
            id: t,
            text: &piece,
            thinking,
            tag: open || close,
        });
        thinking &= !close;
        if flow.is_break() {
            break StopReason::Stopped;
        }
        if opts.n_predict.is_some_and(|n| tokens.len() >= n) {
            break StopReason::Limit;
        }
        if !pending.is_empty() {
            continue;
        }
        if session.n_past() >= session.n_ctx() {
            break StopReason::ContextFull;
        }
        session.state.stats.clear();
        out.clear();
        let remaining = opts.n_predict.map_or(usize::MAX, |n| n - tokens.len());
        let s = step.step(session, sampler, &history, remaining, &mut out)?;
        timings.eval_ms += s.eval_ms;
        timings.eval_runs += s.eval_runs;
        timings.sample_ms += s.sample_ms;
        timings.sample_runs += s.sample_runs;
        pending.extend(out.iter().copied());
        stopped = sink(GenEvent::Stepped {
            stats: &session.state.stats,
            step: &s,
        })
        .is_break();
    };
    let tail = decoder.finish();
    if !tail.is_empty() {
        text.push_str(&tail);
        let _ = sink(GenEvent::Tail {
            text: &tail,
            thinking,
        });
    }
    timings.total_ms = ms(t_start.elapsed());
    Ok(Generation {
        prompt: prompt.to_vec(),
        tokens,
        text,
        stop,
        eog,
        prefill,
        timings,
    })
}
