//! Drafters: who proposes d_1 … d_D after the anchor t_n (docs/DESIGN.md §4.2 (a)).
//!
//! - `DiffusionDrafter`: one diffusion pass (docs/DESIGN.md §3) over `[t_n, M×D]`;
//!   draft j is the argmax of row j−1 (greedy) or a draw from it (sampling),
//!   cut at the first position whose draft probability is below `p_min`.
//! - `SequenceDrafter`: proposes a known continuation (e.g. the target's own
//!   greedy output: every draft accepted).
//! - `RandomDrafter`: uniform random tokens (almost nothing accepted).

use crate::model::{ForwardError, LogitsFor, Model, State};
use crate::sample::{softmax, Sampler};

use super::verify::dense;

/// What a drafter proposes for positions n+1 … n+D.
#[derive(Clone, Debug, Default)]
pub struct Draft {
    pub tokens: Vec<u32>,
    /// Dense draft distribution q_j of each token, when sampling (the
    /// lossless rule needs it); empty for greedy.
    pub dists: Vec<Vec<f32>>,
}

/// The context of one drafting call.
pub struct DraftCtx<'c, 'm> {
    pub model: &'c Model<'m>,
    pub state: &'c mut State,
    /// t_n, the newest (not yet processed) token, at position `pos`.
    pub anchor: u32,
    pub pos: usize,
    /// Most drafts wanted.
    pub n_max: usize,
    /// Cut at the first draft whose probability is below this (0: never).
    pub p_min: f32,
    /// Tokens so far (prompt + output), for the sampler's penalties.
    pub history: &'c [u32],
    pub sampler: &'c mut Sampler,
    /// Sampling (temp > 0): drafts are drawn and `dists` filled.
    pub sampling: bool,
}

pub trait Drafter {
    /// Proposes at most `ctx.n_max` drafts. Must leave `ctx.state` as it was
    /// (a drafter's own cache in it, as the MTP block's, may advance).
    fn draft(&mut self, ctx: DraftCtx) -> Result<Draft, ForwardError>;

    /// Nanoseconds of the last `draft` call spent catching up on positions
    /// decoded without it (the MTP block's cache after plain steps): real
    /// time, but not a price of drafting, so the adaptive controller leaves
    /// it out of a draft's cost. Taking it resets it.
    fn take_catch_up_ns(&mut self) -> u64 {
        0
    }

    /// How many drafters this one tries in order (a chain's stages): the
    /// adaptive controller prices each on its own (`draft_stage`).
    fn stages(&self) -> usize {
        1
    }

    /// Stage `stage`'s draft alone (a chain's; the one drafter otherwise).
    fn draft_stage(&mut self, stage: usize, ctx: DraftCtx) -> Result<Draft, ForwardError> {
        let _ = stage;
        self.draft(ctx)
    }
}

impl<D: Drafter + ?Sized> Drafter for Box<D> {
    fn draft(&mut self, ctx: DraftCtx) -> Result<Draft, ForwardError> {
        (**self).draft(ctx)
    }

    fn take_catch_up_ns(&mut self) -> u64 {
        (**self).take_catch_up_ns()
    }

    fn stages(&self) -> usize {
        (**self).stages()
    }

    fn draft_stage(&mut self, stage: usize, ctx: DraftCtx) -> Result<Draft, ForwardError> {
        (**self).draft_stage(stage, ctx)
    }
}

/// Self-speculation through the block-diffusion path.
#[derive(Debug, Default)]
pub struct DiffusionDrafter;

impl Drafter for DiffusionDrafter {
    fn draft(&mut self, ctx: DraftCtx) -> Result<Draft, ForwardError> {
        let mask = ctx
            .model
            .config
            .mask_token_id
            .ok_or(ForwardError::NoDiffusion)?;
        let d = ctx.n_max;
        if d == 0 {
            return Ok(Draft::default());
        }
        let mut block = vec![mask; d + 1];
        block[0] = ctx.anchor;
        let rows: Vec<usize> = (0..d).collect();
        let v = ctx.model.n_vocab();
        let logits =
            ctx.model
                .forward_diffusion(ctx.state, &block, ctx.pos, LogitsFor::Indices(&rows))?;
        let mut out = Draft::default();
        for row in logits.chunks_exact(v).take(d) {
            if !out.pick(row, ctx.sampler, ctx.history, ctx.sampling, ctx.p_min) {
                break;
            }
        }
        Ok(out)
    }
}

impl Draft {
    /// Appends the draft of one logits row: its argmax (greedy) or a draw
    /// from the sampler's distribution, whose dense q is kept (sampling).
    /// Returns false, appending nothing, when the token's probability is
    /// below `p_min`.
    pub fn pick(
        &mut self,
        row: &[f32],
        sampler: &mut Sampler,
        history: &[u32],
        sampling: bool,
        p_min: f32,
    ) -> bool {
        if sampling {
            let q = dense(&sampler.probs(row, history), row.len());
            let sparse: Vec<(u32, f32)> = q
                .iter()
                .enumerate()
                .filter(|(_, &x)| x > 0.0)
                .map(|(i, &x)| (i as u32, x))
                .collect();
            let tok = sampler.sample_from(&sparse);
            if q[tok as usize] < p_min {
                return false;
            }
            self.tokens.push(tok);
            self.dists.push(q);
        } else {
            let tok = crate::sample::argmax(row);
            if p_min > 0.0 && softmax(row)[tok as usize] < p_min {
                return false;
            }
            self.tokens.push(tok);
        }
        true
    }
}

/// Proposes `seq[pos+1 ..]`: a known continuation indexed by position (the
/// whole sequence, prompt included).
#[derive(Debug)]
pub struct SequenceDrafter {
    pub seq: Vec<u32>,
}

impl Drafter for SequenceDrafter {
    fn draft(&mut self, ctx: DraftCtx) -> Result<Draft, ForwardError> {
        let start = (ctx.pos + 1).min(self.seq.len());
        let end = (start + ctx.n_max).min(self.seq.len());
        let tokens = self.seq[start..end].to_vec();
        let dists = if ctx.sampling {
            let v = ctx.model.n_vocab();
            tokens.iter().map(|&t| dense(&[(t, 1.0)], v)).collect()
        } else {
            Vec::new()
        };
        Ok(Draft { tokens, dists })
    }
}

/// Uniform random drafts from a seeded stream.
#[derive(Debug)]
pub struct RandomDrafter {
    state: u64,
}

impl RandomDrafter {
    pub fn new(seed: u64) -> RandomDrafter {
        RandomDrafter { state: seed | 1 }
    }

    fn next(&mut self) -> u64 {
        crate::sample::splitmix64(&mut self.state)
    }
}

impl Drafter for RandomDrafter {
    fn draft(&mut self, ctx: DraftCtx) -> Result<Draft, ForwardError> {
        let v = ctx.model.n_vocab();
        let tokens: Vec<u32> = (0..ctx.n_max)
            .map(|_| (self.next() % v as u64) as u32)
            .collect();
        let dists = if ctx.sampling {
            vec![vec![1.0 / v as f32; v]; tokens.len()]
        } else {
            Vec::new()
        };
        Ok(Draft { tokens, dists })
    }
}
