//! The command line: clap argument groups and one function per command.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use kernels::plan::BatchOrder;

pub mod bench;
pub mod chat;
pub mod common;
pub mod diffuse;
pub mod imatrix;
pub mod inspect;
pub mod perplexity;
pub mod quantize;
pub mod repack;
pub mod run;
pub mod serve;
pub mod synth;

#[derive(Parser, Debug)]
#[command(
    name = "clover",
    version,
    about = "Run Clover and qwen35moe GGUF models on CPUs",
    override_usage = "clover <COMMAND>"
)]
pub struct Cli {
    /// How batches are summed: clover's fast orders, or llama.cpp's (ggml)
    /// for bit-level parity runs [default: clover; CLOVER_BATCH_ORDER sets it too]
    #[arg(long, global = true, value_name = "clover|ggml", value_parser = parse_order, display_order = 900)]
    pub batch_order: Option<BatchOrder>,
    #[command(subcommand)]
    pub command: Command,
}

fn parse_order(s: &str) -> Result<BatchOrder, String> {
    BatchOrder::parse(s).ok_or_else(|| format!("'{s}' is not an order (clover or ggml)"))
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Summarise a GGUF file: architecture, layers, tensors, parameters, quant mix
    Inspect(inspect::InspectArgs),
    /// Write a random-weight model file of any size, in either architecture
    Synth(synth::SynthArgs),
    /// Re-encode a GGUF file's weights in a llama-quantize mix (Q4_K_M, Q8_0, ...)
    Quantize(quantize::QuantizeArgs),
    /// Collect an importance matrix over a text for quantize --imatrix (llama-imatrix's format)
    Imatrix(imatrix::ImatrixArgs),
    /// Generate text from one prompt, streamed to stdout, timings on stderr
    Run(run::RunArgs),
    /// Chat with the model in a terminal UI (line mode when stdout is not a terminal)
    Chat(chat::ChatArgs),
    /// Generate by block diffusion (clover_moe files): denoise each block, then commit it
    Diffuse(diffuse::DiffuseArgs),
    /// Serve the model over an OpenAI-compatible HTTP API (chat, completions, streaming)
    Serve(serve::ServeArgs),
    /// Measure prompt processing and generation speed, llama-bench style
    Bench(bench::BenchArgs),
    /// Perplexity of a text file, llama-perplexity style (second half of each window)
    Perplexity(perplexity::PerplexityArgs),
    /// Write a model's layout cache ahead of time (the kernels' copies of its matrices)
    Repack(repack::RepackArgs),
}

/// Parses arguments, runs the command, and turns every error into one line on
/// stderr and a non-zero exit code.
pub fn main() -> ExitCode {
    crate::signals::install();
    let (args, rewritten) = common::rewrite_llama_flags_noting(std::env::args_os());
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e)
            if matches!(
                e.kind(),
                clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
                    | clap::error::ErrorKind::MissingSubcommand
            ) =>
        {
            // A bare `clover`: the whole usage, the commands and what they do.
            eprint!("{}", e.render());
            return ExitCode::from(2);
        }
        Err(e) if e.use_stderr() => {
            // One line: clap's first paragraph names the flag and the problem.
            let text = e.render().to_string();
            let first: Vec<&str> = text
                .lines()
                .skip_while(|l| l.trim().is_empty())
                .take_while(|l| !l.trim().is_empty())
                .map(str::trim)
                .collect();
            eprintln!("{}", common::user_spelling(&first.join(" "), &rewritten));
            return ExitCode::from(2);
        }
        Err(e) => {
            // Help and version go to stdout.
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
    };
    if let Err(e) = kernels::isa::init() {
        eprintln!("error: {e}");
        return ExitCode::FAILURE;
    }
    // The environment variable is the flag's alias.
    let order = match (cli.batch_order, std::env::var("CLOVER_BATCH_ORDER")) {
        (Some(o), _) => o,
        (None, Ok(v)) => match BatchOrder::parse(&v) {
            Some(o) => o,
            None => {
                eprintln!("error: CLOVER_BATCH_ORDER={v} is not an order (clover or ggml)");
                return ExitCode::from(2);
            }
        },
        (None, Err(_)) => BatchOrder::Clover,
    };
    order.choose();
    let result = match cli.command {
        Command::Inspect(args) => inspect::run(args),
        Command::Synth(args) => synth::run(args),
        Command::Quantize(args) => quantize::run(args),
        Command::Serve(args) => serve::run(args),
        Command::Imatrix(args) => imatrix::run(args),
        Command::Chat(args) => chat::run(args),
        Command::Run(args) => run::run(args),
        Command::Diffuse(args) => diffuse::run(args),
        Command::Bench(args) => bench::run(args),
        Command::Perplexity(args) => perplexity::run(args),
        Command::Repack(args) => repack::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!(
                "error: {}",
                common::user_spelling(&one_line(&e), &rewritten)
            );
            ExitCode::FAILURE
        }
    }
}

/// The error and its causes on one line.
fn one_line(e: &anyhow::Error) -> String {
    let mut s = String::new();
    for (i, cause) in e.chain().enumerate() {
        if i > 0 {
            s.push_str(": ");
        }
        s.push_str(&cause.to_string().replace('\n', " "));
    }
    s
}
