//! MTP drafting (docs/DESIGN.md §4.5): the model's multi-token-prediction
//! block proposes the drafts. The first comes from bringing the block's
//! cache up to the anchor (`Model::mtp_sync`), each further one from a
//! chained step on the block's own output (`Model::mtp_step`); the chained
//! positions are dropped before the verify pass, so the block's cache only
//! ever holds the committed tokens.

use crate::model::ForwardError;

use super::draft::{Draft, DraftCtx, Drafter};

/// Drafts through the MTP block (a state made with `StateOptions::mtp`).
#[derive(Debug, Default)]
pub struct MtpDrafter;

impl Drafter for MtpDrafter {
    fn draft(&mut self, ctx: DraftCtx) -> Result<Draft, ForwardError> {
        let mut out = Draft::default();
        if ctx.n_max == 0 {
            return Ok(out);
        }
        let (model, state) = (ctx.model, ctx.state);
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
        result.map(|()| out)
    }
}
