//! N-gram drafting (docs/DESIGN.md §4.3): the text so far is its own draft
//! model. Every run of `n` tokens in the prompt and what was generated maps
//! to the token that followed it (the latest occurrence wins); a draft looks
//! up the last `n` tokens (the anchor last), appends the token found, slides
//! the window by one and looks up again, until a lookup misses or `n_max`
//! tokens are drafted. This is ik_llama.cpp's `ngram-mod` lookup, with an
//! exact table instead of a fixed-size hash that collisions overwrite.
//!
//! A draft costs a few hash lookups, so it pays wherever the text repeats
//! itself (code being edited, quoted passages, lists); where it does not,
//! lookups miss and the round is a plain step.

use std::collections::HashMap;

use crate::model::ForwardError;

use super::draft::{Draft, DraftCtx, Drafter};
use super::verify::dense;

/// The n-gram length keyed on by default: on text rewritten with small
/// changes it drafts nearly as much as longer keys do, and it still finds
/// the shorter repeats of prose that they miss (the measurements are in
/// docs/PERFORMANCE.md, "N-gram drafting"; ik_llama.cpp's `ngram_size_n`
/// defaults to 12).
pub const DEFAULT_N: usize = 6;

/// The longest n-gram a table keys on.
pub const MAX_N: usize = 64;

/// Drafts from the n-grams of the text so far.
#[derive(Debug)]
pub struct NgramDrafter {
    n: usize,
    /// Hash of each indexed n-gram → the token after its latest occurrence.
    next: HashMap<u64, u32>,
    /// The tokens indexed so far (a prefix of the history when it grows).
    seen: Vec<u32>,
}

impl NgramDrafter {
    /// A drafter keyed on runs of `n` tokens (1 ..= [`MAX_N`]).
    pub fn new(n: usize) -> NgramDrafter {
        assert!((1..=MAX_N).contains(&n), "n-gram length {n}");
        NgramDrafter {
            n,
            next: HashMap::new(),
            seen: Vec::new(),
        }
    }

    pub fn n(&self) -> usize {
        self.n
    }

    /// Indexes `history`: the new tokens when it extends what was seen, the
    /// whole of it again when it does not (a new conversation, a rewind).
    fn index(&mut self, history: &[u32]) {
        if !history.starts_with(&self.seen) {
            self.next.clear();
            self.seen.clear();
        }
        let n = self.n;
        // n-grams starting at i have their successor at i + n.
        let from = self.seen.len().saturating_sub(n);
        for i in from..history.len().saturating_sub(n) {
            self.next.insert(key(&history[i..i + n]), history[i + n]);
        }
        let known = self.seen.len();
        self.seen.extend_from_slice(&history[known..]);
    }

    /// Up to `n_max` tokens following `history` by rolling lookups.
    pub fn lookup(&mut self, history: &[u32], n_max: usize) -> Vec<u32> {
        self.index(history);
        let n = self.n;
        let mut window: Vec<u32> = history[history.len().saturating_sub(n)..].to_vec();
        let mut out = Vec::new();
        while window.len() == n && out.len() < n_max {
            let Some(&t) = self.next.get(&key(&window)) else {
                break;
            };
            out.push(t);
            window.remove(0);
            window.push(t);
        }
        out
    }
}

