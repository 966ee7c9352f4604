//! How often n-gram drafts (`--spec-type ngram`) would be accepted when the
//! model's output is a known text: for each (prompt, target) pair, decoding
//! is replayed as the speculator runs it with `--spec-fixed` and exact
//! greedy acceptance, by a model whose greedy output is the target. Each
//! round drafts up to `--n-max` tokens from the n-grams of the prompt and of
//! the target so far; the drafts are accepted up to the first that differs
//! from the target, and the round emits those plus one. Prints acceptance by
//! draft position and tokens per verify pass, and writes the replay profile
//! (`clover bench --spec-replay`) with `--profile-out`.
//!
//! ```text
//! cargo run --release --example ngram_acceptance -- --pairs pairs.json \
//!     [--model models/clover-tiny-kjv.gguf] [--n 4] [--n-max 8] [--profile-out p.json]
//! ```
//!
//! `pairs.json`: `[{"prompt": "...", "target": "..."}, ...]`, tokenized by
//! the model's tokenizer (the prompt with its BOS, the target without).

use std::path::PathBuf;

use clover::engine::LoadedModel;
use clover::spec::ngram::NgramDrafter;
use clover::spec::replay::Profile;
use clover::spec::SpecStats;

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let (mut pairs, mut model) = (None, PathBuf::from("models/clover-tiny-kjv.gguf"));
    let (mut n, mut n_max, mut out) = (4usize, 8usize, None);
    while let Some(a) = args.next() {
        let mut val = || {
            args.next()
                .ok_or_else(|| anyhow::anyhow!("{a} needs a value"))
        };
        match a.as_str() {
            "--pairs" => pairs = Some(PathBuf::from(val()?)),
            "--model" => model = PathBuf::from(val()?),
            "--n" => n = val()?.parse()?,
            "--n-max" => n_max = val()?.parse()?,
            "--profile-out" => out = Some(PathBuf::from(val()?)),
            _ => anyhow::bail!("unknown argument {a}"),
        }
    }
    let pairs = pairs.ok_or_else(|| anyhow::anyhow!("--pairs FILE is required"))?;
    let list: Vec<serde_json::Value> = serde_json::from_str(&std::fs::read_to_string(&pairs)?)?;
    let m = LoadedModel::open(&model)?;
    let mut stats = SpecStats::new(n_max);
    let mut targets = 0usize;
    for p in &list {
        let prompt = m.tokenize(p["prompt"].as_str().unwrap_or_default())?;
        let target = m
            .tokenizer
            .encode(p["target"].as_str().unwrap_or_default(), false)?;
        targets += target.len();
        let mut drafter = NgramDrafter::new(n);
        let mut history = prompt.clone();
        // The first target token comes from the prompt's pass.
        let mut k = 0;
        if let Some(&t) = target.first() {
            history.push(t);
            k = 1;
            stats.tokens_emitted += 1;
        }
        while k < target.len() {
            let draft = drafter.lookup(&history, n_max.min(target.len() - k));
            let accepted = draft
                .iter()
                .zip(&target[k..])
                .take_while(|(d, t)| d == t)
                .count();
            let emitted = (accepted + 1).min(target.len() - k);
            match draft.is_empty() {
                true => stats.plain_passes += 1,
                false => {
                    stats.verify_passes += 1;
                    stats.record_iteration(draft.len(), accepted, 0);
                }
            }
            history.extend_from_slice(&target[k..k + emitted]);
            k += emitted;
            stats.tokens_emitted += emitted as u64;
        }
    }
    let passes = stats.verify_passes + stats.plain_passes;
    println!(
        "{} pairs, {targets} target tokens; n-gram length {n}, at most {n_max} drafts a round",
        list.len()
    );
    println!(
        "drafted {} accepted {} ({:.1} %); rounds drafting {} of {passes}; {:.3} target tokens per pass",
        stats.drafts_proposed,
        stats.drafts_accepted,
        100.0 * stats.drafts_accepted as f64 / stats.drafts_proposed.max(1) as f64,
        stats.verify_passes,
        targets as f64 / (passes + 1) as f64
    );
    let source = format!(
        "n-gram drafts (n {n}) replayed on {} ({} pairs, scripts/ngram_pairs.py), the target as \
         the model's greedy output",
        pairs.file_name().unwrap_or_default().to_string_lossy(),
        list.len()
    );
    let profile = Profile::from_stats(&stats, &source);
    println!(
        "conditional acceptance by position: {}",
        profile
            .conditional
            .iter()
            .map(|a| format!("{a:.3}"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    if let Some(path) = out {
        std::fs::write(&path, profile.to_json())?;
        println!("profile written to {}", path.display());
    }
    Ok(())
}
