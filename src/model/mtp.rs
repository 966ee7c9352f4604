//! The multi-token-prediction block as one more kind of pass
//! (docs/DESIGN.md §2.7).
//!
//! ```text
//! entry p of the MTP cache:  x = eh_proj · [enorm(embd(t_p)) ; hnorm(h_{p−1})]
//!                            x += Attn(rmsnorm(x) ⊙ attn_norm)      its own KV cache, rope at p
//!                            x += MoE(rmsnorm(x) ⊙ post_attention_norm)
//!                            g_p = rmsnorm(x) ⊙ shared_head_norm
//!                            logits_p = output · g_p                predicts t_{p+1}
//! ```
//! `h_p` is the trunk's last hidden state at p after `output_norm` (what its
//! head multiplies), `h_{−1} = 0`. A chained draft feeds the MTP block's own
//! `g` in place of `h`. The trunk's passes log `h` ([`HiddenLog`]) while the
//! state has MTP on; [`Model::mtp_sync`] brings the MTP cache up to the
//! newest token and gives the first draft's logits, [`Model::mtp_step`]
//! chains one more, [`Model::mtp_truncate`] drops the chained positions.

use super::forward::set_head_rows;
use super::kv::KvCache;
use super::pass::Group;
use super::state::{LayerSlot, State, StateOptions};
use super::{ForwardError, LogitsFor, Model, StateError};

/// The trunk's normed last hidden rows by position, from `base` on.
#[derive(Debug, Default)]
pub struct HiddenLog {
    e: usize,
    base: usize,
    rows: Vec<f32>,
}

impl HiddenLog {
    fn new(e: usize) -> HiddenLog {
        HiddenLog {
            e,
            base: 0,
            rows: Vec::new(),
        }
    }

    /// Positions past the last logged one.
    fn end(&self) -> usize {
        self.base + self.rows.len() / self.e
    }

    /// Room for the rows of positions `pos0 .. pos0 + t`, to be filled by
    /// the caller: a pass over them replaces whatever was logged from
    /// `pos0` on (a rolled-back verify pass, a rewound sequence).
    pub(crate) fn rows_for(&mut self, pos0: usize, t: usize) -> &mut [f32] {
        if pos0 < self.base || pos0 > self.end() {
            self.base = pos0;
            self.rows.clear();
        }
        let from = (pos0 - self.base) * self.e;
        self.rows.resize(from + t * self.e, 0.0);
        &mut self.rows[from..]
    }

    /// The row of position `p`, when logged.
    pub fn get(&self, p: usize) -> Option<&[f32]> {
        let i = p.checked_sub(self.base)?;
        self.rows.get(i * self.e..(i + 1) * self.e)
    }

    /// Drops the rows before position `p`.
    fn forget_before(&mut self, p: usize) {
        let n = p.saturating_sub(self.base).min(self.rows.len() / self.e);
        self.rows.drain(..n * self.e);
        self.base += n;
    }

    fn clear(&mut self) {
        self.base = 0;
        self.rows.clear();
    }
}

/// A sequence's MTP state: the block's KV cache and what feeds it.
#[derive(Debug)]
pub struct MtpState {
    /// One attention layer's cache; cache row r holds entry `base + r`,
    /// roped at r (attention scores depend only on the distance between
    /// positions, so a cache that starts later is the same cache).
    pub kv: KvCache,
    /// The first position the cache holds: entries before it were skipped
    /// ([`Model::mtp_skip`]).
    base: usize,
    /// The pass's layer slots: the block's index (the trunk's layer count)
    /// maps to the cache's one layer.
    pub(crate) slots: Vec<LayerSlot>,
    /// The trunk's normed hidden rows not yet consumed.
    pub(crate) log: HiddenLog,
    /// The token of each position up to the newest entry, skipped ones
    /// included (a rewound history is noticed).
    tokens: Vec<u32>,
    /// `[max_batch][n_embd]`: the hidden input rows of a pass.
    pub(crate) hidden: Vec<f32>,
    /// `[max_batch][2·n_embd]`: the rows `eh_proj` multiplies.
    pub(crate) cat: Vec<f32>,
    /// `g` of the newest pass's last row: a chained step's hidden input.
    out: Vec<f32>,
}

impl MtpState {
    pub(crate) fn new(
        cfg: &super::ModelConfig,
        opts: &StateOptions,
    ) -> Result<MtpState, StateError> {
        let e = cfg.n_embd;
        Ok(MtpState {
            kv: KvCache::for_state(1, cfg, opts)?,
            base: 0,
            slots: vec![LayerSlot::Attention(0); cfg.n_layer + 1],
            log: HiddenLog::new(e),
            tokens: Vec::new(),
            hidden: vec![0.0; opts.max_batch * e],
            cat: vec![0.0; opts.max_batch * 2 * e],
            out: vec![0.0; e],
        })
    }