/// FNV-1a over the tokens' bytes: a table key for one n-gram.
fn key(tokens: &[u32]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for &t in tokens {
        for b in t.to_le_bytes() {
            h ^= b as u64;
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

impl Drafter for NgramDrafter {
    fn draft(&mut self, ctx: DraftCtx) -> Result<Draft, ForwardError> {
        let tokens = self.lookup(ctx.history, ctx.n_max);
        // A looked-up token is proposed with certainty: the lossless rule
        // then accepts it with the target's own probability.
        let dists = match ctx.sampling {
            true => {
                let v = ctx.model.n_vocab();
                tokens.iter().map(|&t| dense(&[(t, 1.0)], v)).collect()
            }
            false => Vec::new(),
        };
        Ok(Draft { tokens, dists })
    }
}

/// Drafters tried in order: the first draft of at least its stage's
/// `n_min` tokens is proposed (ik_llama.cpp's two-stage shape: a free n-gram
/// lookup first, the model's own drafter where it finds nothing). Under the
/// adaptive controller each stage is priced on its own (`draft_stage`): a
/// stage whose drafts do not pay passes the round to the next.
pub struct ChainDrafter {
    pub stages: Vec<(Box<dyn Drafter + Send>, usize)>,
}

impl Drafter for ChainDrafter {
    fn draft(&mut self, ctx: DraftCtx) -> Result<Draft, ForwardError> {
        let DraftCtx {
            model,
            state,
            anchor,
            pos,
            n_max,
            p_min,
            history,
            sampler,
            sampling,
        } = ctx;
        for stage in 0..self.stages.len() {
            let ctx = DraftCtx {
                model,
                state: &mut *state,
                anchor,
                pos,
                n_max,
                p_min,
                history,
                sampler: &mut *sampler,
                sampling,
            };
            let d = self.draft_stage(stage, ctx)?;
            if !d.tokens.is_empty() {
                return Ok(d);
            }
        }
        Ok(Draft::default())
    }

    /// None: in a chain a stage's cache falls behind over the other
    /// stages' rounds, round after round, so catching up is part of what
    /// drafting through it costs (the stages' own counts are dropped).
    fn take_catch_up_ns(&mut self) -> u64 {
        for (s, _) in &mut self.stages {
            s.take_catch_up_ns();
        }
        0
    }

    fn stages(&self) -> usize {
        self.stages.len()
    }

    fn draft_stage(&mut self, stage: usize, ctx: DraftCtx) -> Result<Draft, ForwardError> {
        let (drafter, n_min) = &mut self.stages[stage];
        let d = drafter.draft(ctx)?;
        Ok(match d.tokens.len() >= *n_min {
            true => d,
            false => Draft::default(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The draft by definition: repeatedly, the token after the latest
    /// earlier occurrence of the last `n` tokens (the drafted ones included).
    fn lookup_ref(history: &[u32], n: usize, n_max: usize) -> Vec<u32> {
        let mut text = history.to_vec();
        let mut out = Vec::new();
        while out.len() < n_max && text.len() >= n {
            let tail = text[text.len() - n..].to_vec();
            // Occurrences inside the history only (drafted tokens are not
            // indexed), latest first, with a successor in the history.
            let found = (0..history.len().saturating_sub(n))
                .rev()
                .find(|&i| history[i..i + n] == tail[..]);
            match found {
                Some(i) => {
                    out.push(history[i + n]);
                    text.push(history[i + n]);
                }
                None => break,
            }
        }
        out
    }

    #[test]
    fn a_repeated_run_is_drafted_and_a_new_one_is_not() {
        let mut d = NgramDrafter::new(2);
        // "1 2 3 4 5 ... 1 2" → 3 4 5 follow the earlier "1 2".
        assert_eq!(d.lookup(&[1, 2, 3, 4, 5, 9, 1, 2], 3), [3, 4, 5]);
        assert_eq!(
            d.lookup(&[1, 2, 3, 4, 5, 9, 1, 2], 8),
            [3, 4, 5, 9, 1, 2, 3, 4]
        );
        let mut d = NgramDrafter::new(2);
        assert!(d.lookup(&[1, 2, 3, 4], 4).is_empty());
    }

    #[test]
    fn lookups_equal_their_definition_as_the_history_grows_and_changes() {
        let mut s = 7u64;
        for n in [1usize, 2, 3, 5] {
            let mut d = NgramDrafter::new(n);
            let mut history: Vec<u32> = Vec::new();
            for step in 0..400 {
                // A small vocabulary repeats itself; every 97th step the
                // history is replaced (a new conversation).
                if step % 97 == 96 {
                    history.truncate(step % 13);
                }
                history.push((crate::sample::splitmix64(&mut s) % 6) as u32);
                let n_max = 1 + step % 9;
                assert_eq!(
                    d.lookup(&history, n_max),
                    lookup_ref(&history, n, n_max),
                    "n={n} step={step} history={history:?}"
                );
            }
        }
    }
}
