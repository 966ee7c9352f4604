//! `clover synth`: counts, sizes, determinism, recipes and CLI errors.
//!
//! The GGUF reader lives elsewhere; these tests carry a minimal header parser
//! of their own (magic, version, counts, keys, tensor infos).

use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Stdio};

use clover::kernels::GgmlType;
use clover::synth::{self, Arch, Preset, Recipe, SynthOptions};

mod skip;

/// Whether python3 can import these modules (its traceback, if not, is not
/// shown: the caller's skip line says what is missing).
fn python_imports(modules: &str) -> bool {
    Command::new("python3")
        .args(["-c", &format!("import {modules}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The skip line of a test that needs a llama.cpp tool (found through the
/// environment variable `var`) and gguf-py: names whichever is missing.
fn skip_without(test: &str, tool: &Path, var: &str, has_py: bool, modules: &str) {
    let (mut missing, mut how) = (Vec::new(), Vec::new());
    if !tool.exists() {
        missing.push(format!("no {}", tool.display()));
        how.push(format!(
            "scripts/build_llama_cpp.sh builds llama.cpp (set {var} to match)"
        ));
    }
    if !has_py {
        missing.push(format!("python3 cannot import {modules}"));
        how.push("pip install gguf==0.19.0 numpy".to_string());
    }
    skip::skipped(test, &missing.join(", "), &how.join(", "));
}

fn opts(arch: Arch, preset: Preset, recipe: Recipe, seed: u64) -> SynthOptions {
    SynthOptions {
        arch,
        preset,
        recipe,
        seed,
    }
}

fn clover() -> Command {
    Command::new(env!("CARGO_BIN_EXE_clover"))
}

/// Runs `cmd`, which must succeed (its stderr is the failure message).
fn output_ok(cmd: &mut Command) -> std::process::Output {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Value of a `name: value` line of the dry-run output.
fn line_value(out: &str, name: &str) -> String {
    out.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}: ")))
        .unwrap_or_else(|| panic!("no '{name}:' line in {out}"))
        .to_string()
}

fn dry_run(arch: &str) -> String {
    let mut cmd = clover();
    cmd.args([
        "synth", "--arch", arch, "--preset", "full", "--recipe", "q4_k_m",
    ])
    .args(["--seed", "1", "--dry-run"]);
    String::from_utf8(output_ok(&mut cmd).stdout).unwrap()
}

#[test]
fn dry_run_of_full_clover_says_853_tensors_and_34661350848_parameters() {
    let out = dry_run("clover_moe");
    assert_eq!(line_value(&out, "tensors"), "853");
    assert_eq!(line_value(&out, "parameters"), "34661350848");
    assert_eq!(line_value(&out, "architecture"), "clover_moe");
    assert_eq!(line_value(&out, "vocab"), "248320");
    assert!(
        out.contains("layers: 40 (30 gated-deltanet, 10 full-attention)"),
        "{out}"
    );
}

#[test]
fn dry_run_of_full_qwen35moe_says_733_tensors_and_34660610688_parameters() {
    let out = dry_run("qwen35moe");
    assert_eq!(line_value(&out, "tensors"), "733");
    assert_eq!(line_value(&out, "parameters"), "34660610688");
}

#[test]
fn dry_run_writes_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.gguf");
    let st = clover()
        .args(["synth", "--preset", "tiny", "--dry-run", "-o"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(st.status.success());
    assert!(!path.exists());
}

// ---- a minimal GGUF header parser -------------------------------------------

#[derive(Debug, PartialEq)]
enum Kv {
    Int(i64),
    F32(f32),
    Bool(bool),
    Str(String),
    Arr(Vec<Kv>),
}

struct Header {
    kv: HashMap<String, Kv>,
    /// name → (dims, type id, offset)
    tensors: Vec<(String, Vec<u64>, u32, u64)>,
    data_start: u64,
}

struct Cur<'a>(&'a [u8], usize);

impl Cur<'_> {
    fn take(&mut self, n: usize) -> &[u8] {
        let s = &self.0[self.1..self.1 + n];
        self.1 += n;
        s
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.take(4).try_into().unwrap())
    }
    fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.take(8).try_into().unwrap())
    }
    fn string(&mut self) -> String {
        let n = self.u64() as usize;
        String::from_utf8(self.take(n).to_vec()).unwrap()
    }
    fn value(&mut self, ty: u32) -> Kv {
        match ty {
            0 => Kv::Int(self.take(1)[0] as i64),
            1 => Kv::Int(self.take(1)[0] as i8 as i64),
            2 => Kv::Int(u16::from_le_bytes(self.take(2).try_into().unwrap()) as i64),
            3 => Kv::Int(i16::from_le_bytes(self.take(2).try_into().unwrap()) as i64),
            4 => Kv::Int(self.u32() as i64),
            5 => Kv::Int(self.u32() as i32 as i64),
            6 => Kv::F32(f32::from_bits(self.u32())),
            7 => Kv::Bool(self.take(1)[0] != 0),
            8 => Kv::Str(self.string()),
            9 => {
                let t = self.u32();
                let n = self.u64();
                Kv::Arr((0..n).map(|_| self.value(t)).collect())
            }
            10 | 11 => Kv::Int(self.u64() as i64),
            12 => Kv::F32(f64::from_bits(self.u64()) as f32),
            _ => panic!("bad value type {ty}"),
        }
    }
}

