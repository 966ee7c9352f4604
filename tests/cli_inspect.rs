//! `clover inspect` end to end: bad input is one line on stderr and a
//! non-zero exit, never a panic; a valid file gives correct counts.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use clover::gguf::{GgufWriter, Value};
use kernels::GgmlType;

fn clover(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_clover"))
        .args(args)
        .output()
        .expect("run clover")
}

fn inspect(path: &Path, extra: &[&str]) -> Output {
    let mut args = vec!["inspect", path.to_str().unwrap()];
    args.extend_from_slice(extra);
    clover(&args)
}

/// Non-zero exit, exactly one line on stderr, no panic; returns that line.
fn assert_one_line_failure(out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!out.status.success(), "succeeded; stderr: {stderr}");
    assert!(!stderr.contains("panicked"), "panicked: {stderr}");
    assert!(stderr.ends_with('\n'), "{stderr:?}");
    assert_eq!(stderr.lines().count(), 1, "stderr: {stderr:?}");
    stderr.trim_end().to_string()
}

fn temp_file(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

/// A clover_moe file: 41 blocks (the last an MTP block, as
/// `nextn_predict_layers` says), interval 4, 8
/// experts of which 2 are used, embedding 8, vocab 5, context 4096.
fn valid_model(path: &Path) {
    let mut w = GgufWriter::new();
    w.set("general.architecture", Value::str("clover_moe"));
    w.set("general.name", Value::str("Clover-Tiny"));
    w.set("clover_moe.block_count", Value::U32(41));
    w.set("clover_moe.nextn_predict_layers", Value::U32(1));
    w.set("clover_moe.full_attention_interval", Value::U32(4));
    w.set("clover_moe.expert_count", Value::U32(8));
    w.set("clover_moe.expert_used_count", Value::U32(2));
    w.set("clover_moe.embedding_length", Value::U32(8));
    w.set("clover_moe.context_length", Value::U32(4096));
    w.set(
        "tokenizer.ggml.tokens",
        Value::strings(["a", "b", "c", "d", "<|mask|>"]),
    );
    w.set("tokenizer.chat_template", Value::str("x".repeat(1000)));
    // 40 + 256*3 + 1024 + 8 = 1840 parameters.
    w.add_tensor("token_embd.weight", GgmlType::F32, &[8, 5]);
    w.add_tensor("blk.0.ffn_up_exps.weight", GgmlType::Q4_K, &[256, 1, 3]);
    w.add_tensor("blk.0.attn_q.weight", GgmlType::Q8_0, &[32, 32]);
    w.add_tensor("output_norm.weight", GgmlType::F16, &[8]);
    let f16: Vec<u8> = (0..8)
        .flat_map(|i| half::f16::from_f32(i as f32 * 0.5 - 1.0).to_le_bytes())
        .collect();
    w.write_to_path(path, |i, plan, out| match i {
        0 => {
            for j in 0..40 {
                out.write_all(&(j as f32 * 0.25).to_le_bytes())?;
            }
            Ok(())
        }
        3 => out.write_all(&f16),
        _ => out.write_all(&vec![0u8; plan.n_bytes()? as usize]),
    })
    .unwrap();
}

#[test]
fn missing_file_is_one_line_error() {
    let line = assert_one_line_failure(&inspect(Path::new("/nonexistent/m.gguf"), &[]));
    assert!(line.contains("/nonexistent/m.gguf"), "{line}");
}

#[test]
fn empty_file_is_one_line_error() {
    let dir = tempfile::tempdir().unwrap();
    let p = temp_file(dir.path(), "empty.gguf", &[]);
    let line = assert_one_line_failure(&inspect(&p, &[]));
    assert!(line.contains("truncated"), "{line}");
}

#[test]
fn truncated_file_is_one_line_error() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.gguf");
    valid_model(&good);
    let bytes = std::fs::read(&good).unwrap();
    for cut in [10, bytes.len() / 2, bytes.len() - 1] {
        let p = temp_file(dir.path(), "cut.gguf", &bytes[..cut]);
        let line = assert_one_line_failure(&inspect(&p, &[]));
        assert!(line.contains("cut.gguf"), "{line}");
    }
}

