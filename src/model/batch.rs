//! One decoding step of several sequences in one forward pass: the server's
//! continuous batching (issue 17).
//!
//! Every sequence brings its own state (KV cache, conv windows, GDN states)
//! and one token at its own next position. The products whose weights do not
//! depend on the sequence — the mixers' input and output projections, the
//! router, the shared expert, the routed experts, the output head — run once
//! over all rows, so the weights stream once per step for every sequence;
//! what mixes a sequence with its past — the causal conv, the delta rule,
//! attention over the KV cache — runs per sequence, on its own state and
//! scratch. Every product runs in decoding's numerics (as a verify pass does:
//! each row gets single-token decoding's bits), so a sequence's logits are
//! the same bits whether it was decoded alone or beside others. (Under
//! `CLOVER_BATCH_ORDER=ggml` a batch is summed as ggml sums one, which, as in
//! llama.cpp itself, differs from a single row in the last bits.)

use super::attention;
use super::deltanet;
use super::forward::{add_into, norm_rows};
use super::moe;
use super::ops::rmsnorm;
use super::state::{LayerSlot, Scratch, State};
use super::weights::MixerWeights;
use super::{ForwardError, Model};

/// Scratch for batched steps of up to `rows` sequences.
pub struct BatchScratch {
    s: Scratch,
    rows: usize,
}

impl BatchScratch {
    pub fn new(model: &Model, rows: usize) -> BatchScratch {
        let rows = rows.max(1);
        BatchScratch {
            s: Scratch::new(&model.config, model.n_vocab(), rows, 1),
            rows,
        }
    }
}

impl Model<'_> {
    /// Decodes `tokens[i]` at the next position of `states[i]` for every i,
    /// leaving each sequence's logits where [`Model::forward`] leaves them
    /// (`State::logits`).
    pub fn decode_batch(
        &self,
        bs: &mut BatchScratch,
        states: &mut [&mut State],
        tokens: &[u32],
    ) -> Result<(), ForwardError> {
        let n = tokens.len();
        assert_eq!(n, states.len(), "one token per state");
        assert!(n <= bs.rows, "more sequences than the batch scratch holds");
        if n == 0 {
            return Err(ForwardError::Empty);
        }
        let (cfg, kt) = (&self.config, self.kt);
        let (e, v) = (cfg.n_embd, self.n_vocab());
        for (st, &tok) in states.iter_mut().zip(tokens) {
            if st.verify_pending() {
                return Err(ForwardError::VerifyPending);
            }
            self.check_batch(st, &[tok], st.n_past(), super::LogitsFor::Last)?;
        }
        let mode = self.order.mode(false);
        let s = &mut bs.s;
        self.embed(tokens, &mut s.x[..n * e]);
        for il in 0..cfg.n_layer {
            let lw = &self.weights.layers[il];
            norm_rows(
                &s.x[..n * e],
                &lw.attn_norm,
                cfg.rms_eps,
                &mut s.xn[..n * e],
            );
            match &lw.mixer {
                MixerWeights::DeltaNet(w) => {
                    deltanet::project(kt, mode, cfg, w, &s.xn[..n * e], n, &mut s.gdn, &mut s.lin);
                    for (i, st) in states.iter_mut().enumerate() {
                        let LayerSlot::DeltaNet(r) = st.slots[il] else {
                            unreachable!("layer slots follow the layer kinds")
                        };
                        let g = &mut st.scratch.gdn;
                        g.take_row(cfg, &s.gdn, i);
                        deltanet::recur(kt, cfg, w, &mut st.recurrent[r], None, 1, g, None);
                        s.gdn.put_heads(cfg, g, i, n);
                    }
                    deltanet::finish(kt, mode, cfg, w, n, &mut s.gdn, &mut s.lin, &mut s.y);
                }
                MixerWeights::Attention(w) => {
                    attention::project_qkv(
                        kt,
                        mode,
                        cfg,
                        w,
                        &s.xn[..n * e],
                        n,
                        &mut s.attn,
                        &mut s.lin,
                    );
                    for (i, st) in states.iter_mut().enumerate() {
                        let LayerSlot::Attention(a) = st.slots[il] else {
                            unreachable!("layer slots follow the layer kinds")
                        };
                        let pos = st.n_past();
                        let (kv, one) = (&mut st.kv, &mut st.scratch.attn);
                        attention::decode_row(kt, mode, cfg, w, kv, a, pos, &mut s.attn, i, one);
                    }
                    attention::project_out(kt, mode, cfg, w, n, &s.attn, &mut s.lin, &mut s.y);
                }
            }
            add_into(&mut s.x[..n * e], &s.y[..n * e]);
            let fw = &lw.ffn;
            norm_rows(&s.x[..n * e], &fw.norm, cfg.rms_eps, &mut s.xn[..n * e]);
            moe::forward(
                kt,
                mode,
                cfg,
                fw,
                &s.xn[..n * e],
                n,
                &mut s.moe,
                &mut s.lin,
                &mut s.y,
            );
            add_into(&mut s.x[..n * e], &s.y[..n * e]);
            let k = cfg.n_expert_used;
            for (i, st) in states.iter_mut().enumerate() {
                st.stats.record(il, &s.moe.sel[i * k..(i + 1) * k]);
            }
        }
        // The output head over every row, in decoding's numerics.
        for i in 0..n {
            rmsnorm(
                &s.x[i * e..(i + 1) * e],
                &self.weights.output_norm,
                cfg.rms_eps,
                &mut s.head_in[i * e..(i + 1) * e],
            );
        }
        if s.head_out.len() < n * v {
            s.head_out.resize(n * v, 0.0);
        }
        s.lin.new_input();
        s.lin.project(
            kt,
            mode,
            &self.weights.output,
            &s.head_in[..n * e],
            &mut s.head_out[..n * v],
        );
        let mut bad = false;
        for (i, st) in states.iter_mut().enumerate() {
            let pos = st.n_past();
            st.kv.set_len(pos + 1);
            st.stats.tokens += 1;
            let row = &s.head_out[i * v..(i + 1) * v];
            bad |= row.iter().any(|x| !x.is_finite());
            st.scratch.logits[..v].copy_from_slice(row);
        }
        if bad {
            return Err(ForwardError::NonFinite {
                layer: Some(cfg.n_layer - 1),
            });
        }
        Ok(())
    }
}

