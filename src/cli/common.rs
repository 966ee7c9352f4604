//! Flags shared by `clover run` and `clover chat`: context / threads / batches /
//! KV cache types, and the sampler. Spellings follow llama.cpp; its two-letter
//! short flags (`-ub`, `-ctk`, `-ctv`) are rewritten to long ones before parsing
//! ([`rewrite_llama_flags`]), since clap's short flags are single characters.

use std::ffi::OsString;

use clap::Args;
use kernels::GgmlType;

use std::sync::Arc;

use anyhow::Context as _;

use crate::engine::{default_model, parse_cache_type, LoadedModel, Session, SessionOptions};
use crate::sample::SamplerParams;
use crate::spec::{SpecChoice, SpecConfig};

/// llama.cpp's multi-letter short flags and the long flags they mean.
const LLAMA_SHORT: [(&str, &str); 6] = [
    ("-ub", "--ubatch-size"),
    ("-np", "--parallel"),
    ("-ctk", "--cache-type-k"),
    ("-ctv", "--cache-type-v"),
    ("-tb", "--threads-batch"),
    ("-fa", "--flash-attn"),
];

/// Flags whose value `-1` means llama.cpp's default.
const DEFAULT_AT_MINUS_ONE: [&str; 5] = ["-t", "--threads", "-tb", "--threads-batch", "--seed"];

/// llama.cpp's `-1` for "the default" (`-t -1`: the machine's threads;
/// `--seed -1`: a random seed): the flag and its value are dropped, so
/// clover's default applies. Everything after a bare `--` is left alone.
fn drop_default_minus_one(args: impl IntoIterator<Item = OsString>) -> Vec<OsString> {
    let mut out: Vec<OsString> = Vec::new();
    let mut rest = false;
    for a in args {
        let s = a.to_str().unwrap_or("");
        if !rest {
            if s == "--" {
                rest = true;
            } else if s == "-1"
                && out
                    .last()
                    .and_then(|f| f.to_str())
                    .is_some_and(|f| DEFAULT_AT_MINUS_ONE.contains(&f))
            {
                out.pop();
                continue;
            } else if s
                .strip_suffix("=-1")
                .is_some_and(|f| DEFAULT_AT_MINUS_ONE.contains(&f))
            {
                continue;
            }
        }
        out.push(a);
    }
    out
}

/// Rewrites `-ub N`, `-np N`, `-ctk T`, `-ctv T`, `-tb N`, `-fa V` (and `-ctk=T`) to
/// their long forms; everything after a bare `--` is left alone.
pub fn rewrite_llama_flags(args: impl IntoIterator<Item = OsString>) -> Vec<OsString> {
    rewrite_llama_flags_noting(args).0
}

/// [`rewrite_llama_flags`], also returning the `(short, long)` pairs it
/// rewrote, so that an error about `--threads-batch` can say `-tb`, the name
/// the user typed ([`user_spelling`]).
pub fn rewrite_llama_flags_noting(
    args: impl IntoIterator<Item = OsString>,
) -> (Vec<OsString>, Vec<(&'static str, &'static str)>) {
    let mut used = Vec::new();
    let mut out = Vec::new();
    let mut rest = false;
    for a in drop_default_minus_one(args) {
        if rest {
            out.push(a);
            continue;
        }
        let Some(s) = a.to_str() else {
            out.push(a);
            continue;
        };
        if s == "--" {
            rest = true;
            out.push(a);
            continue;
        }
        let (flag, value) = match s.split_once('=') {
            Some((f, v)) => (f, Some(v)),
            None => (s, None),
        };
        match LLAMA_SHORT.iter().find(|(short, _)| *short == flag) {
            Some(&(short, long)) => {
                if !used.contains(&(short, long)) {
                    used.push((short, long));
                }
                out.push(OsString::from(match value {
                    Some(v) => format!("{long}={v}"),
                    None => long.to_string(),
                }))
            }
            None => out.push(a),
        }
    }
    (out, used)
}

/// A message about rewritten flags in the spelling the user typed.
pub fn user_spelling(msg: &str, used: &[(&str, &str)]) -> String {
    let mut s = msg.to_string();
    for (short, long) in used {
        s = s.replace(long, short);
    }
    s
}

/// `-fa`: llama.cpp's flash-attention switch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum FlashAttn {
    On,
    Off,
    Auto,
}

