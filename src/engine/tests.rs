//! Session layer tests on `tiny` synthetic files (written once per test run).

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use kernels::GgmlType;

use super::*;
use crate::gguf::GgufFile;
use crate::model::{LogitsFor, Model, StateOptions};
use crate::sample::{argmax, Sampler, SamplerParams};
use crate::synth::{self, Arch, Preset, Recipe, SynthOptions};
use crate::tui::{ChatEngine, ChatMessage as UiMessage, Controls, EngineEvent, Role};

/// Tiny files, written once into a directory that lives for the test process.
fn tiny(arch: Arch, recipe: Recipe) -> PathBuf {
    synthetic(arch, Preset::Tiny, recipe)
}

fn synthetic(arch: Arch, preset: Preset, recipe: Recipe) -> PathBuf {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    let dir = DIR.get_or_init(|| tempfile::tempdir().unwrap());
    let path = dir
        .path()
        .join(format!("{preset}-{}-{recipe:?}.gguf", arch.name()));
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    if !path.exists() {
        let plan = synth::plan(SynthOptions {
            arch,
            preset,
            recipe,
            seed: 11,
        })
        .unwrap();
        plan.write(&path, Some(1)).unwrap();
    }
    path
}

fn load(path: &Path) -> Arc<LoadedModel> {
    Arc::new(LoadedModel::open(path).unwrap())
}

fn session(model: &Arc<LoadedModel>, n_ctx: usize) -> Session {
    let mut o = SessionOptions::new(n_ctx);
    o.threads = Some(1);
    Session::new(Arc::clone(model), o).unwrap()
}

fn greedy() -> Sampler {
    Sampler::new(SamplerParams::greedy())
}

fn prompt(m: &LoadedModel) -> Vec<u32> {
    m.tokenize("The quick brown fox jumps over the lazy dog.")
        .unwrap()
}

fn run(s: &mut Session, p: &[u32], n: usize) -> Generation {
    let opts = GenOptions {
        n_predict: Some(n),
        ..GenOptions::default()
    };
    generate(s, p, &mut greedy(), &mut PlainStep, &opts, &mut |_| {
        ControlFlow::Continue(())
    })
    .unwrap()
}

/// Greedy decoding written directly against `Model::forward`, with the state
/// options the session uses by default.
fn reference_greedy(path: &Path, p: &[u32], n: usize) -> Vec<u32> {
    let file = GgufFile::open(path).unwrap();
    let model = Model::load(&file).unwrap();
    let tok = LoadedModel::open(path).unwrap();
    let mut st = model
        .new_state(StateOptions {
            n_ctx: 256,
            max_batch: 256,
            type_k: GgmlType::F16,
            type_v: GgmlType::F16,
            mtp: false,
        })
        .unwrap();
    let mut t = argmax(model.forward(&mut st, p, 0, LogitsFor::Last).unwrap());
    let mut out = Vec::new();
    while out.len() < n && !tok.tokenizer.is_eog(t) {
        out.push(t);
        let pos = p.len() + out.len() - 1;
        t = argmax(model.forward(&mut st, &[t], pos, LogitsFor::Last).unwrap());
    }
    out
}

#[test]
fn greedy_generation_equals_a_direct_forward_and_argmax_loop_on_both_archs() {
    for (arch, recipe) in [
        (Arch::CloverMoe, Recipe::F32),
        (Arch::Qwen35Moe, Recipe::Q8_0),
        (Arch::CloverMoe, Recipe::Q4KM),
    ] {
        let path = tiny(arch, recipe);
        let m = load(&path);
        let p = prompt(&m);
        let mut s = session(&m, 256);
        let gen = run(&mut s, &p, 20);
        let want = reference_greedy(&path, &p, 20);
        assert_eq!(gen.tokens, want, "{arch:?} {recipe:?}");
        assert_eq!(gen.prompt, p);
        assert_eq!(gen.prefill.evaluated, p.len());
        if gen.stop != StopReason::Eog {
            assert_eq!((gen.stop, gen.tokens.len()), (StopReason::Limit, 20));
        }
        assert_eq!(gen.text, m.tokenizer.decode(&gen.tokens).unwrap());
        // One forward pass per generated token after the first (and one more for
        // the token that sampled an end of generation).
        let runs = match gen.stop {
            StopReason::Limit => gen.tokens.len() - 1,
            _ => gen.tokens.len(),
        };
        assert_eq!(gen.timings.eval_runs, runs);
        assert_eq!(gen.timings.sample_runs, runs + 1);
        assert_eq!(s.n_past(), p.len() + gen.timings.eval_runs);
    }
}

