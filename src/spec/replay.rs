//! Replayed acceptance (docs/DESIGN.md §4, benchmarking only): measure speculation at
//! a size no trained model exists for. The draft, verify and commit passes run
//! for real on the given file; only *which* drafts are accepted follows a
//! recorded [`Profile`] of per-position conditional acceptance. The
//! [`ReplayDrafter`] runs the real drafter (for its cost), then replaces its
//! tokens by the known greedy continuation for the first `a` positions and a
//! wrong token after, `a` drawn from the profile; exact greedy verification
//! then accepts exactly `a`, and the output stays plain greedy's. Whatever
//! reports a replayed run says "simulated acceptance".
//!
//! ```text
//! clover run --spec-type draft-self --spec-fixed --spec-profile-out p.json   # default model
//! clover bench -m full.gguf -p 0 -n 128 --spec-type none,draft-self --spec-replay p.json
//! ```

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::model::ForwardError;
use crate::sample::Rng;

use super::draft::{Draft, DraftCtx, Drafter};
use super::stats::SpecStats;

/// Per-position conditional acceptance: `conditional[j]` is the probability
/// that draft j+1 is accepted given that drafts 1 … j were.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    /// What it was measured on (free text).
    pub source: String,
    /// Verify rounds it was measured over (0 for a made-up profile).
    pub rounds: u64,
    pub conditional: Vec<f64>,
}

impl Profile {
    /// The profile `stats` measured: positions up to the first one never
    /// reached.
    pub fn from_stats(stats: &SpecStats, source: &str) -> Profile {
        let conditional = stats
            .reached_by_pos
            .iter()
            .zip(&stats.accepted_by_pos)
            .take_while(|(r, _)| **r > 0)
            .map(|(&r, &a)| a as f64 / r as f64)
            .collect();
        Profile {
            source: source.to_string(),
            rounds: stats.verify_passes,
            conditional,
        }
    }

    /// A drafter whose every draft is accepted: the ceiling of speculation.
    pub fn perfect(n: usize) -> Profile {
        Profile {
            source: "perfect drafter".into(),
            rounds: 0,
            conditional: vec![1.0; n],
        }
    }

    /// Reads a profile written by [`Profile::to_json`]; every probability
    /// must be in [0, 1].
    pub fn load(path: &Path) -> Result<Profile, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let p: Profile = serde_json::from_str(&text)
            .map_err(|e| format!("{}: not a speculation profile: {e}", path.display()))?;
        if p.conditional.is_empty() {
            return Err(format!("{}: the profile has no positions", path.display()));
        }
        if let Some(x) = p.conditional.iter().find(|x| !(0.0..=1.0).contains(*x)) {
            return Err(format!(
                "{}: acceptance {x} is not a probability",
                path.display()
            ));
        }
        Ok(p)
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a profile serialises")
    }

    /// Unconditional acceptance by position (the chance draft j+1 is accepted).
    pub fn unconditional(&self) -> Vec<f64> {
        let mut run = 1.0;
        self.conditional
            .iter()
            .map(|a| {
                run *= a;
                run
            })
            .collect()
    }

    /// Draws how many of `n` drafts are accepted (positions past the profile
    /// are never accepted).
    pub fn draw(&self, n: usize, rng: &mut Rng) -> usize {
        (0..n)
            .take_while(|&j| self.conditional.get(j).is_some_and(|&a| rng.next_f64() < a))
            .count()
    }
}

/// Runs `inner` for its cost, then proposes `seq`'s continuation (the whole
/// sequence, prompt included, indexed by position: the known greedy output)
/// for the first drawn `a` positions and a wrong token after. Greedy only.
pub struct ReplayDrafter<D: Drafter> {
    pub inner: D,
    pub seq: Vec<u32>,
    pub profile: Profile,
    rng: Rng,
}

impl<D: Drafter> ReplayDrafter<D> {
    pub fn new(inner: D, seq: Vec<u32>, profile: Profile, seed: u64) -> Self {
        ReplayDrafter {
            inner,
            seq,
            profile,
            rng: Rng::from_seed(seed),
        }
    }
}

impl<D: Drafter> Drafter for ReplayDrafter<D> {
    fn draft(&mut self, ctx: DraftCtx) -> Result<Draft, ForwardError> {
        let pos = ctx.pos;
        let n_vocab = ctx.model.n_vocab() as u32;
        let real = self.inner.draft(ctx)?;
        // Past the known continuation nothing can be replayed.
        let start = (pos + 1).min(self.seq.len());
        let n = real.tokens.len().min(self.seq.len() - start);
        let a = self.profile.draw(n, &mut self.rng);
        let known = &self.seq[start..start + n];
        let tokens = known
            .iter()
            .enumerate()
            .map(|(j, &t)| if j < a { t } else { (t + 1) % n_vocab })
            .collect();
        Ok(Draft {
            tokens,
            dists: Vec::new(),
        })
    }

    fn take_catch_up_ns(&mut self) -> u64 {
        self.inner.take_catch_up_ns()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_profile_from_fixed_length_rounds_is_the_conditional_acceptance() {
        let mut s = SpecStats::new(3);
        // 10 rounds of 3 drafts: accepted 0 ×2, 1 ×3, 2 ×1, 3 ×4.
        for (acc, times) in [(0, 2), (1, 3), (2, 1), (3, 4)] {
            for _ in 0..times {
                s.record_iteration(3, acc, 0);
                s.verify_passes += 1;
            }
        }
        let p = Profile::from_stats(&s, "t");
        // Position 1: 8 of 10; position 2: 5 of 8; position 3: 4 of 5.
        assert_eq!(p.conditional, vec![0.8, 0.625, 0.8]);
        assert_eq!(p.rounds, 10);
        let u = p.unconditional();
        assert!((u[2] - 0.4).abs() < 1e-12);
    }

    #[test]
    fn draws_follow_the_profile() {
        let p = Profile {
            source: String::new(),
            rounds: 0,
            conditional: vec![0.9, 0.5, 0.0],
        };
        let mut rng = Rng::from_seed(3);
        let mut hist = [0u32; 4];
        let n = 100_000;
        for _ in 0..n {
            hist[p.draw(3, &mut rng)] += 1;
        }
        let f = |k: usize| hist[k] as f64 / n as f64;
        assert!((f(0) - 0.1).abs() < 0.005, "{hist:?}");
        assert!((f(1) - 0.45).abs() < 0.005, "{hist:?}");
        assert!((f(2) - 0.45).abs() < 0.005, "{hist:?}");
        assert_eq!(hist[3], 0);
        assert_eq!(Profile::perfect(4).draw(3, &mut rng), 3);
        assert_eq!(p.draw(0, &mut rng), 0);
    }

    #[test]
    fn a_profile_round_trips_and_bad_ones_are_one_line_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.json");
        let p = Profile {
            source: "x".into(),
            rounds: 5,
            conditional: vec![0.5, 0.25],
        };
        std::fs::write(&path, p.to_json()).unwrap();
        assert_eq!(Profile::load(&path).unwrap(), p);
        std::fs::write(&path, r#"{"source":"","rounds":0,"conditional":[1.5]}"#).unwrap();
        let e = Profile::load(&path).unwrap_err();
        assert!(e.contains("not a probability") && !e.contains('\n'), "{e}");
        std::fs::write(&path, "nonsense").unwrap();
        assert!(Profile::load(&path)
            .unwrap_err()
            .contains("not a speculation profile"));
    }
}
