//! A deterministic stand-in for the model: it streams words of a fixed text with
//! made-up timings, routings and drafts, so the UI can be shown and tested without
//! weights (`clover chat --demo`).
//!
//! Everything except the wall clock is a pure function of the conversation: the same
//! messages give the same words, drafts, acceptances and routings.
//!
//! A token is a word, plus 4 per message for the template (an earlier reply also
//! counts the thinking it streamed, which the pretend cache holds). The demo fits the
//! conversation into its context like the real engine (`fit_context`, with
//! `reply_reserve(n_ctx, None)` kept for the reply), reports `ContextShift`, and cuts
//! a reply that reaches the end of the context (`Done { context_full: true }`).

use std::thread;
use std::time::{Duration, Instant};

use super::engine::{
    fit_context, reply_reserve, ChatEngine, ChatMessage, Controls, Emit, EngineEvent, EngineInfo,
    Fit, LayerKind, Role, SpecStats, TokenKind,
};

const THOUGHT: &str = "The user wants a reply. I am the demo engine, so I will say what the \
    panels show and keep it short.";

const ANSWER: &str = "This is the clover demo engine: no weights are loaded, and every word \
    you read is streamed from a fixed text with made-up timings. The panels show what the real \
    engine reports. Per-layer timing splits each token's milliseconds into the mixer (Gated \
    DeltaNet on three layers out of four, full attention on every fourth) and the mixture of \
    experts. The routing heatmap counts which of the 256 experts each layer selected, over a \
    recent window or since the start. With speculation on (F2), the model drafts several tokens \
    at once and verifies them in one batched pass: accepted drafts are marked green, \
    corrections yellow, and the acceptance panel tracks how many drafts survive at each \
    position, how many tokens each forward pass yields and the speed-up over plain decoding. \
    Press Esc to stop a reply, F1 for every key, and Ctrl-C to quit.";

const WRONG: [&str; 6] = [
    " banana", " seven", " purple", " however", " quietly", " tree",
];

/// The fake engine. `token_delay` is the simulated cost of one plain forward pass.
pub struct DemoEngine {
    info: EngineInfo,
    token_delay: Duration,
    /// Pretend prefix cache: positions held, and how many messages they cover (the
    /// last reply included), so each turn prefills only the new messages.
    cached: usize,
    seen: usize,
    /// Speculative-loop totals with made-up times, like the real engine's.
    spec: SpecStats,
    /// Speculative rounds since the last plain probe (`None`: none yet); the demo
    /// probes like the real chat (`engine::chat::PLAIN_PROBE_EVERY`).
    since_probe: Option<u64>,
}

/// One speculative round in this many is a plain step (the first one too).
const PROBE_EVERY: u64 = 32;

impl DemoEngine {
    /// A demo shaped like Clover-35B-A3B (40 layers, every fourth attention, 256 experts,
    /// 8 used, drafts of up to 8) that sleeps `token_delay` per simulated forward pass.
    pub fn new(threads: usize, n_ctx: usize, token_delay: Duration) -> Self {
        let layer_kinds = (0..40)
            .map(|i| {
                if (i + 1) % 4 == 0 {
                    LayerKind::Attention
                } else {
                    LayerKind::DeltaNet
                }
            })
            .collect();
        DemoEngine {
            info: EngineInfo {
                model: "demo (no weights)".into(),
                arch: "clover_moe".into(),
                quant_mix: "Q4_K_M (demo)".into(),
                threads,
                n_ctx,
                layer_kinds,
                n_experts: 256,
                n_experts_used: 8,
                spec_available: true,
                max_draft: 8,
            },
            token_delay,
            cached: 0,
            seen: 0,
            spec: SpecStats::default(),
            since_probe: None,
        }
    }

    /// The demo without any sleeping, for tests.
    pub fn instant() -> Self {
        DemoEngine::new(4, 4096, Duration::ZERO)
    }