#[test]
fn a_prompt_extending_the_held_tokens_evaluates_only_the_new_ones() {
    let path = tiny(Arch::CloverMoe, Recipe::F32);
    let m = load(&path);
    let p1 = prompt(&m);
    let mut p2 = p1.clone();
    p2.extend(m.tokenize(" And then it slept.").unwrap());
    let mut s = session(&m, 256);
    s.prefill(&p1).unwrap();
    let (info, logits) = s.prefill(&p2).unwrap();
    assert_eq!(
        (info.reused, info.evaluated),
        (p1.len(), p2.len() - p1.len())
    );
    let reused = logits.to_vec();
    assert_eq!(s.tokens(), &p2[..]);
    // The same two forward calls on a bare state give the same bits.
    let file = GgufFile::open(&path).unwrap();
    let model = Model::load(&file).unwrap();
    let mut st = model
        .new_state(StateOptions {
            n_ctx: 256,
            max_batch: 256,
            type_k: GgmlType::F16,
            type_v: GgmlType::F16,
            mtp: false,
        })
        .unwrap();
    model.forward(&mut st, &p1, 0, LogitsFor::Last).unwrap();
    let direct = model
        .forward(&mut st, &p2[p1.len()..], p1.len(), LogitsFor::Last)
        .unwrap();
    assert_eq!(reused, direct);
}

#[test]
fn a_prompt_diverging_after_the_checkpoint_restarts_there_and_matches_a_fresh_session() {
    let m = load(&tiny(Arch::CloverMoe, Recipe::F32));
    let p = prompt(&m);
    let mut s = session(&m, 256);
    s.prefill(&p).unwrap();
    s.checkpoint();
    assert_eq!(s.checkpoint_pos(), Some(p.len()));
    // Decode a few tokens past the checkpoint (a reply)...
    for t in [40u32, 41, 42] {
        s.decode(t).unwrap();
    }
    // ...then a prompt that shares only the part up to the checkpoint.
    let mut p2 = p.clone();
    p2.extend([50u32, 51]);
    let (info, logits) = s.prefill(&p2).unwrap();
    assert_eq!((info.reused, info.evaluated), (p.len(), 2));
    let restored = logits.to_vec();
    assert_eq!(s.tokens(), &p2[..]);
    let mut fresh = session(&m, 256);
    fresh.prefill(&p).unwrap();
    let (_, logits) = fresh.prefill(&p2).unwrap();
    assert_eq!(restored, logits);
}

#[test]
fn a_checkpointed_prompt_sent_again_evaluates_only_its_last_token_with_the_same_bits() {
    let m = load(&tiny(Arch::CloverMoe, Recipe::F32));
    let p = prompt(&m);
    let mut s = session(&m, 256);
    let (info, logits) = s.prefill_checkpointed(&p).unwrap();
    assert_eq!((info.reused, info.evaluated), (0, p.len()));
    let first = logits.to_vec();
    assert_eq!(s.checkpoint_pos(), Some(p.len() - 1));
    // A reply, then the same prompt (a regeneration).
    for t in [40u32, 41, 42] {
        s.decode(t).unwrap();
    }
    let (info, logits) = s.prefill_checkpointed(&p).unwrap();
    assert_eq!((info.reused, info.evaluated), (p.len() - 1, 1));
    assert_eq!(logits, &first[..]);
    assert_eq!(s.tokens(), &p[..]);
    // A prompt diverging at the last token also restarts there.
    let mut q = p.clone();
    *q.last_mut().unwrap() = 44;
    q.push(45);
    let (info, logits) = s.prefill_checkpointed(&q).unwrap();
    assert_eq!((info.reused, info.evaluated), (p.len() - 1, 2));
    let diverged = logits.to_vec();
    // The same bits as a fresh session evaluating `q` the same way: `p` up
    // to its checkpoint, then `q` from there (a prompt batch's own order —
    // prompt kernels, blocked attention — is not a one-token pass's, so the
    // way the tokens are batched is part of "the same way").
    let mut fresh = session(&m, 256);
    fresh.prefill_checkpointed(&p).unwrap();
    let (info, logits) = fresh.prefill_checkpointed(&q).unwrap();
    assert_eq!((info.reused, info.evaluated), (p.len() - 1, 2));
    assert_eq!(diverged, logits);
}

