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
//! beats `1 / plain`. The first draft is short ([`FIRST_DRAFT`]): it prices
//! the passes where a long one could cost many plain steps. While plain
//! decoding wins, after a streak of `explore` plain steps one iteration still
//! drafts, so the estimates can recover: at the shortest length whose last
//! position is reached with probability below [`EXPLORE_REACH`] (drafting past
//! it would mostly measure nothing and cost a long pass), no longer than the
//! longest draft that would pay if every draft were accepted
//! (its ceiling); each exploration that leaves plain decoding ahead
//! doubles the streak, up to [`EXPLORE_MAX`] (back to [`EXPLORE_MIN`] as soon
//! as drafting wins). When not even a perfect drafter would pay at the
//! measured costs, acceptance cannot change the choice, and only the costs
//! are re-measured, after [`EXPLORE_MAX`] plain steps, then after twice as
//! many each time drafting still does not pay (up to [`REMEASURE_MAX`]): so a
//! model whose passes are too dear for speculation decodes at its plain speed.

/// Why the controller chose a draft length (what the chat's acceptance panel
/// and `clover run`'s report show).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Why {
    /// No plain step measured yet: one is taken first.
    Measuring,
    /// No pass cost of a draft length is known yet: a first, short draft.
    FirstDraft,
    /// A plain streak ended: this round drafts to re-measure acceptance.
    Explore,
    /// The best draft length, `d` drafts, beats plain decoding: a round
    /// returns `tokens` (expected) for `steps` plain-step costs.
    Pays { d: u32, tokens: f32, steps: f32 },
    /// Plain decoding wins: the best draft length `d` would return `tokens`
    /// for `steps` plain-step costs (≤ `tokens` steps' worth).
    Plain { d: u32, tokens: f32, steps: f32 },
    /// Drafting has won [`PROBE_EVERY`] rounds in a row: one plain step is
    /// timed again, so the comparison rests on a current plain cost.
    Probe,
    /// The draft length is fixed (`--spec-fixed`).
    Fixed,
    /// No draft fits: the output or the context is about to end.
    NoRoom,
}

impl Why {
    /// One line for people: "plain: 4 drafts a round would cost 2.4 steps,
    /// return 2.3 tokens". (Worded so that the panel's figures stay the only
    /// "draft ", " of " and "verify " on the screen.)
    pub fn describe(&self) -> String {
        match *self {
            Why::Measuring => "plain: timing a plain step first".into(),
            Why::FirstDraft => "drafting: a first short round prices the passes".into(),
            Why::Explore => "exploring: one drafting round after a plain streak".into(),
            Why::Pays { d, tokens, steps } => format!(
                "drafting: {d} drafts a round cost {steps:.1} steps, return {tokens:.1} tokens"
            ),
            Why::Plain { d, tokens, steps } => format!(
                "plain: {d} drafts a round would cost {steps:.1} steps, return {tokens:.1} tokens"
            ),
            Why::Probe => "plain: re-timing a plain step between drafting rounds".into(),
            Why::Fixed => "fixed-length drafting (--spec-fixed)".into(),
            Why::NoRoom => "plain: no room left for drafts".into(),
        }
    }
}

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
    /// Why the last choice was made.
    pub why: Why,
    /// Plain steps before the pass costs are re-measured when not even a
    /// perfect drafter pays, and whether the last exploration did that.
    remeasure: usize,
    remeasuring: bool,
    /// Drafting rounds chosen in a row (for [`PROBE_EVERY`]).
    drafting_streak: usize,
    /// Plain steps timed so far.
    plain_samples: u64,
}

const EMA: f64 = 0.3;

/// A sample above this multiple of the current estimate counts as this
/// multiple: a step the OS preempted (ten times the usual on a loaded
/// machine) must not make plain decoding look dear for the next few choices.
const SPIKE: f64 = 1.5;

/// Plain steps between explorations, at first and at most.
pub const EXPLORE_MIN: usize = 16;
pub const EXPLORE_MAX: usize = 256;

/// The longest plain streak between re-measurements of the pass costs when
/// not even a perfect drafter pays (from [`EXPLORE_MAX`], doubling).
pub const REMEASURE_MAX: usize = 4096;

/// The length of the first draft, which prices the passes.
pub const FIRST_DRAFT: usize = 2;

