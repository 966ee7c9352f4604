//! Choosing the draft length D from measurements (docs/DESIGN.md §4.2).
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
//! drafts, so the estimates can recover, if drafting plausibly pays: at the
//! length that would be best were every position accepted one standard
//! deviation more often than counted ([`Adaptive::optimistic`]), when that
//! rate beats plain decoding (and, since acceptance changes with the text,
//! as a long shot whenever a perfect drafter would pay: after
//! [`EXPLORE_MAX`] plain steps, then twice as many each time a long shot
//! leaves plain decoding ahead, up to [`REMEASURE_MAX`]).
//! An exploration that leaves plain decoding ahead doubles the streak, up to
//! [`EXPLORE_MAX`], unless the exploring round paid by itself: then the next
//! one comes after [`EXPLORE_AFTER_PAID`] steps (a good drafter seen a few
//! times is still priced low by the smoothed counts); as soon as drafting
//! wins the streak is back to [`EXPLORE_MIN`]. When not even a perfect
//! drafter would pay at the measured costs, acceptance cannot change the
//! choice, and only the costs are re-measured, at the first draft's length
//! (whose passes often ran cold, the first time through the code): after
//! [`EXPLORE_MIN`] plain steps, then [`EXPLORE_MAX`], then twice as many each
//! time drafting still does not pay (up to [`REMEASURE_MAX`]): so a model whose
//! passes are too dear for speculation decodes at its plain speed.

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
    /// The last exploring round returned at least as many tokens as its two
    /// passes cost in plain steps, and the last draft pass's time.
    explore_paid: bool,
    last_draft_ns: f64,
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

