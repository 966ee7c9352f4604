//! The autoregressive forward pass (docs/DESIGN.md §2).
//!
//! ```text
//! x  = token_embd[tokens]                                   [T][n_embd]
//! per layer:  h  = x + Mixer(rmsnorm(x) ⊙ attn_norm)         Mixer = GDN | attention
//!             x' = h + MoE(rmsnorm(h) ⊙ post_attention_norm)
//! logits = output · (rmsnorm(x) ⊙ output_norm)              [rows][n_vocab]
//! ```
//! Inputs longer than the state's `max_batch` run in consecutive batches. All
//! scratch is allocated with the state; decoding a token allocates nothing
//! (the logits buffers grow once to the largest request and are kept).

use kernels::plan::BatchOrder;
use kernels::KernelTable;

use super::config::ModelConfig;
use super::diffusion::{DiffusionKnobs, GdnBlockScratch, BLOCK_PROMPT_ROWS};
use super::ops::all_finite;
use super::pass::{Group, Net};
use super::recurrent::VerifyStash;
use super::state::{State, StateOptions};
use super::weights::{MixerWeights, WeightError, WeightRef, Weights};
use super::{ForwardError, StateError};

/// Which positions of the input get logits, in the order returned.
#[derive(Clone, Copy, Debug)]
pub enum LogitsFor<'a> {
    Last,
    All,
    /// Indices into the input tokens (any order, repeats allowed).
    Indices(&'a [usize]),
}

/// A bound model: hyper-parameters and zero-copy weights.
#[derive(Debug)]
pub struct Model<'a> {
    pub config: ModelConfig,
    pub weights: Weights<'a>,
    /// How batches are summed: clover's orders, or llama.cpp's for parity
    /// runs (`--batch-order ggml` chooses it for the process).
    pub order: BatchOrder,
    /// The kernel tier every product of this model runs on (chosen once per
    /// process, `kernels::isa::init`), handed down to every op.
    pub kt: &'static KernelTable,
    /// Draft passes route their mask rows among the anchor's `draft_pool`
    /// most probable experts (`--spec-draft-experts`; 0: every row routes
    /// freely). Verification is unaffected, so output stays exact.
    pub draft_pool: usize,
    /// States made by `new_state` keep an MTP cache when the file has the
    /// block (`--spec-type mtp`; docs/DESIGN.md §2.7).
    pub mtp: bool,
}