/// The most bytes a prompt file (`-f`) may hold.
pub const MAX_PROMPT_FILE: u64 = 64 << 20;

/// Reads a text file of at most `max` bytes: a larger file (or an endless one
/// such as /dev/zero) is an error, never a read until memory runs out.
pub fn read_text_file(path: &std::path::Path, max: u64, what: &str) -> anyhow::Result<String> {
    use anyhow::Context;
    use std::io::Read;
    let (file, guard) = crate::output::open_text_input(path)
        .with_context(|| format!("reading the {what} {}", path.display()))?;
    // A command's text stays its input to the end: no output replaces it.
    guard.keep();
    let mut bytes = Vec::new();
    file.take(max + 1)
        .read_to_end(&mut bytes)
        .with_context(|| format!("reading the {what} {}", path.display()))?;
    if bytes.len() as u64 > max {
        anyhow::bail!(
            "the {what} {} is larger than {} MiB",
            path.display(),
            max >> 20
        );
    }
    String::from_utf8(bytes)
        .map_err(|e| anyhow::anyhow!("the {what} {} is not UTF-8 text ({e})", path.display()))
}

fn cache_type(s: &str) -> Result<GgmlType, String> {
    parse_cache_type(s)
}

/// Context, threads, batches, KV cache.
#[derive(Args, Debug, Clone)]
pub struct ContextArgs {
    /// Context size in tokens [default: 4096]
    #[arg(short = 'c', long = "ctx-size", allow_negative_numbers = true)]
    pub ctx_size: Option<usize>,
    /// Threads for generation (default: all cores)
    #[arg(short = 't', long = "threads")]
    pub threads: Option<usize>,
    /// Threads for prompt processing (-tb; default: as -t)
    #[arg(long = "threads-batch", value_name = "N")]
    pub threads_batch: Option<usize>,
    /// Flash attention (-fa): off and auto are accepted; clover's attention is
    /// llama.cpp's -fa off path, and on is refused
    #[arg(long = "flash-attn", value_enum, value_name = "on|off|auto")]
    pub flash_attn: Option<FlashAttn>,
    /// Read the model into memory instead of mapping it (use when the file may
    /// change or shrink while clover runs)
    #[arg(long = "no-mmap")]
    pub no_mmap: bool,
    /// Before mapping the model, drop its pages from the page cache so that
    /// they are read back in large pages (for a file written recently; see
    /// the load note)
    #[arg(long)]
    pub recache: bool,
    /// Where the layout cache goes: the kernels' copies of the matrices,
    /// written once (about their size; `clover repack` makes it ahead of
    /// time) and mapped by every later start [default:
    /// ~/.cache/clover/layout, for copies of 1 GiB or more; off: none]
    #[arg(long = "layout-cache", value_name = "DIR|off")]
    pub layout_cache: Option<String>,
    /// Lock the model in memory (mlock, as llama.cpp's --mlock): its pages
    /// are never evicted and read back from the disk mid-reply (memory
    /// pressure; VMs that page out what was idle for a minute). Needs a
    /// locked-memory limit (ulimit -l) as large as the file; short of one,
    /// a warning and the model stays unlocked
    #[arg(long)]
    pub mlock: bool,
    /// Logical batch: most prompt tokens per forward call
    #[arg(short = 'b', long = "batch-size", default_value_t = 2048)]
    pub batch_size: usize,
    /// Physical batch (-ub): most tokens one forward pass computes at once
    #[arg(long = "ubatch-size", default_value_t = 512)]
    pub ubatch_size: usize,
    /// KV cache type for K (-ctk): f32, f16, bf16, q8_0
    #[arg(long = "cache-type-k", default_value = "f16", value_parser = cache_type)]
    pub cache_type_k: GgmlType,
    /// KV cache type for V (-ctv): f32, f16, bf16, q8_0
    #[arg(long = "cache-type-v", default_value = "f16", value_parser = cache_type)]
    pub cache_type_v: GgmlType,
}

/// The context size without `-c`, as llama.cpp's tools default to.
pub const DEFAULT_CTX: usize = 4096;

impl ContextArgs {
    /// Hands `--recache` and `--mlock` to the loader ([`crate::gguf::pages`]).
    pub fn apply_page_options(&self) {
        crate::gguf::pages::set_recache(self.recache);
        crate::gguf::pages::set_mlock(self.mlock);
        if let Some(s) = &self.layout_cache {
            crate::engine::packed_cache::set(crate::engine::packed_cache::parse_setting(s));
        }
    }

