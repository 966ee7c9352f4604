//! `clover bench` end to end on a synthesized tiny qwen35moe file: the
//! llama-bench table and JSON, and one-line errors for bad input.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

fn clover(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_clover"))
        .args(args)
        .output()
        .expect("run clover")
}

/// The tiny f32 qwen35moe model, written once per test binary.
fn tiny_model() -> &'static Path {
    static PATH: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    let (_, p) = PATH.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("tiny.gguf");
        let out = clover(&[
            "synth",
            "--arch",
            "qwen35moe",
            "--preset",
            "tiny",
            "-o",
            p.to_str().unwrap(),
        ]);
        assert!(out.status.success(), "{out:?}");
        (dir, p)
    });
    p
}

fn bench(extra: &[&str]) -> Output {
    let mut args = vec!["bench", "-m", tiny_model().to_str().unwrap()];
    args.extend_from_slice(extra);
    clover(&args)
}

fn stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

/// Non-zero exit, exactly one line on stderr, no panic; returns that line.
fn assert_one_line_failure(out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!out.status.success(), "succeeded; stderr: {stderr}");
    assert!(!stderr.contains("panicked"), "panicked: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "stderr: {stderr:?}");
    stderr.trim_end().to_string()
}

/// The `test` and `t/s` cells of the table's data rows.
fn rows(table: &str) -> Vec<(String, String)> {
    table
        .lines()
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            (cells[6].to_string(), cells[7].to_string())
        })
        .collect()
}

#[test]
fn table_has_llama_bench_header_and_pp_tg_rows() {
    let out = stdout(&bench(&["-p", "16", "-n", "4", "-r", "2", "-t", "1"]));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0],
        "| model                          |       size |     params | backend    | threads |            test |                  t/s |"
    );
    assert!(lines[1].starts_with("| ------------------------------ | ---------: |"));
    let rows = rows(&out);
    assert_eq!(rows.len(), 2, "{out}");
    assert_eq!(rows[0].0, "pp16");
    assert_eq!(rows[1].0, "tg4");
    for (_, ts) in &rows {
        let (mean, sd) = ts.split_once(" ± ").expect("mean ± sd");
        assert!(mean.parse::<f64>().unwrap() > 0.0, "{ts}");
        assert!(sd.parse::<f64>().unwrap() >= 0.0, "{ts}");
    }
    assert!(
        lines[2].starts_with("| qwen35moe ?B all F32"),
        "{}",
        lines[2]
    );
    assert!(
        lines[2].contains("| CPU        |       1 |"),
        "{}",
        lines[2]
    );
}

#[test]
fn depth_and_comma_lists_name_rows_like_llama_bench() {
    let out = stdout(&bench(&[
        "-p", "8,16", "-n", "2", "-d", "8", "-r", "1", "-t", "1,2", "-ctk", "bf16", "-ub", "4",
    ]));
    let names: Vec<String> = rows(&out).into_iter().map(|r| r.0).collect();
    assert_eq!(
        names,
        [
            "pp8 @ d8",
            "pp16 @ d8",
            "tg2 @ d8",
            "pp8 @ d8",
            "pp16 @ d8",
            "tg2 @ d8"
        ]
    );
    let threads: Vec<String> = out
        .lines()
        .skip(2)
        .take(6)
        .map(|l| l.split('|').nth(5).unwrap().trim().to_string())
        .collect();
    assert_eq!(threads, ["1", "1", "1", "2", "2", "2"]);
}

