//! `clover quantize` writes the bytes llama-quantize writes: for each case of
//! tests/fixtures/quantize.json (llama-quantize's outputs, as sha256 and size,
//! written by scripts/oracle/make_quantize_fixtures.sh), the same synthetic
//! f32 source quantized with the same arguments; and the same for the
//! converter's F32 and BF16 files (tests/converter_common). Plus the
//! refusals, each one line.

mod converter_common;

use std::path::Path;
use std::process::Command;

use serde::Deserialize;
use sha2::{Digest, Sha256};

#[derive(Deserialize)]
struct Fixtures {
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    preset: String,
    seed: u64,
    source_sha256: String,
    args: String,
    #[serde(rename = "type")]
    ty: String,
    sha256: String,
    bytes: u64,
}

fn clover(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_clover"))
        .args(args)
        .output()
        .unwrap()
}

fn sha256(path: &Path) -> String {
    let bytes = std::fs::read(path).unwrap();
    Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn synth_f32(dir: &Path, preset: &str, seed: u64) -> std::path::PathBuf {
    let path = dir.join(format!("{preset}-f32.gguf"));
    if !path.exists() {
        let seed = seed.to_string();
        let out = clover(&[
            "synth",
            "--arch",
            "qwen35moe",
            "--preset",
            preset,
            "--recipe",
            "f32",
            "--seed",
            &seed,
            "-o",
            path.to_str().unwrap(),
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    path
}

#[test]
fn quantized_files_are_llama_quantizes_byte_for_byte() {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/quantize.json"),
    )
    .unwrap();
    let fx: Fixtures = serde_json::from_str(&text).unwrap();
    let dir = tempfile::tempdir().unwrap();
    for c in &fx.cases {
        let src = synth_f32(dir.path(), &c.preset, c.seed);
        assert_eq!(sha256(&src), c.source_sha256, "{} f32 source", c.preset);
        let out = dir.path().join("q.gguf");
        let mut args = vec!["quantize"];
        args.extend(c.args.split_whitespace());
        args.extend([
            src.to_str().unwrap(),
            out.to_str().unwrap(),
            &c.ty,
            "-t",
            "2",
        ]);
        let run = clover(&args);
        assert!(
            run.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&run.stderr)
        );
        let what = format!("{} {} {}", c.preset, c.args, c.ty);
        assert_eq!(std::fs::metadata(&out).unwrap().len(), c.bytes, "{what}");
        assert_eq!(sha256(&out), c.sha256, "{what}");
        eprintln!("{what}: identical to llama-quantize");
    }
}

#[derive(Deserialize)]
struct ConverterCases {
    cases: Vec<ConverterCase>,
}

#[derive(Deserialize)]
struct ConverterCase {
    source: String,
    #[serde(rename = "type")]
    ty: String,
    sha256: String,
    bytes: u64,
}

/// llama-quantize on files llama.cpp's converter wrote: shapes written
/// without trailing 1s (the shared expert's `{n_embd, 1}` gate), the MTP
/// block's `nextn.eh_proj` quantized like any matrix, BF16 sources.
#[test]
fn converter_files_quantize_as_llama_quantize_does() {
    let text = std::fs::read_to_string(converter_common::dir().join("quantize.json")).unwrap();
    let fx: ConverterCases = serde_json::from_str(&text).unwrap();
    let dir = tempfile::tempdir().unwrap();
    for c in &fx.cases {
        let src = converter_common::file(&c.source);
        let out = dir.path().join("q.gguf");
        let run = clover(&[
            "quantize",
            src.to_str().unwrap(),
            out.to_str().unwrap(),
            &c.ty,
            "-t",
            "2",
        ]);
        let what = format!("{} {}", c.source, c.ty);
        assert!(
            run.status.success(),
            "{what}: {}",
            String::from_utf8_lossy(&run.stderr)
        );
        assert_eq!(std::fs::metadata(&out).unwrap().len(), c.bytes, "{what}");
        assert_eq!(sha256(&out), c.sha256, "{what}");
        // clover loads what it wrote.
        let ran = clover(&[
            "run",
            "-m",
            out.to_str().unwrap(),
            "-p",
            "In the",
            "-n",
            "4",
            "--temp",
            "0",
        ]);
        assert!(
            ran.status.success(),
            "{what}: {}",
            String::from_utf8_lossy(&ran.stderr)
        );
        eprintln!("{what}: identical to llama-quantize");
    }
}

#[test]
fn a_quantized_file_runs_and_bad_requests_are_one_line_errors() {
    let dir = tempfile::tempdir().unwrap();
    let src = synth_f32(dir.path(), "tiny", 101);
    let q = dir.path().join("q.gguf");
    let (s, qs) = (src.to_str().unwrap(), q.to_str().unwrap());
    assert!(clover(&["quantize", s, qs, "q4_k_m"]).status.success());
    let run = clover(&["run", "-m", qs, "-p", "hello", "-n", "4", "--temp", "0"]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let q2 = dir.path().join("q2.gguf");
    let q2s = q2.to_str().unwrap();
    for (args, want) in [
        (vec!["quantize", s, q2s, "Q9_9"], "unknown type 'Q9_9'"),
        (vec!["quantize", s, q2s], "no type"),
        (vec!["quantize", s, s, "Q8_0"], "would replace the input"),
        (vec!["quantize", qs, q2s, "Q8_0"], "--allow-requantize"),
        (
            vec!["quantize", "--tensor-type", "(=q8_0", s, q2s, "Q8_0"],
            "bad pattern",
        ),
        (
            vec!["quantize", "--output-tensor-type", "q9", s, q2s, "Q8_0"],
            "unknown type 'q9'",
        ),
        (
            vec!["quantize", "/nonexistent.gguf", q2s, "Q8_0"],
            "nonexistent",
        ),
    ] {
        let out = clover(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(!q2.exists(), "{args:?} left a file");
    }
    // Requantizing when asked: a file of the new type.
    let out = clover(&["quantize", "--allow-requantize", qs, q2s, "Q8_0"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(q2.exists());
}

/// The tensor map of a file, name → type (`clover inspect --tsv`).
fn types_of(path: &Path) -> Vec<(String, String)> {
    let out = clover(&["inspect", path.to_str().unwrap(), "--tsv"]);
    assert!(out.status.success());
    let mut v: Vec<(String, String)> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .skip(1)
        .filter_map(|l| {
            let mut f = l.split('\t');
            Some((f.next()?.to_string(), f.next()?.to_string()))
        })
        .collect();
    v.sort();
    v
}

/// Every seed mix can be made from an f32 (or BF16) source: `--recipe R`
/// gives each tensor the type `clover synth --recipe R` writes it in.
#[test]
fn every_seed_recipe_gives_the_types_synth_writes() {
    let dir = tempfile::tempdir().unwrap();
    let src = synth_f32(dir.path(), "tiny", 101);
    for recipe in ["q4_k_m-hq", "iq4_xs-exps-hq", "apex-miniplus"] {
        let q = dir.path().join(format!("{recipe}.gguf"));
        let s = dir.path().join(format!("synth-{recipe}.gguf"));
        let out = clover(&[
            "quantize",
            "--recipe",
            recipe,
            src.to_str().unwrap(),
            q.to_str().unwrap(),
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let out = clover(&[
            "synth",
            "--arch",
            "qwen35moe",
            "--preset",
            "tiny",
            "--recipe",
            recipe,
            "--seed",
            "101",
            "-o",
            s.to_str().unwrap(),
        ]);
        assert!(out.status.success());
        assert_eq!(types_of(&q), types_of(&s), "{recipe}");
    }
}
