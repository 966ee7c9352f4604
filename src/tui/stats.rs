//! Running statistics behind the side panels: per-layer timing, expert routing, draft
//! acceptance and decode speed per mode. Pure data; times are passed in.

use std::collections::VecDeque;

/// Per-layer milliseconds per token, smoothed.
#[derive(Clone, Debug, Default)]
pub struct LayerTiming {
    /// Exponential moving averages, one per layer.
    pub mixer_ms: Vec<f32>,
    pub moe_ms: Vec<f32>,
    /// How many `LayerTimes` reports went in.
    pub samples: u64,
}

/// Weight of the newest sample in the timing average.
const TIMING_ALPHA: f32 = 0.2;

impl LayerTiming {
    pub fn record(&mut self, mixer_ms: &[f32], moe_ms: &[f32]) {
        let n = mixer_ms.len().max(moe_ms.len());
        let first = self.samples == 0 || self.mixer_ms.len() != n;
        if first {
            self.mixer_ms = vec![0.0; n];
            self.moe_ms = vec![0.0; n];
        }
        for i in 0..n {
            let mx = mixer_ms.get(i).copied().unwrap_or(0.0).max(0.0);
            let mo = moe_ms.get(i).copied().unwrap_or(0.0).max(0.0);
            if first {
                self.mixer_ms[i] = mx;
                self.moe_ms[i] = mo;
            } else {
                self.mixer_ms[i] += TIMING_ALPHA * (mx - self.mixer_ms[i]);
                self.moe_ms[i] += TIMING_ALPHA * (mo - self.moe_ms[i]);
            }
        }
        self.samples += 1;
    }

    /// Sum over layers of mixer and MoE time.
    pub fn totals(&self) -> (f32, f32) {
        (self.mixer_ms.iter().sum(), self.moe_ms.iter().sum())
    }
}

/// Which routing counts the heatmap shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeatWindow {
    Recent,
    Cumulative,
}