#[test]
fn a_prompt_sharing_no_usable_prefix_resets_the_state() {
    let m = load(&tiny(Arch::Qwen35Moe, Recipe::F32));
    let p = prompt(&m);
    let mut s = session(&m, 256);
    s.prefill(&p).unwrap();
    s.decode(7).unwrap();
    // Same prompt again: nothing new to evaluate and no checkpoint, so all of it runs.
    let (info, logits) = s.prefill(&p).unwrap();
    assert_eq!((info.reused, info.evaluated), (0, p.len()));
    let again = logits.to_vec();
    let mut fresh = session(&m, 256);
    let (_, first) = fresh.prefill(&p).unwrap();
    assert_eq!(again, first);
    let q = m.tokenize("Something else entirely").unwrap();
    let (info, _) = s.prefill(&q).unwrap();
    assert_eq!((info.reused, info.evaluated), (0, q.len()));
    assert_eq!(s.tokens(), &q[..]);
}

#[test]
fn prefill_splits_long_prompts_into_logical_batches_with_the_same_result() {
    let m = load(&tiny(Arch::CloverMoe, Recipe::F32));
    let p = m
        .tokenize("one two three four five six seven eight nine ten eleven twelve")
        .unwrap();
    let mut one = session(&m, 256);
    let whole = one.prefill(&p).unwrap().1.to_vec();
    let mut o = SessionOptions::new(256);
    o.threads = Some(1);
    o.n_batch = 5;
    o.n_ubatch = 5;
    let mut split = Session::new(Arc::clone(&m), o).unwrap();
    let (info, logits) = split.prefill(&p).unwrap();
    assert_eq!(info.evaluated, p.len());
    let logits = logits.to_vec();
    assert_eq!(split.tokens(), &p[..]);
    // Batches of 5 are different float sums than one batch: compare by the
    // greedy choice and closely, not bit for bit.
    assert_eq!(argmax(&logits), argmax(&whole));
    let max_diff = logits
        .iter()
        .zip(&whole)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    assert!(max_diff < 1e-3, "max diff {max_diff}");
}

#[test]
fn a_driver_advancing_the_state_itself_keeps_the_session_consistent() {
    let m = load(&tiny(Arch::CloverMoe, Recipe::F32));
    let p = prompt(&m);
    let mut a = session(&m, 64);
    a.prefill(&p).unwrap();
    let want = a.decode(9).unwrap().to_vec();
    let mut b = session(&m, 64);
    b.prefill(&p).unwrap();
    let n = p.len();
    let got = b.with_model(|model, st| {
        model
            .forward(st, &[9], n, LogitsFor::Last)
            .map(|l| l.to_vec())
    });
    assert_eq!(got.unwrap(), want);
    assert!(b.note_committed(&[9, 10]).is_err());
    b.note_committed(&[9]).unwrap();
    assert_eq!(b.tokens(), a.tokens());
}

#[test]
fn a_shared_prefix_copy_restarts_only_prompts_that_start_with_that_prefix() {
    let m = load(&tiny(Arch::CloverMoe, Recipe::F32));
    let p = prompt(&m);
    assert!(p.len() > 6);
    let mut s = session(&m, 256);
    s.keep_prefix(&p[..4]);
    s.prefill(&p).unwrap();
    // Shares the prefix, then differs: restarts at its end, with the logits of a
    // session that evaluated it in the same two pieces from scratch.
    let mut q = p[..4].to_vec();
    q.extend(p[1..5].iter().rev());
    let (info, logits) = s.prefill(&q).unwrap();
    assert_eq!((info.reused, info.evaluated), (4, q.len() - 4));
    let warm = logits.to_vec();
    let mut cold = session(&m, 256);
    cold.keep_prefix(&p[..4]);
    let (info, logits) = cold.prefill(&q).unwrap();
    assert_eq!(info.reused, 0);
    assert_eq!(warm, logits.to_vec());
    // Differs inside the prefix: nothing is reused.
    let mut r = q.clone();
    r.swap(0, 1);
    let (info, _) = s.prefill(&r).unwrap();
    assert_eq!(info.reused, 0);
    // A different declared prefix drops the copy.
    s.prefill(&q).unwrap();
    s.keep_prefix(&q[..3]);
    let (info, _) = s.prefill(&p).unwrap();
    assert_eq!(info.reused, 0);
}