fn parse(bytes: &[u8]) -> Header {
    let mut c = Cur(bytes, 0);
    assert_eq!(c.take(4), b"GGUF");
    assert_eq!(c.u32(), 3);
    let n_tensors = c.u64();
    let n_kv = c.u64();
    let mut kv = HashMap::new();
    for _ in 0..n_kv {
        let k = c.string();
        let t = c.u32();
        let v = c.value(t);
        assert!(kv.insert(k.clone(), v).is_none(), "duplicate key {k}");
    }
    let mut tensors = Vec::new();
    for _ in 0..n_tensors {
        let name = c.string();
        let nd = c.u32();
        let dims: Vec<u64> = (0..nd).map(|_| c.u64()).collect();
        let ty = c.u32();
        let off = c.u64();
        tensors.push((name, dims, ty, off));
    }
    let data_start = (c.1 as u64).div_ceil(32) * 32;
    Header {
        kv,
        tensors,
        data_start,
    }
}

fn int(h: &Header, k: &str) -> i64 {
    match h.kv.get(k) {
        Some(Kv::Int(v)) => *v,
        other => panic!("{k}: {other:?}"),
    }
}

fn write(o: SynthOptions, path: &Path, threads: Option<usize>) -> Vec<u8> {
    let plan = synth::plan(o).unwrap();
    let n = plan.write(path, threads).unwrap();
    let bytes = std::fs::read(path).unwrap();
    assert_eq!(n, bytes.len() as u64);
    assert_eq!(plan.file_bytes(), n, "dry-run size must match the file");
    bytes
}

