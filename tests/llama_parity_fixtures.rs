//! Parity with llama.cpp from stored fixtures (docs/DESIGN.md §8): runs in
//! CI, where no llama.cpp build exists. `scripts/oracle/make_parity_fixtures.sh`
//! ran llama.cpp (f32 K/V cache, flash attention off) on `clover synth
//! --arch qwen35moe` files and stored, per (preset, recipe), the logits of one
//! 256-token batch and 48-token greedy continuations of 5 prompts in
//! `tests/fixtures/parity/`. Here each file is synthesised again (same seed:
//! the sha256 must match the fixture's, or the comparison would be void), run
//! through our forward pass with an f32 K/V cache, and compared.
//!
//! What is asserted, per (preset, recipe), in `EXPECT` (measured on the
//! host's default tier, AVX-512 here, and again on the AVX2 tier: both give
//! the same figures; the run is deterministic, so CI reproduces them
//! exactly):
//! - `agree`: the positions, from the start, whose logits agree within
//!   1e-4 (a leading run: an error carried by the recurrent state never
//!   heals). Our ops follow ggml's x86 arithmetic (llama.cpp built for this
//!   AVX-512 host): its sum orders (`ggml_vec_dot_f32`, llamafile tinyBLAS
//!   for batched F32/F16, the per-type quantised dots), its polynomial exp
//!   in silu / swiglu / softmax, its fused multiply-adds; where all ops
//!   used by a file match, logits agree *bit for bit* (`max_diff` 0). Where
//!   one op still differs in its last bit, quantised models agree until the
//!   first activation whose conversion to Q8 lands on the other side of a
//!   rounding edge: one flipped level moves logits by 1e-2..1e-1 in these
//!   random models (a flipped expert choice by ~1), and the GDN state
//!   carries it.
//! - `max_diff`: max |logit ours − llama.cpp| over all positions, ≤ the
//!   measured value ×2.
//! - top-1: a position whose argmaxes differ must be a near tie in llama.cpp's
//!   row (the two logits within `max_diff` of each other).
//! - greedy: the continuations are identical token for token, where `greedy`
//!   says so. OPEN: tiny apex-miniplus (see `EXPECT`).
use std::path::{Path, PathBuf};

use clover::gguf::GgufFile;
use clover::kernels::{self, GgmlType, Isa};
use clover::model::{LogitsFor, Model, StateOptions};
use clover::synth::{self, Arch, Preset, Recipe, SynthOptions};
use serde::Deserialize;
use sha2::{Digest, Sha256};

#[derive(Deserialize)]
struct Fixture {
    preset: String,
    recipe: String,
    seed: u64,
    synth_command: String,
    file_bytes: u64,
    sha256: String,
    n_vocab: usize,
    tokens: Vec<u32>,
    logits: LogitsSpec,
    greedy: Vec<Greedy>,
    /// Written with `clover synth --rope-sections` (absent: the preset's).
    #[serde(default)]
    rope_sections: Option<[i32; 4]>,
}

impl Fixture {
    /// The fixture's file stem: `PRESET-RECIPE`, `-sections-S0-S1-S2-S3` added
    /// for a file with its own rope sections.
    fn name(&self) -> String {
        match self.rope_sections {
            None => format!("{}-{}", self.preset, self.recipe),
            Some(s) => format!(
                "{}-{}-sections-{}-{}-{}-{}",
                self.preset, self.recipe, s[0], s[1], s[2], s[3]
            ),
        }
    }
}

#[derive(Deserialize)]
struct LogitsSpec {
    file: String,
    kind: String,
    #[serde(default)]
    top_k: usize,
    #[serde(default)]
    probe_ids: Vec<u32>,
}

#[derive(Deserialize)]
struct Greedy {
    prompt: Vec<u32>,
    tokens: Vec<u32>,
}

/// llama.cpp's logits of one position, as stored.
enum Row {
    Full(Vec<f32>),
    /// (lse, [(id, logit)] descending, [(probe id, logit)]).
    Top(f32, Vec<(u32, f32)>, Vec<(u32, f32)>),
}