#[test]
fn json_records_carry_r_samples_and_llama_bench_fields() {
    let out = stdout(&bench(&[
        "-p", "16", "-n", "4", "-r", "3", "-t", "1", "-o", "json",
    ]));
    let v: serde_json::Value = serde_json::from_str(&out).expect("valid JSON");
    let recs = v.as_array().expect("an array");
    assert_eq!(recs.len(), 2);
    let (pp, tg) = (&recs[0], &recs[1]);
    assert_eq!(pp["n_prompt"], 16);
    assert_eq!(pp["n_gen"], 0);
    assert_eq!(tg["n_prompt"], 0);
    assert_eq!(tg["n_gen"], 4);
    for r in recs {
        assert_eq!(r["n_depth"], 0);
        assert_eq!(r["n_threads"], 1);
        assert_eq!(r["type_k"], "f16");
        let ts = r["samples_ts"].as_array().unwrap();
        assert_eq!(ts.len(), 3);
        assert_eq!(r["samples_ns"].as_array().unwrap().len(), 3);
        // avg_ts is the mean of the samples, as llama-bench computes it.
        let mean = ts.iter().map(|x| x.as_f64().unwrap()).sum::<f64>() / 3.0;
        assert!((r["avg_ts"].as_f64().unwrap() - mean).abs() <= 1e-9 * mean);
        assert!(r["stddev_ts"].as_f64().unwrap() >= 0.0);
        assert!(r["model_size"].as_u64().unwrap() > 0);
        assert!(r["model_n_params"].as_u64().unwrap() > 0);
        assert!(r["model_filename"].as_str().unwrap().ends_with("tiny.gguf"));
    }
}

#[test]
fn stderr_reports_load_first_token_and_decode_traffic() {
    let out = bench(&["-p", "0", "-n", "3", "-r", "1", "-t", "1"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.lines().any(|l| l.starts_with("load: ")), "{err}");
    assert!(err.lines().any(|l| l.starts_with("first token: ")), "{err}");
    assert!(
        err.lines().any(|l| l.starts_with("tg3 traffic/token: ")),
        "{err}"
    );
    assert!(err.contains("GB/s"), "{err}");
}

#[test]
fn bad_flags_and_files_fail_with_one_line() {
    let cases: [&[&str]; 5] = [
        &["bench", "-m", "/nonexistent/model.gguf", "-r", "1"],
        &["bench", "--bogus"],
        // Without -m, bench runs the built-in default model (as llama-bench
        // has a default model path); -m without a value is an error.
        &["bench", "-m"],
        &["bench", "-m", "x.gguf", "-p", "abc"],
        &["bench", "-m", "x.gguf", "-o", "csv"],
    ];
    for args in cases {
        assert_one_line_failure(&clover(args));
    }
    let m = tiny_model().to_str().unwrap();
    for extra in [
        &["-r", "0"][..],
        &["-t", "0"],
        &["-ctk", "q4_k"],
        &["-p", "0", "-n", "0"],
    ] {
        let mut args = vec!["bench", "-m", m];
        args.extend_from_slice(extra);
        let line = assert_one_line_failure(&clover(&args));
        assert!(line.starts_with("error: "), "{line}");
    }
}

#[test]
fn a_file_that_is_not_gguf_fails_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("junk.gguf");
    std::fs::write(&p, b"not a gguf file at all").unwrap();
    let line = assert_one_line_failure(&clover(&["bench", "-m", p.to_str().unwrap()]));
    assert!(line.contains("junk.gguf"), "{line}");
}

#[test]
fn membw_mode_needs_no_model() {
    let out = stdout(&clover(&[
        "bench",
        "--membw",
        "--membw-mib",
        "8",
        "-r",
        "2",
        "-t",
        "1",
    ]));
    assert!(out.starts_with("membw: read "), "{out}");
    assert!(out.contains("GB/s"), "{out}");
}

