//! Greedy parity with llama.cpp (the outside oracle, DESIGN §8): tiny random
//! `qwen35moe` models (GDN + gated attention + MoE) written as GGUF with a
//! 50-letter byte-level vocabulary; llama-completion's greedy continuation
//! must equal ours token for token. Skipped, loudly, when the llama.cpp build
//! is absent (`LLAMA_BIN_DIR`, default /work/llama/build/bin).

use std::path::PathBuf;
use std::process::Command;

use clover::gguf::{GgufWriter, Value};
use clover::model::tiny::{tiny_config, Tensor, TinyModel};
use clover::model::{Arch, LogitsFor, StateOptions};

fn llama_completion() -> Option<PathBuf> {
    let dir = std::env::var("LLAMA_BIN_DIR").unwrap_or_else(|_| "/work/llama/build/bin".into());
    let p = PathBuf::from(dir).join("llama-completion");
    p.exists().then_some(p)
}

const EOS: usize = 49;

fn vocab() -> Vec<String> {
    ('a'..='z')
        .chain('A'..='X')
        .map(|c| c.to_string())
        .collect()
}

fn write(tm: &TinyModel, path: &std::path::Path) {
    let mut w = GgufWriter::new();
    for (k, v) in tm.metadata() {
        w.set(k, v);
    }
    // Text positions: the multi-section rope reduces to NeoX rope (§2.4).
    w.set(
        "qwen35moe.rope.dimension_sections",
        Value::i32s([2, 1, 1, 0]),
    );
    w.set("tokenizer.ggml.model", Value::str("gpt2"));
    w.set("tokenizer.ggml.pre", Value::str("qwen35"));
    w.set("tokenizer.ggml.tokens", Value::strings(vocab()));
    w.set("tokenizer.ggml.token_type", Value::i32s(vec![1; 50]));
    w.set(
        "tokenizer.ggml.merges",
        Value::strings(Vec::<String>::new()),
    );
    w.set("tokenizer.ggml.eos_token_id", Value::U32(49));
    w.set("tokenizer.ggml.bos_token_id", Value::U32(48));
    w.set("tokenizer.ggml.add_bos_token", Value::Bool(false));
    let mut names: Vec<&String> = tm.tensors.keys().collect();
    names.sort();
    for n in &names {
        let t = &tm.tensors[*n];
        w.add_tensor(n.as_str(), t.ty, &t.dims);
    }
    let f = std::fs::File::create(path).unwrap();
    w.write(std::io::BufWriter::new(f), |i, _, o| {
        o.write_all(tm.tensors[names[i]].data())
    })
    .unwrap();
}

fn ours(tm: &TinyModel, prompt: &[u32], n: usize) -> String {
    let toks = vocab();
    let model = tm.model();
    let mut st = model.new_state(StateOptions::new(64)).unwrap();
    let mut logits = model
        .forward(&mut st, prompt, 0, LogitsFor::Last)
        .unwrap()
        .to_vec();
    let mut out = String::new();
    for _ in 0..n {
        // --ignore-eos bans the EOS token (49) in llama.cpp: do the same.
        let best = (0..EOS).fold(0, |b, i| if logits[i] > logits[b] { i } else { b });
        out.push_str(&toks[best]);
        let p = st.n_past();
        logits = model
            .forward(&mut st, &[best as u32], p, LogitsFor::Last)
            .unwrap()
            .to_vec();
    }
    out
}

/// llama-completion's greedy continuation. Its text goes through an
/// asynchronous log thread that can lose the tail at exit on a loaded host,
/// so runs are repeated until one prints all `n` tokens (one letter each).
fn theirs(bin: &PathBuf, path: &std::path::Path, prompt: &str, n: usize) -> String {
    let mut longest = String::new();
    for _ in 0..10 {
        let s = theirs_once(bin, path, prompt, n);
        assert!(
            s.starts_with(&longest) || longest.starts_with(&s),
            "llama.cpp runs disagree: {s} vs {longest}"
        );
        if s.len() > longest.len() {
            longest = s;
        }
        if longest.len() == n {
            break;
        }
    }
    assert_eq!(longest.len(), n, "llama.cpp never printed all {n} tokens");
    longest
}

fn theirs_once(bin: &PathBuf, path: &std::path::Path, prompt: &str, n: usize) -> String {
    let out = Command::new(bin)
        .args([
            "-m",
            path.to_str().unwrap(),
            "-p",
            prompt,
            "-n",
            &n.to_string(),
        ])
        .args([
            "--temp",
            "0",
            "--ignore-eos",
            "-no-cnv",
            "--no-display-prompt",
        ])
        .args(["-fa", "off", "-ctk", "f32", "-ctv", "f32", "--no-warmup"])
        .args(["-t", "1", "-c", "64", "--simple-io"])
        .output()
        .expect("llama-completion runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

fn check(tm: &TinyModel, name: &str) {
    let Some(bin) = llama_completion() else {
        eprintln!("SKIPPED llama.cpp parity ({name}): llama-completion not found");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(format!("{name}.gguf"));
    write(tm, &path);
    let n = 32;
    let want = theirs(&bin, &path, "abc", n);
    let got = ours(tm, &[0, 1, 2], n);
    assert_eq!(got, want, "{name}: ours vs llama.cpp");
}

fn qwen(n_layer: usize, seed: u64) -> TinyModel {
    let mut cfg = tiny_config(n_layer, 2);
    cfg.arch = Arch::Qwen35Moe;
    TinyModel::random(cfg, seed)
}

#[test]
fn greedy_tokens_match_llama_cpp_on_f32_hybrid_models() {
    for seed in [77, 78, 79] {
        check(&qwen(4, seed), &format!("f32_seed{seed}"));
    }
}

#[test]
fn greedy_tokens_match_llama_cpp_with_f16_matrices() {
    let mut tm = qwen(6, 80);
    let names: Vec<String> = tm.tensors.keys().cloned().collect();
    for n in names {
        let t = &tm.tensors[&n];
        // 2-D and 3-D weights to F16; norms, conv, ssm_a/dt stay F32 as in real files.
        if t.dims.len() >= 2 && !n.contains("ssm_conv1d") {
            let f = Tensor::f16(&t.dims.clone(), &t.values());
            tm.set(&n, f);
        }
    }
    check(&tm, "f16_seed80");
}
