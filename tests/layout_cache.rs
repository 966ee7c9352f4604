//! The layout cache (`engine::packed_cache`): the kernels' repacked copies
//! written once and mapped by later starts. A mapped cache gives the copies'
//! bits; a cache that does not match its model (changed, cut short, edited,
//! another model's) is never used and is written again; a cache that cannot
//! be written leaves one warning and a working run.

mod skip;

use std::path::{Path, PathBuf};
use std::process::Command;

use clover::engine::packed_cache::{self, Setting};
use clover::engine::LoadedModel;
use clover::model::{LogitsFor, StateOptions};
use clover::synth::{self, Arch, Preset, Recipe, SynthOptions};
use kernels::GgmlType;

fn synth_file(path: &Path, seed: u64) {
    synth::plan(SynthOptions {
        arch: Arch::CloverMoe,
        preset: Preset::Small,
        recipe: Recipe::Q4KM,
        seed,
    })
    .unwrap()
    .write(path, None)
    .unwrap();
}

/// Whether this CPU's kernels repack Q4_K (else there is nothing to cache).
fn repacks(test: &str) -> bool {
    let on = std::env::var("CLOVER_REPACK").as_deref() != Ok("0")
        && kernels::KernelTable::chosen()
            .packed_gemm(GgmlType::Q4_K, kernels::Mode::Decode)
            .is_some();
    if !on {
        skip::skipped(
            test,
            "no repacked Q4_K kernel on this CPU (nothing to cache)",
            "needs AVX-512 VNNI",
        );
    }
    on
}

/// Every derived tensor's bytes, by name.
fn copies(m: &LoadedModel) -> Vec<(String, Vec<u8>)> {
    let d = m.file.derived_tensors().expect("loaded");
    let mut v: Vec<(String, Vec<u8>)> = d
        .names()
        .into_iter()
        .map(|n| (n.to_string(), d.get(n).unwrap().to_vec()))
        .collect();
    v.sort();
    v
}

fn logits(m: &LoadedModel) -> Vec<f32> {
    let mut st = m.model.new_state(StateOptions::new(64)).unwrap();
    m.model
        .forward(&mut st, &[1, 5, 9, 33, 2, 7], 0, LogitsFor::All)
        .unwrap()
        .to_vec()
}

fn is_mapped(m: &LoadedModel) -> bool {
    m.file.derived_tensors().is_some_and(|d| d.is_mapped())
}

