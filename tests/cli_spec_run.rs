//! `clover run --spec-type draft-self`: greedy output identical to plain
//! `clover run`, the speculation statistics on stderr, and clear errors.

use std::path::Path;
use std::process::Command;

use clover::synth::{self, Arch, Preset, Recipe, SynthOptions};

fn write(arch: Arch, path: &Path) {
    synth::plan(SynthOptions {
        arch,
        preset: Preset::Tiny,
        recipe: Recipe::Q4KM,
        seed: 4,
    })
    .unwrap()
    .write(path, Some(1))
    .unwrap();
}

fn run(path: &Path, extra: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_clover"))
        .args(["run", "-m"])
        .arg(path)
        .args([
            "-t",
            "1",
            "-p",
            "The quick brown fox",
            "-n",
            "24",
            "--temp",
            "0",
        ])
        .args(extra)
        .output()
        .unwrap()
}

#[test]
fn draft_self_greedy_output_equals_plain_and_reports_statistics() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.gguf");
    write(Arch::CloverMoe, &path);
    let plain = run(&path, &[]);
    assert!(
        plain.status.success(),
        "{}",
        String::from_utf8_lossy(&plain.stderr)
    );
    for extra in [
        &["--spec-type", "draft-self"][..],
        &[
            "--spec-type",
            "draft-self",
            "--spec-fixed",
            "--spec-draft-n-max",
            "5",
        ][..],
    ] {
        let spec = run(&path, extra);
        let err = String::from_utf8_lossy(&spec.stderr);
        assert!(spec.status.success(), "{err}");
        assert_eq!(spec.stdout, plain.stdout, "{extra:?}");
        assert!(err.contains("spec: drafted"), "{err}");
        assert!(err.contains("tokens per forward"), "{err}");
    }
}

#[test]
fn draft_self_on_a_qwen35moe_file_is_one_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.gguf");
    write(Arch::Qwen35Moe, &path);
    let out = run(&path, &["--spec-type", "draft-self"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("draft-self"), "{err}");
}
