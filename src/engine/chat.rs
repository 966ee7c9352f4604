//! The chat UI's engine over a real model: each turn renders the whole
//! conversation with the chat template, prefills only what the session does not
//! already hold (`Session::prefill`), and streams the reply as `EngineEvent`s.
//!
//! A full context never ends a chat: before each turn the conversation is fitted
//! into the context minus a reserve for the reply ([`reply_reserve`]:
//! `min(n_predict, n_ctx / 4)`). When it does not fit, the oldest turns are left
//! out ([`fit_context`]: whole turns, the system prompt and the newest user turn
//! always kept, down to half the budget so that shifts stay rare) and reported as
//! `ContextShift`; `Session::prefill` then keeps the longest prefix it can: the
//! Gated DeltaNet state cannot be cut, so the kept turns are evaluated again from
//! the end of the system prompt, whose state the session keeps a copy of
//! (`Session::keep_prefix`). A turn that does not fit even alone is an `Error`, and the
//! next one is tried afresh. A reply that reaches the end of the context ends with
//! `Done { context_full: true }`.
//!
//! Per turn: `ContextShift` (when turns were dropped), `Prefill` (the newly evaluated tokens), then per token `Text` (text
//! between `<think>` and `</think>` flagged `thinking`, the tags themselves sent
//! as empty text), after each forward pass `LayerTimes`, `Routing` and `OpTimes`, and `Done`
//! unless the user stopped the reply.
//!
//! Speculation (clover_moe files with the block-diffusion path): at each round
//! boundary the step reads `Controls::spec`; when on, the round is one
//! `Speculator::iterate` with the diffusion drafter. The adaptive controller
//! chooses the draft length from measured acceptance and pass costs, and
//! decodes plainly when no length pays (docs/DESIGN.md §4: speculation never makes
//! decoding slower); `SpecStats::why` carries its reason to the panel. A
//! drafting round is reported as `Drafted`, `Verified`, then the round's tokens
//! as `Accepted` … and one `Corrected` (a draft was rejected) or `Plain` (the
//! bonus token).
//!
//! With `--spec-fixed` every round drafts the maximum (a demonstration), which
//! never measures a plain step; so the first such round of a session, and every
//! [`PLAIN_PROBE_EVERY`]-th after it, is a timed plain step inside the loop (its
//! one token is emitted as `Plain`). After every speculative step the loop's
//! running totals go out as `EngineEvent::SpecStats`.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::ops::ControlFlow;

use crate::chat::ChatMessage as TemplateMessage;
use crate::model::profile::{self, Op};
use crate::model::ForwardError;
use crate::model::Stats;
use crate::sample::{Sampler, SamplerParams};
use crate::spec::mtp::MtpDrafter;
use crate::spec::ngram::{self, NgramDrafter};
use crate::spec::{DiffusionDrafter, Draft, DraftCtx, Drafter, SpecConfig, SpecStats};

use super::spec_step::SpecStep;
use crate::tui::engine::{fit_context, reply_reserve, Emit, Fit};
use crate::tui::{ChatEngine, ChatMessage, Controls, EngineEvent, EngineInfo, TokenKind};

use super::generate::{generate, GenEvent, GenOptions, PlainStep, Step, StepIo, StepStats};
use super::session::Session;
use super::EngineError;

/// A chat over one session.
pub struct ChatSession {
    session: Session,
    sampler: Sampler,
    n_predict: Option<usize>,
    info: EngineInfo,
    /// The speculative step, when the model has the diffusion path.
    spec: Option<SpecStep<Recorder>>,
    /// Speculative rounds since the last timed plain step (`None`: none yet).
    since_probe: Option<u64>,
}

/// One speculative round in this many is a timed plain step (the first one too),
/// so the speed-up over plain decoding is measured, not assumed.
pub const PLAIN_PROBE_EVERY: u64 = 32;

/// Wraps a drafter and keeps the tokens of its last draft (the UI shows them).
pub struct Recorder {
    inner: Box<dyn Drafter + Send>,
    last: Vec<u32>,
}

impl Recorder {
    fn keep(&mut self, d: &Draft, n_max: usize) {
        self.last.clear();
        self.last
            .extend_from_slice(&d.tokens[..d.tokens.len().min(n_max)]);
    }
}

impl Drafter for Recorder {
    fn draft(&mut self, ctx: DraftCtx) -> Result<Draft, ForwardError> {
        let n_max = ctx.n_max;
        let d = self.inner.draft(ctx)?;
        self.keep(&d, n_max);
        Ok(d)
    }

