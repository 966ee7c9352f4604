//! The rollback stash of a verify pass (DESIGN §5), by the numbers.
//!
//! Per GDN layer and verify position the stash holds the pre-conv `mixed`
//! vector (channels f32), the post-conv k and v (channels − n_k·d f32), and
//! g and β (n_v f32 each); plus one scratch copy of a layer's state, reused
//! layer after layer. See `model::verify::GdnStash`.

use crate::model::ModelConfig;

/// Bytes the stash of a verify pass over `positions` tokens holds.
pub fn stash_bytes(cfg: &ModelConfig, positions: usize) -> usize {
    let ch = cfg.ssm_conv_channels();
    let kv = ch - cfg.ssm_n_k_heads * cfg.ssm_head_dim;
    let per_pos = (ch + kv + 2 * cfg.ssm_n_v_heads) * 4;
    let d = cfg.ssm_head_dim;
    let scratch = (cfg.ssm_conv_kernel - 1) * ch * 4 + cfg.ssm_n_v_heads * d * d * 4;
    cfg.n_deltanet_layers() * positions * per_pos + scratch
}