    /// `-c`, or [`DEFAULT_CTX`].
    pub fn ctx(&self) -> usize {
        self.ctx_size.unwrap_or(DEFAULT_CTX)
    }

    /// A session on `model` with these options, after printing what is
    /// allowed but probably a mistake: a `-c` the user gave past the trained
    /// context, more threads than cores.
    pub fn new_session(&self, model: Arc<LoadedModel>) -> anyhow::Result<Session> {
        let opts = self.session_options()?;
        let warnings = opts.warnings(&model, self.ctx_size.is_some());
        let session = Session::new(model, opts)?;
        for w in warnings {
            eprintln!("warning: {w}");
        }
        Ok(session)
    }

    /// The session options, checked (zero sizes and thread counts are errors).
    pub fn session_options(&self) -> anyhow::Result<SessionOptions> {
        if self.flash_attn == Some(FlashAttn::On) {
            anyhow::bail!(
                "-fa on: clover has no flash-attention path (its attention is llama.cpp's \
                 -fa off); use -fa off or -fa auto"
            );
        }
        let opts = SessionOptions {
            n_ctx: self.ctx(),
            n_batch: self.batch_size,
            n_ubatch: self.ubatch_size,
            type_k: self.cache_type_k,
            type_v: self.cache_type_v,
            threads: self.threads,
            threads_batch: self.threads_batch,
        };
        opts.validate()?;
        Ok(opts)
    }
}

/// The default model, written on first use (and rewritten once if the cached file
/// does not load).
pub fn load_default(
    mmap: bool,
) -> anyhow::Result<(LoadedModel, Option<default_model::DefaultModel>)> {
    let announce = |d: &default_model::DefaultModel| {
        if d.created {
            eprintln!(
                "clover: wrote the default model in {:.1} s: {}",
                d.write_s,
                d.path.display()
            );
        }
    };
    let d = default_model::ensure(false).context("default model")?;
    announce(&d);
    let (m, d) = match LoadedModel::open_with(&d.path, mmap) {
        Ok(m) => (m, d),
        Err(_) if !d.created => {
            let d = default_model::ensure(true).context("default model")?;
            announce(&d);
            let m = LoadedModel::open_with(&d.path, mmap)
                .with_context(|| format!("loading the default model {}", d.path.display()))?;
            (m, d)
        }
        Err(e) => {
            return Err(anyhow::Error::new(e)
                .context(format!("loading the default model {}", d.path.display())))
        }
    };
    lock_if_asked(m.file, &d.path);
    Ok((m, Some(d)))
}

/// Opens `path` (or the built-in default model), mapped or with `--no-mmap`
/// read into memory.
pub fn open_model(path: Option<&std::path::Path>, no_mmap: bool) -> anyhow::Result<LoadedModel> {
    match path {
        Some(path) => load_model_file(path, !no_mmap),
        None => Ok(load_default(!no_mmap)?.0),
    }
}

/// Files at least this large show their loading progress (on a terminal).
const PROGRESS_MIN_BYTES: u64 = 1 << 30;

/// Loads a model file; while a large one loads, a progress line on stderr
/// when stderr is a terminal, one phase after the other ("loading F:
/// reading 42% (6.6 of 15.8 GiB, 1.9 GiB/s)", then the layout cache or the
/// repacking), erased when done. Notes from loading follow on stderr.
pub fn load_model_file(path: &std::path::Path, mmap: bool) -> anyhow::Result<LoadedModel> {
    use crate::engine::load::LoadPhase;
    use std::io::{IsTerminal, Write};
    let show = std::io::stderr().is_terminal()
        && std::fs::metadata(path).is_ok_and(|m| m.len() >= PROGRESS_MIN_BYTES);
    let mut phase: Option<(LoadPhase, std::time::Instant)> = None;
    let mut shown = false;
    let mut progress = |p: LoadPhase, done: u64, total: u64| {
        if !show {
            return;
        }
        let t0 = match phase {
            Some((q, t)) if q == p => t,
            _ => {
                let t = std::time::Instant::now();
                phase = Some((p, t));
                t
            }
        };
        let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
        let rate = gib(done) / t0.elapsed().as_secs_f64().max(1e-3);
        eprint!(
            "\rloading {}: {} {:3.0}% ({:.1} of {:.1} GiB, {rate:.1} GiB/s)\x1b[K",
            path.display(),
            p.label(),
            100.0 * done as f64 / total.max(1) as f64,
            gib(done),
            gib(total)
        );
        let _ = std::io::stderr().flush();
        shown = true;
    };
    let loaded = LoadedModel::open_with_progress(path, mmap, &mut progress);
    if shown {
        eprint!("\r\x1b[K");
    }
    let loaded = loaded.with_context(|| format!("loading {}", path.display()))?;
    for note in &loaded.load_notes {
        eprintln!("{note}");
    }
    report_pages(loaded.file, path);
    lock_if_asked(loaded.file, path);
    Ok(loaded)
}

