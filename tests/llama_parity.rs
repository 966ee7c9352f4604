//! Greedy parity with llama.cpp (the outside oracle, docs/DESIGN.md §8): tiny random
//! `qwen35moe` models (GDN + gated attention + MoE) written as GGUF with a
//! 50-letter byte-level vocabulary; llama-completion's greedy continuation
//! must equal ours token for token, and llama-perplexity's log-prob dump must
//! match ours to its resolution. When the llama.cpp build is absent
//! (`LLAMA_BIN_DIR`, default /work/llama/build/bin) these live checks cannot
//! run: each prints one `SKIPPED` line and defers to `tests/llama_parity_fixtures.rs`,
//! which checks parity against stored llama.cpp outputs. Under
//! `CLOVER_REQUIRE_ORACLES=1` (CI, which has no llama.cpp build) the deferral
//! is only accepted when those fixtures are present.

use std::path::PathBuf;
use std::process::Command;

use clover::gguf::{GgufWriter, Value};
use clover::kernels::GgmlType;
use clover::model::tiny::{tiny_config, Tensor, TinyModel};
use clover::model::{Arch, LogitsFor, StateOptions};

mod skip;

/// Called when llama.cpp is absent: says in one line which test did not run
/// and, under `CLOVER_REQUIRE_ORACLES`, insists that the fixture test has its
/// data.
fn defer_to_fixtures(test: &str) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/parity");
    let n = std::fs::read_dir(&dir)
        .map(|d| {
            d.filter(|e| {
                e.as_ref()
                    .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "json"))
            })
            .count()
        })
        .unwrap_or(0);
    if std::env::var_os("CLOVER_REQUIRE_ORACLES").is_some() {
        assert!(
            n > 0,
            "CLOVER_REQUIRE_ORACLES: no llama.cpp build and no stored fixtures in {}",
            dir.display()
        );
    }
    skip::skipped(
        test,
        &format!("no llama-completion in {}", llama_bin_dir().display()),
        &format!(
            "scripts/build_llama_cpp.sh builds it, then set LLAMA_BIN_DIR to the folder it \
             prints (tests/llama_parity_fixtures.rs checks {n} stored llama.cpp outputs meanwhile)"
        ),
    );
}

fn llama_bin_dir() -> PathBuf {
    std::env::var("LLAMA_BIN_DIR")
        .unwrap_or_else(|_| "/work/llama/build/bin".into())
        .into()
}

/// llama-completion, or `None` after the test's one skip line.
fn llama_completion_or_defer(test: &str) -> Option<PathBuf> {
    let p = llama_bin_dir().join("llama-completion");
    if p.exists() {
        Some(p)
    } else {
        defer_to_fixtures(test);
        None
    }
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
    // Text positions: these sections rotate all 4 pairs, NeoX rope (§2.4);
    // a model with its own sections has them in `metadata()`.
    if tm.cfg.rope_sections.is_none() {
        w.set(
            "qwen35moe.rope.dimension_sections",
            Value::i32s([2, 1, 1, 0]),
        );
    }
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

fn check(bin: &PathBuf, tm: &TinyModel, name: &str) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(format!("{name}.gguf"));
    write(tm, &path);
    let n = 32;
    let want = theirs(bin, &path, "abc", n);
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
    let Some(bin) = llama_completion_or_defer("greedy_tokens_match_llama_cpp_on_f32_hybrid_models")
    else {
        return;
    };
    for seed in [77, 78, 79] {
        check(&bin, &qwen(4, seed), &format!("f32_seed{seed}"));
    }
}

#[test]
fn greedy_tokens_match_llama_cpp_with_f16_matrices() {
    let Some(bin) = llama_completion_or_defer("greedy_tokens_match_llama_cpp_with_f16_matrices")
    else {
        return;
    };
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
    check(&bin, &tm, "f16_seed80");
}

/// Sections that leave rope pairs unrotated (docs/DESIGN.md §2.4), over the 4 pairs
/// of n_rot 8: [1, 0, 0, 1] turns pairs 0 and 2 only, [0, 2, 2, 0] pairs 1
/// and 2 only (pair 0, the fastest, stays put).
const UNROTATING_SECTIONS: [[u32; 4]; 2] = [[1, 0, 0, 1], [0, 2, 2, 0]];

#[test]
fn greedy_tokens_match_llama_cpp_when_sections_leave_rope_pairs_unrotated() {
    let test = "greedy_tokens_match_llama_cpp_when_sections_leave_rope_pairs_unrotated";
    let Some(bin) = llama_completion_or_defer(test) else {
        return;
    };
    for (seed, s) in [82, 83].into_iter().zip(UNROTATING_SECTIONS) {
        let mut tm = qwen(4, seed);
        tm.cfg.rope_sections = Some(s);
        check(&bin, &tm, &format!("sections{s:?}_seed{seed}"));
    }
}

/// Log-probabilities of every position in the second half of each chunk,
/// from llama-perplexity's `--kl-divergence-base` dump (uint16-quantised
/// log-probs: `min_log_prob + scale·q`, `scale` ≤ 16/65535): ours must agree
/// within half a quantisation step plus 2e-5.
#[test]
fn log_probs_match_llama_cpp_perplexity_dump() {
    log_probs_match(
        "log_probs_match_llama_cpp_perplexity_dump",
        GgmlType::F32,
        "f32",
        0.0,
    );
}

