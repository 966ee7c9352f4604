//! Choosing the draft length D from measurements (DESIGN §4.2).
//!
//! With a_j the measured probability that draft j is accepted given that
//! drafts 1 … j−1 were (Laplace-smoothed counts), a D-draft iteration emits
//! `E(D) = 1 + Σ_{k=1..D} Π_{j≤k} a_j` tokens and costs
//! `draft + verify(D+1)` (both measured; unmeasured verify lengths are
//! interpolated linearly in the token count from the measured ones). D is
//! the length maximising tokens per second, or 0 (plain decoding) when no D
//! beats `1 / plain`. While plain decoding wins, one iteration in `explore`
//! still drafts at `n_max`, so the estimates can recover.

/// Running estimates of acceptance and pass costs.
#[derive(Clone, Debug)]
pub struct Adaptive {
    n_min: usize,
    n_max: usize,
    /// Per position: times reached (previous all accepted), times accepted.
    reached: Vec<u64>,
    accepted: Vec<u64>,
    /// Exponential moving averages (ns): plain step, draft pass, verify pass
    /// by token count (index = tokens, 0 = unmeasured).
    plain_ns: f64,
    draft_ns: f64,
    verify_ns: Vec<f64>,
    plain_streak: usize,
    pub explore: usize,
}

const EMA: f64 = 0.3;

fn ema(old: &mut f64, x: f64) {
    *old = if *old == 0.0 {
        x
    } else {
        (1.0 - EMA) * *old + EMA * x
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
            draft_ns: 0.0,
            verify_ns: vec![0.0; n_max + 2],
            plain_streak: 0,
            explore: 16,
        }
    }

    pub fn record_plain(&mut self, ns: u64) {
        ema(&mut self.plain_ns, ns as f64);
        self.plain_streak += 1;
    }

    pub fn record_draft(&mut self, ns: u64) {
        ema(&mut self.draft_ns, ns as f64);
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
        if let Some(&c) = self.verify_ns.get(tokens).filter(|c| **c > 0.0) {
            return Some(c);
        }
        let measured: Vec<(usize, f64)> = self
            .verify_ns
            .iter()
            .enumerate()
            .filter(|(_, c)| **c > 0.0)
            .map(|(i, c)| (i, *c))
            .collect();
        let mut pts = measured;
        if self.plain_ns > 0.0 {
            pts.push((1, self.plain_ns));
        }
        pts.sort_by_key(|p| p.0);
        pts.dedup_by_key(|p| p.0);
        match pts.as_slice() {
            [] => None,
            [(n, c)] => Some(c * tokens as f64 / *n as f64),
            _ => {
                // Linear through the nearest two (extrapolating at the ends).
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
            return hi;
        }
        let plain_rate = 1.0 / self.plain_ns;
        let mut best = (0, plain_rate);
        for d in self.n_min.max(1)..=hi {
            let Some(v) = self.verify_cost(d + 1) else {
                return hi;
            };
            let rate = self.expected_tokens(d) / (self.draft_ns + v);
            if rate > best.1 {
                best = (d, rate);
            }
        }
        best.0
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
            a.record_draft(1000);
            a.record_verify(9, 2000, 8, 0);
        }
        assert_eq!(a.choose(8), 0);
    }

    #[test]
    fn drafts_long_when_everything_is_accepted_and_verify_is_cheap() {
        let mut a = Adaptive::new(1, 8);
        a.record_plain(1000);
        for _ in 0..50 {
            a.record_draft(100);
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
        assert_eq!(a.choose(4), 4);
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
