//! `clover inspect FILE`: summary, `--tsv` tensor map, `--json` quant report.

use std::path::PathBuf;

use clap::Args;

#[derive(Args, Debug)]
pub struct InspectArgs {
    /// The GGUF file
    pub file: PathBuf,
}

pub fn run(_args: InspectArgs) -> anyhow::Result<()> {
    anyhow::bail!("inspect is not built yet")
}
