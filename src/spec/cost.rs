//! The rollback stash of a verify pass (docs/DESIGN.md §5), by the numbers.
//!
//! Per GDN layer and verify position the stash holds the pre-conv `mixed`
//! vector (channels f32), the post-conv k and v (channels − n_k·d f32), and
//! g and β (n_v f32 each); plus one scratch copy of a layer's state, reused
//! layer after layer. See `model::recurrent::GdnStash`.

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::tiny::{a3b_layer_config, tiny_config, TinyModel};
    use crate::model::{LogitsFor, StateOptions};

    #[test]
    fn the_formula_counts_what_a_verify_pass_actually_stashes() {
        let tm = TinyModel::random(tiny_config(4, 2), 1);
        let model = tm.model();
        let mut o = StateOptions::new(32);
        o.max_batch = 16;
        let mut st = model.new_state(o).unwrap();
        model.forward(&mut st, &[1, 2], 0, LogitsFor::Last).unwrap();
        let toks: Vec<u32> = (0..16).collect();
        model
            .forward_verify(&mut st, &toks, 2, LogitsFor::All)
            .unwrap();
        assert_eq!(st.verify_stash_bytes(), stash_bytes(&tm.cfg, 16));
    }

    #[test]
    fn the_full_size_stash_for_16_verify_positions_is_under_32_mib() {
        let cfg = a3b_layer_config(40, 256);
        assert_eq!(cfg.n_deltanet_layers(), 30);
        let b = stash_bytes(&cfg, 16);
        eprintln!(
            "stash at 35B-A3B dims, 16 positions: {b} bytes = {:.2} MiB",
            b as f64 / (1 << 20) as f64
        );
        assert!(b < 32 << 20, "{b}");
        // docs/DESIGN.md §5's estimate: ≈ 27 MiB of per-position stash, + one 2 MiB state.
        let per_pos = b - stash_bytes(&cfg, 0);
        assert!((26 << 20..28 << 20).contains(&per_pos), "{per_pos}");
    }
}