#[test]
fn session_rejects_empty_and_too_long_prompts_and_zero_sizes() {
    let m = load(&tiny(Arch::CloverMoe, Recipe::F32));
    let mut s = session(&m, 8);
    assert!(matches!(s.prefill(&[]), Err(EngineError::EmptyPrompt)));
    assert!(matches!(
        s.prefill(&[1; 9]),
        Err(EngineError::PromptTooLong {
            n_prompt: 9,
            n_ctx: 8
        })
    ));
    for bad in [
        SessionOptions::new(0),
        SessionOptions {
            threads: Some(0),
            ..SessionOptions::new(8)
        },
        SessionOptions {
            n_ubatch: 0,
            ..SessionOptions::new(8)
        },
        SessionOptions {
            n_batch: 0,
            ..SessionOptions::new(8)
        },
    ] {
        assert!(matches!(
            Session::new(Arc::clone(&m), bad),
            Err(EngineError::Options(_))
        ));
    }
}

#[test]
fn generation_stops_when_the_context_is_full() {
    let m = load(&tiny(Arch::CloverMoe, Recipe::F32));
    let p = prompt(&m);
    let mut s = session(&m, p.len() + 3);
    let gen = run(&mut s, &p, 100);
    assert_eq!(gen.stop, StopReason::ContextFull);
    // Positions p.len() .. p.len()+2 hold generated tokens; the 4th is sampled
    // from the last position's logits but has nowhere to go.
    assert_eq!(gen.tokens.len(), 4);
    assert_eq!(s.n_past(), p.len() + 3);
}

#[test]
fn every_kv_cache_type_generates() {
    // `small`: its attention head dim (64) holds whole Q8_0 blocks.
    let m = load(&synthetic(Arch::Qwen35Moe, Preset::Small, Recipe::Q8_0));
    let p = prompt(&m);
    for ty in CACHE_TYPES.map(|c| c.1) {
        let mut o = SessionOptions::new(128);
        o.threads = Some(1);
        o.type_k = ty;
        o.type_v = ty;
        let mut s = Session::new(Arc::clone(&m), o).unwrap();
        assert_eq!(s.state.kv.ty_k, ty);
        let gen = run(&mut s, &p, 6);
        assert_eq!((gen.stop, gen.tokens.len()), (StopReason::Limit, 6), "{ty}");
    }
}

#[test]
fn a_cache_type_whose_blocks_do_not_fit_the_head_dim_is_a_clear_error() {
    let m = load(&tiny(Arch::Qwen35Moe, Recipe::F32));
    let mut o = SessionOptions::new(64);
    o.type_v = GgmlType::Q8_0;
    let e = Session::new(m, o)
        .err()
        .expect("q8_0 cannot hold 16-dim heads");
    assert!(e.to_string().contains("-ctv q8_0"), "{e}");
}

/// A step that evaluates the newest token and then proposes a fixed script.
struct Scripted(Vec<Vec<u32>>);

impl Step for Scripted {
    fn step(&mut self, io: StepIo) -> Result<StepStats, EngineError> {
        let (session, history, out) = (io.session, io.history, io.out);
        let next = self.0.remove(0);
        session.decode(*history.last().unwrap())?;
        for &t in &next[..next.len() - 1] {
            session.decode(t)?;
        }
        out.extend(next);
        Ok(StepStats {
            eval_runs: 1,
            ..StepStats::default()
        })
    }
}