/// Time by op kind (`EngineEvent::OpTimes`), smoothed like [`LayerTiming`].
#[derive(Clone, Debug, Default)]
pub struct OpTiming {
    pub ms: Vec<(&'static str, f32)>,
    pub samples: u64,
}

impl OpTiming {
    pub fn record(&mut self, ops: &[(&'static str, f32)]) {
        let same = self.ms.len() == ops.len() && self.ms.iter().zip(ops).all(|(a, b)| a.0 == b.0);
        if self.samples == 0 || !same {
            self.ms = ops.iter().map(|&(n, v)| (n, v.max(0.0))).collect();
        } else {
            for (m, &(_, v)) in self.ms.iter_mut().zip(ops) {
                m.1 += TIMING_ALPHA * (v.max(0.0) - m.1);
            }
        }
        self.samples += 1;
    }

    /// Each kind's share of the total, largest first (kinds that took no
    /// time left out).
    pub fn shares(&self) -> Vec<(&'static str, f32)> {
        let total: f32 = self.ms.iter().map(|m| m.1).sum();
        if total <= 0.0 {
            return Vec::new();
        }
        let mut v: Vec<(&'static str, f32)> = self
            .ms
            .iter()
            .filter(|m| m.1 > 0.0)
            .map(|&(n, ms)| (n, ms / total))
            .collect();
        v.sort_by(|a, b| b.1.total_cmp(&a.1));
        v
    }
}

/// Counts of expert selections per layer, since the start and over the last tokens.
#[derive(Clone, Debug)]
pub struct RoutingStats {
    pub n_experts: usize,
    /// `cumulative[layer][expert]`.
    pub cumulative: Vec<Vec<u32>>,
    pub recent: Vec<Vec<u32>>,
    window: VecDeque<Vec<Vec<u16>>>,
    pub window_len: usize,
    pub tokens: u64,
}

impl RoutingStats {
    pub fn new(n_layers: usize, n_experts: usize, window_len: usize) -> Self {
        RoutingStats {
            n_experts,
            cumulative: vec![vec![0; n_experts]; n_layers],
            recent: vec![vec![0; n_experts]; n_layers],
            window: VecDeque::new(),
            window_len: window_len.max(1),
            tokens: 0,
        }
    }

    /// Adds one token's selections; layers or experts past the configured shape grow it.
    pub fn record(&mut self, layer_experts: &[Vec<u16>]) {
        let max_e = layer_experts
            .iter()
            .flatten()
            .map(|&e| e as usize + 1)
            .max()
            .unwrap_or(0);
        self.n_experts = self.n_experts.max(max_e);
        let (layers, experts) = (
            layer_experts.len().max(self.cumulative.len()),
            self.n_experts,
        );
        for grid in [&mut self.cumulative, &mut self.recent] {
            grid.resize(layers, Vec::new());
            for row in grid.iter_mut() {
                row.resize(experts, 0);
            }
        }
        for (l, es) in layer_experts.iter().enumerate() {
            for &e in es {
                self.cumulative[l][e as usize] += 1;
                self.recent[l][e as usize] += 1;
            }
        }
        self.window.push_back(layer_experts.to_vec());
        while self.window.len() > self.window_len {
            let old = self.window.pop_front().unwrap_or_default();
            for (l, es) in old.iter().enumerate() {
                for &e in es {
                    let c = &mut self.recent[l][e as usize];
                    *c = c.saturating_sub(1);
                }
            }
        }
        self.tokens += 1;
    }

    pub fn grid(&self, w: HeatWindow) -> &[Vec<u32>] {
        match w {
            HeatWindow::Recent => &self.recent,
            HeatWindow::Cumulative => &self.cumulative,
        }
    }

    /// The `n` most selected (layer, expert, count), most first; ties by layer, expert.
    pub fn hottest(&self, w: HeatWindow, n: usize) -> Vec<(usize, usize, u32)> {
        let mut all: Vec<(usize, usize, u32)> = self
            .grid(w)
            .iter()
            .enumerate()
            .flat_map(|(l, row)| row.iter().enumerate().map(move |(e, &c)| (l, e, c)))
            .filter(|&(_, _, c)| c > 0)
            .collect();
        all.sort_by(|a, b| b.2.cmp(&a.2).then(a.0.cmp(&b.0)).then(a.1.cmp(&b.1)));
        all.truncate(n);
        all
    }

    /// Tokens the chosen view covers.
    pub fn tokens_in(&self, w: HeatWindow) -> u64 {
        match w {
            HeatWindow::Recent => self.window.len() as u64,
            HeatWindow::Cumulative => self.tokens,
        }
    }
}

/// Draft acceptance over all speculative rounds.
#[derive(Clone, Debug, Default)]
pub struct AcceptStats {
    /// `hist[a]`: rounds that accepted exactly `a` drafts.
    pub hist: Vec<u64>,
    /// Per draft position j (0-based): rounds that drafted a token there...
    pub pos_drafted: Vec<u64>,
    /// ...and rounds whose draft there was accepted.
    pub pos_accepted: Vec<u64>,
    pub rounds: u64,
    pub drafted: u64,
    pub accepted: u64,
}

impl AcceptStats {
    pub fn record(&mut self, accepted: usize, drafted: usize) {
        let accepted = accepted.min(drafted);
        if self.hist.len() <= drafted {
            self.hist.resize(drafted + 1, 0);
        }
        self.hist[accepted] += 1;
        if self.pos_drafted.len() < drafted {
            self.pos_drafted.resize(drafted, 0);
            self.pos_accepted.resize(drafted, 0);
        }
        for j in 0..drafted {
            self.pos_drafted[j] += 1;
            if j < accepted {
                self.pos_accepted[j] += 1;
            }
        }
        self.rounds += 1;
        self.drafted += drafted as u64;
        self.accepted += accepted as u64;
    }

    /// Acceptance rate at each draft position.
    pub fn by_position(&self) -> Vec<f64> {
        self.pos_drafted
            .iter()
            .zip(&self.pos_accepted)
            .map(|(&d, &a)| if d == 0 { 0.0 } else { a as f64 / d as f64 })
            .collect()
    }

    /// Tokens emitted per verify forward pass: mean of accepted + 1.
    pub fn tokens_per_forward(&self) -> Option<f64> {
        (self.rounds > 0).then(|| (self.accepted + self.rounds) as f64 / self.rounds as f64)
    }

    pub fn rate(&self) -> Option<f64> {
        (self.drafted > 0).then(|| self.accepted as f64 / self.drafted as f64)
    }
}

/// Decode speed of one mode: decayed sums of tokens and milliseconds between tokens.
#[derive(Clone, Copy, Debug, Default)]
pub struct SpeedMeter {
    tokens: f64,
    ms: f64,
}

/// Older tokens fade with this factor per token, so the meter follows recent speed.
const SPEED_DECAY: f64 = 0.98;
/// Tokens a meter needs before it reports a speed.
const MIN_TOKENS: f64 = 3.0;

impl SpeedMeter {
    pub fn add(&mut self, tokens: usize, ms: f64) {
        for _ in 0..tokens {
            self.tokens *= SPEED_DECAY;
            self.ms *= SPEED_DECAY;
            self.tokens += 1.0;
        }
        self.ms += ms.max(0.0);
    }
    pub fn tok_per_s(&self) -> Option<f64> {
        (self.tokens >= MIN_TOKENS && self.ms > 0.0).then(|| self.tokens / self.ms * 1000.0)
    }
}

/// The chat screen's speeds. One definition of tok/s holds across the
/// screen: a reply's tokens over its decoding time (the end of its prefill to
/// its last token). The header's figure is the reply in flight's (by arrival
/// times) and, once it is done, the engine's figure for it, which the reply's
/// own line shows too; the per-mode meters are the draft panel's fallback
/// when the engine sends no loop totals.
#[derive(Clone, Debug, Default)]
pub struct Speeds {
    pub plain: SpeedMeter,
    pub spec: SpeedMeter,
    /// The reply in flight: tokens timed and their milliseconds.
    reply_tokens: usize,
    reply_ms: f64,
    /// The last finished reply's speed, as its line shows it.
    done_tps: Option<f64>,
    /// Prefill tokens per second of the last prompt.
    pub prefill_tps: Option<f64>,
    /// Time of the previous token (or prefill end) in the reply in flight, in ms.
    last_ms: Option<f64>,
    /// Tokens since `last_ms` not yet timed (a speculative burst).
    round_spec: bool,
    /// Mode of the most recent token.
    pub last_was_spec: bool,
}

impl Speeds {
    pub fn start_reply(&mut self) {
        self.last_ms = None;
        self.round_spec = false;
        self.reply_tokens = 0;
        self.reply_ms = 0.0;
    }
    /// The reply ended with `tok_per_s` by the engine's clock (its line's figure).
    pub fn reply_done(&mut self, tok_per_s: f64) {
        self.done_tps = (tok_per_s > 0.0).then_some(tok_per_s);
        self.reply_tokens = 0;
        self.reply_ms = 0.0;
    }
    pub fn prefill(&mut self, tokens: usize, ms: f64, now_ms: f64) {
        if ms > 0.0 {
            self.prefill_tps = Some(tokens as f64 / ms * 1000.0);
        }
        self.last_ms = Some(now_ms);
    }
    /// A speculative round was verified: the tokens up to its last belong to spec mode.
    pub fn verified(&mut self) {
        self.round_spec = true;
    }
    /// One token arrived at `now_ms`; `kind_spec` when it is an accepted draft or a
    /// correction. The round's last token (plain or corrected) closes the round.
    pub fn token(&mut self, kind_spec: bool, closes_round: bool, now_ms: f64) {
        let spec = kind_spec || self.round_spec;
        let dt = self.last_ms.map_or(0.0, |t| now_ms - t);
        if self.last_ms.is_some() {
            let meter = if spec {
                &mut self.spec
            } else {
                &mut self.plain
            };
            meter.add(1, dt);
            self.reply_tokens += 1;
            self.reply_ms += dt.max(0.0);
        }
        self.last_ms = Some(now_ms);
        self.last_was_spec = spec;
        if closes_round {
            self.round_spec = false;
        }
    }
    /// The header's decode speed: the reply in flight's once a few of its
    /// tokens are timed, else the last finished reply's.
    pub fn current(&self) -> Option<f64> {
        if self.reply_tokens as f64 >= MIN_TOKENS && self.reply_ms > 0.0 {
            return Some(self.reply_tokens as f64 / self.reply_ms * 1000.0);
        }
        self.done_tps
    }
    /// Speculative over plain decode speed, once both were measured.
    pub fn speedup(&self) -> Option<f64> {
        Some(self.spec.tok_per_s()? / self.plain.tok_per_s()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acceptance_histogram_positions_and_tokens_per_forward() {
        let mut a = AcceptStats::default();
        a.record(3, 4);
        a.record(3, 4);
        a.record(0, 4);
        a.record(4, 4);
        assert_eq!(a.hist, vec![1, 0, 0, 2, 1]);
        assert_eq!(a.pos_drafted, vec![4, 4, 4, 4]);
        assert_eq!(a.pos_accepted, vec![3, 3, 3, 1]);
        assert_eq!(a.by_position()[3], 0.25);
        // (3+1 + 3+1 + 0+1 + 4+1) / 4 rounds
        assert_eq!(a.tokens_per_forward(), Some(3.5));
        assert_eq!(a.rate(), Some(10.0 / 16.0));
    }

    #[test]
    fn recent_routing_window_forgets_old_tokens_but_cumulative_keeps_them() {
        let mut r = RoutingStats::new(2, 8, 2);
        r.record(&[vec![1], vec![2]]);
        r.record(&[vec![3], vec![2]]);
        r.record(&[vec![3], vec![5]]);
        assert_eq!(r.cumulative[0][1], 1);
        assert_eq!(r.recent[0][1], 0);
        assert_eq!(r.recent[0][3], 2);
        assert_eq!(r.hottest(HeatWindow::Cumulative, 1), vec![(0, 3, 2)]);
        assert_eq!(r.hottest(HeatWindow::Recent, 2), vec![(0, 3, 2), (1, 2, 1)]);
        assert_eq!(r.tokens_in(HeatWindow::Recent), 2);
    }

    #[test]
    fn routing_grows_for_experts_past_the_declared_count() {
        let mut r = RoutingStats::new(1, 4, 4);
        r.record(&[vec![9]]);
        assert_eq!(r.n_experts, 10);
        assert_eq!(r.cumulative[0][9], 1);
    }

    #[test]
    fn speeds_split_by_mode_and_give_the_speedup() {
        let mut s = Speeds::default();
        s.start_reply();
        s.prefill(100, 50.0, 0.0);
        assert_eq!(s.prefill_tps, Some(2000.0));
        let mut t = 0.0;
        for _ in 0..10 {
            t += 40.0;
            s.token(false, true, t); // 25 tok/s plain
        }
        for _ in 0..10 {
            // a round of 3 accepted + 1 correction every 80 ms: 50 tok/s
            t += 80.0;
            s.verified();
            for _ in 0..3 {
                s.token(true, false, t);
            }
            s.token(true, true, t);
        }
        let plain = s.plain.tok_per_s().unwrap();
        assert!((plain - 25.0).abs() < 1e-9, "{plain}");
        let sp = s.speedup().unwrap();
        assert!((sp - 2.0).abs() < 0.1, "{sp}");
    }

    #[test]
    fn op_timing_smooths_and_ranks_by_share() {
        let mut o = OpTiming::default();
        assert!(o.shares().is_empty(), "nothing before the first report");
        o.record(&[("a", 1.0), ("b", 3.0), ("c", 0.0)]);
        assert_eq!(o.shares(), vec![("b", 0.75), ("a", 0.25)]);
        o.record(&[("a", 6.0), ("b", 3.0), ("c", 0.0)]);
        // a: 1 + 0.2 · (6 − 1) = 2, b stays 3.
        assert_eq!(o.ms, vec![("a", 2.0), ("b", 3.0), ("c", 0.0)]);
        assert_eq!(o.shares(), vec![("b", 0.6), ("a", 0.4)]);
        // Other kinds (another engine) start over.
        o.record(&[("x", 1.0)]);
        assert_eq!(o.shares(), vec![("x", 1.0)]);
    }

    #[test]
    fn layer_timing_starts_at_the_first_sample_then_smooths() {
        let mut t = LayerTiming::default();
        t.record(&[1.0, 2.0], &[3.0, 4.0]);
        assert_eq!(t.mixer_ms, vec![1.0, 2.0]);
        t.record(&[2.0, 2.0], &[3.0, 4.0]);
        assert!((t.mixer_ms[0] - 1.2).abs() < 1e-6);
        assert_eq!(t.totals(), (t.mixer_ms[0] + 2.0, 7.0));
    }
}
