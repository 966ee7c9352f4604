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

#[test]
fn json_summary_carries_consistent_speculation_counters() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.gguf");
    write(Arch::CloverMoe, &path);
    let out = run(
        &path,
        &["--spec-type", "draft-self", "--spec-fixed", "--json"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    let j: serde_json::Value =
        serde_json::from_str(stdout.trim_end().lines().last().unwrap()).unwrap();
    let s = &j["spec"];
    let v = |k: &str| -> Vec<u64> {
        s[k].as_array()
            .unwrap_or_else(|| panic!("{k}: {s}"))
            .iter()
            .map(|x| x.as_u64().unwrap())
            .collect()
    };
    let (prop, acc, hist) = (
        v("proposed_by_pos"),
        v("accepted_by_pos"),
        v("accepted_len_hist"),
    );
    assert_eq!(
        s["drafts_accepted"].as_u64().unwrap(),
        acc.iter().sum::<u64>()
    );
    assert_eq!(
        s["drafts_proposed"].as_u64().unwrap(),
        prop.iter().sum::<u64>()
    );
    // Every verify pass is one iteration of the histogram.
    assert_eq!(
        s["verify_passes"].as_u64().unwrap(),
        hist.iter().sum::<u64>()
    );
    let weighted: u64 = hist.iter().enumerate().map(|(k, n)| k as u64 * n).sum();
    assert_eq!(weighted, s["drafts_accepted"].as_u64().unwrap());
    // The loop emitted every generated token after the first (which comes
    // from the prompt pass); its last step may have produced a few extra.
    let emitted = s["tokens_emitted"].as_u64().unwrap();
    let generated = j["n_generated_tokens"].as_u64().unwrap();
    assert!(emitted + 1 >= generated && emitted > 0, "{s}");
    assert!(s["total_ms"].as_f64().unwrap() > 0.0, "{s}");
    // A plain run has no speculation counters.
    let plain = run(&path, &["--json"]);
    let stdout = String::from_utf8(plain.stdout).unwrap();
    let j: serde_json::Value =
        serde_json::from_str(stdout.trim_end().lines().last().unwrap()).unwrap();
    assert!(j["spec"].is_null(), "{j}");
}
