//! The layer loop: the one place the model's layers run (docs/DESIGN.md §2).
//!
//! ```text
//! per group:  x = token_embd[tokens]
//! per layer, per group:  h  = x + Mixer(rmsnorm(x) ⊙ attn_norm)
//! per layer, per group:  x' = h + MoE(rmsnorm(h) ⊙ post_attention_norm)
//! per group:  the positions it added are kept, logits for its head rows
//! ```
//! Every kind of pass is a list of [`Group`]s: rows that share a numerics
//! (`Mode`) and a way of mixing with the sequence's past ([`Mixing`]). A
//! decode step, a prompt batch and a verify pass are one `Sequence` group; a
//! draft block is one `Block` group; the server's batched step is a `Slots`
//! group (one row per sequence), with a `Sequence` group beside it when a
//! prompt chunk rides along. Each layer runs its mixer for every group, then
//! its MoE for every group, so a layer's weights are read once per pass
//! while they are hot; no group's arithmetic depends on another's, so every
//! row keeps the bits it would have alone.

use std::time::Instant;

use kernels::{KernelTable, Mode};

use super::attention;
use super::attention::KvRows;
use super::config::ModelConfig;
use super::cx::Cx;
use super::deltanet;
use super::diffusion::{gdn_block, GdnBlockScratch};
use super::kv::KvCache;
use super::moe;
use super::mtp::HiddenLog;
use super::observe::{self, Observer, Op, Seen};
use super::ops::{add_into, all_finite, norm_rows, rmsnorm};
use super::recurrent::{DeltaNetState, VerifyStash};
use super::state::{LayerSlot, Scratch, State, Stats};
use super::weights::{LayerWeights, MixerWeights, MtpWeights, Weights};

/// What every pass reads: the model's numbers, its weights, the kernel tier.
#[derive(Clone, Copy)]
pub(crate) struct Net<'a, 'm> {
    pub cfg: &'a ModelConfig,
    pub weights: &'a Weights<'m>,
    pub kt: &'static KernelTable,
}

/// How a group's rows mix with their sequence's past.
pub(crate) enum Mixing<'p, 'q> {
    /// Rows of one sequence at `pos0..`: attention appends them to the
    /// cache; GDN layers advance the recurrent state, or, in a verify pass
    /// (`verify`), run on the stash's scratch copy and stash their inputs
    /// (docs/DESIGN.md §5).
    Sequence {
        kv: &'p mut KvCache,
        recurrent: &'p mut [DeltaNetState],
        slots: &'p [LayerSlot],
        verify: Option<&'p mut VerifyStash>,
        pos0: usize,
    },
    /// A draft block at `pos0..` (docs/DESIGN.md §3): reads the sequence's
    /// cache and recurrent state, writes neither.
    Block {
        kv: &'p KvCache,
        recurrent: &'p [DeltaNetState],
        slots: &'p [LayerSlot],
        pos0: usize,
        gdn: &'p mut GdnBlockScratch,
        /// A test knob: attention queries evaluated last to first.
        reverse_queries: bool,
    },
    /// Row i is the next token of `states[i]`, at that sequence's next
    /// position: the products run once over all rows, what mixes a row with
    /// its past runs on its own state and scratch.
    Slots { states: &'p mut [&'q mut State] },
}

/// What a group's rows start from.
pub(crate) enum Feed<'p> {
    /// Their tokens' embeddings: the trunk's layers and output head run.
    Tokens {
        /// Where the trunk's normed last hidden rows go while the sequence
        /// has MTP on (docs/DESIGN.md §2.7).
        log: Option<&'p mut HiddenLog>,
    },
    /// The MTP block's rows: `eh_proj` over each token's normed embedding
    /// and normed `hidden` row (`[T][n_embd]`, `cat` its scratch); then the
    /// block's layer and the output head behind `shared_head_norm`.
    Mtp {
        hidden: &'p [f32],
        cat: &'p mut [f32],
    },
}

/// Rows of a pass that share a numerics and a [`Mixing`].
pub(crate) struct Group<'p, 'q> {
    /// Where the rows start, and so which layers and head they run.
    pub feed: Feed<'p>,
    pub mode: Mode,
    /// The output head's numerics (decoding's, except for a long draft
    /// block).
    pub head_mode: Mode,
    pub tokens: &'p [u32],
    /// The residual stream, the mixers' and the MoE's scratch, the head rows
    /// and the logits.
    pub s: &'p mut Scratch,
    /// Where per-layer time and expert picks go (`Slots`: each state's own).
    pub stats: Option<&'p mut Stats>,
    pub mixing: Mixing<'p, 'q>,
    /// Where the residual stream first held a NaN or an infinity
    /// (`Some(None)`: the embedding; `Some(Some(il))`: layer il's output).
    pub first_bad: Option<Option<usize>>,
}

