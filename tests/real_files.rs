//! Files as llama.cpp's converter writes them (tests/converter_common): the
//! F32 and BF16 output of convert_hf_to_gguf.py for a transformers
//! Qwen3.5-MoE checkpoint load, tokenize as transformers does, and compute
//! what transformers computes.
//!
//! - F32: greedy ids equal transformers', logits within 2e-4 over 64
//!   teacher-forced positions, perplexity within 1e-4 relative on the same
//!   windows.
//! - BF16: compared with transformers running the BF16 file's arithmetic in
//!   f32 (the script's `Bf16Arithmetic`: the weights the file stores as BF16
//!   rounded to BF16, and the input of every product with such a weight
//!   rounded to BF16, as ggml's BF16 dot rounds it). Two correct programs
//!   still differ there: their f32 sums differ in the last bits, so some
//!   values land on the other side of a BF16 rounding edge, move by a BF16
//!   step, and this random model carries that on. The bound is measured, not
//!   chosen: the script reran the emulation with every rounded input scaled
//!   by (1 + 1e-6 N(0, 1)), and clover may differ from the emulation by at
//!   most 1.5 times what those reruns did (per position and overall); a
//!   program that skipped the activations' rounding differs by several times
//!   more, which the test checks too. Greedy ids must equal the emulation's
//!   while its top-2 gap stays above 0.05 (three times the reruns' early
//!   row differences).
mod converter_common;

use std::process::Command;

use clover::engine::LoadedModel;
use clover::model::{LayerKind, LogitsFor, StateOptions};
use converter_common as fx;

