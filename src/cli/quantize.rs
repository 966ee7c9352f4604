//! `clover quantize IN OUT [TYPE]`: llama-quantize's mixes and spellings
//! (`crate::quantize` does the work).

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context};
use clap::Args;
use kernels::GgmlType;

use crate::gguf::GgufFile;
use crate::imatrix::Imatrix;
use crate::quantize::{self, QuantizeOptions, TYPE_NAMES};
use crate::synth::Recipe;

#[derive(Args, Debug)]
pub struct QuantizeArgs {
    /// The source GGUF file (F32, F16 or BF16 weights; quantized tensors only
    /// with --allow-requantize)
    pub input: PathBuf,
    /// The file to write (replaced atomically; never a partial file)
    pub output: PathBuf,
    /// llama-quantize's type: F32, F16, BF16, Q8_0, Q4_0, Q4_K_M, Q6_K, IQ4_XS (or use --recipe)
    #[arg(value_name = "TYPE")]
    pub ty: Option<String>,
    /// One of `clover synth`'s recipes instead of TYPE: q4_k_m-hq,
    /// iq4_xs-exps-hq, apex-miniplus, ... (mixed recipes)
    #[arg(long, conflicts_with = "ty")]
    pub recipe: Option<Recipe>,
    /// Every quantizable tensor in the mix's default type (no per-tensor rules)
    #[arg(long)]
    pub pure: bool,
    /// PATTERN=TYPE: tensors whose name matches the regular expression get TYPE
    /// (repeatable; the first match wins), e.g. 'ffn_down_exps=q6_k'
    #[arg(long = "tensor-type", value_name = "PATTERN=TYPE")]
    pub tensor_type: Vec<String>,
    /// The type of output.weight
    #[arg(long = "output-tensor-type", value_name = "TYPE")]
    pub output_tensor_type: Option<String>,
    /// The type of token_embd.weight
    #[arg(long = "token-embedding-type", value_name = "TYPE")]
    pub token_embedding_type: Option<String>,
    /// Quantize tensors that are already quantized
    #[arg(long = "allow-requantize")]
    pub allow_requantize: bool,
    /// An importance matrix (GGUF, from clover imatrix or llama-imatrix) to
    /// weight each tensor's quantization by
    #[arg(long = "imatrix", value_name = "FILE")]
    pub imatrix: Option<PathBuf>,
    /// Threads (default: all cores)
    #[arg(short = 't', long = "threads")]
    pub threads: Option<usize>,
}

fn ggml_type(flag: &str, s: &str) -> anyhow::Result<GgmlType> {
    GgmlType::from_name(s).with_context(|| {
        format!(
            "{flag}: unknown type '{s}' (a ggml type name such as q8_0, q4_k, q6_k, iq4_xs, f16)"
        )
    })
}

pub fn run(args: QuantizeArgs) -> anyhow::Result<()> {
    let recipe = match (&args.ty, args.recipe) {
        (_, Some(r)) => r,
        (Some(t), None) => quantize::recipe_of_type_name(t).with_context(|| {
            let names: Vec<&str> = TYPE_NAMES.iter().map(|(n, _)| *n).collect();
            format!(
                "unknown type '{t}' (expected {}, or --recipe for the seed mixes)",
                names.join(", ")
            )
        })?,
        (None, None) => bail!("no type: give TYPE (e.g. Q4_K_M) or --recipe NAME"),
    };
    let mut tensor_types = Vec::new();
    for spec in &args.tensor_type {
        let Some((pat, ty)) = spec.rsplit_once('=') else {
            bail!("--tensor-type {spec}: expected PATTERN=TYPE");
        };
        let re = regex::Regex::new(pat)
            .map_err(|e| anyhow::anyhow!("--tensor-type {spec}: bad pattern: {e}"))?;
        tensor_types.push((re, ggml_type("--tensor-type", ty)?));
    }
    let opts = QuantizeOptions {
        recipe,
        pure: args.pure,
        tensor_types,
        output_type: args
            .output_tensor_type
            .as_deref()
            .map(|t| ggml_type("--output-tensor-type", t))
            .transpose()?,
        token_embd_type: args
            .token_embedding_type
            .as_deref()
            .map(|t| ggml_type("--token-embedding-type", t))
            .transpose()?,
        allow_requantize: args.allow_requantize,
        imatrix: match &args.imatrix {
            Some(p) => Some((
                Imatrix::load(p).map_err(anyhow::Error::msg)?,
                p.to_string_lossy().into_owned(),
            )),
            None => None,
        },
    };
    if args.threads == Some(0) {
        bail!("-t must be at least 1");
    }
    let file = GgufFile::open(&args.input).with_context(|| format!("{}", args.input.display()))?;
    // By file identity: the same file through another name, a symlink or a
    // hard link is refused too, before any work.
    crate::output::check_not_input(&args.output)?;
    let plan = quantize::plan(&file, &opts).with_context(|| format!("{}", args.input.display()))?;
    if let Some((im, p)) = &opts.imatrix {
        eprintln!(
            "quantize: imatrix {p}: {} entries over {} chunks of {}{}",
            im.entries.len(),
            im.chunk_count,
            im.chunk_size,
            match plan.without_imatrix.len() {
                0 => String::new(),
                n => format!(
                    "; no entry for {n} quantized tensors (quantized without): {}",
                    plan.without_imatrix.join(", ")
                ),
            }
        );
    }
    let total: u64 = plan
        .tensors
        .iter()
        .map(|t| t.to.row_bytes(t.dims[0]).unwrap_or(0) * t.dims.iter().skip(1).product::<u64>())
        .sum();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(args.threads.unwrap_or(0))
        .build()
        .context("thread pool")?;
    let show = std::io::stderr().is_terminal();
    let n_tensors = plan.tensors.len();
    let t0 = Instant::now();
    let mut progress = |done: usize, bytes: u64| {
        if !show {
            return;
        }
        let secs = t0.elapsed().as_secs_f64();
        let eta = if bytes > 0 {
            secs * (total.saturating_sub(bytes)) as f64 / bytes as f64
        } else {
            0.0
        };
        let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
        eprint!(
            "\rquantize: {done}/{n_tensors} tensors, {:.2} of {:.2} GiB, ETA {eta:.0} s\x1b[K",
            gib(bytes),
            gib(total)
        );
    };
    let n = pool
        .install(|| quantize::write(&file, &plan, &args.output, &mut progress))
        .with_context(|| format!("writing {}", args.output.display()))?;
    if show {
        eprint!("\r\x1b[K");
    }
    let changed = plan.tensors.iter().filter(|t| t.from != t.to).count();
    eprintln!(
        "quantize: wrote {} ({} bytes, {n_tensors} tensors, {changed} converted, mix {}, file_type {}) in {:.1} s",
        args.output.display(),
        n,
        recipe,
        plan.file_type,
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}
