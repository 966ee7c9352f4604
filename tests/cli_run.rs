//! `clover run` and `clover chat` (line mode) end to end, on `tiny` synthetic files
//! of both architectures: output, `--json`, timing lines, every error path.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex, OnceLock};

use clover::engine::{generate, GenOptions, LoadedModel, PlainStep, Session, SessionOptions};
use clover::sample::{Sampler, SamplerParams};
use clover::synth::{self, Arch, Preset, Recipe, SynthOptions};

const PROMPT: &str = "The quick brown fox jumps over the lazy dog.";

fn tiny(arch: Arch, recipe: Recipe) -> PathBuf {
    synthetic(arch, Preset::Tiny, recipe)
}

fn synthetic(arch: Arch, preset: Preset, recipe: Recipe) -> PathBuf {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    static LOCK: Mutex<()> = Mutex::new(());
    let dir = DIR.get_or_init(|| tempfile::tempdir().unwrap());
    let path = dir
        .path()
        .join(format!("{preset}-{}-{recipe:?}.gguf", arch.name()));
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    if !path.exists() {
        synth::plan(SynthOptions {
            arch,
            preset,
            recipe,
            seed: 5,
        })
        .unwrap()
        .write(&path, Some(1))
        .unwrap();
    }
    path
}

fn clover(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_clover"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn run_ok(model: &Path, extra: &[&str]) -> Output {
    let m = model.to_str().unwrap();
    let mut args = vec!["run", "-m", m, "-t", "1"];
    args.extend_from_slice(extra);
    let out = clover(&args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The `--json` summary: the last line of stdout.
fn summary(out: &Output) -> serde_json::Value {
    let stdout = String::from_utf8(out.stdout.clone()).unwrap();
    let last = stdout.trim_end().lines().last().unwrap();
    serde_json::from_str(last).unwrap_or_else(|e| panic!("{e}: {last:?}"))
}

fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

/// Greedy generation through the library, with `clover run`'s defaults.
fn library_greedy(path: &Path, n: usize) -> (Vec<u32>, Vec<u32>, String) {
    let model = Arc::new(LoadedModel::open(path).unwrap());
    let prompt = model.tokenize(PROMPT).unwrap();
    let mut opts = SessionOptions::new(4096);
    opts.threads = Some(1);
    let mut s = Session::new(model, opts).unwrap();
    let gen = generate(
        &mut s,
        &prompt,
        &mut Sampler::new(SamplerParams::greedy()),
        &mut PlainStep,
        &GenOptions {
            n_predict: Some(n),
            ..GenOptions::default()
        },
        &mut |_| std::ops::ControlFlow::Continue(()),
    )
    .unwrap();
    (prompt, gen.tokens, gen.text)
}

#[test]
fn greedy_run_is_deterministic_and_equals_the_session_api_on_both_archs() {
    for (arch, recipe) in [
        (Arch::CloverMoe, Recipe::Q8_0),
        (Arch::Qwen35Moe, Recipe::F16),
        (Arch::Qwen35Moe, Recipe::Q4KM),
    ] {
        let path = tiny(arch, recipe);
        let args = ["-p", PROMPT, "-n", "16", "--temp", "0", "--json"];
        let a = run_ok(&path, &args);
        let b = run_ok(&path, &args);
        // Everything but the summary (whose timings differ) is the same.
        let text = |o: &Output| {
            let s = String::from_utf8(o.stdout.clone()).unwrap();
            let cut = s.trim_end().rfind('\n').map_or(0, |i| i + 1);
            s[..cut].to_string()
        };
        assert_eq!(text(&a), text(&b), "{arch:?} {recipe:?}");
        assert_eq!(
            summary(&a)["generated_tokens"],
            summary(&b)["generated_tokens"]
        );
        let j = summary(&a);
        let (prompt, tokens, text) = library_greedy(&path, 16);
        assert_eq!(ids(&j["prompt_tokens"]), prompt);
        assert_eq!(ids(&j["generated_tokens"]), tokens, "{arch:?} {recipe:?}");
        assert_eq!(j["text"], text);
        // The streamed text comes first, then a newline, then the summary line.
        let stdout = String::from_utf8(a.stdout).unwrap();
        assert!(stdout.starts_with(&text), "{stdout:?}");
    }
}

#[test]
fn json_summary_fields_are_consistent() {
    let path = tiny(Arch::CloverMoe, Recipe::F32);
    let out = run_ok(&path, &["-p", PROMPT, "-n", "9", "--json", "--seed", "3"]);
    let j = summary(&out);
    let generated = ids(&j["generated_tokens"]);
    let stop = j["stop_reason"].as_str().unwrap();
    match stop {
        "limit" => assert_eq!(generated.len(), 9),
        "eog" => assert!(generated.len() < 9 && j["eog_token"].is_u64()),
        other => panic!("stop reason {other}"),
    }
    assert_eq!(j["n_generated_tokens"], generated.len());
    assert_eq!(j["n_prompt_tokens"], ids(&j["prompt_tokens"]).len());
    assert_eq!(j["seed"], 3);
    assert_eq!(j["arch"], "clover_moe");
    assert_eq!(j["n_ctx"], 4096);
    assert_eq!(j["threads"], 1);
    let t = &j["timings"];
    let runs = if stop == "limit" { 8 } else { generated.len() };
    assert_eq!(t["eval_runs"], runs);
    assert_eq!(t["prompt_eval_tokens"], j["n_prompt_tokens"]);
    for key in [
        "load_ms",
        "prompt_eval_ms",
        "eval_ms",
        "total_ms",
        "tokens_per_second",
        "prompt_tokens_per_second",
    ] {
        assert!(t[key].as_f64().unwrap() > 0.0, "{key}: {t}");
    }
    let total = t["total_ms"].as_f64().unwrap();
    let parts = t["prompt_eval_ms"].as_f64().unwrap() + t["eval_ms"].as_f64().unwrap();
    assert!(parts <= total, "{t}");
    let tps = t["tokens_per_second"].as_f64().unwrap();
    let expect = runs as f64 * 1000.0 / t["eval_ms"].as_f64().unwrap();
    assert!((tps - expect).abs() <= 1e-6 * expect, "{t}");
}

#[test]
fn timing_lines_in_llama_cpp_format_go_to_stderr() {
    let path = tiny(Arch::Qwen35Moe, Recipe::F32);
    let out = run_ok(&path, &["-p", PROMPT, "-n", "5", "--temp", "0"]);
    let err = String::from_utf8(out.stderr).unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    for label in [
        "llama_perf_context_print:        load time = ",
        "llama_perf_context_print: prompt eval time = ",
        "llama_perf_context_print:        eval time = ",
        "llama_perf_context_print:       total time = ",
        "llama_perf_sampler_print:    sampling time = ",
    ] {
        assert!(err.contains(label), "{label:?} missing from:\n{err}");
        assert!(!stdout.contains(label));
    }
    let prompt_line = err
        .lines()
        .find(|l| l.contains("prompt eval time"))
        .unwrap();
    assert!(
        prompt_line.contains(" tokens (") && prompt_line.ends_with(" tokens per second)"),
        "{prompt_line}"
    );
    let eval_line = err.lines().find(|l| l.contains("  eval time")).unwrap();
    assert!(eval_line.contains("/     4 runs   ("), "{eval_line}");
}

#[test]
fn every_kv_cache_type_runs_and_short_flags_are_understood() {
    // `small`: its head dim (64) holds whole Q8_0 blocks; tiny's (16) does not.
    let path = synthetic(Arch::CloverMoe, Preset::Small, Recipe::Q8_0);
    for ty in ["f32", "f16", "bf16", "q8_0"] {
        let out = run_ok(
            &path,
            &[
                "-p", PROMPT, "-n", "6", "--temp", "0", "-ctk", ty, "-ctv", ty, "-ub", "4", "-b",
                "8", "--json",
            ],
        );
        let j = summary(&out);
        let n = ids(&j["generated_tokens"]).len();
        assert!(n == 6 || j["stop_reason"] == "eog", "{ty}: {j}");
    }
}

#[test]
fn a_prompt_file_gives_the_same_output_as_the_same_prompt_inline() {
    let path = tiny(Arch::CloverMoe, Recipe::F32);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("prompt.txt");
    std::fs::write(&file, PROMPT).unwrap();
    let a = run_ok(&path, &["-p", PROMPT, "-n", "8", "--temp", "0"]);
    let b = run_ok(
        &path,
        &["-f", file.to_str().unwrap(), "-n", "8", "--temp", "0"],
    );
    assert_eq!(a.stdout, b.stdout);
}

#[test]
fn chat_mode_wraps_the_prompt_in_the_chat_template() {
    let path = tiny(Arch::CloverMoe, Recipe::F32);
    let out = run_ok(
        &path,
        &[
            "-p", "hello", "--chat", "--system", "be brief", "-n", "4", "--temp", "0", "--json",
        ],
    );
    let j = summary(&out);
    let model = LoadedModel::open(&path).unwrap();
    let want = model
        .tokenize("<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n")
        .unwrap();
    assert_eq!(ids(&j["prompt_tokens"]), want);
    let raw = summary(&run_ok(&path, &["-p", "hello", "-n", "1", "--json"]));
    assert_eq!(ids(&raw["prompt_tokens"]), model.tokenize("hello").unwrap());
}

/// Runs `clover` expecting failure: one stderr line, a non-zero exit, no panic.
fn fails_with(args: &[&str], needle: &str) {
    let out = clover(args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{args:?} succeeded");
    assert_ne!(out.status.code(), Some(101), "{args:?} panicked: {err}");
    assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
    assert!(
        err.to_lowercase().contains(&needle.to_lowercase()),
        "{args:?}: {err:?} lacks {needle:?}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn every_bad_input_is_one_error_line_and_a_non_zero_exit() {
    let path = tiny(Arch::CloverMoe, Recipe::F32);
    let m = path.to_str().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let garbage = dir.path().join("garbage.gguf");
    std::fs::write(&garbage, b"GGUF\x03\0\0\0not really a model").unwrap();
    let g = garbage.to_str().unwrap();
    let long = "word ".repeat(40);
    fails_with(
        &["run", "-m", "/no/such/model.gguf", "-p", "x"],
        "no/such/model.gguf",
    );
    fails_with(&["run", "-m", g, "-p", "x"], "garbage.gguf");
    fails_with(
        &["run", "-m", dir.path().to_str().unwrap(), "-p", "x"],
        "directory",
    );
    fails_with(&["run", "-m", m, "-p", ""], "prompt is empty");
    fails_with(&["run", "-m", m], "no prompt");
    fails_with(
        &["run", "-m", m, "-p", &long, "-c", "8"],
        "longer than the context of 8",
    );
    fails_with(&["run", "-m", m, "-p", "x", "--bogus"], "--bogus");
    fails_with(&["run", "-m", m, "-p", "x", "-c", "0"], "context size");
    fails_with(&["run", "-m", m, "-p", "x", "-t", "0"], "thread count");
    fails_with(&["run", "-m", m, "-p", "x", "-ub", "0"], "micro-batch");
    fails_with(
        &["run", "-m", m, "-p", "x", "-ctk", "q4_0"],
        "unknown KV cache type",
    );
    fails_with(
        &["run", "-m", m, "-p", "x", "-ctv", "int8"],
        "unknown KV cache type",
    );
    fails_with(
        &["run", "-m", m, "-p", "x", "-ctv", "q8_0"],
        "not a multiple",
    );
    fails_with(&["run", "-m", m, "-p", "x", "-n", "-5"], "-n must be");
    fails_with(&["run", "-m", m, "-p", "x", "--top-p", "2"], "--top-p");
    fails_with(&["run", "-m", m, "-p", "x", "--temp", "nan"], "--temp");
    fails_with(&["run", "-m", m, "-p", "x", "-c", "many"], "many");
    fails_with(
        &["run", "-m", m, "-p", "x", "-f", "y"],
        "cannot be used with",
    );
    fails_with(&["run", "-m", m, "-f", "/no/such/prompt.txt"], "prompt.txt");
    fails_with(&["run", "-m", m, "-p", "x", "--system", "s"], "--chat");
    fails_with(
        &["run", "-m", m, "-p", "x", "--raw", "--chat"],
        "cannot be used with",
    );
    fails_with(&["chat", "-m", "/no/such/model.gguf"], "no/such/model.gguf");
    fails_with(&["chat", "-m", m, "-ctk", "q5_1"], "unknown KV cache type");
}

fn chat_lines(args: &[&str], envs: &[(&str, &Path)], input: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_clover"))
        .args(args)
        .envs(envs.iter().map(|(k, v)| (k, v.as_os_str())))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn chat_with_a_model_file_answers_each_piped_line() {
    let path = tiny(Arch::CloverMoe, Recipe::Q8_0);
    let out = chat_lines(
        &[
            "chat",
            "-m",
            path.to_str().unwrap(),
            "-n",
            "8",
            "--temp",
            "0",
            "-t",
            "1",
        ],
        &[],
        "first question\nsecond question\n",
    );
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    // Each reply ends with a blank line.
    assert_eq!(text.matches("\n\n").count(), 2, "{text:?}");
    assert!(text.trim().len() > 2, "{text:?}");
}

#[test]
fn chat_without_a_model_writes_and_uses_the_default_model_in_the_cache_dir() {
    let cache = tempfile::tempdir().unwrap();
    let envs = [("XDG_CACHE_HOME", cache.path())];
    let args = ["chat", "-n", "4", "--temp", "0", "-t", "1"];
    let first = chat_lines(&args, &envs, "hello\n");
    let err = String::from_utf8_lossy(&first.stderr);
    assert!(first.status.success(), "{err}");
    let bytes = clover::engine::default_model::MODEL_BYTES;
    let file = cache
        .path()
        .join("clover")
        .join(clover::engine::default_model::file_name(bytes));
    assert!(file.is_file(), "{err}");
    assert_eq!(std::fs::metadata(&file).unwrap().len(), bytes.len() as u64);
    assert!(err.contains("wrote the default model"), "{err}");
    assert!(
        err.contains("default model: clover-tiny-kjv, a 6M-parameter clover_moe trained on the King James Bible; pass -m FILE"),
        "{err}"
    );
    let entries = std::fs::read_dir(cache.path().join("clover"))
        .unwrap()
        .count();
    assert_eq!(entries, 1, "a temporary file was left behind");
    // The second run reuses the file and answers the same.
    let second = chat_lines(&args, &envs, "hello\n");
    let err2 = String::from_utf8_lossy(&second.stderr);
    assert!(second.status.success(), "{err2}");
    assert!(!err2.contains("wrote the default model"), "{err2}");
    assert_eq!(first.stdout, second.stdout);
    assert!(!first.stdout.is_empty());
}

/// `clover ARGS` with no `-m`, its default model written to / read from the
/// cache dir `cache`; the run must succeed.
fn default_model_run(args: &[&str], cache: &Path) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_clover"))
        .args(args)
        .env("XDG_CACHE_HOME", cache)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[test]
fn run_without_a_model_uses_the_default_model() {
    let cache = tempfile::tempdir().unwrap();
    let args = [
        "run",
        "-p",
        "In the beginning",
        "-n",
        "6",
        "--temp",
        "0",
        "-t",
        "1",
        "--json",
    ];
    let out = default_model_run(&args, cache.path());
    let s = summary(&out);
    assert_eq!(ids(&s["generated_tokens"]).len(), 6, "{s}");
}

/// `--mlock` reaches the model however it was named (a file, the default
/// model): each run says it locked the file, or warns that the
/// locked-memory limit is too small and goes on; either way it answers the
/// same as without the flag.
#[test]
fn mlock_locks_the_model_or_warns_and_answers_the_same() {
    let path = tiny(Arch::CloverMoe, Recipe::Q8_0);
    let plain = run_ok(&path, &["-p", PROMPT, "-n", "6", "--temp", "0"]);
    let locked = run_ok(&path, &["-p", PROMPT, "-n", "6", "--temp", "0", "--mlock"]);
    assert_eq!(plain.stdout, locked.stdout);
    let said = |out: &Output| {
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        let locked = err
            .lines()
            .any(|l| l.starts_with("mlock: ") && l.contains("locked in memory"));
        let warned = err
            .lines()
            .any(|l| l.starts_with("warning: --mlock: could not lock"));
        assert!(locked != warned, "exactly one of the two lines: {err}");
    };
    said(&locked);
    assert!(!String::from_utf8_lossy(&plain.stderr).contains("mlock"));
    let cache = tempfile::tempdir().unwrap();
    let args = ["run", "-p", "hello", "-n", "2", "-t", "1", "--mlock"];
    said(&default_model_run(&args, cache.path()));
}

#[test]
fn json_mode_gives_one_json_object() {
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/clover-tiny-kjv.gguf");
    let out = run_ok(
        &model,
        &[
            "-p",
            "In the beginning",
            "-n",
            "200",
            "--temp",
            "0",
            "--json-mode",
            "--json",
        ],
    );
    let s = summary(&out);
    let text = s["text"].as_str().unwrap();
    assert!(text.trim_start().starts_with('{'), "{text:?}");
    // Ended by the model (end of generation is allowed only once the object
    // is complete): the text is one JSON object.
    if s["stop_reason"] == "eog" {
        let v: serde_json::Value =
            serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text:?}"));
        assert!(v.is_object(), "{text:?}");
    }
    let m = model.to_str().unwrap();
    let bad = clover(&[
        "run",
        "-m",
        m,
        "-p",
        "x",
        "--json-mode",
        "--spec-type",
        "draft-self",
    ]);
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        err.contains("--json-mode") && err.trim().lines().count() == 1,
        "{err}"
    );
}
