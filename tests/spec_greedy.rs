//! The headline invariant (docs/DESIGN.md §4.1): with greedy sampling and exact
//! acceptance, self-speculative decoding emits exactly the tokens of plain
//! greedy decoding, whatever the drafter proposes: the diffusion drafter,
//! the target's own continuation (every draft accepted), a wrong
//! continuation (no draft accepted) and random tokens; for many prompts,
//! lengths and draft lengths; on in-memory tiny models and a synth tiny
//! clover_moe file.

use clover::engine::{generate_tokens as generate, TokenGeneration};
use clover::gguf::GgufFile;
use clover::model::tiny::{tiny_config, TinyModel, TINY_VOCAB};
use clover::model::{ForwardError, LogitsFor, Model, StateOptions};
use clover::sample::{argmax, Sampler, SamplerParams};
use clover::spec::draft::DraftCtx;
use clover::spec::{DiffusionDrafter, Draft, Drafter, RandomDrafter, SequenceDrafter, SpecConfig};
use clover::synth::{self, Arch, Preset, Recipe, SynthOptions};

fn opts() -> StateOptions {
    let mut o = StateOptions::new(96);
    o.max_batch = 16;
    o
}

/// Plain greedy decoding, token by token: the oracle.
fn plain_greedy(model: &Model, prompt: &[u32], n: usize) -> Vec<u32> {
    let mut st = model.new_state(opts()).unwrap();
    let mut tok = argmax(model.forward(&mut st, prompt, 0, LogitsFor::Last).unwrap());
    let mut out = vec![tok];
    let mut pos = prompt.len();
    while out.len() < n {
        tok = argmax(
            model
                .forward(&mut st, &[tok], pos, LogitsFor::Last)
                .unwrap(),
        );
        pos += 1;
        out.push(tok);
    }
    out
}

fn cfg(n: usize, n_max: usize, adaptive: bool) -> SpecConfig {
    SpecConfig {
        n_max,
        n_predict: n,
        adaptive,
        ..SpecConfig::default()
    }
}

fn spec(
    model: &Model,
    prompt: &[u32],
    c: &SpecConfig,
    drafter: &mut dyn Drafter,
) -> TokenGeneration {
    let mut st = model.new_state(opts()).unwrap();
    let mut sampler = Sampler::new(SamplerParams::greedy());
    let mut streamed = vec![];
    let g = generate(model, &mut st, prompt, c, &mut sampler, drafter, &mut |t| {
        streamed.push(t);
        true
    })
    .unwrap();
    assert_eq!(streamed, g.tokens, "on_token saw a different stream");
    g
}

/// Proposes the known continuation with every token shifted by one: never
/// the target's argmax.
struct WrongDrafter {
    seq: Vec<u32>,
    n_vocab: u32,
}

impl Drafter for WrongDrafter {
    fn draft(&mut self, ctx: DraftCtx) -> Result<Draft, ForwardError> {
        let start = (ctx.pos + 1).min(self.seq.len());
        let end = (start + ctx.n_max).min(self.seq.len());
        Ok(Draft {
            tokens: self.seq[start..end]
                .iter()
                .map(|t| (t + 1) % self.n_vocab)
                .collect(),
            dists: vec![],
        })
    }
}

const PROMPTS: [&[u32]; 4] = [
    &[3],
    &[3, 17, 42, 0, 31],
    &[48, 1, 1, 1, 2, 9, 30],
    &[10, 20],
];