impl<'p, 'q> Group<'p, 'q> {
    /// `tokens` of `state`, at its next position (with `verify`, a verify
    /// pass: the GDN layers stash instead of advancing).
    pub(crate) fn sequence(
        state: &'p mut State,
        tokens: &'p [u32],
        [mode, head_mode]: [Mode; 2],
        verify: bool,
    ) -> Group<'p, 'q> {
        let pos0 = state.n_past();
        let State {
            kv,
            recurrent,
            stats,
            slots,
            scratch,
            verify: stash,
            mtp,
            ..
        } = state;
        Group {
            feed: Feed::Tokens {
                log: mtp.as_mut().map(|m| &mut m.log),
            },
            mode,
            head_mode,
            tokens,
            s: scratch,
            stats: Some(stats),
            mixing: Mixing::Sequence {
                kv,
                recurrent,
                slots,
                verify: stash.as_mut().filter(|_| verify),
                pos0,
            },
            first_bad: None,
        }
    }

    /// The draft block `tokens` after `state`'s positions, in `mode`.
    pub(crate) fn block(
        state: &'p mut State,
        tokens: &'p [u32],
        mode: Mode,
        gdn: &'p mut GdnBlockScratch,
        reverse_queries: bool,
    ) -> Group<'p, 'q> {
        Group {
            feed: Feed::Tokens { log: None },
            mode,
            head_mode: mode,
            tokens,
            first_bad: None,
            mixing: Mixing::Block {
                pos0: state.n_past(),
                kv: &state.kv,
                recurrent: &state.recurrent,
                slots: &state.slots,
                gdn,
                reverse_queries,
            },
            s: &mut state.scratch,
            stats: Some(&mut state.stats),
        }
    }
}

impl<'p> Group<'p, '_> {
    /// `tokens` through `state`'s MTP block at positions `pos0..` of its
    /// cache, with the hidden rows the caller put in `MtpState::hidden`.
    pub(crate) fn mtp(
        state: &'p mut State,
        tokens: &'p [u32],
        pos0: usize,
        [mode, head_mode]: [Mode; 2],
    ) -> Group<'p, 'static> {
        let t = tokens.len();
        let m = state.mtp.as_mut().expect("the caller checks MTP is on");
        let e = m.hidden.len() / state.max_batch;
        Group {
            feed: Feed::Mtp {
                hidden: &m.hidden[..t * e],
                cat: &mut m.cat[..2 * t * e],
            },
            mode,
            head_mode,
            tokens,
            s: &mut state.scratch,
            // The statistics count the trunk's layers.
            stats: None,
            mixing: Mixing::Sequence {
                kv: &mut m.kv,
                recurrent: &mut [],
                slots: &m.slots,
                verify: None,
                pos0,
            },
            first_bad: None,
        }
    }
}

impl Group<'_, '_> {
    fn t(&self) -> usize {
        self.tokens.len()
    }

    /// An MTP pass without logits (catching the block's cache up): its rows
    /// only store their attention's K and V, since nothing reads what the
    /// rest of the layer would add to them.
    fn stores_only(&self) -> bool {
        matches!(self.feed, Feed::Mtp { .. }) && self.s.head_rows.is_empty()
    }

    /// The pass's hook for this group: its sequence's statistics, then
    /// every process-wide watcher.
    fn see(&mut self, name: &str, il: isize, seen: Seen) {
        let rows = self.t();
        if let Some(stats) = self.stats.as_mut() {
            stats.see(name, il, rows, &seen);
        }
        observe::see(name, il, rows, seen);
    }

    /// A clock for a part of the layer, when the statistics time them.
    fn clock(&self) -> Option<Instant> {
        self.stats
            .as_ref()
            .is_some_and(|s| s.timing)
            .then(Instant::now)
    }
}

