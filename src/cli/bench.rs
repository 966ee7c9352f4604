//! `clover bench`: llama-bench's table (pp / tg, mean ± sd over repetitions)
//! or its JSON records on stdout; load time, time to first token, decode
//! traffic and effective bandwidth on stderr. `--membw` measures the
//! machine's streaming read bandwidth instead. The rig is `crate::bench`.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};
use clap::{Args, ValueEnum};
use kernels::GgmlType;

use crate::bench::gen::{GenMeasured, GenMode, GenRunner};
use crate::bench::report::{self, Decode, ModelInfo, RunInfo, TestSpec};
use crate::bench::{membw, passes, run_test, Traffic};
use crate::engine::load::tokenizer_spec;
use crate::gguf::GgufFile;
use crate::model::Model;
use crate::spec::replay::Profile;
use crate::spec::speculator::SpecConfig;
use crate::tokenizer::Tokenizer;

use crate::spec::SpecChoice;

use super::common::SpecArgs;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    Md,
    Json,
}

/// A comma list of `--spec-type` choices.
#[derive(Clone, Debug)]
pub struct SpecList(pub Vec<SpecChoice>);

fn parse_spec_list(s: &str) -> Result<SpecList, String> {
    SpecChoice::parse_list(s).map(SpecList)
}

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// The GGUF model file (default: the built-in default model)
    #[arg(short = 'm', long = "model")]
    pub model: Option<PathBuf>,
    /// Prompt lengths (comma list; 0 skips pp)
    #[arg(
        short = 'p',
        long = "n-prompt",
        value_delimiter = ',',
        default_value = "512"
    )]
    pub n_prompt: Vec<usize>,
    /// Tokens to generate (comma list; 0 skips tg)
    #[arg(
        short = 'n',
        long = "n-gen",
        value_delimiter = ',',
        default_value = "128"
    )]
    pub n_gen: Vec<usize>,
    /// Context tokens processed before each test (comma list)
    #[arg(
        short = 'd',
        long = "n-depth",
        value_delimiter = ',',
        default_value = "0"
    )]
    pub n_depth: Vec<usize>,
    /// Repetitions of each test
    #[arg(short = 'r', long = "repetitions", default_value_t = 5)]
    pub reps: usize,
    /// Threads (comma list; default: all cores)
    #[arg(short = 't', long = "threads", value_delimiter = ',')]
    pub threads: Vec<usize>,
    /// Logical batch size (-b)
    #[arg(short = 'b', long = "batch-size", default_value_t = 2048)]
    pub n_batch: usize,
    /// Physical batch size (-ub): tokens per forward batch
    #[arg(long = "ubatch-size", default_value_t = 512)]
    pub n_ubatch: usize,
    /// KV cache type for K (-ctk): f32, f16, bf16, q8_0
    #[arg(long = "cache-type-k", default_value = "f16")]
    pub type_k: String,
    /// KV cache type for V (-ctv): f32, f16, bf16, q8_0
    #[arg(long = "cache-type-v", default_value = "f16")]
    pub type_v: String,
    /// Output format: md (llama-bench's table) or json
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Md)]
    pub output: OutputFormat,
    /// Seed of the random token ids
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Measure the streaming read bandwidth (no model needed)
    #[arg(long)]
    pub membw: bool,
    /// With --membw: buffer size in MiB
    #[arg(long = "membw-mib", default_value_t = 1024)]
    pub membw_mib: usize,
    /// tg tests decode real text greedily, once per listed mode (comma list of
    /// none, draft-self, ngram, or chains of stages joined by '+'; a stage's
    /// parameters follow a colon: ngram:n_max=32,ngram_size_n=6), instead of
    /// feeding random token ids
    #[arg(long = "spec-type", value_name = "LIST", value_parser = parse_spec_list)]
    pub spec_type: Vec<SpecList>,
    /// With --spec-type: the text prompt the tg tests continue
    #[arg(long = "gen-prompt", default_value = "In the beginning")]
    pub gen_prompt: String,
    /// With --spec-type: sample at this temperature (llama.cpp's default
    /// chain, a fixed seed) instead of decoding greedily; the modes then emit
    /// different tokens from the same distribution
    #[arg(
        long = "gen-temp",
        default_value_t = 0.0,
        allow_negative_numbers = true
    )]
    pub gen_temp: f32,
    /// With --spec-type: how drafts are made and accepted
    #[command(flatten)]
    pub spec: SpecArgs,
    /// With --spec-type draft-self or mtp: SIMULATED acceptance. The draft, verify and
    /// commit passes run for real, but which drafts are accepted follows this
    /// profile (per-position conditional acceptance, as written by `clover run
    /// --spec-profile-out`); a perfect-drafter row (the ceiling) is added
    #[arg(long = "spec-replay", value_name = "PROFILE")]
    pub spec_replay: Option<PathBuf>,
    /// Instead of the tests: time a plain decode step and verify and draft
    /// passes of these token counts (comma list: diffusion drafts on
    /// clover_moe files, MTP drafts on files with the block), interleaved
    /// over -r repetitions, per -t, at the first -d depth (at least 1)
    #[arg(long = "pass-costs", value_delimiter = ',')]
    pub pass_costs: Vec<usize>,
    /// Also print, for each pp and tg test (with --pass-costs: each pass
    /// kind and length), where the time goes by op kind (norms, GDN
    /// projections, conv, recurrence, attention, router, routed and shared
    /// experts, output head): time per token (per pass), share, bytes
    /// streamed and their rate, beside a read-bandwidth probe
    #[arg(long)]
    pub profile: bool,
    /// Before mapping the model, drop its pages from the page cache so that
    /// they are read back in large pages (for a file written recently; see
    /// the load note)
    #[arg(long)]
    pub recache: bool,
    /// Lock the model in memory after loading it (mlock, as llama-bench's
    /// `-lm mmap+mlock`): its pages cannot be evicted between or during the
    /// tests
    #[arg(long)]
    pub mlock: bool,
    /// Where the layout cache goes, or off (as `clover run --layout-cache`)
    #[arg(long = "layout-cache", value_name = "DIR|off")]
    pub layout_cache: Option<String>,
}

