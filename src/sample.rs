//! Token sampling: llama.cpp's default sampler chain, with its defaults.
//!
//! For one row of logits (length V) and the tokens generated so far, the chain is
//!
//! ```text
//! penalties → top_k → top_p → min_p → temperature → dist
//! ```
//!
//! exactly as `common_params_sampling::samplers` orders it (llama.cpp `common/common.h`; DRY,
//! top-n-sigma, typical-p and XTC are disabled there by default and are not implemented here).
//! The filters before temperature see the untempered logits, as in llama.cpp:
//! - penalties, over the last `repeat_last_n` tokens of the history, each distinct token once
//!   with its count c: `l ← l > 0 ? l / repeat : l · repeat`, then
//!   `l ← l − c·frequency − presence`;
//! - top_k keeps the k largest logits (k ≤ 0: off);
//! - top_p keeps the shortest prefix (by descending probability) whose mass reaches p (p ≥ 1: off);
//! - min_p keeps tokens with `p_i ≥ min_p · p_max`, i.e. `l_i ≥ l_max + ln(min_p)` (0: off);
//! - temperature divides the logits; `temp ≤ 0` is greedy (argmax, ties to the lowest id);
//! - dist draws from the softmax of what is left.
//!
//! top_p and min_p keep at least `max(1, min_keep)` tokens. The random source is xoshiro256**
//! seeded through splitmix64, so a seed gives the same tokens on every machine.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::constrain::Constraint;

/// Parameters of the chain. `Default` gives llama.cpp's defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct SamplerParams {
    /// Temperature; `≤ 0` samples greedily.
    pub temp: f32,
    /// Keep the k most likely tokens; `≤ 0` disables.
    pub top_k: i32,
    /// Nucleus mass; `≥ 1` disables.
    pub top_p: f32,
    /// Relative probability floor; `≤ 0` disables.
    pub min_p: f32,
    /// Lower bound on the tokens top_p and min_p keep (0 behaves as 1).
    pub min_keep: usize,
    /// Repetition penalty; 1 disables.
    pub repeat_penalty: f32,
    /// How many of the most recent history tokens the penalties look at; 0 disables the
    /// penalties, −1 means the whole history.
    pub repeat_last_n: i32,
    /// Subtracted once from every token present in the window; 0 disables.
    pub presence_penalty: f32,
    /// Subtracted `count` times from every token in the window; 0 disables.
    pub frequency_penalty: f32,
    /// Seed of the random source; `None` seeds from the clock.
    pub seed: Option<u64>,
}

impl Default for SamplerParams {
    fn default() -> Self {
        SamplerParams {
            temp: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            min_keep: 0,
            repeat_penalty: 1.0,
            repeat_last_n: 64,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            seed: None,
        }
    }
}

impl SamplerParams {
    /// Greedy decoding: temperature 0, everything else default.
    pub fn greedy() -> Self {
        SamplerParams {
            temp: 0.0,
            ..SamplerParams::default()
        }
    }

    fn penalties_enabled(&self) -> bool {
        self.repeat_last_n != 0
            && (self.repeat_penalty != 1.0
                || self.presence_penalty != 0.0
                || self.frequency_penalty != 0.0)
    }
}

/// xoshiro256** (Blackman and Vigna), seeded through splitmix64.
#[derive(Clone, Debug)]
pub struct Rng {
    s: [u64; 4],
}

/// One step of splitmix64: advances `state` and returns the next output.
pub fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Rng {
    /// The generator whose four state words are the first four splitmix64 outputs of `seed`.
    pub fn from_seed(seed: u64) -> Rng {
        let mut sm = seed;
        let s = [
            splitmix64(&mut sm),
            splitmix64(&mut sm),
            splitmix64(&mut sm),
            splitmix64(&mut sm),
        ];
        Rng { s }
    }

    /// The generator with exactly this state (must not be all zero to be useful).
    pub fn from_state(s: [u64; 4]) -> Rng {
        Rng { s }
    }

    pub fn next_u64(&mut self) -> u64 {
        let s = &mut self.s;
        let result = s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }

    /// Uniform in [0, 1) with 53 random bits.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// Index of the largest value, ties to the lowest index; NaN never wins. Empty input gives 0.
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0usize;
    let mut best_v = f32::NEG_INFINITY;
    let mut seen = false;
    for (i, &v) in logits.iter().enumerate() {
        if v.is_nan() {
            continue;
        }
        if !seen || v > best_v {
            best = i;
            best_v = v;
            seen = true;
        }
    }
    best as u32
}

