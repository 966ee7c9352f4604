//! The server's slots: `-np` sequences, each a [`Session`] (its own KV cache,
//! conv windows and GDN states, and the tokens it holds for prompt-prefix
//! reuse) driven by the one generation loop on a thread of its own.
//!
//! Continuous batching: a decoding slot's step does not run its own forward
//! pass. It hands its state and token to the [`Batcher`], which waits until
//! every decoding slot has asked (or 5 ms after the first did: a slot blocked
//! on a slow client does not hold the others), then decodes them all in one
//! forward pass ([`crate::model::Model::step_batch`]: the weights stream
//! once for every slot) and answers each. A slot's prompt goes the same way
//! ([`PromptEval`]): each step also evaluates one batch (`-ub` tokens) of the
//! oldest waiting prompt, layer by layer beside the decoding rows, so a long
//! prompt delays the decoding slots by one batch per step, never by its
//! whole length, and its weights serve both. A request joins at the next
//! step and a finished one leaves; everything runs on one shared thread pool.
//!
//! A request is a [`Job`]. [`Scheduler::submit`] hands it to the idle slot
//! whose tokens share the longest prefix with its prompt (a chat's next turn
//! lands where its previous turn left its state), else queues it (up to a
//! bound: beyond it the request is refused). Tokens travel to the HTTP side
//! through a bounded channel; a dropped receiver (the client went away) ends
//! the generation at its next token, and so does the shutdown flag.

use std::collections::VecDeque;
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use tokio::sync::mpsc;

use crate::constrain::tools::{Shape, ToolGuard};
use crate::constrain::JsonGuard;
use crate::engine::{
    generate, GenEvent, GenOptions, LoadedModel, Session, SessionOptions, SpecStep, Step,
    StopReason,
};
use crate::sample::{Sampler, SamplerParams, TokenLogprob};
use crate::spec::{SpecChoice, SpecConfig};

pub use super::batcher::Batcher;
use super::batcher::{BatchPrompt, BatchStep};
pub use super::done::Done;
use super::metrics::Metrics;
use super::text::StopMatcher;

/// One request for a slot.
#[derive(Debug)]
pub struct Job {
    pub prompt: Vec<u32>,
    pub sampler: SamplerParams,
    pub n_predict: Option<usize>,
    pub stop: Vec<String>,
    pub starts_thinking: bool,
    /// Generate to the limit even past end-of-generation tokens.
    pub ignore_eos: bool,
    /// Report each token's log-probability with this many alternatives.
    pub logprobs: Option<usize>,
    /// Score the prompt first, with this many alternatives per token
    /// ([`Msg::Scored`]).
    pub score_prompt: Option<usize>,
    /// JSON mode: the reply is one JSON object ([`JsonGuard`]).
    pub json: bool,
    /// A forced tool call: the reply is one call of one of these functions
    /// (name, argument shape) ([`ToolGuard`]).
    pub tool_call: Option<Arc<Vec<(String, Shape)>>>,
    /// Added to these tokens' logits before sampling.
    pub logit_bias: Vec<(u32, f32)>,
    pub tx: mpsc::Sender<Msg>,
}

/// What a slot sends back.
#[derive(Debug)]
pub enum Msg {
    /// Text (stop strings already applied); `thinking`: inside `<think>`;
    /// `logprobs`: the tokens whose text this is, when the job asked for
    /// them (a token whose text was held back for a possible stop string
    /// comes with the text that releases it; those a stop string swallows
    /// are dropped).
    Text {
        text: String,
        thinking: bool,
        logprobs: Vec<TokenLogprob>,
    },
    /// The prompt's tokens after the first, scored (`Job::score_prompt`),
    /// before any text.
    Scored(Vec<TokenLogprob>),
    Done(Done),
    Error(String),
    /// A slot took the job (sent before anything else).
    Started,
    /// The job was still queued when the server began to stop: never run.
    Shutdown,
}

#[derive(Default)]
struct SlotInfo {
    busy: bool,
    job: Option<Job>,
    tokens: Vec<u32>,
}