fn scripted(
    m: &Arc<LoadedModel>,
    script: Vec<Vec<u32>>,
    n: Option<usize>,
) -> (Generation, Vec<(u32, bool, bool)>) {
    let p = prompt(m);
    let mut s = session(m, 256);
    let mut seen = Vec::new();
    let opts = GenOptions {
        n_predict: n,
        ..GenOptions::default()
    };
    let gen = generate(
        &mut s,
        &p,
        &mut greedy(),
        &mut Scripted(script),
        &opts,
        &mut |ev| {
            if let GenEvent::Token {
                id, thinking, tag, ..
            } = ev
            {
                seen.push((id, thinking, tag));
            }
            ControlFlow::Continue(())
        },
    )
    .unwrap();
    (gen, seen)
}

#[test]
fn multi_token_steps_stop_at_an_end_of_generation_token_which_is_not_emitted() {
    let m = load(&tiny(Arch::CloverMoe, Recipe::F32));
    let eos = m.tokenizer.eos().unwrap();
    let (gen, seen) = scripted(&m, vec![vec![65, 66, 67], vec![68, eos, 69]], None);
    assert_eq!(gen.stop, StopReason::Eog);
    assert_eq!(gen.eog, Some(eos));
    assert_eq!(&gen.tokens[1..], &[65, 66, 67, 68]);
    assert_eq!(seen.len(), 5);
    assert!(!gen.tokens.contains(&eos));
}

#[test]
fn the_token_limit_cuts_a_multi_token_step_short() {
    let m = load(&tiny(Arch::CloverMoe, Recipe::F32));
    let (gen, _) = scripted(&m, vec![vec![65, 66, 67, 68]], Some(3));
    assert_eq!(gen.stop, StopReason::Limit);
    assert_eq!(&gen.tokens[1..], &[65, 66]);
    let (gen, seen) = scripted(&m, vec![], Some(0));
    assert_eq!(gen.stop, StopReason::Limit);
    assert!(gen.tokens.is_empty() && seen.is_empty());
}

#[test]
fn text_between_think_tags_is_flagged_thinking_and_the_tags_are_marked() {
    let m = load(&tiny(Arch::CloverMoe, Recipe::F32));
    let (open, close) = m.think_tokens.expect("synthetic vocab has think tags");
    let (_, seen) = scripted(&m, vec![vec![open, 70, close, 71], vec![72]], Some(6));
    let flags: Vec<(bool, bool)> = seen[1..].iter().map(|&(_, th, tag)| (th, tag)).collect();
    assert_eq!(
        flags,
        [
            (true, true),
            (true, false),
            (true, true),
            (false, false),
            (false, false)
        ]
    );
}

#[test]
fn llama_perf_lines_have_llama_cpp_labels_and_layout() {
    let t = Timings {
        load_ms: 1234.5,
        prompt_ms: 100.0,
        prompt_tokens: 10,
        eval_ms: 300.0,
        eval_runs: 30,
        sample_ms: 3.0,
        sample_runs: 31,
        total_ms: 410.25,
    };
    let want = "\
llama_perf_sampler_print:    sampling time =       3.00 ms /    31 runs   (    0.10 ms per token, 10333.33 tokens per second)
llama_perf_context_print:        load time =    1234.50 ms
llama_perf_context_print: prompt eval time =     100.00 ms /    10 tokens (   10.00 ms per token,   100.00 tokens per second)
llama_perf_context_print:        eval time =     300.00 ms /    30 runs   (   10.00 ms per token,   100.00 tokens per second)
llama_perf_context_print:       total time =     410.25 ms /    40 tokens
";
    assert_eq!(t.llama_perf(), want);
}

#[test]
fn cache_type_names_parse_in_any_case_and_others_are_rejected() {
    assert_eq!(parse_cache_type("F16"), Ok(GgmlType::F16));
    assert_eq!(parse_cache_type("q8_0"), Ok(GgmlType::Q8_0));
    assert_eq!(parse_cache_type("bf16"), Ok(GgmlType::BF16));
    assert_eq!(parse_cache_type("f32"), Ok(GgmlType::F32));
    assert!(parse_cache_type("q4_0").unwrap_err().contains("q4_0"));
}

#[test]
fn the_loaded_model_reads_tokenizer_template_and_mask_from_metadata() {
    let clover = load(&tiny(Arch::CloverMoe, Recipe::F32));
    assert!(!clover.template_fallback);
    assert_eq!(
        clover.tokenizer.mask_token(),
        clover.tokenizer.token_to_id("<|mask|>")
    );
    assert_eq!(clover.tokenizer.vocab_size(), clover.model.n_vocab());
    let text = clover
        .render_chat(&[crate::chat::ChatMessage::user("hi")], true)
        .unwrap();
    assert_eq!(
        text,
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    );
    let ids = clover.tokenize(&text).unwrap();
    assert_eq!(
        ids[0],
        clover.tokenizer.token_to_id("<|im_start|>").unwrap()
    );
    assert_eq!(clover.quant_mix(), "F32");
}