    /// The tokens of the reply to `prompt`: a thinking part in `<think>` tags, then the
    /// answer, one word (with its leading space) per token.
    pub fn reply_tokens(prompt: &str) -> Vec<String> {
        let mut toks = vec!["<think>".to_string()];
        toks.extend(words(THOUGHT));
        toks.push("</think>".into());
        let topic: Vec<&str> = prompt.split_whitespace().take(6).collect();
        let mut answer = String::new();
        if !topic.is_empty() {
            answer.push_str(&format!("You wrote \"{}\". ", topic.join(" ")));
        }
        answer.push_str(ANSWER);
        let mut first = true;
        for w in answer.split_whitespace() {
            toks.push(if first {
                w.to_string()
            } else {
                format!(" {w}")
            });
            first = false;
        }
        toks
    }

    fn sleep(&self, factor: f64) {
        if !self.token_delay.is_zero() {
            thread::sleep(self.token_delay.mul_f64(factor));
        }
    }

    /// Nanoseconds of `factor` simulated forward passes (34 ms each when instant).
    fn fake_ns(&self, factor: f64) -> u64 {
        let unit = if self.token_delay.is_zero() {
            Duration::from_millis(34)
        } else {
            self.token_delay
        };
        (unit.as_secs_f64() * factor * 1e9) as u64
    }

    fn layer_times(&self, rng: &mut Rng, context: usize) -> EngineEvent {
        let scale = if self.token_delay.is_zero() {
            1.0
        } else {
            self.token_delay.as_secs_f32() * 1000.0 / 34.0
        };
        let mut mixer_ms = Vec::new();
        let mut moe_ms = Vec::new();
        for kind in &self.info.layer_kinds {
            let jitter = 0.9 + 0.2 * rng.unit() as f32;
            let mixer = match kind {
                LayerKind::DeltaNet => 0.35,
                LayerKind::Attention => 0.45 + 0.00002 * context as f32,
            };
            mixer_ms.push(mixer * jitter * scale);
            moe_ms.push((0.38 + 0.08 * rng.unit() as f32) * scale);
        }
        EngineEvent::LayerTimes { mixer_ms, moe_ms }
    }

    fn routing(&self, rng: &mut Rng) -> EngineEvent {
        let n = self.info.n_experts as u64;
        let layer_experts = (0..self.info.n_layers() as u64)
            .map(|layer| {
                let mut picked: Vec<u16> = Vec::new();
                while picked.len() < self.info.n_experts_used {
                    // Skewed towards a few experts per layer, each layer its own favourites.
                    let u = rng.unit();
                    let idx = (u * u * u * n as f64) as u64;
                    let e = ((idx * 97 + layer * 31) % n) as u16;
                    if !picked.contains(&e) {
                        picked.push(e);
                    }
                }
                picked
            })
            .collect();
        EngineEvent::Routing { layer_experts }
    }
}

impl ChatEngine for DemoEngine {
    fn info(&self) -> EngineInfo {
        self.info.clone()
    }

