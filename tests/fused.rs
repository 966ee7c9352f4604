//! The fused verify + draft pass (DESIGN §4) against its two parts run
//! apart: its verify rows give `forward_verify`'s logits, and its block rows
//! the logits of `forward_diffusion` over `[d_D, M×masks]` after
//! `commit_verify(D)`, bit for bit; committing any prefix of it leaves the
//! state a separate verify pass leaves. On in-memory tiny models (free and
//! pooled routing) and on synthesized quantized files (repacked products,
//! the multi-position delta rule at real head size).

use clover::gguf::GgufFile;
use clover::model::tiny::{tiny_config, TinyModel};
use clover::model::{ForwardError, LogitsFor, Model, State, StateOptions};
use clover::synth::{self, Arch, Preset, Recipe, SynthOptions};

fn opts() -> StateOptions {
    let mut o = StateOptions::new(80);
    o.max_batch = 40;
    o
}

fn bits(x: &[f32]) -> Vec<u32> {
    x.iter().map(|v| v.to_bits()).collect()
}

fn prefilled(model: &Model, prompt: &[u32]) -> State {
    let mut st = model.new_state(opts()).unwrap();
    model.forward(&mut st, prompt, 0, LogitsFor::Last).unwrap();
    st
}

/// One fused pass over `tokens` with `masks` against the separate passes,
/// then every commit length against a separate verify pass's commit.
fn check(model: &Model, prompt: &[u32], tokens: &[u32], masks: usize, what: &str) {
    let (n, tv, v) = (prompt.len(), tokens.len(), model.n_vocab());
    let d = tv - 1;
    let mask = model.config.mask_token_id.unwrap();

    let mut st = prefilled(model, prompt);
    let fused = model
        .forward_verify_draft(&mut st, tokens, n, masks)
        .unwrap()
        .to_vec();
    assert_eq!(fused.len(), (tv + masks) * v);

    let mut sep = prefilled(model, prompt);
    let verify = model
        .forward_verify(&mut sep, tokens, n, LogitsFor::All)
        .unwrap()
        .to_vec();
    assert!(
        bits(&fused[..tv * v]) == bits(&verify),
        "{what}: the fused pass's verify rows differ from a verify pass"
    );
    model.commit_verify(&mut sep, d).unwrap();
    let mut block = vec![mask; masks + 1];
    block[0] = tokens[d];
    let idx: Vec<usize> = (0..masks).collect();
    let draft = model
        .forward_diffusion(&mut sep, &block, n + d, LogitsFor::Indices(&idx))
        .unwrap()
        .to_vec();
    assert!(
        bits(&fused[tv * v..]) == bits(&draft),
        "{what}: the fused pass's block rows differ from a draft pass after the commit"
    );

    for keep in [0, 1, d, tv] {
        let mut a = prefilled(model, prompt);
        model
            .forward_verify_draft(&mut a, tokens, n, masks)
            .unwrap();
        model.commit_verify(&mut a, keep).unwrap();
        let mut b = prefilled(model, prompt);
        model
            .forward_verify(&mut b, tokens, n, LogitsFor::All)
            .unwrap();
        model.commit_verify(&mut b, keep).unwrap();
        assert_eq!(a.n_past(), n + keep);
        assert!(a.recurrent == b.recurrent, "{what}: keep {keep}: GDN state");
        let next = [tokens[0]];
        let la = model
            .forward(&mut a, &next, n + keep, LogitsFor::Last)
            .unwrap()
            .to_vec();
        let lb = model
            .forward(&mut b, &next, n + keep, LogitsFor::Last)
            .unwrap()
            .to_vec();
        assert!(bits(&la) == bits(&lb), "{what}: keep {keep}: next step");
    }
}

fn drafts(d: usize, seed: u32, n_vocab: u32) -> Vec<u32> {
    (0..=d as u32)
        .map(|i| (i * 17 + seed * 5 + 3) % n_vocab)
        .collect()
}

#[test]
fn fused_passes_equal_verify_then_draft_on_tiny_models() {
    for (layers, interval, seed) in [(4, 2, 31u64), (3, 4, 32), (5, 3, 33)] {
        let tm = TinyModel::random(tiny_config(layers, interval), seed);
        let mut model = tm.model();
        let nv = model.n_vocab() as u32;
        for pool in [0, 3] {
            model.draft_pool = pool;
            for (d, masks) in [(1, 1), (1, 4), (2, 3), (3, 4), (5, 2), (7, 8)] {
                let what = format!("layers {layers} pool {pool} d {d} masks {masks}");
                let toks = drafts(d, seed as u32, nv);
                check(&model, &[3, 17, 42, 0, 31], &toks, masks, &what);
            }
        }
        // From the first position: the prefix is the verify rows alone.
        model.draft_pool = 0;
        let mut st = model.new_state(opts()).unwrap();
        model
            .forward_verify_draft(&mut st, &[5, 9, 11], 0, 3)
            .unwrap();
    }
}

#[test]
fn fused_passes_equal_verify_then_draft_on_quantized_files() {
    for (preset, recipe, seed) in [
        (Preset::Tiny, Recipe::Q4KM, 7u64),
        (Preset::Small, Recipe::ApexMiniPlus, 8),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.gguf");
        synth::plan(SynthOptions {
            arch: Arch::CloverMoe,
            preset,
            recipe,
            seed,
        })
        .unwrap()
        .write(&path, None)
        .unwrap();
        let file = GgufFile::open(&path).unwrap();
        let mut model = Model::load(&file).unwrap();
        let nv = model.n_vocab() as u32;
        for pool in [0, model.config.n_expert_used] {
            model.draft_pool = pool;
            for (d, masks) in [(1, 2), (3, 4), (4, 5)] {
                let what = format!("{preset:?} {recipe:?} pool {pool} d {d} masks {masks}");
                check(&model, &[1, 12, 25, 7], &drafts(d, 2, nv), masks, &what);
            }
        }
    }
}

#[test]
fn fused_pass_misuse_is_an_error() {
    let tm = TinyModel::random(tiny_config(4, 2), 34);
    let model = tm.model();
    let mut st = prefilled(&model, &[3, 17]);
    // One verify row (no draft), no mask, a wrong position, too many rows.
    assert!(matches!(
        model.forward_verify_draft(&mut st, &[4], 2, 2),
        Err(ForwardError::Empty)
    ));
    assert!(model.forward_verify_draft(&mut st, &[4, 5], 2, 0).is_err());
    assert!(matches!(
        model.forward_verify_draft(&mut st, &[4, 5], 3, 2),
        Err(ForwardError::Position { .. })
    ));
    assert!(matches!(
        model.forward_verify_draft(&mut st, &[4; 20], 2, 20),
        Err(ForwardError::BlockTooLong { .. })
    ));
    // A pending pass must be committed first.
    model.forward_verify_draft(&mut st, &[4, 5], 2, 2).unwrap();
    assert!(matches!(
        model.forward_verify_draft(&mut st, &[4, 5], 4, 2),
        Err(ForwardError::VerifyPending)
    ));
    model.commit_verify(&mut st, 1).unwrap();
    assert_eq!(st.n_past(), 3);
}