impl<'a> Model<'a> {
    /// Binds the weights through `lookup` (tensor name → bytes), to run on
    /// the kernels of `kt`. A trailing
    /// MTP block (`blk.N.nextn.eh_proj.weight` present) is skipped.
    pub fn bind(
        mut config: ModelConfig,
        kt: &'static KernelTable,
        lookup: &dyn Fn(&str) -> Option<WeightRef<'a>>,
    ) -> Result<Model<'a>, WeightError> {
        let last = config.n_layer - 1;
        if config.n_layer > 1 && lookup(&format!("blk.{last}.nextn.eh_proj.weight")).is_some() {
            config.drop_last_layer_as_mtp();
        }
        let weights = Weights::bind(&config, lookup)?;
        Ok(Model {
            config,
            weights,
            order: BatchOrder::chosen(),
            kt,
            draft_pool: 0,
            mtp: false,
        })
    }

    pub fn n_vocab(&self) -> usize {
        self.weights.n_vocab
    }

    /// A state for `opts` fits in the machine's available memory (checked
    /// before anything is allocated, so an absurd context is an error, not
    /// an abort).
    pub fn check_memory(&self, opts: &StateOptions) -> Result<(), StateError> {
        let opts = &self.with_mtp(*opts);
        let needed = State::bytes_needed(&self.config, self.n_vocab(), opts);
        match available_memory() {
            Some(available) if needed > available as u128 => Err(StateError::OutOfMemory {
                n_ctx: opts.n_ctx,
                needed,
                available,
            }),
            _ => Ok(()),
        }
    }

    /// A fresh, empty sequence state for this model.
    pub fn new_state(&self, opts: StateOptions) -> Result<State, StateError> {
        State::new(&self.config, self.n_vocab(), self.with_mtp(opts))
    }

    /// `opts` with an MTP cache when this model keeps one.
    fn with_mtp(&self, opts: StateOptions) -> StateOptions {
        StateOptions {
            mtp: opts.mtp || (self.mtp && self.has_mtp()),
            ..opts
        }
    }

    /// Runs `tokens` at positions `pos0..` (the state must hold exactly
    /// `pos0` positions) and returns `[rows][n_vocab]` logits for `logits_for`.
    pub fn forward<'s>(
        &self,
        state: &'s mut State,
        tokens: &[u32],
        pos0: usize,
        logits_for: LogitsFor,
    ) -> Result<&'s [f32], ForwardError> {
        admit(state, tokens, None)?;
        self.forward_impl(state, tokens, pos0, logits_for, false)
    }

    /// A verify pass (docs/DESIGN.md §5): `forward` over `tokens` (at most one batch)
    /// that leaves every GDN state untouched and stashes what
    /// `commit_verify` needs. The KV cache holds all `tokens` until the commit.
    pub fn forward_verify<'s>(
        &self,
        state: &'s mut State,
        tokens: &[u32],
        pos0: usize,
        logits_for: LogitsFor,
    ) -> Result<&'s [f32], ForwardError> {
        admit(state, tokens, Some(verify_too_long))?;
        if state.verify.is_none() {
            state.verify = Some(VerifyStash::new(&self.config));
        }
        let n_logits = self
            .forward_impl(state, tokens, pos0, logits_for, true)?
            .len();
        if let Some(v) = &mut state.verify {
            v.pending = Some((pos0, tokens.len()));
        }
        Ok(&state.scratch.logits[..n_logits])
    }

    /// Keeps the first `n_keep` positions of the pending verify pass:
    /// advances the GDN states over them from the stash and truncates the KV
    /// cache after them. `n_keep = 0` discards the pass.
    pub fn commit_verify(&self, state: &mut State, n_keep: usize) -> Result<(), ForwardError> {
        let stash = state.verify.as_mut().ok_or(ForwardError::NoVerifyPending)?;
        let (pos0, n) = stash.pending.ok_or(ForwardError::NoVerifyPending)?;
        if n_keep > n {
            return Err(ForwardError::KeepTooMany { n_keep, n });
        }
        super::verify::advance_all(
            self.kt,
            &self.config,
            &stash.layers,
            &mut state.recurrent,
            n_keep,
        );
        stash.pending = None;
        state.kv.truncate(pos0 + n_keep);
        Ok(())
    }

    /// Checks that `tokens` may run at `pos0` with `logits_for` — not empty,
    /// right after the cached positions, within the context, every id in the
    /// vocabulary, every index inside the input — and grows the logits
    /// buffer to the rows asked for. Returns that number of rows.
    pub(crate) fn check_batch(
        &self,
        state: &mut State,
        tokens: &[u32],
        pos0: usize,
        logits_for: LogitsFor,
    ) -> Result<usize, ForwardError> {
        let (n, v) = (tokens.len(), self.n_vocab());
        if n == 0 {
            return Err(ForwardError::Empty);
        }
        if pos0 != state.n_past() {
            return Err(ForwardError::Position {
                expected: state.n_past(),
                got: pos0,
            });
        }
        if pos0 + n > state.kv.n_ctx() {
            return Err(ForwardError::ContextFull {
                need: pos0 + n,
                n_ctx: state.kv.n_ctx(),
            });
        }
        if let Some(&id) = tokens.iter().find(|&&id| id as usize >= v) {
            return Err(ForwardError::Token { id, n_vocab: v });
        }
        if let LogitsFor::Indices(idx) = logits_for {
            if let Some(&i) = idx.iter().find(|&&i| i >= n) {
                return Err(ForwardError::Index {
                    index: i,
                    n_tokens: n,
                });
            }
        }
        let rows = match logits_for {
            LogitsFor::Last => 1,
            LogitsFor::All => n,
            LogitsFor::Indices(idx) => idx.len(),
        };
        if state.scratch.logits.len() < rows * v {
            state.scratch.logits.resize(rows * v, 0.0);
        }
        Ok(rows)
    }

    fn forward_impl<'s>(
        &self,
        state: &'s mut State,
        tokens: &[u32],
        pos0: usize,
        logits_for: LogitsFor,
        verify: bool,
    ) -> Result<&'s [f32], ForwardError> {
        let n = tokens.len();
        let v = self.n_vocab();
        let rows = self.check_batch(state, tokens, pos0, logits_for)?;
        // The draft expert pool belongs to diffusion passes only (which reset
        // it when they end); never let one reach an autoregressive pass.
        state.scratch.moe.pool = 0;
        state.scratch.moe.pool_row = 0;
        // A prompt batch may take the prompt kernels; a verify pass must
        // give every row single-token decoding's bits (docs/DESIGN.md §4.1).
        let mode = self.order.mode(!verify);
        let mut first_bad: Option<Option<usize>> = None;
        let mut c0 = 0;
        while c0 < n {
            let t = state.max_batch.min(n - c0);
            set_head_rows(&mut state.scratch.head_rows, logits_for, n, c0, t);
            let modes = [mode, self.order.mode(false)];
            let mut group = Group::sequence(state, &tokens[c0..c0 + t], modes, verify);
            self.net().run(std::slice::from_mut(&mut group));
            first_bad = first_bad.or(group.first_bad);
            c0 += t;
        }
        self.check_finite(state, rows, first_bad)?;
        Ok(&state.scratch.logits[..rows * v])
    }

    /// What every pass reads of the model.
    pub(crate) fn net(&self) -> Net<'_, 'a> {
        Net {
            cfg: &self.config,
            weights: &self.weights,
            kt: self.kt,
        }
    }

    /// The end of a forward call: an error naming where the residual stream
    /// first held a NaN or an infinity (`first_bad`, as a pass's [`Group`]
    /// reports it), or, when the layers were finite, whether the `rows`
    /// logits rows are.
    pub(super) fn check_finite(
        &self,
        state: &State,
        rows: usize,
        first_bad: Option<Option<usize>>,
    ) -> Result<(), ForwardError> {
        let logits = &state.scratch.logits[..rows * self.n_vocab()];
        if first_bad.is_some() || !all_finite(logits) {
            // The layers' outputs were finite yet the logits are not: the output
            // head did it, reported as the last layer's.
            let layer = first_bad.unwrap_or(Some(self.config.n_layer - 1));
            return Err(ForwardError::NonFinite { layer });
        }
        Ok(())
    }

    /// Whether every GDN layer has the diffusion tensors.
    pub fn has_diffusion(&self) -> bool {
        self.weights.layers.iter().all(|l| match &l.mixer {
            MixerWeights::DeltaNet(w) => w.diffusion.is_some(),
            MixerWeights::Attention(_) => true,
        })
    }

    /// The diffusion forward (docs/DESIGN.md §3) over the block `tokens`
    /// (anchor first, then drafts or masks) at positions `pos0..`; the state
    /// must hold exactly `pos0` positions and is left bit-identical. Row j of
    /// the logits predicts position `pos0 + j + 1`.
    pub fn forward_diffusion<'s>(
        &self,
        state: &'s mut State,
        tokens: &[u32],
        pos0: usize,
        logits_for: LogitsFor,
    ) -> Result<&'s [f32], ForwardError> {
        let knobs = DiffusionKnobs {
            expert_pool: self.draft_pool,
            ..DiffusionKnobs::default()
        };
        self.forward_diffusion_with(state, tokens, pos0, logits_for, knobs)
    }

    /// `forward_diffusion` with test knobs.
    pub fn forward_diffusion_with<'s>(
        &self,
        state: &'s mut State,
        tokens: &[u32],
        pos0: usize,
        logits_for: LogitsFor,
        knobs: DiffusionKnobs,
    ) -> Result<&'s [f32], ForwardError> {
        if !self.has_diffusion() {
            return Err(ForwardError::NoDiffusion);
        }
        admit(state, tokens, Some(block_too_long))?;
        let rows = self.check_batch(state, tokens, pos0, logits_for)?;
        let t = tokens.len();
        // Drafts are only proposals (verification keeps the output exact),
        // so a long block takes the prompt kernels where they are faster
        // (`BLOCK_PROMPT_ROWS`); a shorter one keeps decoding's numerics (and
        // a parity run llama.cpp's batch order).
        let mode = self.order.mode(t >= BLOCK_PROMPT_ROWS);
        let mut gdn = GdnBlockScratch::new(&self.config, t);
        gdn.force_lambda = knobs.force_lambda;
        let s = &mut state.scratch;
        s.moe.pool = knobs.expert_pool;
        s.moe.pool_row = 0;
        set_head_rows(&mut s.head_rows, logits_for, t, 0, t);
        let mut group = Group::block(state, tokens, mode, &mut gdn, knobs.reverse_queries);
        self.net().run(std::slice::from_mut(&mut group));
        state.scratch.moe.pool = 0;
        Ok(&state.scratch.logits[..rows * self.n_vocab()])
    }
}

