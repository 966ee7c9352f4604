//! The chat UI's engine over a real model: each turn renders the whole
//! conversation with the chat template, prefills only what the session does not
//! already hold (`Session::prefill`), and streams the reply as `EngineEvent`s.
//!
//! Per turn: `Prefill` (the newly evaluated tokens), then per token `Text` (text
//! between `<think>` and `</think>` flagged `thinking`, the tags themselves sent
//! as empty text), after each forward pass `LayerTimes` and `Routing`, and `Done`
//! unless the user stopped the reply.

use std::ops::ControlFlow;

use crate::chat::ChatMessage as TemplateMessage;
use crate::model::{LayerKind as ModelLayerKind, Stats};
use crate::sample::{Sampler, SamplerParams};
use crate::tui::{
    ChatEngine, ChatMessage, Controls, EngineEvent, EngineInfo, LayerKind, TokenKind,
};

use super::generate::{generate, GenEvent, GenOptions, PlainStep};
use super::session::Session;
use super::EngineError;

/// A chat over one session.
pub struct ChatSession {
    session: Session,
    sampler: Sampler,
    n_predict: Option<usize>,
    info: EngineInfo,
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
            layer_kinds: cfg
                .layer_kinds
                .iter()
                .map(|k| match k {
                    ModelLayerKind::DeltaNet => LayerKind::DeltaNet,
                    ModelLayerKind::Attention => LayerKind::Attention,
                })
                .collect(),
            n_experts: cfg.n_expert,
            n_experts_used: cfg.n_expert_used,
            spec_available: false,
            max_draft: 0,
        };
        ChatSession {
            session,
            sampler: Sampler::new(params),
            n_predict,
            info,
        }
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
        let text = m.render_chat(&msgs, true)?;
        let thinking = text.trim_end().ends_with("<think>");
        Ok((m.tokenize(&text)?, thinking))
    }

    fn reply(
        &mut self,
        messages: &[ChatMessage],
        controls: &Controls,
        emit: &mut dyn FnMut(EngineEvent),
    ) -> Result<(), EngineError> {
        let (prompt, starts_thinking) = self.prompt_tokens(messages)?;
        if prompt.is_empty() {
            return Err(EngineError::EmptyPrompt);
        }
        let opts = GenOptions {
            n_predict: self.n_predict,
            starts_thinking,
            checkpoint_after_prompt: true,
        };
        let mut sink = |ev: GenEvent<'_>| {
            match ev {
                GenEvent::Prefilled(p) => emit(EngineEvent::Prefill {
                    tokens: p.evaluated,
                    ms: p.ms,
                }),
                GenEvent::Token {
                    text,
                    thinking,
                    tag,
                    ..
                } => emit(EngineEvent::Text {
                    text: if tag { String::new() } else { text.to_string() },
                    kind: TokenKind::Plain,
                    thinking,
                }),
                GenEvent::Tail { text, thinking } => emit(EngineEvent::Text {
                    text: text.to_string(),
                    kind: TokenKind::Plain,
                    thinking,
                }),
                GenEvent::Stepped { stats, .. } => {
                    let (times, routing) = layer_events(stats);
                    emit(times);
                    emit(routing);
                }
            }
            if controls.stop_requested() {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        };
        let gen = generate(
            &mut self.session,
            &prompt,
            &mut self.sampler,
            &mut PlainStep,
            &opts,
            &mut sink,
        )?;
        if gen.stop != super::StopReason::Stopped {
            emit(EngineEvent::Done {
                tokens: gen.tokens.len(),
                decode_ms: gen.timings.total_ms - gen.timings.prompt_ms,
                context_used: self.session.n_past(),
            });
        }
        Ok(())
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

    fn generate(
        &mut self,
        messages: &[ChatMessage],
        controls: &Controls,
        emit: &mut dyn FnMut(EngineEvent),
    ) {
        if let Err(e) = self.reply(messages, controls, emit) {
            emit(EngineEvent::Error(e.to_string()));
        }
    }
}
