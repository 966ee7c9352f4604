//! Self-speculation as an engine `Step` (`clover run --spec-type draft-self`,
//! the chat): each step is one `Speculator::iterate` on the session's model and
//! state, drafting no more than the loop can still emit, then the committed
//! tokens (the anchor and the accepted drafts) are recorded with
//! `Session::note_committed`.

use std::time::Instant;

use crate::spec::{Drafter, SpecConfig, Speculator};

use super::generate::{Step, StepIo, StepStats};
use super::EngineError;

/// A `Step` that drafts with `drafter` and verifies in one batched pass.
pub struct SpecStep<D: Drafter + Send> {
    pub spec: Speculator,
    pub drafter: D,
}

impl<D: Drafter + Send> SpecStep<D> {
    pub fn new(cfg: SpecConfig, drafter: D) -> SpecStep<D> {
        SpecStep {
            spec: Speculator::new(cfg),
            drafter,
        }
    }
}

impl<D: Drafter + Send> Step for SpecStep<D> {
    fn step(&mut self, io: StepIo) -> Result<StepStats, EngineError> {
        self.round(io, true)
    }
}

impl<D: Drafter + Send> SpecStep<D> {
    /// One round; `draft` false makes it a plain step (a timed probe).
    pub fn round(&mut self, io: StepIo, draft: bool) -> Result<StepStats, EngineError> {
        let StepIo {
            session,
            sampler,
            history,
            remaining,
            out,
        } = io;
        let t0 = Instant::now();
        let before = (
            self.spec.stats.drafts_proposed,
            self.spec.stats.drafts_accepted,
        );
        let passes = self.spec.stats.verify_passes + self.spec.stats.plain_passes;
        let (spec, drafter) = (&mut self.spec, &mut self.drafter);
        let remaining = remaining.min(spec.cfg.n_predict).max(1);
        session.with_model(|model, state| {
            spec.iterate(
                model, state, sampler, drafter, history, remaining, draft, out,
            )
        })?;
        let anchor = *history.last().ok_or(EngineError::EmptyPrompt)?;
        let mut committed = vec![anchor];
        committed.extend_from_slice(&out[..out.len() - 1]);
        session.note_committed(&committed)?;
        // The loop's totals (what `generate` sets at its end): tokens and
        // time of the steps, for tokens per forward and the speed-up.
        let st = &mut self.spec.stats;
        st.tokens_emitted += out.len() as u64;
        st.total_ns += t0.elapsed().as_nanos() as u64;
        let st = &self.spec.stats;
        spec_stats(
            t0,
            st.drafts_proposed - before.0,
            st.drafts_accepted - before.1,
            (st.verify_passes + st.plain_passes - passes) as usize,
        )
    }
}

fn spec_stats(
    t0: Instant,
    drafted: u64,
    accepted: u64,
    runs: usize,
) -> Result<StepStats, EngineError> {
    Ok(StepStats {
        eval_ms: t0.elapsed().as_secs_f64() * 1e3,
        eval_runs: runs,
        drafted: drafted as usize,
        accepted: accepted as usize,
        ..StepStats::default()
    })
}
