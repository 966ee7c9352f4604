//! `clover imatrix` collects what llama-imatrix collects: for the `tiny` and
//! `small` qwen35moe f32 synthetic files over src/synth/corpus.txt in chunks
//! of 64, the same entries (names, shapes), the same row counts, values
//! within 1e-4 relative of llama-imatrix's (tests/fixtures/imatrix, written by
//! scripts/oracle/make_imatrix_fixtures.sh), and the same metadata. Both
//! summation orders. Plus the refusals, each one line.

mod converter_common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use clover::gguf::{GgufFile, Value};
use clover::imatrix::Imatrix;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn clover(args: &[&str], order: Option<&str>) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_clover"));
    c.args(args).current_dir(root());
    if let Some(o) = order {
        c.env("CLOVER_BATCH_ORDER", o);
    }
    c.output().unwrap()
}

fn synth_f32(dir: &Path, preset: &str, seed: u64) -> PathBuf {
    let path = dir.join(format!("{preset}-f32.gguf"));
    let seed = seed.to_string();
    let out = clover(
        &[
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
        ],
        None,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    path
}

/// Tensor names and shapes in file order.
fn layout(path: &Path) -> Vec<(String, Vec<u64>)> {
    let f = GgufFile::open(path).unwrap();
    f.tensors()
        .iter()
        .map(|t| (t.name.clone(), t.dims.clone()))
        .collect()
}

fn metadata(path: &Path) -> Vec<(String, Value)> {
    GgufFile::open(path).unwrap().metadata().to_vec()
}

#[test]
fn imatrix_values_are_llama_imatrixs() {
    let dir = tempfile::tempdir().unwrap();
    for (preset, seed) in [("tiny", 101), ("small", 202)] {
        let src = synth_f32(dir.path(), preset, seed);
        let want_path = root().join(format!("tests/fixtures/imatrix/{preset}.gguf"));
        let want = Imatrix::load(&want_path).unwrap();
        for order in [None, Some("ggml")] {
            let out_path = dir.path().join(format!("{preset}-{order:?}.gguf"));
            let run = clover(
                &[
                    "imatrix",
                    "-m",
                    src.to_str().unwrap(),
                    "-f",
                    "src/synth/corpus.txt",
                    "-c",
                    "64",
                    "-t",
                    "2",
                    "-o",
                    out_path.to_str().unwrap(),
                ],
                order,
            );
            assert!(
                run.status.success(),
                "{}",
                String::from_utf8_lossy(&run.stderr)
            );
            let what = format!("{preset} order {order:?}");
            assert_eq!(layout(&out_path), layout(&want_path), "{what}");
            assert_eq!(metadata(&out_path), metadata(&want_path), "{what}");
            let got = Imatrix::load(&out_path).unwrap();
            assert_eq!(got.entries.len(), want.entries.len(), "{what}");
            let mut worst = 0f64;
            for (name, w) in &want.entries {
                let g = &got.entries[name];
                assert_eq!(g.counts, w.counts, "{what} {name}");
                for (a, b) in g.sums.iter().zip(&w.sums) {
                    let rel = (*a as f64 - *b as f64).abs() / (*b as f64).abs().max(1e-30);
                    worst = worst.max(rel);
                    assert!(rel <= 1e-4, "{what} {name}: {a} vs llama-imatrix {b}");
                }
            }
            eprintln!("{what}: worst relative difference {worst:.2e}");
        }
    }
}

#[test]
fn bad_requests_are_one_line_errors() {
    let dir = tempfile::tempdir().unwrap();
    let src = synth_f32(dir.path(), "tiny", 101);
    let s = src.to_str().unwrap();
    let o = dir.path().join("im.gguf");
    let os = o.to_str().unwrap();
    let not_imatrix = dir.path().join("not.gguf");
    std::fs::write(&not_imatrix, b"GGUF but not really").unwrap();
    let q = dir.path().join("q.gguf");
    for (args, want) in [
        (
            vec![
                "imatrix",
                "-m",
                s,
                "-f",
                "src/synth/corpus.txt",
                "-c",
                "8",
                "-o",
                os,
            ],
            "too small",
        ),
        (
            vec![
                "imatrix",
                "-m",
                s,
                "-f",
                "src/synth/corpus.txt",
                "-c",
                "4096",
                "-o",
                os,
            ],
            "needs at least",
        ),
        (
            vec!["imatrix", "-m", s, "-f", "/nonexistent.txt", "-o", os],
            "nonexistent",
        ),
        (
            vec![
                "quantize",
                "--imatrix",
                not_imatrix.to_str().unwrap(),
                s,
                q.to_str().unwrap(),
                "Q4_K_M",
            ],
            "not a GGUF imatrix file",
        ),
        (
            // small's imatrix does not fit tiny's tensors.
            vec![
                "quantize",
                "--imatrix",
                "tests/fixtures/imatrix/small.gguf",
                s,
                q.to_str().unwrap(),
                "Q4_K_M",
            ],
            "made for another model",
        ),
    ] {
        let out = clover(&args, None);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(!o.exists() && !q.exists(), "{args:?} left a file");
    }
}

/// On a file llama.cpp's converter wrote (tests/converter_common), clover
/// imatrix collects the matrices llama-imatrix collects, each with as many
/// values (tests/fixtures/converter/imatrix.json): the trunk's products, the
/// `{n_embd, 1}` shared-expert gate included, and nothing of the MTP block,
/// which neither program runs.
#[test]
fn converter_file_entries_are_llama_imatrixs() {
    #[derive(serde::Deserialize)]
    struct Want {
        entries: std::collections::BTreeMap<String, usize>,
    }
    let want: Want = serde_json::from_str(
        &std::fs::read_to_string(converter_common::dir().join("imatrix.json")).unwrap(),
    )
    .unwrap();
    let model = converter_common::file("real-f32.gguf");
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("text.txt");
    std::fs::write(&text, &converter_common::reference().text).unwrap();
    let out = dir.path().join("imatrix.gguf");
    let run = clover(
        &[
            "imatrix",
            "-m",
            model.to_str().unwrap(),
            "-f",
            text.to_str().unwrap(),
            "-c",
            "64",
            "-o",
            out.to_str().unwrap(),
        ],
        None,
    );
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let im = Imatrix::load(&out).unwrap();
    let got: std::collections::BTreeMap<String, usize> = im
        .entries
        .iter()
        .map(|(k, e)| (k.clone(), e.sums.len()))
        .collect();
    assert_eq!(got, want.entries);
}