/// A plain greedy tg result: (threads, n_gen, depth), t/s, the tokens.
struct GreedyRun {
    key: (usize, usize, usize),
    ts: f64,
    samples_ns: Vec<u64>,
    tokens: Vec<u32>,
}

/// The median over repetitions of plain time ÷ speculative time: the
/// repetitions of the two ran interleaved, so each pair saw the same machine,
/// and the median of the pairs shrugs off a preempted one.
fn paired_speedup(plain_ns: &[u64], spec_ns: &[u64]) -> f64 {
    let mut r: Vec<f64> = plain_ns
        .iter()
        .zip(spec_ns)
        .map(|(&p, &s)| p as f64 / s.max(1) as f64)
        .collect();
    r.sort_by(f64::total_cmp);
    match r.len() {
        0 => 0.0,
        n if n % 2 == 1 => r[n / 2],
        n => 0.5 * (r[n / 2 - 1] + r[n / 2]),
    }
}

fn cache_type(flag: &str, s: &str) -> anyhow::Result<GgmlType> {
    match GgmlType::from_name(s) {
        Some(t @ (GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 | GgmlType::Q8_0)) => Ok(t),
        _ => bail!("{flag} {s}: KV cache type must be f32, f16, bf16 or q8_0"),
    }
}

fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

