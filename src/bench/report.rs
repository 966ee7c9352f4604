//! llama-bench's output, reproduced so the two tools can be read side by side:
//! the markdown table (`model | size | params | backend | threads | test | t/s`)
//! and the JSON records (`avg_ts`, `stddev_ts`, `samples_ts`, …).
//!
//! Statistics follow llama-bench: each sample is `tokens / seconds` of one
//! repetition; `t/s` is their mean ± the sample standard deviation (n − 1).

use serde::Serialize;

use crate::spec::SpecChoice;

/// What a model row of the table says about the file.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelInfo {
    /// `"{arch} {size label} {ftype}"`, as llama.cpp's `llama_model_desc`.
    pub desc: String,
    pub filename: String,
    /// Bytes of all tensor data (not the file: no header, no padding).
    pub size: u64,
    /// Elements of all tensors.
    pub n_params: u64,
}

/// One test: a prompt of `n_prompt` tokens or `n_gen` decode steps, after
/// `n_depth` tokens of context.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TestSpec {
    pub n_prompt: usize,
    pub n_gen: usize,
    pub n_depth: usize,
    pub n_threads: usize,
    pub n_batch: usize,
    pub n_ubatch: usize,
    /// How a tg test decodes (`Random`: llama-bench's random token ids).
    pub decode: Decode,
}