    fn generate(&mut self, messages: &[ChatMessage], controls: &Controls, emit: Emit<'_>) {
        let n_ctx = self.info.n_ctx;
        let budget = n_ctx - reply_reserve(n_ctx, None).min(n_ctx);
        let fit = fit_context(messages, budget, |m| {
            Ok::<_, std::convert::Infallible>((held_tokens(m), ()))
        });
        let kept: Vec<ChatMessage>;
        let messages = match fit {
            Ok(Fit::Fits { dropped: 0, .. }) => messages,
            Ok(Fit::Fits { dropped, .. }) => {
                let n_system = messages
                    .iter()
                    .take_while(|m| m.role == Role::System)
                    .count();
                kept = messages[..n_system]
                    .iter()
                    .chain(&messages[n_system + dropped..])
                    .cloned()
                    .collect();
                emit(EngineEvent::ContextShift {
                    dropped,
                    tokens: demo_tokens(&kept),
                });
                // What is kept no longer extends the cache: evaluated afresh.
                self.seen = 0;
                &kept
            }
            Ok(Fit::TooLong { tokens }) => {
                emit(EngineEvent::Error(format!(
                    "this turn needs {tokens} tokens, more than the {budget} the demo's \
                     context of {n_ctx} leaves beside the reply"
                )));
                return;
            }
            Err(never) => match never {},
        };
        let prompt = messages
            .iter()
            .rev()
            .find(|m| m.role == Role::User)
            .map(|m| m.content.as_str())
            .unwrap_or("");
        // A conversation that does not extend the cached one starts from scratch.
        let fresh = if self.seen > 0 && messages.len() > self.seen {
            &messages[self.seen..]
        } else {
            self.cached = 0;
            messages
        };
        let new_tokens = demo_tokens(fresh);
        let prompt_tokens = self.cached + new_tokens;
        self.cached = prompt_tokens;
        self.seen = messages.len();
        let mut rng = Rng(fnv(prompt) ^ messages.len() as u64);
        self.sleep(new_tokens as f64 / 8.0);
        emit(EngineEvent::Prefill {
            tokens: new_tokens,
            ms: self.token_delay.as_secs_f64() * 1000.0 * new_tokens as f64 / 8.0,
        });
        if prompt.contains("/error") {
            emit(EngineEvent::Error(
                "the demo engine was asked to fail".into(),
            ));
            return;
        }
        let toks = DemoEngine::reply_tokens(prompt);
        let start = Instant::now();
        let mut i = 0;
        // The reply joins the cache as it is generated (a stopped one too).
        self.seen = messages.len() + 1;
        let mut context_full = false;
        while i < toks.len() {
            if prompt_tokens + i >= n_ctx {
                context_full = true;
                break;
            }
            self.cached = prompt_tokens + i;
            if controls.stop_requested() {
                return;
            }
            let context = prompt_tokens + i;
            let left = toks.len() - i;
            let speculating = controls.spec() && self.info.spec_available;
            let probe = self.since_probe.is_none_or(|n| n + 1 >= PROBE_EVERY);
            if speculating {
                self.since_probe = Some(match self.since_probe {
                    Some(n) if !probe => n + 1,
                    _ => 0,
                });
            }
            if speculating && !probe && left > 1 && prompt_tokens + i + 1 < n_ctx {
                let d = self
                    .info
                    .max_draft
                    .min(left - 1)
                    .min(n_ctx - prompt_tokens - i - 1);
                // Each draft survives with probability 0.8, so about 3 of 8 are accepted.
                let mut a = 0;
                while a < d && rng.unit() < 0.8 {
                    a += 1;
                }
                let mut drafts: Vec<String> = toks[i..i + d].to_vec();
                if a < d {
                    drafts[a] = WRONG[(rng.next() % WRONG.len() as u64) as usize].to_string();
                }
                emit(EngineEvent::Drafted { texts: drafts });
                self.sleep(1.1);
                emit(EngineEvent::Verified {
                    accepted: a,
                    drafted: d,
                });
                self.sleep(1.4);
                let st = &mut self.spec;
                st.record_iteration(d, a, 0);
                st.draft_passes += 1;
                st.verify_passes += 1;
                st.tokens_emitted += a as u64 + 1;
                let (draft, verify, rollback) =
                    (self.fake_ns(1.1), self.fake_ns(1.4), self.fake_ns(0.02));
                let st = &mut self.spec;
                st.draft_ns += draft;
                st.verify_ns += verify;
                st.rollback_ns += rollback;
                st.total_ns += draft + verify + rollback;
                emit(EngineEvent::SpecStats(self.spec.clone()));
                for t in &toks[i..i + a] {
                    emit(EngineEvent::Text {
                        text: t.clone(),
                        kind: TokenKind::Accepted,
                        thinking: false,
                    });
                }
                let kind = if a < d {
                    TokenKind::Corrected
                } else {
                    TokenKind::Plain
                };
                emit(EngineEvent::Text {
                    text: toks[i + a].clone(),
                    kind,
                    thinking: false,
                });
                i += a + 1;
            } else {
                self.sleep(1.0);
                if speculating {
                    // A probe: a plain step timed inside the speculative loop.
                    let ns = self.fake_ns(1.0);
                    let st = &mut self.spec;
                    st.plain_passes += 1;
                    st.plain_ns += ns;
                    st.total_ns += ns;
                    st.tokens_emitted += 1;
                    emit(EngineEvent::SpecStats(self.spec.clone()));
                }
                emit(EngineEvent::Text {
                    text: toks[i].clone(),
                    kind: TokenKind::Plain,
                    thinking: false,
                });
                i += 1;
            }
            emit(self.layer_times(&mut rng, context));
            emit(self.routing(&mut rng));
        }
        self.cached = prompt_tokens + i;
        emit(EngineEvent::Done {
            tokens: i,
            decode_ms: start.elapsed().as_secs_f64() * 1000.0,
            context_used: prompt_tokens + i,
            context_full,
        });
    }
}

