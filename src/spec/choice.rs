//! `--spec-type`: how tokens are decoded (docs/DESIGN.md §4), parsed once
//! for `run`, `chat`, `bench` and `serve`.
//!
//! A choice is `none` (plain decoding) or one or more drafting stages,
//! tried in order (ik_llama.cpp's chains): `draft-self` (block diffusion,
//! clover_moe files), `mtp` (the model's multi-token-prediction block,
//! files that carry one), `ngram` (the text's own n-grams; `ngram-mod` is
//! the same drafter under ik_llama.cpp's name). A stage may carry ik_llama.cpp's
//! parameters after a colon: `ngram:n_max=32,n_min=2,ngram_size_n=6`.
//! Stages chain with `+` (or, where one mode is taken, by repeating
//! `--spec-type`); `bench` compares several choices separated by commas.

use std::fmt;

use super::draft::{DiffusionDrafter, Draft, DraftCtx, Drafter};
use super::mtp::MtpDrafter;
use super::ngram::{ChainDrafter, NgramDrafter, DEFAULT_N, MAX_N};
use super::SpecConfig;
use crate::model::ForwardError;

/// What drafts in one stage.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum StageKind {
    DraftSelf,
    Mtp,
    /// `n`: the n-gram length keyed on (`ngram_size_n`).
    Ngram {
        n: usize,
    },
}

/// One stage with its own caps (unset: the command's `--spec-draft-*`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Stage {
    pub kind: StageKind,
    pub n_max: Option<usize>,
    pub n_min: Option<usize>,
    pub p_min: Option<f32>,
}

// `p_min` is parsed as a number in [0, 1], never NaN: equality is total.
impl Eq for Stage {}

/// A decoding mode: plain (no stage) or speculation through the stages.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SpecChoice {
    pub stages: Vec<Stage>,
}

impl Stage {
    fn new(name: &str) -> Result<Stage, String> {
        let kind = match name.replace('_', "-").as_str() {
            "draft-self" => StageKind::DraftSelf,
            "mtp" => StageKind::Mtp,
            "ngram" | "ngram-mod" => StageKind::Ngram { n: DEFAULT_N },
            other => {
                return Err(format!(
                    "unknown --spec-type '{other}' (none, draft-self, mtp, ngram, ngram-mod)"
                ))
            }
        };
        Ok(Stage {
            kind,
            n_max: None,
            n_min: None,
            p_min: None,
        })
    }

    /// Takes one `key=value` parameter.
    fn set(&mut self, kv: &str) -> Result<(), String> {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| format!("--spec-type parameter '{kv}' is not key=value"))?;
        let k = k.trim().replace('-', "_");
        let v = v.trim().trim_matches(|c| c == '"' || c == '\'');
        let count = |what: &str| {
            v.parse::<usize>()
                .map_err(|_| format!("--spec-type {what}={v}: not a whole number"))
        };
        match (k.as_str(), &mut self.kind) {
            ("n_max", _) => match count("n_max")? {
                0 => return Err("--spec-type n_max must be at least 1".into()),
                n => self.n_max = Some(n),
            },
            ("n_min", _) => self.n_min = Some(count("n_min")?),
            ("p_min", _) => match v.parse::<f32>() {
                Ok(p) if (0.0..=1.0).contains(&p) => self.p_min = Some(p),
                _ => return Err(format!("--spec-type p_min={v}: not between 0 and 1")),
            },
            ("ngram_size_n", StageKind::Ngram { n }) => match count("ngram_size_n")? {
                m @ 1..=MAX_N => *n = m,
                m => {
                    return Err(format!(
                        "--spec-type ngram_size_n={m}: must be 1 to {MAX_N}"
                    ))
                }
            },
            (k, _) => {
                return Err(format!(
                    "--spec-type {}: no parameter '{k}' (n_max, n_min, p_min{})",
                    self.kind,
                    match self.kind {
                        StageKind::Ngram { .. } => ", ngram_size_n",
                        StageKind::DraftSelf | StageKind::Mtp => "",
                    }
                ))
            }
        }
        Ok(())
    }
}

impl fmt::Display for StageKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StageKind::DraftSelf => f.write_str("draft-self"),
            StageKind::Mtp => f.write_str("mtp"),
            StageKind::Ngram { .. } => f.write_str("ngram"),
        }
    }
}

impl fmt::Display for SpecChoice {
    /// `none`, or the stages joined by `+`, each with the parameters that
    /// differ from its defaults.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.stages.is_empty() {
            return f.write_str("none");
        }
        for (i, s) in self.stages.iter().enumerate() {
            let mut params = Vec::new();
            if let StageKind::Ngram { n } = s.kind {
                if n != DEFAULT_N {
                    params.push(format!("ngram_size_n={n}"));
                }
            }
            params.extend(s.n_max.map(|n| format!("n_max={n}")));
            params.extend(s.n_min.map(|n| format!("n_min={n}")));
            params.extend(s.p_min.map(|p| format!("p_min={p}")));
            let sep = if i == 0 { "" } else { "+" };
            match params.is_empty() {
                true => write!(f, "{sep}{}", s.kind)?,
                false => write!(f, "{sep}{}:{}", s.kind, params.join(","))?,
            }
        }
        Ok(())
    }
}

