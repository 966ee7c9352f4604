//! `clover diffuse`: block-diffusion generation (docs/DESIGN.md §4.4), the
//! llama-diffusion-cli equivalent.
//!
//! Per block: `[t_n, M×(B−1)]` is denoised over S diffusion passes; each
//! pass unmasks the masked positions whose prediction is most confident
//! (`confidence`: highest top probability; `entropy`: lowest entropy) — at
//! least ⌈remaining / passes left⌉ of them, plus every one beyond the
//! threshold (`--diffusion-threshold`: probability ≥ X, or entropy ≤ X).
//! The finished block is committed by one AR pass over it, whose last output
//! gives the next anchor. Prediction for block index j comes from diffusion
//! row j−1 (logits are shifted, docs/DESIGN.md §3).

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context};
use clap::{Args, ValueEnum};

use crate::gguf::{GgufFile, Value};
use crate::model::{LogitsFor, Model, State, StateOptions};
use crate::sample::{argmax, softmax};
use crate::spec::verify::entropy;
use crate::tokenizer::{Tokenizer, TokenizerSpec};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Algorithm {
    Confidence,
    Entropy,
}

#[derive(Args, Debug)]
pub struct DiffuseArgs {
    /// The model file (clover_moe)
    #[arg(short = 'm', long = "model")]
    pub model: PathBuf,
    /// The prompt
    #[arg(short = 'p', long = "prompt")]
    pub prompt: String,
    /// Tokens to generate
    #[arg(short = 'n', long = "n-predict", default_value_t = 64)]
    pub n_predict: usize,
    /// Denoising passes per block
    #[arg(long = "diffusion-steps", default_value_t = 8)]
    pub steps: usize,
    /// Block size B (anchor + B−1 masks); default: the file's diffusion.block_size
    #[arg(long = "diffusion-block-size")]
    pub block_size: Option<usize>,
    /// Which positions to unmask first
    #[arg(long = "diffusion-algorithm", value_enum, default_value_t = Algorithm::Confidence)]
    pub algorithm: Algorithm,
    /// Also unmask every position with probability ≥ X (confidence) or entropy ≤ X nats
    #[arg(long = "diffusion-threshold")]
    pub threshold: Option<f32>,
    /// Context size
    #[arg(
        short = 'c',
        long = "ctx-size",
        default_value_t = 4096,
        allow_negative_numbers = true
    )]
    pub ctx_size: usize,
}

/// One masked position's score: higher unmasks first.
fn score(algo: Algorithm, p: &[f32]) -> (u32, f64) {
    let tok = argmax(p);
    let s = match algo {
        Algorithm::Confidence => p[tok as usize] as f64,
        Algorithm::Entropy => -entropy(p),
    };
    (tok, s)
}

/// Whether a score passes the threshold.
fn beyond(algo: Algorithm, s: f64, x: f32) -> bool {
    match algo {
        Algorithm::Confidence => s >= x as f64,
        Algorithm::Entropy => -s <= x as f64,
    }
}

/// Denoises one block in place: `block[0]` is the anchor, masked positions
/// hold `mask`. Returns the number of diffusion passes run.
#[allow(clippy::too_many_arguments)]
pub fn denoise_block(
    model: &Model,
    state: &mut State,
    block: &mut [u32],
    pos: usize,
    mask: u32,
    steps: usize,
    algo: Algorithm,
    threshold: Option<f32>,
) -> Result<usize, crate::model::ForwardError> {
    let v = model.n_vocab();
    let mut passes = 0;
    for step in 0..steps.max(1) {
        let masked: Vec<usize> = (1..block.len()).filter(|&i| block[i] == mask).collect();
        if masked.is_empty() {
            break;
        }
        let rows: Vec<usize> = masked.iter().map(|i| i - 1).collect();
        let logits = model.forward_diffusion(state, block, pos, LogitsFor::Indices(&rows))?;
        passes += 1;
        let mut cands: Vec<(usize, u32, f64)> = masked
            .iter()
            .zip(logits.chunks_exact(v))
            .map(|(&i, row)| {
                // The mask token itself is never a prediction.
                let mut p = softmax(row);
                let rest = 1.0 - p[mask as usize];
                p[mask as usize] = 0.0;
                if rest > 0.0 {
                    p.iter_mut().for_each(|x| *x /= rest);
                }
                let (tok, s) = score(algo, &p);
                (i, tok, s)
            })
            .collect();
        cands.sort_by(|a, b| b.2.total_cmp(&a.2).then(a.0.cmp(&b.0)));
        let left = steps.max(1) - step;
        let quota = masked.len().div_ceil(left);
        for (k, &(i, tok, s)) in cands.iter().enumerate() {
            if k < quota || threshold.is_some_and(|x| beyond(algo, s, x)) {
                block[i] = tok;
            }
        }
    }
    Ok(passes)
}

