//! `clover synth`: random-weight model files (docs/DESIGN.md §8). The logic lives in
//! `crate::synth`; this file only parses flags and prints.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;

use clap::Args;

use crate::synth::{self, Arch, Preset, Recipe, SynthOptions};

#[derive(Args, Debug)]
pub struct SynthArgs {
    /// Architecture: clover_moe or qwen35moe
    #[arg(long, default_value = "clover_moe")]
    pub arch: Arch,
    /// Size: tiny, small, a3b-4l or full
    #[arg(long, default_value = "tiny")]
    pub preset: Preset,
    /// Tensor type recipe: f32, f16, bf16, q8_0, q4_0, q4_k_m, q4_k_m-hq,
    /// iq4_xs-exps-hq, apex-miniplus
    #[arg(long, default_value = "f32")]
    pub recipe: Recipe,
    /// Seed of the random weights
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Threads used to generate and quantize (default: all cores)
    #[arg(short = 't', long)]
    pub threads: Option<usize>,
    /// How weights are drawn: reference (f32 normals through the reference
    /// quantisers; slow) or direct (random quantised blocks; minutes for
    /// full). Default: reference for tiny and small, direct for a3b-4l and full
    #[arg(long)]
    pub fill: Option<synth::weights::Fill>,
    /// Write these four `rope.dimension_sections` instead of the preset's
    /// (which rotate every rope pair), e.g. 4,2,2,0
    #[arg(long, value_name = "S0,S1,S2,S3", value_delimiter = ',')]
    pub rope_sections: Option<Vec<i32>>,
    /// After the trunk, a multi-token-prediction block (`blk.N.nextn.*` and
    /// a gated-attention layer with its MoE, `nextn_predict_layers = 1`), as
    /// llama.cpp's converter writes a checkpoint's
    #[arg(long)]
    pub mtp: bool,
    /// Output file: written to a temporary file beside it and renamed into
    /// place when complete. A symlink is followed to its regular target (the
    /// link is kept); a directory, device, FIFO or socket is refused
    #[arg(short = 'o', long = "output")]
    pub output: Option<PathBuf>,
    /// Print the plan (shapes, counts, bytes) without writing anything
    #[arg(long)]
    pub dry_run: bool,
    /// With --dry-run: also list every tensor (name, type, shape) as TSV
    #[arg(long, requires = "dry_run")]
    pub tensors: bool,
}

pub fn run(args: SynthArgs) -> anyhow::Result<()> {
    let options = SynthOptions {
        arch: args.arch,
        preset: args.preset,
        recipe: args.recipe,
        seed: args.seed,
    };
    let mut plan = match args.mtp {
        true => synth::plan_mtp(options)?,
        false => synth::plan(options)?,
    };
    if let Some(fill) = args.fill {
        plan.fill = fill;
    }
    // A file clover would refuse (say, --rope-sections wider than the
    // head) is not kept.
    plan.check_loadable = true;
    if let Some(s) = &args.rope_sections {
        let s: [i32; 4] = s
            .as_slice()
            .try_into()
            .map_err(|_| anyhow::anyhow!("--rope-sections takes 4 numbers, got {}", s.len()))?;
        plan.set_rope_sections(s);
    }
    if args.dry_run {
        print!("{}", plan.summary());
        if args.tensors {
            print!("{}", plan.tensor_table());
        }
        return Ok(());
    }
    let Some(path) = args.output else {
        anyhow::bail!("no output file: pass -o FILE (or --dry-run)");
    };
    if args.threads == Some(0) {
        anyhow::bail!("--threads must be at least 1");
    }
    let start = Instant::now();
    // Progress on stderr in tenths, for files that take a while.
    let big = plan.file_bytes() > 1 << 30;
    let mut shown = 0;
    let bytes = plan.write_with_progress(&path, args.threads, |done, total| {
        let tenth = done * 10 / total;
        if big && tenth > shown {
            shown = tenth;
            eprintln!("synth: {}% ({done}/{total} tensors)", tenth * 10);
        }
    })?;
    println!(
        "wrote {}: {} bytes, {} tensors, {} parameters in {:.1} s",
        path.display(),
        bytes,
        plan.n_tensors(),
        plan.n_parameters(),
        start.elapsed().as_secs_f64()
    );
    if big {
        // Just-written pages sit in the page cache 4 KiB at a time and would
        // be mapped so (`gguf::pages`); evicted, the first load reads the
        // file back through readahead, in large pages where the filesystem
        // has them.
        crate::gguf::pages::drop_cached(&path)
            .with_context(|| format!("dropping {} from the page cache", path.display()))?;
        eprintln!(
            "synth: {} left the page cache; its first load reads it back (in large pages)",
            path.display()
        );
    }
    Ok(())
}
