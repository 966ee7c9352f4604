//! The fused verify + draft pass (DESIGN §4, "Fused verify + draft"): one
//! forward over the verify rows `[t_n, d_1 … d_D]` at positions n … n+D and
//! the rows of the next draft block `[d_D, M×D']` at n+D … n+D+D', the §3
//! block pass anchored at the last draft over the prefix that ends at
//! d_{D−1}. Each layer streams its weights once for both sets of rows:
//!
//! ```text
//! norms, projections, MoE, head   one product over all rows, decoding's kernels
//!                                 (each verify row keeps its one-token bits)
//! attention   verify rows: append K/V, attend causally
//!             block rows:  roped at n+D…, attend to the cache before n+D (the
//!                          verify rows' provisional K/V) and to each other
//! GDN         verify rows: the verify pass's recurrence on the scratch state
//!             block rows:  conv window = committed window + verify rows before
//!                          d_D; history read-out from each head's state after
//!                          the first D verify rows, inside the recurrence
//! MoE         the block's mask rows route among its anchor's expert pool
//! ```
//! The verify rows' logits are `forward_verify`'s and the pass is pending as
//! one (`commit_verify` keeps a prefix); the block rows' logits are those of
//! `forward_diffusion` run after `commit_verify(D)`, bit for bit
//! (`tests/fused.rs`). When all D drafts are accepted, block row 0 predicts
//! the bonus position and rows 1 … D'−1 the next round's drafts.

use kernels::{KernelTable, Mode};

use super::attention::{self, AttentionScratch};
use super::config::ModelConfig;
use super::deltanet::{self, gated_norm, HistRead};
use super::diffusion::{self, GdnBlockScratch};
use super::forward::{add_into, norm_rows, LogitsFor, Model};
use super::recurrent::VerifyStash;
use super::state::{LayerSlot, State};
use super::weights::{DeltaNetWeights, MixerWeights};
use super::ForwardError;

/// A fused pass's buffers for its block rows (allocated per pass, as the
/// diffusion pass's are).
struct BlockScratch {
    gdn: GdnBlockScratch,
    attn: AttentionScratch,
    /// The prefix's conv window, `[kernel−1][channels]`.
    window: Vec<f32>,
}