/// An exploring draft stops at the first position reached (every earlier
/// draft accepted) with an estimated probability below this.
pub const EXPLORE_REACH: f64 = 0.05;

/// Drafting rounds in a row before one plain step is timed again: while
/// drafting wins no plain step is taken, and a stale plain cost (the first,
/// cold step, or a machine that sped up) would keep it drafting at a loss.
pub const PROBE_EVERY: usize = 32;

/// [`PROBE_EVERY`] while only one plain step has been timed.
pub const FIRST_PROBE: usize = 2;

fn ema(old: &mut f64, x: f64) {
    *old = if *old == 0.0 {
        x
    } else if x < *old {
        // Noise only ever adds time: a faster sample is believed at once (a
        // cold first step must not price plain decoding for long).
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
            why: Why::Measuring,
            remeasure: EXPLORE_MAX,
            remeasuring: false,
            drafting_streak: 0,
            plain_samples: 0,
        }
    }

    pub fn record_plain(&mut self, ns: u64) {
        ema(&mut self.plain_ns, ns as f64);
        self.plain_streak += 1;
        self.plain_samples += 1;
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

    /// Estimated verify cost of `tokens` tokens.
    pub fn verify_cost(&self, tokens: usize) -> Option<f64> {
        interpolate(&self.verify_ns, self.plain_ns, tokens)
    }

    /// Estimated draft cost of `tokens` tokens.
    pub fn draft_cost(&self, tokens: usize) -> Option<f64> {
        interpolate(&self.draft_ns, self.plain_ns, tokens)
    }

    /// The draft length for the next iteration, at most `cap` (0 = plain);
    /// [`Adaptive::why`] says why.
    pub fn choose(&mut self, cap: usize) -> usize {
        let hi = self.n_max.min(cap);
        if hi < self.n_min.max(1) {
            self.why = Why::NoRoom;
            return 0;
        }
        if self.plain_ns == 0.0 {
            self.why = Why::Measuring;
            return 0; // measure a plain step first
        }
        let lo = self.n_min.max(1);
        if !self.draft_ns.iter().any(|&c| c > 0.0) || !self.verify_ns.iter().any(|&c| c > 0.0) {
            // Nothing but a plain step measured: a first, short draft prices
            // the passes (a long one would cost many plain steps where
            // drafting cannot pay).
            self.why = Why::FirstDraft;
            return FIRST_DRAFT.clamp(lo, hi);
        }
        // One pass over the lengths: the expected tokens (a running product
        // of the acceptances), the best rate, and the ceiling: the longest
        // draft that would beat plain decoding were every draft accepted.
        let plain_rate = 1.0 / self.plain_ns;
        let mut best: Option<(usize, f64, f64)> = None;
        let mut ceiling = None;
        let (mut tokens, mut reach) = (1.0, 1.0);
        for d in 1..=hi {
            reach *= self.acceptance(d - 1);
            tokens += reach;
            if d < lo {
                continue;
            }
            let (Some(dr), Some(v)) = (self.draft_cost(d + 1), self.verify_cost(d + 1)) else {
                self.why = Why::FirstDraft;
                return FIRST_DRAFT.clamp(lo, hi);
            };
            let cost = dr + v;
            if (d + 1) as f64 / cost > plain_rate {
                ceiling = Some(d);
            }
            if best.is_none_or(|b| tokens / cost > b.1 / b.2) {
                best = Some((d, tokens, cost));
            }
        }
        if self.plain_streak >= self.explore {
            // Re-measure acceptance, up to the ceiling. Without one,
            // acceptance does not matter: only the pass costs are
            // re-measured, after a streak that doubles each time drafting
            // still does not pay.
            if ceiling.is_some() || self.plain_streak >= self.remeasure {
                self.explored = true;
                self.remeasuring = ceiling.is_none();
                self.why = Why::Explore;
                return self.explore_len(ceiling.unwrap_or(lo));
            }
        }
        let Some((d, tokens, cost)) = best else {
            self.why = Why::NoRoom;
            return 0;
        };
        let pays = tokens / cost > plain_rate;
        let (tokens, steps) = (tokens as f32, (cost / self.plain_ns) as f32);
        let d32 = d as u32;
        self.why = if pays {
            Why::Pays {
                d: d32,
                tokens,
                steps,
            }
        } else {
            Why::Plain {
                d: d32,
                tokens,
                steps,
            }
        };
        if std::mem::take(&mut self.explored) {
            self.explore = if pays {
                EXPLORE_MIN
            } else {
                (2 * self.explore).min(EXPLORE_MAX)
            };
            self.remeasure = match (pays, std::mem::take(&mut self.remeasuring)) {
                (false, true) => (2 * self.remeasure).min(REMEASURE_MAX),
                (true, _) => EXPLORE_MAX,
                _ => self.remeasure,
            };
        }
        if !pays {
            self.drafting_streak = 0;
            return 0;
        }
        self.drafting_streak += 1;
        // Until a second plain step is timed, the one price of plain decoding
        // is the first step, often cold and slow: drafting that seems to pay
        // against it is checked after FIRST_PROBE rounds, not PROBE_EVERY.
        let every = match self.plain_samples {
            0 | 1 => FIRST_PROBE,
            _ => PROBE_EVERY,
        };
        if self.drafting_streak > every {
            self.drafting_streak = 0;
            self.why = Why::Probe;
            return 0;
        }
        d
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
    // Called for every draft length at every step: no allocation.
    let point = |i: usize| match by_tokens.get(i) {
        Some(&c) if c > 0.0 => Some(c),
        _ if i == 1 && plain_ns > 0.0 => Some(plain_ns),
        _ => None,
    };
    if let Some(c) = point(tokens) {
        return Some(c);
    }
    let n = by_tokens.len().max(2);
    let measured = |range: &mut dyn Iterator<Item = usize>| {
        range.filter_map(|i| point(i).map(|c| (i, c))).next()
    };
    // The nearest measured points below and above, else the two nearest on
    // the one side there are.
    let below = measured(&mut (1..tokens.min(n)).rev());
    let above = measured(&mut (tokens + 1..n));
    let pair = match (below, above) {
        (Some(b), Some(a)) => Some((b, a)),
        (Some(b), None) => measured(&mut (1..b.0).rev()).map(|b0| (b0, b)),
        (None, Some(a)) => measured(&mut (a.0 + 1..n)).map(|a1| (a, a1)),
        (None, None) => return None,
    };
    match pair {
        Some(((x0, y0), (x1, y1))) => {
            let slope = (y1 - y0) / (x1 as f64 - x0 as f64);
            Some((y0 + slope * (tokens as f64 - x0 as f64)).max(0.0))
        }
        // One point only: proportional to it.
        None => {
            let (x, c) = below.or(above)?;
            Some(c * tokens as f64 / x as f64)
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
        // Dear enough that plain wins at this acceptance, cheap enough that
        // a perfect drafter would pay (so acceptance is worth re-measuring).
        a.record_draft(5, 100);
        a.record_verify(5, 3000, 4, 0);
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
        a.record_draft(5, 1000);
        a.record_verify(5, 2000, 4, 0);
        let mut gaps = Vec::new();
        for _ in 0..4 {
            let mut plain = 0;
            while a.choose(4) == 0 {
                a.record_plain(1000);
                plain += 1;
            }
            gaps.push(plain);
            a.record_draft(5, 1000);
            a.record_verify(5, 2000, 4, 0);
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
    fn the_first_draft_is_short_and_prices_the_passes() {
        let mut a = Adaptive::new(0, 15);
        assert_eq!(a.choose(15), 0);
        assert_eq!(a.why, Why::Measuring);
        a.record_plain(1000);
        assert_eq!(a.choose(15), FIRST_DRAFT);
        assert_eq!(a.why, Why::FirstDraft);
        assert_eq!(a.choose(1), 1);
        let mut b = Adaptive::new(4, 15);
        b.record_plain(1000);
        assert_eq!(b.choose(15), 4, "at least n_min");
    }

    #[test]
    fn where_not_even_a_perfect_drafter_pays_drafts_are_rare_and_short() {
        // Passes cost a plain step per token: every draft accepted, a round of
        // d drafts returns d + 1 tokens for 2(d + 1) steps.
        let mut a = Adaptive::new(0, 15);
        a.record_plain(1000);
        let d = a.choose(15);
        a.record_draft(d + 1, 1000 * (d as u64 + 1));
        a.record_verify(d + 1, 1000 * (d as u64 + 1), d, d);
        let mut plain = 0;
        while a.choose(15) == 0 {
            assert!(matches!(a.why, Why::Plain { .. }), "{:?}", a.why);
            a.record_plain(1000);
            plain += 1;
        }
        // Only the costs are re-measured, after the longest streak, with the
        // shortest draft.
        assert_eq!(plain, EXPLORE_MAX);
        assert_eq!(a.why, Why::Explore);
        assert_eq!(a.choose(15), 1);
        // That re-measurement still finds nothing that pays: the next one
        // waits twice as long.
        a.record_draft(2, 2000);
        a.record_verify(2, 2000, 1, 1);
        let mut plain = 0;
        while a.choose(15) == 0 {
            a.record_plain(1000);
            plain += 1;
        }
        assert_eq!(plain, 2 * EXPLORE_MAX);
        assert!(Why::Plain {
            d: 4,
            tokens: 2.3,
            steps: 2.4
        }
        .describe()
        .contains("4 drafts a round would cost 2.4 steps, return 2.3 tokens"));
    }

    /// The definition `interpolate` implements without allocating: the
    /// measured points (and the plain step at 1 token) sorted, then linear
    /// through the two around `tokens` (the two nearest at either end), or
    /// proportional to a lone point.
    fn interpolate_ref(by_tokens: &[f64], plain_ns: f64, tokens: usize) -> Option<f64> {
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

    #[test]
    fn interpolation_without_allocation_equals_its_definition() {
        let mut rng = crate::sample::Rng::from_seed(11);
        for _ in 0..5000 {
            let n = 2 + (rng.next_u64() % 16) as usize;
            let by: Vec<f64> = (0..n)
                .map(|i| {
                    let keep = i >= 2 && rng.next_u64().is_multiple_of(3);
                    if keep {
                        100.0 + (rng.next_u64() % 10_000) as f64
                    } else {
                        0.0
                    }
                })
                .collect();
            let plain = if rng.next_u64().is_multiple_of(4) {
                0.0
            } else {
                500.0
            };
            for tokens in 1..n + 3 {
                assert_eq!(
                    interpolate(&by, plain, tokens),
                    interpolate_ref(&by, plain, tokens),
                    "{by:?} plain {plain} tokens {tokens}"
                );
            }
        }
    }

    #[test]
    fn a_cold_first_plain_step_does_not_keep_it_drafting_at_a_loss() {
        // The first plain step took ten times the usual (a cold start); the
        // passes, measured after it, cost 3 steps for 2.5 tokens.
        let mut a = Adaptive::new(0, 15);
        a.record_plain(10_000);
        let mut drafted = 0;
        for _ in 0..200 {
            match a.choose(15) {
                0 => a.record_plain(1000),
                d => {
                    drafted += 1;
                    a.record_draft(d + 1, 1500);
                    a.record_verify(d + 1, 1500, d, 1);
                }
            }
        }
        // Drafting looked 3x ahead at first; the plain step re-timed after
        // PROBE_EVERY rounds ends it (plus the first draft and the rare
        // re-measurements of the costs). Without the probe: all 200.
        assert!(drafted <= PROBE_EVERY + 4, "{drafted}");
        assert!(matches!(a.why, Why::Plain { .. }), "{:?}", a.why);
    }

    #[test]
    fn with_one_plain_step_timed_the_first_probe_comes_after_first_probe_rounds() {
        // As above: the one plain price is a cold step ten times the usual.
        let mut a = Adaptive::new(0, 15);
        a.record_plain(10_000);
        let mut choices = Vec::new();
        for _ in 0..40 {
            let d = a.choose(15);
            choices.push((d, a.why));
            match d {
                0 => a.record_plain(1000),
                d => {
                    a.record_draft(d + 1, 1500);
                    a.record_verify(d + 1, 1500, d, 1);
                }
            }
        }
        // The first draft, FIRST_PROBE rounds that seem to pay, the probe.
        let first_plain = choices.iter().position(|c| c.0 == 0).unwrap();
        assert_eq!(first_plain, FIRST_PROBE + 1, "{choices:?}");
        assert_eq!(choices[first_plain].1, Why::Probe);
        // The warm price ends drafting (explorations aside).
        let drafted = choices.iter().filter(|c| c.0 > 0).count();
        assert!(drafted <= FIRST_PROBE + 3, "{choices:?}");
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
