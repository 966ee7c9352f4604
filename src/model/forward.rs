//! The autoregressive forward pass (DESIGN §2).
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

use std::time::Instant;

use kernels::plan::BatchOrder;
use kernels::{KernelTable, Mode};
use rayon::prelude::*;

use super::attention;
use super::config::ModelConfig;
use super::deltanet;
use super::dump;
use super::moe;
use super::ops::rmsnorm;
use super::profile::{self, Op};
use super::recurrent::VerifyStash;
use super::state::{LayerSlot, State, StateOptions};
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
    /// runs (`CLOVER_BATCH_ORDER=ggml` sets the default).
    pub order: BatchOrder,
    /// The kernel tier every product of this model runs on (chosen once per
    /// process, `kernels::isa::init`), handed down to every op.
    pub kt: &'static KernelTable,
    /// Draft passes route their mask rows among the anchor's `draft_pool`
    /// most probable experts (`--spec-draft-experts`; 0: every row routes
    /// freely). Verification is unaffected, so output stays exact.
    pub draft_pool: usize,
}

impl<'a> Model<'a> {
    /// Binds the weights through `lookup` (tensor name → bytes). A trailing
    /// MTP block (`blk.N.nextn.eh_proj.weight` present) is skipped.
    pub fn bind(
        mut config: ModelConfig,
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
            order: BatchOrder::from_env(),
            kt: kernels::isa::active(),
            draft_pool: 0,
        })
    }

    pub fn n_vocab(&self) -> usize {
        self.weights.n_vocab
    }

    /// A fresh, empty sequence state for this model.
    pub fn new_state(&self, opts: StateOptions) -> Result<State, StateError> {
        State::new(&self.config, self.n_vocab(), opts)
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
        if state.verify_pending() {
            return Err(ForwardError::VerifyPending);
        }
        self.forward_impl(state, tokens, pos0, logits_for, false)
    }

    /// A verify pass (DESIGN §5): `forward` over `tokens` (at most one batch)
    /// that leaves every GDN state untouched and stashes what
    /// `commit_verify` needs. The KV cache holds all `tokens` until the commit.
    pub fn forward_verify<'s>(
        &self,
        state: &'s mut State,
        tokens: &[u32],
        pos0: usize,
        logits_for: LogitsFor,
    ) -> Result<&'s [f32], ForwardError> {
        if state.verify_pending() {
            return Err(ForwardError::VerifyPending);
        }
        if tokens.len() > state.max_batch {
            return Err(ForwardError::VerifyTooLong {
                n: tokens.len(),
                max_batch: state.max_batch,
            });
        }
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
        let kt = self.kt;
        let _warm = super::warm::keep_warm();
        let mut first_bad: Option<Option<usize>> = None;
        let mut c0 = 0;
        while c0 < n {
            let t = state.max_batch.min(n - c0);
            set_head_rows(&mut state.scratch.head_rows, logits_for, n, c0, t);
            let bad = self.run_batch(kt, state, &tokens[c0..c0 + t], pos0 + c0, verify);
            first_bad = first_bad.or(bad);
            c0 += t;
        }
        self.check_finite(state, rows, first_bad)?;
        Ok(&state.scratch.logits[..rows * v])
    }

    /// The end of a forward call: an error naming where the residual stream
    /// first held a NaN or an infinity (`first_bad`, as [`Model::run_batch`]
    /// reports it per batch), or, when the layers were finite, whether the
    /// `rows` logits rows are.
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

    /// One batch: embed, every layer, the output head for `head_rows`.
    /// Returns where the residual stream first held a NaN or an infinity
    /// (`Some(None)`: the embedding; `Some(Some(il))`: layer il's output).
    fn run_batch(
        &self,
        kt: &KernelTable,
        state: &mut State,
        tokens: &[u32],
        pos0: usize,
        verify: bool,
    ) -> Option<Option<usize>> {
        let t = tokens.len();
        let mut first_bad = self.batch_embed(state, tokens);
        // A prompt batch may take the prompt kernels; a verify pass must
        // give every row single-token decoding's bits (DESIGN §4.1).
        let mode = self.order.mode(!verify);
        for il in 0..self.config.n_layer {
            dump::set_layer(il);
            self.mixer_block(kt, mode, state, il, pos0, t, verify);
            self.moe_block(kt, mode, state, il, t);
            self.note_finite(state, il, t, &mut first_bad);
        }
        self.batch_end(kt, state, pos0, t);
        first_bad
    }

    /// [`Model::run_batch`]'s start: the embeddings of `tokens`, and
    /// `Some(None)` when they are not finite.
    pub(super) fn batch_embed(&self, state: &mut State, tokens: &[u32]) -> Option<Option<usize>> {
        let e = self.config.n_embd;
        let x = &mut state.scratch.x[..tokens.len() * e];
        self.embed(tokens, x);
        (!all_finite(x)).then_some(None)
    }

    /// Records layer `il` in `first_bad` if it is the first whose output
    /// (the batch's `t` rows of the residual stream) is not finite.
    pub(super) fn note_finite(
        &self,
        state: &State,
        il: usize,
        t: usize,
        first_bad: &mut Option<Option<usize>>,
    ) {
        let e = self.config.n_embd;
        if first_bad.is_none() && !all_finite(&state.scratch.x[..t * e]) {
            *first_bad = Some(Some(il));
        }
    }

    /// [`Model::run_batch`]'s end: the cache holds the batch, and the output
    /// head, in decoding's numerics for every batch, runs on `head_rows`.
    pub(super) fn batch_end(&self, kt: &KernelTable, state: &mut State, pos0: usize, t: usize) {
        state.kv.set_len(pos0 + t);
        state.stats.tokens += t as u64;
        self.head(kt, self.order.mode(false), state);
    }

    pub(crate) fn embed(&self, tokens: &[u32], x: &mut [f32]) {
        let e = self.config.n_embd;
        for (row, &id) in x.chunks_exact_mut(e).zip(tokens) {
            self.weights.token_embd.dequantize_row(id as usize, row);
        }
    }

    /// `x += Mixer(rmsnorm(x) ⊙ attn_norm)`. In a verify pass a GDN layer
    /// runs on a scratch copy of its state and stashes its inputs.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn mixer_block(
        &self,
        kt: &KernelTable,
        mode: Mode,
        state: &mut State,
        il: usize,
        pos0: usize,
        t: usize,
        verify: bool,
    ) {
        let cfg = &self.config;
        let e = cfg.n_embd;
        let lw = &self.weights.layers[il];
        let t0 = state.stats.timing.then(Instant::now);
        let s = &mut state.scratch;
        {
            let _p = profile::enter(Op::Norm);
            norm_rows(
                &s.x[..t * e],
                &lw.attn_norm,
                cfg.rms_eps,
                &mut s.xn[..t * e],
            );
        }
        dump::put("attn_norm", il as isize, &s.xn[..t * e]);
        match (&lw.mixer, state.slots[il]) {
            (MixerWeights::DeltaNet(w), LayerSlot::DeltaNet(r)) => {
                let real = &mut state.recurrent[r];
                // A verify pass runs on a scratch copy of the state; the
                // delta rule copies the ssm part head by head
                // (`deltanet::forward`).
                let (target, ssm_from, stash) = match (verify, state.verify.as_mut()) {
                    (true, Some(v)) => {
                        v.scratch_state.conv.copy_from_slice(&real.conv);
                        (
                            &mut v.scratch_state,
                            Some(&real.ssm[..]),
                            Some(&mut v.layers[r]),
                        )
                    }
                    _ => (real, None, None),
                };
                deltanet::forward(
                    kt,
                    mode,
                    cfg,
                    w,
                    target,
                    ssm_from,
                    &s.xn[..t * e],
                    t,
                    &mut s.gdn,
                    &mut s.lin,
                    &mut s.y,
                    stash,
                )
            }
            (MixerWeights::Attention(w), LayerSlot::Attention(a)) => attention::forward(
                kt,
                mode,
                cfg,
                w,
                &mut state.kv,
                a,
                pos0,
                &s.xn[..t * e],
                t,
                &mut s.attn,
                &mut s.lin,
                &mut s.y,
            ),
            _ => unreachable!("layer slots are built from the same layer kinds"),
        }
        dump::put("mixer_out", il as isize, &s.y[..t * e]);
        add_into(&mut s.x[..t * e], &s.y[..t * e]);
        dump::put("attn_residual", il as isize, &s.x[..t * e]);
        if let Some(t0) = t0 {
            state.stats.mixer_ns[il] += t0.elapsed().as_nanos() as u64;
        }
    }

    /// `x += MoE(rmsnorm(x) ⊙ post_attention_norm)`.
    pub(crate) fn moe_block(
        &self,
        kt: &KernelTable,
        mode: Mode,
        state: &mut State,
        il: usize,
        t: usize,
    ) {
        let cfg = &self.config;
        let e = cfg.n_embd;
        let fw = &self.weights.layers[il].ffn;
        let t0 = state.stats.timing.then(Instant::now);
        let s = &mut state.scratch;
        {
            let _p = profile::enter(Op::Norm);
            norm_rows(&s.x[..t * e], &fw.norm, cfg.rms_eps, &mut s.xn[..t * e]);
        }
        dump::put("attn_post_norm", il as isize, &s.xn[..t * e]);
        moe::forward(
            kt,
            mode,
            cfg,
            fw,
            &s.xn[..t * e],
            t,
            &mut s.moe,
            &mut s.lin,
            &mut s.y,
        );
        dump::put("ffn_out", il as isize, &s.y[..t * e]);
        add_into(&mut s.x[..t * e], &s.y[..t * e]);
        dump::put("l_out", il as isize, &s.x[..t * e]);
        state.stats.record(il, &s.moe.sel[..t * cfg.n_expert_used]);
        if let Some(t0) = t0 {
            state.stats.moe_ns[il] += t0.elapsed().as_nanos() as u64;
        }
    }

    /// Logits of the batch rows in `head_rows`.
    pub(crate) fn head(&self, kt: &KernelTable, mode: Mode, state: &mut State) {
        let s = &mut state.scratch;
        let r = s.head_rows.len();
        if r == 0 {
            return;
        }
        let t0 = state.stats.timing.then(Instant::now);
        let _p = profile::enter(Op::Head);
        let (e, v) = (self.config.n_embd, self.n_vocab());
        if s.head_in.len() < r * e {
            s.head_in.resize(r * e, 0.0);
        }
        for (i, &(_, bt)) in s.head_rows.iter().enumerate() {
            rmsnorm(
                &s.x[bt * e..(bt + 1) * e],
                &self.weights.output_norm,
                self.config.rms_eps,
                &mut s.head_in[i * e..(i + 1) * e],
            );
        }
        if s.head_out.len() < r * v {
            s.head_out.resize(r * v, 0.0);
        }
        s.lin.new_input();
        s.lin.project(
            kt,
            mode,
            &self.weights.output,
            &s.head_in[..r * e],
            &mut s.head_out[..r * v],
        );
        dump::put("result_norm", -1, &s.head_in[..r * e]);
        dump::put("result_output", -1, &s.head_out[..r * v]);
        for (i, &(out_row, _)) in s.head_rows.iter().enumerate() {
            s.logits[out_row * v..(out_row + 1) * v]
                .copy_from_slice(&s.head_out[i * v..(i + 1) * v]);
        }
        if let Some(t0) = t0 {
            state.stats.head_ns += t0.elapsed().as_nanos() as u64;
        }
    }
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

