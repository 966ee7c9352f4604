//! `clover run`: one prompt, streamed to stdout (like llama-completion), then
//! llama.cpp's `llama_perf_*` timing lines on stderr, and with `--json` a
//! machine-readable summary as the last line of stdout.

use std::io::{self, Write};
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::Args;
use serde_json::json;

use crate::chat::ChatMessage;
use crate::constrain::JsonGuard;
use crate::engine::SpecStep;
use crate::engine::{generate, EngineError, GenEvent, GenOptions, Generation, PlainStep, Session};
use crate::sample::Sampler;
use crate::spec::replay::Profile;
use crate::spec::{SpecChoice, SpecStats};

use super::common::{
    check_spec, n_predict, open_model, parse_spec, read_text_file, spec_choice, ContextArgs,
    SamplingArgs, SpecArgs, MAX_PROMPT_FILE, SPEC_TYPE_HELP,
};

#[derive(Args, Debug)]
pub struct RunArgs {
    /// The GGUF model file (default: the built-in default model, clover-tiny-kjv)
    #[arg(short = 'm', long = "model")]
    pub model: Option<PathBuf>,
    /// The prompt
    #[arg(short = 'p', long = "prompt", conflicts_with = "file")]
    pub prompt: Option<String>,
    /// Read the prompt from a file
    #[arg(short = 'f', long = "file")]
    pub file: Option<PathBuf>,
    /// Tokens to generate (-1: until end of generation or a full context)
    #[arg(
        short = 'n',
        long = "n-predict",
        default_value_t = -1,
        allow_negative_numbers = true
    )]
    pub n_predict: i64,
    /// Keep generating past end-of-generation tokens (as llama.cpp's
    /// --ignore-eos); -n or a full context ends the run
    #[arg(long = "ignore-eos")]
    pub ignore_eos: bool,
    #[command(flatten)]
    pub context: ContextArgs,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    /// Use the prompt exactly as given (the default)
    #[arg(long, conflicts_with = "chat")]
    pub raw: bool,
    /// Wrap the prompt in the model's chat template as a user turn, with the
    /// assistant's generation prompt
    #[arg(long)]
    pub chat: bool,
    /// System prompt (with --chat)
    #[arg(long = "system", value_name = "TEXT", requires = "chat")]
    pub system: Option<String>,
    /// After the text, print a JSON summary (tokens, timings) as the last line
    #[arg(long)]
    pub json: bool,
    /// The reply is one JSON object (OpenAI's JSON mode): tokens that no JSON
    /// object continues with are masked; decodes token by token
    #[arg(long = "json-mode")]
    pub json_mode: bool,
    #[arg(long = "spec-type", value_name = "TYPE", value_parser = parse_spec, help = SPEC_TYPE_HELP)]
    pub spec_type: Vec<SpecChoice>,
    #[command(flatten)]
    pub spec: SpecArgs,
    /// With --spec-type: write the measured per-position acceptance
    /// to FILE (JSON), for `clover bench --spec-replay` (best with --spec-fixed,
    /// so that every round drafts every position)
    #[arg(long = "spec-profile-out", value_name = "FILE")]
    pub spec_profile_out: Option<PathBuf>,
}