fn tokenizer(file: &GgufFile) -> anyhow::Result<Tokenizer> {
    let s = |k: &str| file.get(k).and_then(Value::as_str).map(str::to_string);
    let strings = |k: &str| -> Vec<String> {
        file.get(k)
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let id = |k: &str| file.get(k).and_then(Value::as_u64).map(|x| x as u32);
    let spec = TokenizerSpec {
        model: s("tokenizer.ggml.model").context("the file has no tokenizer")?,
        pre: s("tokenizer.ggml.pre").unwrap_or_default(),
        tokens: strings("tokenizer.ggml.tokens"),
        token_types: file
            .get("tokenizer.ggml.token_type")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_i64().map(|x| x as i32))
                    .collect()
            })
            .unwrap_or_default(),
        merges: strings("tokenizer.ggml.merges"),
        bos: id("tokenizer.ggml.bos_token_id"),
        eos: id("tokenizer.ggml.eos_token_id"),
        pad: id("tokenizer.ggml.padding_token_id"),
        add_bos: file
            .get("tokenizer.ggml.add_bos_token")
            .and_then(Value::as_bool)
            .unwrap_or(false),
    };
    Ok(Tokenizer::new(&spec)?)
}

pub fn run(args: DiffuseArgs) -> anyhow::Result<()> {
    if args.steps == 0 {
        bail!("--diffusion-steps must be at least 1");
    }
    let file = GgufFile::open_populated(&args.model)
        .with_context(|| format!("cannot open {}", args.model.display()))?;
    let model = Model::load(&file)?;
    if !model.has_diffusion() {
        bail!(
            "{}: no block-diffusion tensors (clover diffuse needs a clover_moe file)",
            args.model.display()
        );
    }
    let mask = model
        .config
        .mask_token_id
        .context("the file has no tokenizer.ggml.mask_token_id")?;
    if mask as usize >= model.n_vocab() {
        bail!(
            "mask token id {mask} is outside the vocabulary of {}",
            model.n_vocab()
        );
    }
    let b = args.block_size.unwrap_or(model.config.diffusion_block_size);
    if b < 2 {
        bail!("--diffusion-block-size must be at least 2");
    }
    let tok = tokenizer(&file)?;
    let prompt = tok.encode(&args.prompt, true)?;
    if prompt.is_empty() {
        bail!("the prompt is empty");
    }
    if prompt
        .len()
        .saturating_add(args.n_predict)
        .saturating_add(b)
        > args.ctx_size
    {
        bail!(
            "prompt ({} tokens) + -n {} + a block of {b} exceed the context of {}",
            prompt.len(),
            args.n_predict,
            args.ctx_size
        );
    }
    let mut opts = StateOptions::new(args.ctx_size);
    opts.max_batch = opts.max_batch.max(b);
    model.check_memory(&opts)?;
    let mut state = model.new_state(opts)?;

    let t0 = Instant::now();
    let logits = model.forward(&mut state, &prompt, 0, LogitsFor::Last)?;
    let mut anchor = argmax(logits);
    let t_prompt = t0.elapsed();
    // `-n 0` evaluates the prompt and generates nothing, as in llama.cpp.
    let mut out = Vec::new();
    let mut dec = tok.stream_decoder();
    let mut stdout = std::io::stdout();
    if args.n_predict > 0 {
        out.push(anchor);
        write!(stdout, "{}", dec.push(anchor)?)?;
    }
    let t1 = Instant::now();
    let (mut passes, mut blocks) = (0usize, 0usize);
    let mut done = tok.is_eog(anchor);
    while out.len() < args.n_predict && !done {
        let pos = state.n_past();
        let mut block = vec![mask; b];
        block[0] = anchor;
        passes += denoise_block(
            &model,
            &mut state,
            &mut block,
            pos,
            mask,
            args.steps,
            args.algorithm,
            args.threshold,
        )?;
        blocks += 1;
        // Commit: one AR pass over the block; its last output is the anchor.
        let logits = model.forward(&mut state, &block, pos, LogitsFor::Last)?;
        anchor = argmax(logits);
        for &t in block[1..].iter().chain(std::iter::once(&anchor)) {
            if out.len() >= args.n_predict || done {
                break;
            }
            out.push(t);
            write!(stdout, "{}", dec.push(t)?)?;
            done = tok.is_eog(t);
        }
        stdout.flush()?;
    }
    if !out.is_empty() {
        writeln!(stdout)?;
    }
    let gen = t1.elapsed();
    eprintln!(
        "diffuse: prompt {} tokens in {:.2} ms; {} tokens in {:.2} ms ({:.2} tokens/s), {} blocks, {} diffusion passes",
        prompt.len(),
        t_prompt.as_secs_f64() * 1e3,
        out.len(),
        gen.as_secs_f64() * 1e3,
        out.len() as f64 / gen.as_secs_f64().max(1e-9),
        blocks,
        passes
    );
    Ok(())
}
