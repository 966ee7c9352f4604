//! One decoding step of several sequences in one forward pass: the server's
//! continuous batching.
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
//! `--batch-order ggml` a batch is summed as ggml sums one, which, as in
//! llama.cpp itself, differs from a single row in the last bits.)
//!
//! A step may also carry one [`PromptChunk`]: up to a batch of another
//! sequence's prompt, evaluated exactly as [`Model::forward`] evaluates that
//! batch (the prompt kernels, its own scratch), layer by layer beside the
//! decoding rows: each layer's mixer and MoE run first for the chunk, then
//! for the decoding rows, so the decoding rows read weights the chunk has
//! just brought into the cache, and a prompt no longer holds the decoding
//! sequences back for the whole of its evaluation. Neither side's
//! arithmetic depends on the other, so every row keeps the bits it would
//! have alone.

use super::forward::{set_head_rows, LogitsFor, Model};
use super::ops::all_finite;
use super::pass::{Feed, Group, Mixing};
use super::state::{Scratch, State};
use super::ForwardError;

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

/// One batch of a sequence's prompt riding along a batched step.
pub struct PromptChunk<'a> {
    pub state: &'a mut State,
    /// At most the state's batch (`max_batch`), at its next position.
    pub tokens: &'a [u32],
    /// Logits for the last of `tokens` (`State::logits`); else none.
    pub logits: bool,
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
        if tokens.is_empty() {
            return Err(ForwardError::Empty);
        }
        self.step_batch(bs, states, tokens, None).map(|_| ())
    }

    /// Checks that `tokens` may be evaluated at the next position of
    /// `state`, with the last one's logits when `logits`, as
    /// [`Model::forward`] checks its input before it runs any of it.
    pub fn check_prompt(
        &self,
        state: &mut State,
        tokens: &[u32],
        logits: bool,
    ) -> Result<(), ForwardError> {
        if state.verify_pending() {
            return Err(ForwardError::VerifyPending);
        }
        let lf = match logits {
            true => LogitsFor::Last,
            false => LogitsFor::Indices(&[]),
        };
        self.check_batch(state, tokens, state.n_past(), lf)
            .map(|_| ())
    }

    /// What [`Model::forward`] reports at the end of a prompt whose batches
    /// ran as [`PromptChunk`]s: `first_bad` is where the residual stream first
    /// held a NaN or an infinity (each chunk's `step_batch` result, the first
    /// one that was not `None`); with `logits`, whether the last token's are
    /// finite.
    pub fn prompt_result(
        &self,
        state: &State,
        logits: bool,
        first_bad: Option<Option<usize>>,
    ) -> Result<(), ForwardError> {
        self.check_finite(state, logits as usize, first_bad)
    }

    /// [`Model::decode_batch`] over `tokens` (possibly none) and, in the same
    /// pass, one batch of a prompt (see the module docs). The chunk must have
    /// passed [`Model::check_prompt`] (as the prompt it belongs to). Returns
    /// where the chunk's residual stream first held a NaN or an infinity, as
    /// [`Model::prompt_result`] takes it; errors are the decoding rows'.
    pub fn step_batch(
        &self,
        bs: &mut BatchScratch,
        states: &mut [&mut State],
        tokens: &[u32],
        chunk: Option<PromptChunk<'_>>,
    ) -> Result<Option<Option<usize>>, ForwardError> {
        let n = tokens.len();
        assert_eq!(n, states.len(), "one token per state");
        assert!(n <= bs.rows, "more sequences than the batch scratch holds");
        let v = self.n_vocab();
        for (st, &tok) in states.iter_mut().zip(tokens) {
            if st.verify_pending() {
                return Err(ForwardError::VerifyPending);
            }
            self.check_batch(st, &[tok], st.n_past(), LogitsFor::Last)?;
        }
        let mode = self.order.mode(false);
        let mut groups = Vec::with_capacity(2);
        // The chunk as `Model::forward` runs one of its batches.
        if let Some(c) = chunk {
            let t = c.tokens.len();
            assert!(
                t > 0 && t <= c.state.max_batch,
                "a prompt chunk is one batch"
            );
            let s = &mut c.state.scratch;
            s.moe.pool = 0;
            let lf = match c.logits {
                true => LogitsFor::Last,
                false => LogitsFor::Indices(&[]),
            };
            set_head_rows(&mut s.head_rows, lf, t, 0, t);
            let modes = [self.order.mode(true), mode];
            groups.push(Group::sequence(c.state, c.tokens, modes, false));
        }
        let chunked = !groups.is_empty();
        if n > 0 {
            groups.push(Group {
                // Each state logs its own row for MTP (`Net::end`).
                feed: Feed::Tokens { log: None },
                mode,
                head_mode: mode,
                tokens,
                s: &mut bs.s,
                stats: None,
                mixing: Mixing::Slots { states },
                first_bad: None,
            });
        }
        self.net().run(&mut groups);
        let chunk_bad = chunked.then(|| groups[0].first_bad).flatten();
        if n == 0 {
            return Ok(chunk_bad);
        }
        if !all_finite(&bs.s.logits[..n * v]) {
            return Err(ForwardError::NonFinite {
                layer: Some(self.config.n_layer - 1),
            });
        }
        Ok(chunk_bad)
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

    /// A prompt evaluated chunk by chunk inside batched steps, beside two
    /// decoding sequences (and once with none), leaves the same state and
    /// logits as `Model::forward` over the whole prompt: its last token's
    /// logits and every later decoding step are the same bits. The decoding
    /// sequences keep their lone decoding bits meanwhile.
    #[test]
    fn a_prompt_chunk_beside_decoding_rows_keeps_every_rows_bits() {
        let mut tm = TinyModel::random(tiny_config(4, 2), 43);
        tm.to_f16(256);
        prompt_chunks_keep_the_bits(&tm.model());
        // Quantized weights, whose prompt kernels sum in another order than
        // decoding's: a chunk that took decoding's numerics would show.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tiny-q4_k_m.gguf");
        let plan = crate::synth::plan(crate::synth::SynthOptions {
            arch: crate::synth::Arch::Qwen35Moe,
            preset: crate::synth::Preset::Tiny,
            recipe: crate::synth::Recipe::Q4KM,
            seed: 5,
        })
        .unwrap();
        plan.write(&path, Some(1)).unwrap();
        let file = crate::gguf::GgufFile::open(&path).unwrap();
        prompt_chunks_keep_the_bits(&Model::load(&file).unwrap());
    }

    fn prompt_chunks_keep_the_bits(model: &Model) {
        let v = model.n_vocab();
        // Batches of 12 rows take the prompt kernels (`PROMPT_MIN_ROWS`).
        let opts = StateOptions {
            max_batch: 12,
            ..StateOptions::new(64)
        };
        let prompt: Vec<u32> = (0..29u32).map(|i| (i * 5 + 2) % v as u32).collect();
        for decoders in [2usize, 0] {
            let mut alone: Vec<State> = (0..decoders)
                .map(|_| model.new_state(opts).unwrap())
                .collect();
            let mut batched: Vec<State> = (0..decoders)
                .map(|_| model.new_state(opts).unwrap())
                .collect();
            for (i, (a, b)) in alone.iter_mut().zip(&mut batched).enumerate() {
                let p = [i as u32 + 1, 7, 9];
                model.forward(a, &p, 0, LogitsFor::Last).unwrap();
                model.forward(b, &p, 0, LogitsFor::Last).unwrap();
            }
            let mut want = model.new_state(opts).unwrap();
            let want_logits = model
                .forward(&mut want, &prompt, 0, LogitsFor::Last)
                .unwrap()
                .to_vec();
            let mut got = model.new_state(opts).unwrap();
            model.check_prompt(&mut got, &prompt, true).unwrap();
            let mut bs = BatchScratch::new(model, 2);
            let mut first_bad = None;
            for (step, c) in prompt.chunks(12).enumerate() {
                let last = (step + 1) * 12 >= prompt.len();
                let tokens: Vec<u32> = (0..decoders as u32)
                    .map(|i| (step as u32 * 3 + i) % v as u32)
                    .collect();
                let mut lone = Vec::new();
                for (a, &t) in alone.iter_mut().zip(&tokens) {
                    let pos = a.n_past();
                    lone.push(
                        model
                            .forward(a, &[t], pos, LogitsFor::Last)
                            .unwrap()
                            .to_vec(),
                    );
                }
                let mut refs: Vec<&mut State> = batched.iter_mut().collect();
                let chunk = PromptChunk {
                    state: &mut got,
                    tokens: c,
                    logits: last,
                };
                let bad = model
                    .step_batch(&mut bs, &mut refs, &tokens, Some(chunk))
                    .unwrap();
                first_bad = first_bad.or(bad);
                for (i, w) in lone.iter().enumerate() {
                    let g = batched[i].logits(v);
                    assert!(
                        g.iter().zip(w).all(|(x, y)| x.to_bits() == y.to_bits()),
                        "decoders {decoders} step {step} sequence {i}"
                    );
                }
            }
            model.prompt_result(&got, true, first_bad).unwrap();
            assert_eq!(got.n_past(), prompt.len());
            let bits = |x: &[f32]| x.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(
                bits(got.logits(v)),
                bits(&want_logits),
                "decoders {decoders}"
            );
            // The states match too: the next tokens decode to the same bits.
            for (i, t) in [3u32, 8, 1].into_iter().enumerate() {
                let pos = want.n_past();
                let w = model
                    .forward(&mut want, &[t], pos, LogitsFor::Last)
                    .unwrap()
                    .to_vec();
                let g = model.forward(&mut got, &[t], pos, LogitsFor::Last).unwrap();
                assert_eq!(
                    bits(g),
                    bits(&w),
                    "decoders {decoders} after the prompt, step {i}"
                );
            }
        }
    }
}