fn chat_turn(
    engine: &mut ChatSession,
    msgs: &[UiMessage],
    stop_after: Option<usize>,
) -> Vec<EngineEvent> {
    let controls = Controls::new(false);
    let mut events = Vec::new();
    let mut texts = 0;
    engine.generate(msgs, &controls, &mut |ev| {
        if matches!(ev, EngineEvent::Text { .. }) {
            texts += 1;
            if Some(texts) == stop_after {
                controls.request_stop();
            }
        }
        events.push(ev);
    });
    events
}

fn reply_text(events: &[EngineEvent]) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            EngineEvent::Text { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

fn chat_engine(m: &Arc<LoadedModel>) -> ChatSession {
    ChatSession::new(session(m, 512), SamplerParams::greedy(), Some(12))
}

#[test]
fn chat_turns_report_prefill_text_layer_times_routing_and_done() {
    let m = load(&tiny(Arch::CloverMoe, Recipe::F32));
    let mut e = chat_engine(&m);
    let info = e.info();
    assert_eq!(info.n_layers(), m.model.config.n_layer);
    assert!(
        info.spec_available,
        "tiny clover_moe files have the diffusion path"
    );
    let msgs = [UiMessage::new(Role::User, "Hello there")];
    let ev = chat_turn(&mut e, &msgs, None);
    let (prompt, _) = e.prompt_tokens(&msgs).unwrap();
    assert!(matches!(ev[0], EngineEvent::Prefill { tokens, .. } if tokens == prompt.len()));
    let texts = ev
        .iter()
        .filter(|x| matches!(x, EngineEvent::Text { .. }))
        .count();
    let Some(EngineEvent::Done {
        tokens,
        context_used,
        ..
    }) = ev.last().cloned()
    else {
        panic!("no Done: {ev:?}")
    };
    assert_eq!(tokens, texts);
    assert_eq!(context_used, e.session().n_past());
    let routing = ev.iter().find_map(|x| match x {
        EngineEvent::Routing { layer_experts } => Some(layer_experts.clone()),
        _ => None,
    });
    let routing = routing.expect("a routing event");
    assert_eq!(routing.len(), m.model.config.n_layer);
    for experts in &routing {
        assert_eq!(experts.len(), m.model.config.n_expert_used);
        assert!(experts
            .iter()
            .all(|&x| (x as usize) < m.model.config.n_expert));
    }
    let times = ev.iter().find_map(|x| match x {
        EngineEvent::LayerTimes { mixer_ms, moe_ms } => Some((mixer_ms.clone(), moe_ms.clone())),
        _ => None,
    });
    let (mixer, moe) = times.expect("a layer-times event");
    assert_eq!(mixer.len(), m.model.config.n_layer);
    assert!(mixer.iter().chain(&moe).all(|&x| x > 0.0));
}

#[test]
fn a_second_chat_turn_prefills_only_new_tokens_and_replies_like_a_fresh_engine() {
    let m = load(&tiny(Arch::CloverMoe, Recipe::F32));
    let mut warm = chat_engine(&m);
    let mut msgs = vec![UiMessage::new(Role::User, "Tell me about foxes.")];
    let first = chat_turn(&mut warm, &msgs, None);
    msgs.push(UiMessage::new(Role::Assistant, reply_text(&first).trim()));
    msgs.push(UiMessage::new(Role::User, "And dogs?"));
    let second = chat_turn(&mut warm, &msgs, None);
    let (prompt2, _) = warm.prompt_tokens(&msgs).unwrap();
    let EngineEvent::Prefill { tokens: n_new, .. } = second[0] else {
        panic!("{:?}", second[0])
    };
    assert!(n_new < prompt2.len(), "{n_new} of {}", prompt2.len());
    assert_eq!(&warm.session().tokens()[..prompt2.len()], &prompt2[..]);
    let mut cold = chat_engine(&m);
    let fresh = chat_turn(&mut cold, &msgs, None);
    assert!(matches!(fresh[0], EngineEvent::Prefill { tokens, .. } if tokens == prompt2.len()));
    assert_eq!(reply_text(&second), reply_text(&fresh));
}

#[test]
fn after_a_context_shift_the_kept_turns_are_read_again_after_the_system_prompt_and_answered_like_a_fresh_engine(
) {
    let m = load(&tiny(Arch::CloverMoe, Recipe::F32));
    let engine = || ChatSession::new(session(&m, 160), SamplerParams::greedy(), Some(12));
    let system = "You are a helpful assistant.";
    let sys_tokens = m
        .tokenize(
            &m.render_chat(&[crate::chat::ChatMessage::new("system", system)], false)
                .unwrap(),
        )
        .unwrap();
    let mut warm = engine();
    let mut msgs = vec![UiMessage::new(Role::System, system)];
    for i in 0..40 {
        msgs.push(UiMessage::new(
            Role::User,
            format!("Question {i}: what about foxes and dogs?"),
        ));
        let ev = chat_turn(&mut warm, &msgs, None);
        assert!(
            matches!(ev.last(), Some(EngineEvent::Done { .. })),
            "turn {i}: {ev:?}"
        );
        let Some(EngineEvent::ContextShift { dropped, tokens }) = ev.first().cloned() else {
            msgs.push(UiMessage::new(Role::Assistant, reply_text(&ev).trim()));
            continue;
        };
        assert!(i > 1, "a shift at turn {i}");
        let kept: Vec<UiMessage> = msgs[..1]
            .iter()
            .chain(&msgs[1 + dropped..])
            .cloned()
            .collect();
        assert_eq!(kept[1].role, Role::User);
        let (prompt, _) = warm.prompt_tokens(&kept).unwrap();
        assert_eq!(tokens, prompt.len());
        let shared = sys_tokens
            .iter()
            .zip(&prompt)
            .take_while(|(a, b)| a == b)
            .count();
        assert!(shared > 0);
        let EngineEvent::Prefill {
            tokens: evaluated, ..
        } = ev[1]
        else {
            panic!("{:?}", ev[1])
        };
        assert_eq!(
            evaluated,
            prompt.len() - shared,
            "re-read after the system prompt"
        );
        let mut cold = engine();
        let fresh = chat_turn(&mut cold, &kept, None);
        assert!(matches!(fresh[0], EngineEvent::Prefill { tokens, .. } if tokens == prompt.len()));
        assert_eq!(reply_text(&ev), reply_text(&fresh));
        return;
    }
    panic!("the context never shifted");
}

#[test]
fn a_turn_too_long_for_the_context_is_one_error_and_the_next_turn_is_answered() {
    let m = load(&tiny(Arch::CloverMoe, Recipe::F32));
    let mut e = ChatSession::new(session(&m, 64), SamplerParams::greedy(), Some(8));
    let long = "word ".repeat(200);
    let ev = chat_turn(&mut e, &[UiMessage::new(Role::User, long)], None);
    assert!(
        matches!(&ev[..], [EngineEvent::Error(msg)] if msg.contains("this turn needs")),
        "{ev:?}"
    );
    let ev = chat_turn(&mut e, &[UiMessage::new(Role::User, "short")], None);
    assert!(
        matches!(ev.last(), Some(EngineEvent::Done { .. })),
        "{ev:?}"
    );
}

#[test]
fn a_stopped_chat_reply_sends_no_done() {
    let m = load(&tiny(Arch::CloverMoe, Recipe::F32));
    let mut e = chat_engine(&m);
    let ev = chat_turn(&mut e, &[UiMessage::new(Role::User, "go")], Some(3));
    let texts = ev
        .iter()
        .filter(|x| matches!(x, EngineEvent::Text { .. }))
        .count();
    assert_eq!(texts, 3);
    assert!(!ev.iter().any(|x| matches!(x, EngineEvent::Done { .. })));
}

#[test]
fn the_default_model_is_written_once_atomically_and_loads() {
    let dir = tempfile::tempdir().unwrap();
    let sub = dir.path().join("clover");
    let bytes = default_model::MODEL_BYTES;
    let d = default_model::ensure_in(&sub, bytes, false).unwrap();
    assert!(d.created);
    assert_eq!(d.path, sub.join(default_model::file_name(bytes)));
    let names: Vec<String> = std::fs::read_dir(&sub)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, [default_model::file_name(bytes)]);
    assert_eq!(std::fs::read(&d.path).unwrap(), bytes);
    let m = LoadedModel::open(&d.path).unwrap();
    assert_eq!(m.model.config.arch.name(), "clover_moe");
    assert_eq!(m.name, default_model::MODEL_NAME);
    assert!(m.model.has_diffusion());
    let again = default_model::ensure_in(&sub, bytes, false).unwrap();
    assert!(!again.created);
    assert!(d.note().contains("trained on the King James Bible"));
    assert!(d.note().contains("pass -m FILE"));
}

