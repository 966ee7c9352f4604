//! The contract between the chat UI and whatever produces replies.
//!
//! The UI owns a [`ChatEngine`] on a worker thread. For every user turn it calls
//! [`ChatEngine::generate`] with the whole conversation so far and a [`Controls`]
//! handle, and forwards every [`EngineEvent`] the engine emits to the main thread,
//! which draws them. The engine never touches the terminal.
//!
//! # The event protocol, for one reply
//!
//! 1. `Prefill` once, when the prompt has been processed.
//! 2. Then, per step, either
//!    * **plain decoding**: one `Text { kind: Plain }` per token, or
//!    * **a speculative round**: `Drafted` (the drafts, shown as pending), then
//!      `Verified { accepted: a, drafted: d }`, then `a` events `Text { kind: Accepted }`
//!      (the accepted drafts, in order), then exactly one more `Text`: `Corrected`
//!      when a draft was rejected (`a < d`), `Plain` for the bonus token when all were
//!      accepted. Every round therefore emits `a + 1` tokens (DESIGN §4).
//!
//!    `LayerTimes` and `Routing` may follow any forward pass; they describe the last
//!    token (for a batched pass, any one representative token). An engine that
//!    speculates sends `SpecStats` (its loop's running totals) after each step of
//!    the speculative loop, before that step's `Text` events.
//! 3. `Done` when the reply ended on its own (end-of-generation token or token limit).
//!    An engine that returns because `Controls::stop_requested()` became true may skip
//!    `Done`; the UI then marks the reply as stopped. `Error` reports a failure that
//!    ends the reply; the engine then returns.
//!
//! Thinking: the engine either sets `thinking: true` on the text between `<think>` and
//! `</think>`, or emits the literal tags inside `text`; the UI understands both (tags
//! are stripped, the text between them is shown dimmed and can be folded).
//!
//! Speculation is toggled live: the engine reads [`Controls::spec`] at each round
//! boundary (before drafting, or before each plain token) and switches mode.

use std::sync::atomic::{AtomicBool, Ordering};

pub use crate::spec::SpecStats;

/// Who said a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    System,
    User,
    Assistant,
}

impl Role {
    /// The role name chat templates use (`system`, `user`, `assistant`).
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
        }
    }
}

/// One turn of the conversation, as the chat template sees it. Assistant turns hold
/// the visible reply only (thinking text is not sent back).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChatMessage {
    pub role: Role,
    pub content: String,
}

impl ChatMessage {
    pub fn new(role: Role, content: impl Into<String>) -> Self {
        ChatMessage {
            role,
            content: content.into(),
        }
    }
}

/// The two mixer kinds of the hybrid model (DESIGN §2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayerKind {
    /// Gated DeltaNet linear attention.
    DeltaNet,
    /// Gated full attention.
    Attention,
}

/// What the UI shows about the model; read once at start.
#[derive(Clone, Debug, PartialEq)]
pub struct EngineInfo {
    /// Model name (file name or `general.name`).
    pub model: String,
    /// `clover_moe` or `qwen35moe`.
    pub arch: String,
    /// The quant mix in a few words, e.g. `Q4_K_M` or `Q4_K 62% / IQ4_XS 30% / Q8_0 8%`.
    pub quant_mix: String,
    pub threads: usize,
    /// Context length the session was created with.
    pub n_ctx: usize,
    /// One entry per layer; `layer_kinds.len()` is the layer count.
    pub layer_kinds: Vec<LayerKind>,
    /// Routed experts per layer (256 for 35B-A3B).
    pub n_experts: usize,
    /// Experts selected per token (8 for 35B-A3B).
    pub n_experts_used: usize,
    /// Whether self-speculation can run (Clover files only).
    pub spec_available: bool,
    /// The longest draft the engine proposes (`--spec-draft-n-max`).
    pub max_draft: usize,
}

impl EngineInfo {
    pub fn n_layers(&self) -> usize {
        self.layer_kinds.len()
    }
}

/// How a streamed piece of text came to be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenKind {
    /// Decoded one at a time, or the bonus token of a fully accepted round.
    Plain,
    /// A draft that verification accepted.
    Accepted,
    /// The target model's token at the first rejected draft position.
    Corrected,
}

/// Everything an engine reports while it generates (see the module docs for the order).
#[derive(Clone, Debug, PartialEq)]
pub enum EngineEvent {
    /// The prompt was processed: `tokens` positions newly added to the context (the
    /// part of the conversation not already cached), in `ms` milliseconds.
    Prefill { tokens: usize, ms: f64 },
    /// One token's text (may be empty or a partial UTF-8 character's worth of nothing).
    Text {
        text: String,
        kind: TokenKind,
        thinking: bool,
    },
    /// Drafts of the current speculative round, shown pending until `Verified`.
    Drafted { texts: Vec<String> },
    /// Verification of the current round: `accepted` of `drafted` drafts kept.
    Verified { accepted: usize, drafted: usize },
    /// Milliseconds per layer for the last token: mixer (GDN or attention) and MoE.
    LayerTimes {
        mixer_ms: Vec<f32>,
        moe_ms: Vec<f32>,
    },
    /// The speculative loop's totals so far (this session): drafts proposed /
    /// accepted / accepted by the relaxed rule, passes, time in draft / verify /
    /// rollback / timed plain steps, and the tokens and time of the whole loop.
    SpecStats(SpecStats),
    /// Per layer, the experts the router selected for the last token.
    Routing { layer_experts: Vec<Vec<u16>> },
    /// The reply ended: `tokens` generated in `decode_ms`, `context_used` positions held.
    Done {
        tokens: usize,
        decode_ms: f64,
        context_used: usize,
    },
    /// A failure that ends this reply (one line).
    Error(String),
}

/// Shared switches between the UI and a running generation.
#[derive(Debug, Default)]
pub struct Controls {
    stop: AtomicBool,
    spec: AtomicBool,
}

impl Controls {
    pub fn new(spec: bool) -> Self {
        Controls {
            stop: AtomicBool::new(false),
            spec: AtomicBool::new(spec),
        }
    }
    /// True once the user asked the current reply to stop; the engine should return soon.
    pub fn stop_requested(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
    pub fn request_stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }
    /// Cleared by the UI before each new reply.
    pub fn clear_stop(&self) {
        self.stop.store(false, Ordering::Relaxed);
    }
    /// Whether the next round should speculate.
    pub fn spec(&self) -> bool {
        self.spec.load(Ordering::Relaxed)
    }
    pub fn set_spec(&self, on: bool) {
        self.spec.store(on, Ordering::Relaxed);
    }
}

/// A model the chat UI can talk to. Implemented by the real engine and by
/// [`super::demo::DemoEngine`].
pub trait ChatEngine: Send + 'static {
    fn info(&self) -> EngineInfo;
    /// Generates the assistant's reply to `messages` (the last one is the user's turn),
    /// calling `emit` for every event, and returns when the reply is complete, when
    /// `controls.stop_requested()` is true, or after emitting `Error`.
    fn generate(
        &mut self,
        messages: &[ChatMessage],
        controls: &Controls,
        emit: &mut dyn FnMut(EngineEvent),
    );
}