#[test]
fn tiny_files_are_under_one_megabyte_and_parse_back() {
    let dir = tempfile::tempdir().unwrap();
    for arch in [Arch::CloverMoe, Arch::Qwen35Moe] {
        let path = dir.path().join(format!("{arch}.gguf"));
        let bytes = write(opts(arch, Preset::Tiny, Recipe::F32, 5), &path, Some(2));
        assert!(bytes.len() < 1_000_000, "{arch}: {} bytes", bytes.len());
        let h = parse(&bytes);
        let plan = synth::plan(opts(arch, Preset::Tiny, Recipe::F32, 5)).unwrap();
        assert_eq!(h.tensors.len(), plan.n_tensors());
        // Offsets are aligned, increasing, and the last tensor ends at EOF.
        let mut expect = 0u64;
        for (name, dims, ty, off) in &h.tensors {
            assert_eq!(*off, expect, "{name}");
            let t = GgmlType::from_id(*ty).unwrap();
            let size = t.row_bytes(dims[0]).unwrap() * dims[1..].iter().product::<u64>();
            expect = (off + size).div_ceil(32) * 32;
            if h.tensors.last().unwrap().0 == *name {
                assert_eq!(h.data_start + off + size, bytes.len() as u64);
            }
        }
        let a = arch.name();
        assert_eq!(h.kv["general.architecture"], Kv::Str(a.into()));
        assert_eq!(int(&h, &format!("{a}.block_count")), 4);
        assert_eq!(int(&h, &format!("{a}.full_attention_interval")), 4);
        assert_eq!(int(&h, "tokenizer.ggml.bos_token_id"), 448 - 12);
        assert_eq!(h.kv["tokenizer.ggml.add_bos_token"], Kv::Bool(false));
        let has = |k: &str| h.kv.contains_key(k);
        let clover_only = [
            "clover_moe.ssm.conv_kernel_right",
            "clover_moe.diffusion.block_size",
            "tokenizer.ggml.mask_token_id",
        ];
        for k in clover_only {
            assert_eq!(has(k), arch == Arch::CloverMoe, "{k} in {a}");
        }
        let names: Vec<&str> = h.tensors.iter().map(|t| t.0.as_str()).collect();
        assert_eq!(
            names.contains(&"blk.0.ssm_conv1d.weight_right"),
            arch == Arch::CloverMoe
        );
        assert!(
            names.contains(&"blk.3.attn_q.weight") && !names.contains(&"blk.3.attn_qkv.weight")
        );
    }
}

#[test]
fn same_seed_gives_identical_bytes_whatever_the_thread_count() {
    let dir = tempfile::tempdir().unwrap();
    let o = opts(Arch::CloverMoe, Preset::Tiny, Recipe::F32, 42);
    let a = write(o, &dir.path().join("a.gguf"), Some(1));
    let b = write(o, &dir.path().join("b.gguf"), Some(3));
    let c = write(o, &dir.path().join("c.gguf"), Some(1));
    assert!(a == b, "1 thread and 3 threads differ");
    assert!(a == c, "two runs with the same seed differ");
    let o2 = opts(Arch::CloverMoe, Preset::Tiny, Recipe::F32, 43);
    let d = write(o2, &dir.path().join("d.gguf"), Some(1));
    assert_eq!(a.len(), d.len());
    assert!(a != d, "different seeds give the same weights");
}

#[test]
fn f16_and_bf16_recipes_write_half_size_matrices_and_f32_vectors() {
    let dir = tempfile::tempdir().unwrap();
    for (recipe, id) in [(Recipe::F16, 1u32), (Recipe::Bf16, 30)] {
        let path = dir.path().join(format!("{recipe}.gguf"));
        let h = parse(&write(
            opts(Arch::Qwen35Moe, Preset::Tiny, recipe, 1),
            &path,
            None,
        ));
        for (name, dims, ty, _) in &h.tensors {
            let matrix = dims.len() >= 2
                && !name.contains("ffn_gate_inp.weight")
                && !name.contains("ssm_conv1d");
            assert_eq!(*ty, if matrix { id } else { 0 }, "{name}");
        }
    }
}

fn f32_values(bytes: &[u8], h: &Header, name: &str) -> Vec<f32> {
    let (_, dims, ty, off) = h.tensors.iter().find(|t| t.0 == name).unwrap();
    assert_eq!(*ty, 0);
    let n = dims.iter().product::<u64>() as usize;
    let start = (h.data_start + off) as usize;
    bytes[start..start + 4 * n]
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect()
}