#[test]
fn a_truncated_cached_default_model_is_rewritten() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = b"GGUF and some bytes".as_slice();
    let d = default_model::ensure_in(dir.path(), bytes, false).unwrap();
    std::fs::write(&d.path, &bytes[..4]).unwrap();
    let again = default_model::ensure_in(dir.path(), bytes, false).unwrap();
    assert!(again.created);
    assert_eq!(std::fs::read(&again.path).unwrap(), bytes);
}

#[test]
fn a_damaged_cached_default_model_of_the_right_size_is_rewritten() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = default_model::MODEL_BYTES;
    let d = default_model::ensure_in(dir.path(), bytes, false).unwrap();
    let mut damaged = bytes.to_vec();
    let mid = damaged.len() / 2;
    damaged[mid..mid + 64].fill(0xff);
    std::fs::write(&d.path, &damaged).unwrap();
    let again = default_model::ensure_in(dir.path(), bytes, false).unwrap();
    assert!(again.created, "a damaged file of the right size was kept");
    assert_eq!(std::fs::read(&again.path).unwrap(), bytes);
    let kept = default_model::ensure_in(dir.path(), bytes, false).unwrap();
    assert!(!kept.created, "an intact file was rewritten");
}

#[test]
fn different_model_contents_get_different_cache_names() {
    let a = default_model::file_name(b"model one");
    let b = default_model::file_name(b"model two");
    assert_ne!(a, b);
    assert!(
        a.starts_with("clover-tiny-kjv-") && a.ends_with(".gguf"),
        "{a}"
    );
}

