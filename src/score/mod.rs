//! Scoring a token stream with a model, as llama.cpp's tools score it: the
//! library under `clover perplexity` (and its KL divergence mode,
//! [`crate::kld`]), `clover imatrix` and the server's echoed prompts.
//!
//! A text is tokenized once and cut into non-overlapping windows of `c`
//! tokens ([`Windows`]). Each window runs from an empty state
//! ([`WindowRunner`]); only its second half is scored — the predictions of
//! tokens `c/2 + 1 … c − 1`, each made with at least `c/2` tokens of context
//! ([`scored`]) — as llama-perplexity does.
//!
//! ```text
//! nll_i = −log softmax(logits_{j})[token_{j+1}]      j = c/2 … c − 2
//! PPL   = exp(mean nll)    ± exp(mean nll) · sqrt(var(nll) / (N − 1))
//! ```
//!
//! A prompt is scored the same way, every row against the token after it
//! ([`next_token_logprobs`], for `Session::score_prompt`).

mod windows;

pub use windows::{WindowRunner, Windows};

use std::ops::Range;

use crate::sample::TokenLogprob;

/// Running sums of the scored negative log-likelihoods.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct NllSums {
    pub n: usize,
    pub sum: f64,
    pub sum_sq: f64,
}

impl NllSums {
    pub fn add(&mut self, nll: f64) {
        self.n += 1;
        self.sum += nll;
        self.sum_sq += nll * nll;
    }

    pub fn ppl(&self) -> f64 {
        (self.sum / self.n.max(1) as f64).exp()
    }

    /// llama-perplexity's standard error of the PPL estimate.
    pub fn ppl_error(&self) -> f64 {
        if self.n < 2 {
            return 0.0;
        }
        let n = self.n as f64;
        let mean = self.sum / n;
        let var = (self.sum_sq / n - mean * mean).max(0.0);
        self.ppl() * (var / (n - 1.0)).sqrt()
    }

    /// llama-perplexity's last line: `Final estimate: PPL = … +/- …`.
    pub fn final_line(&self) -> String {
        format!(
            "Final estimate: PPL = {:.4} +/- {:.5}",
            self.ppl(),
            self.ppl_error()
        )
    }
}

/// `Σ exp(x − max)` over a row of logits, each exponential in f32 and the
/// sum in f64 in vocabulary order: llama.cpp's softmax denominator, shared
/// by [`nll`] and the KL divergence's encoding and scoring.
pub fn sum_exp(logits: &[f32], max: f32) -> f64 {
    logits.iter().map(|&x| (x - max).exp() as f64).sum()
}

/// `−log softmax(logits)[target]` in llama-perplexity's arithmetic, so that
/// the same logits print the same PPL: the maximum and each `x − max` in
/// f32, `exp` in f32, the sum in f64 in vocabulary order, and
/// `(x_target − max) − ln Σ` in f64. Within f32 rounding of [`nll_exact`].
pub fn nll(logits: &[f32], target: u32) -> f64 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    sum_exp(logits, max).ln() - (logits[target as usize] - max) as f64
}

/// `−log softmax(logits)[target]`, in f64 throughout: the reference
/// [`nll`] is tested against.
#[cfg(test)]
fn nll_exact(logits: &[f32], target: u32) -> f64 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let sum: f64 = logits.iter().map(|&x| (x as f64 - max).exp()).sum();
    max + sum.ln() - logits[target as usize] as f64
}

/// The positions of a window of `c` tokens whose logits are scored (each
/// against the token after it): the second half, `c/2 … c − 2`.
pub fn scored(c: usize) -> Range<usize> {
    c / 2..c - 1
}

/// Scores one window's logits (`[c][n_vocab]`) against its tokens.
pub fn score_window(logits: &[f32], n_vocab: usize, tokens: &[u32], sums: &mut NllSums) {
    for j in scored(tokens.len()) {
        sums.add(nll(&logits[j * n_vocab..(j + 1) * n_vocab], tokens[j + 1]));
    }
}

