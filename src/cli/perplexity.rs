//! `clover perplexity`: llama-perplexity's measurement of a text file.
//!
//! The text is tokenized once (special-token texts are not parsed) and cut into
//! non-overlapping windows of `-c` tokens. Each window runs from an empty state;
//! only its second half is scored — the predictions of tokens `c/2 + 1 … c − 1`,
//! each made with at least `c/2` tokens of context — as llama-perplexity does.
//!
//! ```text
//! nll_i = −log softmax(logits_{j})[token_{j+1}]      j = c/2 … c − 2
//! PPL   = exp(mean nll)    ± exp(mean nll) · sqrt(var(nll) / (N − 1))
//! ```
//! Prints the running estimate after each window (`[1]24.1234,[2]…`) and
//! `Final estimate: PPL = X +/- Y`.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context};
use clap::Args;

use crate::kernels::GgmlType;
use crate::kld::{self, KldSums};
use crate::model::{LogitsFor, StateOptions};

#[derive(Args, Debug)]
pub struct PerplexityArgs {
    /// The model file (default: the built-in default model)
    #[arg(short = 'm', long = "model")]
    pub model: Option<PathBuf>,
    /// The text to score (not needed with --kl-divergence: the base file holds
    /// its tokens)
    #[arg(short = 'f', long = "file", required_unless_present = "kl_divergence")]
    pub file: Option<PathBuf>,
    /// Without --kl-divergence: also save this model's log-probabilities of the
    /// scored positions to FILE (llama-perplexity's format). With it: the base
    /// file to score against
    #[arg(long = "kl-divergence-base", value_name = "FILE")]
    pub kl_divergence_base: Option<PathBuf>,
    /// Score this model against the base file: KL divergence, Δp, same top p
    #[arg(long = "kl-divergence", requires = "kl_divergence_base")]
    pub kl_divergence: bool,
    /// Window size in tokens (the second half of each window is scored)
    #[arg(
        short = 'c',
        long = "ctx-size",
        default_value_t = 512,
        allow_negative_numbers = true
    )]
    pub ctx_size: usize,
    /// Score at most this many windows (-1: all)
    #[arg(long = "chunks", default_value_t = -1, allow_negative_numbers = true)]
    pub chunks: i64,
    /// Threads (default: all cores)
    #[arg(short = 't', long = "threads")]
    pub threads: Option<usize>,
    /// Read the model into memory instead of mapping it
    #[arg(long = "no-mmap")]
    pub no_mmap: bool,
    /// KV cache type for K (-ctk): f32, f16, bf16, q8_0 (f16: llama-perplexity's default)
    #[arg(long = "cache-type-k", default_value = "f16", value_parser = crate::engine::parse_cache_type)]
    pub cache_type_k: GgmlType,
    /// KV cache type for V (-ctv)
    #[arg(long = "cache-type-v", default_value = "f16", value_parser = crate::engine::parse_cache_type)]
    pub cache_type_v: GgmlType,
    /// Flash attention (-fa), in llama.cpp's arithmetic: auto (llama-perplexity's
    /// default) is on, as llama.cpp chooses on CPU; with it an f32 cache is
    /// kept in f16, as llama.cpp casts it
    #[arg(
        long = "flash-attn",
        value_enum,
        value_name = "on|off|auto",
        default_value = "auto"
    )]
    pub flash_attn: super::common::FlashAttn,
}

/// Running sums of the scored negative log-likelihoods.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct NllSums {
    pub n: usize,
    pub sum: f64,
    pub sum_sq: f64,
}

impl NllSums {
    pub fn add(&mut self, nll: f64) {
        self.n += 1;
        self.sum += nll;
        self.sum_sq += nll * nll;
    }

    pub fn ppl(&self) -> f64 {
        (self.sum / self.n.max(1) as f64).exp()
    }

    /// llama-perplexity's standard error of the PPL estimate.
    pub fn ppl_error(&self) -> f64 {
        if self.n < 2 {
            return 0.0;
        }
        let n = self.n as f64;
        let mean = self.sum / n;
        let var = (self.sum_sq / n - mean * mean).max(0.0);
        self.ppl() * (var / (n - 1.0)).sqrt()
    }
}

/// `−log softmax(logits)[target]` in llama-perplexity's arithmetic, so that
/// the same logits print the same PPL: the maximum and each `x − max` in
/// f32, `exp` in f32, the sum in f64 in vocabulary order, and
/// `(x_target − max) − ln Σ` in f64. Within f32 rounding of [`nll_exact`].
pub fn nll(logits: &[f32], target: u32) -> f64 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits.iter().map(|&x| (x - max).exp() as f64).sum();
    sum.ln() - (logits[target as usize] - max) as f64
}

/// `−log softmax(logits)[target]`, in f64 throughout: the reference
/// [`nll`] is tested against.
#[cfg(test)]
fn nll_exact(logits: &[f32], target: u32) -> f64 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let sum: f64 = logits.iter().map(|&x| (x as f64 - max).exp()).sum();
    max + sum.ln() - logits[target as usize] as f64
}

