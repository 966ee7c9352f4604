//! The contract between the chat UI and whatever produces replies.
//!
//! The UI owns a [`ChatEngine`] on a worker thread. For every user turn it calls
//! [`ChatEngine::generate`] with the whole conversation so far and a [`Controls`]
//! handle, and forwards every [`EngineEvent`] the engine emits to the main thread,
//! which draws them. The engine never touches the terminal.
//!
//! # The event protocol, for one reply
//!
//! 0. `ContextShift` first, when the conversation did not fit: the engine dropped
//!    the oldest turns (see [`fit_context`]); the UI stops sending them and says so.
//! 1. `Prefill` once, when the prompt has been processed.
//! 2. Then, per step, either
//!    * **plain decoding**: one `Text { kind: Plain }` per token, or
//!    * **a speculative round**: `Drafted` (the drafts, shown as pending), then
//!      `Verified { accepted: a, drafted: d }`, then `a` events `Text { kind: Accepted }`
//!      (the accepted drafts, in order), then exactly one more `Text`: `Corrected`
//!      when a draft was rejected (`a < d`), `Plain` for the bonus token when all were
//!      accepted. Every round therefore emits `a + 1` tokens (docs/DESIGN.md §4).
//!
//!    `LayerTimes`, `Routing` and `OpTimes` may follow any forward pass; they describe
//!    the last token (for a batched pass, any one representative token; `OpTimes`
//!    the whole step). An engine that
//!    speculates sends `SpecStats` (its loop's running totals) after each step of
//!    the speculative loop, before that step's `Text` events.
//! 3. `Done` when the reply ended on its own (end-of-generation token, token limit, or
//!    a full context: `context_full`, which the UI marks as `[context full]`).
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

