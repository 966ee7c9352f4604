//! `clover perplexity --kl-divergence-base` / `--kl-divergence`: base files in
//! llama-perplexity's format, byte for byte, and its statistics.
//!
//! The oracle (tests/fixtures/kld.json, written by
//! scripts/oracle/make_kld_fixture.sh): llama-perplexity's base file for the
//! `small` qwen35moe f32 synthetic file over src/synth/corpus.txt at -c 128,
//! and its statistics for the Q4_K_M quantization of that file. In llama.cpp's
//! summation order (`CLOVER_BATCH_ORDER=ggml`) clover's logits of an f32 file
//! are llama.cpp's bit for bit, so its base file must be the same bytes, and
//! its statistics must agree within 1 % (same top p exactly). The fixture's
//! llama-perplexity ran with `-fa off`, so these commands do too.

use std::path::Path;
use std::process::{Command, Output};

use serde::Deserialize;
use sha2::{Digest, Sha256};

#[derive(Deserialize)]
struct Fixture {
    base_sha256: String,
    base_bytes: u64,
    stats: std::collections::BTreeMap<String, f64>,
}

fn clover(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_clover"))
        .env("CLOVER_BATCH_ORDER", "ggml")
        .args(args)
        .output()
        .unwrap()
}

fn ok(out: Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The number after `label` and its colon in llama-perplexity's block.
fn stat(text: &str, label: &str) -> f64 {
    let rest = text
        .match_indices(label)
        .map(|(at, _)| text[at + label.len()..].trim_start_matches(' '))
        .find(|r| r.starts_with(':'))
        .unwrap_or_else(|| panic!("no {label:?} in\n{text}"))
        .trim_start_matches([' ', ':']);
    let end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-'))
        .unwrap();
    rest[..end].parse().unwrap()
}

#[test]
fn base_files_are_llama_perplexitys_and_the_statistics_agree() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let fx: Fixture = serde_json::from_str(
        &std::fs::read_to_string(root.join("tests/fixtures/kld.json")).unwrap(),
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let p = |n: &str| dir.path().join(n).to_str().unwrap().to_string();
    let (f32, q, base) = (p("f32.gguf"), p("q.gguf"), p("base.kld"));
    ok(clover(&[
        "synth",
        "--arch",
        "qwen35moe",
        "--preset",
        "small",
        "--recipe",
        "f32",
        "--seed",
        "202",
        "-o",
        &f32,
    ]));
    ok(clover(&["quantize", &f32, &q, "Q4_K_M"]));
    let corpus = root.join("src/synth/corpus.txt");
    ok(clover(&[
        "perplexity",
        "-m",
        &f32,
        "-f",
        corpus.to_str().unwrap(),
        "-c",
        "128",
        "-t",
        "2",
        "-ctk",
        "f32",
        "-ctv",
        "f32",
        "-fa",
        "off",
        "--kl-divergence-base",
        &base,
    ]));
    let bytes = std::fs::read(&base).unwrap();
    assert_eq!(bytes.len() as u64, fx.base_bytes);
    let sha: String = Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(
        sha, fx.base_sha256,
        "the base file differs from llama-perplexity's"
    );

    let text = ok(clover(&[
        "perplexity",
        "-m",
        &q,
        "-t",
        "2",
        "-ctk",
        "f32",
        "-ctv",
        "f32",
        "-fa",
        "off",
        "--kl-divergence-base",
        &base,
        "--kl-divergence",
    ]));
    for (label, want) in &fx.stats {
        let got = stat(&text, label);
        let tol = if label == "Same top p" {
            0.0
        } else {
            0.01 * want.abs()
        };
        assert!(
            (got - want).abs() <= tol + 1e-6,
            "{label}: clover {got}, llama-perplexity {want}\n{text}"
        );
    }

    // A model against its own base: no divergence, the same top token always.
    let text = ok(clover(&[
        "perplexity",
        "-m",
        &f32,
        "-t",
        "2",
        "-ctk",
        "f32",
        "-ctv",
        "f32",
        "-fa",
        "off",
        "--kl-divergence-base",
        &base,
        "--kl-divergence",
    ]));
    assert!(stat(&text, "Mean    KLD") < 1e-4, "{text}");
    assert_eq!(stat(&text, "Same top p"), 100.0, "{text}");

    // A base file that is not one, or that lies about its size: one line.
    std::fs::write(&base, b"_logits_\x80\0\0\0\0\x10\0\0\xff\xff\xff\x7f").unwrap();
    for args in [
        vec![
            "perplexity",
            "-m",
            &q,
            "--kl-divergence-base",
            &base,
            "--kl-divergence",
        ],
        vec![
            "perplexity",
            "-m",
            &q,
            "--kl-divergence-base",
            &f32,
            "--kl-divergence",
        ],
    ] {
        let out = clover(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains("--kl-divergence-base"), "{err}");
    }
}
