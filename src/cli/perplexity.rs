//! `clover perplexity`: llama-perplexity's measurement of a text file.
//!
//! The text is tokenized once (special-token texts are not parsed) and scored
//! in windows of `-c` tokens by [`crate::score`]: its arguments and printing
//! live here. Prints the running estimate after each window (`[1]24.1234,[2]…`) and
//! `Final estimate: PPL = X +/- Y`.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context};
use clap::Args;

use crate::kernels::GgmlType;
use crate::kld::{self, KldSums};
use crate::model::LogitsFor;
use crate::score::{self, NllSums, WindowRunner, Windows};

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
    #[command(flatten)]
    pub window: super::common::WindowArgs,
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

/// The most bytes the text file may hold.
const MAX_TEXT_FILE: u64 = 1 << 30;

pub fn run(args: PerplexityArgs) -> anyhow::Result<()> {
    if args.window.ctx_size < 4 {
        bail!(
            "--ctx-size {} is too small (at least 4)",
            args.window.ctx_size
        );
    }
    if args.threads == Some(0) {
        bail!("--threads must be at least 1");
    }
    if args.window.chunks == 0 {
        bail!("--chunks 0 scores nothing: give a positive number of windows, or -1 for the whole text");
    }
    if args.kl_divergence {
        return run_kld(&args);
    }
    let file = args.file.as_deref().context("no text: pass -f FILE")?;
    let text = super::common::read_text_file(file, MAX_TEXT_FILE, "text file")?;
    let m = super::common::open_model(args.model.as_deref(), args.no_mmap)?;
    let tokens = m.tokenizer.encode(&text, false)?;
    let c = args.window.ctx_size;
    let windows = Windows::of(tokens.len(), c, args.window.chunks);
    let n_windows = windows.n;
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
    let mut runner = WindowRunner::new(
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
        kld::write_header(w, c, n_vocab, windows.covered(&tokens))?;
    }
    let nv = kld::slots(n_vocab);
    let mut log_probs = vec![0u16; nv];
    for w in 0..n_windows {
        let win = windows.get(&tokens, w);
        let logits = runner.eval(model, win, LogitsFor::All)?;
        score::score_window(logits, n_vocab, win, &mut sums);
        if let Some(bw) = &mut base {
            for j in score::scored(c) {
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
    writeln!(out, "{}", sums.final_line())?;
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
    if c != args.window.ctx_size {
        eprintln!("perplexity: windows of {c} tokens, as the base file was computed");
    }
    let mut n_chunk = h.n_chunk;
    if args.window.chunks >= 0 {
        n_chunk = n_chunk.min(args.window.chunks as usize);
    }
    let mut runner = WindowRunner::new(
        model,
        c,
        args.threads,
        (args.cache_type_k, args.cache_type_v),
        args.flash_attn != super::common::FlashAttn::Off,
    )?;
    let nv = kld::slots(n_vocab);
    let scored = score::scored(c).len();
    let mut base = vec![0u16; scored * nv];
    let mut k = KldSums::default();
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "chunk             PPL               ln(PPL(Q)/PPL(base))          KL Divergence              Δp RMS            Same top p"
    )?;
    for w in 0..n_chunk {
        let win = Windows { c, n: n_chunk }.get(&h.tokens, w);
        r.read_exact(bytemuck::cast_slice_mut(&mut base))
            .with_context(what)?;
        let logits = runner.eval(model, win, LogitsFor::All)?;
        for (i, j) in score::scored(c).enumerate() {
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