#[path = "chat_spec_tests.rs"]
mod chat_spec;

#[test]
fn scoring_a_prompt_leaves_it_checkpointed_before_its_last_token_and_stops_when_told() {
    let m = load(&tiny(Arch::CloverMoe, Recipe::F32));
    // Longer than one scoring batch (32 positions).
    let mut p = prompt(&m);
    while p.len() < 70 {
        p.extend(prompt(&m).into_iter().skip(1));
    }
    let mut s = session(&m, 256);
    let scored = s.score_prompt(&p, 2, &|| true).unwrap();
    assert_eq!(scored.len(), p.len() - 1);
    for (r, &t) in scored.iter().zip(&p[1..]) {
        assert_eq!(r.id, t);
        assert!(r.logprob <= 0.0 && r.top.len() == 2 && r.top[0].1 >= r.logprob);
    }
    assert_eq!(
        (s.tokens(), s.checkpoint_pos()),
        (&p[..p.len() - 1], Some(p.len() - 1))
    );
    // Generating from the prompt evaluates its last token only, with the
    // logits a session that never scored gets the same way.
    let (info, logits) = s.prefill_checkpointed(&p).unwrap();
    assert_eq!((info.reused, info.evaluated), (p.len() - 1, 1));
    let got = logits.to_vec();
    let mut fresh = session(&m, 256);
    let want = fresh.prefill_checkpointed(&p).unwrap().1.to_vec();
    for (g, w) in got.iter().zip(&want) {
        assert!((g - w).abs() <= 1e-4, "{g} against {w}");
    }
    // Told to stop before the second batch.
    let asked = std::cell::Cell::new(0);
    let go_on = || {
        asked.set(asked.get() + 1);
        asked.get() < 2
    };
    let e = s.score_prompt(&p, 0, &go_on).unwrap_err();
    assert!(matches!(e, EngineError::Cancelled), "{e}");
    assert_eq!(asked.get(), 2);
}