impl Model<'_> {
    /// The fused verify + draft pass over `tokens` = `[t_n, d_1 … d_D]`
    /// (D ≥ 1) at positions `pos0..` and the block `[d_D, M×masks]` after
    /// them. Returns `[D+1 + masks][n_vocab]` logits: the verify rows, then
    /// block rows 0 … masks−1 (row j predicts position `pos0 + D + j + 1`).
    /// Leaves the verify pass pending for [`Model::commit_verify`].
    pub fn forward_verify_draft<'s>(
        &self,
        state: &'s mut State,
        tokens: &[u32],
        pos0: usize,
        masks: usize,
    ) -> Result<&'s [f32], ForwardError> {
        if state.verify_pending() {
            return Err(ForwardError::VerifyPending);
        }
        let mask = match self.config.mask_token_id {
            Some(m) if self.has_diffusion() => m,
            _ => return Err(ForwardError::NoDiffusion),
        };
        let (tv, tb) = (tokens.len(), masks + 1);
        if tv < 2 || masks == 0 {
            return Err(ForwardError::Empty);
        }
        let t = tv + tb;
        if t > state.max_batch {
            return Err(ForwardError::BlockTooLong {
                n: t,
                max_batch: state.max_batch,
            });
        }
        self.check_batch(state, tokens, pos0, LogitsFor::All)?;
        // The block's last position is pos0 + tv − 1 + masks.
        if pos0 + tv + masks > state.kv.n_ctx() {
            return Err(ForwardError::ContextFull {
                need: pos0 + tv + masks,
                n_ctx: state.kv.n_ctx(),
            });
        }
        let (v, e) = (self.n_vocab(), self.config.n_embd);
        let rows = tv + masks;
        if state.scratch.logits.len() < rows * v {
            state.scratch.logits.resize(rows * v, 0.0);
        }
        if state.verify.is_none() {
            state.verify = Some(VerifyStash::new(&self.config));
        }
        let mut all = tokens.to_vec();
        all.push(tokens[tv - 1]);
        all.resize(t, mask);

        let kt = self.kt;
        let mode = self.order.mode(false);
        let cfg = &self.config;
        let _warm = super::warm::keep_warm();
        let mut blk = BlockScratch {
            gdn: GdnBlockScratch::new(cfg, tb),
            attn: AttentionScratch::new(cfg, tb, state.kv.n_ctx()),
            window: Vec::new(),
        };
        state.scratch.moe.pool = self.draft_pool;
        state.scratch.moe.pool_row = tv;
        let mut first_bad = self.batch_embed(state, &all);
        for il in 0..cfg.n_layer {
            let lw = &self.weights.layers[il];
            {
                let s = &mut state.scratch;
                norm_rows(
                    &s.x[..t * e],
                    &lw.attn_norm,
                    cfg.rms_eps,
                    &mut s.xn[..t * e],
                );
            }
            match (&lw.mixer, state.slots[il]) {
                (MixerWeights::DeltaNet(w), LayerSlot::DeltaNet(r)) => {
                    self.fused_gdn(kt, mode, w, state, r, [tv, tb], &mut blk)?
                }
                (MixerWeights::Attention(w), LayerSlot::Attention(a)) => {
                    let s = &mut state.scratch;
                    attention::forward_fused(
                        kt,
                        mode,
                        cfg,
                        w,
                        &mut state.kv,
                        a,
                        pos0,
                        &s.xn[..t * e],
                        [tv, tb],
                        &mut s.attn,
                        &mut blk.attn,
                        &mut s.lin,
                        &mut s.y,
                    )
                }
                _ => unreachable!("layer slots are built from the same layer kinds"),
            }
            let s = &mut state.scratch;
            add_into(&mut s.x[..t * e], &s.y[..t * e]);
            self.moe_block(kt, mode, state, il, t);
            self.note_finite(state, il, t, &mut first_bad);
        }
        state.scratch.moe.pool = 0;
        state.scratch.moe.pool_row = 0;
        state.kv.set_len(pos0 + tv);
        state.stats.tokens += tv as u64;
        let head_rows = &mut state.scratch.head_rows;
        head_rows.clear();
        head_rows.extend((0..tv).map(|i| (i, i)));
        head_rows.extend((0..masks).map(|j| (tv + j, tv + j)));
        self.head(kt, mode, state);
        self.check_finite(state, rows, first_bad)?;
        if let Some(st) = &mut state.verify {
            st.pending = Some((pos0, tv));
        }
        Ok(&state.scratch.logits[..rows * v])
    }

    /// The GDN layer of a fused pass (recurrent slot `r`) over the normed
    /// rows in `state.scratch.xn`, into `state.scratch.y`.
    #[allow(clippy::too_many_arguments)]
    fn fused_gdn(
        &self,
        kt: &KernelTable,
        mode: Mode,
        w: &DeltaNetWeights,
        state: &mut State,
        r: usize,
        [tv, tb]: [usize; 2],
        blk: &mut BlockScratch,
    ) -> Result<(), ForwardError> {
        let cfg: &ModelConfig = &self.config;
        let dw = w.diffusion.as_ref().ok_or(ForwardError::NoDiffusion)?;
        let (e, ch, inner, hv) = (
            cfg.n_embd,
            cfg.ssm_conv_channels(),
            cfg.ssm_inner(),
            cfg.ssm_n_v_heads,
        );
        let t = tv + tb;
        let s = &mut state.scratch;
        let g = &mut s.gdn;
        deltanet::project(kt, mode, cfg, w, &s.xn[..t * e], t, g, &mut s.lin);
        // The block's projections (its raw decay rows included) before the
        // verify rows' recurrence turns theirs into gates.
        let b = &mut blk.gdn;
        b.mixed[..tb * ch].copy_from_slice(&g.mixed[tv * ch..t * ch]);
        b.z[..tb * inner].copy_from_slice(&g.z[tv * inner..t * inner]);
        b.g[..tb * hv].copy_from_slice(&g.gate[tv * hv..t * hv]);
        // The prefix's conv window: the committed one, then the verify rows
        // before the block's anchor; the last kernel−1 rows of the two.
        let real = &state.recurrent[r];
        let hist = real.conv.len();
        blk.window.clear();
        blk.window.extend_from_slice(&real.conv);
        blk.window.extend_from_slice(&g.mixed[..(tv - 1) * ch]);
        let from = blk.window.len() - hist;
        diffusion::block_conv(cfg, w, dw, &blk.window[from..], tb, b);

        let stash = state.verify.as_mut().ok_or(ForwardError::NoVerifyPending)?;
        stash.scratch_state.conv.copy_from_slice(&real.conv);
        let read = HistRead {
            at: tv - 1,
            conv: &b.conv[..tb * ch],
            t: tb,
            out: &mut b.o_heads,
        };
        deltanet::recur(
            kt,
            cfg,
            w,
            &mut stash.scratch_state,
            Some(&real.ssm),
            tv,
            g,
            Some(&mut stash.layers[r]),
            Some(read),
        );
        diffusion::block_heads(cfg, dw, None, tb, b);
        gated_norm(
            cfg,
            w,
            tv,
            &g.o_heads,
            &mut g.z[..tv * inner],
            &mut g.o[..tv * inner],
        );
        gated_norm(cfg, w, tb, &b.o_heads, &mut b.z, &mut b.o);
        g.o[tv * inner..t * inner].copy_from_slice(&b.o[..tb * inner]);
        deltanet::project_out(kt, mode, cfg, w, t, &g.o, &mut s.lin, &mut s.y);
        Ok(())
    }
}