#[test]
fn weights_follow_the_documented_scales() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.gguf");
    let bytes = write(
        opts(Arch::CloverMoe, Preset::Tiny, Recipe::F32, 9),
        &path,
        None,
    );
    let h = parse(&bytes);
    let std = |v: &[f32]| {
        let m = v.iter().map(|&x| x as f64).sum::<f64>() / v.len() as f64;
        (v.iter().map(|&x| (x as f64 - m).powi(2)).sum::<f64>() / v.len() as f64).sqrt()
    };
    let qkv = f32_values(&bytes, &h, "blk.0.attn_qkv.weight");
    let s = std(&qkv);
    assert!(
        (s - 1.0 / 8.0).abs() < 0.01,
        "attn_qkv std {s}, want 1/sqrt(64)"
    );
    for x in f32_values(&bytes, &h, "blk.0.ssm_a") {
        assert!((-16.0..=-1.0).contains(&x), "ssm_a {x}");
    }
    for x in f32_values(&bytes, &h, "blk.0.ssm_dt.bias") {
        let dt = (1.0 + (x as f64).exp()).ln();
        assert!((0.000999..=0.1001).contains(&dt), "softplus(dt_bias) {dt}");
    }
    for x in f32_values(&bytes, &h, "blk.0.attn_norm.weight") {
        assert!((0.7..1.3).contains(&x), "norm {x}");
    }
    for x in f32_values(&bytes, &h, "blk.0.ssm_bd_logit_scale.weight") {
        assert!((4.0..8.0).contains(&x), "logit scale {x}");
    }
    // Every value is finite.
    let all = &bytes[h.data_start as usize..];
    assert!(all
        .chunks_exact(4)
        .all(|b| f32::from_le_bytes(b.try_into().unwrap()).is_finite()));
}

#[test]
fn every_recipe_gives_every_full_tensor_a_type_whose_block_divides_ne0() {
    for arch in [Arch::CloverMoe, Arch::Qwen35Moe] {
        for recipe in Recipe::ALL {
            let plan = synth::plan(opts(arch, Preset::Full, recipe, 0)).unwrap();
            for (t, ty) in plan.specs.iter().zip(&plan.types) {
                assert!(
                    t.ne[0] % ty.block_size() as u64 == 0,
                    "{recipe} {}: {ty} on ne0 {}",
                    t.name,
                    t.ne[0]
                );
                let vector_like = t.ne.len() == 1
                    || t.name.contains("ffn_gate_inp.weight")
                    || t.name.contains("ssm_conv1d")
                    || t.name.contains("ssm_bd_");
                if vector_like {
                    assert_eq!(*ty, GgmlType::F32, "{recipe} {}", t.name);
                }
            }
        }
    }
}

#[test]
fn small_preset_rows_are_whole_k_blocks_so_no_recipe_falls_back() {
    for recipe in Recipe::ALL {
        let full = synth::plan(opts(Arch::CloverMoe, Preset::Full, recipe, 0)).unwrap();
        let small = synth::plan(opts(Arch::CloverMoe, Preset::Small, recipe, 0)).unwrap();
        let by_name: HashMap<&str, GgmlType> = small
            .specs
            .iter()
            .zip(&small.types)
            .map(|(t, ty)| (t.name.as_str(), *ty))
            .collect();
        for t in &small.specs {
            assert!(
                t.ne.len() == 1 || t.ne[0] % 256 == 0 || t.name.contains("ssm_conv1d"),
                "{}",
                t.name
            );
        }
        // Global tensors get the same type as at full size.
        for name in ["token_embd.weight", "output.weight"] {
            let i = full.specs.iter().position(|t| t.name == name).unwrap();
            assert_eq!(by_name[name], full.types[i], "{recipe} {name}");
        }
    }
}

fn type_of(plan: &synth::Plan, name: &str) -> GgmlType {
    let i = plan.specs.iter().position(|t| t.name == name).unwrap();
    plan.types[i]
}