/// Scores one window's logits (`[c][n_vocab]`) against its tokens.
pub fn score_window(logits: &[f32], n_vocab: usize, tokens: &[u32], sums: &mut NllSums) {
    let c = tokens.len();
    for j in c / 2..c - 1 {
        sums.add(nll(&logits[j * n_vocab..(j + 1) * n_vocab], tokens[j + 1]));
    }
}

/// The thread pool and the state that windows of `c` tokens run in (a
/// prompt batch of at most 512, as llama.cpp's tools use).
pub fn window_runner(
    model: &crate::model::Model<'_>,
    c: usize,
    threads: Option<usize>,
    (type_k, type_v): (GgmlType, GgmlType),
    flash: bool,
) -> anyhow::Result<(rayon::ThreadPool, crate::model::State)> {
    // llama.cpp casts an f32 cache to f16 for flash attention.
    let cast = |ty| match (flash, ty) {
        (true, GgmlType::F32) => GgmlType::F16,
        _ => ty,
    };
    let (type_k, type_v) = (cast(type_k), cast(type_v));
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads.unwrap_or(0))
        .build()
        .context("thread pool")?;
    let state_opts = StateOptions {
        max_batch: c.min(512),
        type_k,
        type_v,
        ..StateOptions::new(c)
    };
    crate::engine::session::check_memory(model, &state_opts)?;
    let mut state = model.new_state(state_opts)?;
    state.kv.flash = flash;
    Ok((pool, state))
}

/// The most bytes the text file may hold.
const MAX_TEXT_FILE: u64 = 1 << 30;

