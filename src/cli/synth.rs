//! `clover synth`: random-weight model files (DESIGN §8).

use std::path::PathBuf;

use clap::Args;

#[derive(Args, Debug)]
pub struct SynthArgs {
    /// Output file
    #[arg(short = 'o', long = "output")]
    pub output: Option<PathBuf>,
}

pub fn run(_args: SynthArgs) -> anyhow::Result<()> {
    anyhow::bail!("synth is not built yet")
}