/// Softmax in place: `x_i ← e^{x_i − max} / Σ_j e^{x_j − max}`. When the largest value is
/// infinite (or everything is −∞), the mass is shared equally among the entries equal to it.
/// NaN entries get probability 0.
pub fn softmax_in_place(x: &mut [f32]) {
    let max = x
        .iter()
        .copied()
        .filter(|v| !v.is_nan())
        .fold(f32::NEG_INFINITY, f32::max);
    if max.is_infinite() {
        let mut n = 0usize;
        for v in x.iter_mut() {
            *v = if *v == max {
                n += 1;
                1.0
            } else {
                0.0
            };
        }
        if n > 0 {
            let inv = 1.0 / n as f32;
            x.iter_mut().for_each(|v| *v *= inv);
        }
        return;
    }
    let mut sum = 0.0f64;
    for v in x.iter_mut() {
        *v = if v.is_nan() { 0.0 } else { (*v - max).exp() };
        sum += *v as f64;
    }
    let inv = (1.0 / sum) as f32;
    x.iter_mut().for_each(|v| *v *= inv);
}

/// Softmax into a new vector (see [`softmax_in_place`]).
pub fn softmax(logits: &[f32]) -> Vec<f32> {
    let mut out = logits.to_vec();
    softmax_in_place(&mut out);
    out
}

/// One surviving token: its id and its logit (after penalties; after temperature once the
/// chain has run) or, at the end, its probability.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Candidate {
    id: u32,
    v: f32,
}

/// Descending value, ties to the lower id: the order every filter and the output use.
fn by_value_desc(a: &Candidate, b: &Candidate) -> std::cmp::Ordering {
    b.v.total_cmp(&a.v).then(a.id.cmp(&b.id))
}

/// Scratch buffers a chain run reuses.
#[derive(Clone, Debug, Default)]
struct Scratch {
    cands: Vec<Candidate>,
    /// The penalty window, sorted.
    window: Vec<u32>,
    /// Distinct window tokens with their penalised logits, by id.
    penalised: Vec<Candidate>,
}

fn clean(l: f32) -> f32 {
    if l.is_nan() {
        f32::NEG_INFINITY
    } else {
        l
    }
}

/// Fills `s.penalised` with each distinct token of the window and its penalised logit.
fn penalise(p: &SamplerParams, logits: &[f32], history: &[u32], s: &mut Scratch) {
    s.penalised.clear();
    if !p.penalties_enabled() {
        return;
    }
    let n = if p.repeat_last_n < 0 {
        history.len()
    } else {
        (p.repeat_last_n as usize).min(history.len())
    };
    s.window.clear();
    s.window.extend_from_slice(&history[history.len() - n..]);
    s.window.sort_unstable();
    for run in s.window.chunk_by(|a, b| a == b) {
        let tok = run[0];
        let Some(&l) = logits.get(tok as usize) else {
            continue;
        };
        let l = clean(l);
        let mut v = if l <= 0.0 {
            l * p.repeat_penalty
        } else {
            l / p.repeat_penalty
        };
        v -= run.len() as f32 * p.frequency_penalty + p.presence_penalty;
        s.penalised.push(Candidate { id: tok, v });
    }
}

/// The m largest raw logits (ties to the lower id) in `out`, unordered, in one pass: values
/// are buffered up to 2m, cut back to the best m, and later values must beat the m-th.
fn top_m(logits: &[f32], m: usize, out: &mut Vec<Candidate>) {
    out.clear();
    let cap = 2 * m.max(16);
    let mut threshold = f32::NEG_INFINITY;
    let mut full = false;
    for (i, &l) in logits.iter().enumerate() {
        let v = clean(l);
        if full && v <= threshold {
            continue;
        }
        out.push(Candidate { id: i as u32, v });
        if out.len() == cap {
            out.select_nth_unstable_by(m - 1, by_value_desc);
            out.truncate(m);
            threshold = out[m - 1].v;
            full = true;
        }
    }
}

/// Vocabularies above this size try a partial sort first when top_k is off.
const PARTIAL_SORT_MIN: usize = 1024;
/// How many of the best tokens the partial sort orders before checking the nucleus.
const PARTIAL_SORT_PREFIX: usize = 256;