    /// Bytes of the MTP cache at full context (checked with the state's).
    pub(crate) fn bytes_needed(cfg: &super::ModelConfig, opts: &StateOptions) -> u128 {
        let head = |ty: kernels::GgmlType| ty.row_bytes(cfg.head_dim as u64).unwrap_or(0) as u128;
        let per_pos = cfg.n_head_kv as u128 * (head(opts.type_k) + head(opts.type_v));
        let e = cfg.n_embd as u128;
        opts.n_ctx as u128 * (per_pos + 4 * e) + 12 * opts.max_batch as u128 * e
    }

    /// The entries kept for `history` (its last token the anchor, at n):
    /// those whose token still matches, at most n, since the anchor's entry
    /// is always run again (its logits are the first draft).
    fn kept(&self, history: &[u32]) -> usize {
        let same = self
            .tokens
            .iter()
            .zip(history)
            .take_while(|(a, b)| a == b)
            .count();
        same.min(history.len().saturating_sub(1))
    }

    pub(crate) fn reset(&mut self) {
        self.kv.clear();
        self.base = 0;
        self.tokens.clear();
        self.log.clear();
    }

    /// Keeps the entries before position `keep` (or none, from scratch,
    /// when `keep` lies among the skipped positions).
    fn keep(&mut self, keep: usize) {
        if keep < self.base {
            self.kv.clear();
            self.base = 0;
            self.tokens.clear();
        } else {
            self.kv.truncate(keep - self.base);
            self.tokens.truncate(keep);
        }
    }
}

