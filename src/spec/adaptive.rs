//! Choosing the draft length D from measurements (DESIGN §4.2).
//!
//! With a_j the measured probability that draft j is accepted given that
//! drafts 1 … j−1 were (Laplace-smoothed counts), a D-draft iteration emits
//! `E(D) = 1 + Σ_{k=1..D} Π_{j≤k} a_j` tokens and costs
//! `draft(D+1) + verify(D+1)`, both passes over D+1 tokens and both measured
//! per token count (unmeasured lengths are interpolated linearly in the
//! token count from the measured ones and the plain one-token step, so one
//! long exploring draft does not make every short draft look as dear). D is
//! the length maximising tokens per second, or 0 (plain decoding) when no D
//! beats `1 / plain`. While plain decoding wins, after a streak of `explore`
//! plain steps one iteration still drafts, so the estimates can recover: at
//! the shortest length whose last position is reached with probability
//! below [`EXPLORE_REACH`] (drafting past it would mostly measure nothing and
//! cost a long pass), and each exploration that leaves plain decoding ahead
//! doubles the streak, up to [`EXPLORE_MAX`] (back to [`EXPLORE_MIN`] as
//! soon as drafting wins).

/// Running estimates of acceptance and pass costs.
#[derive(Clone, Debug)]
pub struct Adaptive {
    n_min: usize,
    n_max: usize,
    /// Per position: times reached (previous all accepted), times accepted.
    reached: Vec<u64>,
    accepted: Vec<u64>,
    /// Exponential moving averages (ns): plain step; draft and verify passes
    /// by token count (index = tokens, 0 = unmeasured).
    plain_ns: f64,
    draft_ns: Vec<f64>,
    verify_ns: Vec<f64>,
    plain_streak: usize,
    /// Plain steps before the next exploring draft.
    pub explore: usize,
    /// The last choice was an exploration.
    explored: bool,
}

const EMA: f64 = 0.3;

/// A sample above this multiple of the current estimate counts as this
/// multiple: a step the OS preempted (ten times the usual on a loaded
/// machine) must not make plain decoding look dear for the next few choices.
const SPIKE: f64 = 1.5;

/// Plain steps between explorations, at first and at most.
pub const EXPLORE_MIN: usize = 16;
pub const EXPLORE_MAX: usize = 256;

/// An exploring draft stops at the first position reached (every earlier
/// draft accepted) with an estimated probability below this.
pub const EXPLORE_REACH: f64 = 0.05;

fn ema(old: &mut f64, x: f64) {
    *old = if *old == 0.0 {
        x
    } else {
        (1.0 - EMA) * *old + EMA * x.min(SPIKE * *old)
    };
}

impl Adaptive {
    pub fn new(n_min: usize, n_max: usize) -> Adaptive {
        Adaptive {
            n_min,
            n_max,
            reached: vec![0; n_max],
            accepted: vec![0; n_max],
            plain_ns: 0.0,
            draft_ns: vec![0.0; n_max + 2],
            verify_ns: vec![0.0; n_max + 2],
            plain_streak: 0,
            explore: EXPLORE_MIN,
            explored: false,
        }
    }

    pub fn record_plain(&mut self, ns: u64) {
        ema(&mut self.plain_ns, ns as f64);
        self.plain_streak += 1;
    }

    /// A draft pass over `tokens` tokens (the anchor and D masks).
    pub fn record_draft(&mut self, tokens: usize, ns: u64) {
        if tokens < self.draft_ns.len() {
            ema(&mut self.draft_ns[tokens], ns as f64);
        }
    }

    /// A verify pass of `tokens` tokens; `proposed` drafts, `accepted` kept.
    pub fn record_verify(&mut self, tokens: usize, ns: u64, proposed: usize, accepted: usize) {
        if tokens < self.verify_ns.len() {
            ema(&mut self.verify_ns[tokens], ns as f64);
        }
        for j in 0..proposed.min(accepted + 1).min(self.n_max) {
            self.reached[j] += 1;
            if j < accepted {
                self.accepted[j] += 1;
            }
        }
        self.plain_streak = 0;
    }

    /// Smoothed acceptance of position j given the earlier ones accepted.
    pub fn acceptance(&self, j: usize) -> f64 {
        (self.accepted[j] as f64 + 1.0) / (self.reached[j] as f64 + 2.0)
    }

    /// Expected tokens emitted by an iteration drafting `d`.
    pub fn expected_tokens(&self, d: usize) -> f64 {
        let mut e = 1.0;
        let mut run = 1.0;
        for j in 0..d {
            run *= self.acceptance(j);
            e += run;
        }
        e
    }