fn check_model(model: &Model, lengths: &[usize], draft_lengths: &[usize]) {
    let v = model.n_vocab() as u32;
    for prompt in PROMPTS {
        let prompt: Vec<u32> = prompt.iter().map(|t| t % v).collect();
        for &n in lengths {
            let want = plain_greedy(model, &prompt, n);
            let mut seq = prompt.clone();
            seq.extend(&want);
            for &d in draft_lengths {
                let c = cfg(n, d, false);
                let g = spec(model, &prompt, &c, &mut DiffusionDrafter);
                assert_eq!(g.tokens, want, "diffusion drafter, n {n} D {d}");

                let g = spec(
                    model,
                    &prompt,
                    &c,
                    &mut SequenceDrafter { seq: seq.clone() },
                );
                assert_eq!(g.tokens, want, "own-argmax drafter, n {n} D {d}");
                assert_eq!(g.stats.drafts_accepted, g.stats.drafts_proposed);
                if n > 2 {
                    assert!(g.stats.drafts_proposed > 0);
                    // Every iteration emitted accepted + 1 tokens.
                    assert_eq!(
                        g.stats.tokens_emitted,
                        1 + g.stats.drafts_accepted + g.stats.verify_passes + g.stats.plain_passes
                    );
                }

                let mut wrong = WrongDrafter {
                    seq: seq.clone(),
                    n_vocab: v,
                };
                let g = spec(model, &prompt, &c, &mut wrong);
                assert_eq!(g.tokens, want, "wrong drafter, n {n} D {d}");
                assert_eq!(g.stats.drafts_accepted, 0);
                if n > 2 {
                    assert!(g.stats.drafts_proposed > 0);
                }

                let g = spec(
                    model,
                    &prompt,
                    &c,
                    &mut RandomDrafter::new(n as u64 * 31 + d as u64),
                );
                assert_eq!(g.tokens, want, "random drafter, n {n} D {d}");
            }
            let g = spec(model, &prompt, &cfg(n, 15, true), &mut DiffusionDrafter);
            assert_eq!(g.tokens, want, "adaptive diffusion, n {n}");
        }
    }
}

#[test]
fn speculative_greedy_equals_plain_greedy_on_tiny_models() {
    for (layers, interval, seed) in [(4, 2, 1u64), (4, 4, 2), (3, 3, 3)] {
        let tm = TinyModel::random(tiny_config(layers, interval), seed);
        assert_eq!(tm.model().n_vocab(), TINY_VOCAB);
        check_model(&tm.model(), &[1, 2, 9, 30], &[1, 2, 4, 7, 15]);
    }
}

/// The draft expert pool (`--spec-draft-experts`) changes what the drafter
/// proposes, never what is emitted.
fn check_pooled(model: &mut Model, lengths: &[usize], draft_lengths: &[usize]) {
    let (k, v) = (model.config.n_expert_used, model.n_vocab() as u32);
    for prompt in PROMPTS {
        let prompt: Vec<u32> = prompt.iter().map(|t| t % v).collect();
        for &n in lengths {
            model.draft_pool = 0;
            let want = plain_greedy(model, &prompt, n);
            for pool in [k, k + 1] {
                model.draft_pool = pool;
                for &d in draft_lengths {
                    let g = spec(model, &prompt, &cfg(n, d, false), &mut DiffusionDrafter);
                    assert_eq!(g.tokens, want, "pool {pool}, n {n} D {d}");
                }
                let g = spec(model, &prompt, &cfg(n, 15, true), &mut DiffusionDrafter);
                assert_eq!(g.tokens, want, "pool {pool}, adaptive, n {n}");
            }
        }
    }
}

#[test]
fn speculative_greedy_with_a_draft_expert_pool_equals_plain_greedy() {
    for (layers, interval, seed) in [(4, 2, 1u64), (3, 3, 3)] {
        let tm = TinyModel::random(tiny_config(layers, interval), seed);
        check_pooled(&mut tm.model(), &[2, 9, 30], &[1, 4, 15]);
    }
}

#[test]
fn speculative_greedy_equals_plain_greedy_on_a_synth_clover_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.gguf");
    let plan = synth::plan(SynthOptions {
        arch: Arch::CloverMoe,
        preset: Preset::Tiny,
        recipe: Recipe::Q4KM,
        seed: 7,
    })
    .unwrap();
    plan.write(&path, Some(1)).unwrap();
    let file = GgufFile::open(&path).unwrap();
    let mut model = Model::load(&file).unwrap();
    assert!(model.has_diffusion());
    check_model(&model, &[1, 12, 25], &[1, 3, 15]);
    check_pooled(&mut model, &[12, 25], &[3, 15]);
}