pub fn run(args: PerplexityArgs) -> anyhow::Result<()> {
    if args.ctx_size < 4 {
        bail!("--ctx-size {} is too small (at least 4)", args.ctx_size);
    }
    if args.threads == Some(0) {
        bail!("--threads must be at least 1");
    }
    if args.chunks == 0 {
        bail!("--chunks 0 scores nothing: give a positive number of windows, or -1 for the whole text");
    }
    if args.kl_divergence {
        return run_kld(&args);
    }
    let file = args.file.as_deref().context("no text: pass -f FILE")?;
    let text = super::common::read_text_file(file, MAX_TEXT_FILE, "text file")?;
    let m = super::common::open_model(args.model.as_deref(), args.no_mmap)?;
    let tokens = m.tokenizer.encode(&text, false)?;
    let c = args.ctx_size;
    let mut n_windows = tokens.len() / c;
    if args.chunks >= 0 {
        n_windows = n_windows.min(args.chunks as usize);
    }
    if n_windows == 0 {
        bail!(
            "{} has {} tokens, fewer than one window of {c}",
            file.display(),
            tokens.len()
        );
    }
    eprintln!(
        "perplexity: {} tokens, {n_windows} windows of {c}, scoring the second half of each",
        tokens.len()
    );
    let (pool, mut state) = window_runner(
        &m.model,
        c,
        args.threads,
        (args.cache_type_k, args.cache_type_v),
        args.flash_attn != super::common::FlashAttn::Off,
    )?;
    let model = &m.model;
    let n_vocab = model.n_vocab();
    let mut sums = NllSums::default();
    let t0 = Instant::now();
    let mut out = std::io::stdout().lock();
    // --kl-divergence-base: the log-probabilities go to FILE as they come.
    let base_file = match &args.kl_divergence_base {
        Some(path) => Some(
            crate::output::OutputFile::create(path)
                .with_context(|| format!("--kl-divergence-base {}", path.display()))?,
        ),
        None => None,
    };
    let mut base = base_file
        .as_ref()
        .map(|f| std::io::BufWriter::with_capacity(1 << 20, f.file()));
    if let Some(w) = &mut base {
        kld::write_header(w, c, n_vocab, &tokens[..n_windows * c])?;
    }
    let nv = kld::slots(n_vocab);
    let mut log_probs = vec![0u16; nv];
    for w in 0..n_windows {
        let win = &tokens[w * c..(w + 1) * c];
        state.reset();
        let logits = pool.install(|| model.forward(&mut state, win, 0, LogitsFor::All))?;
        score_window(logits, n_vocab, win, &mut sums);
        if let Some(bw) = &mut base {
            for j in c / 2..c - 1 {
                kld::encode(
                    &logits[j * n_vocab..(j + 1) * n_vocab],
                    win[j + 1],
                    &mut log_probs,
                );
                bw.write_all(bytemuck::cast_slice(&log_probs))?;
            }
        }
        write!(out, "[{}]{:.4},", w + 1, sums.ppl())?;
        out.flush()?;
    }
    if let Some(bw) = &mut base {
        bw.flush()?;
    }
    drop(base);
    if let Some(f) = base_file {
        f.commit()?;
    }
    writeln!(out)?;
    writeln!(
        out,
        "Final estimate: PPL = {:.4} +/- {:.5}",
        sums.ppl(),
        sums.ppl_error()
    )?;
    eprintln!(
        "perplexity: {} tokens scored in {:.2} s",
        sums.n,
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}

/// `--kl-divergence`: this model against the base file's log-probabilities,
/// over the base file's tokens and windows (llama-perplexity's block).
fn run_kld(args: &PerplexityArgs) -> anyhow::Result<()> {
    use std::io::Read;
    let path = args
        .kl_divergence_base
        .as_deref()
        .context("--kl-divergence needs --kl-divergence-base FILE")?;
    let what = || format!("--kl-divergence-base {}", path.display());
    let (f, _input) = crate::output::open_input(path).with_context(what)?;
    let len = f.metadata().with_context(what)?.len();
    let mut r = std::io::BufReader::new(f);
    let h = kld::read_header(&mut r, len).with_context(what)?;
    let m = super::common::open_model(args.model.as_deref(), args.no_mmap)?;
    let model = &m.model;
    let n_vocab = model.n_vocab();
    if h.n_vocab != n_vocab {
        bail!(
            "{}: the base has a vocabulary of {}, this model {n_vocab}",
            what(),
            h.n_vocab
        );
    }
    let c = h.n_ctx;
    if c != args.ctx_size {
        eprintln!("perplexity: windows of {c} tokens, as the base file was computed");
    }
    let mut n_chunk = h.n_chunk;
    if args.chunks >= 0 {
        n_chunk = n_chunk.min(args.chunks as usize);
    }
    let (pool, mut state) = window_runner(
        model,
        c,
        args.threads,
        (args.cache_type_k, args.cache_type_v),
        args.flash_attn != super::common::FlashAttn::Off,
    )?;
    let nv = kld::slots(n_vocab);
    let scored = c - 1 - c / 2;
    let mut base = vec![0u16; scored * nv];
    let mut k = KldSums::default();
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "chunk             PPL               ln(PPL(Q)/PPL(base))          KL Divergence              Δp RMS            Same top p"
    )?;
    for w in 0..n_chunk {
        let win = &h.tokens[w * c..(w + 1) * c];
        r.read_exact(bytemuck::cast_slice_mut(&mut base))
            .with_context(what)?;
        state.reset();
        let logits = pool.install(|| model.forward(&mut state, win, 0, LogitsFor::All))?;
        for (i, j) in (c / 2..c - 1).enumerate() {
            k.add(
                &logits[j * n_vocab..(j + 1) * n_vocab],
                &base[i * nv..(i + 1) * nv],
                win[j + 1],
            );
        }
        writeln!(out, "{}", kld::chunk_line(w + 1, &k))?;
        out.flush()?;
    }
    writeln!(out)?;
    write!(out, "{}", kld::report(&k))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nll_of_uniform_logits_is_log_vocab() {
        let l = vec![0.5f32; 8];
        assert!((nll_exact(&l, 3) - 8f64.ln()).abs() < 1e-12);
        // exp(0) is exact in f32 too.
        assert!((nll(&l, 3) - 8f64.ln()).abs() < 1e-12);
    }

    #[test]
    fn nll_matches_a_hand_computed_softmax() {
        let l = [1.0f32, 2.0, 3.0];
        let p = 2f64.exp() / (1f64.exp() + 2f64.exp() + 3f64.exp());
        assert!((nll_exact(&l, 1) + p.ln()).abs() < 1e-12);
    }

    /// llama's arithmetic (f32 exponentials) stays within f32 rounding of
    /// the f64 reference, and is not the reference: on spread logits the
    /// two differ.
    #[test]
    fn nll_in_llama_arithmetic_stays_within_f32_rounding_of_the_exact_one() {
        let l: Vec<f32> = (0..1000)
            .map(|i| ((i * 7919) % 1000) as f32 * 0.013 - 6.0)
            .collect();
        let mut differ = 0;
        for target in [0u32, 17, 500, 999] {
            let (a, b) = (nll(&l, target), nll_exact(&l, target));
            assert!((a - b).abs() < 1e-6 * b.abs().max(1.0), "{a} vs {b}");
            differ += usize::from(a != b);
        }
        assert!(differ > 0, "f32 exponentials should leave a trace");
    }

    #[test]
    fn only_the_second_half_of_a_window_is_scored() {
        // 6 tokens, vocab 2: positions 3 and 4 predict tokens 4 and 5.
        let mut logits = vec![0.0f32; 12];
        logits[3 * 2 + 1] = 100.0; // position 3 is sure of token 1
        let tokens = [0, 0, 0, 0, 1, 0];
        let mut s = NllSums::default();
        score_window(&logits, 2, &tokens, &mut s);
        assert_eq!(s.n, 2);
        // Position 3: nll ≈ 0; position 4: uniform, ln 2.
        assert!((s.sum - 2f64.ln()).abs() < 1e-9, "{}", s.sum);
    }

    #[test]
    fn ppl_error_is_zero_for_constant_nll_and_grows_with_spread() {
        let mut a = NllSums::default();
        let mut b = NllSums::default();
        for i in 0..10 {
            a.add(2.0);
            b.add(if i % 2 == 0 { 1.0 } else { 3.0 });
        }
        assert!((a.ppl() - 2f64.exp()).abs() < 1e-9);
        assert_eq!(a.ppl_error(), 0.0);
        assert!(b.ppl_error() > 0.1);
    }
}