/// With `--mlock` ([`crate::gguf::pages::set_mlock`]): locks the loaded file
/// in memory and says so on stderr, or warns that it could not (the run goes
/// on unlocked, as llama.cpp's does).
pub fn lock_if_asked(file: &crate::gguf::GgufFile, path: &std::path::Path) {
    if !crate::gguf::pages::mlock() {
        return;
    }
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    let size = gib(file.file_size());
    match file.lock_in_memory() {
        Ok(b) => eprintln!(
            "mlock: {:.2} GiB of {} locked in memory",
            gib(b),
            path.display()
        ),
        Err(e) => eprintln!(
            "warning: --mlock: could not lock the {size:.2} GiB of {} in memory ({e}); \
             raise the locked-memory limit (ulimit -l) to lock it; going on unlocked",
            path.display()
        ),
    }
}

/// After a mapped load, on stderr: with `--recache`, how much of the file is
/// now mapped in 2 MiB pages; else, for a large file mostly in 4 KiB pages,
/// the note that says so ([`crate::gguf::pages`]).
pub fn report_pages(file: &crate::gguf::GgufFile, path: &std::path::Path) {
    let Some(p) = file.mapping_pages() else {
        return;
    };
    if crate::gguf::pages::recache() {
        let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
        eprintln!(
            "recache: {:.1} of {:.1} GiB of {} mapped in 2 MiB pages",
            gib(p.huge),
            gib(p.resident),
            path.display()
        );
    } else if let Some(note) = p.note(path) {
        eprintln!("{note}");
    }
}

/// `--spec-type` where one decoding mode is taken: its stages (several
/// flags chain, as ik_llama.cpp's do); `none` when none is given.
pub fn spec_choice(values: &[SpecChoice]) -> SpecChoice {
    SpecChoice {
        stages: values.iter().flat_map(|c| c.stages.clone()).collect(),
    }
}

/// Parses one `--spec-type` value of `run`, `chat` and `serve`.
pub fn parse_spec(s: &str) -> Result<SpecChoice, String> {
    SpecChoice::parse_one(&[s])
}

/// Checks that `choice` can draft on `model`: a draft-self stage needs the
/// block-diffusion path, an mtp stage a whole MTP block (whose cache the
/// model's states then keep: `Model::mtp`).
pub fn check_spec(choice: &SpecChoice, model: &mut crate::model::Model) -> anyhow::Result<()> {
    if choice.needs_diffusion() && !model.has_diffusion() {
        anyhow::bail!(
            "--spec-type {choice} needs a clover_moe file with the block-diffusion tensors \
             (draft-self drafts through them; ngram drafts on any file)"
        );
    }
    if choice.needs_mtp() {
        if let Some(e) = &model.weights.mtp_unusable {
            anyhow::bail!("--spec-type {choice}: the file's MTP block cannot run: {e}");
        }
        if !model.has_mtp() {
            anyhow::bail!(
                "--spec-type {choice} needs a file with a multi-token-prediction block \
                 (nextn_predict_layers; converted with it kept); ngram drafts on any file"
            );
        }
        model.mtp = true;
    }
    Ok(())
}

/// The help of `--spec-type` where one mode is taken.
pub const SPEC_TYPE_HELP: &str = "none: plain decoding; draft-self: block-diffusion drafts \
    (clover_moe files); mtp: drafts from the model's multi-token-prediction block (files that \
    carry one); ngram: drafts from the text's own n-grams (any file; ngram-mod is the \
    same). ik_llama.cpp's parameters follow a colon (ngram:n_max=32,n_min=2,ngram_size_n=6); \
    stages chain with '+' or by repeating the flag, the first that drafts wins";

