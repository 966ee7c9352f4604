//! The MTP block (docs/DESIGN.md §2.7) against ik_llama.cpp 8337e4c, the
//! peer that runs it, on the converter-made qwen35moe fixture (whose MTP
//! block the checkpoint carried): after a token history, the logits of the
//! first draft and of chained steps, each step fed the previous one's
//! argmax and the block's own output.
//!
//! ik_llama.cpp's answers are stored in tests/fixtures/converter/mtp_ik.json
//! by scripts/oracle/make_mtp_fixture.sh (scripts/oracle/ik_mtp_drafts.cpp
//! built against an ik_llama.cpp build). With `CLOVER_IK_MTP` naming that
//! program, the test also asks it live.
//!
//! Per step: the 16 largest logits ik_llama.cpp gives agree within `TOL`,
//! and the drafted token (the argmax) is the same wherever ik's top two are
//! more than `2 · TOL` apart. The file is f32, but that build keeps the
//! attention's V cache in f16 (clover's is f32 here): measured, the logits
//! differ by at most 2.8e-4 over both cases' steps.

mod converter_common;
mod skip;

use std::process::Command;

use clover::gguf::GgufFile;
use clover::model::{LogitsFor, Model, StateOptions};
use converter_common as fx;
use serde::Deserialize;

const TOL: f32 = 1e-3;

#[derive(Deserialize)]
struct Step {
    token: u32,
    argmax: u32,
    top: Vec<(u32, f32)>,
}

#[derive(Deserialize)]
struct Case {
    history: Vec<u32>,
    steps: Vec<Step>,
}

#[derive(Deserialize)]
struct Fixture {
    cases: Vec<Case>,
}

/// Clover's logits for every step of `case`, and the checks against it.
fn check(model: &Model, case: &Case, what: &str) {
    let n = case.history.len() - 1;
    let mut o = StateOptions::new(512);
    o.max_batch = 32;
    let mut st = model.new_state(o).unwrap();
    model
        .forward(&mut st, &case.history[..n], 0, LogitsFor::Last)
        .unwrap();
    let mut logits = model.mtp_sync(&mut st, &case.history).unwrap().to_vec();
    for (s, step) in case.steps.iter().enumerate() {
        if s > 0 {
            assert_eq!(step.token, case.steps[s - 1].argmax, "{what}: chain");
            logits = model.mtp_step(&mut st, step.token).unwrap().to_vec();
        }
        let worst = step
            .top
            .iter()
            .map(|&(id, want)| (logits[id as usize] - want).abs())
            .fold(0.0f32, f32::max);
        assert!(
            worst <= TOL,
            "{what}, step {s}: logits differ from ik_llama.cpp's by {worst}"
        );
        let gap = step.top[0].1 - step.top[1].1;
        if gap > 2.0 * TOL {
            assert_eq!(
                clover::sample::argmax(&logits),
                step.argmax,
                "{what}, step {s}: another draft than ik_llama.cpp's"
            );
        }
        eprintln!("{what}, step {s}: max |Δlogit| {worst:.2e} over ik's top 16");
    }
}

fn model(file: &GgufFile) -> Model<'_> {
    let mut m = Model::load(file).unwrap();
    m.mtp = true;
    assert!(m.has_mtp(), "the fixture carries an MTP block");
    m
}

#[test]
fn mtp_drafts_equal_ik_llama_cpp_s_on_the_converter_fixture() {
    let file = GgufFile::open(&fx::file("real-f32.gguf")).unwrap();
    let model = model(&file);
    let text = std::fs::read_to_string(fx::dir().join("mtp_ik.json")).unwrap();
    let fixture: Fixture = serde_json::from_str(&text).unwrap();
    assert!(fixture.cases.len() >= 2);
    for (i, case) in fixture.cases.iter().enumerate() {
        check(&model, case, &format!("case {i}"));
    }
}

#[test]
fn mtp_drafts_equal_ik_llama_cpp_s_live() {
    let Some(bin) = std::env::var_os("CLOVER_IK_MTP") else {
        skip::skipped(
            "mtp_drafts_equal_ik_llama_cpp_s_live",
            "CLOVER_IK_MTP is not set",
            "build it with scripts/oracle/make_mtp_fixture.sh (the fixture test still ran)",
        );
        return;
    };
    let path = fx::file("real-f32.gguf");
    let file = GgufFile::open(&path).unwrap();
    let model = model(&file);
    let r = fx::reference();
    let mut history = r.text_ids[..40].to_vec();
    history.extend_from_slice(&r.prompt_ids);
    let out = Command::new(bin)
        .arg(&path)
        .arg("5")
        .args(history.iter().map(|t| t.to_string()))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let case: Case = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(case.history, history);
    check(&model, &case, "live");
}
