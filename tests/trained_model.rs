//! The shipped trained model (`models/clover-tiny-kjv.gguf`) against the
//! reference logits of the training code (`tests/fixtures/trained_model.json`,
//! written by `training/export.py` from the PyTorch model in float64).
//!
//! This checks the exporter (tensor names, layouts, +1 norms, `ssm_a`, tiled
//! heads, diffusion tensors, tokenizer) and the engine's AR and diffusion
//! passes against an implementation nobody on the Rust side wrote, without
//! PyTorch. `CLOVER_TRAINED_MODEL` / `CLOVER_TRAINED_FIXTURE` point the test at
//! another pair (the training pipeline uses that on fresh exports).

use std::path::PathBuf;

use clover::engine::LoadedModel;
use clover::model::ops::rope_pairs_rotated;
use clover::model::{LogitsFor, StateOptions};
use serde_json::Value;

/// Largest |engine − reference| allowed on a logit (logits span about ±20).
/// The engine runs f32 with the file's f32 weights; the reference is float64.
/// Measured on the shipped model: AR 5.7e-6, diffusion 2.9e-6 (AVX-512); the
/// bound leaves room for other kernel tiers' summation orders, while any
/// layout or convention error moves logits by whole units.
const TOL: f32 = 1e-3;

fn paths() -> (PathBuf, PathBuf) {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let model = std::env::var_os("CLOVER_TRAINED_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("models/clover-tiny-kjv.gguf"));
    let fixture = std::env::var_os("CLOVER_TRAINED_FIXTURE")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("tests/fixtures/trained_model.json"));
    (model, fixture)
}

fn load() -> (LoadedModel, Value) {
    let (model, fixture) = paths();
    let fx: Value = serde_json::from_str(
        &std::fs::read_to_string(&fixture).unwrap_or_else(|e| panic!("{}: {e}", fixture.display())),
    )
    .expect("fixture is JSON");
    let m = LoadedModel::open(&model).unwrap_or_else(|e| panic!("{}: {e}", model.display()));
    (m, fx)
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|x| x.as_u64().expect("id") as u32)
        .collect()
}

/// Compares engine rows with reference rows; returns the max abs difference
/// and asserts the argmax agrees wherever the reference's top two differ by
/// more than the tolerance.
fn compare(what: &str, engine: &[f32], n_vocab: usize, rows: &[Value]) -> f32 {
    assert_eq!(engine.len(), rows.len() * n_vocab, "{what}: row count");
    let mut max = 0.0f32;
    for (r, (row, refrow)) in engine.chunks_exact(n_vocab).zip(rows).enumerate() {
        let ids = ids(&refrow["ids"]);
        let want: Vec<f32> = refrow["logits"]
            .as_array()
            .expect("logits")
            .iter()
            .map(|x| x.as_f64().expect("logit") as f32)
            .collect();
        for (&id, &w) in ids.iter().zip(&want) {
            let d = (row[id as usize] - w).abs();
            max = max.max(d);
            assert!(
                d <= TOL,
                "{what} row {r} token {id}: engine {} reference {w}",
                row[id as usize]
            );
        }
        let am = refrow["argmax"].as_u64().expect("argmax") as usize;
        let best = row
            .iter()
            .enumerate()
            .fold((0, f32::MIN), |b, (i, &x)| if x > b.1 { (i, x) } else { b });
        assert!(
            best.0 == am || (row[am] - best.1).abs() <= 2.0 * TOL,
            "{what} row {r}: engine argmax {} reference argmax {am}",
            best.0
        );
    }
    max
}

#[test]
fn tokenizer_encodes_the_fixture_text_as_the_training_tokenizer_did() {
    let (m, fx) = load();
    let text = fx["text"].as_str().expect("text");
    let want = ids(&fx["tokens"]);
    let got = m.tokenizer.encode(text, false).expect("encode");
    assert_eq!(&got[..want.len()], &want[..]);
    let chat = fx["chat_prompt"].as_str().expect("chat prompt");
    assert_eq!(
        m.tokenizer.encode(chat, true).expect("encode"),
        ids(&fx["chat_prompt_tokens"])
    );
}

#[test]
fn ar_logits_match_the_training_code() {
    let (m, fx) = load();
    let tokens = ids(&fx["tokens"]);
    let mut st = m.model.new_state(StateOptions::new(256)).expect("state");
    let logits = m
        .model
        .forward(&mut st, &tokens, 0, LogitsFor::All)
        .expect("forward")
        .to_vec();
    let max = compare(
        "ar",
        &logits,
        m.model.n_vocab(),
        fx["ar"].as_array().expect("ar rows"),
    );
    eprintln!("AR max |engine - training| = {max:.3e}");
}

#[test]
fn diffusion_logits_match_the_training_code() {
    let (m, fx) = load();
    let tokens = ids(&fx["tokens"]);
    for blk in fx["diffusion"].as_array().expect("blocks") {
        let kind = blk["kind"].as_str().expect("kind");
        let pos = blk["pos"].as_u64().expect("pos") as usize;
        let block = ids(&blk["tokens"]);
        let rows = blk["rows"].as_array().expect("rows");
        let mut st = m.model.new_state(StateOptions::new(256)).expect("state");
        m.model
            .forward(&mut st, &tokens[..pos], 0, LogitsFor::Last)
            .expect("prefix");
        let want: Vec<usize> = (0..rows.len()).collect();
        let logits = m
            .model
            .forward_diffusion(&mut st, &block, pos, LogitsFor::Indices(&want))
            .expect("diffusion")
            .to_vec();
        let max = compare(kind, &logits, m.model.n_vocab(), rows);
        eprintln!("diffusion ({kind}) max |engine - training| = {max:.3e}");
    }
}

#[test]
fn shipped_model_rotates_every_rope_pair_as_it_was_trained() {
    // The training code rotates all n_rot/2 pairs; the file's
    // `rope.dimension_sections` must say so (docs/DESIGN.md §2.4), so that its
    // logits are those of rope on every pair (a file without sections) to
    // the bit, as llama.cpp's would be.
    let (mut m, fx) = load();
    let cfg = &m.model.config;
    let rotated = rope_pairs_rotated(cfg.n_rot / 2, cfg.rope_sections);
    assert!(
        rotated.iter().all(|&r| r),
        "{:?} leaves pairs unrotated: {rotated:?}",
        cfg.rope_sections
    );
    let tokens = ids(&fx["tokens"]);
    let run = |m: &LoadedModel| {
        let mut st = m.model.new_state(StateOptions::new(256)).expect("state");
        let logits = m.model.forward(&mut st, &tokens, 0, LogitsFor::All);
        let bits: Vec<u32> = logits
            .expect("forward")
            .iter()
            .map(|x| x.to_bits())
            .collect();
        bits
    };
    let with_sections = run(&m);
    m.model.config.rope_sections = None;
    assert!(
        with_sections == run(&m),
        "logits differ from rope on every pair"
    );
}
