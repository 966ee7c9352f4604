//! `clover serve`: the OpenAI-compatible server (`crate::server`).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::bail;
use clap::Args;

use crate::spec::SpecChoice;

use super::common::{check_spec, open_model, parse_spec, spec_choice, ContextArgs, SpecArgs};
use crate::server::{serve, ServeConfig, SlotPlan};

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// The model file (default: the built-in default model)
    #[arg(short = 'm', long = "model")]
    pub model: Option<PathBuf>,
    /// Address to listen on
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port to listen on (0: any free port, printed at start)
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Slots (-np): requests generated at once, each with its own state and
    /// a share of -c
    #[arg(long = "parallel", default_value_t = 4)]
    pub parallel: usize,
    /// Requests that may wait for a slot; beyond it: 503 with Retry-After
    #[arg(long = "queue", default_value_t = 64)]
    pub queue: usize,
    /// Require `Authorization: Bearer KEY` on /v1 requests
    #[arg(long = "api-key", value_name = "KEY")]
    pub api_key: Option<String>,
    /// The model's name in /v1/models and responses (default: the file's stem)
    #[arg(long = "alias")]
    pub alias: Option<String>,
    /// Tokenize special-token texts inside chat message content (such as
    /// `<|im_start|>`) as control tokens, as llama-server does; by default
    /// they are plain text and only the chat template writes control tokens
    #[arg(long = "special-in-content")]
    pub special_in_content: bool,
    /// A Jinja chat template to use instead of the file's (llama-server's
    /// --chat-template-file)
    #[arg(long = "chat-template-file", value_name = "FILE")]
    pub chat_template_file: Option<PathBuf>,
    /// Largest request body, in bytes
    #[arg(long = "max-body", default_value_t = 8 << 20)]
    pub max_body: usize,
    /// Seconds in-flight requests get after SIGTERM before they are cut
    /// (the process exits within this and 2 s more, whatever clients do)
    #[arg(long = "shutdown-timeout", default_value_t = 10.0)]
    pub shutdown_timeout: f64,
    /// Seconds a request's head (request line and headers) may take to
    /// arrive, from the connection's start or the request's first byte
    #[arg(long = "header-timeout", default_value_t = 10.0, value_name = "SECS")]
    pub header_timeout: f64,
    /// Seconds a request's body may take to arrive after its head (then 408)
    #[arg(long = "body-timeout", default_value_t = 60.0, value_name = "SECS")]
    pub body_timeout: f64,
    /// Seconds a kept-alive connection may wait for its next request
    #[arg(long = "idle-timeout", default_value_t = 30.0, value_name = "SECS")]
    pub idle_timeout: f64,
    /// Connections served at once; at the cap a new one replaces the
    /// connection waiting longest without a request being answered, or gets
    /// 503 with Retry-After when all are being answered
    #[arg(long = "max-connections", default_value_t = 512, value_name = "N")]
    pub max_connections: usize,
    /// Origins a browser page may call the API from (CORS), comma-separated,
    /// such as `https://chat.example.com`; `*` (the default, as llama-server):
    /// any origin
    #[arg(long = "cors-origins", default_value = "*", value_name = "LIST")]
    pub cors_origins: String,
    /// Each slot decodes in its own forward pass instead of one pass for all
    /// (for A/B measurements)
    #[arg(long = "no-batching")]
    pub no_batching: bool,
    /// How slots decode: none (plain), draft-self (block-diffusion drafts,
    /// clover_moe files), mtp (drafts from the file's multi-token-prediction
    /// block), ngram (drafts from each request's own n-grams, any file);
    /// parameters after a colon, stages chained with '+' or by
    /// repeating the flag; the draft length is adaptive
    #[arg(long = "spec-type", value_name = "TYPE", value_parser = parse_spec)]
    pub spec_type: Vec<SpecChoice>,
    #[command(flatten)]
    pub spec: SpecArgs,
    #[command(flatten)]
    pub context: ContextArgs,
}

pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    if args.parallel == 0 {
        bail!("-np must be at least 1");
    }
    let seconds = |flag: &str, v: f64, min: f64| -> anyhow::Result<Duration> {
        if !(v.is_finite() && v >= min && v <= 86_400.0) {
            bail!("{flag} must be a number of seconds from {min} to 86400");
        }
        Ok(Duration::from_secs_f64(v))
    };
    let shutdown_timeout = seconds("--shutdown-timeout", args.shutdown_timeout, 0.0)?;
    let limits = crate::server::conn::Limits {
        header: seconds("--header-timeout", args.header_timeout, 0.1)?,
        idle: seconds("--idle-timeout", args.idle_timeout, 0.1)?,
        max_connections: args.max_connections,
    };
    let body_timeout = seconds("--body-timeout", args.body_timeout, 0.1)?;
    let cors_origins = match args.cors_origins.trim() {
        "*" => None,
        list => {
            let origins: Vec<String> = list
                .split(',')
                .map(|o| o.trim().trim_end_matches('/').to_string())
                .filter(|o| !o.is_empty())
                .collect();
            if let Some(bad) = origins.iter().find(|o| !o.contains("://")) {
                bail!("--cors-origins: '{bad}' is not an origin (scheme://host[:port]) or *");
            }
            Some(origins)
        }
    };
    if args.max_connections == 0 {
        bail!("--max-connections must be at least 1");
    }
    // -c is the total, split between the slots, as llama-server splits it.
    let total = args
        .context
        .ctx_size
        .unwrap_or(super::common::DEFAULT_CTX * args.parallel);
    let n_ctx_slot = total / args.parallel;
    if n_ctx_slot < 16 {
        bail!(
            "-c {total} leaves {n_ctx_slot} positions per slot for -np {}: too few",
            args.parallel
        );
    }
    let mut session = args.context.session_options()?;
    session.n_ctx = n_ctx_slot;
    session.validate()?;
    let choice = spec_choice(&args.spec_type);
    let spec = match choice.is_none() {
        true => None,
        false => Some((choice.configure(args.spec.config(None)?), choice.clone())),
    };
    let model_name = args.alias.clone().unwrap_or_else(|| match &args.model {
        Some(p) => p
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "model".into()),
        None => "clover-tiny-kjv".into(),
    });
    let (path, no_mmap) = (args.model.clone(), args.context.no_mmap);
    args.context.apply_page_options();
    let spec_args = args.spec.clone();
    let special_in_content = args.special_in_content;
    let template = match &args.chat_template_file {
        Some(p) => Some(read_template(p)?),
        None => None,
    };
    let load = Box::new(move || {
        let mut m = open_model(path.as_deref(), no_mmap)?;
        m.special_in_content = special_in_content;
        if let Some(source) = &template {
            m.use_template(source)
                .map_err(|e| anyhow::anyhow!("--chat-template-file: {e}"))?;
        }
        // Chat requests render the template: a file whose template does not
        // compile is refused at start.
        m.template()?;
        spec_args.apply_draft_pool(&mut m.model)?;
        check_spec(&choice, &mut m.model)?;
        m.model.check_memory(&crate::model::StateOptions {
            max_batch: session.n_ubatch.min(session.n_batch).min(n_ctx_slot),
            type_k: session.type_k,
            type_v: session.type_v,
            ..crate::model::StateOptions::new(n_ctx_slot * args.parallel)
        })?;
        Ok(Arc::new(m))
    });
    serve(
        ServeConfig {
            host: args.host,
            port: args.port,
            api_key: args.api_key,
            model_name,
            n_ctx_slot,
            max_body: args.max_body,
            body_timeout,
            limits,
            cors_origins,
            shutdown_timeout,
        },
        SlotPlan {
            load,
            session,
            n_slots: args.parallel,
            max_queue: args.queue,
            spec,
            batching: !args.no_batching,
        },
    )
}

/// The largest chat template file read (real ones are a few KiB).
const MAX_TEMPLATE_BYTES: u64 = 1 << 20;

/// A chat template file: a regular file of at most 1 MiB of UTF-8.
fn read_template(path: &std::path::Path) -> anyhow::Result<String> {
    use std::io::Read;
    let (file, _guard) = crate::output::open_text_input(path)
        .map_err(|e| anyhow::anyhow!("--chat-template-file {}: {e}", path.display()))?;
    let mut bytes = Vec::new();
    file.take(MAX_TEMPLATE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| anyhow::anyhow!("--chat-template-file {}: {e}", path.display()))?;
    if bytes.len() as u64 > MAX_TEMPLATE_BYTES {
        bail!("--chat-template-file {}: larger than 1 MiB", path.display());
    }
    String::from_utf8(bytes)
        .map_err(|_| anyhow::anyhow!("--chat-template-file {}: not UTF-8", path.display()))
}
