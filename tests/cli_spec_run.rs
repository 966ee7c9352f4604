//! `clover run --spec-type draft-self` (and `mtp`): greedy output identical
//! to plain `clover run`, the speculation statistics on stderr, replayed
//! profiles in `clover bench`, and clear errors.

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
        &["--spec-type", "draft-self", "--spec-draft-experts", "0"][..],
        &["--spec-type", "draft-self", "--spec-draft-experts", "1000"][..],
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
fn mtp_on_a_file_without_the_block_is_one_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.gguf");
    write(Arch::Qwen35Moe, &path);
    let out = run(&path, &["--spec-type", "mtp"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("mtp needs a file with a multi-token-prediction block"),
        "{err}"
    );
}

#[test]
fn a_draft_expert_pool_smaller_than_k_is_one_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.gguf");
    write(Arch::CloverMoe, &path);
    let out = run(
        &path,
        &["--spec-type", "draft-self", "--spec-draft-experts", "1"],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("--spec-draft-experts"), "{err}");
}

/// The numbers on the stderr line that starts with `prefix`.
fn numbers(err: &str, prefix: &str) -> Vec<f64> {
    let line = err
        .lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no line {prefix:?} in:\n{err}"));
    line[prefix.len()..]
        .split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .filter(|t| !t.is_empty() && *t != ".")
        .map(|t| t.parse().unwrap())
        .collect()
}