#[test]
fn q4_k_m_mix_follows_llama_quantize_rules_at_full_size() {
    let p = synth::plan(opts(Arch::Qwen35Moe, Preset::Full, Recipe::Q4KM, 0)).unwrap();
    assert_eq!(type_of(&p, "output.weight"), GgmlType::Q6_K);
    assert_eq!(type_of(&p, "token_embd.weight"), GgmlType::Q4_K);
    // Layers 0..5 and 35..40 and every third from 7 get more bits.
    assert_eq!(type_of(&p, "blk.0.attn_qkv.weight"), GgmlType::Q6_K);
    assert_eq!(type_of(&p, "blk.5.attn_qkv.weight"), GgmlType::Q4_K);
    assert_eq!(type_of(&p, "blk.7.attn_v.weight"), GgmlType::Q6_K);
    assert_eq!(type_of(&p, "blk.11.attn_v.weight"), GgmlType::Q4_K);
    assert_eq!(type_of(&p, "blk.10.ffn_down_exps.weight"), GgmlType::Q6_K);
    assert_eq!(type_of(&p, "blk.10.ffn_down_shexp.weight"), GgmlType::Q6_K);
    assert_eq!(type_of(&p, "blk.11.ffn_down_exps.weight"), GgmlType::Q4_K);
    assert_eq!(type_of(&p, "blk.0.ffn_gate_exps.weight"), GgmlType::Q4_K);
    assert_eq!(type_of(&p, "blk.0.ffn_gate_inp.weight"), GgmlType::F32);
    assert_eq!(type_of(&p, "blk.0.ssm_conv1d.weight"), GgmlType::F32);
    let hq = synth::plan(opts(Arch::Qwen35Moe, Preset::Full, Recipe::Q4KMHq, 0)).unwrap();
    assert_eq!(type_of(&hq, "blk.0.attn_qkv.weight"), GgmlType::Q8_0);
    assert_eq!(type_of(&hq, "blk.11.ffn_down_exps.weight"), GgmlType::Q4_K);
    let apex = synth::plan(opts(Arch::CloverMoe, Preset::Full, Recipe::ApexMiniPlus, 0)).unwrap();
    assert_eq!(type_of(&apex, "blk.0.ffn_up_exps.weight"), GgmlType::Q3_K);
    assert_eq!(type_of(&apex, "blk.0.ffn_up_shexp.weight"), GgmlType::Q5_K);
    assert_eq!(type_of(&apex, "blk.0.attn_gate.weight"), GgmlType::Q8_0);
    assert_eq!(type_of(&apex, "token_embd.weight"), GgmlType::Q4_K);
    assert_eq!(type_of(&apex, "output.weight"), GgmlType::Q6_K);
    let iq = synth::plan(opts(Arch::CloverMoe, Preset::Full, Recipe::Iq4XsExpsHq, 0)).unwrap();
    assert_eq!(type_of(&iq, "blk.3.ffn_down_exps.weight"), GgmlType::IQ4_XS);
    assert_eq!(type_of(&iq, "blk.3.attn_q.weight"), GgmlType::Q8_0);
}

fn fails_with_one_line(args: &[&str], needle: &str) {
    let out = clover().args(args).output().unwrap();
    assert!(!out.status.success(), "{args:?} succeeded");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
    assert!(err.contains(needle), "{args:?}: {err}");
    assert!(!err.contains("panicked"), "{args:?}: {err}");
}

#[test]
fn bad_flags_fail_with_one_clear_line() {
    fails_with_one_line(
        &["synth", "--recipe", "q5_z", "--dry-run"],
        "unknown recipe 'q5_z'",
    );
    fails_with_one_line(
        &["synth", "--arch", "llama", "--dry-run"],
        "unknown architecture 'llama'",
    );
    fails_with_one_line(
        &["synth", "--preset", "huge", "--dry-run"],
        "unknown preset 'huge'",
    );
    fails_with_one_line(&["synth", "--seed", "-3", "--dry-run"], "error");
    fails_with_one_line(&["synth", "--preset", "tiny"], "no output file");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.gguf");
    let p = path.to_str().unwrap();
    fails_with_one_line(
        &["synth", "-t", "0", "-o", p],
        "--threads must be at least 1",
    );
    let missing = dir.path().join("no/such/dir/x.gguf");
    fails_with_one_line(&["synth", "-o", missing.to_str().unwrap()], "error: ");
}