pub fn run(args: BenchArgs) -> anyhow::Result<()> {
    if args.reps == 0 {
        bail!("-r must be at least 1");
    }
    let threads = if args.threads.is_empty() {
        vec![default_threads()]
    } else {
        args.threads.clone()
    };
    if threads.contains(&0) {
        bail!("-t must be at least 1");
    }
    if args.n_batch == 0 || args.n_ubatch == 0 {
        bail!("-b and -ub must be at least 1");
    }
    if args.membw {
        return run_membw(&args, &threads);
    }
    if !(args.gen_temp.is_finite() && args.gen_temp >= 0.0) {
        bail!("--gen-temp must be a finite temperature, at least 0");
    }
    if args.gen_temp > 0.0 && args.spec_replay.is_some() {
        bail!("--spec-replay replays greedy acceptance: it needs --gen-temp 0");
    }
    if args.pass_costs.contains(&0) {
        bail!("--pass-costs token counts must be at least 1");
    }
    // Every choice lives as long as the command: test specs refer to them.
    let choices: &'static [SpecChoice] = Box::leak(
        args.spec_type
            .iter()
            .flat_map(|l| l.0.iter().cloned())
            .collect::<Vec<_>>()
            .into_boxed_slice(),
    );
    let replay = match &args.spec_replay {
        Some(path) => {
            if !choices.iter().any(SpecChoice::replays) {
                bail!(
                    "--spec-replay needs --spec-type draft-self or mtp (e.g. --spec-type \
                     none,draft-self)"
                );
            }
            Some(Profile::load(path).map_err(|e| anyhow::anyhow!("--spec-replay {e}"))?)
        }
        None => None,
    };
    let type_k = cache_type("-ctk", &args.type_k)?;
    let type_v = cache_type("-ctv", &args.type_v)?;
    let mut tests = Vec::new();
    for &t in &threads {
        for &d in &args.n_depth {
            let base = TestSpec {
                n_prompt: 0,
                n_gen: 0,
                n_depth: d,
                n_threads: t,
                n_batch: args.n_batch,
                n_ubatch: args.n_ubatch,
                decode: Decode::Random,
            };
            tests.extend(args.n_prompt.iter().filter(|&&p| p > 0).map(|&p| TestSpec {
                n_prompt: p,
                ..base
            }));
            let decodes: Vec<Decode> = if choices.is_empty() {
                vec![Decode::Random]
            } else {
                choices
                    .iter()
                    .flat_map(|c| match (c, &replay) {
                        (c, _) if c.is_none() => vec![Decode::Greedy],
                        (c, Some(_)) if c.replays() => vec![Decode::Replay(c), Decode::Ceiling(c)],
                        (c, _) if *c == SpecChoice::draft_self() => vec![Decode::DraftSelf],
                        (c, _) => vec![Decode::Spec(c)],
                    })
                    .collect()
            };
            for &n in args.n_gen.iter().filter(|&&n| n > 0) {
                for &decode in &decodes {
                    tests.push(TestSpec {
                        n_gen: n,
                        decode,
                        ..base
                    });
                }
            }
        }
    }
    if tests.is_empty() && args.pass_costs.is_empty() {
        bail!("nothing to run: every -p and -n is 0");
    }
    let spec_cfg = args.spec.config(None)?;
    let default_path;
    let path = match args.model.as_deref() {
        Some(p) => p,
        None => {
            default_path = crate::engine::default_model::ensure(false)
                .context("default model")?
                .path;
            default_path.as_path()
        }
    };
    crate::gguf::pages::set_recache(args.recache);
    crate::gguf::pages::set_mlock(args.mlock);
    if let Some(s) = &args.layout_cache {
        crate::engine::packed_cache::set(crate::engine::packed_cache::parse_setting(s));
    }
    let t_open = Instant::now();
    let file = GgufFile::open_lazy(path).with_context(|| format!("{}", path.display()))?;
    // Read in, with the kernels' copies from the layout cache or made here.
    for note in crate::engine::load::load_layout(&file, path, &mut |_, _, _| {}) {
        eprintln!("{note}");
    }
    let open_ms = ms(t_open.elapsed().as_nanos() as u64);
    super::common::report_pages(&file, path);
    super::common::lock_if_asked(&file, path);
    let t_bind = Instant::now();
    let mut model = Model::load(&file).with_context(|| format!("{}", path.display()))?;
    args.spec.apply_draft_pool(&mut model)?;
    let bind_ms = ms(t_bind.elapsed().as_nanos() as u64);
    // The text prompt of the greedy tg tests, tokenized by the model's
    // tokenizer (from the same open file: the model is loaded once).
    let gen_prompt = if choices.is_empty() {
        Vec::new()
    } else {
        for c in choices {
            super::common::check_spec(c, &mut model)?;
        }
        let tok = Tokenizer::new(&tokenizer_spec(&file)?)?;
        let p = tok.encode(&args.gen_prompt, true)?;
        if p.is_empty() {
            bail!("--gen-prompt is empty");
        }
        p
    };
    if !args.pass_costs.is_empty() && !model.has_diffusion() && !model.has_mtp() {
        bail!(
            "--pass-costs needs a file that drafts: a clover_moe file with the diffusion \
             tensors, or one with an MTP block"
        );
    }
    let info = model_info(&file, &model, path);
    // The tensors the loader repacked for the kernels (a second copy).
    let packed = file.derived_tensors().filter(|p| !p.is_empty());
    let packed_note = if let Some(packed) = packed {
        format!(
            ", {} tensors repacked: {:.1} MiB{}",
            packed.len(),
            packed.bytes() as f64 / (1u64 << 20) as f64,
            if packed.is_mapped() {
                " (layout cache)"
            } else {
                ""
            }
        )
    } else {
        String::new()
    };
    eprintln!(
        "load: {:.1} ms (read in and repacked {open_ms:.1} ms, bind {bind_ms:.1} ms{packed_note})",
        open_ms + bind_ms
    );

    if !args.pass_costs.is_empty() {
        return run_pass_costs(&args, &model, &threads);
    }

    let run = RunInfo {
        build: format!("clover {}", env!("CARGO_PKG_VERSION")),
        cpu_info: format!("isa {}", model.kt.isa),
        type_k: type_k.name().to_lowercase(),
        type_v: type_v.name().to_lowercase(),
        test_time: unix_time(),
    };
    if args.output == OutputFormat::Md {
        print!("{}", report::markdown_header());
    }
    let mut records = Vec::new();
    let mut first_token_done = false;
    // Greedy tg results, for the speed-up line of the matching draft-self test.
    let mut greedy: Vec<GreedyRun> = Vec::new();
    let draft_self = SpecChoice::draft_self();
    let choice_of = |decode: Decode| match decode {
        Decode::Random | Decode::Greedy => SpecChoice::default(),
        Decode::Spec(c) => c.clone(),
        Decode::DraftSelf => draft_self.clone(),
        Decode::Replay(c) | Decode::Ceiling(c) => c.clone(),
    };
    let gen_mode = |decode: Decode| GenMode {
        temp: args.gen_temp,
        choice: choice_of(decode),
        // The ceiling drafts the longest block every round: with every draft
        // accepted there is nothing for the adaptive controller to learn, and
        // its caution (short explorations from an uninformed prior) would
        // hide what a perfect drafter makes of these pass costs.
        spec: match decode {
            Decode::Ceiling(_) => SpecConfig {
                adaptive: false,
                ..choice_of(decode).configure(spec_cfg.clone())
            },
            _ => choice_of(decode).configure(spec_cfg.clone()),
        },
        replay: match decode {
            Decode::Replay(_) => replay.clone(),
            Decode::Ceiling(_) => Some(Profile::perfect(spec_cfg.n_max)),
            _ => None,
        },
    };
    let key = |t: &TestSpec| (t.n_threads, t.n_gen, t.n_depth);
    // The measured generation tests of the current group (the modes of one
    // test, whose repetitions run interleaved), in order.
    let mut pending: VecDeque<GenMeasured> = VecDeque::new();
    for (i, &spec) in tests.iter().enumerate() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(spec.n_threads)
            .build()
            .context("thread pool")?;
        let m = if spec.decode == Decode::Random {
            pool.install(|| {
                run_test(
                    &model,
                    spec,
                    args.reps,
                    (type_k, type_v),
                    args.seed,
                    args.profile,
                )
            })
            .with_context(|| spec.name())?
        } else {
            if pending.is_empty() {
                let group: Vec<TestSpec> = tests[i..]
                    .iter()
                    .take_while(|t| t.decode != Decode::Random && key(t) == key(&spec))
                    .copied()
                    .collect();
                pending = pool.install(|| {
                    let mut runners = Vec::with_capacity(group.len());
                    for &t in &group {
                        let r = GenRunner::new(
                            &model,
                            t,
                            type_k,
                            type_v,
                            &gen_prompt,
                            gen_mode(t.decode),
                        );
                        runners.push(r.with_context(|| t.name())?);
                    }
                    // ABBA: the order flips every repetition, so that
                    // running first or second favours no mode.
                    for rep in 0..args.reps {
                        let mut order: Vec<usize> = (0..group.len()).collect();
                        if rep % 2 == 1 {
                            order.reverse();
                        }
                        for i in order {
                            runners[i].rep().with_context(|| group[i].name())?;
                        }
                    }
                    anyhow::Ok(runners.into_iter().map(GenRunner::finish).collect())
                })?;
            }
            let g = pending
                .pop_front()
                .expect("one result per test of the group");
            let replayed = gen_mode(spec.decode).replay;
            let key = key(&spec);
            let ts = g.measured.result.avg_ts();
            if spec.decode == Decode::Greedy {
                greedy.push(GreedyRun {
                    key,
                    ts,
                    samples_ns: g.measured.result.samples_ns.clone(),
                    tokens: g.tokens.clone(),
                });
            } else {
                let basis = match (&replayed, spec.decode) {
                    (Some(p), Decode::Replay(_)) => format!(
                        "SIMULATED acceptance replayed from {} ({}, {} rounds; by position {})",
                        args.spec_replay
                            .as_deref()
                            .unwrap_or(Path::new("?"))
                            .display(),
                        p.source,
                        p.rounds,
                        p.unconditional()
                            .iter()
                            .map(|a| format!("{a:.3}"))
                            .collect::<Vec<_>>()
                            .join(" ")
                    ),
                    (Some(_), _) => format!(
                        "SIMULATED acceptance: every draft accepted, {} drafts every round",
                        spec_cfg.n_max
                    ),
                    (None, _) => "measured acceptance".to_string(),
                };
                eprint!(
                    "{} (over {} runs; {basis}):\n{}",
                    spec.name(),
                    args.reps,
                    g.stats.report()
                );
                if let Some(base) = greedy.iter().find(|r| r.key == key) {
                    eprintln!(
                        "{}: speed-up over greedy {:.3}x (median of the interleaved pairs; means {ts:.2} / {:.2} t/s = {:.3}x), tokens {}",
                        spec.name(),
                        paired_speedup(&base.samples_ns, &g.measured.result.samples_ns),
                        base.ts,
                        ts / base.ts,
                        match (args.gen_temp > 0.0, base.tokens == g.tokens) {
                            (true, _) => "sampled (not compared)",
                            (false, true) => "identical",
                            (false, false) => "DIFFER",
                        }
                    );
                }
            }
            g.measured
        };
        if !first_token_done {
            first_token_done = true;
            let what = if spec.n_prompt > 0 {
                format!("a {}-token prompt", spec.n_prompt)
            } else {
                "one decode step".to_string()
            };
            eprintln!(
                "first token: {:.1} ms after load (the first forward: {what}, {} threads)",
                ms(m.first_forward_ns),
                spec.n_threads
            );
        }
        if let Some(tr) = &m.traffic {
            print_traffic(&spec, tr, m.result.avg_ts());
        }
        if let Some(p) = &m.profile {
            // The probe right after the test, on its thread count.
            let probe = membw::measure(PROFILE_PROBE_MIB, spec.n_threads, 3)
                .map(|b| b.best / 1e9)
                .ok();
            let tokens = (spec.n_prompt + spec.n_gen) * args.reps;
            eprint!(
                "{}",
                p.table(
                    &format!("{} profile ({} threads)", spec.name(), spec.n_threads),
                    tokens,
                    probe
                )
            );
        }
        match args.output {
            OutputFormat::Md => print!("{}", report::markdown_row(&info, &m.result)),
            OutputFormat::Json => records.push(report::json_record(&info, &run, &m.result)),
        }
    }
    match args.output {
        OutputFormat::Md => println!("\nbuild: {} ({})", run.build, run.cpu_info),
        OutputFormat::Json => println!("{}", serde_json::to_string_pretty(&records)?),
    }
    Ok(())
}

