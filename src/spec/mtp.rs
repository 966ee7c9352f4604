//! MTP drafting (docs/DESIGN.md §4.5): the model's multi-token-prediction
//! block proposes the drafts. The first comes from bringing the block's
//! cache up to the anchor (`Model::mtp_sync`), each further one from a
//! chained step on the block's own output (`Model::mtp_step`); the chained
//! positions are dropped before the verify pass, so the block's cache only
//! ever holds committed tokens.
//!
//! After rounds decoded plainly the cache lags by those positions. Catching
//! up on them is a pass of its own, over the newest [`CATCH_UP_WINDOW`] of
//! them at most, timed apart (`take_catch_up_ns`): the adaptive controller
//! prices a draft at what drafting costs round after round (the previous
//! round's tokens and the anchor), not at the lag.

use std::time::Instant;

use crate::model::ForwardError;

use super::draft::{Draft, DraftCtx, Drafter};

/// The most entries a catch-up runs: after a longer plain streak the
/// block's cache starts again this far behind the round's own entries
/// (`Model::mtp_skip`), so catching up costs at most this many rows
/// however long the streak, and a draft still sees the recent text.
pub const CATCH_UP_WINDOW: usize = 64;

/// Drafts through the MTP block (a state made with `StateOptions::mtp`).
#[derive(Debug, Default)]
pub struct MtpDrafter {
    /// Drafts proposed by the previous call: the round after it committed
    /// at most that many plus one positions.
    last: usize,
    catch_up_ns: u64,
}

impl Drafter for MtpDrafter {
    fn draft(&mut self, ctx: DraftCtx) -> Result<Draft, ForwardError> {
        let mut out = Draft::default();
        if ctx.n_max == 0 {
            return Ok(out);
        }
        let (model, state) = (ctx.model, ctx.state);
        // A round's own share: the previous round's drafts, its last token
        // and the anchor. Anything further behind is catch-up.
        let behind = model.mtp_behind(state, ctx.history);
        let own = self.last + 2;
        if behind > own {
            let t0 = Instant::now();
            // Only the newest CATCH_UP_WINDOW of the lagging entries are run.
            let lag = behind - own;
            let skip = lag.saturating_sub(CATCH_UP_WINDOW);
            model.mtp_skip(state, ctx.history, skip)?;
            model.mtp_catch_up(state, ctx.history, lag - skip)?;
            self.catch_up_ns += t0.elapsed().as_nanos() as u64;
        }
        let result = (|| {
            let mut logits = model.mtp_sync(state, ctx.history)?;
            loop {
                if !out.pick(logits, ctx.sampler, ctx.history, ctx.sampling, ctx.p_min) {
                    break;
                }
                if out.tokens.len() == ctx.n_max {
                    break;
                }
                let last = *out.tokens.last().expect("picked above");
                logits = model.mtp_step(state, last)?;
            }
            Ok(())
        })();
        model.mtp_truncate(state, ctx.pos + 1);
        self.last = out.tokens.len();
        result.map(|()| out)
    }

    fn take_catch_up_ns(&mut self) -> u64 {
        std::mem::take(&mut self.catch_up_ns)
    }
}