    fn take_catch_up_ns(&mut self) -> u64 {
        self.inner.take_catch_up_ns()
    }

    fn stages(&self) -> usize {
        self.inner.stages()
    }

    fn draft_stage(&mut self, stage: usize, ctx: DraftCtx) -> Result<Draft, ForwardError> {
        let n_max = ctx.n_max;
        let d = self.inner.draft_stage(stage, ctx)?;
        self.keep(&d, n_max);
        Ok(d)
    }
}

/// The drafts of the last step (empty: it did not speculate) and, after a step of
/// the speculative loop (a probe included), the loop's totals.
#[derive(Default)]
struct Round {
    drafts: Vec<u32>,
    stats: Option<SpecStats>,
}

/// One reply's step: speculative or plain, chosen by `Controls::spec` before each
/// round.
struct ChatStep<'a> {
    spec: Option<&'a mut SpecStep<Recorder>>,
    controls: &'a Controls,
    round: &'a RefCell<Round>,
    since_probe: &'a mut Option<u64>,
}

impl Step for ChatStep<'_> {
    fn step(&mut self, io: StepIo) -> Result<StepStats, EngineError> {
        {
            let mut round = self.round.borrow_mut();
            round.drafts.clear();
            round.stats = None;
        }
        let Some(spec) = self.spec.as_deref_mut().filter(|_| self.controls.spec()) else {
            return PlainStep.step(io);
        };
        spec.drafter.last.clear();
        // With a fixed draft length, a probe round is one timed plain step (the
        // adaptive controller times plain steps itself). The round never drafts
        // past what the reply can still emit (`remaining`).
        let probe =
            !spec.spec.cfg.adaptive && self.since_probe.is_none_or(|n| n + 1 >= PLAIN_PROBE_EVERY);
        let before = (spec.spec.stats.plain_ns, spec.spec.stats.total_ns);
        let s = spec.round(io, !probe)?;
        if probe {
            // The probe counts as long as the whole step took (thread-pool dispatch
            // included), measured like the loop's total, so the speed-up compares
            // like with like.
            let st = &mut spec.spec.stats;
            st.plain_ns = before.0 + (st.total_ns - before.1);
        }
        *self.since_probe = Some(match *self.since_probe {
            Some(n) if !probe => n + 1,
            _ => 0,
        });
        let mut round = self.round.borrow_mut();
        if s.drafted > 0 {
            let d = s.drafted.min(spec.drafter.last.len());
            round.drafts = spec.drafter.last[..d].to_vec();
        }
        round.stats = Some(spec.spec.stats.clone());
        Ok(s)
    }
}

impl ChatSession {
    /// `n_predict`: the longest reply in tokens (`None`: until EOG or a full context).
    pub fn new(mut session: Session, params: SamplerParams, n_predict: Option<usize>) -> Self {
        session.state.stats.timing = true;
        let m = session.model();
        let cfg = &m.model.config;
        let info = EngineInfo {
            model: m.name.clone(),
            arch: cfg.arch.name().to_string(),
            quant_mix: m.quant_mix(),
            threads: session.threads(),
            n_ctx: session.n_ctx(),
            layer_kinds: cfg.layer_kinds.clone(),
            n_experts: cfg.n_expert,
            n_experts_used: cfg.n_expert_used,
            spec_available: false,
            max_draft: 0,
        };
        let mut chat = ChatSession {
            session,
            sampler: Sampler::new(params),
            n_predict,
            info,
            spec: None,
            since_probe: None,
        };
        // What F2 turns on unless the command line chose: the model's own
        // diffusion drafter, its MTP block when the state keeps that cache,
        // or n-gram drafting.
        let drafter: Box<dyn Drafter + Send> = if chat.session.model().model.has_diffusion() {
            Box::new(DiffusionDrafter)
        } else if chat.session.state.mtp.is_some() {
            Box::new(MtpDrafter::default())
        } else {
            Box::new(NgramDrafter::new(ngram::DEFAULT_N))
        };
        chat.set_drafter(drafter, SpecConfig::default().n_max);
        chat
    }

    /// Speculates with `drafter`, drafting at most `max_draft` tokens per round
    /// (exact acceptance; the adaptive controller chooses the length, plain
    /// decoding when no length pays). The default is the diffusion drafter on
    /// models that have the diffusion path and n-gram drafting on the others;
    /// a test drafter works on any model.
    pub fn set_drafter(&mut self, drafter: Box<dyn Drafter + Send>, max_draft: usize) {
        let cfg = SpecConfig {
            enabled: true,
            n_max: max_draft.max(1),
            n_min: 0,
            adaptive: true,
            ..SpecConfig::default()
        };
        self.spec = Some(SpecStep::new(
            cfg,
            Recorder {
                inner: drafter,
                last: Vec::new(),
            },
        ));
        self.info.spec_available = true;
        self.info.max_draft = max_draft.max(1);
    }