impl SpecChoice {
    /// Parses a list of choices: `,` separates choices, `+` stages of one
    /// choice, and a `key=value` after either belongs to the stage before it
    /// (`ngram:n_max=8,ngram_size_n=3,draft-self` is two choices).
    pub fn parse_list(s: &str) -> Result<Vec<SpecChoice>, String> {
        let mut out: Vec<SpecChoice> = Vec::new();
        let mut sep = ',';
        let mut rest = s;
        loop {
            let end = rest.find([',', '+']).unwrap_or(rest.len());
            let token = rest[..end].trim();
            if token.contains('=') && !token.contains(':') {
                let stage = out
                    .last_mut()
                    .and_then(|c| c.stages.last_mut())
                    .ok_or_else(|| format!("--spec-type parameter '{token}' follows no stage"))?;
                stage.set(token)?;
            } else {
                let (name, param) = match token.split_once(':') {
                    Some((n, p)) => (n.trim(), Some(p)),
                    None => (token, None),
                };
                if sep == ',' {
                    out.push(SpecChoice::default());
                }
                let choice = out.last_mut().expect("pushed above");
                if name == "none" {
                    if sep == '+' || param.is_some() {
                        return Err("--spec-type none takes no stage or parameter".into());
                    }
                } else {
                    if sep == '+' && choice.stages.is_empty() {
                        return Err("--spec-type none takes no stage or parameter".into());
                    }
                    let mut stage = Stage::new(name)?;
                    if let Some(p) = param {
                        stage.set(p)?;
                    }
                    choice.stages.push(stage);
                }
            }
            if end == rest.len() {
                break;
            }
            sep = rest[end..].chars().next().expect("a separator");
            rest = &rest[end + 1..];
        }
        Ok(out)
    }

    /// One choice: the stages of every part, chained (`--spec-type` given
    /// several times chains its values, as ik_llama.cpp's does).
    pub fn parse_one<S: AsRef<str>>(parts: &[S]) -> Result<SpecChoice, String> {
        let mut stages = Vec::new();
        for p in parts {
            let list = SpecChoice::parse_list(p.as_ref())?;
            if list.len() != 1 {
                return Err(format!(
                    "--spec-type {}: one decoding mode here (chain stages with '+')",
                    p.as_ref()
                ));
            }
            stages.extend(list.into_iter().flat_map(|c| c.stages));
        }
        Ok(SpecChoice { stages })
    }

    pub fn is_none(&self) -> bool {
        self.stages.is_empty()
    }

    /// draft-self alone, with the command's caps.
    pub fn draft_self() -> SpecChoice {
        SpecChoice {
            stages: vec![Stage {
                kind: StageKind::DraftSelf,
                n_max: None,
                n_min: None,
                p_min: None,
            }],
        }
    }

    /// Whether `--spec-replay` can replay this choice: one stage that drafts
    /// through the model (draft-self or mtp), whose passes run for their
    /// cost while a profile decides acceptance.
    pub fn replays(&self) -> bool {
        matches!(self.stages.as_slice(), [s] if matches!(s.kind, StageKind::DraftSelf | StageKind::Mtp))
    }

    /// Whether a stage drafts through the block-diffusion path.
    pub fn needs_diffusion(&self) -> bool {
        self.stages.iter().any(|s| s.kind == StageKind::DraftSelf)
    }

    /// Whether a stage drafts through the MTP block (states then keep its
    /// cache: `Model::mtp`).
    pub fn needs_mtp(&self) -> bool {
        self.stages.iter().any(|s| s.kind == StageKind::Mtp)
    }

    /// MTP alone, with the command's caps.
    pub fn mtp() -> SpecChoice {
        SpecChoice {
            stages: vec![Stage::new("mtp").expect("a known stage")],
        }
    }

    /// `cfg` with this choice's caps: a one-stage choice's `n_min` and
    /// `p_min` replace the command's; `n_max` is the largest any stage may
    /// draft.
    pub fn configure(&self, mut cfg: SpecConfig) -> SpecConfig {
        if let [s] = self.stages.as_slice() {
            cfg.n_min = s.n_min.unwrap_or(cfg.n_min);
            cfg.p_min = s.p_min.unwrap_or(cfg.p_min);
        }
        let global = cfg.n_max;
        if let Some(n) = self.stages.iter().map(|s| s.n_max.unwrap_or(global)).max() {
            cfg.n_max = n;
        }
        cfg.n_min = cfg.n_min.min(cfg.n_max);
        cfg
    }

