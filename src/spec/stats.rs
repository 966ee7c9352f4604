//! Counters and timings of a speculative run (docs/DESIGN.md §4.2, §7 panel).

use std::fmt::Write as _;

use super::adaptive::Why;

/// What a speculative run did, for the stderr summary and the TUI.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SpecStats {
    /// Drafts proposed / accepted (accepted includes `accepted_relaxed`).
    pub drafts_proposed: u64,
    pub drafts_accepted: u64,
    /// Accepted only by the entropy-relaxed rule (lossy).
    pub accepted_relaxed: u64,
    /// Per draft position j (0-based: d_{j+1}): proposed, accepted.
    pub proposed_by_pos: Vec<u64>,
    pub accepted_by_pos: Vec<u64>,
    /// Per draft position j: rounds that proposed it with every earlier draft
    /// accepted (so `accepted_by_pos[j] / reached_by_pos[j]` is the
    /// conditional acceptance of position j, whatever the draft lengths).
    pub reached_by_pos: Vec<u64>,
    /// `[k]` iterations that accepted exactly k drafts.
    pub accepted_len_hist: Vec<u64>,
    /// Passes of each kind: diffusion drafts, D+1-token verifies, 1-token
    /// plain decodes (fallback, and the first step's calibration).
    pub draft_passes: u64,
    pub verify_passes: u64,
    pub plain_passes: u64,
    /// Tokens emitted by the loop (not counting the prompt).
    pub tokens_emitted: u64,
    /// Nanoseconds in drafting, verify passes, rollback (`commit_verify`),
    /// plain decode steps, and the whole loop.
    pub draft_ns: u64,
    pub verify_ns: u64,
    pub rollback_ns: u64,
    pub plain_ns: u64,
    pub total_ns: u64,
    /// Adaptive rounds that drafted to explore, and that chose plain decoding.
    pub explore_rounds: u64,
    pub plain_chosen: u64,
    /// Why the controller made its last choice (`None` before any).
    pub why: Option<Why>,
}

impl SpecStats {
    pub fn new(n_max: usize) -> SpecStats {
        SpecStats {
            proposed_by_pos: vec![0; n_max],
            accepted_by_pos: vec![0; n_max],
            reached_by_pos: vec![0; n_max],
            accepted_len_hist: vec![0; n_max + 1],
            ..SpecStats::default()
        }
    }

    /// Records one verified iteration: `proposed` drafts, the first
    /// `accepted` of them kept, `relaxed` of those by the relaxed rule.
    pub fn record_iteration(&mut self, proposed: usize, accepted: usize, relaxed: usize) {
        let grow = |v: &mut Vec<u64>, n: usize| {
            if v.len() < n {
                v.resize(n, 0);
            }
        };
        grow(&mut self.proposed_by_pos, proposed);
        grow(&mut self.accepted_by_pos, proposed);
        grow(&mut self.reached_by_pos, proposed);
        grow(&mut self.accepted_len_hist, proposed + 1);
        self.drafts_proposed += proposed as u64;
        self.drafts_accepted += accepted as u64;
        self.accepted_relaxed += relaxed as u64;
        for j in 0..proposed {
            self.proposed_by_pos[j] += 1;
            self.reached_by_pos[j] += (j <= accepted) as u64;
            if j < accepted {
                self.accepted_by_pos[j] += 1;
            }
        }
        self.accepted_len_hist[accepted] += 1;
    }

    /// Accepted / proposed (0 when nothing was proposed).
    pub fn acceptance(&self) -> f64 {
        ratio(self.drafts_accepted, self.drafts_proposed)
    }

    /// Tokens emitted per target forward pass (verify + plain).
    pub fn tokens_per_forward(&self) -> f64 {
        ratio(self.tokens_emitted, self.verify_passes + self.plain_passes)
    }

    /// Measured nanoseconds of one plain decode step, if any was taken.
    pub fn plain_token_ns(&self) -> Option<f64> {
        (self.plain_passes > 0).then(|| self.plain_ns as f64 / self.plain_passes as f64)
    }

    /// Effective speed-up over plain decoding: the time plain decoding would
    /// have taken for the emitted tokens (at the measured plain step cost)
    /// over the loop's actual time.
    pub fn speedup(&self) -> Option<f64> {
        let per = self.plain_token_ns()?;
        (self.total_ns > 0).then(|| per * self.tokens_emitted as f64 / self.total_ns as f64)
    }

    /// Multi-line summary in the `llama_perf`-ish style.
    pub fn report(&self) -> String {
        let mut s = String::new();
        let ms = |ns: u64| ns as f64 / 1e6;
        let _ = writeln!(
            s,
            "spec: drafted {} accepted {} ({:.1} %), relaxed {}, emitted {} tokens",
            self.drafts_proposed,
            self.drafts_accepted,
            100.0 * self.acceptance(),
            self.accepted_relaxed,
            self.tokens_emitted
        );
        let _ = writeln!(
            s,
            "spec: passes draft {} verify {} plain {}, {:.3} tokens per forward",
            self.draft_passes,
            self.verify_passes,
            self.plain_passes,
            self.tokens_per_forward()
        );
        let by_pos: Vec<String> = self
            .proposed_by_pos
            .iter()
            .zip(&self.accepted_by_pos)
            .take_while(|(p, _)| **p > 0)
            .map(|(p, a)| format!("{:.2}", ratio(*a, *p)))
            .collect();
        let _ = writeln!(s, "spec: acceptance by position [{}]", by_pos.join(" "));
        let _ = writeln!(
            s,
            "spec: accepted-length histogram {:?}",
            self.accepted_len_hist
        );
        let _ = writeln!(
            s,
            "spec: time draft {:.3} ms, verify {:.3} ms, rollback {:.3} ms, plain {:.3} ms, total {:.3} ms",
            ms(self.draft_ns),
            ms(self.verify_ns),
            ms(self.rollback_ns),
            ms(self.plain_ns),
            ms(self.total_ns)
        );
        if let Some(why) = &self.why {
            let _ = writeln!(
                s,
                "spec: rounds drafted {} (exploring {}), plain chosen {}; last choice: {}",
                self.verify_passes,
                self.explore_rounds,
                self.plain_chosen,
                why.describe()
            );
        }
        match self.speedup() {
            Some(x) => {
                let _ = writeln!(s, "spec: effective speed-up over plain decoding {x:.3}x");
            }
            None => {
                let _ = writeln!(s, "spec: speed-up unknown (no plain step measured)");
            }
        }
        s
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}