impl<'m> Net<'_, 'm> {
    /// Runs `groups` through the embedding, every layer and the output head
    /// (each group's `s.head_rows`), and keeps the positions of its
    /// `Sequence` and `Slots` groups.
    pub(crate) fn run(&self, groups: &mut [Group]) {
        let _warm = super::warm::keep_warm();
        let mtp = matches!(groups.first().map(|g| &g.feed), Some(Feed::Mtp { .. }));
        assert!(
            groups
                .iter()
                .all(|g| matches!(g.feed, Feed::Mtp { .. }) == mtp),
            "a pass runs the trunk or the MTP block"
        );
        for g in groups.iter_mut() {
            self.embed(g);
        }
        let n = self.cfg.n_layer;
        let layers = if mtp { n..n + 1 } else { 0..n };
        for il in layers {
            observe::set_layer(il);
            for g in groups.iter_mut() {
                self.mixer(g, il);
            }
            for g in groups.iter_mut() {
                if !g.stores_only() {
                    self.moe(g, il);
                }
            }
        }
        for g in groups.iter_mut() {
            self.end(g);
        }
    }

    /// The rows' first residual stream: their tokens' embeddings, or for
    /// the MTP block `eh_proj · [enorm(embedding) ; hnorm(hidden)]`.
    fn embed(&self, g: &mut Group) {
        let (e, t, s) = (self.cfg.n_embd, g.tokens.len(), &mut *g.s);
        let x = &mut s.x[..t * e];
        for (row, &id) in x.chunks_exact_mut(e).zip(g.tokens) {
            self.weights.token_embd.dequantize_row(id as usize, row);
        }
        if let Feed::Mtp { hidden, cat } = &mut g.feed {
            let w = self.mtp();
            let eps = self.cfg.rms_eps;
            {
                let _p = observe::enter(Op::Norm);
                for ((xr, hr), cr) in x
                    .chunks_exact(e)
                    .zip(hidden.chunks_exact(e))
                    .zip(cat.chunks_exact_mut(2 * e))
                {
                    let (ce, ch) = cr.split_at_mut(e);
                    rmsnorm(xr, &w.enorm, eps, ce);
                    rmsnorm(hr, &w.hnorm, eps, ch);
                }
            }
            let _p = observe::enter(Op::AttnProj);
            s.lin.new_input();
            s.lin.project(self.kt, g.mode, &w.eh_proj, cat, x);
            observe::tensor("mtp_fused", self.cfg.n_layer as isize, t, x);
        }
        if !all_finite(x) {
            g.first_bad = Some(None);
        }
    }

    /// The MTP block's weights (a pass over it is made only when bound).
    fn mtp(&self) -> &MtpWeights<'m> {
        self.weights
            .mtp
            .as_ref()
            .expect("an MTP pass checks the block is bound")
    }

    /// Layer `il`'s weights: a trunk layer, or at the trunk's layer count
    /// the MTP block's.
    fn layer(&self, il: usize) -> &LayerWeights<'m> {
        match self.weights.layers.get(il) {
            Some(l) => l,
            None => &self.mtp().layer,
        }
    }

    /// `x += Mixer(rmsnorm(x) ⊙ attn_norm)` for layer `il`.
    fn mixer(&self, g: &mut Group, il: usize) {
        let (cfg, kt, mode, t) = (self.cfg, self.kt, g.mode, g.t());
        let e = cfg.n_embd;
        let lw = self.layer(il);
        let t0 = g.clock();
        let store_only = g.stores_only();
        let s = &mut *g.s;
        {
            let _p = observe::enter(Op::Norm);
            norm_rows(
                &s.x[..t * e],
                &lw.attn_norm,
                cfg.rms_eps,
                &mut s.xn[..t * e],
            );
        }
        observe::tensor("attn_norm", il as isize, t, &s.xn[..t * e]);
        let u = &s.xn[..t * e];
        let cx = Cx { kt, mode, cfg };
        match (&lw.mixer, &mut g.mixing) {
            (
                MixerWeights::DeltaNet(w),
                Mixing::Sequence {
                    recurrent,
                    slots,
                    verify,
                    ..
                },
            ) => {
                let r = gdn_slot(slots[il]);
                let real = &mut recurrent[r];
                // A verify pass runs on a scratch copy of the state; the
                // delta rule copies the ssm part head by head
                // (`deltanet::forward`).
                let (target, ssm_from, stash) = match verify {
                    Some(v) => {
                        v.scratch_state.conv.copy_from_slice(&real.conv);
                        (
                            &mut v.scratch_state,
                            Some(&real.ssm[..]),
                            Some(&mut v.layers[r]),
                        )
                    }
                    None => (real, None, None),
                };
                deltanet::forward(
                    cx, w, target, ssm_from, u, t, &mut s.gdn, &mut s.lin, &mut s.y, stash,
                )
            }
            (
                MixerWeights::DeltaNet(w),
                Mixing::Block {
                    recurrent,
                    slots,
                    gdn,
                    ..
                },
            ) => {
                let Some(dw) = w.diffusion.as_ref() else {
                    unreachable!("a block pass checks the diffusion tensors first")
                };
                let state = &recurrent[gdn_slot(slots[il])];
                gdn_block(cx, w, dw, state, u, t, gdn, &mut s.lin, &mut s.y)
            }
            (MixerWeights::DeltaNet(w), Mixing::Slots { states }) => {
                deltanet::project(cx, w, u, t, &mut s.gdn, &mut s.lin);
                for (i, st) in states.iter_mut().enumerate() {
                    let r = gdn_slot(st.slots[il]);
                    let one = &mut st.scratch.gdn;
                    one.take_row(cfg, &s.gdn, i);
                    deltanet::recur(kt, cfg, w, &mut st.recurrent[r], None, 1, one, None);
                    s.gdn.put_heads(cfg, one, i, t);
                }
                deltanet::finish(cx, w, t, &mut s.gdn, &mut s.lin, &mut s.y);
            }
            (MixerWeights::Attention(w), Mixing::Slots { states }) => {
                attention::project_qkv(cx, w, u, t, &mut s.attn, &mut s.lin);
                for (i, st) in states.iter_mut().enumerate() {
                    let a = attn_slot(st.slots[il]);
                    let pos = st.n_past();
                    let (kv, one) = (&mut st.kv, &mut st.scratch.attn);
                    attention::decode_row(cx, w, kv, a, pos, &mut s.attn, i, one);
                }
                attention::project_out(cx, w, t, &s.attn, &mut s.lin, &mut s.y);
            }
            (MixerWeights::Attention(w), mixing) => {
                let (rows, slots, pos0) = match mixing {
                    Mixing::Sequence {
                        kv, slots, pos0, ..
                    } if store_only => (KvRows::Store(kv), slots, *pos0),
                    Mixing::Sequence {
                        kv, slots, pos0, ..
                    } => (KvRows::Append(kv), slots, *pos0),
                    Mixing::Block {
                        kv,
                        slots,
                        pos0,
                        reverse_queries,
                        ..
                    } => {
                        let reverse_queries = *reverse_queries;
                        (
                            KvRows::Block {
                                kv,
                                reverse_queries,
                            },
                            slots,
                            *pos0,
                        )
                    }
                    Mixing::Slots { .. } => unreachable!("matched above"),
                };
                let (a, sc) = (attn_slot(slots[il]), &mut s.attn);
                attention::forward(cx, w, rows, a, pos0, u, t, sc, &mut s.lin, &mut s.y)
            }
        }
        observe::tensor("mixer_out", il as isize, t, &s.y[..t * e]);
        add_into(&mut s.x[..t * e], &s.y[..t * e]);
        observe::tensor("attn_residual", il as isize, t, &s.x[..t * e]);
        if let Some(t0) = t0 {
            g.see(
                "mixer",
                il as isize,
                Seen::Time(t0.elapsed().as_nanos() as u64),
            );
        }
    }

    /// `x += MoE(rmsnorm(x) ⊙ post_attention_norm)` for layer `il`.
    fn moe(&self, g: &mut Group, il: usize) {
        let (cfg, t) = (self.cfg, g.t());
        let e = cfg.n_embd;
        let fw = &self.layer(il).ffn;
        let t0 = g.clock();
        let s = &mut *g.s;
        {
            let _p = observe::enter(Op::Norm);
            norm_rows(&s.x[..t * e], &fw.norm, cfg.rms_eps, &mut s.xn[..t * e]);
        }
        observe::tensor("attn_post_norm", il as isize, t, &s.xn[..t * e]);
        moe::forward(
            Cx {
                kt: self.kt,
                mode: g.mode,
                cfg,
            },
            fw,
            &s.xn[..t * e],
            t,
            &mut s.moe,
            &mut s.lin,
            &mut s.y,
        );
        observe::tensor("ffn_out", il as isize, t, &s.y[..t * e]);
        add_into(&mut s.x[..t * e], &s.y[..t * e]);
        observe::tensor("l_out", il as isize, t, &s.x[..t * e]);
        if g.first_bad.is_none() && !all_finite(&s.x[..t * e]) {
            g.first_bad = Some(Some(il));
        }
        // The experts each row picked: a `Slots` group's rows are each their
        // own sequence's.
        let (k, il_) = (cfg.n_expert_used, il as isize);
        let sel = &g.s.moe.sel[..t * k];
        if let Mixing::Slots { states } = &mut g.mixing {
            for (st, row) in states.iter_mut().zip(sel.chunks_exact(k)) {
                st.stats.see("ffn_moe_topk", il_, 1, &Seen::Experts(row));
            }
        }
        if let Some(stats) = g.stats.as_mut() {
            stats.see("ffn_moe_topk", il_, t, &Seen::Experts(sel));
        }
        observe::see("ffn_moe_topk", il_, t, Seen::Experts(sel));
        if let Some(t0) = t0 {
            g.see("moe", il_, Seen::Time(t0.elapsed().as_nanos() as u64));
        }
    }

    /// A group's end: the cache keeps the positions a `Sequence` or `Slots`
    /// group added, and the output head runs on the group's head rows (a
    /// `Slots` group's row i becomes `states[i]`'s logits).
    fn end(&self, g: &mut Group) {
        let (t, e, eps) = (g.t(), self.cfg.n_embd, self.cfg.rms_eps);
        let on = &self.weights.output_norm;
        match &mut g.mixing {
            Mixing::Sequence { kv, pos0, .. } => {
                kv.set_len(*pos0 + t);
                if let Some(stats) = g.stats.as_mut() {
                    stats.tokens += t as u64;
                }
                if let Feed::Tokens { log: Some(log) } = &mut g.feed {
                    let _p = observe::enter(Op::Norm);
                    norm_rows(&g.s.x[..t * e], on, eps, log.rows_for(*pos0, t));
                }
            }
            Mixing::Block { .. } => {}
            Mixing::Slots { states } => {
                for (i, st) in states.iter_mut().enumerate() {
                    let pos = st.n_past();
                    st.kv.set_len(pos + 1);
                    st.stats.tokens += 1;
                    if let Some(m) = st.mtp.as_mut() {
                        let row = &g.s.x[i * e..(i + 1) * e];
                        rmsnorm(row, on, eps, m.log.rows_for(pos, 1));
                    }
                }
                let rows = &mut g.s.head_rows;
                rows.clear();
                rows.extend((0..t).map(|i| (i, i)));
            }
        }
        let t0 = g.clock();
        let norm = match g.feed {
            Feed::Tokens { .. } => on,
            Feed::Mtp { .. } => &self.mtp().shared_head_norm,
        };
        self.head(g.head_mode, norm, g.s);
        if let Some(t0) = t0 {
            g.see("head", -1, Seen::Time(t0.elapsed().as_nanos() as u64));
        }
        if let Mixing::Slots { states } = &mut g.mixing {
            let v = self.weights.n_vocab;
            for (i, st) in states.iter_mut().enumerate() {
                st.scratch.logits[..v].copy_from_slice(&g.s.logits[i * v..(i + 1) * v]);
            }
        }
    }

    /// Logits of the rows in `s.head_rows` (`(output row, batch row)`),
    /// normed by `norm` first (`s.head_in` keeps the normed rows).
    fn head(&self, mode: Mode, norm: &[f32], s: &mut Scratch) {
        let r = s.head_rows.len();
        if r == 0 {
            return;
        }
        let _p = observe::enter(Op::Head);
        let (e, v) = (self.cfg.n_embd, self.weights.n_vocab);
        grow(&mut s.head_in, r * e);
        grow(&mut s.head_out, r * v);
        let out_rows = s.head_rows.iter().map(|&(o, _)| o + 1).max().unwrap_or(0);
        grow(&mut s.logits, out_rows * v);
        for (i, &(_, bt)) in s.head_rows.iter().enumerate() {
            rmsnorm(
                &s.x[bt * e..(bt + 1) * e],
                norm,
                self.cfg.rms_eps,
                &mut s.head_in[i * e..(i + 1) * e],
            );
        }
        s.lin.new_input();
        s.lin.project(
            self.kt,
            mode,
            &self.weights.output,
            &s.head_in[..r * e],
            &mut s.head_out[..r * v],
        );
        observe::tensor("result_norm", -1, r, &s.head_in[..r * e]);
        observe::tensor("result_output", -1, r, &s.head_out[..r * v]);
        for (i, &(out_row, _)) in s.head_rows.iter().enumerate() {
            s.logits[out_row * v..(out_row + 1) * v]
                .copy_from_slice(&s.head_out[i * v..(i + 1) * v]);
        }
    }
}

fn grow(v: &mut Vec<f32>, n: usize) {
    if v.len() < n {
        v.resize(n, 0.0);
    }
}

fn gdn_slot(slot: LayerSlot) -> usize {
    match slot {
        LayerSlot::DeltaNet(r) => r,
        LayerSlot::Attention(_) => unreachable!("layer slots follow the layer kinds"),
    }
}

fn attn_slot(slot: LayerSlot) -> usize {
    match slot {
        LayerSlot::Attention(a) => a,
        LayerSlot::DeltaNet(_) => unreachable!("layer slots follow the layer kinds"),
    }
}
