//! `clover diffuse` end to end on a synth tiny clover_moe file, and its
//! one-line errors.

use std::process::Command;

use clover::synth::{self, Arch, Preset, Recipe, SynthOptions};

fn clover() -> Command {
    Command::new(env!("CARGO_BIN_EXE_clover"))
}

fn write(arch: Arch, path: &std::path::Path) {
    synth::plan(SynthOptions {
        arch,
        preset: Preset::Tiny,
        recipe: Recipe::F32,
        seed: 3,
    })
    .unwrap()
    .write(path, Some(1))
    .unwrap();
}

#[test]
fn diffuse_generates_n_tokens_and_reports_blocks_and_passes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.gguf");
    write(Arch::CloverMoe, &path);
    for algo in ["confidence", "entropy"] {
        let out = clover()
            .args(["diffuse", "-m"])
            .arg(&path)
            .args(["-p", "hello world", "-n", "20", "--diffusion-steps", "3"])
            .args(["--diffusion-block-size", "6", "--diffusion-algorithm", algo])
            .args(["--diffusion-threshold", "0.5"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{err}");
        assert!(err.contains("20 tokens in"), "{err}");
        // ceil(19 / 6) blocks of at most 3 passes each.
        assert!(err.contains("4 blocks"), "{err}");
    }
}

#[test]
fn diffuse_on_a_qwen35moe_file_is_one_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.gguf");
    write(Arch::Qwen35Moe, &path);
    let out = clover()
        .args(["diffuse", "-m"])
        .arg(&path)
        .args(["-p", "hi"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("no block-diffusion tensors"), "{err}");
}

#[test]
fn diffuse_rejects_zero_steps_and_a_missing_file() {
    let out = clover()
        .args(["diffuse", "-m", "/nonexistent.gguf", "-p", "x"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stderr).lines().count(), 1);
    let out = clover()
        .args([
            "diffuse",
            "-m",
            "/nonexistent.gguf",
            "-p",
            "x",
            "--diffusion-steps",
            "0",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--diffusion-steps"));
}

#[test]
fn denoising_unmasks_at_least_its_quota_per_pass_and_leaves_the_state_alone() {
    use clover::cli::diffuse::{denoise_block, Algorithm};
    use clover::model::tiny::{tiny_config, TinyModel, TINY_MASK};
    use clover::model::{LogitsFor, StateOptions};
    let tm = TinyModel::random(tiny_config(4, 2), 2);
    let model = tm.model();
    let mut st = model.new_state(StateOptions::new(32)).unwrap();
    model
        .forward(&mut st, &[1, 2, 3], 0, LogitsFor::Last)
        .unwrap();
    let rec = st.recurrent.clone();
    for (steps, want_passes) in [(1, 1), (3, 3), (7, 7), (20, 7)] {
        let mut block = vec![TINY_MASK; 8];
        block[0] = 5;
        let passes = denoise_block(
            &model,
            &mut st,
            &mut block,
            3,
            TINY_MASK,
            steps,
            Algorithm::Entropy,
            None,
        )
        .unwrap();
        assert_eq!(passes, want_passes, "steps {steps}");
        assert!(!block[1..].contains(&TINY_MASK), "steps {steps}: {block:?}");
        assert_eq!(block[0], 5);
    }
    assert_eq!(st.recurrent, rec);
    assert_eq!(st.n_past(), 3);
}