/// How a tg test picks its tokens.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Decode {
    /// Random token ids, one forward each (llama-bench's tg).
    #[default]
    Random,
    /// Plain greedy decoding of a text prompt (`--spec-type none`).
    Greedy,
    /// Self-speculative greedy decoding (`--spec-type draft-self`).
    DraftSelf,
    /// Speculation through other drafters (`--spec-type ngram`, chains).
    Spec(&'static SpecChoice),
    /// Speculation through a model-drafting choice (draft-self, mtp) with
    /// replayed acceptance (`--spec-replay`): the profile's, and a perfect
    /// drafter's (the ceiling).
    Replay(&'static SpecChoice),
    Ceiling(&'static SpecChoice),
}

impl TestSpec {
    /// `pp512`, `tg128`, `pp512+tg128`, with ` @ d512` when there is depth.
    pub fn name(&self) -> String {
        let mut s = match (self.n_prompt, self.n_gen) {
            (p, 0) => format!("pp{p}"),
            (0, n) => format!("tg{n}"),
            (p, n) => format!("pp{p}+tg{n}"),
        };
        if self.n_depth > 0 {
            s.push_str(&format!(" @ d{}", self.n_depth));
        }
        match self.decode {
            Decode::Random => {}
            Decode::Greedy => s.push_str(" greedy"),
            Decode::DraftSelf => s.push_str(" draft-self"),
            Decode::Spec(c) => s.push_str(&format!(" {c}")),
            Decode::Replay(c) => s.push_str(&format!(" {c} (simulated acceptance)")),
            // draft-self's ceiling keeps its first name.
            Decode::Ceiling(c) if c.needs_diffusion() => {
                s.push_str(" perfect drafter (simulated acceptance)")
            }
            Decode::Ceiling(c) => {
                s.push_str(&format!(" perfect {c} drafter (simulated acceptance)"))
            }
        }
        s
    }

    /// Tokens a sample's time is divided into.
    pub fn n_tokens(&self) -> usize {
        self.n_prompt + self.n_gen
    }
}

/// The measured repetitions of one test.
#[derive(Clone, Debug)]
pub struct TestResult {
    pub spec: TestSpec,
    pub samples_ns: Vec<u64>,
}

impl TestResult {
    /// Tokens per second of each repetition.
    pub fn samples_ts(&self) -> Vec<f64> {
        let n = self.spec.n_tokens() as f64;
        self.samples_ns
            .iter()
            .map(|&ns| 1e9 * n / ns.max(1) as f64)
            .collect()
    }

    pub fn avg_ts(&self) -> f64 {
        mean(&self.samples_ts())
    }

    pub fn stddev_ts(&self) -> f64 {
        stddev(&self.samples_ts())
    }
}

pub fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.iter().sum::<f64>() / v.len() as f64
}

/// Sample standard deviation (divides by n − 1); 0 for fewer than two values.
pub fn stddev(v: &[f64]) -> f64 {
    if v.len() < 2 {
        return 0.0;
    }
    let m = mean(v);
    let ss: f64 = v.iter().map(|x| (x - m) * (x - m)).sum();
    (ss / (v.len() - 1) as f64).sqrt()
}

/// `12.34 MiB` below 1 GiB, else `1.23 GiB`.
pub fn format_size(bytes: u64) -> String {
    let b = bytes as f64;
    if bytes < 1 << 30 {
        format!("{:.2} MiB", b / (1u64 << 20) as f64)
    } else {
        format!("{:.2} GiB", b / (1u64 << 30) as f64)
    }
}

/// `1.23 M` below a billion, else `1.23 B`.
pub fn format_params(n: u64) -> String {
    if n < 1_000_000_000 {
        format!("{:.2} M", n as f64 / 1e6)
    } else {
        format!("{:.2} B", n as f64 / 1e9)
    }
}

/// The llama-bench column widths: negative is left-aligned.
const COLUMNS: [(&str, i32); 7] = [
    ("model", -30),
    ("size", 10),
    ("params", 10),
    ("backend", -10),
    ("threads", 7),
    ("test", 15),
    ("t/s", 20),
];

fn cell(s: &str, width: i32) -> String {
    let w = width.unsigned_abs() as usize;
    if width < 0 {
        format!(" {s:<w$} |")
    } else {
        format!(" {s:>w$} |")
    }
}

/// The header and separator lines of the markdown table.
pub fn markdown_header() -> String {
    let mut head = String::from("|");
    let mut sep = String::from("|");
    for (name, width) in COLUMNS {
        head.push_str(&cell(name, width));
        let dashes = "-".repeat(width.unsigned_abs() as usize - 1);
        sep.push_str(&format!(" {dashes}{} |", if width > 0 { ":" } else { "-" }));
    }
    format!("{head}\n{sep}\n")
}

/// One table row.
pub fn markdown_row(model: &ModelInfo, r: &TestResult) -> String {
    let values = [
        model.desc.clone(),
        format_size(model.size),
        format_params(model.n_params),
        "CPU".to_string(),
        r.spec.n_threads.to_string(),
        r.spec.name(),
        format!("{:.2} ± {:.2}", r.avg_ts(), r.stddev_ts()),
    ];
    let mut row = String::from("|");
    for (v, (_, width)) in values.iter().zip(COLUMNS) {
        row.push_str(&cell(v, width));
    }
    row.push('\n');
    row
}

/// One JSON record, with llama-bench's field names.
#[derive(Debug, Serialize)]
pub struct JsonRecord {
    pub build_commit: String,
    pub cpu_info: String,
    pub backends: String,
    pub model_filename: String,
    pub model_type: String,
    pub model_size: u64,
    pub model_n_params: u64,
    pub n_batch: usize,
    pub n_ubatch: usize,
    pub n_threads: usize,
    pub type_k: String,
    pub type_v: String,
    pub n_prompt: usize,
    pub n_gen: usize,
    pub n_depth: usize,
    pub test_time: String,
    pub avg_ns: u64,
    pub stddev_ns: u64,
    pub avg_ts: f64,
    pub stddev_ts: f64,
    pub samples_ns: Vec<u64>,
    pub samples_ts: Vec<f64>,
}

/// Cache types and build facts shared by every record of a run.
#[derive(Clone, Debug)]
pub struct RunInfo {
    pub build: String,
    pub cpu_info: String,
    pub type_k: String,
    pub type_v: String,
    pub test_time: String,
}

pub fn json_record(model: &ModelInfo, run: &RunInfo, r: &TestResult) -> JsonRecord {
    let ns: Vec<f64> = r.samples_ns.iter().map(|&n| n as f64).collect();
    JsonRecord {
        build_commit: run.build.clone(),
        cpu_info: run.cpu_info.clone(),
        backends: "CPU".into(),
        model_filename: model.filename.clone(),
        model_type: model.desc.clone(),
        model_size: model.size,
        model_n_params: model.n_params,
        n_batch: r.spec.n_batch,
        n_ubatch: r.spec.n_ubatch,
        n_threads: r.spec.n_threads,
        type_k: run.type_k.clone(),
        type_v: run.type_v.clone(),
        n_prompt: r.spec.n_prompt,
        n_gen: r.spec.n_gen,
        n_depth: r.spec.n_depth,
        test_time: run.test_time.clone(),
        avg_ns: mean(&ns) as u64,
        stddev_ns: stddev(&ns) as u64,
        avg_ts: r.avg_ts(),
        stddev_ts: r.stddev_ts(),
        samples_ns: r.samples_ns.clone(),
        samples_ts: r.samples_ts(),
    }
}

/// llama.cpp's `llama_ftype_name` for the file types our recipes write.
pub fn ftype_name(ftype: u32) -> &'static str {
    match ftype {
        0 => "all F32",
        1 => "F16",
        2 => "Q4_0",
        3 => "Q4_1",
        7 => "Q8_0",
        8 => "Q5_0",
        9 => "Q5_1",
        10 => "Q2_K - Medium",
        11 => "Q3_K - Small",
        12 => "Q3_K - Medium",
        13 => "Q3_K - Large",
        14 => "Q4_K - Small",
        15 => "Q4_K - Medium",
        16 => "Q5_K - Small",
        17 => "Q5_K - Medium",
        18 => "Q6_K",
        25 => "IQ4_NL - 4.5 bpw",
        30 => "IQ4_XS - 4.25 bpw",
        32 => "BF16",
        _ => "unknown, may not work",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(p: usize, n: usize, d: usize) -> TestSpec {
        TestSpec {
            n_prompt: p,
            n_gen: n,
            n_depth: d,
            n_threads: 2,
            n_batch: 2048,
            n_ubatch: 512,
            decode: Decode::Random,
        }
    }

    #[test]
    fn test_names_follow_llama_bench() {
        assert_eq!(spec(512, 0, 0).name(), "pp512");
        assert_eq!(spec(0, 128, 0).name(), "tg128");
        assert_eq!(spec(512, 0, 4096).name(), "pp512 @ d4096");
        assert_eq!(spec(0, 128, 512).name(), "tg128 @ d512");
        assert_eq!(spec(16, 4, 0).name(), "pp16+tg4");
        let g = TestSpec {
            decode: Decode::DraftSelf,
            ..spec(0, 128, 0)
        };
        assert_eq!(g.name(), "tg128 draft-self");
    }

    #[test]
    fn samples_are_tokens_per_second_and_sd_divides_by_n_minus_one() {
        // 512 tokens in 1 s and in 0.5 s: 512 and 1024 t/s.
        let r = TestResult {
            spec: spec(512, 0, 0),
            samples_ns: vec![1_000_000_000, 500_000_000],
        };
        assert_eq!(r.samples_ts(), vec![512.0, 1024.0]);
        assert_eq!(r.avg_ts(), 768.0);
        // sqrt(((256² + 256²) / 1)) = 362.038...
        assert!((r.stddev_ts() - 362.038_672).abs() < 1e-5);
        assert_eq!(stddev(&[5.0]), 0.0);
    }

    #[test]
    fn sizes_and_params_switch_units_like_llama_bench() {
        assert_eq!(format_size(3 << 20), "3.00 MiB");
        assert_eq!(format_size(3 << 30), "3.00 GiB");
        assert_eq!(format_params(2_500_000), "2.50 M");
        assert_eq!(format_params(34_660_610_688), "34.66 B");
    }

    #[test]
    fn table_lines_have_llama_bench_widths() {
        let head = markdown_header();
        let lines: Vec<&str> = head.lines().collect();
        assert_eq!(
            lines[0],
            "| model                          |       size |     params | backend    | threads |            test |                  t/s |"
        );
        assert_eq!(
            lines[1],
            "| ------------------------------ | ---------: | ---------: | ---------- | ------: | --------------: | -------------------: |"
        );
        let m = ModelInfo {
            desc: "qwen35moe ?B Q4_K - Medium".into(),
            filename: "x.gguf".into(),
            size: 3 << 30,
            n_params: 5_000_000_000,
        };
        let r = TestResult {
            spec: spec(512, 0, 0),
            samples_ns: vec![1_000_000_000, 1_000_000_000],
        };
        assert_eq!(
            markdown_row(&m, &r),
            "| qwen35moe ?B Q4_K - Medium     |   3.00 GiB |     5.00 B | CPU        |       2 |           pp512 |        512.00 ± 0.00 |\n"
        );
    }
}
