//! The recurrent state of the Gated DeltaNet layers (docs/DESIGN.md §2.5), kept apart
//! from the KV cache, and what a verify pass stashes of it (docs/DESIGN.md §5).
//!
//! GDN layer state (f32):
//! - `conv`: the last `conv_kernel − 1` pre-conv `mixed` vectors, oldest first,
//!   `[kernel−1][channels]` (zeros at sequence start);
//! - `ssm`: per value head h, `S_h ∈ ℝ^{d_k×d_v}` stored transposed as
//!   `ssm[h][j][i] = S_h[i][j]` (row j = value dim j over key dims), the layout
//!   llama.cpp uses.
//!
//! Stash of a verify pass, per GDN layer and position: the pre-conv `mixed`
//! row (for the conv window), the post-conv L2-normalised k and v, g and β.
//! `deltanet.rs` records it; `verify.rs` replays it into the state.

use super::config::ModelConfig;

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

/// What one GDN layer's recurrence consumed during a verify pass.
#[derive(Debug, Default)]
pub struct GdnStash {
    /// `[T][channels]` pre-conv projections.
    pub(super) mixed: Vec<f32>,
    /// `[T][channels − n_k·d]` post-conv k (normalised) and v.
    pub(super) kv: Vec<f32>,
    /// `[T][n_v]` decay g and β.
    pub(super) gate: Vec<f32>,
    pub(super) beta: Vec<f32>,
}

impl GdnStash {
    /// Copies the first `t` positions of a layer's scratch.
    pub(crate) fn record(
        &mut self,
        cfg: &ModelConfig,
        t: usize,
        mixed: &[f32],
        conv: &[f32],
        gate: &[f32],
        beta: &[f32],
    ) {
        let ch = cfg.ssm_conv_channels();
        let q_w = cfg.ssm_n_k_heads * cfg.ssm_head_dim;
        let hv = cfg.ssm_n_v_heads;
        let kv_w = ch - q_w;
        grow(&mut self.mixed, t * ch);
        grow(&mut self.kv, t * kv_w);
        grow(&mut self.gate, t * hv);
        grow(&mut self.beta, t * hv);
        self.mixed[..t * ch].copy_from_slice(&mixed[..t * ch]);
        for (dst, src) in self.kv[..t * kv_w]
            .chunks_exact_mut(kv_w)
            .zip(conv[..t * ch].chunks_exact(ch))
        {
            dst.copy_from_slice(&src[q_w..]);
        }
        self.gate[..t * hv].copy_from_slice(&gate[..t * hv]);
        self.beta[..t * hv].copy_from_slice(&beta[..t * hv]);
    }
}

fn grow(v: &mut Vec<f32>, n: usize) {
    if v.len() < n {
        v.resize(n, 0.0);
    }
}

/// The stash of a pending verify pass: every GDN layer, plus the scratch
/// state the pass ran on.
#[derive(Debug)]
pub struct VerifyStash {
    pub(crate) layers: Vec<GdnStash>,
    pub(crate) scratch_state: DeltaNetState,
    /// `(pos0, n)` of the pending pass, if any.
    pub(crate) pending: Option<(usize, usize)>,
}

impl VerifyStash {
    /// Bytes held: every layer's stash plus the scratch state.
    pub fn bytes(&self) -> usize {
        let stash: usize = self
            .layers
            .iter()
            .map(|l| l.mixed.len() + l.kv.len() + l.gate.len() + l.beta.len())
            .sum();
        (stash + self.scratch_state.conv.len() + self.scratch_state.ssm.len()) * 4
    }

    pub fn new(cfg: &ModelConfig) -> VerifyStash {
        VerifyStash {
            layers: (0..cfg.n_deltanet_layers())
                .map(|_| GdnStash::default())
                .collect(),
            scratch_state: DeltaNetState::new(cfg),
            pending: None,
        }
    }
}