#[test]
fn random_bytes_are_one_line_error() {
    let dir = tempfile::tempdir().unwrap();
    let mut x = 0x1234_5678_9abc_def0u64;
    let bytes: Vec<u8> = (0..4096)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let p = temp_file(dir.path(), "random.gguf", &bytes);
    let line = assert_one_line_failure(&inspect(&p, &[]));
    assert!(line.contains("not a GGUF file"), "{line}");
    // Random bytes behind a valid magic and version.
    let mut b = b"GGUF\x03\0\0\0".to_vec();
    b.extend_from_slice(&bytes);
    let p = temp_file(dir.path(), "random2.gguf", &b);
    assert_one_line_failure(&inspect(&p, &[]));
}

#[test]
fn header_claiming_2_pow_63_tensors_is_one_line_error() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = b"GGUF".to_vec();
    b.extend_from_slice(&3u32.to_le_bytes());
    b.extend_from_slice(&(1u64 << 63).to_le_bytes());
    b.extend_from_slice(&0u64.to_le_bytes());
    let p = temp_file(dir.path(), "huge.gguf", &b);
    let line = assert_one_line_failure(&inspect(&p, &[]));
    assert!(line.contains("9223372036854775808 tensors"), "{line}");
}

#[test]
fn unsupported_tensor_type_is_one_line_error_naming_tensor_and_type() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = b"GGUF".to_vec();
    b.extend_from_slice(&3u32.to_le_bytes());
    b.extend_from_slice(&1u64.to_le_bytes());
    b.extend_from_slice(&0u64.to_le_bytes());
    let name = b"blk.0.ffn_down_exps.weight";
    b.extend_from_slice(&(name.len() as u64).to_le_bytes());
    b.extend_from_slice(name);
    b.extend_from_slice(&1u32.to_le_bytes());
    b.extend_from_slice(&256u64.to_le_bytes());
    b.extend_from_slice(&18u32.to_le_bytes()); // IQ3_XXS
    b.extend_from_slice(&0u64.to_le_bytes());
    b.resize(b.len().next_multiple_of(32) + 256, 0);
    let p = temp_file(dir.path(), "iq3.gguf", &b);
    let line = assert_one_line_failure(&inspect(&p, &[]));
    assert!(
        line.contains("blk.0.ffn_down_exps.weight") && line.contains("IQ3_XXS"),
        "{line}"
    );
}

#[test]
fn wrong_flag_is_one_line_error() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.gguf");
    valid_model(&good);
    let line = assert_one_line_failure(&inspect(&good, &["--bogus"]));
    assert!(line.contains("--bogus"), "{line}");
    assert_one_line_failure(&inspect(&good, &["--tsv", "--json"]));
    assert_one_line_failure(&inspect(&good, &["--dequant", "x"]));
    assert_one_line_failure(&clover(&["inspect"]));
    assert_one_line_failure(&clover(&["frobnicate"]));
}

#[test]
fn metadata_of_the_wrong_type_is_one_line_error_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("bad.gguf");
    let mut w = GgufWriter::new();
    w.set("general.architecture", Value::str("qwen35moe"));
    w.set("qwen35moe.block_count", Value::str("forty"));
    w.write_to_path(&p, |_, _, _| Ok(())).unwrap();
    let line = assert_one_line_failure(&inspect(&p, &[]));
    assert!(line.contains("qwen35moe.block_count"), "{line}");
}

#[test]
fn valid_file_gives_summary_with_correct_counts() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("m.gguf");
    valid_model(&p);
    let size = std::fs::metadata(&p).unwrap().len();
    let out = inspect(&p, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stderr.is_empty());
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let expect = [
        "architecture: clover_moe",
        "name: Clover-Tiny",
        "layers: 40 (30 gated deltanet, 10 full attention, every 4th)",
        "mtp: blk.40 is an MTP block, skipped",
        "experts: 8 (2 used)",
        "embedding length: 8",
        "vocab: 5",
        "context length: 4096",
    ];
    assert_eq!(&lines[..expect.len()], &expect, "{text}");
    assert!(lines.contains(&format!("file size: {size} bytes (0.00 GiB)").as_str()));
    assert_eq!(lines[lines.len() - 2], "tensors: 4");
    assert_eq!(lines[lines.len() - 1], "parameters: 1840");
}