/// One test owns the process-wide setting ([`packed_cache::set`]); the
/// others run the binary.
#[test]
fn a_mapped_cache_gives_the_copies_bits_and_a_mismatched_one_is_written_again() {
    let test = "a_mapped_cache_gives_the_copies_bits_and_a_mismatched_one_is_written_again";
    if !repacks(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("m.gguf");
    synth_file(&model, 4);
    let cache_dir = dir.path().join("layout");

    packed_cache::set(Setting::Off);
    let plain = LoadedModel::open(&model).unwrap();
    assert!(!is_mapped(&plain));
    let (want, want_logits) = (copies(&plain), logits(&plain));
    assert!(!want.is_empty());

    packed_cache::set(Setting::Dir(cache_dir.clone()));
    let first = LoadedModel::open(&model).unwrap();
    assert!(!is_mapped(&first), "the first start makes the copies");
    assert!(first.load_notes.is_empty(), "{:?}", first.load_notes);
    let cache = packed_cache::cache_path(&cache_dir, &model);
    assert!(cache.is_file());
    let second = LoadedModel::open(&model).unwrap();
    assert!(is_mapped(&second), "the second start maps the cache");
    assert_eq!(copies(&second), want, "the cache's bytes are the copies'");
    assert_eq!(logits(&second), want_logits);
    // Nothing was left beside it.
    let names: Vec<PathBuf> = std::fs::read_dir(&cache_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(names, vec![cache.clone()]);

    // Each damage: not used (one note saying why), written again, and the
    // start after that maps it.
    let len = std::fs::metadata(&cache).unwrap().len();
    let other = dir.path().join("other.gguf");
    synth_file(&other, 5);
    type Damage<'a> = (&'a str, Box<dyn Fn() + 'a>);
    let damages: Vec<Damage> = vec![
        ("an edited index", Box::new(|| flip(&cache, 40))),
        (
            "an edited tensor",
            Box::new(|| flip(&cache, packed_cache::ALIGN as u64 + 100)),
        ),
        (
            "a cut-short file",
            Box::new(|| {
                let f = std::fs::OpenOptions::new()
                    .write(true)
                    .open(&cache)
                    .unwrap();
                f.set_len(len - 4096).unwrap();
            }),
        ),
        (
            "another model's cache",
            Box::new(|| {
                packed_cache::set(Setting::Dir(cache_dir.clone()));
                let o = LoadedModel::open(&other).unwrap();
                drop(o);
                let theirs = packed_cache::cache_path(&cache_dir, &other);
                std::fs::rename(theirs, &cache).unwrap();
            }),
        ),
        (
            "a model changed since",
            Box::new(|| {
                let f = std::fs::OpenOptions::new()
                    .write(true)
                    .open(&model)
                    .unwrap();
                let t = std::time::SystemTime::now() + std::time::Duration::from_secs(5);
                f.set_modified(t).unwrap();
            }),
        ),
    ];
    for (what, damage) in damages {
        damage();
        let m = LoadedModel::open(&model).unwrap();
        assert!(!is_mapped(&m), "{what}: used");
        assert_eq!(m.load_notes.len(), 1, "{what}: {:?}", m.load_notes);
        assert!(
            m.load_notes[0].contains("not used"),
            "{what}: {:?}",
            m.load_notes
        );
        assert_eq!(copies(&m), want, "{what}");
        let again = LoadedModel::open(&model).unwrap();
        assert!(is_mapped(&again), "{what}: not written again");
        assert_eq!(copies(&again), want, "{what}");
    }
    packed_cache::set(Setting::Off);
}

fn flip(path: &Path, at: u64) {
    use std::io::{Read, Seek, SeekFrom, Write};
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut b = [0u8];
    f.seek(SeekFrom::Start(at)).unwrap();
    f.read_exact(&mut b).unwrap();
    f.seek(SeekFrom::Start(at)).unwrap();
    f.write_all(&[b[0] ^ 0x20]).unwrap();
}

fn clover(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_clover"))
        .args(args)
        .output()
        .unwrap()
}

/// A cache that cannot be written (a file size limit standing in for a full
/// disk, and a path under a file): one warning, the run goes on from copies
/// in memory, and no partial file is left.
#[test]
fn a_cache_that_cannot_be_written_leaves_one_warning_and_a_working_run() {
    let test = "a_cache_that_cannot_be_written_leaves_one_warning_and_a_working_run";
    if !repacks(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("m.gguf");
    synth_file(&model, 4);
    let m = model.to_str().unwrap();
    let cache_dir = dir.path().join("layout");
    std::fs::create_dir(&cache_dir).unwrap();
    let bin = env!("CARGO_BIN_EXE_clover");
    // 64 KiB of file at most: the cache's first tensor does not fit.
    let full = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -f 128; exec '{bin}' run -m '{m}' --layout-cache '{}' -p hi -n 3 --temp 0",
            cache_dir.display()
        ))
        .output()
        .unwrap();
    let under_a_file = clover(&[
        "run",
        "-m",
        m,
        "--layout-cache",
        &format!("{m}/layout"),
        "-p",
        "hi",
        "-n",
        "3",
        "--temp",
        "0",
    ]);
    for (what, out) in [("full", full), ("under a file", under_a_file)] {
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{what}: {err}");
        let warnings: Vec<&str> = err.lines().filter(|l| l.contains("layout cache")).collect();
        assert_eq!(warnings.len(), 1, "{what}: {err}");
        assert!(
            warnings[0].starts_with("warning: could not write"),
            "{what}: {err}"
        );
        assert!(!out.stdout.is_empty(), "{what}: no text");
    }
    let left: Vec<_> = std::fs::read_dir(&cache_dir).unwrap().collect();
    assert!(left.is_empty(), "partial files left: {left:?}");
}

/// `clover repack` writes the cache ahead of time, and says so; a second
/// time it is up to date; a run after it maps it (bench says so).
#[test]
fn repack_writes_the_cache_ahead_of_time() {
    let test = "repack_writes_the_cache_ahead_of_time";
    if !repacks(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("m.gguf");
    synth_file(&model, 4);
    let (m, d) = (model.to_str().unwrap(), dir.path().join("c"));
    let d = d.to_str().unwrap();
    let first = clover(&["repack", m, "--layout-cache", d]);
    let out = String::from_utf8_lossy(&first.stdout);
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    assert!(
        out.contains("written") && out.contains(".clover-layout"),
        "{out}"
    );
    let second = clover(&["repack", m, "--layout-cache", d]);
    let out = String::from_utf8_lossy(&second.stdout);
    assert!(out.contains("already up to date"), "{out}");
    let bench = clover(&[
        "bench",
        "-m",
        m,
        "--layout-cache",
        d,
        "-p",
        "0",
        "-n",
        "2",
        "-r",
        "1",
    ]);
    let err = String::from_utf8_lossy(&bench.stderr);
    assert!(bench.status.success(), "{err}");
    assert!(err.contains("(layout cache)"), "{err}");
}