#[test]
fn every_recipe_writes_a_tiny_file_that_reads_back_in_both_architectures() {
    let dir = tempfile::tempdir().unwrap();
    for arch in [Arch::Qwen35Moe, Arch::CloverMoe] {
        for recipe in Recipe::ALL {
            let plan = synth::plan(opts(arch, Preset::Tiny, recipe, 3)).unwrap();
            let path = dir
                .path()
                .join(format!("{}-{}.gguf", arch.name(), recipe.name()));
            let written = plan.write(&path, Some(2)).unwrap();
            assert_eq!(written, plan.file_bytes(), "{recipe:?}");
            let file = clover::gguf::GgufFile::open(&path).unwrap();
            assert_eq!(file.tensors().len(), plan.n_tensors());
            for (info, ty) in file.tensors().iter().zip(&plan.types) {
                assert_eq!(info.ty, *ty, "{}", info.name);
                let row = info.dims[0] as usize;
                let mut out = vec![0f32; row];
                let view = file.view(info);
                let row_bytes = info.ty.row_bytes(row as u64).unwrap() as usize;
                clover::kernels::scalar::dequantize_row(info.ty, &view.data[..row_bytes], &mut out);
                assert!(
                    out.iter().all(|x| x.is_finite()),
                    "{} has non-finite values",
                    info.name
                );
            }
        }
    }
}

#[test]
fn q8_0_q4_0_and_q4_k_m_type_maps_match_llama_quantize_on_tiny() {
    let quantize = std::env::var("LLAMA_QUANTIZE")
        .unwrap_or_else(|_| "/work/llama/build/bin/llama-quantize".to_string());
    let has_gguf = python_imports("gguf");
    if !Path::new(&quantize).exists() || !has_gguf {
        skip_without(
            "q8_0_q4_0_and_q4_k_m_type_maps_match_llama_quantize_on_tiny",
            Path::new(&quantize),
            "LLAMA_QUANTIZE",
            has_gguf,
            "gguf",
        );
        return;
    }
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/scripts/compare_llama_quantize.sh"
    );
    let out = Command::new("bash")
        .arg(script)
        .arg("tiny")
        .env("CLOVER", env!("CARGO_BIN_EXE_clover"))
        .env("LLAMA_QUANTIZE", &quantize)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(text.matches("tensor types match").count(), 3, "{text}");
}

#[test]
fn llama_cpp_loads_tiny_qwen35moe_and_its_greedy_text_matches_a_numpy_forward() {
    let bin = std::env::var("LLAMA_BIN").unwrap_or_else(|_| "/work/llama/build/bin".to_string());
    let has_py = python_imports("gguf, numpy");
    let completion = Path::new(&bin).join("llama-completion");
    if !completion.exists() || !has_py {
        skip_without(
            "llama_cpp_loads_tiny_qwen35moe_and_its_greedy_text_matches_a_numpy_forward",
            &completion,
            "LLAMA_BIN",
            has_py,
            "gguf, numpy",
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.gguf");
    write(
        opts(Arch::Qwen35Moe, Preset::Tiny, Recipe::F32, 17),
        &path,
        None,
    );
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/scripts/compare_llama_greedy.py"
    );
    let out = Command::new("python3")
        .arg(script)
        .arg(&path)
        .args(["Hello world", "12"])
        .env("LLAMA_BIN", &bin)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("12 greedy tokens"), "{text}");
}

