//! Continuous batching for the slots ([`super::slots`]): a decoding slot's
//! step does not run its own forward pass. It hands its state and token to
//! the [`Batcher`], which waits until every decoding slot has asked (or 5 ms
//! after the first did), then decodes them all in one forward pass and
//! answers each; each step also evaluates one batch of the oldest waiting
//! prompt beside them.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::engine::{EngineError, LoadedModel, PromptEval, Step, StepIo};
use crate::model::State;

/// How long the batcher waits for the decoding slots that have not asked yet.
const GATHER: std::time::Duration = std::time::Duration::from_millis(5);

/// A slot's state, lent to the batcher while the slot waits for the answer.
struct Lent(*mut State);

// SAFETY: the pointer is only dereferenced by the batcher thread while the
// slot thread that owns the state is blocked waiting for the reply (see
// `BatchStep::step` and `BatchPrompt::eval`), so the state is never accessed
// from two threads.
unsafe impl Send for Lent {}

enum BatchReq {
    /// Decode `token` at the state's next position.
    Decode {
        state: Lent,
        token: u32,
        reply: std::sync::mpsc::SyncSender<Result<(), String>>,
    },
    /// Evaluate a logical batch of a prompt, one batch (`max_batch` tokens)
    /// per step, as `Model::forward` would.
    Prompt {
        state: Lent,
        tokens: Vec<u32>,
        logits: bool,
        reply: std::sync::mpsc::SyncSender<Result<(), EngineError>>,
    },
}

/// A decoding request: the lent state, its token, where to answer.
type DecodeReq = (Lent, u32, std::sync::mpsc::SyncSender<Result<(), String>>);

/// A prompt being evaluated step by step.
struct PromptJob {
    state: Lent,
    tokens: Vec<u32>,
    logits: bool,
    /// Tokens evaluated so far, and where the residual stream first held a
    /// NaN or an infinity.
    done: usize,
    first_bad: Option<Option<usize>>,
    reply: std::sync::mpsc::SyncSender<Result<(), EngineError>>,
}

/// Gathers the decoding slots' steps, and the batches of the prompts being
/// evaluated, into batched forward passes: each step decodes every slot that
/// asked and evaluates one batch of the oldest waiting prompt
/// ([`crate::model::Model::step_batch`]).
pub struct Batcher {
    tx: std::sync::mpsc::Sender<BatchReq>,
    /// Slots inside their decoding loop.
    active: Arc<std::sync::atomic::AtomicUsize>,
    /// Batched steps run, the sequences they decoded, and the prompt tokens
    /// they evaluated (for /metrics).
    pub steps: std::sync::atomic::AtomicU64,
    pub rows: std::sync::atomic::AtomicU64,
    pub prompt_rows: std::sync::atomic::AtomicU64,
    /// Steps that decoded and evaluated a prompt batch together.
    pub mixed_steps: std::sync::atomic::AtomicU64,
}

impl Batcher {
    pub(super) fn start(
        model: Arc<LoadedModel>,
        pool: Arc<rayon::ThreadPool>,
        n_slots: usize,
    ) -> std::io::Result<Arc<Batcher>> {
        let (tx, rx) = std::sync::mpsc::channel::<BatchReq>();
        let b = Arc::new(Batcher {
            tx,
            active: Arc::new(std::sync::atomic::AtomicUsize::new(0)),
            steps: std::sync::atomic::AtomicU64::new(0),
            rows: std::sync::atomic::AtomicU64::new(0),
            prompt_rows: std::sync::atomic::AtomicU64::new(0),
            mixed_steps: std::sync::atomic::AtomicU64::new(0),
        });
        let me = Arc::clone(&b);
        std::thread::Builder::new()
            .name("clover-batcher".into())
            .spawn(move || me.run(&model, &pool, n_slots, rx))?;
        Ok(b)
    }