/// The positions a conversation takes in the demo's cache: its tokens, plus the
/// thinking each earlier reply streamed (the cache holds it; the messages do not).
fn held_tokens(messages: &[ChatMessage]) -> usize {
    let thought = THOUGHT.split_whitespace().count() + 2;
    let replies = messages
        .iter()
        .filter(|m| m.role == Role::Assistant)
        .count();
    demo_tokens(messages) + replies * thought
}

/// The demo's token count of messages: words, plus 4 per message.
fn demo_tokens(messages: &[ChatMessage]) -> usize {
    messages
        .iter()
        .map(|m| m.content.split_whitespace().count() + 4)
        .sum()
}

fn words(s: &str) -> impl Iterator<Item = String> + '_ {
    s.split_whitespace().map(|w| format!(" {w}"))
}

/// FNV-1a, to seed the demo from the prompt.
fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

/// splitmix64: small, deterministic, good enough for fake statistics.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        crate::sample::splitmix64(&mut self.0)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(spec: bool, prompt: &str) -> Vec<EngineEvent> {
        let mut e = DemoEngine::instant();
        let mut out = Vec::new();
        let msgs = [ChatMessage::new(Role::User, prompt)];
        e.generate(&msgs, &Controls::new(spec), &mut |ev| out.push(ev));
        // The decode time is the only wall-clock value; zero it for comparisons.
        for ev in &mut out {
            if let EngineEvent::Done { decode_ms, .. } = ev {
                *decode_ms = 0.0;
            }
        }
        out
    }

    fn text(events: &[EngineEvent]) -> String {
        events
            .iter()
            .filter_map(|e| match e {
                EngineEvent::Text { text, .. } => Some(text.as_str()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn speculative_demo_streams_the_same_text_as_plain_demo() {
        let plain = run(false, "hello there");
        let spec = run(true, "hello there");
        assert_eq!(text(&plain), text(&spec));
        assert!(text(&plain).contains("You wrote \"hello there\"."));
        assert!(spec
            .iter()
            .any(|e| matches!(e, EngineEvent::Verified { .. })));
        assert!(!plain
            .iter()
            .any(|e| matches!(e, EngineEvent::Drafted { .. })));
    }

    #[test]
    fn every_speculative_round_emits_accepted_plus_one_tokens() {
        let ev = run(true, "count the rounds");
        let mut i = 0;
        let mut rounds = 0;
        while i < ev.len() {
            if let EngineEvent::Verified { accepted, drafted } = ev[i] {
                let texts: Vec<&EngineEvent> = ev[i + 1..]
                    .iter()
                    .filter(|e| !matches!(e, EngineEvent::SpecStats(_)))
                    .take_while(|e| matches!(e, EngineEvent::Text { .. }))
                    .collect();
                assert_eq!(texts.len(), accepted + 1);
                for t in &texts[..accepted] {
                    assert!(matches!(
                        t,
                        EngineEvent::Text {
                            kind: TokenKind::Accepted,
                            ..
                        }
                    ));
                }
                let last_kind = if accepted < drafted {
                    TokenKind::Corrected
                } else {
                    TokenKind::Plain
                };
                assert!(
                    matches!(texts[accepted], EngineEvent::Text { kind, .. } if *kind == last_kind)
                );
                rounds += 1;
            }
            i += 1;
        }
        assert!(rounds > 5);
    }

    #[test]
    fn demo_spec_totals_match_its_rounds_and_include_a_timed_plain_step() {
        let ev = run(true, "count the rounds");
        let (mut rounds, mut drafted, mut accepted) = (0, 0, 0);
        for e in &ev {
            if let EngineEvent::Verified {
                accepted: a,
                drafted: d,
            } = e
            {
                rounds += 1;
                drafted += *d as u64;
                accepted += *a as u64;
            }
        }
        let last = ev
            .iter()
            .rev()
            .find_map(|e| match e {
                EngineEvent::SpecStats(s) => Some(s.clone()),
                _ => None,
            })
            .unwrap();
        assert_eq!(last.verify_passes, rounds);
        assert_eq!(last.drafts_proposed, drafted);
        assert_eq!(last.drafts_accepted, accepted);
        // The first round is a probe; the whole reply came from the loop.
        assert!(last.plain_passes >= 1);
        assert_eq!(last.tokens_emitted, accepted + rounds + last.plain_passes);
        assert!(last.speedup().is_some_and(|x| x > 1.0), "{last:?}");
        assert!(!run(false, "count the rounds")
            .iter()
            .any(|e| matches!(e, EngineEvent::SpecStats(_))));
    }

    #[test]
    fn demo_is_deterministic() {
        assert_eq!(run(true, "same prompt"), run(true, "same prompt"));
        assert_ne!(run(true, "same prompt"), run(true, "other prompt"));
    }

    #[test]
    fn demo_stops_when_asked_and_sends_no_done() {
        let mut e = DemoEngine::instant();
        let controls = Controls::new(false);
        let mut n = 0;
        let msgs = [ChatMessage::new(Role::User, "stop me")];
        let mut events = Vec::new();
        e.generate(&msgs, &controls, &mut |ev| {
            if matches!(ev, EngineEvent::Text { .. }) {
                n += 1;
                if n == 5 {
                    controls.request_stop();
                }
            }
            events.push(ev);
        });
        assert_eq!(n, 5);
        assert!(!events.iter().any(|e| matches!(e, EngineEvent::Done { .. })));
    }

    #[test]
    fn a_second_turn_prefills_only_the_new_message_and_context_adds_up() {
        let mut e = DemoEngine::instant();
        let c = Controls::new(false);
        let mut msgs = vec![ChatMessage::new(Role::User, "one two three")];
        let mut ev = Vec::new();
        e.generate(&msgs, &c, &mut |x| ev.push(x));
        let done1 = ev.iter().find_map(|x| match x {
            EngineEvent::Done {
                context_used,
                tokens,
                ..
            } => Some((*context_used, *tokens)),
            _ => None,
        });
        let (ctx1, gen1) = done1.unwrap();
        assert_eq!(ctx1, 3 + 4 + gen1);
        msgs.push(ChatMessage::new(Role::Assistant, "reply"));
        msgs.push(ChatMessage::new(Role::User, "four five"));
        ev.clear();
        e.generate(&msgs, &c, &mut |x| ev.push(x));
        assert!(
            matches!(ev[0], EngineEvent::Prefill { tokens: 6, .. }),
            "{:?}",
            ev[0]
        );
        let ctx2 = ev.iter().find_map(|x| match x {
            EngineEvent::Done {
                context_used,
                tokens,
                ..
            } => Some(context_used - tokens),
            _ => None,
        });
        assert_eq!(ctx2, Some(ctx1 + 6));
    }

    #[test]
    fn demo_routing_picks_distinct_experts_per_layer() {
        let ev = run(false, "route");
        let r = ev
            .iter()
            .find_map(|e| match e {
                EngineEvent::Routing { layer_experts } => Some(layer_experts.clone()),
                _ => None,
            })
            .unwrap();
        assert_eq!(r.len(), 40);
        for experts in r {
            let mut s = experts.clone();
            s.sort();
            s.dedup();
            assert_eq!(s.len(), 8);
            assert!(s.iter().all(|&e| e < 256));
        }
    }
}