/// How many of `sorted` (descending) top_p keeps: the shortest prefix whose probability mass
/// (`e^{l − max} / sum`) reaches `top_p`, and at least `min_keep`; `None` if the prefix given
/// does not reach it.
fn nucleus(sorted: &[Candidate], max: f32, sum: f64, top_p: f32, min_keep: usize) -> Option<usize> {
    let mut cum = 0.0f64;
    for (i, c) in sorted.iter().enumerate() {
        cum += ((c.v - max) as f64).exp() / sum;
        if cum >= top_p as f64 && i + 1 >= min_keep {
            return Some(i + 1);
        }
    }
    None
}

/// Runs the chain up to and including temperature, then turns the logits into probabilities.
/// On return `s.cands` holds the final distribution sorted by descending probability.
fn run_chain(p: &SamplerParams, logits: &[f32], history: &[u32], s: &mut Scratch) {
    s.cands.clear();
    let n = logits.len();
    if n == 0 {
        return;
    }
    penalise(p, logits, history, s);
    let cands = &mut s.cands;

    // Penalties and top_k (greedy is top 1). With k < n the k best are the best of
    // (the k + W best raw logits without the W penalised tokens) ∪ (the penalised tokens).
    let k = if p.temp <= 0.0 {
        1
    } else if p.top_k > 0 {
        (p.top_k as usize).min(n)
    } else {
        n
    };
    if k < n {
        top_m(logits, (k + s.penalised.len()).min(n), cands);
        if !s.penalised.is_empty() {
            let pen = &s.penalised;
            cands.retain(|c| pen.binary_search_by_key(&c.id, |x| x.id).is_err());
            cands.extend_from_slice(pen);
        }
        if cands.len() > k {
            cands.select_nth_unstable_by(k - 1, by_value_desc);
            cands.truncate(k);
        }
    } else {
        cands.extend(logits.iter().enumerate().map(|(i, &l)| Candidate {
            id: i as u32,
            v: clean(l),
        }));
        for c in &s.penalised {
            cands[c.id as usize].v = c.v;
        }
    }

    if p.temp <= 0.0 {
        let best = cands
            .iter()
            .copied()
            .min_by(by_value_desc)
            .unwrap_or(Candidate { id: 0, v: 0.0 });
        cands.clear();
        cands.push(Candidate {
            id: best.id,
            v: 1.0,
        });
        return;
    }

    // top_p, min_p and the output need descending order. With top_k off, avoid sorting the
    // whole vocabulary when the nucleus (or the min_p survivors) is small, as llama.cpp does.
    let min_keep = p.min_keep.max(1);
    let mut top_p_done = p.top_p >= 1.0;
    if k == n && n > PARTIAL_SORT_MIN {
        let max = cands.iter().fold(f32::NEG_INFINITY, |m, c| m.max(c.v));
        if !top_p_done {
            let sum: f64 = cands.iter().map(|c| ((c.v - max) as f64).exp()).sum();
            let m = PARTIAL_SORT_PREFIX.max(min_keep).min(n);
            cands.select_nth_unstable_by(m - 1, by_value_desc);
            cands[..m].sort_unstable_by(by_value_desc);
            if let Some(keep) = nucleus(&cands[..m], max, sum, p.top_p, min_keep) {
                cands.truncate(keep);
                top_p_done = true;
            }
        } else if p.min_p > 0.0 {
            let floor = max + p.min_p.ln();
            let survivors = cands.iter().filter(|c| c.v >= floor).count();
            if survivors >= min_keep {
                cands.retain(|c| c.v >= floor);
            }
        }
    }
    cands.sort_unstable_by(by_value_desc);

    if !top_p_done {
        let max = cands[0].v;
        let sum: f64 = cands.iter().map(|c| ((c.v - max) as f64).exp()).sum();
        let keep = nucleus(cands, max, sum, p.top_p, min_keep).unwrap_or(cands.len());
        cands.truncate(keep);
    }

    if p.min_p > 0.0 {
        let floor = cands[0].v + p.min_p.ln();
        let keep = cands
            .iter()
            .enumerate()
            .position(|(i, c)| i >= min_keep && c.v < floor)
            .unwrap_or(cands.len());
        cands.truncate(keep);
    }

    let inv_t = 1.0 / p.temp;
    let max = cands[0].v * inv_t;
    let mut sum = 0.0f64;
    for c in cands.iter_mut() {
        c.v = (c.v * inv_t - max).exp();
        sum += c.v as f64;
    }
    if !(sum.is_finite() && sum > 0.0) {
        // Only reachable with infinite logits: fall back to the first (largest) candidate.
        cands.truncate(1);
        cands[0].v = 1.0;
        return;
    }
    let inv = (1.0 / sum) as f32;
    cands.iter_mut().for_each(|c| c.v *= inv);
}

