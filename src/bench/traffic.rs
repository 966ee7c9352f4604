//! Bytes a decode step touches, from the weights and the routers' actual
//! choices: what tg t/s should be compared against the read bandwidth with.
//!
//! Per token:
//! ```text
//! experts  Σ_layer Σ_e count[layer][e] · (gate+up+down bytes of one expert) / tokens
//! dense    per layer: mixer matrices + router + shared expert (+ its gate row)
//! head     output matrix (all vocab rows) + one token_embd row
//! state    GDN: conv window + S, f32, read (and written back)
//!          attention: K and V rows of every cached position, read
//! ```
//! Small f32 vectors (norms, conv taps, biases) are left out: a few KiB.

use crate::model::weights::{GateUp, MixerWeights};
use crate::model::{Model, State};

/// Average bytes per decoded token, by kind.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Traffic {
    pub experts: f64,
    pub dense: f64,
    pub head: f64,
    pub recurrent: f64,
    pub kv: f64,
    /// Bytes of the distinct experts touched over the whole run (the working set).
    pub experts_union: f64,
}

impl Traffic {
    pub fn total(&self) -> f64 {
        self.experts + self.dense + self.head + self.recurrent + self.kv
    }
}

/// Bytes of one routed expert (gate, up, down) of layer `il`.
pub fn expert_bytes(model: &Model, il: usize) -> usize {
    let f = &model.weights.layers[il].ffn;
    let gu = match f.gate_up {
        GateUp::Split { gate, up } => gate.expert(0).bytes() + up.expert(0).bytes(),
        GateUp::Fused(gu) => gu.expert(0).bytes(),
    };
    gu + f.down.expert(0).bytes()
}

/// Bytes of layer `il`'s matrices that every token reads.
pub fn dense_bytes(model: &Model, il: usize) -> usize {
    let l = &model.weights.layers[il];
    let mixer = match &l.mixer {
        MixerWeights::DeltaNet(w) => {
            w.qkv.bytes() + w.gate.bytes() + w.beta.bytes() + w.alpha.bytes() + w.out.bytes()
        }
        MixerWeights::Attention(w) => w.q.bytes() + w.k.bytes() + w.v.bytes() + w.o.bytes(),
    };
    let f = &l.ffn;
    mixer
        + f.router.bytes()
        + f.shexp_gate_inp.bytes()
        + f.shexp_gate.bytes()
        + f.shexp_up.bytes()
        + f.shexp_down.bytes()
}

/// Traffic of a decode run of `n_tokens` single-token steps at positions
/// `pos0 ..`, from the expert counters in `state.stats` (cleared before the run).
pub fn decode_traffic(model: &Model, state: &State, pos0: usize, n_tokens: usize) -> Traffic {
    let cfg = &model.config;
    let n = n_tokens.max(1) as f64;
    let mut t = Traffic::default();
    for il in 0..cfg.n_layer {
        let eb = expert_bytes(model, il) as f64;
        let counts = state.stats.layer_counts(il);
        let picked: u64 = counts.iter().sum();
        let distinct = counts.iter().filter(|&&c| c > 0).count();
        t.experts += picked as f64 * eb / n;
        t.experts_union += distinct as f64 * eb;
        t.dense += dense_bytes(model, il) as f64;
    }
    let w = &model.weights;
    t.head = (w.output.bytes() + w.token_embd.bytes() / w.token_embd.n_out.max(1)) as f64;
    t.recurrent = state
        .recurrent
        .iter()
        .map(|r| (r.conv.len() + r.ssm.len()) * 4)
        .sum::<usize>() as f64;
    // Step i attends over positions 0..=pos0+i.
    let row = kv_row_bytes(model, state) as f64;
    let positions: f64 = (0..n_tokens).map(|i| (pos0 + i + 1) as f64).sum();
    t.kv = cfg.n_attention_layers() as f64 * row * positions / n;
    t
}

/// Bytes of K plus V of one position in one attention layer.
fn kv_row_bytes(model: &Model, state: &State) -> usize {
    let cfg = &model.config;
    let hb = |ty: kernels::GgmlType| ty.row_bytes(cfg.head_dim as u64).unwrap_or(0) as usize;
    cfg.n_head_kv * (hb(state.kv.ty_k) + hb(state.kv.ty_v))
}