impl Model<'_> {
    /// Whether the file's MTP block is bound (a whole one).
    pub fn has_mtp(&self) -> bool {
        self.weights.mtp.is_some()
    }

    /// Brings `state`'s MTP cache up to `history` (every token so far; the
    /// last, t_n, is not yet in the trunk, which holds n positions) and
    /// returns the logits of entry n: the MTP block's prediction of t_{n+1}.
    /// Entries whose token still matches `history` are kept; a trunk row
    /// the log no longer holds counts as zeros (a draft is only a proposal).
    pub fn mtp_sync<'s>(
        &self,
        state: &'s mut State,
        history: &[u32],
    ) -> Result<&'s [f32], ForwardError> {
        let n = history.len().saturating_sub(1);
        self.mtp_run(state, history, n + 1)?;
        Ok(&state.scratch.logits[..self.n_vocab()])
    }

    /// How many entries `mtp_sync(state, history)` would run: the anchor's
    /// and those behind it that the cache lacks or holds for other tokens.
    pub fn mtp_behind(&self, state: &State, history: &[u32]) -> usize {
        history.len() - state.mtp.as_ref().map_or(0, |m| m.kept(history))
    }

    /// The first `k` of the entries `mtp_sync` would run, without logits
    /// (catching up on positions decoded without drafting).
    pub fn mtp_catch_up(
        &self,
        state: &mut State,
        history: &[u32],
        k: usize,
    ) -> Result<(), ForwardError> {
        let kept = state.mtp.as_ref().map_or(0, |m| m.kept(history));
        self.mtp_run(
            state,
            history,
            (kept + k).min(history.len().saturating_sub(1)),
        )
    }

    /// Skips the first `k` of the entries `mtp_sync` would run: the cache
    /// starts again empty after them, so later entries attend to those
    /// after the skip only (a bounded catch-up after a long plain streak;
    /// the drafts are proposals, verified like any other). At most the
    /// entries before the anchor's are skipped.
    pub fn mtp_skip(
        &self,
        state: &mut State,
        history: &[u32],
        k: usize,
    ) -> Result<(), ForwardError> {
        let m = self.mtp_state(state)?;
        let kept = m.kept(history);
        let to = (kept + k).min(history.len().saturating_sub(1));
        if to > kept {
            m.kv.clear();
            m.base = to;
            m.tokens.clear();
            m.tokens.extend_from_slice(&history[..to]);
            m.log.forget_before(to.saturating_sub(1));
        }
        Ok(())
    }

    /// Runs the entries from the first stale one up to `upto` (exclusive;
    /// `history.len()`: the anchor's entry too, whose logits are left in
    /// the state's logits).
    fn mtp_run(&self, state: &mut State, history: &[u32], upto: usize) -> Result<(), ForwardError> {
        let n = state.n_past();
        if state.verify_pending() {
            return Err(ForwardError::VerifyPending);
        }
        if history.len() != n + 1 {
            return Err(ForwardError::Position {
                expected: n + 1,
                got: history.len(),
            });
        }
        let m = self.mtp_state(state)?;
        m.keep(m.kept(history));
        let keep = m.tokens.len();
        // The rows before the anchor's feed the cache only: their passes
        // store K and V (no logits); the anchor's row runs whole.
        let mut p0 = keep;
        while p0 < upto {
            let end = if p0 < n { upto.min(n) } else { upto };
            let t = state.max_batch.min(end - p0);
            let last = p0 + t == n + 1;
            self.mtp_pass(state, &history[p0..p0 + t], p0, last, Hidden::Trunk)?;
            p0 += t;
        }
        let m = self.mtp_state(state)?;
        m.tokens.extend_from_slice(&history[keep..upto.max(keep)]);
        // Entry n + 1 needs h_n, which the next trunk pass logs; h_{n−1}
        // stays for a second draft from the same position.
        m.log.forget_before(upto.saturating_sub(2));
        Ok(())
    }

    /// One chained MTP step: `token` at the cache's next position with the
    /// previous MTP pass's output as its hidden input. Returns its logits.
    pub fn mtp_step<'s>(
        &self,
        state: &'s mut State,
        token: u32,
    ) -> Result<&'s [f32], ForwardError> {
        let m = self.mtp_state(state)?;
        let pos = m.base + m.kv.len();
        if m.kv.len() + 1 > m.kv.n_ctx() {
            return Err(ForwardError::ContextFull {
                need: m.kv.len() + 1,
                n_ctx: m.kv.n_ctx(),
            });
        }
        self.mtp_pass(state, &[token], pos, true, Hidden::Own)?;
        self.mtp_state(state)?.tokens.push(token);
        Ok(&state.scratch.logits[..self.n_vocab()])
    }

    /// Keeps the first `n` entries of the MTP cache (drops chained steps).
    pub fn mtp_truncate(&self, state: &mut State, n: usize) {
        if let Some(m) = state.mtp.as_mut() {
            m.keep(n);
        }
    }

    fn mtp_state<'s>(&self, state: &'s mut State) -> Result<&'s mut MtpState, ForwardError> {
        if self.weights.mtp.is_none() {
            return Err(ForwardError::NoMtp);
        }
        state.mtp.as_mut().ok_or(ForwardError::NoMtp)
    }

    /// One MTP pass over `tokens` at `pos0..` (at most one batch) with
    /// `hidden` inputs; logits of the last row when `logits`.
    fn mtp_pass(
        &self,
        state: &mut State,
        tokens: &[u32],
        pos0: usize,
        logits: bool,
        hidden: Hidden,
    ) -> Result<(), ForwardError> {
        let v = self.n_vocab();
        if let Some(&id) = tokens.iter().find(|&&id| id as usize >= v) {
            return Err(ForwardError::Token { id, n_vocab: v });
        }
        let (t, e) = (tokens.len(), self.config.n_embd);
        let m = self.mtp_state(state)?;
        let row0 = pos0 - m.base;
        for (i, dst) in m.hidden[..t * e].chunks_exact_mut(e).enumerate() {
            let src = match hidden {
                Hidden::Trunk => (pos0 + i).checked_sub(1).and_then(|q| m.log.get(q)),
                Hidden::Own => Some(&m.out[..]),
            };
            match src {
                Some(row) => dst.copy_from_slice(row),
                None => dst.fill(0.0),
            }
        }
        let s = &mut state.scratch;
        s.moe.pool = 0;
        if logits {
            set_head_rows(&mut s.head_rows, LogitsFor::Last, t, 0, t);
            if s.logits.len() < v {
                s.logits.resize(v, 0.0);
            }
        } else {
            s.head_rows.clear();
        }
        // A catch-up over many rows may take the prompt kernels; a drafting
        // step keeps decoding's numerics.
        let modes = [self.order.mode(t > 1), self.order.mode(false)];
        let mut group = Group::mtp(state, tokens, row0, modes);
        self.net().run(std::slice::from_mut(&mut group));
        if let Some(layer) = group.first_bad {
            return Err(ForwardError::NonFinite { layer });
        }
        if logits {
            let m = state.mtp.as_mut().expect("checked above");
            m.out.copy_from_slice(&state.scratch.head_in[..e]);
            self.check_finite(state, 1, None)?;
        }
        Ok(())
    }
}

/// Where an MTP pass's hidden inputs come from.
#[derive(Clone, Copy)]
enum Hidden {
    /// Row p takes the trunk's `h_{p−1}` from the log (zeros where absent).
    Trunk,
    /// The previous MTP pass's output `g` (a chained draft).
    Own,
}
