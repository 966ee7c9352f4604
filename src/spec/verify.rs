//! Acceptance rules of self-speculative decoding (docs/DESIGN.md §4.1), as pure
//! functions over one target distribution (and, for sampling, one draft
//! distribution). Distributions are dense: index = token id.
//!
//! - exact greedy: accept d iff d = argmax p (ties to the lower id, like
//!   `sample::argmax`);
//! - entropy-relaxed greedy: also accept when `p(d) ≥ r·max p` and
//!   `H(p) ≥ δ` nats (lossy; counted apart);
//! - lossless speculative sampling: accept with probability min(1, p(d)/q(d));
//!   on rejection draw from norm(max(0, p − q)).

/// How a greedy draft fared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// d is the target's argmax.
    Exact,
    /// Accepted only by the entropy-relaxed rule.
    Relaxed,
    Rejected,
}

impl Verdict {
    pub fn accepted(self) -> bool {
        self != Verdict::Rejected
    }
}

/// Exact greedy: `d == argmax(logits)`.
pub fn accept_exact(draft: u32, target_logits: &[f32]) -> bool {
    draft == crate::sample::argmax(target_logits)
}

/// Shannon entropy of `p` in nats (zero entries contribute 0).
pub fn entropy(p: &[f32]) -> f64 {
    p.iter()
        .filter(|&&x| x > 0.0)
        .map(|&x| {
            let x = x as f64;
            -x * x.ln()
        })
        .sum()
}

/// The relaxed rule's parameters: `ratio` r ∈ (0, 1] and `delta` δ in nats.
/// `ratio = 1` makes the rule exact.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Relaxation {
    pub ratio: f32,
    pub delta: f32,
}

/// Exact greedy, or with `relax` the entropy-relaxed rule, against the
/// target probabilities `p` (softmax of the target logits at temperature 1).
pub fn accept_greedy(draft: u32, p: &[f32], relax: Option<Relaxation>) -> Verdict {
    let best = crate::sample::argmax(p);
    if draft == best {
        return Verdict::Exact;
    }
    let Some(r) = relax else {
        return Verdict::Rejected;
    };
    let (pd, pmax) = match p.get(draft as usize) {
        Some(&pd) => (pd, p[best as usize]),
        None => return Verdict::Rejected,
    };
    if r.ratio < 1.0 && pd >= r.ratio * pmax && entropy(p) >= r.delta as f64 {
        Verdict::Relaxed
    } else {
        Verdict::Rejected
    }
}

/// Lossless speculative sampling, acceptance: with `u` uniform in [0, 1),
/// accept iff `u < min(1, p(d)/q(d))`. A draft the draft distribution gave
/// probability 0 is rejected.
pub fn accept_sampled(draft: u32, p: &[f32], q: &[f32], u: f64) -> bool {
    let (pd, qd) = match (p.get(draft as usize), q.get(draft as usize)) {
        (Some(&pd), Some(&qd)) => (pd as f64, qd as f64),
        _ => return false,
    };
    if qd <= 0.0 {
        return false;
    }
    u < (pd / qd).min(1.0)
}

/// The residual distribution `norm(max(0, p − q))` as `(token, weight)`
/// pairs with positive weight (unnormalised; `Sampler::sample_from`
/// normalises). When p ≤ q everywhere (p = q), it is p itself.
pub fn residual(p: &[f32], q: &[f32]) -> Vec<(u32, f32)> {
    let r: Vec<(u32, f32)> = p
        .iter()
        .zip(q)
        .enumerate()
        .filter_map(|(i, (&a, &b))| (a > b).then_some((i as u32, a - b)))
        .collect();
    if r.is_empty() {
        p.iter()
            .enumerate()
            .filter(|(_, &a)| a > 0.0)
            .map(|(i, &a)| (i as u32, a))
            .collect()
    } else {
        r
    }
}

/// A sparse `(token, prob)` list as a dense distribution over `n_vocab`.
pub fn dense(sparse: &[(u32, f32)], n_vocab: usize) -> Vec<f32> {
    let mut d = vec![0.0; n_vocab];
    for &(id, p) in sparse {
        if let Some(x) = d.get_mut(id as usize) {
            *x += p;
        }
    }
    d
}

#[cfg(test)]
#[path = "verify_tests.rs"]
mod tests;