/// `--mtp` writes the multi-token-prediction block as llama.cpp's converter
/// wrote the real-files fixture's (tests/converter_common): the same tensor
/// names after the trunk, the `nextn.*` tensors of the same shapes in terms
/// of the embedding width and the same types for an f32 file, and the same
/// two metadata keys; the trunk is the file without `--mtp`, tensor for
/// tensor, so the loader, which skips the block, computes the same tokens.
#[test]
fn mtp_block_is_written_as_the_converter_writes_it() {
    use clover::gguf::{GgufFile, Value};
    let dir = tempfile::tempdir().unwrap();
    let (with, without) = (dir.path().join("mtp.gguf"), dir.path().join("plain.gguf"));
    for (path, extra) in [(&with, &["--mtp"][..]), (&without, &[][..])] {
        output_ok(
            clover()
                .args(["synth", "--arch", "qwen35moe", "--preset", "tiny", "-o"])
                .arg(path)
                .args(extra),
        );
    }
    let conv_path = dir.path().join("real-f32.gguf");
    let gz = std::fs::read(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/converter/real-f32.gguf.gz"),
    )
    .unwrap();
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&gz[..]), &mut bytes).unwrap();
    std::fs::write(&conv_path, bytes).unwrap();
    let (ours, plain, conv) = (
        GgufFile::open(&with).unwrap(),
        GgufFile::open(&without).unwrap(),
        GgufFile::open(&conv_path).unwrap(),
    );
    let u = |f: &GgufFile, k: &str| f.get(&format!("qwen35moe.{k}")).and_then(Value::as_u64);
    let last = |f: &GgufFile| u(f, "block_count").unwrap() - 1;
    assert_eq!(
        u(&ours, "block_count"),
        u(&plain, "block_count").map(|n| n + 1)
    );
    assert_eq!(u(&ours, "nextn_predict_layers"), Some(1));
    assert_eq!(u(&conv, "nextn_predict_layers"), Some(1));
    // The block's tensors, named relative to it.
    let block = |f: &GgufFile| {
        let prefix = format!("blk.{}.", last(f));
        let mut v: Vec<(String, Vec<u64>, kernels::GgmlType)> = f
            .tensors()
            .iter()
            .filter_map(|t| {
                let rest = t.name.strip_prefix(&prefix)?;
                Some((rest.to_string(), t.dims.to_vec(), t.ty))
            })
            .collect();
        v.sort();
        v
    };
    let (b_ours, b_conv) = (block(&ours), block(&conv));
    let names = |b: &[(String, Vec<u64>, kernels::GgmlType)]| {
        b.iter().map(|(n, _, _)| n.clone()).collect::<Vec<_>>()
    };
    assert_eq!(names(&b_ours), names(&b_conv));
    let width = |f: &GgufFile| u(f, "embedding_length").unwrap();
    for ((name, d_ours, ty_ours), (_, d_conv, ty_conv)) in b_ours.iter().zip(&b_conv) {
        assert_eq!(ty_ours, ty_conv, "{name}");
        if name.starts_with("nextn.") {
            let rel = |d: &[u64], e: u64| d.iter().map(|x| x / e).collect::<Vec<_>>();
            assert_eq!(
                rel(d_ours, width(&ours)),
                rel(d_conv, width(&conv)),
                "{name}"
            );
        }
    }
    // The trunk: the plain file's tensors, byte for byte.
    for t in plain.tensors() {
        let (o, p) = (
            ours.tensor(&t.name).unwrap(),
            plain.tensor(&t.name).unwrap(),
        );
        assert_eq!((o.ty, o.dims), (p.ty, p.dims), "{}", t.name);
        assert!(o.data == p.data, "{}", t.name);
    }
    let run = |path: &std::path::Path| {
        let args = [
            "run",
            "-p",
            "In the beginning",
            "-n",
            "8",
            "--temp",
            "0",
            "-m",
        ];
        output_ok(clover().args(args).arg(path)).stdout
    };
    assert_eq!(run(&with), run(&without));
}