struct Inner {
    queue: VecDeque<Job>,
    slots: Vec<SlotInfo>,
    closed: bool,
}

/// Hands jobs to slots.
pub struct Scheduler {
    inner: Mutex<Inner>,
    cv: Condvar,
    max_queue: usize,
    /// Set at shutdown after the grace period: every generation stops.
    pub cancel_all: AtomicBool,
}

/// Why a job was not taken.
#[derive(Debug, PartialEq, Eq)]
pub enum Refused {
    QueueFull,
    ShuttingDown,
}

fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

impl Scheduler {
    pub fn new(n_slots: usize, max_queue: usize) -> Scheduler {
        Scheduler {
            inner: Mutex::new(Inner {
                queue: VecDeque::new(),
                slots: (0..n_slots).map(|_| SlotInfo::default()).collect(),
                closed: false,
            }),
            cv: Condvar::new(),
            max_queue,
            cancel_all: AtomicBool::new(false),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Gives `job` to the best idle slot, or queues it.
    pub fn submit(&self, job: Job) -> Result<(), Refused> {
        let mut g = self.lock();
        if g.closed {
            return Err(Refused::ShuttingDown);
        }
        let best = g
            .slots
            .iter()
            .enumerate()
            .filter(|(_, s)| !s.busy && s.job.is_none())
            .max_by_key(|(i, s)| (common_prefix(&s.tokens, &job.prompt), std::cmp::Reverse(*i)))
            .map(|(i, _)| i);
        match best {
            Some(i) => g.slots[i].job = Some(job),
            None if g.queue.len() < self.max_queue => g.queue.push_back(job),
            None => return Err(Refused::QueueFull),
        }
        drop(g);
        self.cv.notify_all();
        Ok(())
    }

    /// The next job for slot `i` (blocks); `None` once closed and drained.
    fn next(&self, i: usize) -> Option<Job> {
        let mut g = self.lock();
        loop {
            if let Some(j) = g.slots[i].job.take().or_else(|| g.queue.pop_front()) {
                g.slots[i].busy = true;
                // A fresh channel has room: this never waits.
                let _ = j.tx.try_send(Msg::Started);
                return Some(j);
            }
            if g.closed {
                return None;
            }
            g = self.cv.wait(g).unwrap_or_else(|e| e.into_inner());
        }
    }

    fn release(&self, i: usize, tokens: Vec<u32>) {
        let mut g = self.lock();
        g.slots[i].busy = false;
        g.slots[i].tokens = tokens;
        drop(g);
        self.cv.notify_all();
    }

    /// Each slot: whether it has a job, and how many tokens its sequence
    /// held when its last job ended (what a next prompt can reuse).
    pub fn slot_states(&self) -> Vec<(bool, usize)> {
        let g = self.lock();
        g.slots
            .iter()
            .map(|s| (s.busy || s.job.is_some(), s.tokens.len()))
            .collect()
    }

    /// Refuses new jobs; queued ones are told the server is stopping.
    pub fn close(&self) {
        let mut g = self.lock();
        g.closed = true;
        for j in g.queue.drain(..) {
            let _ = j.tx.try_send(Msg::Shutdown);
        }
        drop(g);
        self.cv.notify_all();
    }

    /// (queued requests, busy slots, slots).
    pub fn load(&self) -> (usize, usize, usize) {
        let g = self.lock();
        let busy = g.slots.iter().filter(|s| s.busy || s.job.is_some()).count();
        (g.queue.len(), busy, g.slots.len())
    }
}

/// Starts `n` slot threads on `model`, all on one pool.
pub fn start(
    model: Arc<LoadedModel>,
    opts: SessionOptions,
    n: usize,
    spec: Option<(SpecConfig, SpecChoice)>,
    batching: bool,
    sched: Arc<Scheduler>,
    metrics: Arc<Metrics>,
) -> anyhow::Result<Arc<Batcher>> {
    let pool = Session::new_pool(opts.threads, "clover-worker")?;
    let batcher = Batcher::start(Arc::clone(&model), Arc::clone(&pool), n)?;
    let mut handles = Vec::new();
    for i in 0..n {
        let mut session = Session::new_in(Arc::clone(&model), opts, Some(Arc::clone(&pool)))?;
        if batching {
            // Prompts are evaluated inside the batched steps too, a batch
            // per step beside the decoding slots.
            session.set_prompt_eval(Some(Box::new(BatchPrompt::new(&batcher))));
        }
        let (sched, metrics) = (Arc::clone(&sched), Arc::clone(&metrics));
        let batcher = Arc::clone(&batcher);
        // Each slot drafts on its own (an n-gram drafter indexes its text).
        let mut spec_step = spec.as_ref().and_then(|(cfg, choice)| {
            let drafter = choice.drafter()?;
            Some(SpecStep::new(cfg.clone(), drafter))
        });
        let h = std::thread::Builder::new()
            .name(format!("clover-slot-{i}"))
            .spawn(move || {
                while let Some(job) = sched.next(i) {
                    // Speculating slots verify on their own; plain ones
                    // decode through the batcher.
                    let mut batched = BatchStep {
                        batcher: Arc::clone(&batcher),
                        registered: false,
                    };
                    let mut plain = crate::engine::PlainStep;
                    // A constrained or biased reply decodes token by token:
                    // draft verification compares with the model's own
                    // logits.
                    let free = !job.json && job.tool_call.is_none() && job.logit_bias.is_empty();
                    let spec = spec_step.as_mut().filter(|_| free);
                    let step: &mut dyn Step = match (spec, batching) {
                        (Some(s), _) => s,
                        (None, true) => &mut batched,
                        (None, false) => &mut plain,
                    };
                    run_job(i, &mut session, step, job, &sched.cancel_all, &metrics);
                    sched.release(i, session.tokens().to_vec());
                }
            })?;
        handles.push(h);
    }
    drop(handles);
    Ok(batcher)
}

/// Runs one job on slot `i` to its end.
fn run_job(
    i: usize,
    session: &mut Session,
    step: &mut dyn Step,
    job: Job,
    cancel: &AtomicBool,
    metrics: &Metrics,
) {
    let mut sampler = Sampler::new(job.sampler);
    sampler.set_logit_bias(job.logit_bias.clone());
    if job.json {
        let model = Arc::clone(session.model());
        sampler.constrain(Box::new(JsonGuard::json(model, job.starts_thinking)));
    }
    if let Some(tools) = &job.tool_call {
        let model = Arc::clone(session.model());
        let guard = ToolGuard::tool_call(model, tools, job.starts_thinking);
        sampler.constrain(Box::new(guard));
    }
    let queue = job.logprobs.map(|top| sampler.log_probs(top));
    let mut held = Vec::new();
    let opts = GenOptions {
        n_predict: job.n_predict,
        starts_thinking: job.starts_thinking,
        // A later request with this prompt, or sharing it up to its last
        // token (a regeneration, the same question again), restarts there.
        checkpoint_prompt: true,
        ignore_eos: job.ignore_eos,
    };
    let mut stops = StopMatcher::new(job.stop.clone());
    let (mut drafted, mut accepted) = (0, 0);
    let tx = job.tx.clone();
    let send = |m: Msg| tx.blocking_send(m).is_ok();
    let mut sink = |ev: GenEvent<'_>| {
        if cancel.load(Ordering::Relaxed) {
            return ControlFlow::Break(());
        }
        let (text, thinking) = match ev {
            GenEvent::Token {
                text,
                thinking,
                tag,
                ..
            } => {
                // The sampler queued one record per emitted token, in order.
                let record = queue
                    .as_ref()
                    .and_then(|q| q.lock().ok().and_then(|mut q| q.pop_front()));
                if tag {
                    return ControlFlow::Continue(());
                }
                held.extend(record);
                (text, thinking)
            }
            GenEvent::Tail { text, thinking } => (text, thinking),
            GenEvent::Stepped { step, .. } => {
                drafted += step.drafted;
                accepted += step.accepted;
                return ControlFlow::Continue(());
            }
            GenEvent::Prefilled(_) => return ControlFlow::Continue(()),
        };
        let text = if thinking {
            text.to_string()
        } else {
            stops.push(text)
        };
        if !text.is_empty() {
            let logprobs = std::mem::take(&mut held);
            if !send(Msg::Text {
                text,
                thinking,
                logprobs,
            }) {
                return ControlFlow::Break(());
            }
        }
        if stops.stopped {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    };
    let prompt = job.prompt;
    // Scoring evaluates the prompt (all of it: nothing is reused), so its
    // time is the prompt's.
    let mut scored_ms = None;
    if let Some(top) = job.score_prompt {
        let t0 = std::time::Instant::now();
        // A client that left, or the end of the grace period at shutdown,
        // stops scoring at the next batch.
        let go_on = || !tx.is_closed() && !cancel.load(Ordering::Relaxed);
        let scored = session.score_prompt(&prompt, top, &go_on);
        scored_ms = Some(t0.elapsed().as_secs_f64() * 1e3);
        match scored {
            Ok(s) => {
                if !send(Msg::Scored(s)) {
                    return;
                }
            }
            Err(e) => {
                let _ = job.tx.blocking_send(Msg::Error(e.to_string()));
                return;
            }
        }
    }
    let result = generate(session, &prompt, &mut sampler, step, &opts, &mut sink);
    let msg = match result {
        Ok(gen) => {
            if !stops.stopped {
                let rest = stops.finish();
                if !rest.is_empty() {
                    send(Msg::Text {
                        text: rest,
                        thinking: false,
                        logprobs: std::mem::take(&mut held),
                    });
                }
            }
            let t = gen.timings;
            let done = Done {
                prompt_n: prompt.len(),
                prompt_ms: t.prompt_ms + scored_ms.unwrap_or(0.0),
                cached_n: if scored_ms.is_some() {
                    0
                } else {
                    gen.prefill.reused
                },
                predicted_n: gen.tokens.len(),
                predicted_ms: t.eval_ms + t.sample_ms,
                draft_n: drafted,
                draft_accepted: accepted,
                length: matches!(gen.stop, StopReason::Limit | StopReason::ContextFull),
                stopping_word: stops.word.clone(),
                slot: i,
            };
            metrics.finished(&done);
            Msg::Done(done)
        }
        Err(e) => Msg::Error(e.to_string()),
    };
    let _ = job.tx.blocking_send(msg);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(prompt: &[u32]) -> (Job, mpsc::Receiver<Msg>) {
        let (tx, rx) = mpsc::channel(4);
        (
            Job {
                prompt: prompt.to_vec(),
                sampler: SamplerParams::greedy(),
                n_predict: Some(1),
                stop: Vec::new(),
                starts_thinking: false,
                ignore_eos: false,
                logprobs: None,
                score_prompt: None,
                json: false,
                tool_call: None,
                logit_bias: Vec::new(),
                tx,
            },
            rx,
        )
    }

    #[test]
    fn jobs_go_to_the_idle_slot_with_the_longest_shared_prefix_then_queue() {
        let s = Scheduler::new(2, 1);
        s.release(1, vec![5, 6, 7]);
        let (a, _ra) = job(&[5, 6, 9]);
        s.submit(a).unwrap();
        assert_eq!(s.next(1).unwrap().prompt, vec![5, 6, 9]);
        let (b, _rb) = job(&[1]);
        s.submit(b).unwrap();
        assert_eq!(s.next(0).unwrap().prompt, vec![1]);
        assert_eq!(s.load(), (0, 2, 2));
        // Both busy: one job queues, the next is refused.
        let (c, _rc) = job(&[2]);
        s.submit(c).unwrap();
        let (d, _rd) = job(&[3]);
        assert_eq!(s.submit(d).unwrap_err(), Refused::QueueFull);
        s.release(0, vec![1]);
        assert_eq!(s.next(0).unwrap().prompt, vec![2]);
        // Closing: nothing more is taken, and idle slots get None.
        s.release(0, vec![2]);
        s.close();
        let (e, _re) = job(&[4]);
        assert_eq!(s.submit(e).unwrap_err(), Refused::ShuttingDown);
        assert!(s.next(0).is_none());
    }
}