    /// Estimated verify cost of `tokens` tokens.
    pub fn verify_cost(&self, tokens: usize) -> Option<f64> {
        interpolate(&self.verify_ns, self.plain_ns, tokens)
    }

    /// Estimated draft cost of `tokens` tokens.
    pub fn draft_cost(&self, tokens: usize) -> Option<f64> {
        interpolate(&self.draft_ns, self.plain_ns, tokens)
    }

    /// The draft length for the next iteration, at most `cap` (0 = plain).
    pub fn choose(&mut self, cap: usize) -> usize {
        let hi = self.n_max.min(cap);
        if hi < self.n_min.max(1) {
            return 0;
        }
        if self.plain_ns == 0.0 {
            return 0; // measure a plain step first
        }
        if self.plain_streak >= self.explore {
            self.explored = true;
            return self.explore_len(hi);
        }
        let plain_rate = 1.0 / self.plain_ns;
        let mut best = (0, plain_rate);
        for d in self.n_min.max(1)..=hi {
            let (Some(dr), Some(v)) = (self.draft_cost(d + 1), self.verify_cost(d + 1)) else {
                return hi;
            };
            let rate = self.expected_tokens(d) / (dr + v);
            if rate > best.1 {
                best = (d, rate);
            }
        }
        if std::mem::take(&mut self.explored) {
            self.explore = if best.0 == 0 {
                (2 * self.explore).min(EXPLORE_MAX)
            } else {
                EXPLORE_MIN
            };
        }
        best.0
    }

    /// The draft length of an exploration: the shortest `d ≤ hi` (at least
    /// `n_min`) whose position d is reached with probability below
    /// [`EXPLORE_REACH`], else `hi`.
    pub fn explore_len(&self, hi: usize) -> usize {
        let mut reach = 1.0;
        for d in 1..=hi {
            reach *= self.acceptance(d - 1);
            if d >= self.n_min && reach < EXPLORE_REACH {
                return d;
            }
        }
        hi
    }
}