    /// Drafting and acceptance options from the command line
    /// (`--spec-draft-n-max`, `-n-min`, `-p-min`, `--spec-accept-*`,
    /// `--spec-fixed`). Adaptive by default; with `--spec-fixed` every round
    /// drafts the maximum and one round in [`PLAIN_PROBE_EVERY`] is a timed
    /// plain step, so the panel's speed-up is measured.
    pub fn configure_spec(&mut self, cfg: &SpecConfig) {
        if let Some(step) = &mut self.spec {
            let n_max = cfg.n_max.max(1);
            step.spec = crate::spec::Speculator::new(SpecConfig {
                enabled: true,
                n_max,
                ..cfg.clone()
            });
            self.info.max_draft = n_max;
        }
    }

    /// The speculative statistics so far (`None`: the model cannot speculate).
    pub fn spec_stats(&self) -> Option<&crate::spec::SpecStats> {
        self.spec.as_ref().map(|s| &s.spec.stats)
    }

    /// Replaces the model name the UI shows (e.g. to say it is the default model).
    pub fn set_display_name(&mut self, name: impl Into<String>) {
        self.info.model = name.into();
    }

    pub fn session(&self) -> &Session {
        &self.session
    }

    /// The prompt tokens of a conversation, and whether the rendered prompt ends
    /// inside an open `<think>` block.
    pub fn prompt_tokens(&self, messages: &[ChatMessage]) -> Result<(Vec<u32>, bool), EngineError> {
        let m = self.session.model();
        let msgs: Vec<TemplateMessage> = messages
            .iter()
            .map(|c| TemplateMessage::new(c.role.as_str(), c.content.as_str()))
            .collect();
        let (text, ids) = m.chat_prompt(&msgs, true)?;
        let thinking = text.trim_end().ends_with("<think>");
        Ok((ids, thinking))
    }

    /// How many leading tokens of `prompt` (the conversation `messages`, fitted)
    /// are the system prompt's, as the template renders it alone: the prefix every
    /// turn shares, also after a context shift or a fresh start (0: no system prompt).
    fn system_prefix(
        &self,
        messages: &[ChatMessage],
        prompt: &[u32],
    ) -> Result<usize, EngineError> {
        let system: Vec<TemplateMessage> = messages
            .iter()
            .take_while(|m| m.role == crate::tui::Role::System)
            .map(|c| TemplateMessage::new(c.role.as_str(), c.content.as_str()))
            .collect();
        if system.is_empty() {
            return Ok(0);
        }
        let m = self.session.model();
        let alone = m.chat_prompt(&system, false)?.1;
        Ok(alone.iter().zip(prompt).take_while(|(a, b)| a == b).count())
    }