/// Draws an index into `probs` (non-negative weights, not necessarily normalised) with `u`
/// uniform in [0, 1). Zero-weight entries are never drawn unless all are zero (then index 0).
fn draw(weights: impl Iterator<Item = f32> + Clone, u: f64) -> usize {
    let total: f64 = weights.clone().map(|w| w.max(0.0) as f64).sum();
    let target = u * total;
    let mut run = 0.0f64;
    let mut last_positive = 0usize;
    for (i, w) in weights.enumerate() {
        if w > 0.0 {
            run += w as f64;
            last_positive = i;
            if run > target {
                return i;
            }
        }
    }
    last_positive
}

/// A sampler: parameters, its random state and scratch buffers reused across calls.
#[derive(Clone, Debug)]
pub struct Sampler {
    params: SamplerParams,
    seed: u64,
    rng: Rng,
    scratch: Scratch,
    logprobs: Option<LogprobLog>,
    constraint: Option<Box<dyn Constraint>>,
    /// OpenAI's `logit_bias`: added to these tokens' logits before the chain.
    bias: Vec<(u32, f32)>,
}

/// An emitted token's log-probability under the model, `ln softmax(logits)`
/// of the row it was chosen from (before penalties, filters and temperature,
/// as OpenAI's `logprobs` report it), and the `top` most likely tokens of
/// that row with theirs, most likely first (ties to the lower id).
#[derive(Clone, Debug, PartialEq)]
pub struct TokenLogprob {
    pub id: u32,
    pub logprob: f32,
    pub top: Vec<(u32, f32)>,
}

/// Where [`Sampler::record`] puts its records, in emission order; the reader
/// (a server slot) holds the other end.
pub type LogprobQueue = Arc<Mutex<VecDeque<TokenLogprob>>>;

#[derive(Clone, Debug)]
struct LogprobLog {
    top: usize,
    queue: LogprobQueue,
}

/// `ln softmax(logits)[id]` for `id` and for the `top` largest logits (ties
/// to the lower id), summed in f64.
pub fn logprobs(logits: &[f32], id: u32, top: usize) -> TokenLogprob {
    let max = logits.iter().fold(f32::NEG_INFINITY, |m, &l| m.max(l));
    let sum: f64 = logits.iter().map(|&l| ((l - max) as f64).exp()).sum();
    let lse = max as f64 + sum.ln();
    let lp = |i: u32| (logits[i as usize] as f64 - lse) as f32;
    // The chain's own top-m selection, ordered as the chain orders ties.
    let mut best = Vec::new();
    if top > 0 {
        top_m(logits, top, &mut best);
        best.sort_unstable_by(by_value_desc);
        best.truncate(top);
    }
    TokenLogprob {
        id,
        logprob: lp(id),
        top: best.into_iter().map(|c| (c.id, lp(c.id))).collect(),
    }
}