pub fn run(args: RunArgs) -> anyhow::Result<()> {
    // Everything that needs no model is checked before loading it.
    let session_opts = args.context.session_options()?;
    let params = args.sampling.params()?;
    let n_predict = n_predict(args.n_predict)?;
    let choice = spec_choice(&args.spec_type);
    let spec_cfg = match choice.is_none() {
        true => None,
        false => Some(choice.configure(args.spec.config(n_predict)?)),
    };
    if args.json_mode && spec_cfg.is_some() {
        anyhow::bail!("--json-mode decodes token by token: drop --spec-type {choice}");
    }
    if args.spec_profile_out.is_some() && spec_cfg.is_none() {
        anyhow::bail!(
            "--spec-profile-out needs --spec-type draft-self (or another type that drafts)"
        );
    }
    let text = match (&args.prompt, &args.file) {
        (Some(p), _) => p.clone(),
        (None, Some(f)) => read_text_file(f, MAX_PROMPT_FILE, "prompt file")?,
        (None, None) => anyhow::bail!("no prompt: pass -p TEXT or -f FILE"),
    };
    if text.is_empty() {
        return Err(EngineError::EmptyPrompt.into());
    }
    args.context.apply_page_options();
    let mut model = open_model(args.model.as_deref(), args.context.no_mmap)?;
    args.spec.apply_draft_pool(&mut model.model)?;
    check_spec(&choice, &mut model.model)?;
    let (prompt, starts_thinking) = if args.chat {
        let mut msgs = Vec::new();
        if let Some(s) = &args.system {
            msgs.push(ChatMessage::system(s.as_str()));
        }
        msgs.push(ChatMessage::user(text.as_str()));
        let (rendered, ids) = model.chat_prompt(&msgs, true)?;
        (ids, rendered.trim_end().ends_with("<think>"))
    } else {
        (model.tokenize(&text)?, false)
    };
    if prompt.is_empty() {
        return Err(EngineError::EmptyPrompt.into());
    }
    if prompt.len() > session_opts.n_ctx {
        return Err(EngineError::PromptTooLong {
            n_prompt: prompt.len(),
            n_ctx: session_opts.n_ctx,
        }
        .into());
    }
    let mut session = args.context.new_session(Arc::new(model))?;
    let mut sampler = Sampler::new(params);
    if args.json_mode {
        let model = Arc::clone(session.model());
        sampler.constrain(Box::new(JsonGuard::json(model, starts_thinking)));
    }
    let opts = GenOptions {
        n_predict,
        starts_thinking,
        checkpoint_prompt: false,
        ignore_eos: args.ignore_eos,
    };
    let stdout = io::stdout();
    let mut out = stdout.lock();
    let mut write_error: Option<io::Error> = None;
    let mut sink = |ev: GenEvent<'_>| {
        let text = match ev {
            GenEvent::Token { text, .. } | GenEvent::Tail { text, .. } => text,
            _ => return ControlFlow::Continue(()),
        };
        if text.is_empty() {
            return ControlFlow::Continue(());
        }
        match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
            Ok(()) => ControlFlow::Continue(()),
            Err(e) => {
                write_error = Some(e);
                ControlFlow::Break(())
            }
        }
    };
    let mut spec_step = None;
    if let (Some(cfg), Some(drafter)) = (spec_cfg, choice.drafter()) {
        spec_step = Some(SpecStep::new(cfg, drafter));
    }
    let step: &mut dyn crate::engine::Step = match spec_step.as_mut() {
        Some(s) => s,
        None => &mut PlainStep,
    };
    let gen = generate(&mut session, &prompt, &mut sampler, step, &opts, &mut sink)?;
    if let Some(e) = write_error {
        return Err(anyhow::Error::new(e).context("writing the generated text"));
    }
    if !gen.text.is_empty() && !gen.text.ends_with('\n') {
        writeln!(out)?;
    }
    if args.json {
        let stats = spec_step.as_ref().map(|s| &s.spec.stats);
        writeln!(out, "{}", summary(&session, &sampler, &gen, stats))?;
    }
    out.flush()?;
    eprint!("{}", gen.timings.llama_perf());
    if let Some(s) = &spec_step {
        eprint!("{}", s.spec.stats.report());
        if let Some(path) = &args.spec_profile_out {
            let source = format!(
                "{}, {} tokens, {}",
                session.model().name,
                gen.tokens.len(),
                if s.spec.cfg.adaptive {
                    "adaptive draft length"
                } else {
                    "fixed draft length"
                }
            );
            let profile = Profile::from_stats(&s.spec.stats, &source);
            if profile.conditional.is_empty() {
                anyhow::bail!(
                    "--spec-profile-out {}: no draft was verified ({} tokens generated), so \
                     there is no profile to write",
                    path.display(),
                    gen.tokens.len()
                );
            }
            crate::output::write_file_atomic(path, profile.to_json().as_bytes())
                .with_context(|| format!("--spec-profile-out {}", path.display()))?;
            eprintln!(
                "spec: acceptance profile ({} positions, {} rounds) written to {}",
                profile.conditional.len(),
                profile.rounds,
                path.display()
            );
        }
    }
    Ok(())
}

/// The `--json` summary (with the speculation counters when drafting).
fn summary(
    session: &Session,
    sampler: &Sampler,
    gen: &Generation,
    spec: Option<&SpecStats>,
) -> serde_json::Value {
    let m = session.model();
    let t = &gen.timings;
    let spec = spec.map(|s| {
        json!({
            "drafts_proposed": s.drafts_proposed,
            "drafts_accepted": s.drafts_accepted,
            "accepted_relaxed": s.accepted_relaxed,
            "proposed_by_pos": s.proposed_by_pos,
            "accepted_by_pos": s.accepted_by_pos,
            "reached_by_pos": s.reached_by_pos,
            "accepted_len_hist": s.accepted_len_hist,
            "draft_passes": s.draft_passes,
            "verify_passes": s.verify_passes,
            "plain_passes": s.plain_passes,
            "tokens_emitted": s.tokens_emitted,
            "total_ms": s.total_ns as f64 / 1e6,
        })
    });
    json!({
        "spec": spec,
        "model": m.path.display().to_string(),
        "arch": m.model.config.arch.name(),
        "n_ctx": session.n_ctx(),
        "threads": session.threads(),
        "seed": sampler.seed(),
        "prompt_tokens": gen.prompt,
        "generated_tokens": gen.tokens,
        "n_prompt_tokens": gen.prompt.len(),
        "n_generated_tokens": gen.tokens.len(),
        "stop_reason": gen.stop.as_str(),
        "eog_token": gen.eog,
        "text": gen.text,
        "timings": {
            "load_ms": t.load_ms,
            "prompt_eval_ms": t.prompt_ms,
            "prompt_eval_tokens": t.prompt_tokens,
            "prompt_tokens_per_second": t.prompt_tps(),
            "eval_ms": t.eval_ms,
            "eval_runs": t.eval_runs,
            "tokens_per_second": t.eval_tps(),
            "sample_ms": t.sample_ms,
            "sample_runs": t.sample_runs,
            "total_ms": t.total_ms,
        },
    })
}