/// The cost of a pass over `tokens` tokens from the measured ones
/// (`by_tokens[i]` for i tokens, 0 = unmeasured) and the plain step (one
/// token, 0 = unmeasured): the measurement itself, else linear through the
/// nearest two points (extrapolating at the ends), else proportional to the
/// only point. `None` before any measurement.
fn interpolate(by_tokens: &[f64], plain_ns: f64, tokens: usize) -> Option<f64> {
    if let Some(&c) = by_tokens.get(tokens).filter(|c| **c > 0.0) {
        return Some(c);
    }
    let mut pts: Vec<(usize, f64)> = by_tokens
        .iter()
        .enumerate()
        .filter(|(_, c)| **c > 0.0)
        .map(|(i, c)| (i, *c))
        .collect();
    if plain_ns > 0.0 && !pts.iter().any(|p| p.0 == 1) {
        pts.push((1, plain_ns));
    }
    pts.sort_by_key(|p| p.0);
    match pts.as_slice() {
        [] => None,
        [(n, c)] => Some(c * tokens as f64 / *n as f64),
        _ => {
            let i = pts
                .iter()
                .position(|p| p.0 > tokens)
                .unwrap_or(pts.len() - 1)
                .max(1);
            let ((x0, y0), (x1, y1)) = (pts[i - 1], pts[i]);
            let slope = (y1 - y0) / (x1 as f64 - x0 as f64);
            Some((y0 + slope * (tokens as f64 - x0 as f64)).max(0.0))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn falls_back_to_plain_when_nothing_is_accepted() {
        let mut a = Adaptive::new(1, 8);
        a.record_plain(1000);
        for _ in 0..50 {
            a.record_draft(9, 1000);
            a.record_verify(9, 2000, 8, 0);
        }
        assert_eq!(a.choose(8), 0);
    }

    #[test]
    fn drafts_long_when_everything_is_accepted_and_verify_is_cheap() {
        let mut a = Adaptive::new(1, 8);
        a.record_plain(1000);
        for _ in 0..50 {
            a.record_draft(9, 100);
            a.record_verify(9, 1500, 8, 8);
            a.record_verify(2, 1050, 1, 1);
        }
        assert_eq!(a.choose(8), 8);
        assert_eq!(a.choose(3), 3);
    }

    #[test]
    fn explores_again_after_a_streak_of_plain_steps() {
        let mut a = Adaptive::new(1, 4);
        a.record_plain(1000);
        a.record_verify(5, 5000, 4, 0);
        for _ in 0..a.explore {
            assert_eq!(a.choose(4), 0);
            a.record_plain(1000);
        }
        // Nothing accepted past position 1: reach of position 1 is 1/3,
        // of position 2 1/6, 3 1/12, 4 1/24 < 0.05.
        assert_eq!(a.choose(4), 4);
    }

    #[test]
    fn an_exploring_draft_stops_where_drafts_are_rarely_reached() {
        let mut a = Adaptive::new(1, 15);
        a.record_plain(1000);
        // Position 1 accepted 9 of 10 times, position 2 never (of 9).
        for _ in 0..9 {
            a.record_verify(3, 3000, 2, 1);
        }
        a.record_verify(3, 3000, 2, 0);
        // Reach: d=1 10/12, d=2 (10/12)·(1/11) = 0.076, d=3 0.038.
        assert_eq!(a.explore_len(15), 3);
        assert_eq!(a.explore_len(2), 2);
    }

    #[test]
    fn explorations_that_leave_plain_ahead_back_off_and_a_win_resets_them() {
        let mut a = Adaptive::new(1, 4);
        a.record_plain(1000);
        a.record_draft(5, 5000);
        a.record_verify(5, 5000, 4, 0);
        let mut gaps = Vec::new();
        for _ in 0..4 {
            let mut plain = 0;
            while a.choose(4) == 0 {
                a.record_plain(1000);
                plain += 1;
            }
            gaps.push(plain);
            a.record_draft(5, 5000);
            a.record_verify(5, 5000, 4, 0);
        }
        assert_eq!(
            gaps,
            [
                EXPLORE_MIN,
                2 * EXPLORE_MIN,
                4 * EXPLORE_MIN,
                8 * EXPLORE_MIN
            ]
        );
        // Drafting becomes cheap and always accepted: the next exploration
        // finds it ahead, and the interval is back to the minimum.
        while a.choose(4) == 0 {
            a.record_plain(1000);
        }
        for _ in 0..50 {
            a.record_draft(5, 100);
            a.record_verify(5, 100, 4, 4);
        }
        assert!(a.choose(4) > 0);
        assert_eq!(a.explore, EXPLORE_MIN);
    }

    #[test]
    fn a_long_exploring_draft_does_not_price_short_drafts_like_long_ones() {
        // Passes cost about plain × tokens (a compute-bound model); only
        // the 16-token draft and verify of an exploring iteration measured.
        let mut a = Adaptive::new(1, 15);
        a.record_plain(1000);
        a.record_draft(16, 16_000);
        a.record_verify(16, 16_000, 15, 1);
        assert!((a.draft_cost(2).unwrap() - 2000.0).abs() < 1e-9);
        // Position 1 accepted 9 times in 10, position 2 never: one draft
        // emits 1.83 tokens for 4 plain-step costs (slower than plain).
        for _ in 0..8 {
            a.record_verify(2, 2000, 1, 1);
        }
        assert_eq!(a.choose(15), 0);
        // At half the cost per token of a batch, one draft pays.
        let mut b = Adaptive::new(1, 15);
        b.record_plain(1000);
        b.record_draft(16, 8_000);
        b.record_verify(16, 8_000, 15, 1);
        for _ in 0..8 {
            b.record_verify(2, 1000, 1, 1);
        }
        b.record_draft(2, 500);
        assert_eq!(b.choose(15), 1);
    }

    #[test]
    fn one_preempted_plain_step_does_not_switch_to_drafting() {
        // Drafting at D = 1 emits 1.9 tokens for 2.7 plain-step costs.
        let mut a = Adaptive::new(1, 4);
        a.record_plain(1000);
        a.record_draft(2, 1250);
        for _ in 0..20 {
            a.record_verify(2, 1420, 1, 1);
        }
        assert_eq!(a.choose(4), 0);
        a.record_plain(10_000);
        assert_eq!(a.choose(4), 0);
        // A lasting rise is still followed, a step at a time.
        for _ in 0..10 {
            a.record_plain(10_000);
        }
        assert!(a.choose(4) > 0);
    }

    #[test]
    fn verify_cost_interpolates_between_measured_lengths() {
        let mut a = Adaptive::new(1, 8);
        a.record_plain(1000);
        a.record_verify(5, 3000, 0, 0);
        assert!((a.verify_cost(3).unwrap() - 2000.0).abs() < 1e-9);
        assert!((a.verify_cost(9).unwrap() - 5000.0).abs() < 1e-9);
    }
}