#[test]
fn draft_self_prints_every_statistic_of_the_issue_with_consistent_values() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.gguf");
    write(Arch::CloverMoe, &path);

    // Default (adaptive) mode: it measures plain steps, so the speed-up is known.
    let out = run(&path, &["--spec-type", "draft-self"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    // drafts proposed, accepted, accepted by the relaxed rule, tokens emitted
    let d = numbers(&err, "spec: drafted");
    let (drafted, accepted, relaxed, emitted) = (d[0], d[1], d[3], d[4]);
    assert!(
        drafted > 0.0 && accepted <= drafted && relaxed == 0.0,
        "{err}"
    );
    // -n 24: the first token comes from the prompt pass, 23 from the loop.
    assert_eq!(emitted, 23.0, "{err}");
    // passes and tokens per forward pass
    let p = numbers(&err, "spec: passes");
    let (verify, plain, per_fwd) = (p[1], p[2], p[3]);
    assert!(verify > 0.0 && plain > 0.0, "{err}");
    assert!((per_fwd - emitted / (verify + plain)).abs() < 1e-3, "{err}");
    // acceptance by draft position: one rate per position drafted
    let by_pos = numbers(&err, "spec: acceptance by position");
    assert!(!by_pos.is_empty() && by_pos.iter().all(|r| (0.0..=1.0).contains(r)));
    // time in draft / verify / rollback (/ plain / total)
    let t = numbers(&err, "spec: time");
    let (t_draft, t_verify, t_rollback, t_plain, t_total) = (t[0], t[1], t[2], t[3], t[4]);
    // (printed to the microsecond: a one-position replay on the tiny file
    // takes a few.)
    assert!(t_draft > 0.0 && t_verify > 0.0 && t_rollback > 0.0, "{err}");
    assert!(
        t_total >= t_draft + t_verify + t_rollback + t_plain - 0.05,
        "{err}"
    );
    // the effective speed-up over plain decoding
    let s = numbers(&err, "spec: effective speed-up over plain decoding");
    assert!(s[0] > 0.0, "{err}");

    // The relaxed rule counts what it accepts apart.
    let out = run(
        &path,
        &[
            "--spec-type",
            "draft-self",
            "--spec-fixed",
            "--spec-accept-ratio",
            "0.3",
            "--spec-accept-delta",
            "0",
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let d = numbers(&err, "spec: drafted");
    let (accepted, relaxed) = (d[1], d[3]);
    assert!(relaxed > 0.0 && relaxed <= accepted, "{err}");
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

#[test]
fn fixed_length_drafting_never_drafts_more_than_the_remaining_tokens_can_use() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.gguf");
    write(Arch::CloverMoe, &path);
    let out = Command::new(env!("CARGO_BIN_EXE_clover"))
        .args(["run", "-m"])
        .arg(&path)
        .args([
            "-t",
            "1",
            "-p",
            "The quick brown fox",
            "-n",
            "4",
            "--temp",
            "0",
        ])
        .args(["--spec-type", "draft-self", "--spec-fixed", "--json"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let j: serde_json::Value =
        serde_json::from_str(stdout.trim_end().lines().last().unwrap()).unwrap();
    assert_eq!(j["n_generated_tokens"], 4, "{stdout}");
    // The prompt pass gives the first token; then at most 3 more can be
    // emitted, and a round that may emit r tokens drafts at most r - 1 (random
    // weights reject every draft: rounds of 2, 1 and 0 drafts).
    let proposed = j["spec"]["drafts_proposed"].as_u64().unwrap();
    assert!(
        proposed <= 3,
        "{proposed} drafts proposed for 3 tokens: {stdout}"
    );
}

/// The replay pipeline of docs/DESIGN.md §4: a profile measured by `clover run
/// --spec-profile-out`, replayed by `clover bench --spec-replay`, whose rows
/// say "simulated acceptance", emit plain greedy's tokens, and include the
/// perfect drafter's ceiling.
#[test]
fn a_measured_acceptance_profile_replays_in_bench_as_simulated_acceptance() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.gguf");
    write(Arch::CloverMoe, &path);
    let profile = dir.path().join("p.json");
    let profile_arg = profile.to_str().unwrap();
    let out = run(
        &path,
        &[
            "--spec-type",
            "draft-self",
            "--spec-fixed",
            "--spec-draft-n-max",
            "4",
            "--spec-profile-out",
            profile_arg,
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("acceptance profile"), "{err}");
    let p = clover::spec::replay::Profile::load(&profile).unwrap();
    assert!(p.rounds > 0 && !p.conditional.is_empty(), "{p:?}");

    let bench = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_clover"))
            .args(["bench", "-m"])
            .arg(&path)
            .args(["-t", "1", "-p", "0", "-n", "12", "-r", "1"])
            .args(extra)
            .output()
            .unwrap()
    };
    let out = bench(&[
        "--spec-type",
        "none,draft-self",
        "--spec-replay",
        profile_arg,
    ]);
    let (stdout, err) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{err}");
    assert!(stdout.contains("tg12 greedy"), "{stdout}");
    assert!(
        stdout.contains("tg12 draft-self (simulated acceptance)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("tg12 perfect drafter (simulated acceptance)"),
        "{stdout}"
    );
    assert!(err.contains("SIMULATED acceptance replayed from"), "{err}");
    assert!(
        err.contains("SIMULATED acceptance: every draft accepted"),
        "{err}"
    );
    // Replayed drafts are verified exactly: plain greedy's tokens, both rows.
    assert_eq!(err.matches("tokens identical").count(), 2, "{err}");
    assert!(!err.contains("DIFFER"), "{err}");

    // Misuse: one line each, before loading anything.
    for (extra, want) in [
        (
            vec!["--spec-type", "none", "--spec-replay", profile_arg],
            "--spec-replay needs --spec-type draft-self",
        ),
        (
            vec![
                "--spec-type",
                "draft-self",
                "--spec-replay",
                "/nonexistent/p.json",
            ],
            "--spec-replay /nonexistent/p.json",
        ),
    ] {
        let out = bench(&extra);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(want), "{err}");
    }
    let out = run(&path, &["--spec-profile-out", profile_arg]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("--spec-profile-out needs --spec-type draft-self"),
        "{err}"
    );
}

/// `clover bench --gen-temp`: the generation tests sample (lossless
/// speculative sampling for draft-self), and say that the tokens are not
/// compared; a bad temperature is one line.
#[test]
fn bench_generation_tests_can_sample() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.gguf");
    write(Arch::CloverMoe, &path);
    let bench = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_clover"))
            .args(["bench", "-m"])
            .arg(&path)
            .args([
                "-t",
                "1",
                "-p",
                "0",
                "-n",
                "12",
                "-r",
                "1",
                "--spec-type",
                "none,draft-self",
            ])
            .args(extra)
            .output()
            .unwrap()
    };
    let out = bench(&["--gen-temp", "0.8"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("tokens sampled (not compared)"), "{err}");
    for bad in ["-1", "nan"] {
        let out = bench(&["--gen-temp", bad]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains("--gen-temp"), "{err}");
    }
}

/// MTP drafting on a qwen35moe file with the block: its measured profile
/// replays in `clover bench` as simulated acceptance, with the ceiling, and
/// both rows emit plain greedy's tokens.
#[test]
fn an_mtp_profile_replays_in_bench_as_simulated_acceptance() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q-mtp.gguf");
    synth::plan_mtp(SynthOptions {
        arch: Arch::Qwen35Moe,
        preset: Preset::Tiny,
        recipe: Recipe::Q4KM,
        seed: 4,
    })
    .unwrap()
    .write(&path, Some(1))
    .unwrap();
    let profile = dir.path().join("p.json");
    let profile_arg = profile.to_str().unwrap();
    let out = run(
        &path,
        &[
            "--spec-type",
            "mtp",
            "--spec-fixed",
            "--spec-draft-n-max",
            "3",
            "--spec-profile-out",
            profile_arg,
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let p = clover::spec::replay::Profile::load(&profile).unwrap();
    assert!(p.rounds > 0 && !p.conditional.is_empty(), "{p:?}");
    let out = Command::new(env!("CARGO_BIN_EXE_clover"))
        .args(["bench", "-m"])
        .arg(&path)
        .args(["-t", "1", "-p", "0", "-n", "12", "-r", "1"])
        .args(["--spec-type", "none,mtp", "--spec-replay", profile_arg])
        .output()
        .unwrap();
    let (stdout, err) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{err}");
    assert!(
        stdout.contains("tg12 mtp (simulated acceptance)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("tg12 perfect mtp drafter (simulated acceptance)"),
        "{stdout}"
    );
    assert_eq!(err.matches("tokens identical").count(), 2, "{err}");
    assert!(!err.contains("DIFFER"), "{err}");
}