pub use crate::model::LayerKind;

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
    /// Milliseconds of the last step by op kind (short names: norms, GDN
    /// projections, conv, recurrence, attention, router, experts, head, ...).
    OpTimes { ops: Vec<(&'static str, f32)> },
    /// The speculative loop's totals so far (this session): drafts proposed /
    /// accepted / accepted by the relaxed rule, passes, time in draft / verify /
    /// rollback / timed plain steps, and the tokens and time of the whole loop.
    SpecStats(SpecStats),
    /// Per layer, the experts the router selected for the last token.
    Routing { layer_experts: Vec<Vec<u16>> },
    /// The conversation did not fit, so the engine left out the `dropped` oldest
    /// non-system messages (whole turns, counted in the `messages` it was given, right
    /// after the system prompt) and evaluates the `tokens` of what is kept. The UI
    /// must not send those messages again.
    ContextShift { dropped: usize, tokens: usize },
    /// The reply ended: `tokens` generated in `decode_ms`, `context_used` positions
    /// held; `context_full`: it was cut because the context had no room left.
    Done {
        tokens: usize,
        decode_ms: f64,
        context_used: usize,
        context_full: bool,
    },
    /// A failure that ends this reply (one line).
    Error(String),
}

/// The marker a front end shows after a reply cut by a full context.
pub const CONTEXT_FULL_MARKER: &str = "[context full]";

/// The context positions kept free for the reply when fitting a conversation:
/// `min(n_predict, n_ctx / 4)` (`n_predict` `None`: unlimited), at least 1. A reply
/// limited to at most a quarter of the context thus always has room for all of it;
/// a longer one may still reach the end of the context, and is then cut (and marked).
pub fn reply_reserve(n_ctx: usize, n_predict: Option<usize>) -> usize {
    n_predict.unwrap_or(usize::MAX).min(n_ctx / 4).max(1)
}

/// How a conversation was fitted into its token budget by [`fit_context`].
#[derive(Clone, Debug, PartialEq)]
pub enum Fit<P> {
    /// The conversation fits after dropping the `dropped` oldest non-system
    /// messages (0: all of it fits); `prompt` is what `count` made of the rest.
    Fits { dropped: usize, prompt: P },
    /// Even the system prompt and the newest user turn alone take `tokens`, more
    /// than the budget.
    TooLong { tokens: usize },
}

/// Fits a conversation into `budget` prompt tokens by leaving out its oldest turns.
///
/// The system messages at the start are always kept, and so is the newest user turn
/// (the last user message and what follows it). In between, whole turns (a user
/// message and the replies after it) are dropped from the oldest on. `count` renders
/// a candidate conversation and returns its token count with whatever the caller
/// wants back (e.g. the tokens).
///
/// When the whole conversation is over budget, turns are dropped until the prompt
/// takes at most half the budget (when that is possible while keeping the newest
/// turn, else until it fits): every shift re-evaluates what is kept (the recurrent
/// state cannot be cut), so dropping a little more makes shifts rare instead of
/// one per turn once the context is full. Token counts shrink as turns are dropped,
/// so the search is binary: `count` runs O(log turns) times.
pub fn fit_context<P, E>(
    messages: &[ChatMessage],
    budget: usize,
    mut count: impl FnMut(&[ChatMessage]) -> Result<(usize, P), E>,
) -> Result<Fit<P>, E> {
    let (n, p) = count(messages)?;
    if n <= budget {
        return Ok(Fit::Fits {
            dropped: 0,
            prompt: p,
        });
    }
    let n_system = messages
        .iter()
        .take_while(|m| m.role == Role::System)
        .count();
    let rest = &messages[n_system..];
    let last_user = rest.iter().rposition(|m| m.role == Role::User);
    // Where a kept conversation may start: at a user message, up to the newest one.
    let starts: Vec<usize> = (1..=last_user.unwrap_or(0))
        .filter(|&i| rest[i].role == Role::User)
        .collect();
    let kept = |k: usize| -> Vec<ChatMessage> {
        messages[..n_system]
            .iter()
            .chain(&rest[k..])
            .cloned()
            .collect()
    };
    let mut counted: Vec<Option<(usize, Option<P>)>> = (0..starts.len()).map(|_| None).collect();
    let mut measure =
        |j: usize, counted: &mut Vec<Option<(usize, Option<P>)>>| -> Result<usize, E> {
            if let Some((n, _)) = &counted[j] {
                return Ok(*n);
            }
            let (n, p) = count(&kept(starts[j]))?;
            counted[j] = Some((n, Some(p)));
            Ok(n)
        };
    for target in [budget / 2, budget] {
        // The first start whose prompt fits `target` (counts shrink with the start).
        let (mut lo, mut hi) = (0, starts.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            if measure(mid, &mut counted)? <= target {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        if lo < starts.len() && measure(lo, &mut counted)? <= target {
            let prompt = counted[lo]
                .as_mut()
                .and_then(|(_, p)| p.take())
                .expect("measured above");
            return Ok(Fit::Fits {
                dropped: starts[lo],
                prompt,
            });
        }
    }
    let tokens = match starts.len() {
        0 => n,
        len => measure(len - 1, &mut counted)?,
    };
    Ok(Fit::TooLong { tokens })
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
/// Where an engine sends its events.
pub type Emit<'a> = &'a mut dyn FnMut(EngineEvent);

pub trait ChatEngine: Send + 'static {
    fn info(&self) -> EngineInfo;
    /// Generates the assistant's reply to `messages` (the last one is the user's turn),
    /// calling `emit` for every event, and returns when the reply is complete, when
    /// `controls.stop_requested()` is true, or after emitting `Error`.
    fn generate(&mut self, messages: &[ChatMessage], controls: &Controls, emit: Emit<'_>);
    /// The speculation summary so far (`clover run`'s `spec:` lines), when
    /// any round was decoded with speculation on.
    fn spec_report(&self) -> Option<String> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One token per word, plus 2 per message.
    fn count(m: &[ChatMessage]) -> Result<(usize, usize), ()> {
        let n = m
            .iter()
            .map(|m| m.content.split_whitespace().count() + 2)
            .sum();
        Ok((n, m.len()))
    }

    fn convo() -> Vec<ChatMessage> {
        let mut v = vec![ChatMessage::new(Role::System, "s s")];
        for i in 0..4 {
            v.push(ChatMessage::new(Role::User, format!("u{i} a b")));
            v.push(ChatMessage::new(Role::Assistant, "r r r r r r"));
        }
        v.push(ChatMessage::new(Role::User, "newest"));
        v
    }

    #[test]
    fn a_conversation_that_fits_is_kept_whole() {
        let c = convo();
        assert_eq!(
            fit_context(&c, 1000, count),
            Ok(Fit::Fits {
                dropped: 0,
                prompt: c.len()
            })
        );
    }

    #[test]
    fn an_overlong_conversation_drops_whole_old_turns_down_to_half_the_budget() {
        // 4 + 4 × (5 + 8) + 3 = 59 tokens; budget 40 → keep at most 20.
        let c = convo();
        let Ok(Fit::Fits { dropped, prompt }) = fit_context(&c, 40, count) else {
            panic!("no fit")
        };
        assert_eq!(dropped % 2, 0, "whole turns");
        let kept: Vec<ChatMessage> = c[..1].iter().chain(&c[1 + dropped..]).cloned().collect();
        assert_eq!(prompt, kept.len());
        assert!(count(&kept).unwrap().0 <= 20);
        // The smallest such drop: one turn more would not be needed, one less not fit.
        let one_less: Vec<ChatMessage> = c[..1].iter().chain(&c[dropped - 1..]).cloned().collect();
        assert!(count(&one_less).unwrap().0 > 20);
        assert_eq!(kept[0].role, Role::System);
        assert_eq!(kept.last().unwrap().content, "newest");
    }

    #[test]
    fn when_half_the_budget_is_out_of_reach_as_many_turns_as_fit_the_budget_are_kept() {
        let mut c = convo();
        c.last_mut().unwrap().content = "w ".repeat(15);
        // System 4 + newest 17 = 21: over half of 40. With the last old turn (13)
        // it is 34, within 40; with two it would be 47.
        let Ok(Fit::Fits { dropped, .. }) = fit_context(&c, 40, count) else {
            panic!("no fit")
        };
        assert_eq!(dropped, 6);
    }

    #[test]
    fn a_newest_turn_too_long_for_the_budget_is_reported_with_its_size() {
        let mut c = convo();
        c.last_mut().unwrap().content = "w ".repeat(50);
        assert_eq!(
            fit_context(&c, 40, count),
            Ok(Fit::TooLong { tokens: 4 + 52 })
        );
    }

    #[test]
    fn the_reply_reserve_is_the_smaller_of_n_predict_and_a_quarter_context() {
        assert_eq!(reply_reserve(2048, Some(100)), 100);
        assert_eq!(reply_reserve(2048, Some(4000)), 512);
        assert_eq!(reply_reserve(2048, None), 512);
        assert_eq!(reply_reserve(2, None), 1);
    }
}
