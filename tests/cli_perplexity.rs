//! `clover perplexity`: llama-perplexity's number, checked against a
//! token-by-token evaluation through the library, and one-line errors.

use std::process::{Command, Output};

use clover::engine::LoadedModel;
use clover::kernels::GgmlType;
use clover::model::{LogitsFor, StateOptions};
use clover::synth::{self, Arch, Preset, Recipe, SynthOptions};

const TEXT: &str = "The quick brown fox jumps over the lazy dog. \
A stitch in time saves nine, and the early bird catches the worm. \
Every good boy deserves fudge; all that glitters is not gold. ";

fn clover(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_clover"))
        .args(args)
        .output()
        .expect("run clover")
}

fn tiny(dir: &std::path::Path) -> std::path::PathBuf {
    let p = dir.join("tiny.gguf");
    synth::plan(SynthOptions {
        arch: Arch::CloverMoe,
        preset: Preset::Tiny,
        recipe: Recipe::F32,
        seed: 11,
    })
    .unwrap()
    .write(&p, Some(1))
    .unwrap();
    p
}

/// PPL of the second half of each 16-token window, one token per forward.
fn reference_ppl(model: &std::path::Path, text: &str, c: usize, kv: GgmlType) -> f64 {
    let m = LoadedModel::open(model).unwrap();
    let toks = m.tokenizer.encode(text, false).unwrap();
    let v = m.model.n_vocab();
    let (mut sum, mut n) = (0.0f64, 0usize);
    for w in toks.chunks_exact(c) {
        let opts = StateOptions {
            type_k: kv,
            type_v: kv,
            ..StateOptions::new(c)
        };
        let mut st = m.model.new_state(opts).unwrap();
        for (j, &t) in w.iter().enumerate().take(c - 1) {
            let l = m.model.forward(&mut st, &[t], j, LogitsFor::Last).unwrap();
            assert_eq!(l.len(), v);
            if j >= c / 2 {
                let max = l.iter().copied().fold(f32::MIN, f32::max) as f64;
                let z: f64 = l.iter().map(|&x| (x as f64 - max).exp()).sum();
                sum += max + z.ln() - l[w[j + 1] as usize] as f64;
                n += 1;
            }
        }
    }
    (sum / n as f64).exp()
}

#[test]
fn perplexity_equals_a_token_by_token_evaluation_of_the_second_halves() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny(dir.path());
    let text = dir.path().join("t.txt");
    std::fs::write(&text, TEXT.repeat(3)).unwrap();
    let out = clover(&[
        "perplexity",
        "-m",
        model.to_str().unwrap(),
        "-f",
        text.to_str().unwrap(),
        "-c",
        "16",
        "-t",
        "1",
        "-ctk",
        "f32",
        "-ctv",
        "f32",
        // An f32 cache as asked (flash attention keeps it in f16).
        "-fa",
        "off",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(stdout.starts_with("[1]"), "{stdout}");
    let line = stdout
        .lines()
        .find(|l| l.starts_with("Final estimate: PPL = "))
        .unwrap_or_else(|| panic!("{stdout}"));
    let ppl: f64 = line["Final estimate: PPL = ".len()..]
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let want = reference_ppl(&model, &TEXT.repeat(3), 16, GgmlType::F32);
    assert!(
        (ppl - want).abs() <= 1e-3 * want + 1e-4,
        "clover {ppl}, reference {want}"
    );
}

/// The printed estimate of `clover perplexity ARGS`.
fn printed_ppl(args: &[&str]) -> f64 {
    let out = clover(args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("Final estimate: PPL = "))
        .unwrap_or_else(|| panic!("{stdout}"));
    line.split(' ').next().unwrap().parse().unwrap()
}

/// As llama-perplexity, the KV cache is f16 unless -ctk/-ctv say otherwise
/// (seen with flash attention off, whose arithmetic the token-by-token
/// reference shares; with it on, the default, the same command prints
/// llama-perplexity's digits: tests/real_files.rs).
#[test]
fn the_kv_cache_is_f16_by_default_as_llama_perplexitys() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny(dir.path());
    let text = dir.path().join("t.txt");
    std::fs::write(&text, TEXT.repeat(3)).unwrap();
    let (m, t) = (model.to_str().unwrap(), text.to_str().unwrap());
    let base = [
        "perplexity",
        "-m",
        m,
        "-f",
        t,
        "-c",
        "16",
        "-t",
        "1",
        "-fa",
        "off",
    ];
    let default = printed_ppl(&base);
    let f16 = reference_ppl(&model, &TEXT.repeat(3), 16, GgmlType::F16);
    let f32 = reference_ppl(&model, &TEXT.repeat(3), 16, GgmlType::F32);
    // The caches differ little on this model; the default is four times
    // closer to the f16 evaluation than the f32 one is (a batch and token by
    // token sum in different orders, hence no equality).
    assert!(
        (default - f16).abs() * 4.0 < (f32 - f16).abs(),
        "clover {default}, f16 reference {f16}, f32 reference {f32}"
    );
    let bf16 = printed_ppl(&[&base[..], &["-ctk", "bf16", "-ctv", "bf16"]].concat());
    let explicit_f16 = printed_ppl(&[&base[..], &["-ctk", "f16", "-ctv", "f16"]].concat());
    assert_eq!(explicit_f16, default);
    assert_ne!(bf16, default);
}

#[test]
fn bad_perplexity_input_is_one_error_line() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny(dir.path());
    let short = dir.path().join("s.txt");
    std::fs::write(&short, "too short").unwrap();
    let m = model.to_str().unwrap();
    for (args, needle) in [
        (
            vec!["perplexity", "-m", m, "-f", short.to_str().unwrap()],
            "fewer than one window",
        ),
        (
            vec!["perplexity", "-m", m, "-f", "/no/such/file.txt"],
            "file.txt",
        ),
        (
            vec![
                "perplexity",
                "-m",
                m,
                "-f",
                short.to_str().unwrap(),
                "-c",
                "2",
            ],
            "too small",
        ),
    ] {
        let out = clover(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(!err.contains("panicked"), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}