/// A tiny clover_moe synth file in `dir`.
fn synth_clover_tiny(dir: &std::path::Path) -> std::path::PathBuf {
    let p = dir.join("clover.gguf");
    let out = clover(&[
        "synth",
        "--arch",
        "clover_moe",
        "--preset",
        "tiny",
        "-o",
        p.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{out:?}");
    p
}

#[test]
fn spec_type_runs_greedy_and_draft_self_tg_rows_with_the_same_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let p = synth_clover_tiny(dir.path());
    let out = clover(&[
        "bench",
        "-m",
        p.to_str().unwrap(),
        "-p",
        "0",
        "-n",
        "12",
        "-r",
        "2",
        "-t",
        "1",
        "--spec-type",
        "none,draft-self",
        "--spec-fixed",
        "--spec-draft-n-max",
        "4",
        "--gen-prompt",
        "The quick brown fox",
    ]);
    let table = stdout(&out);
    let names: Vec<String> = rows(&table).into_iter().map(|(t, _)| t).collect();
    assert_eq!(names, ["tg12 greedy", "tg12 draft-self"], "{table}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("spec: acceptance by position"), "{err}");
    assert!(
        err.contains("tg12 draft-self: speed-up over greedy"),
        "{err}"
    );
    assert!(err.contains("tokens identical"), "{err}");
}

#[test]
fn spec_type_draft_self_on_a_qwen35moe_file_fails_with_one_line() {
    let out = bench(&["-p", "0", "-n", "4", "--spec-type", "draft-self"]);
    let line = assert_one_line_failure(&out);
    assert!(line.contains("draft-self"), "{line}");
}

#[test]
fn pass_costs_prints_a_plain_row_and_verify_and_draft_rows_per_length() {
    let dir = tempfile::tempdir().unwrap();
    let p = synth_clover_tiny(dir.path());
    let out = clover(&[
        "bench",
        "-m",
        p.to_str().unwrap(),
        "--pass-costs",
        "2,4",
        "-r",
        "2",
        "-t",
        "1",
    ]);
    let table = stdout(&out);
    // | threads | pass | tokens | median ms | x plain step | min ms | max ms |
    let cells: Vec<Vec<String>> = table
        .lines()
        .skip(2)
        .map(|l| l.split('|').map(|c| c.trim().to_string()).collect())
        .collect();
    let kinds: Vec<(&str, &str)> = cells
        .iter()
        .map(|c| (c[2].as_str(), c[3].as_str()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("plain", "1"),
            ("verify", "2"),
            ("draft", "2"),
            ("verify", "4"),
            ("draft", "4")
        ],
        "{table}"
    );
    assert_eq!(cells[0][5], "1.00", "{table}");
    assert!(
        cells.iter().all(|c| c[4].parse::<f64>().unwrap() > 0.0),
        "{table}"
    );
}

#[test]
fn pass_costs_on_a_qwen35moe_file_fails_with_one_line() {
    let out = bench(&["--pass-costs", "4"]);
    let line = assert_one_line_failure(&out);
    assert!(line.contains("pass-costs"), "{line}");
}

#[test]
fn spec_type_ngram_and_chains_run_tg_rows_with_greedys_tokens_on_a_qwen35moe_file() {
    let out = bench(&[
        "-p",
        "0",
        "-n",
        "16",
        "-r",
        "2",
        "-t",
        "1",
        "--spec-type",
        "none,ngram,ngram-mod:n_max=4,ngram_size_n=2",
        "--gen-prompt",
        "one two three one two three one two",
    ]);
    let table = stdout(&out);
    let names: Vec<String> = rows(&table).into_iter().map(|(t, _)| t).collect();
    assert_eq!(
        names,
        [
            "tg16 greedy",
            "tg16 ngram",
            "tg16 ngram:ngram_size_n=2,n_max=4"
        ],
        "{table}"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("tg16 ngram: speed-up over greedy"), "{err}");
    assert_eq!(err.matches("tokens identical").count(), 2, "{err}");
    // A chain with draft-self needs the diffusion tensors this file lacks.
    let out = bench(&["-p", "0", "-n", "4", "--spec-type", "ngram+draft-self"]);
    let line = assert_one_line_failure(&out);
    assert!(
        line.contains("draft-self needs a clover_moe file"),
        "{line}"
    );
    let out = bench(&["-p", "0", "-n", "4", "--spec-type", "ngram:size=3"]);
    let line = assert_one_line_failure(&out);
    assert!(line.contains("no parameter 'size'"), "{line}");
}