/// Plain steps before the next exploration when the last exploring round
/// paid by itself (returned at least its cost in plain steps' worth of
/// tokens) while the estimates still chose plain decoding.
pub const EXPLORE_AFTER_PAID: usize = 4;

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
            explore_paid: false,
            last_draft_ns: 0.0,
            why: Why::Measuring,
            remeasure: EXPLORE_MIN,
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
        self.last_draft_ns = ns as f64;
        if tokens < self.draft_ns.len() {
            ema(&mut self.draft_ns[tokens], ns as f64);
        }
    }

    /// A verify pass of `tokens` tokens; `proposed` drafts, `accepted` kept.
    pub fn record_verify(&mut self, tokens: usize, ns: u64, proposed: usize, accepted: usize) {
        if self.explored && self.plain_ns > 0.0 {
            let steps = (self.last_draft_ns + ns as f64) / self.plain_ns;
            self.explore_paid = (accepted + 1) as f64 >= steps;
        }
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
            match ceiling {
                // Explore acceptance where drafting plausibly pays: at the
                // length best at optimistic acceptance, when that rate beats
                // plain decoding (or, however unlikely, after EXPLORE_MAX
                // plain steps, since acceptance can change with the text).
                Some(c) => {
                    let (d, rate) = self.optimistic(lo, c);
                    let long_shot = rate <= plain_rate;
                    if !long_shot || self.plain_streak >= self.remeasure.max(EXPLORE_MAX) {
                        self.explored = true;
                        self.remeasuring = long_shot;
                        self.why = Why::Explore;
                        return d;
                    }
                }
                // Without a ceiling acceptance does not matter: only the pass
                // costs are re-measured, at the first draft's length (whose
                // passes ran cold), after a streak that grows each time
                // drafting still does not pay.
                None if self.plain_streak >= self.remeasure => {
                    self.explored = true;
                    self.remeasuring = true;
                    self.why = Why::Explore;
                    return FIRST_DRAFT.clamp(lo, hi);
                }
                None => {}
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
            let paid = std::mem::take(&mut self.explore_paid);
            self.explore = if pays {
                EXPLORE_MIN
            } else if paid {
                // The estimates say plain, the round itself paid: few rounds
                // seen yet, so look again soon.
                EXPLORE_AFTER_PAID
            } else {
                (2 * self.explore).min(EXPLORE_MAX)
            };
            // A long shot (a re-measurement, or an exploration that not even
            // optimistic acceptance favoured) that left plain decoding ahead
            // makes the next one wait twice as long.
            self.remeasure = match (pays || paid, std::mem::take(&mut self.remeasuring)) {
                (false, true) if self.remeasure < EXPLORE_MAX => EXPLORE_MAX,
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

    /// Optimistic acceptance of position j: the smoothed estimate plus one
    /// standard deviation of a proportion over its count, at most 1.
    pub fn acceptance_ucb(&self, j: usize) -> f64 {
        let a = self.acceptance(j);
        let n = self.reached[j] as f64 + 2.0;
        (a + (a * (1.0 - a) / n).sqrt()).min(1.0)
    }

    /// The draft length in `lo..=hi` with the best rate (tokens per ns) at
    /// optimistic acceptance ([`Adaptive::acceptance_ucb`]), and that rate:
    /// what an exploring round drafts.
    pub fn optimistic(&self, lo: usize, hi: usize) -> (usize, f64) {
        let (mut tokens, mut reach) = (1.0, 1.0);
        let mut best = (lo, 0.0);
        for d in 1..=hi {
            reach *= self.acceptance_ucb(d - 1);
            tokens += reach;
            if d < lo {
                continue;
            }
            let (Some(dr), Some(v)) = (self.draft_cost(d + 1), self.verify_cost(d + 1)) else {
                break;
            };
            let rate = tokens / (dr + v);
            if rate > best.1 {
                best = (d, rate);
            }
        }
        best
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

    /// Plain steps (each timed at 1000 ns), every one chosen as plain
    /// decoding, until the controller drafts.
    fn plain_until_draft(a: &mut Adaptive, cap: usize) -> usize {
        let mut plain = 0;
        while a.choose(cap) == 0 {
            assert!(matches!(a.why, Why::Plain { .. }), "{:?}", a.why);
            a.record_plain(1000);
            plain += 1;
        }
        plain
    }

    #[test]
    fn explores_again_after_a_streak_of_plain_steps() {
        let mut a = Adaptive::new(1, 4);
        a.record_plain(1000);
        // A round of any length costs two plain steps (draft and verify
        // interpolated from 5 tokens: 500 and 1500 ns). Two rounds rejected
        // the first draft: at the estimates plain wins (a 4-draft round
        // returns 1.47 tokens), at optimistic acceptance it might not (2.5).
        for _ in 0..2 {
            a.record_draft(5, 500);
            a.record_verify(5, 1500, 4, 0);
        }
        for _ in 0..a.explore {
            assert_eq!(a.choose(4), 0);
            assert!(matches!(a.why, Why::Plain { .. }), "{:?}", a.why);
            a.record_plain(1000);
        }
        assert_eq!(a.choose(4), 4);
        assert_eq!(a.why, Why::Explore);
    }

    #[test]
    fn an_exploring_round_that_paid_by_itself_brings_the_next_one_soon() {
        let mut a = Adaptive::new(1, 4);
        a.record_plain(1000);
        for _ in 0..2 {
            a.record_draft(5, 500);
            a.record_verify(5, 1500, 4, 0);
        }
        let plain = plain_until_draft(&mut a, 4);
        assert_eq!(plain, EXPLORE_MIN);
        // The exploring round returns 2 tokens for 2 plain steps' worth of
        // passes; the estimates still say plain (1.6 tokens a round).
        a.record_draft(5, 500);
        a.record_verify(5, 1500, 4, 1);
        let plain = plain_until_draft(&mut a, 4);
        assert_eq!(plain, EXPLORE_AFTER_PAID);
        assert_eq!(a.why, Why::Explore);
    }

    /// Tokens per plain step's worth of time over `horizon` tokens, the
    /// controller choosing, with passes costing what a full-size
    /// apex-miniplus file measured at `-t 2` (plain steps: a draft pass over
    /// t tokens 1 + 0.14(t − 1) up to 5 tokens, + 0.295 per token beyond; a
    /// verify pass 1 + 0.24(t − 1), + 0.445 beyond), acceptance drawn from
    /// `profile` (conditional, by position) with a fixed xorshift stream, and
    /// the first plain step and the first draft round `cold` times dearer.
    fn simulate(profile: &[f64], cold: f64, seed: u64, horizon: usize) -> f64 {
        let cost = |t: usize, small: f64, large: f64| {
            let t = t as f64;
            match t <= 5.0 {
                true => 1.0 + small * (t - 1.0),
                false => 1.0 + 4.0 * small + large * (t - 5.0),
            }
        };
        let mut a = Adaptive::new(0, 15);
        let mut x = seed;
        let mut uniform = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % 1_000_000) as f64 / 1e6
        };
        let (mut tokens, mut steps, mut first) = (0usize, 0.0f64, true);
        while tokens < horizon {
            let d = a.choose(15);
            if d == 0 {
                let c = if tokens == 0 { cold } else { 1.0 };
                a.record_plain((c * 1e6) as u64);
                (tokens, steps) = (tokens + 1, steps + c);
                continue;
            }
            let k = if std::mem::take(&mut first) {
                cold
            } else {
                1.0
            };
            let (dr, v) = (cost(d + 1, 0.14, 0.295) * k, cost(d + 1, 0.24, 0.445) * k);
            a.record_draft(d + 1, (dr * 1e6) as u64);
            let mut acc = 0;
            while acc < d && acc < profile.len() && uniform() < profile[acc] {
                acc += 1;
            }
            a.record_verify(d + 1, (v * 1e6) as u64, d, acc);
            (tokens, steps) = (tokens + acc + 1, steps + dr + v);
        }
        tokens as f64 / steps
    }

    fn mean_speed(profile: &[f64], cold: f64, horizon: usize) -> f64 {
        (1..=8)
            .map(|s| simulate(profile, cold, s * 7919, horizon))
            .sum::<f64>()
            / 8.0
    }

    #[test]
    fn a_good_drafter_is_found_and_drafters_that_never_pay_cost_little() {
        // A good drafter (0.97, 0.88, 0.90, 0.92 by position, then almost
        // never): a fixed 3-draft round would give about 1.10x. The earlier
        // controller (flat-prior explorations to a 5 % reach, doubling
        // streaks, costs re-measured after 256 steps) got 0.99x here.
        let good = [0.97, 0.88, 0.90, 0.92, 0.012, 0.5, 0.0];
        assert!(mean_speed(&good, 2.5, 1000) > 1.10);
        assert!(mean_speed(&good, 1.0, 384) > 1.02);
        // Drafters that never pay at these costs stay within 3 % of plain.
        let never = [0.0];
        let half = [0.5, 0.5, 0.5];
        let default_model = [0.985, 0.552, 0.644, 0.388, 0.0];
        for p in [&never[..], &half, &default_model] {
            for (cold, horizon) in [(1.0, 384), (2.5, 384), (2.5, 1000)] {
                let v = mean_speed(p, cold, horizon);
                assert!(v >= 0.97, "{p:?} cold {cold} over {horizon}: {v}");
            }
        }
    }

    #[test]
    fn an_exploring_draft_takes_the_best_length_at_optimistic_acceptance() {
        let mut a = Adaptive::new(1, 15);
        a.record_plain(1000);
        // Passes cost a plain step plus a tenth of one per extra token.
        for t in 2..=16 {
            let ns = 1000 + 100 * (t as u64 - 1);
            a.record_draft(t, ns);
            a.record_verify(t, ns, 0, 0);
        }
        // Drafts 1-3 always accepted, draft 4 never (20 rounds of 4).
        for _ in 0..20 {
            a.record_verify(5, 1400, 4, 3);
        }
        // Optimistic tokens: 1 + 0.999 + 0.998 + 0.997 for 2600 ns at d = 3,
        // plus 0.09 more for 200 ns more at d = 4.
        let (d, rate) = a.optimistic(1, 15);
        assert_eq!(d, 3);
        assert!(rate > 1.0 / 1000.0);
        assert_eq!(a.optimistic(4, 15).0, 4);
        assert_eq!(a.optimistic(1, 2).0, 2);
    }

    #[test]
    fn explorations_that_leave_plain_ahead_back_off_and_a_win_resets_them() {
        // Rounds cost two plain steps and nothing is accepted: optimistic
        // acceptance (first draft 1/3, 1/4, 1/5, 1/6 by the counts) keeps
        // exploring worth it for four rounds, each after twice the streak.
        let mut a = Adaptive::new(1, 4);
        a.record_plain(1000);
        a.record_draft(5, 500);
        a.record_verify(5, 1500, 4, 0);
        let mut gaps = Vec::new();
        for _ in 0..4 {
            let plain = plain_until_draft(&mut a, 4);
            gaps.push(plain);
            a.record_draft(5, 500);
            a.record_verify(5, 1500, 4, 0);
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
        plain_until_draft(&mut a, 4);
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
        let plain = plain_until_draft(&mut a, 15);
        // Only the costs are re-measured, with the first draft's length (its
        // passes may have run cold): first after the shortest streak...
        assert_eq!(plain, EXPLORE_MIN);
        assert_eq!(a.why, Why::Explore);
        assert_eq!(a.choose(15), FIRST_DRAFT);
        let f = FIRST_DRAFT as u64 + 1;
        a.record_draft(FIRST_DRAFT + 1, 1000 * f);
        a.record_verify(FIRST_DRAFT + 1, 1000 * f, FIRST_DRAFT, FIRST_DRAFT);
        // ...then, still finding nothing that pays, after the longest, and
        // twice as long each time after that.
        for want in [EXPLORE_MAX, 2 * EXPLORE_MAX] {
            let plain = plain_until_draft(&mut a, 15);
            assert_eq!(plain, want);
            a.record_draft(FIRST_DRAFT + 1, 1000 * f);
            a.record_verify(FIRST_DRAFT + 1, 1000 * f, FIRST_DRAFT, FIRST_DRAFT);
        }
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