/// The DESIGN's default cache: K/V in f16 (llama.cpp without flash attention
/// converts q to f16 for q·k, which a batch sums in tinyBLAS's order, and the
/// softmax weights to f16 for ·V; we do the same). In ggml's summation order
/// (`CLOVER_BATCH_ORDER=ggml`) the f16 cache matches to the dump's
/// resolution (4.4e-5, as f32). The default order's residual is 3.06e-4, so
/// this guards the measured level (extra 3e-4): the order's last-bit
/// differences in K land some values on the other side of an f16 rounding
/// edge, each a step of 5e-4 relative in a cached key, which the layers after
/// carry on (on the converter's file, 74 and 983 of the 5120 cached K values
/// of its two attention layers); an f32 cache has no such steps.
#[test]
fn log_probs_stay_near_llama_cpp_with_an_f16_kv_cache() {
    log_probs_match(
        "log_probs_stay_near_llama_cpp_with_an_f16_kv_cache",
        GgmlType::F16,
        "f16",
        3e-4,
    );
}

/// As `log_probs_match_llama_cpp_perplexity_dump`, for files whose sections
/// leave rope pairs unrotated.
#[test]
fn log_probs_match_llama_cpp_when_sections_leave_rope_pairs_unrotated() {
    let test = "log_probs_match_llama_cpp_when_sections_leave_rope_pairs_unrotated";
    for s in UNROTATING_SECTIONS {
        log_probs_match_with(test, GgmlType::F32, "f32", 0.0, Some(s));
    }
}

fn log_probs_match(test: &str, cache: GgmlType, cache_flag: &str, extra: f32) {
    log_probs_match_with(test, cache, cache_flag, extra, None);
}

fn log_probs_match_with(
    test: &str,
    cache: GgmlType,
    cache_flag: &str,
    extra: f32,
    sections: Option<[u32; 4]>,
) {
    let Some(completion) = llama_completion_or_defer(test) else {
        return;
    };
    let dir_bin = completion.parent().unwrap().to_path_buf();
    let perplexity = dir_bin.join("llama-perplexity");
    let mut tm = qwen(4, 81);
    tm.cfg.rope_sections = sections;
    let dir = tempfile::tempdir().unwrap();
    let model_path = dir.path().join("m.gguf");
    write(&tm, &model_path);
    let n_ctx = 32usize;
    let mut seed = 12345u64;
    let ids: Vec<u32> = (0..2 * n_ctx)
        .map(|_| {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
            ((seed >> 33) % 46) as u32
        })
        .collect();
    let toks = vocab();
    let text: String = ids.iter().map(|&i| toks[i as usize].as_str()).collect();
    let text_path = dir.path().join("t.txt");
    std::fs::write(&text_path, &text).unwrap();
    let dump = dir.path().join("base.bin");
    let out = Command::new(&perplexity)
        .args([
            "-m",
            model_path.to_str().unwrap(),
            "-f",
            text_path.to_str().unwrap(),
        ])
        .args(["-c", &n_ctx.to_string(), "-b", &n_ctx.to_string()])
        .args(["--kl-divergence-base", dump.to_str().unwrap()])
        .args([
            "-fa", "off", "-ctk", cache_flag, "-ctv", cache_flag, "-t", "1",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bytes = std::fs::read(&dump).unwrap();
    let i32_at = |o: usize| i32::from_le_bytes(bytes[o..o + 4].try_into().unwrap());
    // "_logits_", n_ctx, n_vocab, n_chunk, tokens, then the rows.
    assert_eq!(&bytes[..8], b"_logits_");
    assert_eq!(i32_at(8) as usize, n_ctx);
    let n_vocab = i32_at(12) as usize;
    let n_chunk = i32_at(16) as usize;
    assert_eq!((n_vocab, n_chunk), (50, 2));
    let their_tokens: Vec<u32> = (0..n_chunk * n_ctx)
        .map(|i| i32_at(20 + 4 * i) as u32)
        .collect();
    assert_eq!(
        their_tokens, ids,
        "llama.cpp tokenised the text differently"
    );
    let nv = 2 * n_vocab.div_ceil(2) + 4;
    let first = n_ctx / 2;
    let rows = n_ctx - 1 - first;
    let mut off = 20 + 4 * n_chunk * n_ctx;
    let model = tm.model();
    let mut worst = 0.0f32;
    for c in 0..n_chunk {
        let mut opts = StateOptions::new(n_ctx);
        opts.type_k = cache;
        opts.type_v = cache;
        let mut st = model.new_state(opts).unwrap();
        let logits = model
            .forward(&mut st, &ids[c * n_ctx..(c + 1) * n_ctx], 0, LogitsFor::All)
            .unwrap()
            .to_vec();
        for r in 0..rows {
            let row: Vec<u16> = (0..nv)
                .map(|i| {
                    u16::from_le_bytes(bytes[off + 2 * i..off + 2 * i + 2].try_into().unwrap())
                })
                .collect();
            off += 2 * nv;
            let f = |i: usize| f32::from_bits(row[2 * i] as u32 | (row[2 * i + 1] as u32) << 16);
            let (scale, min_lp) = (f(0), f(1));
            let l = &logits[(first + r) * n_vocab..(first + r + 1) * n_vocab];
            let max = l.iter().cloned().fold(f32::MIN, f32::max);
            let lse = max + l.iter().map(|x| ((x - max) as f64).exp()).sum::<f64>().ln() as f32;
            for i in 0..n_vocab {
                let q = row[4 + i];
                if q == 0 {
                    continue;
                }
                let theirs = min_lp + scale * q as f32;
                let d = (l[i] - lse - theirs).abs();
                worst = worst.max(d);
                assert!(
                    d <= 0.5 * scale + 2e-5 + extra,
                    "chunk {c} pos {} token {i}: {d}",
                    first + r
                );
            }
        }
    }
    eprintln!(
        "{cache_flag} cache, sections {sections:?}: max |log-prob ours − llama.cpp| = {worst:.2e}"
    );
}