#[test]
fn tsv_lists_every_tensor_with_shape_and_params() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("m.gguf");
    valid_model(&p);
    let out = inspect(&p, &["--tsv"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        text,
        "name\ttype\tshape\tparams\n\
         token_embd.weight\tF32\t8x5\t40\n\
         blk.0.ffn_up_exps.weight\tQ4_K\t256x1x3\t768\n\
         blk.0.attn_q.weight\tQ8_0\t32x32\t1024\n\
         output_norm.weight\tF16\t8\t8\n"
    );
}

#[test]
fn json_quant_report_counts_bytes_and_bits_per_weight() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("m.gguf");
    valid_model(&p);
    let out = inspect(&p, &["--json"]);
    assert!(out.status.success());
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // Q4_K: 3 blocks of 144 bytes for 768 weights = 4.5 bits.
    assert_eq!(j["types"]["Q4_K"]["tensors"], 1);
    assert_eq!(j["types"]["Q4_K"]["parameters"], 768);
    assert_eq!(j["types"]["Q4_K"]["bytes"], 432);
    assert_eq!(j["types"]["Q4_K"]["bits_per_weight"], 4.5);
    // Q8_0: 32 blocks of 34 bytes for 1024 weights = 8.5 bits.
    assert_eq!(j["types"]["Q8_0"]["bytes"], 1088);
    assert_eq!(j["types"]["Q8_0"]["bits_per_weight"], 8.5);
    assert_eq!(j["types"]["F32"]["bytes"], 160);
    assert_eq!(j["types"]["F16"]["bytes"], 16);
    assert_eq!(j["tensors"], 4);
    assert_eq!(j["parameters"], 1840);
    assert_eq!(j["bytes"], 160 + 432 + 1088 + 16);
    let bpw = j["bits_per_weight"].as_f64().unwrap();
    assert!((bpw - 1696.0 * 8.0 / 1840.0).abs() < 1e-12, "{bpw}");
    assert_eq!(j["architecture"], "clover_moe");
}

#[test]
fn meta_prints_every_key_with_long_values_abbreviated() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("m.gguf");
    valid_model(&p);
    let out = inspect(&p, &["--meta"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    // Eleven keys, `nextn_predict_layers` among them.
    assert_eq!(text.lines().count(), 11, "{text}");
    assert!(
        text.contains("clover_moe.block_count: u32 = 41\n"),
        "{text}"
    );
    assert!(text.contains("general.architecture: string = \"clover_moe\"\n"));
    assert!(text.contains("tokenizer.ggml.tokens: array = [5 x string: \"a\", \"b\""));
    assert!(text.contains("... (1000 bytes)\n"), "{text}");
}

#[test]
fn dequant_writes_f32_and_f16_tensors_as_little_endian_f32() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("m.gguf");
    valid_model(&p);
    let o = dir.path().join("embd.f32");
    let out = inspect(
        &p,
        &["--dequant", "token_embd.weight", "-o", o.to_str().unwrap()],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bytes = std::fs::read(&o).unwrap();
    let vals: Vec<f32> = bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(vals, (0..40).map(|j| j as f32 * 0.25).collect::<Vec<_>>());

    let o = dir.path().join("norm.f32");
    let out = inspect(
        &p,
        &["--dequant", "output_norm.weight", "-o", o.to_str().unwrap()],
    );
    assert!(out.status.success());
    let bytes = std::fs::read(&o).unwrap();
    let vals: Vec<f32> = bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    // Multiples of 0.5 in [-1, 2.5] are exact in f16.
    assert_eq!(
        vals,
        (0..8).map(|i| i as f32 * 0.5 - 1.0).collect::<Vec<_>>()
    );

    let line = assert_one_line_failure(&inspect(
        &p,
        &["--dequant", "nope", "-o", o.to_str().unwrap()],
    ));
    assert!(line.contains("no tensor named \"nope\""), "{line}");
}
