//! `clover imatrix`: an importance matrix for `clover quantize --imatrix`
//! (and llama-quantize's), collected over a text the way llama-imatrix does.
//!
//! The text is tokenized once and cut into chunks of `-c` tokens; each chunk
//! runs from an empty state in one prompt pass (the first token replaced by
//! BOS when the vocabulary adds one), while [`crate::model::capture`] sums
//! the squared activations entering every `blk.*` matrix and expert. The
//! windows and the scoring of each chunk's second half are [`crate::score`]'s,
//! as for `clover perplexity`, so
//! the run also prints the text's perplexity. The file is rewritten every
//! `--output-frequency` chunks and at the end, each time through a temporary
//! file renamed into place: an interrupted run (Ctrl-C removes the temporary
//! file) leaves the last complete save, never a partial one.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context};
use clap::Args;

use crate::imatrix::Imatrix;
use crate::kernels::GgmlType;
use crate::model::{capture, LogitsFor};
use crate::score::{self, NllSums, WindowRunner, Windows};

#[derive(Args, Debug)]
pub struct ImatrixArgs {
    /// The model file (default: the built-in default model)
    #[arg(short = 'm', long = "model")]
    pub model: Option<PathBuf>,
    /// The text to collect over
    #[arg(short = 'f', long = "file")]
    pub file: PathBuf,
    /// Where to write the imatrix (GGUF, llama.cpp's format)
    #[arg(short = 'o', long = "output-file", default_value = "imatrix.gguf")]
    pub output: PathBuf,
    #[command(flatten)]
    pub window: super::common::WindowArgs,
    /// Rewrite the output file every N chunks
    #[arg(long = "output-frequency", default_value_t = 10)]
    pub output_frequency: usize,
    /// Skip the perplexity (only the last position's logits are computed)
    #[arg(long = "no-ppl")]
    pub no_ppl: bool,
    /// Threads (default: all cores)
    #[arg(short = 't', long = "threads")]
    pub threads: Option<usize>,
    /// Read the model into memory instead of mapping it
    #[arg(long = "no-mmap")]
    pub no_mmap: bool,
}

/// The most bytes the text file may hold.
const MAX_TEXT_FILE: u64 = 1 << 30;

/// The importance matrix of what was captured so far.
fn collected(args: &ImatrixArgs, chunks: usize) -> Imatrix {
    Imatrix {
        entries: capture::snapshot(),
        datasets: vec![args.file.to_string_lossy().into_owned()],
        chunk_count: chunks as u32,
        chunk_size: args.window.ctx_size as u32,
    }
}

fn save(args: &ImatrixArgs, im: &Imatrix) -> anyhow::Result<()> {
    for (name, e) in &im.entries {
        if e.sums.iter().any(|v| !v.is_finite()) {
            bail!("non-finite activations collected for {name}: the model overflows on this text");
        }
    }
    im.save(&args.output)
        .with_context(|| format!("writing {}", args.output.display()))?;
    Ok(())
}

pub fn run(args: ImatrixArgs) -> anyhow::Result<()> {
    if args.window.ctx_size < capture::MIN_DENSE_ROWS {
        bail!(
            "--ctx-size {} is too small: dense matrices are only collected from batches of at least {} tokens",
            args.window.ctx_size,
            capture::MIN_DENSE_ROWS
        );
    }
    if args.threads == Some(0) {
        bail!("--threads must be at least 1");
    }
    if args.output_frequency == 0 {
        bail!("--output-frequency must be at least 1");
    }
    let text = super::common::read_text_file(&args.file, MAX_TEXT_FILE, "text file")?;
    let m = super::common::open_model(args.model.as_deref(), args.no_mmap)?;
    crate::output::check_not_input(&args.output)?;
    let mut tokens = m.tokenizer.encode(&text, false)?;
    let c = args.window.ctx_size;
    // llama-imatrix's rule: at least two chunks of text.
    if tokens.len() < 2 * c {
        bail!(
            "{} has {} tokens; a chunk size of {c} needs at least {}",
            args.file.display(),
            tokens.len(),
            2 * c
        );
    }
    let windows = Windows::of(tokens.len(), c, args.window.chunks);
    let n_chunks = windows.n;
    if n_chunks == 0 {
        bail!("--chunks 0: nothing to collect");
    }
    let bos = m.tokenizer.add_bos().then(|| m.tokenizer.bos()).flatten();
    if let Some(b) = bos {
        for w in 0..n_chunks {
            tokens[w * c] = b;
        }
    }
    eprintln!("imatrix: {} tokens, {n_chunks} chunks of {c}", tokens.len());
    let mut runner = WindowRunner::new(
        &m.model,
        c,
        args.threads,
        (GgmlType::F32, GgmlType::F32),
        false,
    )?;
    let model = &m.model;
    let n_vocab = model.n_vocab();
    let mut sums = NllSums::default();
    let mut out = std::io::stdout().lock();
    let t0 = Instant::now();
    capture::start();
    let result = (|| -> anyhow::Result<()> {
        for w in 0..n_chunks {
            let win = windows.get(&tokens, w);
            let want = if args.no_ppl {
                LogitsFor::Last
            } else {
                LogitsFor::All
            };
            let logits = runner.eval(model, win, want)?;
            if w == 0 {
                let per = t0.elapsed().as_secs_f64();
                eprintln!(
                    "imatrix: {per:.2} seconds per chunk, ETA {:.1} min",
                    per * n_chunks as f64 / 60.0
                );
            }
            if !args.no_ppl {
                score::score_window(logits, n_vocab, win, &mut sums);
                write!(out, "[{}]{:.4},", w + 1, sums.ppl())?;
                out.flush()?;
            }
            if (w + 1) % args.output_frequency == 0 && w + 1 < n_chunks {
                save(&args, &collected(&args, w + 1))?;
            }
        }
        Ok(())
    })();
    let im = collected(&args, n_chunks);
    capture::finish();
    result?;
    save(&args, &im)?;
    if !args.no_ppl {
        writeln!(out)?;
        writeln!(out, "{}", sums.final_line())?;
    }
    let partial = im
        .entries
        .values()
        .filter(|e| e.counts.contains(&0))
        .count();
    eprintln!(
        "imatrix: {} entries over {n_chunks} chunks in {:.2} s written to {}{}",
        im.entries.len(),
        t0.elapsed().as_secs_f64(),
        args.output.display(),
        if partial > 0 {
            format!(" ({partial} expert stacks have experts the text never reached)")
        } else {
            String::new()
        }
    );
    Ok(())
}
