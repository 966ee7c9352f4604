//! The converter fixtures (tests/fixtures/converter, written by
//! scripts/oracle/make_converter_fixtures.sh): GGUF files made by llama.cpp's
//! own convert_hf_to_gguf.py from a transformers Qwen3.5-MoE checkpoint, and
//! transformers' answers on that checkpoint. The files are stored gzipped;
//! each test binary unpacks them once into its own target folder and checks
//! them against the sha256 the script recorded.
#![allow(dead_code)]

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use serde::Deserialize;
use sha2::{Digest, Sha256};

#[derive(Deserialize)]
pub struct FileRef {
    pub sha256: String,
    pub bytes: u64,
}

#[derive(Deserialize)]
pub struct Jitter {
    pub row_max_mean: f32,
    pub max: f32,
    pub weights_only_row_max_mean: f32,
}

#[derive(Deserialize)]
pub struct Bf16Reference {
    pub greedy_ids: Vec<u32>,
    pub greedy_min_top2_gap: f64,
    pub greedy_top2_gaps: Vec<f64>,
    pub jitter: Jitter,
    pub logits_file: String,
    pub max_abs_diff_from_f32: f64,
    pub window_nll: Vec<f64>,
    pub ppl: f64,
}

#[derive(Deserialize)]
pub struct Reference {
    pub config: serde_json::Value,
    pub files: HashMap<String, FileRef>,
    pub prompt: String,
    pub prompt_ids: Vec<u32>,
    pub greedy_ids: Vec<u32>,
    pub greedy_min_top2_gap: f64,
    pub forced_ids: Vec<u32>,
    pub logits_columns: Vec<u32>,
    pub logits_file: String,
    pub text: String,
    pub text_ids: Vec<u32>,
    pub ppl_ctx: usize,
    pub window_nll: Vec<f64>,
    pub ppl: f64,
    pub bf16: Bf16Reference,
}

pub fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/converter")
}

pub fn reference() -> &'static Reference {
    static R: OnceLock<Reference> = OnceLock::new();
    R.get_or_init(|| {
        let text = std::fs::read_to_string(dir().join("reference.json")).unwrap();
        serde_json::from_str(&text).unwrap()
    })
}

/// `[rows][columns]` logits stored as little-endian f32.
pub fn logits(file: &str) -> Vec<f32> {
    std::fs::read(dir().join(file))
        .unwrap()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect()
}

pub fn sha256(path: &Path) -> String {
    let bytes = std::fs::read(path).unwrap();
    Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `real-f32.gguf` or `real-bf16.gguf`, unpacked (once per test binary)
/// under this binary's temporary folder and checked against the recorded
/// sha256.
pub fn file(name: &str) -> PathBuf {
    static LOCK: Mutex<()> = Mutex::new(());
    let _guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let want = &reference().files[name];
    let out = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("converter")
        .join(name);
    if std::fs::metadata(&out).is_ok_and(|m| m.len() == want.bytes) && sha256(&out) == want.sha256 {
        return out;
    }
    std::fs::create_dir_all(out.parent().unwrap()).unwrap();
    let gz = std::fs::File::open(dir().join(format!("{name}.gz"))).unwrap();
    let mut bytes = Vec::new();
    flate2::read::GzDecoder::new(gz)
        .read_to_end(&mut bytes)
        .unwrap();
    let tmp = out.with_extension("tmp");
    std::fs::write(&tmp, &bytes).unwrap();
    std::fs::rename(&tmp, &out).unwrap();
    assert_eq!(sha256(&out), want.sha256, "{name} unpacked");
    out
}