    fn reply(
        &mut self,
        messages: &[ChatMessage],
        controls: &Controls,
        emit: Emit<'_>,
    ) -> Result<(), EngineError> {
        let n_ctx = self.session.n_ctx();
        let reserve = reply_reserve(n_ctx, self.n_predict);
        let budget = n_ctx - reserve.min(n_ctx);
        let fit = fit_context(messages, budget, |m| {
            self.prompt_tokens(m).map(|p| (p.0.len(), p))
        })?;
        let (prompt, starts_thinking) = match fit {
            Fit::Fits { dropped, prompt } => {
                if dropped > 0 {
                    emit(EngineEvent::ContextShift {
                        dropped,
                        tokens: prompt.0.len(),
                    });
                }
                prompt
            }
            Fit::TooLong { tokens } => {
                return Err(EngineError::TurnTooLong {
                    n_prompt: tokens,
                    budget,
                    n_ctx,
                })
            }
        };
        if prompt.is_empty() {
            return Err(EngineError::EmptyPrompt);
        }
        let shared = self.system_prefix(messages, &prompt)?;
        self.session.keep_prefix(&prompt[..shared]);
        let opts = GenOptions {
            n_predict: self.n_predict,
            starts_thinking,
            checkpoint_prompt: true,
            ignore_eos: false,
        };
        let round = RefCell::new(Round::default());
        let mut kinds: VecDeque<TokenKind> = VecDeque::new();
        // Time by op kind, step by step (the prefill's is dropped).
        let _profile = ProfileTurn::start();
        let model = std::sync::Arc::clone(self.session.model());
        let tok = &model.tokenizer;
        let mut sink = |ev: GenEvent<'_>| {
            match ev {
                GenEvent::Prefilled(p) => {
                    profile::finish();
                    profile::start();
                    emit(EngineEvent::Prefill {
                        tokens: p.evaluated,
                        ms: p.ms,
                    })
                }
                GenEvent::Token {
                    text,
                    thinking,
                    tag,
                    ..
                } => emit(EngineEvent::Text {
                    text: if tag { String::new() } else { text.to_string() },
                    kind: kinds.pop_front().unwrap_or(TokenKind::Plain),
                    thinking,
                }),
                GenEvent::Tail { text, thinking } => emit(EngineEvent::Text {
                    text: text.to_string(),
                    kind: TokenKind::Plain,
                    thinking,
                }),
                GenEvent::Stepped { stats, step } => {
                    let (times, routing) = layer_events(stats);
                    emit(times);
                    emit(routing);
                    let ops = profile::finish();
                    profile::start();
                    emit(EngineEvent::OpTimes {
                        ops: Op::ALL
                            .iter()
                            .map(|&o| (o.short(), ops.ns(o) as f32 / 1e6))
                            .collect(),
                    });
                    let drafts = std::mem::take(&mut round.borrow_mut().drafts);
                    kinds.clear();
                    if !drafts.is_empty() {
                        let (a, d) = (step.accepted, drafts.len());
                        let texts = drafts
                            .iter()
                            .map(|&t| {
                                if tok.is_control(t) {
                                    String::new()
                                } else {
                                    tok.decode(&[t]).unwrap_or_default()
                                }
                            })
                            .collect();
                        emit(EngineEvent::Drafted { texts });
                        emit(EngineEvent::Verified {
                            accepted: a,
                            drafted: d,
                        });
                        kinds.extend(std::iter::repeat_n(TokenKind::Accepted, a));
                        kinds.push_back(if a < d {
                            TokenKind::Corrected
                        } else {
                            TokenKind::Plain
                        });
                    }
                    if let Some(st) = round.borrow_mut().stats.take() {
                        emit(EngineEvent::SpecStats(st));
                    }
                }
            }
            if controls.stop_requested() {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        };
        let mut step = ChatStep {
            spec: self.spec.as_mut(),
            controls,
            round: &round,
            since_probe: &mut self.since_probe,
        };
        let gen = generate(
            &mut self.session,
            &prompt,
            &mut self.sampler,
            &mut step,
            &opts,
            &mut sink,
        )?;
        if gen.stop != super::StopReason::Stopped {
            emit(EngineEvent::Done {
                tokens: gen.tokens.len(),
                decode_ms: gen.timings.total_ms - gen.timings.prompt_ms,
                context_used: self.session.n_past(),
                context_full: gen.stop == super::StopReason::ContextFull,
            });
        }
        Ok(())
    }
}

/// Profiles a turn by op kind ([`profile`]): started with the turn, stopped
/// however it ends.
struct ProfileTurn;

impl ProfileTurn {
    fn start() -> ProfileTurn {
        profile::start();
        ProfileTurn
    }
}

impl Drop for ProfileTurn {
    fn drop(&mut self) {
        profile::finish();
    }
}

/// The per-layer timing and routing events of the last step.
fn layer_events(stats: &Stats) -> (EngineEvent, EngineEvent) {
    let to_ms = |v: &[u64]| v.iter().map(|&ns| ns as f32 / 1e6).collect::<Vec<f32>>();
    let n_layer = stats.mixer_ns.len();
    let k = stats.last_experts.len() / n_layer.max(1);
    let layer_experts = stats
        .last_experts
        .chunks(k.max(1))
        .map(|c| c.iter().map(|&e| e as u16).collect())
        .collect();
    (
        EngineEvent::LayerTimes {
            mixer_ms: to_ms(&stats.mixer_ns),
            moe_ms: to_ms(&stats.moe_ns),
        },
        EngineEvent::Routing { layer_experts },
    )
}

impl ChatEngine for ChatSession {
    fn info(&self) -> EngineInfo {
        self.info.clone()
    }

    fn generate(&mut self, messages: &[ChatMessage], controls: &Controls, emit: Emit<'_>) {
        if let Err(e) = self.reply(messages, controls, emit) {
            emit(EngineEvent::Error(e.to_string()));
        }
    }

    fn spec_report(&self) -> Option<String> {
        let stats = self.spec_stats()?;
        (stats.why.is_some()).then(|| stats.report())
    }
}