    /// The drafter of this choice (`None` for plain decoding).
    pub fn drafter(&self) -> Option<Box<dyn Drafter + Send>> {
        let one = |s: &Stage| -> Box<dyn Drafter + Send> {
            let inner: Box<dyn Drafter + Send> = match s.kind {
                StageKind::DraftSelf => Box::new(DiffusionDrafter),
                StageKind::Mtp => Box::new(MtpDrafter::default()),
                StageKind::Ngram { n } => Box::new(NgramDrafter::new(n)),
            };
            Box::new(Capped {
                inner,
                n_max: s.n_max,
                p_min: s.p_min,
            })
        };
        match self.stages.as_slice() {
            [] => None,
            [s] => Some(one(s)),
            stages => Some(Box::new(ChainDrafter {
                stages: stages
                    .iter()
                    .map(|s| (one(s), s.n_min.unwrap_or(0)))
                    .collect(),
            })),
        }
    }
}

/// A stage's own caps on the drafts it proposes.
struct Capped {
    inner: Box<dyn Drafter + Send>,
    n_max: Option<usize>,
    p_min: Option<f32>,
}

impl Drafter for Capped {
    fn draft(&mut self, mut ctx: DraftCtx) -> Result<Draft, ForwardError> {
        ctx.n_max = self.n_max.map_or(ctx.n_max, |n| n.min(ctx.n_max));
        ctx.p_min = self.p_min.unwrap_or(ctx.p_min);
        self.inner.draft(ctx)
    }

    fn take_catch_up_ns(&mut self) -> u64 {
        self.inner.take_catch_up_ns()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(s: &str) -> Vec<String> {
        SpecChoice::parse_list(s)
            .unwrap()
            .iter()
            .map(|c| c.to_string())
            .collect()
    }

    #[test]
    fn lists_chains_and_parameters_parse_as_ik_llama_writes_them() {
        assert_eq!(names("none,draft-self"), ["none", "draft-self"]);
        assert_eq!(names("ngram-mod"), ["ngram"]);
        assert_eq!(
            names("ngram_mod:n_max=64,n_min=2,ngram_size_n=8"),
            ["ngram:ngram_size_n=8,n_max=64,n_min=2"]
        );
        assert_eq!(
            names("none,ngram:n_max=8,ngram_size_n=3+draft-self,draft-self:p_min=0.5"),
            [
                "none",
                "ngram:ngram_size_n=3,n_max=8+draft-self",
                "draft-self:p_min=0.5"
            ]
        );
        let chained = SpecChoice::parse_one(&["ngram-mod:n_min=2", "draft-self"]).unwrap();
        assert_eq!(chained.to_string(), "ngram:n_min=2+draft-self");
        assert!(chained.needs_diffusion());
        // What is printed parses back to the same choice.
        for c in SpecChoice::parse_list("ngram:ngram_size_n=3,n_max=8+draft-self,none").unwrap() {
            assert_eq!(SpecChoice::parse_one(&[c.to_string()]).unwrap(), c);
        }
    }

    #[test]
    fn bad_spec_types_are_refused_with_the_reason() {
        for (s, why) in [
            ("mtp2", "unknown --spec-type"),
            ("n_max=3", "follows no stage"),
            ("draft-self:ngram_size_n=3", "no parameter 'ngram_size_n'"),
            ("ngram:ngram_size_n=0", "must be 1 to"),
            ("ngram:n_max=0", "at least 1"),
            ("ngram:p_min=2", "between 0 and 1"),
            ("ngram:n_min=x", "not a whole number"),
            ("none+ngram", "takes no stage"),
        ] {
            let e = SpecChoice::parse_list(s).unwrap_err();
            assert!(e.contains(why), "{s}: {e}");
        }
        let e = SpecChoice::parse_one(&["none,ngram"]).unwrap_err();
        assert!(e.contains("one decoding mode"), "{e}");
    }

    #[test]
    fn a_stage_caps_its_drafts_and_a_chain_takes_the_largest_n_max() {
        let base = SpecConfig::default();
        let one = SpecChoice::parse_one(&["ngram:n_max=4,n_min=2,p_min=0.5"]).unwrap();
        let cfg = one.configure(base.clone());
        assert_eq!((cfg.n_max, cfg.n_min, cfg.p_min), (4, 2, 0.5));
        let chain = SpecChoice::parse_one(&["ngram:n_max=40+draft-self:n_max=3"]).unwrap();
        let cfg = chain.configure(base.clone());
        assert_eq!((cfg.n_max, cfg.n_min), (40, base.n_min));
        assert!(SpecChoice::default().drafter().is_none());
    }
}