/// How self-speculation drafts and accepts (docs/DESIGN.md §4.1–4.2): the flags
/// `run`, `chat` and `bench` share, checked before any model is loaded.
#[derive(Args, Debug, Clone)]
pub struct SpecArgs {
    /// Most drafts per iteration
    #[arg(long = "spec-draft-n-max", default_value_t = 15)]
    pub n_max: usize,
    /// Fewest drafts worth verifying (fewer: decode plainly)
    #[arg(long = "spec-draft-n-min", default_value_t = 0)]
    pub n_min: usize,
    /// Cut the draft at the first position whose draft probability is below this
    #[arg(long = "spec-draft-p-min", default_value_t = 0.0)]
    pub p_min: f32,
    /// Greedy only: also accept drafts with p ≥ ratio·max p (lossy; 1 = exact)
    #[arg(long = "spec-accept-ratio", default_value_t = 1.0)]
    pub accept_ratio: f32,
    /// Greedy only: ...and when the target's entropy is at least this (nats)
    #[arg(long = "spec-accept-delta", default_value_t = 0.0)]
    pub accept_delta: f32,
    /// Always draft n-max instead of choosing D from measured acceptance and cost
    #[arg(long = "spec-fixed")]
    pub fixed: bool,
    /// Draft passes: the masked positions choose their experts among the
    /// anchor's N most probable, so a draft streams N experts per layer rather
    /// than up to k per position (default: k, the model's experts per token;
    /// 0: every position routes freely). Verification is unaffected.
    #[arg(long = "spec-draft-experts", value_name = "N")]
    pub draft_experts: Option<usize>,
}

impl SpecArgs {
    /// Sets the model's draft expert pool (`Model::draft_pool`) from
    /// `--spec-draft-experts`: k by default, 0 or ≥ the expert count for
    /// none; between 1 and k − 1 is an error.
    pub fn apply_draft_pool(&self, model: &mut crate::model::Model) -> anyhow::Result<()> {
        let (k, n) = (model.config.n_expert_used, model.config.n_expert);
        model.draft_pool = match self.draft_experts {
            None => k,
            Some(0) => 0,
            Some(p) if p < k => anyhow::bail!(
                "--spec-draft-experts must be 0 (off) or at least the model's {k} experts per token"
            ),
            Some(p) if p >= n => 0,
            Some(p) => p,
        };
        Ok(())
    }

    /// The loop's configuration for `n_predict` tokens, checked.
    pub fn config(&self, n_predict: Option<usize>) -> anyhow::Result<SpecConfig> {
        if self.n_max == 0 || self.n_min > self.n_max {
            anyhow::bail!(
                "--spec-draft-n-min must be at most --spec-draft-n-max, which must be at least 1"
            );
        }
        if !(self.accept_ratio > 0.0 && self.accept_ratio <= 1.0) {
            anyhow::bail!("--spec-accept-ratio must be in (0, 1]");
        }
        if !(self.p_min.is_finite() && (0.0..=1.0).contains(&self.p_min)) {
            anyhow::bail!("--spec-draft-p-min must be between 0 and 1");
        }
        if !(self.accept_delta.is_finite() && self.accept_delta >= 0.0) {
            anyhow::bail!("--spec-accept-delta must be a finite number of nats, at least 0");
        }
        Ok(SpecConfig {
            enabled: true,
            n_max: self.n_max,
            n_min: self.n_min,
            p_min: self.p_min,
            adaptive: !self.fixed,
            accept_ratio: self.accept_ratio,
            accept_delta: self.accept_delta,
            n_predict: n_predict.unwrap_or(usize::MAX),
            stop: Vec::new(),
        })
    }
}