impl Row {
    fn logit(&self, id: u32) -> Option<f32> {
        match self {
            Row::Full(r) => Some(r[id as usize]),
            Row::Top(_, top, probes) => top
                .iter()
                .chain(probes)
                .find(|(i, _)| *i == id)
                .map(|(_, l)| *l),
        }
    }

    fn argmax(&self) -> u32 {
        match self {
            Row::Full(r) => argmax(r),
            Row::Top(_, top, _) => top[0].0,
        }
    }
}

/// One row of expectations (see the module doc).
struct Expect {
    preset: &'static str,
    recipe: &'static str,
    /// Leading positions that must agree within 1e-4 (at least).
    agree: usize,
    /// Max |logit ours − llama.cpp| allowed over all positions.
    max_diff: f32,
    /// Greedy continuations identical (else: at least this many tokens of
    /// the 240 must match before each prompt's first difference).
    greedy_exact: bool,
    greedy_min: usize,
}

const fn ex(
    preset: &'static str,
    recipe: &'static str,
    agree: usize,
    max_diff: f32,
    greedy_min: usize,
) -> Expect {
    Expect {
        preset,
        recipe,
        agree,
        max_diff,
        greedy_exact: greedy_min == 240,
        greedy_min,
    }
}

/// Measured figures (comment) and the limits set from them.
const EXPECT: &[Expect] = &[
    // measured: bit for bit (agree 256, max 0), greedy 240/240
    ex("tiny", "f32", 256, 0.0, 240),
    // measured: bit for bit (agree 256, max 0), greedy 240/240
    ex("tiny", "q8_0", 256, 0.0, 240),
    // measured: bit for bit (agree 256, max 0), greedy 240/240
    ex("tiny", "q4_k_m", 256, 0.0, 240),
    // OPEN: ggml repacks Q4_0 weights on AVX2 hosts (q4_0_8x8, its own
    // gemv/gemm sum order; `tiny` falls back from Q3_K to Q4_0), which we
    // do not mirror yet.
    // measured: agree 69, max 5.25e-2, top-1 256/256, greedy 240/240
    ex("tiny", "apex-miniplus", 69, 0.1, 240),
    // measured: bit for bit (agree 256, max 0), greedy 240/240
    ex("small", "f32", 256, 0.0, 240),
    // measured: bit for bit (agree 256, max 0), greedy 240/240
    ex("small", "q8_0", 256, 0.0, 240),
    // measured: bit for bit (agree 256, max 0), greedy 240/240
    ex("small", "q4_k_m", 256, 0.0, 240),
    // measured: bit for bit (agree 256, max 0), greedy 240/240
    ex("small", "apex-miniplus", 256, 0.0, 240),
];

fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/parity")
}

fn argmax(r: &[f32]) -> u32 {
    // First maximum, as llama_logits.c's `>` scan.
    (0..r.len()).fold(0, |b, i| if r[i] > r[b] { i } else { b }) as u32
}

fn lse(r: &[f32]) -> f32 {
    let m = r.iter().cloned().fold(f32::MIN, f32::max) as f64;
    (m + r.iter().map(|&x| (x as f64 - m).exp()).sum::<f64>().ln()) as f32
}

