//! `clover chat`: the terminal UI, or a line-based chat when stdout is not a terminal.

use std::io::{self, IsTerminal};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, ValueEnum};

use crate::tui::demo::DemoEngine;
use crate::tui::{run_lines, run_tui, ChatOptions};

/// How replies are decoded (DESIGN §4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SpecType {
    /// Plain autoregressive decoding.
    None,
    /// Self-speculation: block-diffusion drafts, verified in one batched pass.
    DraftSelf,
}

#[derive(Args, Debug)]
pub struct ChatArgs {
    /// The GGUF model file
    #[arg(short = 'm', long = "model")]
    pub model: Option<PathBuf>,
    /// Threads for generation (default: all cores)
    #[arg(short = 't', long = "threads")]
    pub threads: Option<usize>,
    /// Context size in tokens
    #[arg(short = 'c', long = "ctx-size", default_value_t = 4096)]
    pub ctx_size: usize,
    /// Sampling temperature (0: greedy)
    #[arg(long, default_value_t = 0.8)]
    pub temp: f32,
    /// Random seed for sampling (default: from the clock)
    #[arg(long)]
    pub seed: Option<u64>,
    /// Decoding mode to start with; F2 toggles it live
    #[arg(long = "spec-type", value_enum, default_value_t = SpecType::None)]
    pub spec_type: SpecType,
    /// Run the built-in demo engine (no model needed)
    #[arg(long)]
    pub demo: bool,
    /// System prompt
    #[arg(long = "system", value_name = "TEXT")]
    pub system: Option<String>,
}

/// The demo's simulated cost of one forward pass.
const DEMO_TOKEN_DELAY: Duration = Duration::from_millis(30);

pub fn run(args: ChatArgs) -> anyhow::Result<()> {
    if !args.demo {
        anyhow::bail!(
            "no model engine yet: `clover chat` cannot load {} until the forward pass is wired in; \
             `clover chat --demo` shows the interface",
            args.model
                .as_ref()
                .map_or("a model".to_string(), |p| p.display().to_string())
        );
    }
    if args.ctx_size == 0 {
        anyhow::bail!("--ctx-size must be at least 1");
    }
    if !(args.temp >= 0.0 && args.temp.is_finite()) {
        anyhow::bail!("--temp must be a finite number ≥ 0, got {}", args.temp);
    }
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let opts = ChatOptions {
        system: args.system.clone(),
        spec: args.spec_type == SpecType::DraftSelf,
    };
    let engine = DemoEngine::new(threads, args.ctx_size, DEMO_TOKEN_DELAY);
    if io::stdout().is_terminal() {
        run_tui(engine, &opts).context("terminal UI")
    } else {
        let mut engine = engine;
        run_lines(&mut engine, &opts, io::stdin().lock(), io::stdout().lock()).context("chat")
    }
}