/// Plain and speculative greedy agree on a small synthesized file of
/// `recipe`, whose `what` tensors the loader repacks where the CPU has
/// those products: verify batches then take the same products as decoding.
fn check_repacked_file(recipe: Recipe, seed: u64, what: &str) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("small.gguf");
    synth::plan(SynthOptions {
        arch: Arch::CloverMoe,
        preset: Preset::Small,
        recipe,
        seed,
    })
    .unwrap()
    .write(&path, None)
    .unwrap();
    let file = GgufFile::open(&path).unwrap();
    let model = Model::load(&file).unwrap();
    let repacked = file.derived_tensors().map_or(0, |p| p.len());
    eprintln!("{repacked} {what} tensors repacked");
    check_model(&model, &[1, 12, 25], &[1, 3, 15]);
}

#[test]
fn speculative_greedy_equals_plain_greedy_on_a_repacked_iq4_xs_file() {
    check_repacked_file(Recipe::Iq4XsExpsHq, 8, "IQ4_XS / Q8_0");
}

#[test]
fn speculative_greedy_equals_plain_greedy_on_a_repacked_apex_miniplus_file() {
    // Q3_K experts, Q6_K projections and head, Q8_0 gates, Q5_K shared
    // expert.
    check_repacked_file(Recipe::ApexMiniPlus, 9, "Q3_K / Q5_K / Q6_K / Q8_0");
}

#[test]
fn generation_stops_at_a_stop_token_and_at_n_predict() {
    let tm = TinyModel::random(tiny_config(4, 2), 5);
    let model = tm.model();
    let want = plain_greedy(&model, &[3, 4], 20);
    let mut seq = vec![3, 4];
    seq.extend(&want);
    let mut c = cfg(20, 6, false);
    c.stop = vec![want[7]];
    let g = spec(&model, &[3, 4], &c, &mut SequenceDrafter { seq });
    let first = want.iter().position(|t| *t == want[7]).unwrap();
    assert_eq!(g.tokens, want[..=first]);
}

#[test]
fn speculative_sampling_runs_and_emits_n_predict_tokens() {
    let tm = TinyModel::random(tiny_config(4, 2), 6);
    let model = tm.model();
    for drafter in [0, 1] {
        let mut st = model.new_state(opts()).unwrap();
        let mut sampler = Sampler::new(SamplerParams {
            seed: Some(9),
            ..SamplerParams::default()
        });
        let c = cfg(24, 5, false);
        let mut d: Box<dyn Drafter> = if drafter == 0 {
            Box::new(DiffusionDrafter)
        } else {
            Box::new(RandomDrafter::new(4))
        };
        let g = generate(
            &model,
            &mut st,
            &[1, 2, 3],
            &c,
            &mut sampler,
            d.as_mut(),
            &mut |_| true,
        )
        .unwrap();
        assert_eq!(g.tokens.len(), 24);
        assert!(g.stats.drafts_proposed > 0);
        // The state holds the prompt and every emitted token but the last.
        assert_eq!(st.n_past(), 3 + 24 - 1);
    }
}