/// Rows of logits (`[rows][n_vocab]`) each scored against the token after
/// its position (`next[r]` for row `r`): the token's log-probability and the
/// `top` most likely tokens there ([`crate::sample::logprobs`]).
pub fn next_token_logprobs<'a>(
    rows: &'a [f32],
    n_vocab: usize,
    next: &'a [u32],
    top: usize,
) -> impl Iterator<Item = TokenLogprob> + 'a {
    rows.chunks_exact(n_vocab)
        .zip(next)
        .map(move |(row, &t)| crate::sample::logprobs(row, t, top))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nll_of_uniform_logits_is_log_vocab() {
        let l = vec![0.5f32; 8];
        assert!((nll_exact(&l, 3) - 8f64.ln()).abs() < 1e-12);
        // exp(0) is exact in f32 too.
        assert!((nll(&l, 3) - 8f64.ln()).abs() < 1e-12);
    }

    #[test]
    fn nll_matches_a_hand_computed_softmax() {
        let l = [1.0f32, 2.0, 3.0];
        let p = 2f64.exp() / (1f64.exp() + 2f64.exp() + 3f64.exp());
        assert!((nll_exact(&l, 1) + p.ln()).abs() < 1e-12);
    }

    /// llama's arithmetic (f32 exponentials) stays within f32 rounding of
    /// the f64 reference, and is not the reference: on spread logits the
    /// two differ.
    #[test]
    fn nll_in_llama_arithmetic_stays_within_f32_rounding_of_the_exact_one() {
        let l: Vec<f32> = (0..1000)
            .map(|i| ((i * 7919) % 1000) as f32 * 0.013 - 6.0)
            .collect();
        let mut differ = 0;
        for target in [0u32, 17, 500, 999] {
            let (a, b) = (nll(&l, target), nll_exact(&l, target));
            assert!((a - b).abs() < 1e-6 * b.abs().max(1.0), "{a} vs {b}");
            differ += usize::from(a != b);
        }
        assert!(differ > 0, "f32 exponentials should leave a trace");
    }

    #[test]
    fn only_the_second_half_of_a_window_is_scored() {
        // 6 tokens, vocab 2: positions 3 and 4 predict tokens 4 and 5.
        let mut logits = vec![0.0f32; 12];
        logits[3 * 2 + 1] = 100.0; // position 3 is sure of token 1
        let tokens = [0, 0, 0, 0, 1, 0];
        let mut s = NllSums::default();
        score_window(&logits, 2, &tokens, &mut s);
        assert_eq!(s.n, 2);
        // Position 3: nll ≈ 0; position 4: uniform, ln 2.
        assert!((s.sum - 2f64.ln()).abs() < 1e-9, "{}", s.sum);
    }

    #[test]
    fn ppl_error_is_zero_for_constant_nll_and_grows_with_spread() {
        let mut a = NllSums::default();
        let mut b = NllSums::default();
        for i in 0..10 {
            a.add(2.0);
            b.add(if i % 2 == 0 { 1.0 } else { 3.0 });
        }
        assert!((a.ppl() - 2f64.exp()).abs() < 1e-9);
        assert_eq!(a.ppl_error(), 0.0);
        assert!(b.ppl_error() > 0.1);
    }

    #[test]
    fn each_row_is_scored_against_the_next_token() {
        // Two rows of a vocabulary of 3; the second is sure of token 2.
        let rows = [0.0f32, 0.0, 0.0, 0.0, 0.0, 50.0];
        let got: Vec<_> = next_token_logprobs(&rows, 3, &[1, 2], 1).collect();
        assert_eq!((got[0].id, got[1].id), (1, 2));
        assert!((got[0].logprob as f64 + 3f64.ln()).abs() < 1e-6);
        assert!(got[1].logprob.abs() < 1e-6 && got[1].top[0].0 == 2);
    }
}