    /// The batcher thread: gathers, steps, answers, until every sender is
    /// gone.
    fn run(
        &self,
        model: &LoadedModel,
        pool: &rayon::ThreadPool,
        n_slots: usize,
        rx: std::sync::mpsc::Receiver<BatchReq>,
    ) {
        let model = &model.model;
        let mut bs = crate::model::batch::BatchScratch::new(model, n_slots);
        let mut prompts: VecDeque<PromptJob> = VecDeque::new();
        let mut decode: Vec<DecodeReq> = Vec::new();
        let take = |r: BatchReq, decode: &mut Vec<_>, prompts: &mut VecDeque<PromptJob>| {
            match r {
                BatchReq::Decode {
                    state,
                    token,
                    reply,
                } => decode.push((state, token, reply)),
                BatchReq::Prompt {
                    state,
                    tokens,
                    logits,
                    reply,
                } => {
                    // SAFETY: the slot is blocked on `reply` (see `Lent`).
                    let st = unsafe { &mut *state.0 };
                    match model.check_prompt(st, &tokens, logits) {
                        Ok(()) => prompts.push_back(PromptJob {
                            state,
                            tokens,
                            logits,
                            done: 0,
                            first_bad: None,
                            reply,
                        }),
                        Err(e) => {
                            let _ = reply.send(Err(e.into()));
                        }
                    }
                }
            }
        };
        loop {
            while decode.is_empty() && prompts.is_empty() {
                match rx.recv() {
                    Ok(r) => take(r, &mut decode, &mut prompts),
                    Err(_) => return,
                }
            }
            // Every decoding slot that has not asked yet gets until the
            // deadline.
            let deadline = std::time::Instant::now() + GATHER;
            while decode.len() < self.active.load(Ordering::Acquire) {
                let left = deadline.saturating_duration_since(std::time::Instant::now());
                match rx.recv_timeout(left) {
                    Ok(r) => take(r, &mut decode, &mut prompts),
                    Err(_) => break,
                }
            }
            while let Ok(r) = rx.try_recv() {
                take(r, &mut decode, &mut prompts);
            }
            if decode.is_empty() && prompts.is_empty() {
                continue;
            }
            self.step(model, pool, &mut bs, &mut decode, &mut prompts);
        }
    }

    /// One batched step: every decoding request in `decode` (answered and
    /// drained) and the next batch of the first prompt (answered and removed
    /// once it is whole).
    fn step(
        &self,
        model: &crate::model::Model,
        pool: &rayon::ThreadPool,
        bs: &mut crate::model::batch::BatchScratch,
        decode: &mut Vec<DecodeReq>,
        prompts: &mut VecDeque<PromptJob>,
    ) {
        self.steps.fetch_add(1, Ordering::Relaxed);
        self.rows.fetch_add(decode.len() as u64, Ordering::Relaxed);
        // SAFETY: each slot is blocked on its reply until we answer below
        // (see `Lent`); the states are distinct because each slot has one
        // request in flight at most.
        let mut states: Vec<&mut State> = decode.iter().map(|d| unsafe { &mut *d.0 .0 }).collect();
        let tokens: Vec<u32> = decode.iter().map(|d| d.1).collect();
        let chunk = prompts.front_mut().map(|p| {
            // SAFETY: as above.
            let state = unsafe { &mut *p.state.0 };
            let t = state.max_batch.min(p.tokens.len() - p.done);
            let range = p.done..p.done + t;
            p.done += t;
            crate::model::batch::PromptChunk {
                state,
                tokens: &p.tokens[range],
                logits: p.logits && p.done == p.tokens.len(),
            }
        });
        let n_chunk = chunk.as_ref().map_or(0, |c| c.tokens.len());
        self.prompt_rows
            .fetch_add(n_chunk as u64, Ordering::Relaxed);
        if n_chunk > 0 && !tokens.is_empty() {
            self.mixed_steps.fetch_add(1, Ordering::Relaxed);
        }
        let result = pool.install(|| model.step_batch(bs, &mut states, &tokens, chunk));
        drop(states);
        let result = result.map_err(|e| e.to_string());
        for (_, _, reply) in decode.drain(..) {
            let _ = reply.send(result.as_ref().map(|_| ()).map_err(Clone::clone));
        }
        let Some(p) = prompts.front_mut() else { return };
        match result {
            Ok(bad) if n_chunk > 0 => {
                p.first_bad = p.first_bad.or(bad);
                if p.done == p.tokens.len() {
                    let p = prompts.pop_front().expect("the prompt just stepped");
                    // SAFETY: as above; the slot is still blocked.
                    let st = unsafe { &*p.state.0 };
                    let r = model.prompt_result(st, p.logits, p.first_bad);
                    let _ = p.reply.send(r.map_err(Into::into));
                }
            }
            Ok(_) => {}
            Err(e) => {
                let p = prompts.pop_front().expect("the prompt just stepped");
                let _ = p
                    .reply
                    .send(Err(EngineError::Options(format!("batched step: {e}"))));
            }
        }
    }
}