#[test]
fn diffusion_drafting_on_random_weights_is_measured_and_still_exact() {
    // Random weights: the diffusion drafts carry no knowledge of the target,
    // so acceptance is near chance (≈ 1 / vocab) and the adaptive mode falls
    // back to plain decoding. Printed (run with --nocapture), not tuned.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("small.gguf");
    synth::plan(SynthOptions {
        arch: Arch::CloverMoe,
        preset: Preset::Small,
        recipe: Recipe::Q4KM,
        seed: 5,
    })
    .unwrap()
    .write(&path, None)
    .unwrap();
    let file = GgufFile::open(&path).unwrap();
    let model = Model::load(&file).unwrap();
    let prompt = [100u32, 200, 300, 400];
    let want = plain_greedy(&model, &prompt, 48);
    for adaptive in [false, true] {
        let g = spec(
            &model,
            &prompt,
            &cfg(48, 15, adaptive),
            &mut DiffusionDrafter,
        );
        eprintln!("small file, adaptive {adaptive}:\n{}", g.stats.report());
        assert_eq!(g.tokens, want);
        assert!(g.stats.drafts_proposed > 0);
    }
}

/// N-gram drafting (and its chain with draft-self) emits plain greedy's
/// tokens, on a clover_moe model and on a qwen35moe file (n-gram drafting
/// needs no diffusion path), and on a prompt that repeats itself it drafts.
#[test]
fn ngram_speculation_equals_plain_greedy_and_drafts_on_repeated_text() {
    use clover::spec::SpecChoice;
    let tm = TinyModel::random(tiny_config(4, 2), 11);
    let model = tm.model();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("qwen.gguf");
    synth::plan(SynthOptions {
        arch: Arch::Qwen35Moe,
        preset: Preset::Tiny,
        recipe: Recipe::Q4KM,
        seed: 3,
    })
    .unwrap()
    .write(&path, Some(1))
    .unwrap();
    let file = GgufFile::open(&path).unwrap();
    let qwen = Model::load(&file).unwrap();
    assert!(!qwen.has_diffusion());
    for (model, name) in [(&model, "tiny clover_moe"), (&qwen, "synth qwen35moe")] {
        let v = model.n_vocab() as u32;
        // A phrase three times over, then its start: the n-grams of the
        // prompt predict its continuation.
        let phrase: Vec<u32> = [5u32, 17, 3, 44, 9, 28, 61, 2]
            .iter()
            .map(|t| t % v)
            .collect();
        let mut prompt = Vec::new();
        for _ in 0..3 {
            prompt.extend_from_slice(&phrase);
        }
        prompt.extend_from_slice(&phrase[..3]);
        for n in [1usize, 9, 30] {
            let want = plain_greedy(model, &prompt, n);
            let mut drafted = 0;
            for (types, adaptive) in [
                ("ngram", false),
                ("ngram:ngram_size_n=2", false),
                ("ngram", true),
                ("ngram:n_max=3,ngram_size_n=1", false),
            ] {
                let choice = SpecChoice::parse_one(&[types]).unwrap();
                let c = choice.configure(cfg(n, 15, adaptive));
                let mut d = choice.drafter().unwrap();
                let g = spec(model, &prompt, &c, &mut d);
                assert_eq!(g.tokens, want, "{name}: {types}, n {n}");
                drafted += g.stats.drafts_proposed;
            }
            // Thirty greedy tokens of a random model repeat themselves.
            if n == 30 {
                assert!(drafted > 0, "{name}: nothing drafted, n {n}");
            }
        }
        if model.has_diffusion() {
            let choice = SpecChoice::parse_one(&["ngram", "draft-self"]).unwrap();
            let c = choice.configure(cfg(30, 15, false));
            let g = spec(model, &prompt, &c, &mut choice.drafter().unwrap());
            assert_eq!(g.tokens, plain_greedy(model, &prompt, 30), "{name}: chain");
        }
    }
}

/// The largest absolute difference between two logit rows.
fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0f32, f32::max)
}

/// A synth file with an MTP block, its states keeping the block's cache.
fn mtp_model(dir: &std::path::Path, arch: Arch, recipe: Recipe) -> GgufFile {
    let path = dir.join(format!("{}-mtp.gguf", arch.name()));
    synth::plan_mtp(SynthOptions {
        arch,
        preset: Preset::Tiny,
        recipe,
        seed: 7,
    })
    .unwrap()
    .write(&path, Some(1))
    .unwrap();
    GgufFile::open(&path).unwrap()
}