fn load(name: &str) -> LoadedModel {
    LoadedModel::open(&fx::file(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn greedy(m: &LoadedModel, prompt: &[u32], n: usize) -> Vec<u32> {
    let model = &m.model;
    let mut st = model
        .new_state(StateOptions::new(prompt.len() + n + 8))
        .unwrap();
    let mut logits = model
        .forward(&mut st, prompt, 0, LogitsFor::Last)
        .unwrap()
        .to_vec();
    let mut out = Vec::new();
    for i in 0..n {
        let best = (0..logits.len()).fold(0, |b, j| if logits[j] > logits[b] { j } else { b });
        out.push(best as u32);
        logits = model
            .forward(&mut st, &[best as u32], prompt.len() + i, LogitsFor::Last)
            .unwrap()
            .to_vec();
    }
    out
}

/// |ours − reference| over the teacher-forced positions: the mean of each
/// position's largest difference, the largest overall, and the largest of
/// the columns not stored (whose reference is 0: their output rows are zero).
fn logit_stats(m: &LoadedModel, reference: &[f32]) -> (f32, f32, f32) {
    let r = fx::reference();
    let model = &m.model;
    let n = r.forced_ids.len();
    let mut st = model.new_state(StateOptions::new(n + 8)).unwrap();
    let ours = model
        .forward(&mut st, &r.forced_ids, 0, LogitsFor::All)
        .unwrap();
    let nv = model.n_vocab();
    let cols = &r.logits_columns;
    assert_eq!(reference.len(), n * cols.len());
    let mut stored = vec![false; nv];
    cols.iter().for_each(|&c| stored[c as usize] = true);
    let (mut sum, mut max, mut off) = (0f32, 0f32, 0f32);
    for p in 0..n {
        let row = &ours[p * nv..(p + 1) * nv];
        let d = cols
            .iter()
            .enumerate()
            .map(|(k, &c)| (row[c as usize] - reference[p * cols.len() + k]).abs())
            .fold(0f32, f32::max);
        sum += d;
        max = max.max(d);
        for (j, &x) in row.iter().enumerate() {
            if !stored[j] {
                off = off.max(x.abs());
            }
        }
    }
    (sum / n as f32, max, off)
}

/// `clover perplexity`'s estimate on the reference text, as printed.
fn perplexity(name: &str) -> f64 {
    let r = fx::reference();
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("text.txt");
    std::fs::write(&text, &r.text).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_clover"))
        .args(["perplexity", "-m"])
        .arg(fx::file(name))
        .arg("-f")
        .arg(&text)
        .args([
            "-c",
            &r.ppl_ctx.to_string(),
            "-t",
            "2",
            "-ctk",
            "f32",
            "-ctv",
            "f32",
            // An f32 cache as asked: flash attention (the default) keeps it
            // in f16, as llama.cpp casts it.
            "-fa",
            "off",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("Final estimate: PPL = "))
        .unwrap_or_else(|| panic!("no estimate in {stdout}"));
    line.split_whitespace().next().unwrap().parse().unwrap()
}

/// `clover perplexity` prints llama-perplexity's final line digit for digit
/// (estimate and error) for the same arguments in llama.cpp's summation
/// order: its defaults (f16 cache, flash attention on), flash attention
/// off, an f32 cache each way, BF16, and both forms of flash attention (a
/// 16-token batch goes row by row, a 64-token one by tiles). Stored from
/// llama.cpp 0c1e570 by `scripts/oracle/make_perplexity_fixture.sh`.
#[test]
fn perplexity_prints_llama_perplexitys_final_line_for_the_same_arguments() {
    #[derive(serde::Deserialize)]
    struct Case {
        args: String,
        #[serde(rename = "final")]
        last: String,
    }
    #[derive(serde::Deserialize)]
    struct Cases {
        cases: Vec<Case>,
    }
    let json = std::fs::read_to_string(fx::dir().join("perplexity.json")).unwrap();
    let cases: Cases = serde_json::from_str(&json).unwrap();
    assert!(cases.cases.len() >= 8);
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("text.txt");
    std::fs::write(&text, &fx::reference().text).unwrap();
    let mut wrong = Vec::new();
    for case in &cases.cases {
        let out = Command::new(env!("CARGO_BIN_EXE_clover"))
            .env("CLOVER_BATCH_ORDER", "ggml")
            .args(["perplexity", "-m"])
            .arg(fx::file("real-f32.gguf"))
            .arg("-f")
            .arg(&text)
            .args(["-t", "2"])
            .args(case.args.split(' '))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}: {}",
            case.args,
            String::from_utf8_lossy(&out.stderr)
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        let line = stdout
            .lines()
            .find(|l| l.starts_with("Final estimate: PPL = "))
            .unwrap_or_else(|| panic!("{}: no estimate in {stdout}", case.args));
        if line != case.last {
            wrong.push(format!(
                "{}: clover {line:?}, llama {:?}",
                case.args, case.last
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn converter_files_load_with_the_checkpoints_layer_pattern() {
    let r = fx::reference();
    let layer_types = r.config["layer_types"].as_array().unwrap();
    for name in ["real-f32.gguf", "real-bf16.gguf"] {
        let m = load(name);
        let c = &m.model.config;
        // The MTP block (`nextn_predict_layers`) is not part of the stack.
        assert_eq!((c.n_layer, c.n_layer_all), (8, 9), "{name}");
        for (i, t) in layer_types.iter().enumerate() {
            let want = match t.as_str().unwrap() {
                "full_attention" => LayerKind::Attention,
                _ => LayerKind::DeltaNet,
            };
            assert_eq!(c.layer_kinds[i], want, "{name} layer {i}");
        }
        assert_eq!(m.model.n_vocab(), 151936, "{name}");
        assert_eq!(
            m.file.get("tokenizer.ggml.pre").and_then(|v| v.as_str()),
            Some("qwen2"),
            "{name}"
        );
    }
}

#[test]
fn tokenization_equals_transformers() {
    let r = fx::reference();
    let m = load("real-f32.gguf");
    assert_eq!(m.tokenizer.encode(&r.prompt, false).unwrap(), r.prompt_ids);
    assert_eq!(m.tokenizer.encode(&r.text, false).unwrap(), r.text_ids);
}

#[test]
fn f32_greedy_ids_and_logits_equal_transformers() {
    let r = fx::reference();
    let m = load("real-f32.gguf");
    assert_eq!(
        greedy(&m, &r.prompt_ids, r.greedy_ids.len()),
        r.greedy_ids,
        "greedy ids (transformers' smallest top-2 gap: {})",
        r.greedy_min_top2_gap
    );
    let (_, on, off) = logit_stats(&m, &fx::logits(&r.logits_file));
    eprintln!("f32 logits: max |clover - transformers| {on:.3e} (zero rows: {off:.3e})");
    assert!(on <= 2e-4, "max logit difference {on}");
    assert!(off <= 2e-4, "logits of zero output rows {off}");
}

#[test]
fn f32_perplexity_equals_transformers() {
    let r = fx::reference();
    let ppl = perplexity("real-f32.gguf");
    let rel = (ppl - r.ppl).abs() / r.ppl;
    eprintln!("f32 perplexity: clover {ppl}, transformers {}", r.ppl);
    assert!(rel <= 1e-4, "clover {ppl} vs transformers {}", r.ppl);
}

#[test]
fn bf16_computes_what_bf16_arithmetic_gives() {
    let r = fx::reference();
    let b = &r.bf16;
    let m = load("real-bf16.gguf");
    let clear = b
        .greedy_top2_gaps
        .iter()
        .take_while(|&&g| g >= 0.05)
        .count();
    assert!(clear >= 4, "only {clear} clear greedy steps in the fixture");
    assert_eq!(
        greedy(&m, &r.prompt_ids, clear),
        b.greedy_ids[..clear],
        "greedy ids while the emulation's choice is clear"
    );
    let (row_max_mean, max, off) = logit_stats(&m, &fx::logits(&b.logits_file));
    let j = &b.jitter;
    eprintln!(
        "bf16 logits against the emulation: row max mean {row_max_mean:.3e} (reruns {:.3e}, \
         without activation rounding {:.3e}), max {max:.3e} (reruns {:.3e}); zero rows {off:.1e}",
        j.row_max_mean, j.weights_only_row_max_mean, j.max
    );
    assert!(row_max_mean <= 1.5 * j.row_max_mean, "{row_max_mean}");
    assert!(max <= 1.5 * j.max, "{max}");
    // The bound tells the arithmetic apart: skipping the rounding is outside.
    assert!(1.5 * j.row_max_mean < j.weights_only_row_max_mean);
    assert!(off <= 2e-4, "logits of zero output rows {off}");
    // Perplexity: a quarter of what BF16 arithmetic moves it from f32's.
    let ppl = perplexity("real-bf16.gguf");
    let rel = (ppl - b.ppl).abs() / b.ppl;
    let effect = (b.ppl - r.ppl).abs() / r.ppl;
    eprintln!(
        "bf16 perplexity: clover {ppl}, emulation {} ({rel:.2e} relative; BF16 against f32: {effect:.2e})",
        b.ppl
    );
    assert!(rel <= 0.25 * effect, "clover {ppl} vs emulation {}", b.ppl);
}

#[test]
fn converter_files_run_from_the_command_line() {
    let out = Command::new(env!("CARGO_BIN_EXE_clover"))
        .args(["run", "-m"])
        .arg(fx::file("real-bf16.gguf"))
        .args([
            "-p",
            "In the beginning",
            "-n",
            "8",
            "--temp",
            "0",
            "-t",
            "2",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.stdout.is_empty());
}

/// A converter-made qwen35moe file speculates with n-gram drafts and with
/// its MTP block from the command line (alone, with ik_llama.cpp's
/// parameters, and chained as ik_llama.cpp's repeated `--spec-type`
/// spelling), printing plain greedy's text; draft-self, which needs the
/// block-diffusion tensors, is refused in one line.
#[test]
fn converter_files_speculate_with_ngram_and_mtp_drafts() {
    let run = |extra: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_clover"))
            .args(["run", "-m"])
            .arg(fx::file("real-f32.gguf"))
            .args([
                "-p",
                "In the beginning God created the heaven and the earth. In the beginning",
                "-n",
                "24",
                "--temp",
                "0",
                "-t",
                "2",
            ])
            .args(extra)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, plain, err) = run(&[]);
    assert!(ok, "{err}");
    for extra in [
        &["--spec-type", "ngram"][..],
        &[
            "--spec-type",
            "ngram-mod:n_max=8,ngram_size_n=2",
            "--spec-fixed",
        ],
        &[
            "--spec-type",
            "ngram:ngram_size_n=1",
            "--spec-type",
            "ngram",
        ],
        &["--spec-type", "mtp", "--spec-fixed"],
        &["--spec-type", "mtp:n_max=1,p_min=0.0"],
        &["--spec-type", "mtp:n_max=3", "--spec-fixed"],
        &["--spec-type", "ngram", "--spec-type", "mtp", "--spec-fixed"],
    ] {
        let (ok, text, err) = run(extra);
        assert!(ok, "{extra:?}: {err}");
        assert_eq!(text, plain, "{extra:?}");
        assert!(err.contains("spec: drafted"), "{extra:?}: {err}");
    }
    let (ok, _, err) = run(&["--spec-type", "draft-self"]);
    assert!(!ok);
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(
        lines[0].contains("draft-self needs a clover_moe file"),
        "{err}"
    );
}