impl Sampler {
    pub fn new(params: SamplerParams) -> Sampler {
        let seed = params.seed.unwrap_or_else(|| {
            let nanos = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0);
            let mut s = nanos ^ (std::process::id() as u64).rotate_left(32);
            splitmix64(&mut s)
        });
        Sampler {
            params,
            seed,
            rng: Rng::from_seed(seed),
            scratch: Scratch::default(),
            logprobs: None,
            constraint: None,
            bias: Vec::new(),
        }
    }

    /// Adds `b` to token `id`'s logit before every draw ([`Sampler::sample`],
    /// [`Sampler::probs`]); `-inf` bans it. Ids past the row are ignored.
    pub fn set_logit_bias(&mut self, bias: Vec<(u32, f32)>) {
        self.bias = bias;
    }

    /// The logits with the bias added (borrowed when there is none).
    fn biased<'a>(&self, logits: &'a [f32]) -> std::borrow::Cow<'a, [f32]> {
        if self.bias.is_empty() {
            return std::borrow::Cow::Borrowed(logits);
        }
        let mut v = logits.to_vec();
        for &(id, b) in &self.bias {
            if let Some(l) = v.get_mut(id as usize) {
                *l += b;
            }
        }
        std::borrow::Cow::Owned(v)
    }

    /// From now on every token [`Sampler::sample`] picks is one `c` allows:
    /// the chain's draw when allowed, else a draw from the chain over the
    /// allowed tokens alone (the most likely allowed token, greedy). The
    /// other draws ([`Sampler::sample_from`], [`Sampler::probs`]) do not
    /// consult it: speculation does not run under a constraint.
    pub fn constrain(&mut self, c: Box<dyn Constraint>) {
        self.constraint = Some(c);
    }

    /// Whether a constraint is set.
    pub fn constrained(&self) -> bool {
        self.constraint.is_some()
    }

    /// From now on [`Sampler::record`] queues each emitted token's
    /// [`TokenLogprob`] with the `top` most likely alternatives; the caller
    /// reads them from the returned queue.
    pub fn log_probs(&mut self, top: usize) -> LogprobQueue {
        let queue = LogprobQueue::default();
        self.logprobs = Some(LogprobLog {
            top,
            queue: Arc::clone(&queue),
        });
        queue
    }

    /// Notes that `token` was emitted from the row `logits`; a no-op unless
    /// [`Sampler::log_probs`] asked for the records. Every path that emits a
    /// token calls it once per token, in order (a draft proposal is not an
    /// emission: only its acceptance is).
    pub fn record(&mut self, logits: &[f32], token: u32) {
        if let Some(log) = &self.logprobs {
            let r = logprobs(logits, token, log.top);
            if let Ok(mut q) = log.queue.lock() {
                q.push_back(r);
            }
        }
    }

    pub fn params(&self) -> &SamplerParams {
        &self.params
    }

    /// The seed in use (the drawn one when the parameters had none), for logs and replays.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Picks the next token from one row of logits; `history` holds the tokens so far (the
    /// penalties read its tail). Empty logits give token 0.
    pub fn sample(&mut self, logits: &[f32], history: &[u32]) -> u32 {
        let biased = self.biased(logits);
        let logits = &biased[..];
        let t = self.draw(logits, history);
        let Some(c) = &self.constraint else {
            return t;
        };
        if c.allows(t) {
            if let Some(c) = &mut self.constraint {
                c.accept(t);
            }
            return t;
        }
        let mut masked = logits.to_vec();
        let mut any = false;
        for (i, l) in masked.iter_mut().enumerate() {
            if c.allows(i as u32) {
                any |= *l > f32::NEG_INFINITY;
            } else {
                *l = f32::NEG_INFINITY;
            }
        }
        // Nothing allowed (past the constraint's limits): the free draw.
        let t = if any { self.draw(&masked, history) } else { t };
        if let Some(c) = &mut self.constraint {
            c.accept(t);
        }
        t
    }

    /// [`Sampler::sample`] without the constraint.
    fn draw(&mut self, logits: &[f32], history: &[u32]) -> u32 {
        run_chain(&self.params, logits, history, &mut self.scratch);
        let cands = &self.scratch.cands;
        match cands.len() {
            0 => 0,
            1 => {
                // Keep the random stream aligned whatever the filters left (llama.cpp's dist
                // draws once per call too).
                if self.params.temp > 0.0 {
                    self.rng.next_f64();
                }
                cands[0].id
            }
            _ => {
                let u = self.rng.next_f64();
                cands[draw(cands.iter().map(|c| c.v), u)].id
            }
        }
    }

    /// The final distribution the chain leaves: `(token, probability)` sorted by descending
    /// probability (ties to the lower id), summing to 1. Greedy gives one token with
    /// probability 1. Does not touch the random state.
    pub fn probs(&self, logits: &[f32], history: &[u32]) -> Vec<(u32, f32)> {
        let mut scratch = Scratch::default();
        run_chain(&self.params, &self.biased(logits), history, &mut scratch);
        scratch.cands.into_iter().map(|c| (c.id, c.v)).collect()
    }

    /// Draws one token from an explicit distribution (weights need not be normalised), e.g.
    /// the residual `norm(max(0, p − q))` of speculative sampling. Empty input gives token 0.
    pub fn sample_from(&mut self, dist: &[(u32, f32)]) -> u32 {
        if dist.is_empty() {
            return 0;
        }
        let u = self.rng.next_f64();
        dist[draw(dist.iter().map(|d| d.1), u)].0
    }

    /// A uniform draw in [0, 1) from this sampler's stream (acceptance tests).
    pub fn uniform(&mut self) -> f64 {
        self.rng.next_f64()
    }
}

#[cfg(test)]
#[path = "sample_tests.rs"]
mod tests;
