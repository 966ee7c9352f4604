//! Per-sequence state (DESIGN §2.5): the KV cache of the attention layers and,
//! apart from it, the recurrent state of the Gated DeltaNet layers, plus the
//! scratch and counters of a run.
//!
//! GDN layer state (f32):
//! - `conv`: the last `conv_kernel − 1` pre-conv `mixed` vectors, oldest first,
//!   `[kernel−1][channels]` (zeros at sequence start);
//! - `ssm`: per value head h, `S_h ∈ ℝ^{d_k×d_v}` stored transposed as
//!   `ssm[h][j][i] = S_h[i][j]` (row j = value dim j over key dims), the layout
//!   llama.cpp uses.

use kernels::GgmlType;

use super::config::{LayerKind, ModelConfig};
use super::forward::{Scratch, Stats};
use super::kv::KvCache;
use super::verify::VerifyStash;
use super::StateError;

/// One GDN layer's recurrent state.
#[derive(Clone, Debug, PartialEq)]
pub struct DeltaNetState {
    /// `[kernel−1][channels]`, oldest first.
    pub conv: Vec<f32>,
    /// `[n_v_heads][d_v][d_k]`.
    pub ssm: Vec<f32>,
}

impl DeltaNetState {
    pub fn new(cfg: &ModelConfig) -> DeltaNetState {
        let d = cfg.ssm_head_dim;
        DeltaNetState {
            conv: vec![0.0; (cfg.ssm_conv_kernel - 1) * cfg.ssm_conv_channels()],
            ssm: vec![0.0; cfg.ssm_n_v_heads * d * d],
        }
    }

    pub fn reset(&mut self) {
        self.conv.fill(0.0);
        self.ssm.fill(0.0);
    }
}

/// Options of a sequence's state.
#[derive(Clone, Copy, Debug)]
pub struct StateOptions {
    /// Positions the KV cache holds.
    pub n_ctx: usize,
    /// Most tokens processed in one batch (longer inputs are split).
    pub max_batch: usize,
    pub type_k: GgmlType,
    pub type_v: GgmlType,
}

impl StateOptions {
    pub fn new(n_ctx: usize) -> StateOptions {
        StateOptions {
            n_ctx,
            max_batch: 64,
            type_k: GgmlType::F32,
            type_v: GgmlType::F32,
        }
    }
}

/// Where a layer's state lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayerSlot {
    /// Index into `State::recurrent`.
    DeltaNet(usize),
    /// Layer index of the KV cache.
    Attention(usize),
}

/// Everything that changes while a sequence runs.
#[derive(Debug)]
pub struct State {
    pub kv: KvCache,
    pub recurrent: Vec<DeltaNetState>,
    pub stats: Stats,
    pub(crate) slots: Vec<LayerSlot>,
    pub(crate) scratch: Scratch,
    pub(crate) max_batch: usize,
    /// The stash of verify passes, created by the first one.
    pub(crate) verify: Option<VerifyStash>,
}

impl State {
    pub fn new(cfg: &ModelConfig, n_vocab: usize, opts: StateOptions) -> Result<State, StateError> {
        if opts.n_ctx == 0 || opts.max_batch == 0 {
            return Err(StateError::Size(
                "n_ctx and max_batch must be at least 1".into(),
            ));
        }
        let mut slots = Vec::with_capacity(cfg.n_layer);
        let (mut n_attn, mut n_gdn) = (0, 0);
        for kind in &cfg.layer_kinds {
            match kind {
                LayerKind::Attention => {
                    slots.push(LayerSlot::Attention(n_attn));
                    n_attn += 1;
                }
                LayerKind::DeltaNet => {
                    slots.push(LayerSlot::DeltaNet(n_gdn));
                    n_gdn += 1;
                }
            }
        }
        let kv = KvCache::new(
            n_attn,
            opts.n_ctx,
            cfg.n_head_kv,
            cfg.head_dim,
            opts.type_k,
            opts.type_v,
        )?;
        Ok(State {
            kv,
            recurrent: (0..n_gdn).map(|_| DeltaNetState::new(cfg)).collect(),
            stats: Stats::new(cfg),
            slots,
            scratch: Scratch::new(cfg, n_vocab, opts.max_batch, opts.n_ctx),
            max_batch: opts.max_batch,
            verify: None,
        })
    }

    /// Bytes [`State::new`] allocates for `opts` (KV cache, recurrent states,
    /// the largest scratch buffers), in u128 so that no context size overflows:
    /// checked against the machine's memory before anything is allocated.
    pub fn bytes_needed(cfg: &ModelConfig, n_vocab: usize, opts: &StateOptions) -> u128 {
        let n = |x: usize| x as u128;
        let n_attn = cfg
            .layer_kinds
            .iter()
            .filter(|k| matches!(k, LayerKind::Attention))
            .count();
        let n_gdn = cfg.layer_kinds.len() - n_attn;
        let head = |ty: GgmlType| n(ty.row_bytes(cfg.head_dim as u64).unwrap_or(0) as usize);
        let kv =
            n(n_attn) * n(opts.n_ctx) * n(cfg.n_head_kv) * (head(opts.type_k) + head(opts.type_v));
        let d = n(cfg.ssm_head_dim);
        let recurrent = n(n_gdn)
            * 4
            * (n(cfg.ssm_conv_kernel.saturating_sub(1)) * n(cfg.ssm_conv_channels())
                + n(cfg.ssm_n_v_heads) * d * d);
        let t = n(opts.max_batch.min(opts.n_ctx));
        let width = n(cfg.n_embd)
            .max(n(cfg.ssm_inner()))
            .max(n(cfg.n_head * cfg.head_dim * 2))
            .max(n(cfg.ssm_conv_channels()));
        // Activations of a batch (a generous count of row buffers), the
        // attention scores over the context, and the logits.
        let scratch = 4 * (t * width * 16 + n(cfg.n_head) * n(opts.n_ctx) + 2 * n(n_vocab));
        kv + recurrent + scratch
    }

    /// Whether a verify pass awaits `Model::commit_verify`.
    pub fn verify_pending(&self) -> bool {
        self.verify.as_ref().is_some_and(|v| v.pending.is_some())
    }

    /// Bytes of the verify stash (0 before the first verify pass).
    pub fn verify_stash_bytes(&self) -> usize {
        self.verify.as_ref().map_or(0, |v| v.bytes())
    }

    /// Positions processed so far.
    pub fn n_past(&self) -> usize {
        self.kv.len()
    }

    /// Back to an empty sequence: KV cache emptied, recurrent state zeroed.
    pub fn reset(&mut self) {
        self.kv.clear();
        if let Some(v) = &mut self.verify {
            v.pending = None;
        }
        for r in &mut self.recurrent {
            r.reset();
        }
    }
}