/// MiB of the read probe printed beside a profile.
const PROFILE_PROBE_MIB: usize = 512;

fn print_traffic(spec: &TestSpec, t: &Traffic, ts: f64) {
    let mib = |b: f64| b / (1u64 << 20) as f64;
    eprintln!(
        "{} traffic/token: {:.1} MiB = experts {:.1} + dense {:.1} + head {:.1} + GDN state {:.1} (also written) + KV {:.2}; distinct experts over the run {:.1} MiB",
        spec.name(),
        mib(t.total()),
        mib(t.experts),
        mib(t.dense),
        mib(t.head),
        mib(t.recurrent),
        mib(t.kv),
        mib(t.experts_union),
    );
    eprintln!(
        "{} effective read bandwidth: {:.2} GB/s at {:.2} t/s ({} threads)",
        spec.name(),
        t.total() * ts / 1e9,
        ts,
        spec.n_threads
    );
}

fn run_membw(args: &BenchArgs, threads: &[usize]) -> anyhow::Result<()> {
    for &t in threads {
        let bw = membw::measure(args.membw_mib, t, args.reps).map_err(anyhow::Error::msg)?;
        println!(
            "membw: read {:.2} GB/s best, {:.2} GB/s mean ({} threads, {} MiB, {} passes)",
            bw.best / 1e9,
            bw.mean / 1e9,
            t,
            bw.bytes >> 20,
            args.reps
        );
    }
    Ok(())
}

