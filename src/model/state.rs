//! Per-sequence state (docs/DESIGN.md §2.5): the KV cache of the attention layers and,
//! apart from it, the recurrent state of the Gated DeltaNet layers
//! (`recurrent.rs`), plus the scratch and counters of a run.
//!
//! This file sits above the mixers (`Scratch` holds each mixer's scratch) and
//! below the passes (`forward.rs`, `diffusion.rs`, `verify.rs`'s commit); the
//! types the mixers themselves need (`DeltaNetState`, the verify stash) live
//! in `recurrent.rs`, under them.

use kernels::GgmlType;

use super::attention::AttentionScratch;
use super::config::{LayerKind, ModelConfig};
use super::deltanet::DeltaNetScratch;
use super::kv::KvCache;
use super::linear::MatScratch;
use super::moe::MoeScratch;
use super::mtp::MtpState;
use super::observe::{Observer, Seen};
use super::recurrent::VerifyStash;
use super::StateError;

pub use super::recurrent::DeltaNetState;

/// Per-layer timings and expert-routing counters, for the UI.
#[derive(Clone, Debug)]
pub struct Stats {
    /// Take `Instant` timings (off: no clock reads at all).
    pub timing: bool,
    /// Nanoseconds in each layer's mixer (GDN or attention) and MoE block.
    pub mixer_ns: Vec<u64>,
    pub moe_ns: Vec<u64>,
    /// Nanoseconds in the output head (norm + logits).
    pub head_ns: u64,
    /// Tokens processed since the last `clear`.
    pub tokens: u64,
    /// `[layer][expert]` times each expert was selected.
    pub expert_counts: Vec<u64>,
    /// `[layer][k]` experts of the last processed token, descending weight.
    pub last_experts: Vec<u32>,
    n_expert: usize,
    k: usize,
}

impl Stats {
    pub fn new(cfg: &ModelConfig) -> Stats {
        Stats {
            timing: false,
            mixer_ns: vec![0; cfg.n_layer],
            moe_ns: vec![0; cfg.n_layer],
            head_ns: 0,
            tokens: 0,
            expert_counts: vec![0; cfg.n_layer * cfg.n_expert],
            last_experts: vec![0; cfg.n_layer * cfg.n_expert_used],
            n_expert: cfg.n_expert,
            k: cfg.n_expert_used,
        }
    }

    /// Zeroes every counter (keeps `timing`).
    pub fn clear(&mut self) {
        self.mixer_ns.fill(0);
        self.moe_ns.fill(0);
        self.head_ns = 0;
        self.tokens = 0;
        self.expert_counts.fill(0);
        self.last_experts.fill(0);
    }

    /// Selection counts of layer `il`, one per expert.
    pub fn layer_counts(&self, il: usize) -> &[u64] {
        &self.expert_counts[il * self.n_expert..(il + 1) * self.n_expert]
    }

    /// Counts the experts `sel` chose for layer `il` (`[T][k]`, the last
    /// token's last).
    fn record(&mut self, il: usize, sel: &[usize]) {
        let (ne, k) = (self.n_expert, self.k);
        for &x in sel {
            self.expert_counts[il * ne + x] += 1;
        }
        let last = &sel[sel.len() - k..];
        for (d, &s) in self.last_experts[il * k..(il + 1) * k].iter_mut().zip(last) {
            *d = s as u32;
        }
    }
}

/// The statistics watch their sequence's passes: the experts each layer
/// picked (`ffn_moe_topk`) and, with `timing`, the time of each layer's
/// `mixer` and `moe` and of the `head`.
impl Observer for Stats {
    fn kind(&self) -> &'static str {
        "stats"
    }

    fn see(&mut self, name: &str, il: isize, _rows: usize, seen: &Seen) {
        let layer = usize::try_from(il).ok();
        match (name, *seen, layer) {
            ("ffn_moe_topk", Seen::Experts(sel), Some(il)) if !sel.is_empty() => {
                self.record(il, sel)
            }
            ("mixer", Seen::Time(ns), Some(il)) => self.mixer_ns[il] += ns,
            ("moe", Seen::Time(ns), Some(il)) => self.moe_ns[il] += ns,
            ("head", Seen::Time(ns), _) => self.head_ns += ns,
            _ => {}
        }
    }

    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }
}

/// Run scratch, allocated once per state for `max_batch` tokens.
#[derive(Debug)]
pub struct Scratch {
    /// `[T][n_embd]` residual stream, normed input, block output.
    pub(crate) x: Vec<f32>,
    pub(crate) xn: Vec<f32>,
    pub(crate) y: Vec<f32>,
    pub(crate) lin: MatScratch,
    pub(crate) gdn: DeltaNetScratch,
    pub(crate) attn: AttentionScratch,
    pub(crate) moe: MoeScratch,
    /// `[≤T][n_embd]` normed rows that need logits and their products.
    pub(crate) head_in: Vec<f32>,
    pub(crate) head_out: Vec<f32>,
    /// `(output row, batch row)` for the current batch.
    pub(crate) head_rows: Vec<(usize, usize)>,
    pub(crate) logits: Vec<f32>,
}

impl Scratch {
    pub fn new(cfg: &ModelConfig, n_vocab: usize, t: usize, n_ctx: usize) -> Scratch {
        let e = cfg.n_embd;
        let max_in = e
            .max(cfg.ssm_inner())
            .max(cfg.n_head * cfg.head_dim)
            .max(cfg.n_ff_exp)
            .max(cfg.n_ff_shexp);
        Scratch {
            x: vec![0.0; t * e],
            xn: vec![0.0; t * e],
            y: vec![0.0; t * e],
            lin: MatScratch::new(t, max_in),
            gdn: DeltaNetScratch::new(cfg, t),
            attn: AttentionScratch::new(cfg, t, n_ctx),
            moe: MoeScratch::new(cfg, t),
            head_in: vec![0.0; t * e],
            head_out: vec![0.0; n_vocab],
            head_rows: Vec::with_capacity(t),
            logits: vec![0.0; n_vocab],
        }
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
    /// Keep an MTP cache and log the trunk's hidden rows for it
    /// (docs/DESIGN.md §2.7; `Model::new_state` sets it when the model's
    /// `mtp` is on and it has the block).
    pub mtp: bool,
}

impl StateOptions {
    pub fn new(n_ctx: usize) -> StateOptions {
        StateOptions {
            n_ctx,
            max_batch: 64,
            type_k: GgmlType::F32,
            type_v: GgmlType::F32,
            mtp: false,
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
    /// The MTP block's cache and inputs (`StateOptions::mtp`).
    pub mtp: Option<MtpState>,
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
        Ok(State {
            kv: KvCache::for_state(n_attn, cfg, &opts)?,
            recurrent: (0..n_gdn).map(|_| DeltaNetState::new(cfg)).collect(),
            stats: Stats::new(cfg),
            slots,
            scratch: Scratch::new(cfg, n_vocab, opts.max_batch, opts.n_ctx),
            max_batch: opts.max_batch,
            verify: None,
            mtp: match opts.mtp {
                true => Some(MtpState::new(cfg, &opts)?),
                false => None,
            },
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
        let mtp = match opts.mtp {
            true => MtpState::bytes_needed(cfg, opts),
            false => 0,
        };
        kv + recurrent + scratch + mtp
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
        if let Some(m) = &mut self.mtp {
            m.reset();
        }
    }
}
