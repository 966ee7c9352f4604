//! Verify passes that never write the GDN states, and committing a prefix of
//! them (docs/DESIGN.md §5).
//!
//! `Model::forward_verify` runs `[t_n, d_1 … d_D]` like `forward`, except that
//! each GDN layer runs on a scratch copy of its state (one buffer reused layer
//! after layer) and stashes, per verify position:
//! - the pre-conv `mixed` vector (`[T][channels]`), for the conv window;
//! - the post-conv, L2-normalised k and v (`[T][channels − n_k·d]`), g and β.
//!
//! The stash types (`GdnStash`, `VerifyStash`) and the recording live in
//! `recurrent.rs`, below both this file and `deltanet.rs`.
//!
//! `Model::commit_verify(n_keep)` then replays the delta-rule update over the
//! kept positions only (bit-identical to a plain forward over them), sets the
//! conv windows from the stashed `mixed` rows and truncates the KV cache to
//! `pos0 + n_keep`. Rejected positions cost neither a re-decode nor a copy.

use kernels::sig::ReplayStep;
use kernels::KernelTable;
use rayon::prelude::*;

use super::config::ModelConfig;
use super::deltanet::{delta_update, push_window};
use super::recurrent::{DeltaNetState, GdnStash};

/// Replaying a stash (its data and its recording are in `recurrent.rs`).
impl GdnStash {
    /// Advances `state` over the first `n_keep` stashed positions.
    pub fn advance(
        &self,
        kt: &KernelTable,
        cfg: &ModelConfig,
        state: &mut DeltaNetState,
        n_keep: usize,
    ) {
        advance_all(
            kt,
            cfg,
            std::slice::from_ref(self),
            std::slice::from_mut(state),
            n_keep,
        );
    }

    /// Replays the first `n_keep` positions into value head `h`'s state `s`
    /// (`[d_v][d_k]`), with the same per-head arithmetic as the forward
    /// (`deltanet::delta_update`), compiled for AVX2 where the CPU has it.
    fn replay_head(
        &self,
        kt: &KernelTable,
        cfg: &ModelConfig,
        h: usize,
        s: &mut [f32],
        n_keep: usize,
    ) {
        // The tier's replay kernel keeps the state rows in registers across
        // the positions (the bits of `delta_update` once per position).
        if let Some(replay) = kt.delta_replay() {
            let (hk, hv, d) = (cfg.ssm_n_k_heads, cfg.ssm_n_v_heads, cfg.ssm_head_dim);
            let kv_w = cfg.ssm_conv_channels() - hk * d;
            let kh = h % hk;
            let step = |t: usize| {
                let row = &self.kv[t * kv_w..(t + 1) * kv_w];
                ReplayStep {
                    k: &row[kh * d..(kh + 1) * d],
                    v: &row[hk * d + h * d..hk * d + (h + 1) * d],
                    q: &[],
                    decay: self.gate[t * hv + h].exp(),
                    beta: self.beta[t * hv + h],
                }
            };
            const CHUNK: usize = 16;
            let mut done = 0;
            while done < n_keep {
                let m = CHUNK.min(n_keep - done);
                let steps: [ReplayStep; CHUNK] = std::array::from_fn(|i| step(done + i.min(m - 1)));
                if !replay(s, &steps[..m]) {
                    // Every position has the same shape: refused at once or never.
                    assert_eq!(done, 0, "delta replay refused a later chunk");
                    break;
                }
                done += m;
            }
            if done == n_keep {
                return;
            }
        }
        let head = HeadReplay {
            kt,
            stash: self,
            cfg,
            h,
            n_keep,
        };
        #[cfg(target_arch = "x86_64")]
        if kernels::cpu::has_avx2() {
            // SAFETY: the CPU supports AVX2, checked just above.
            unsafe { replay_head_avx2(&head, s) };
            return;
        }
        replay_head_body(&head, s);
    }
}

/// `replay_head`'s body. The arithmetic is element-wise IEEE mul and add in
/// a fixed order (no fused multiply-add: Rust never contracts, and FMA is
/// not enabled), so wider vectors give bit-identical states: the replay
/// stays equal to the plain forward's recurrence (compiled for the
/// baseline ISA), only faster.
#[inline(always)]
fn replay_head_body(r: &HeadReplay, s: &mut [f32]) {
    let HeadReplay {
        kt,
        stash,
        cfg,
        h,
        n_keep,
    } = *r;
    let (hk, hv, d) = (cfg.ssm_n_k_heads, cfg.ssm_n_v_heads, cfg.ssm_head_dim);
    let kv_w = cfg.ssm_conv_channels() - hk * d;
    let kh = h % hk;
    for t in 0..n_keep {
        let row = &stash.kv[t * kv_w..(t + 1) * kv_w];
        let k = &row[kh * d..(kh + 1) * d];
        let v = &row[hk * d + h * d..hk * d + (h + 1) * d];
        delta_update(kt, s, k, v, stash.gate[t * hv + h], stash.beta[t * hv + h]);
    }
}

/// What [`replay_head_body`] replays: the first `n_keep` stashed positions
/// into value head `h`.
#[derive(Clone, Copy)]
struct HeadReplay<'a> {
    kt: &'a KernelTable,
    stash: &'a GdnStash,
    cfg: &'a ModelConfig,
    h: usize,
    n_keep: usize,
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn replay_head_avx2(r: &HeadReplay, s: &mut [f32]) {
    replay_head_body(r, s);
}

/// Advances every GDN layer's state (`states[i]` from `stashes[i]`) over the
/// first `n_keep` stashed positions, then sets the conv windows.
///
/// One parallel dispatch covers every (layer, value head) pair: the replay
/// per pair is small (16 positions of a d×d state), so a dispatch per layer
/// would add a synchronisation point per layer, and on a loaded machine each
/// one can wait for a descheduled worker.
pub fn advance_all(
    kt: &KernelTable,
    cfg: &ModelConfig,
    stashes: &[GdnStash],
    states: &mut [DeltaNetState],
    n_keep: usize,
) {
    let ch = cfg.ssm_conv_channels();
    let d = cfg.ssm_head_dim;
    let mut jobs: Vec<(&GdnStash, usize, &mut [f32])> =
        Vec::with_capacity(stashes.len() * cfg.ssm_n_v_heads);
    for (stash, st) in stashes.iter().zip(states.iter_mut()) {
        for (h, s) in st.ssm.chunks_exact_mut(d * d).enumerate() {
            jobs.push((stash, h, s));
        }
    }
    jobs.into_par_iter()
        .for_each(|(stash, h, s)| stash.replay_head(kt, cfg, h, s, n_keep));
    for (stash, st) in stashes.iter().zip(states.iter_mut()) {
        push_window(&mut st.conv, &stash.mixed[..n_keep * ch], ch);
    }
}

#[cfg(test)]
#[path = "verify_tests.rs"]
mod tests;