/// MTP drafting (alone, capped, adaptive, and behind n-grams as
/// ik_llama.cpp's two-stage chain) emits plain greedy's tokens on a
/// qwen35moe and a clover_moe file with an MTP block; afterwards the MTP
/// cache, kept across accepted and rejected rounds, gives the first draft's
/// logits that one built from scratch over the same tokens gives.
#[test]
fn mtp_speculation_equals_plain_greedy_and_keeps_its_cache_right() {
    use clover::spec::mtp::MtpDrafter;
    use clover::spec::SpecChoice;
    let dir = tempfile::tempdir().unwrap();
    for (arch, recipe) in [
        (Arch::Qwen35Moe, Recipe::Q4KM),
        (Arch::CloverMoe, Recipe::F32),
    ] {
        let file = mtp_model(dir.path(), arch, recipe);
        let mut model = Model::load(&file).unwrap();
        model.mtp = true;
        assert!(model.has_mtp(), "{arch:?}");
        let v = model.n_vocab() as u32;
        for prompt in PROMPTS {
            let prompt: Vec<u32> = prompt.iter().map(|t| t % v).collect();
            for n in [1usize, 9, 30] {
                let want = plain_greedy(&model, &prompt, n);
                let mut drafted = 0;
                for (types, adaptive) in [
                    ("mtp", false),
                    ("mtp:n_max=1", false),
                    ("mtp:n_max=3", false),
                    ("mtp", true),
                    ("ngram+mtp", false),
                ] {
                    let choice = SpecChoice::parse_one(&[types]).unwrap();
                    let c = choice.configure(cfg(n, 15, adaptive));
                    let mut d = choice.drafter().unwrap();
                    let g = spec(&model, &prompt, &c, &mut d);
                    assert_eq!(g.tokens, want, "{arch:?}: {types}, n {n}");
                    drafted += g.stats.drafts_proposed;
                }
                if n > 1 {
                    assert!(drafted > 0, "{arch:?}: nothing drafted, n {n}");
                }
            }
        }
        // The cache after a run of rounds against one built from scratch.
        let prompt: Vec<u32> = [3u32, 17, 42, 0, 31].iter().map(|t| t % v).collect();
        let mut st = model.new_state(opts()).unwrap();
        let mut sampler = Sampler::new(SamplerParams::greedy());
        let c = cfg(40, 4, false);
        let g = generate(
            &model,
            &mut st,
            &prompt,
            &c,
            &mut sampler,
            &mut MtpDrafter::default(),
            &mut |_| true,
        )
        .unwrap();
        assert!(g.stats.drafts_proposed > 0);
        let mut history = prompt.clone();
        history.extend_from_slice(&g.tokens);
        assert_eq!(st.n_past() + 1, history.len());
        let kept = model.mtp_sync(&mut st, &history).unwrap().to_vec();
        let mut fresh = model.new_state(opts()).unwrap();
        let n = history.len() - 1;
        model
            .forward(&mut fresh, &history[..n], 0, LogitsFor::Last)
            .unwrap();
        let built = model.mtp_sync(&mut fresh, &history).unwrap();
        let worst = max_diff(&kept, built);
        // Only summation order differs (verify rows against a prompt batch).
        assert!(worst < 2e-3, "{arch:?}: MTP logits differ by {worst}");

        // Catching up without logits stores only K and V (no attention
        // output, no MoE): the cache it leaves gives the first draft's
        // logits a full sync gives.
        let mut caught = model.new_state(opts()).unwrap();
        model
            .forward(&mut caught, &history[..n], 0, LogitsFor::Last)
            .unwrap();
        let behind = model.mtp_behind(&caught, &history);
        assert_eq!(behind, history.len());
        model
            .mtp_catch_up(&mut caught, &history, behind - 2)
            .unwrap();
        assert_eq!(model.mtp_behind(&caught, &history), 2);
        let after = model.mtp_sync(&mut caught, &history).unwrap();
        let worst = max_diff(after, built);
        assert!(
            worst < 2e-3,
            "{arch:?}: logits after a catch-up differ by {worst}"
        );

        // After a plain streak longer than the catch-up window, a draft runs
        // the window's entries and the round's own (the previous token's and
        // the anchor's) only: the cache holds just those.
        use clover::spec::mtp::CATCH_UP_WINDOW;
        let long: Vec<u32> = (0..CATCH_UP_WINDOW as u32 + 20)
            .map(|i| (i * 37 + 5) % v)
            .collect();
        let n = long.len() - 1;
        let mut st = model.new_state(opts()).unwrap();
        model
            .forward(&mut st, &long[..n], 0, LogitsFor::Last)
            .unwrap();
        let mut sampler = Sampler::new(SamplerParams::greedy());
        let draft = MtpDrafter::default()
            .draft(DraftCtx {
                model: &model,
                state: &mut st,
                anchor: long[n],
                pos: n,
                n_max: 1,
                p_min: 0.0,
                history: &long,
                sampler: &mut sampler,
                sampling: false,
            })
            .unwrap();
        assert_eq!(draft.tokens.len(), 1);
        let m = st.mtp.as_ref().unwrap();
        assert_eq!(m.kv.len(), CATCH_UP_WINDOW + 2, "{arch:?}");
        assert_eq!(model.mtp_behind(&st, &long), 1);
    }
}