impl State {
    /// The logits the last forward pass left for its first requested row.
    pub fn logits(&self, n_vocab: usize) -> &[f32] {
        &self.scratch.logits[..n_vocab]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::tiny::{tiny_config, TinyModel};
    use crate::model::{LogitsFor, StateOptions};

    /// Three sequences at different positions, decoded step by step alone
    /// and in one batch (also a batch of one, and a smaller batch after one
    /// sequence leaves): every step's logits are the same bits, with an f16
    /// and an f32 KV cache.
    #[test]
    fn batched_decoding_gives_each_sequence_its_lone_decoding_bits() {
        let mut tm = TinyModel::random(tiny_config(4, 2), 41);
        tm.to_f16(256);
        for order in [kernels::plan::BatchOrder::Clover] {
            for type_k in [kernels::GgmlType::F32, kernels::GgmlType::F16] {
                let mut model = tm.model();
                model.order = order;
                let v = model.n_vocab();
                let opts = StateOptions {
                    type_k,
                    type_v: type_k,
                    ..StateOptions::new(64)
                };
                let prompts: [&[u32]; 3] = [&[1, 2, 3], &[4, 5, 6, 7, 8, 9, 10], &[11]];
                let mut alone: Vec<State> = prompts
                    .iter()
                    .map(|_| model.new_state(opts).unwrap())
                    .collect();
                let mut batched: Vec<State> = prompts
                    .iter()
                    .map(|_| model.new_state(opts).unwrap())
                    .collect();
                for ((a, b), p) in alone.iter_mut().zip(&mut batched).zip(prompts) {
                    model.forward(a, p, 0, LogitsFor::Last).unwrap();
                    model.forward(b, p, 0, LogitsFor::Last).unwrap();
                }
                let mut bs = BatchScratch::new(&model, 3);
                for step in 0..6u32 {
                    let live = if step < 4 { 3 } else { 2 };
                    let tokens: Vec<u32> = (0..live as u32)
                        .map(|i| (step * 7 + i * 3) % v as u32)
                        .collect();
                    let mut want = Vec::new();
                    for (a, &t) in alone.iter_mut().zip(&tokens) {
                        let pos = a.n_past();
                        want.push(
                            model
                                .forward(a, &[t], pos, LogitsFor::Last)
                                .unwrap()
                                .to_vec(),
                        );
                    }
                    let mut refs: Vec<&mut State> = batched.iter_mut().take(live).collect();
                    model.decode_batch(&mut bs, &mut refs, &tokens).unwrap();
                    for (i, w) in want.iter().enumerate() {
                        let got = batched[i].logits(v);
                        assert!(
                            got.iter().zip(w).all(|(x, y)| x.to_bits() == y.to_bits()),
                            "order {order:?} kv {type_k:?} step {step} sequence {i}"
                        );
                        assert_eq!(batched[i].n_past(), alone[i].n_past());
                    }
                }
            }
        }
    }
}
