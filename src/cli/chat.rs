//! `clover chat`: the terminal UI, or a line-based chat when stdout is not a terminal.
//! Without `-m` it runs the built-in default model (`engine::default_model`).

use std::io::{self, IsTerminal};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;

use crate::engine::ChatSession;
use crate::spec::SpecChoice;
use crate::tui::demo::DemoEngine;
use crate::tui::transcript::Transcript;
use crate::tui::{run_lines, run_tui, ChatEngine, ChatOptions};

use super::common::{
    check_spec, n_predict, parse_spec, read_text_file, spec_choice, ContextArgs, SamplingArgs,
    SpecArgs, MAX_PROMPT_FILE,
};

#[derive(Args, Debug)]
pub struct ChatArgs {
    /// The GGUF model file (default: the built-in clover-tiny-kjv, written to the
    /// cache directory on first use)
    #[arg(short = 'm', long = "model")]
    pub model: Option<PathBuf>,
    #[command(flatten)]
    pub context: ContextArgs,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    /// Longest reply in tokens (-1: until end of generation or a full context)
    #[arg(
        short = 'n',
        long = "n-predict",
        default_value_t = 1024,
        allow_negative_numbers = true
    )]
    pub n_predict: i64,
    /// Decoding mode to start with (default: draft-self for the built-in
    /// model, none with -m; F2 toggles drafting live, by n-gram drafting on
    /// a file without the block-diffusion path). none: plain decoding;
    /// draft-self: block-diffusion drafts (clover_moe files); ngram: drafts
    /// from the conversation's own n-grams (any file); parameters after a
    /// colon, stages chained with '+' or by repeating the flag
    #[arg(long = "spec-type", value_name = "TYPE", value_parser = parse_spec)]
    pub spec_type: Vec<SpecChoice>,
    #[command(flatten)]
    pub spec: SpecArgs,
    /// Run the built-in demo engine (no model needed)
    #[arg(long, conflicts_with = "model")]
    pub demo: bool,
    /// System prompt (with --load: replaces the saved one)
    #[arg(long = "system", value_name = "TEXT")]
    pub system: Option<String>,
    /// Continue a conversation saved with Ctrl-S (its .json file)
    #[arg(long = "load", value_name = "FILE")]
    pub load: Option<PathBuf>,
    /// Where Ctrl-S saves the conversation (default: the current directory;
    /// files appear only when complete, and a symlink is followed to its
    /// regular target)
    #[arg(long = "save-dir", value_name = "DIR")]
    pub save_dir: Option<PathBuf>,
}

/// The demo's simulated cost of one forward pass.
const DEMO_TOKEN_DELAY: Duration = Duration::from_millis(30);

pub fn run(args: ChatArgs) -> anyhow::Result<()> {
    // Checked before the model is loaded.
    args.context.session_options()?;
    let params = args.sampling.params()?;
    let n_predict = n_predict(args.n_predict)?;
    let choice = spec_choice(&args.spec_type);
    let spec_cfg = choice.configure(args.spec.config(n_predict)?);
    let loaded = match &args.load {
        Some(path) => {
            let text = read_text_file(path, MAX_PROMPT_FILE, "saved conversation")?;
            Some(
                Transcript::parse(text.as_bytes())
                    .with_context(|| format!("--load {}", path.display()))?,
            )
        }
        None => None,
    };
    let mut opts = ChatOptions {
        system: args
            .system
            .clone()
            .or_else(|| loaded.as_ref().and_then(|t| t.system.clone())),
        spec: match args.spec_type.is_empty() {
            false => !choice.is_none(),
            true => args.model.is_none() && !args.demo,
        },
        notice: None,
        history: loaded.as_ref().map(Transcript::history).unwrap_or_default(),
        save_dir: args.save_dir.clone(),
    };
    if let Some(path) = &args.load {
        opts.notice = Some(format!(
            "continuing the {} saved messages of {}",
            opts.history.len(),
            path.display()
        ));
    }
    if args.demo {
        let threads = args
            .context
            .threads
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        let engine = DemoEngine::new(threads, args.context.ctx(), DEMO_TOKEN_DELAY);
        return front_end(engine, &opts);
    }
    let mmap = !args.context.no_mmap;
    args.context.apply_page_options();
    let (mut model, default) = match &args.model {
        Some(path) => (super::common::load_model_file(path, mmap)?, None),
        None => super::common::load_default(mmap)?,
    };
    // The chat renders the template every turn: refuse a broken one now.
    model.template()?;
    args.spec.apply_draft_pool(&mut model.model)?;
    check_spec(&choice, &mut model.model)?;
    // F2 drafts through the MTP block on files that have one (and no
    // diffusion path): the state keeps its cache from the first prompt.
    if choice.is_none() && !model.model.has_diffusion() && model.model.has_mtp() {
        model.model.mtp = true;
    }
    let session = args.context.new_session(Arc::new(model))?;
    let mut engine = ChatSession::new(session, params, n_predict);
    // What F2 turns on: the chosen drafter, else the engine's default (the
    // model's diffusion path, its MTP block, or the text's n-grams).
    if let Some(drafter) = choice.drafter() {
        engine.set_drafter(drafter, spec_cfg.n_max);
    }
    engine.configure_spec(&spec_cfg);
    if let Some(d) = &default {
        engine.set_display_name(d.display_name());
        opts.notice = Some(match opts.notice.take() {
            Some(loaded) => format!("{loaded}; {}", d.note()),
            None => d.note(),
        });
    }
    front_end(engine, &opts)
}

/// The full-screen UI on a terminal, else line mode (the notice goes to stderr).
fn front_end<E: ChatEngine>(mut engine: E, opts: &ChatOptions) -> anyhow::Result<()> {
    if io::stdout().is_terminal() {
        run_tui(engine, opts).context("terminal UI")
    } else {
        if let Some(n) = &opts.notice {
            eprintln!("clover: {n}");
        }
        run_lines(&mut engine, opts, io::stdin().lock(), io::stdout().lock()).context("chat")
    }
}