/// Proposes the known continuation from even positions only, nothing from
/// odd ones (a free drafter that finds something every other round).
struct EveryOther {
    seq: Vec<u32>,
}

impl Drafter for EveryOther {
    fn draft(&mut self, ctx: DraftCtx) -> Result<Draft, ForwardError> {
        if ctx.pos % 2 == 1 {
            return Ok(Draft::default());
        }
        SequenceDrafter {
            seq: self.seq.clone(),
        }
        .draft(ctx)
    }
}

/// A drafter that takes `cost` per draft and counts its drafts.
struct Slow {
    inner: WrongDrafter,
    cost: std::time::Duration,
    drafts: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl Drafter for Slow {
    fn draft(&mut self, ctx: DraftCtx) -> Result<Draft, ForwardError> {
        std::thread::sleep(self.cost);
        self.drafts
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.inner.draft(ctx)
    }
}

/// Under the adaptive controller a chain prices each stage on its own: a
/// free stage whose drafts are accepted keeps drafting, and a dear stage
/// whose drafts never are, tried when the free one finds nothing, is soon
/// left out (were the chain priced as one drafter, the free stage's wins
/// would keep the dear one drafting every other round).
#[test]
fn a_chain_prices_each_stage_on_its_own() {
    use clover::spec::ngram::ChainDrafter;
    let tm = TinyModel::random(tiny_config(4, 2), 1);
    let model = tm.model();
    let v = model.n_vocab() as u32;
    let prompt: Vec<u32> = [3u32, 17, 42, 0, 31].iter().map(|t| t % v).collect();
    let n = 80;
    let want = plain_greedy(&model, &prompt, n);
    let mut seq = prompt.clone();
    seq.extend(&want);
    let slow_drafts = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut chain = ChainDrafter {
        stages: vec![
            (Box::new(EveryOther { seq: seq.clone() }), 0),
            (
                Box::new(Slow {
                    inner: WrongDrafter { seq, n_vocab: v },
                    cost: std::time::Duration::from_millis(2),
                    drafts: slow_drafts.clone(),
                }),
                0,
            ),
        ],
    };
    let g = spec(&model, &prompt, &cfg(n, 4, true), &mut chain);
    assert_eq!(g.tokens, want);
    let slow = slow_drafts.load(std::sync::atomic::Ordering::Relaxed);
    assert!(g.stats.drafts_accepted >= 20, "{:?}", g.stats);
    assert!(slow <= 4, "the dear stage drafted {slow} times");
}