/// A slot's prompt batches through the [`Batcher`].
pub(super) struct BatchPrompt {
    tx: std::sync::mpsc::Sender<BatchReq>,
}

impl BatchPrompt {
    /// A slot's prompt evaluation through `batcher`.
    pub(super) fn new(batcher: &Batcher) -> BatchPrompt {
        BatchPrompt {
            tx: batcher.tx.clone(),
        }
    }
}

impl PromptEval for BatchPrompt {
    fn eval(&mut self, state: &mut State, tokens: &[u32], logits: bool) -> Result<(), EngineError> {
        let (reply, answer) = std::sync::mpsc::sync_channel(1);
        let stopped = || EngineError::Options("batched prompt: the batcher stopped".into());
        self.tx
            .send(BatchReq::Prompt {
                state: Lent(state as *mut State),
                tokens: tokens.to_vec(),
                logits,
                reply,
            })
            .map_err(|_| stopped())?;
        // The state is the batcher's until it answers.
        answer.recv().map_err(|_| stopped())?
    }
}

/// A slot's decoding step through the [`Batcher`].
pub(super) struct BatchStep {
    pub(super) batcher: Arc<Batcher>,
    pub(super) registered: bool,
}

impl Drop for BatchStep {
    fn drop(&mut self) {
        if self.registered {
            self.batcher.active.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl Step for BatchStep {
    fn step(&mut self, io: StepIo) -> Result<crate::engine::StepStats, crate::engine::EngineError> {
        let (session, sampler, history, out) = (io.session, io.sampler, io.history, io.out);
        let Some(&last) = history.last() else {
            return Err(crate::engine::EngineError::EmptyPrompt);
        };
        if !self.registered {
            self.registered = true;
            self.batcher.active.fetch_add(1, Ordering::AcqRel);
        }
        let t0 = std::time::Instant::now();
        let (reply, answer) = std::sync::mpsc::sync_channel(1);
        let req = BatchReq::Decode {
            state: Lent(&mut session.state as *mut State),
            token: last,
            reply,
        };
        let fail = |e: String| crate::engine::EngineError::Options(format!("batched step: {e}"));
        self.batcher
            .tx
            .send(req)
            .map_err(|_| fail("the batcher stopped".into()))?;
        // The session is the batcher's until it answers.
        answer
            .recv()
            .map_err(|_| fail("the batcher stopped".into()))?
            .map_err(fail)?;
        session.note_committed(&[last])?;
        let t1 = std::time::Instant::now();
        let v = session.model().model.n_vocab();
        let logits = session.state.logits(v);
        let next = sampler.sample(logits, history);
        sampler.record(logits, next);
        out.push(next);
        Ok(crate::engine::StepStats {
            eval_ms: (t1 - t0).as_secs_f64() * 1e3,
            eval_runs: 1,
            sample_ms: t1.elapsed().as_secs_f64() * 1e3,
            sample_runs: 1,
            ..Default::default()
        })
    }
}