/// Refuses a pass while a verify pass awaits its commit, and a pass that
/// must fit one batch (`too_long` given) when `tokens` do not.
fn admit(
    state: &State,
    tokens: &[u32],
    too_long: Option<fn(usize, usize) -> ForwardError>,
) -> Result<(), ForwardError> {
    if state.verify_pending() {
        return Err(ForwardError::VerifyPending);
    }
    match too_long {
        Some(err) if tokens.len() > state.max_batch => Err(err(tokens.len(), state.max_batch)),
        _ => Ok(()),
    }
}

fn verify_too_long(n: usize, max_batch: usize) -> ForwardError {
    ForwardError::VerifyTooLong { n, max_batch }
}

fn block_too_long(n: usize, max_batch: usize) -> ForwardError {
    ForwardError::BlockTooLong { n, max_batch }
}

/// `(output row, batch row)` of every logits row `logits_for` asks of the
/// batch holding input tokens `c0..c0 + t` of `n`.
pub(super) fn set_head_rows(
    head_rows: &mut Vec<(usize, usize)>,
    logits_for: LogitsFor,
    n: usize,
    c0: usize,
    t: usize,
) {
    head_rows.clear();
    match logits_for {
        LogitsFor::Last => {
            if c0 + t == n {
                head_rows.push((0, t - 1));
            }
        }
        LogitsFor::All => head_rows.extend((0..t).map(|i| (c0 + i, i))),
        LogitsFor::Indices(idx) => head_rows.extend(
            idx.iter()
                .enumerate()
                .filter(|(_, &g)| g >= c0 && g < c0 + t)
                .map(|(r, &g)| (r, g - c0)),
        ),
    }
}

#[cfg(test)]
#[path = "forward_tests.rs"]
mod tests;

/// `MemAvailable` of /proc/meminfo in bytes (`None` where there is none).
pub fn available_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib.saturating_mul(1024))
}