/// The sampler chain (llama.cpp's defaults).
#[derive(Args, Debug, Clone)]
pub struct SamplingArgs {
    /// Temperature (0: greedy)
    #[arg(long, default_value_t = 0.8)]
    pub temp: f32,
    /// Keep the k most likely tokens (≤ 0: off)
    #[arg(long = "top-k", default_value_t = 40, allow_negative_numbers = true)]
    pub top_k: i32,
    /// Nucleus sampling mass (1: off)
    #[arg(long = "top-p", default_value_t = 0.95)]
    pub top_p: f32,
    /// Minimum probability relative to the most likely token (0: off)
    #[arg(long = "min-p", default_value_t = 0.05)]
    pub min_p: f32,
    /// Repetition penalty (1: off)
    #[arg(long = "repeat-penalty", default_value_t = 1.0)]
    pub repeat_penalty: f32,
    /// Tokens the repetition penalty looks back (0: off, -1: all)
    #[arg(
        long = "repeat-last-n",
        default_value_t = 64,
        allow_negative_numbers = true
    )]
    pub repeat_last_n: i32,
    /// Random seed (default: from the clock)
    #[arg(long)]
    pub seed: Option<u64>,
}

impl SamplingArgs {
    /// The sampler parameters, checked.
    pub fn params(&self) -> anyhow::Result<SamplerParams> {
        let finite = |name: &str, v: f32| {
            if v.is_finite() {
                Ok(())
            } else {
                Err(anyhow::anyhow!("--{name} must be a finite number, got {v}"))
            }
        };
        finite("temp", self.temp)?;
        finite("top-p", self.top_p)?;
        finite("min-p", self.min_p)?;
        finite("repeat-penalty", self.repeat_penalty)?;
        if !(0.0..=1.0).contains(&self.top_p) {
            anyhow::bail!("--top-p must be between 0 and 1, got {}", self.top_p);
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            anyhow::bail!("--min-p must be between 0 and 1, got {}", self.min_p);
        }
        if self.repeat_penalty <= 0.0 {
            anyhow::bail!(
                "--repeat-penalty must be greater than 0, got {}",
                self.repeat_penalty
            );
        }
        if self.repeat_last_n < -1 {
            anyhow::bail!(
                "--repeat-last-n must be -1, 0 or positive, got {}",
                self.repeat_last_n
            );
        }
        Ok(SamplerParams {
            temp: self.temp,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            repeat_penalty: self.repeat_penalty,
            repeat_last_n: self.repeat_last_n,
            seed: self.seed,
            ..SamplerParams::default()
        })
    }
}

/// `-n`: a count, or −1 for "no limit".
pub fn n_predict(n: i64) -> anyhow::Result<Option<usize>> {
    match n {
        -1 => Ok(None),
        n if n >= 0 => Ok(Some(n as usize)),
        n => anyhow::bail!("-n must be -1 (no limit) or at least 0, got {n}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strs(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn minus_one_for_threads_and_seed_means_the_default_as_in_llama_cpp() {
        let got = rewrite_llama_flags(strs(&[
            "clover", "run", "-t", "-1", "-tb=-1", "--seed", "-1", "-n", "-1", "-p", "-1", "--",
            "-t", "-1",
        ]));
        assert_eq!(
            got,
            strs(&["clover", "run", "-n", "-1", "-p", "-1", "--", "-t", "-1"])
        );
    }

    #[test]
    fn llama_short_flags_become_long_ones_but_not_after_double_dash() {
        let got = rewrite_llama_flags(strs(&[
            "clover",
            "run",
            "-ub",
            "8",
            "-ctk=q8_0",
            "-ctv",
            "bf16",
            "-c",
            "64",
            "--",
            "-ub",
        ]));
        assert_eq!(
            got,
            strs(&[
                "clover",
                "run",
                "--ubatch-size",
                "8",
                "--cache-type-k=q8_0",
                "--cache-type-v",
                "bf16",
                "-c",
                "64",
                "--",
                "-ub",
            ])
        );
    }

    #[test]
    fn n_predict_accepts_minus_one_and_rejects_other_negatives() {
        assert_eq!(n_predict(-1).unwrap(), None);
        assert_eq!(n_predict(0).unwrap(), Some(0));
        assert_eq!(n_predict(7).unwrap(), Some(7));
        assert!(n_predict(-2).is_err());
    }
}

/// The token windows `perplexity` and `imatrix` run over (llama.cpp's `-c`
/// chunks).
#[derive(Args, Debug, Clone)]
pub struct WindowArgs {
    /// Window size in tokens (perplexity scores the second half of each)
    #[arg(
        short = 'c',
        long = "ctx-size",
        default_value_t = 512,
        allow_negative_numbers = true
    )]
    pub ctx_size: usize,
    /// Process at most this many windows (-1: all)
    #[arg(long = "chunks", default_value_t = -1, allow_negative_numbers = true)]
    pub chunks: i64,
}
