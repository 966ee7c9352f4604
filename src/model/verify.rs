//! Verify passes that never write the GDN states, and committing a prefix of
//! them (DESIGN §5).
//!
//! `Model::forward_verify` runs `[t_n, d_1 … d_D]` like `forward`, except that
//! each GDN layer runs on a scratch copy of its state (one buffer reused layer
//! after layer) and stashes, per verify position:
//! - the pre-conv `mixed` vector (`[T][channels]`), for the conv window;
//! - the post-conv, L2-normalised k and v (`[T][channels − n_k·d]`), g and β.
//!
//! `Model::commit_verify(n_keep)` then replays the delta-rule update over the
//! kept positions only (bit-identical to a plain forward over them), sets the
//! conv windows from the stashed `mixed` rows and truncates the KV cache to
//! `pos0 + n_keep`. Rejected positions cost neither a re-decode nor a copy.

use rayon::prelude::*;

use super::config::ModelConfig;
use super::deltanet::{delta_update, push_window};
use super::state::DeltaNetState;

/// What one GDN layer's recurrence consumed during a verify pass.
#[derive(Debug, Default)]
pub struct GdnStash {
    /// `[T][channels]` pre-conv projections.
    mixed: Vec<f32>,
    /// `[T][channels − n_k·d]` post-conv k (normalised) and v.
    kv: Vec<f32>,
    /// `[T][n_v]` decay g and β.
    gate: Vec<f32>,
    beta: Vec<f32>,
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

    /// Advances `state` over the first `n_keep` stashed positions.
    pub fn advance(&self, cfg: &ModelConfig, state: &mut DeltaNetState, n_keep: usize) {
        let ch = cfg.ssm_conv_channels();
        let (hk, hv, d) = (cfg.ssm_n_k_heads, cfg.ssm_n_v_heads, cfg.ssm_head_dim);
        let kv_w = ch - hk * d;
        // One parallel dispatch per layer: each value head replays all kept
        // positions in order (the same per-head arithmetic as the forward).
        let (kv, gate, beta) = (&self.kv, &self.gate, &self.beta);
        state
            .ssm
            .par_chunks_mut(d * d)
            .enumerate()
            .for_each(|(h, s)| {
                let kh = h % hk;
                for t in 0..n_keep {
                    let row = &kv[t * kv_w..(t + 1) * kv_w];
                    let k = &row[kh * d..(kh + 1) * d];
                    let v = &row[hk * d + h * d..hk * d + (h + 1) * d];
                    delta_update(s, k, v, gate[t * hv + h], beta[t * hv + h]);
                }
            });
        push_window(&mut state.conv, &self.mixed[..n_keep * ch], ch);
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
