//! `clover repack FILE`: writes the model's layout cache ahead of time
//! (`engine::packed_cache`), so that the first run starts as fast as the
//! next; says where it is and how big, or that it was already up to date.

use std::path::PathBuf;

use anyhow::{bail, Context};
use clap::Args;

use crate::engine::packed_cache;

#[derive(Args, Debug)]
pub struct RepackArgs {
    /// The model file
    pub model: PathBuf,
    /// Where the layout cache goes [default: ~/.cache/clover/layout]
    #[arg(long = "layout-cache", value_name = "DIR")]
    pub layout_cache: Option<PathBuf>,
}

pub fn run(args: RepackArgs) -> anyhow::Result<()> {
    let dir = match args.layout_cache {
        Some(d) => d,
        None => match packed_cache::dir_for(usize::MAX) {
            Some(d) => d,
            None => bail!(
                "no place for the layout cache: CLOVER_LAYOUT_CACHE is off, or there is no \
                 HOME or XDG_CACHE_HOME; give --layout-cache DIR"
            ),
        },
    };
    // This command caches any size, where asked.
    packed_cache::set(packed_cache::Setting::Dir(dir.clone()));
    let path = packed_cache::cache_path(&dir, &args.model);
    let before = std::fs::metadata(&path).and_then(|m| m.modified()).ok();
    let loaded = super::common::load_model_file(&args.model, true)
        .with_context(|| format!("repacking {}", args.model.display()))?;
    let Some(derived) = loaded.file.derived_tensors().filter(|d| !d.is_empty()) else {
        println!(
            "{}: nothing to repack on this machine (its kernels read the file's layout)",
            args.model.display()
        );
        return Ok(());
    };
    let after = std::fs::metadata(&path).and_then(|m| m.modified()).ok();
    if after.is_none() {
        bail!("the layout cache {} was not written", path.display());
    }
    let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    println!(
        "{}: {} tensors in {} ({:.2} GiB), {}",
        args.model.display(),
        derived.len(),
        path.display(),
        size as f64 / (1u64 << 30) as f64,
        if before.is_some() && before == after {
            "already up to date"
        } else {
            "written"
        }
    );
    Ok(())
}