/// `rmsnorm` of every row of `x` (rows of `w.len()`); a batch's rows in
/// parallel (each as alone).
pub(crate) fn norm_rows(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let e = w.len();
    if x.len() >= NORM_PAR_ROWS * e && x.len() >= super::ops::PAR_MIN_ELEMS {
        x.par_chunks_exact(e)
            .zip(out.par_chunks_exact_mut(e))
            .for_each(|(xr, or)| rmsnorm(xr, w, eps, or));
    } else {
        for (xr, or) in x.chunks_exact(e).zip(out.chunks_exact_mut(e)) {
            rmsnorm(xr, w, eps, or);
        }
    }
}

/// Fewest rows [`norm_rows`] splits across the pool.
const NORM_PAR_ROWS: usize = 8;

pub(crate) fn add_into(x: &mut [f32], y: &[f32]) {
    for (a, b) in x.iter_mut().zip(y) {
        *a += *b;
    }
}

/// No NaN and no infinity in `x` (`v·0` is 0 for every finite `v`, NaN
/// otherwise; the sum has no early exit, so it vectorises).
fn all_finite(x: &[f32]) -> bool {
    x.chunks(64)
        .map(|c| c.iter().map(|&v| v * 0.0).sum::<f32>())
        .sum::<f32>()
        == 0.0
}