fn read_rows(fx: &Fixture, n_pos: usize) -> Vec<Row> {
    let bytes = std::fs::read(fixture_dir().join(&fx.logits.file)).unwrap();
    let f = |o: usize| f32::from_le_bytes(bytes[o..o + 4].try_into().unwrap());
    let u = |o: usize| u32::from_le_bytes(bytes[o..o + 4].try_into().unwrap());
    let nv = fx.n_vocab;
    match fx.logits.kind.as_str() {
        "full" => {
            assert_eq!(bytes.len(), n_pos * nv * 4, "{}", fx.logits.file);
            (0..n_pos)
                .map(|p| Row::Full((0..nv).map(|i| f((p * nv + i) * 4)).collect()))
                .collect()
        }
        "top" => {
            let (k, np) = (fx.logits.top_k, fx.logits.probe_ids.len());
            let stride = 4 * (1 + 2 * k + np);
            assert_eq!(bytes.len(), n_pos * stride, "{}", fx.logits.file);
            (0..n_pos)
                .map(|p| {
                    let o = p * stride;
                    let top = (0..k)
                        .map(|j| (u(o + 4 + 4 * j), f(o + 4 + 4 * (k + j))))
                        .collect();
                    let probes = (0..np)
                        .map(|j| (fx.logits.probe_ids[j], f(o + 4 * (1 + 2 * k + j))))
                        .collect();
                    Row::Top(f(o), top, probes)
                })
                .collect()
        }
        other => panic!("unknown logits kind {other}"),
    }
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

struct Figures {
    agree: usize,
    max_diff: f32,
    top1_agree: usize,
    n_pos: usize,
    greedy_match: usize,
    greedy_total: usize,
}

fn greedy(model: &Model, prompt: &[u32], n: usize) -> Vec<u32> {
    let mut st = model
        .new_state(StateOptions::new(prompt.len() + n + 8))
        .unwrap();
    let mut out = Vec::with_capacity(n);
    let mut logits = model
        .forward(&mut st, prompt, 0, LogitsFor::Last)
        .unwrap()
        .to_vec();
    for _ in 0..n {
        let best = argmax(&logits);
        out.push(best);
        let p = st.n_past();
        logits = model
            .forward(&mut st, &[best], p, LogitsFor::Last)
            .unwrap()
            .to_vec();
    }
    out
}

fn check(fx: &Fixture, dir: &Path, want: &Expect) -> Figures {
    let limit = want.max_diff;
    let opts = SynthOptions {
        arch: Arch::Qwen35Moe,
        preset: fx.preset.parse::<Preset>().unwrap(),
        recipe: fx.recipe.parse::<Recipe>().unwrap(),
        seed: fx.seed,
    };
    let path = dir.join(format!("{}.gguf", fx.name()));
    let mut plan = synth::plan(opts).unwrap();
    if let Some(sections) = fx.rope_sections {
        plan.set_rope_sections(sections);
    }
    plan.write(&path, Some(2)).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(bytes.len() as u64, fx.file_bytes, "{}", fx.synth_command);
    assert_eq!(
        sha256_hex(&bytes),
        fx.sha256,
        "`{}` no longer writes the file the fixture was made from: \
         regenerate the fixtures (scripts/oracle/make_parity_fixtures.sh)",
        fx.synth_command
    );
    drop(bytes);
    let file = GgufFile::open(&path).unwrap();
    let model = Model::load(&file).unwrap();
    assert_eq!(model.n_vocab(), fx.n_vocab);

    // Logits of every position of one batch, f32 K/V like the oracle.
    let n_pos = fx.tokens.len();
    let mut so = StateOptions::new(n_pos + 8);
    so.max_batch = n_pos;
    (so.type_k, so.type_v) = (GgmlType::F32, GgmlType::F32);
    let mut st = model.new_state(so).unwrap();
    let ours = model
        .forward(&mut st, &fx.tokens, 0, LogitsFor::All)
        .unwrap()
        .to_vec();
    let theirs = read_rows(fx, n_pos);
    let nv = fx.n_vocab;
    let (mut max_diff, mut top1_agree, mut agree) = (0.0f32, 0, 0);
    let trace = std::env::var_os("CLOVER_PARITY_TRACE").is_some();
    for (p, row) in theirs.iter().enumerate() {
        let o = &ours[p * nv..(p + 1) * nv];
        let before = max_diff;
        max_diff = 0.0;
        match row {
            Row::Full(r) => {
                for (a, b) in o.iter().zip(r) {
                    max_diff = max_diff.max((a - b).abs());
                }
            }
            Row::Top(l, top, probes) => {
                max_diff = max_diff.max((lse(o) - l).abs());
                for (id, b) in top.iter().chain(probes) {
                    max_diff = max_diff.max((o[*id as usize] - b).abs());
                }
            }
        }
        if trace {
            eprintln!("{} position {p}: max |Δ| {max_diff:.3e}", fx.name());
        }
        if agree == p && max_diff <= 1e-4 {
            agree += 1;
        }
        max_diff = max_diff.max(before);
        let (a, b) = (argmax(o), row.argmax());
        if a == b {
            top1_agree += 1;
        } else {
            // Only a near tie in llama.cpp's own row may flip the argmax.
            let gap = row.logit(b).unwrap() - row.logit(a).unwrap_or(f32::NEG_INFINITY);
            assert!(
                gap <= limit,
                "{} position {p}: top-1 {a} (ours) vs {b} (llama.cpp), their gap {gap}",
                fx.name()
            );
        }
    }

    let (mut greedy_match, mut greedy_total) = (0, 0);
    let mut mismatch = None;
    for (i, g) in fx.greedy.iter().enumerate() {
        let got = greedy(&model, &g.prompt, g.tokens.len());
        let same = got
            .iter()
            .zip(&g.tokens)
            .take_while(|(a, b)| a == b)
            .count();
        greedy_match += same;
        greedy_total += g.tokens.len();
        if same < g.tokens.len() && mismatch.is_none() {
            mismatch = Some(format!(
                "prompt {i}: first difference at token {same}: ours {got:?} vs llama.cpp {:?}",
                g.tokens
            ));
        }
    }
    let fig = Figures {
        agree,
        max_diff,
        top1_agree,
        n_pos,
        greedy_match,
        greedy_total,
    };
    print_row(fx, &fig);
    let name = fx.name();
    assert!(
        fig.agree >= want.agree,
        "{name}: only the first {} positions agree within 1e-4 (expected {})",
        fig.agree,
        want.agree
    );
    assert!(
        max_diff <= limit,
        "{name}: max |logit ours − llama.cpp| = {max_diff:.3e} > {limit:.1e}"
    );
    if want.greedy_exact {
        if let Some(m) = mismatch {
            panic!("{name} greedy: {m}");
        }
    } else {
        eprintln!(
            "OPEN {name}: greedy {greedy_match}/{greedy_total} (guarded at {})",
            want.greedy_min
        );
        assert!(
            greedy_match >= want.greedy_min,
            "{name} greedy got worse: {mismatch:?}"
        );
    }
    fig
}

fn print_row(fx: &Fixture, f: &Figures) {
    eprintln!(
        "| {:<6} | {:<13} | {:>4} | {:>5} | {:>9.2e} | {:>7} | {:>7} |",
        fx.preset,
        fx.recipe,
        f.n_pos,
        f.agree,
        f.max_diff,
        format!("{}/{}", f.top1_agree, f.n_pos),
        format!("{}/{}", f.greedy_match, f.greedy_total),
    );
}

fn load_fixture(preset: &str, recipe: &str) -> Fixture {
    load_fixture_named(&format!("{preset}-{recipe}"))
}

fn load_fixture_named(name: &str) -> Fixture {
    let path = fixture_dir().join(format!("{name}.json"));
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (run make_parity_fixtures.sh)", path.display()));
    serde_json::from_str(&text).unwrap()
}

/// The kernel tier: the host's default (what `clover run` uses), or
/// `CLOVER_ISA` when set (the AVX2 re-run below sets it). Every tier on an
/// x86 host sums as llama.cpp's x86 build does on this AVX-512 host (the
/// AVX-512 tier too: `kernels/tests/avx512_ggml_order.rs`).
fn pick_tier() -> &'static str {
    static TIER: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TIER.get_or_init(|| {
        // Batches in llama.cpp's batch kernels' orders (KernelTable::ggml_batch):
        // the stored logits are one 256-token batch of llama.cpp's. (Set
        // `CLOVER_BATCH_ORDER` to something else to see the default order's
        // figures; the limits are for llama.cpp's order.)
        if !matches!(std::env::var("CLOVER_BATCH_ORDER").as_deref(), Ok(o) if o != "ggml") {
            kernels::plan::BatchOrder::Ggml.choose();
        }
        kernels::isa::init().unwrap().name().to_string()
    })
}