/// What the table says about the file, computed as llama.cpp does.
fn model_info(file: &GgufFile, model: &Model, path: &Path) -> ModelInfo {
    let (mut size, mut n_params) = (0u64, 0u64);
    for t in file.tensors() {
        size += t.n_bytes;
        n_params += t.n_elements();
    }
    let cfg = &model.config;
    let label = if cfg.n_layer == 40 && cfg.n_expert == 256 && cfg.n_embd == 2048 {
        "35B.A3B"
    } else {
        "?B"
    };
    let ftype = file
        .get("general.file_type")
        .and_then(|v| v.as_u64())
        .map_or("unknown, may not work", |f| report::ftype_name(f as u32));
    ModelInfo {
        desc: format!("{} {label} {ftype}", cfg.arch.name()),
        filename: path.display().to_string(),
        size,
        n_params,
    }
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

fn unix_time() -> String {
    let s = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    format!("{s}")
}

/// `--pass-costs`: the per-pass cost table, one block per thread count.
fn run_pass_costs(args: &BenchArgs, model: &Model, threads: &[usize]) -> anyhow::Result<()> {
    let depth = args.n_depth.first().copied().unwrap_or(0).max(1);
    println!("| threads | pass   | tokens | median ms | x plain step | min ms | max ms |");
    println!("| ------: | ------ | -----: | --------: | -----------: | -----: | -----: |");
    for &t in threads {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(t)
            .build()
            .context("thread pool")?;
        let costs = pool
            .install(|| {
                passes::pass_costs(
                    model,
                    &args.pass_costs,
                    depth,
                    args.reps,
                    args.seed,
                    args.profile,
                )
            })
            .context("pass costs")?;
        let plain = costs[0].median_ns();
        for c in &costs {
            let (lo, hi) = (
                c.samples_ns.iter().min().copied().unwrap_or(0),
                c.samples_ns.iter().max().copied().unwrap_or(0),
            );
            println!(
                "| {t:7} | {:6} | {:6} | {:9.3} | {:12.2} | {:6.3} | {:6.3} |",
                c.kind.name(),
                c.tokens,
                c.median_ns() / 1e6,
                c.median_ns() / plain,
                lo as f64 / 1e6,
                hi as f64 / 1e6
            );
        }
        if args.profile {
            let probe = membw::measure(PROFILE_PROBE_MIB, t, 3)
                .map(|b| b.best / 1e9)
                .ok();
            for c in &costs {
                if let Some(p) = &c.profile {
                    let title = format!("{}({}) profile ({t} threads)", c.kind.name(), c.tokens);
                    eprint!("{}", p.table_per(&title, "pass", c.samples_ns.len(), probe));
                }
            }
        }
    }
    Ok(())
}