fn run_preset(preset: &str) {
    let tier = pick_tier();
    let dir = tempfile::tempdir().unwrap();
    eprintln!("kernel tier: {tier}");
    eprintln!("| preset | recipe        | pos  | agree | max |Δ|  | top-1   | greedy  |");
    for want in EXPECT.iter().filter(|e| e.preset == preset) {
        let fx = load_fixture(want.preset, want.recipe);
        check(&fx, dir.path(), want);
    }
}

/// Runs a test of this file again in a child process on the AVX2 tier,
/// when the host's default tier is another one (the table is chosen once per
/// process). Skipped, loudly, on hosts without AVX2, where AVX2 is already
/// the default, or inside such a child.
fn rerun_on_avx2(test: &str) {
    if std::env::var_os("CLOVER_ISA").is_some() {
        return;
    }
    if !Isa::Avx2.available() || Isa::detect() == Isa::Avx2 {
        eprintln!("!!! AVX2 re-run SKIPPED: the default tier is AVX2 or AVX2 is absent !!!");
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([test, "--exact", "--include-ignored", "--nocapture"])
        .args(["--test-threads", "1"])
        .env("CLOVER_ISA", "avx2")
        .output()
        .unwrap();
    eprintln!(
        "--- AVX2 tier ---\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{test} fails on the AVX2 tier");
}

#[test]
fn tiny_models_match_stored_llama_cpp_logits_and_greedy_tokens() {
    run_preset("tiny");
}

#[test]
fn small_models_match_stored_llama_cpp_logits_and_greedy_tokens() {
    run_preset("small");
}

/// A `small` f32 file synthesised with its own `rope.dimension_sections`
/// (fixture `small-f32-sections-S0-S1-S2-S3`), held to `small` f32's limits.
///
/// The fixtures come from the same llama.cpp build as the others
/// (`scripts/build_llama_cpp.sh --fixtures`; a -march=native build on a
/// Sapphire Rapids host fuses none of ggml_ssm_conv's taps and is 9.1e-6 off
/// every f32 fixture, sectioned or not).
fn run_sectioned(sections: [i32; 4]) {
    let tier = pick_tier();
    let dir = tempfile::tempdir().unwrap();
    eprintln!("kernel tier: {tier}");
    let [a, b, c, d] = sections;
    let fx = load_fixture_named(&format!("small-f32-sections-{a}-{b}-{c}-{d}"));
    assert_eq!(fx.rope_sections, Some(sections));
    let want = EXPECT
        .iter()
        .find(|e| e.preset == "small" && e.recipe == "f32")
        .unwrap();
    check(&fx, dir.path(), want);
}

/// [4, 2, 2, 0] over `small`'s 8 rope pairs: ggml turns pairs 0..=6 with the
/// position and leaves pair 7 as it is (docs/DESIGN.md §2.4; what the default model's
/// file used to say).
#[test]
fn small_model_whose_sections_leave_rope_pair_7_unrotated_matches_llama_cpp() {
    run_sectioned([4, 2, 2, 0]);
}

/// [0, 4, 4, 0]: no first section, so pairs 0, 3 and 6 (sector ≡ 0 mod 3)
/// stay unrotated, pair 0 the fastest-turning of all.
#[test]
fn small_model_whose_sections_leave_rope_pairs_0_3_6_unrotated_matches_llama_cpp() {
    run_sectioned([0, 4, 4, 0]);
}

#[test]
fn sectioned_small_models_match_llama_cpp_on_the_avx2_tier_too() {
    rerun_on_avx2("small_model_whose_sections_leave_rope_pair_7_unrotated_matches_llama_cpp");
    rerun_on_avx2("small_model_whose_sections_leave_rope_pairs_0_3_6_unrotated_matches_llama_cpp");
}

#[test]
fn tiny_models_match_llama_cpp_on_the_avx2_tier_too() {
    rerun_on_avx2("tiny_models_match_stored_llama_cpp_logits_and_greedy_tokens");
}

#[test]
fn small_models_match_llama_cpp_on_the_avx2_tier_too() {
    rerun_on_avx2("small_models_match_stored_llama_cpp_logits_and_greedy_tokens");
}
