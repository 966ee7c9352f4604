//! One sequence over a loaded model: the state (KV cache + recurrent state), the
//! tokens it holds, and the thread pool every forward pass runs on.
//!
//! Prompt reuse, like llama.cpp's prompt cache: [`Session::prefill`] keeps the
//! longest prefix of the new prompt the state already holds and evaluates only the
//! rest. The KV cache can be cut anywhere, but the Gated DeltaNet state cannot be
//! rolled back (docs/DESIGN.md §5), so a prefix is reusable only when it is
//! * everything the state holds (the new prompt extends it), or
//! * the position of the [`Session::checkpoint`] (a copy of the recurrent state,
//!   taken after the last prompt — a chat turn whose reply was re-rendered
//!   differently restarts there), or else
//! * the end of the shared prefix declared with [`Session::keep_prefix`] (the
//!   system prompt: a chat whose oldest turns were dropped, or a fresh
//!   conversation, restarts there; the recurrent state is copied each time an
//!   evaluation passes that position), or else
//! * nothing (the state is reset).

use std::sync::Arc;
use std::time::Instant;

use kernels::GgmlType;

use crate::model::{DeltaNetState, LogitsFor, Model, State, StateOptions};

use super::load::LoadedModel;
use super::EngineError;

/// How a session is set up (`-c -b -ub -ctk -ctv -t`).
#[derive(Clone, Copy, Debug)]
pub struct SessionOptions {
    /// Context length in positions.
    pub n_ctx: usize,
    /// Logical batch: the most tokens handed to one forward call.
    pub n_batch: usize,
    /// Physical batch: the most tokens one forward pass computes at once.
    pub n_ubatch: usize,
    pub type_k: GgmlType,
    pub type_v: GgmlType,
    /// Threads of the session's pool; `None` uses every core.
    pub threads: Option<usize>,
    /// Threads for prompt batches (`-tb`); `None`: the same pool as `threads`.
    pub threads_batch: Option<usize>,
}

impl SessionOptions {
    /// llama.cpp's defaults: batch 2048, ubatch 512, f16 KV cache, all cores.
    pub fn new(n_ctx: usize) -> SessionOptions {
        SessionOptions {
            n_ctx,
            n_batch: 2048,
            n_ubatch: 512,
            type_k: GgmlType::F16,
            type_v: GgmlType::F16,
            threads: None,
            threads_batch: None,
        }
    }

    /// Zero sizes and thread counts are errors.
    pub fn validate(&self) -> Result<(), EngineError> {
        let bad = |what: &str| Err(EngineError::Options(format!("{what} must be at least 1")));
        if self.n_ctx == 0 {
            return bad("the context size (-c)");
        }
        if self.n_batch == 0 {
            return bad("the batch size (-b)");
        }
        if self.n_ubatch == 0 {
            return bad("the micro-batch size (-ub)");
        }
        if self.threads == Some(0) {
            return bad("the thread count (-t)");
        }
        if self.threads_batch == Some(0) {
            return bad("the batch thread count (-tb)");
        }
        for (flag, n) in [("-t", self.threads), ("-tb", self.threads_batch)] {
            if let Some(n) = n.filter(|&n| n > MAX_THREADS) {
                return Err(EngineError::Options(format!(
                    "{flag} {n}: at most {MAX_THREADS} threads"
                )));
            }
        }
        Ok(())
    }

    /// What is allowed but probably a mistake, for `model`: a context past the
    /// one it was trained for (when the user chose it: `ctx_given`), more
    /// threads than cores.
    pub fn warnings(&self, model: &LoadedModel, ctx_given: bool) -> Vec<String> {
        let mut w = Vec::new();
        let trained = model.model.config.context_length;
        if ctx_given && trained > 0 && self.n_ctx > trained {
            w.push(format!(
                "-c {} is more than the {trained} tokens this model was trained on; \
                 quality may drop past {trained}",
                self.n_ctx
            ));
        }
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        for (flag, n) in [("-t", self.threads), ("-tb", self.threads_batch)] {
            if let Some(n) = n.filter(|&n| n > cores) {
                w.push(format!(
                    "{flag} {n} is more than the {cores} cores of this machine; \
                     threads will share cores"
                ));
            }
        }
        w
    }
}

/// The most threads `-t` / `-tb` accept.
pub const MAX_THREADS: usize = 1024;

/// What a prefill did.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Prefill {
    /// Prompt positions reused from the state.
    pub reused: usize,
    /// Prompt tokens evaluated now.
    pub evaluated: usize,
    /// Wall time of the evaluation.
    pub ms: f64,
}

/// A copy of the recurrent state at `pos` (KV positions below `pos` are kept in
/// the cache itself; truncating it is exact).
struct Checkpoint {
    pos: usize,
    recurrent: Vec<DeltaNetState>,
}

/// Where a session evaluates its prompt batches: by default [`Model::forward`]
/// on the session's pool. The server's slots hand them to its batcher
/// instead, which runs them inside its batched steps beside the decoding
/// sequences (`crate::server::slots`).
pub trait PromptEval: Send {
    /// Evaluates `tokens` at the next position of `state` as
    /// [`Model::forward`] does, leaving the last token's logits in
    /// [`State::logits`] when `logits`.
    fn eval(&mut self, state: &mut State, tokens: &[u32], logits: bool) -> Result<(), EngineError>;
}

/// A sequence on a loaded model.
pub struct Session {
    model: Arc<LoadedModel>,
    pub state: State,
    /// The tokens the state holds, position by position.
    tokens: Vec<u32>,
    checkpoint: Option<Checkpoint>,
    /// The prefix every prompt is expected to share ([`Session::keep_prefix`]).
    shared: Vec<u32>,
    /// The recurrent state at the end of `shared`, once an evaluation passed it.
    shared_state: Option<Checkpoint>,
    pool: Arc<rayon::ThreadPool>,
    /// The pool of prompt batches when `-tb` differs from `-t`.
    pool_batch: Option<Arc<rayon::ThreadPool>>,
    threads: usize,
    n_batch: usize,
    /// Set by [`Session::set_prompt_eval`]; else the session's own pool.
    prompt_eval: Option<Box<dyn PromptEval>>,
}

impl Session {
    pub fn new(model: Arc<LoadedModel>, opts: SessionOptions) -> Result<Session, EngineError> {
        Session::new_in(model, opts, None)
    }

    /// A pool of `-t` / `-tb` threads, as [`Session::new`] makes one.
    pub fn new_pool(
        n: Option<usize>,
        name: &'static str,
    ) -> Result<Arc<rayon::ThreadPool>, EngineError> {
        rayon::ThreadPoolBuilder::new()
            .num_threads(n.unwrap_or(0))
            .thread_name(move |i| format!("{name}-{i}"))
            .build()
            .map(Arc::new)
            .map_err(|e| EngineError::Threads(e.to_string()))
    }

    /// [`Session::new`], on `pool` when given (several sessions sharing one
    /// pool take turns on its threads instead of oversubscribing the cores:
    /// the server's slots).
    pub fn new_in(
        model: Arc<LoadedModel>,
        opts: SessionOptions,
        pool: Option<Arc<rayon::ThreadPool>>,
    ) -> Result<Session, EngineError> {
        opts.validate()?;
        let head_dim = model.model.config.head_dim;
        for (flag, ty) in [("-ctk", opts.type_k), ("-ctv", opts.type_v)] {
            if !head_dim.is_multiple_of(ty.block_size()) {
                return Err(EngineError::Options(format!(
                    "{flag} {}: this model's attention head dim {head_dim} is not a multiple \
                     of the {}-value block of that type",
                    ty.name().to_ascii_lowercase(),
                    ty.block_size()
                )));
            }
        }
        let state_opts = StateOptions {
            n_ctx: opts.n_ctx,
            max_batch: opts.n_ubatch.min(opts.n_batch).min(opts.n_ctx),
            type_k: opts.type_k,
            type_v: opts.type_v,
            // `Model::mtp` decides (`Model::new_state`).
            mtp: false,
        };
        // Checked before anything is allocated: an absurd -c is an error, not an
        // abort in the allocator.
        model.model.check_memory(&state_opts)?;
        let state = model.model.new_state(state_opts)?;
        let shared = pool.is_some();
        let pool = match pool {
            Some(p) => p,
            None => Session::new_pool(opts.threads, "clover-worker")?,
        };
        let threads = pool.current_num_threads();
        let pool_batch = match opts.threads_batch {
            Some(n) if n != threads && !shared => Some(Session::new_pool(Some(n), "clover-batch")?),
            _ => None,
        };
        Ok(Session {
            model,
            state,
            tokens: Vec::new(),
            checkpoint: None,
            shared: Vec::new(),
            shared_state: None,
            pool,
            pool_batch,
            threads,
            n_batch: opts.n_batch,
            prompt_eval: None,
        })
    }

    pub fn model(&self) -> &Arc<LoadedModel> {
        &self.model
    }

    /// Evaluates prompt batches through `eval` from now on (`None`: on the
    /// session's own pool again).
    pub fn set_prompt_eval(&mut self, eval: Option<Box<dyn PromptEval>>) {
        self.prompt_eval = eval;
    }

    /// One logical batch of the prompt at the next position, through the
    /// [`PromptEval`] when one is set; the last token's logits when `logits`.
    fn eval_prompt(&mut self, tokens: &[u32], logits: bool) -> Result<(), EngineError> {
        if let Some(e) = self.prompt_eval.as_mut() {
            e.eval(&mut self.state, tokens, logits)?;
        } else {
            let pos = self.tokens.len();
            let (model, state) = (&self.model.model, &mut self.state);
            let pool = match tokens.len() {
                1 => &self.pool,
                _ => self.pool_batch.as_ref().unwrap_or(&self.pool),
            };
            let lf = match logits {
                true => LogitsFor::Last,
                false => LogitsFor::Indices(&[]),
            };
            pool.install(|| model.forward(state, tokens, pos, lf).map(|_| ()))?;
        }
        self.tokens.extend_from_slice(tokens);
        Ok(())
    }

    /// Threads of the session's pool.
    pub fn threads(&self) -> usize {
        self.threads
    }

    pub fn n_ctx(&self) -> usize {
        self.state.kv.n_ctx()
    }

    /// Positions the state holds.
    pub fn n_past(&self) -> usize {
        self.tokens.len()
    }

    /// The tokens the state holds.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// Empties the sequence (and drops the checkpoint).
    pub fn reset(&mut self) {
        self.state.reset();
        self.tokens.clear();
        self.checkpoint = None;
    }

    /// Makes the state hold `prompt` and returns the logits of its last token,
    /// evaluating only what is not already held (see the module docs).
    pub fn prefill(&mut self, prompt: &[u32]) -> Result<(Prefill, &[f32]), EngineError> {
        self.prefill_with(prompt, false)
    }

    /// [`Session::prefill`] that also checkpoints the recurrent state just
    /// before the prompt's last token, then evaluates that token on its own. A
    /// later prompt equal to this one, or sharing any part of it up to there
    /// (a regeneration, the same question asked again), restarts at the
    /// checkpoint: the same prompt again evaluates one token. The last token
    /// costs one decode-sized forward pass of its own.
    pub fn prefill_checkpointed(
        &mut self,
        prompt: &[u32],
    ) -> Result<(Prefill, &[f32]), EngineError> {
        self.prefill_with(prompt, true)
    }

    fn prefill_with(
        &mut self,
        prompt: &[u32],
        checkpoint: bool,
    ) -> Result<(Prefill, &[f32]), EngineError> {
        self.check_prompt(prompt)?;
        let keep = self.reusable_prefix(prompt);
        if keep < self.tokens.len() {
            if self.checkpoint.as_ref().is_some_and(|c| c.pos == keep) {
                self.restore_checkpoint();
            } else if self.shared_state.as_ref().is_some_and(|c| c.pos == keep) {
                self.restore_shared();
            } else {
                self.reset();
            }
        }
        debug_assert_eq!(self.tokens.len(), keep);
        let t0 = Instant::now();
        // Passing the end of the shared prefix: evaluate up to it and copy the state.
        let n_shared = self.shared.len();
        if keep < n_shared && n_shared < prompt.len() && prompt.starts_with(&self.shared) {
            for chunk in prompt[keep..n_shared].chunks(self.n_batch) {
                self.eval_prompt(chunk, false)?;
            }
            self.shared_state = Some(Checkpoint {
                pos: n_shared,
                recurrent: self.state.recurrent.clone(),
            });
        }
        let rest = &prompt[self.tokens.len()..];
        // Whole logical batches first (no logits), then the last one; with
        // `checkpoint`, all but the last token, the checkpoint, then that token.
        let split = match checkpoint {
            true => rest.len() - 1,
            false => (rest.len() - 1) / self.n_batch * self.n_batch,
        };
        for chunk in rest[..split].chunks(self.n_batch) {
            self.eval_prompt(chunk, false)?;
        }
        if checkpoint {
            self.checkpoint();
        }
        self.eval_prompt(&rest[split..], true)?;
        let info = Prefill {
            reused: keep,
            evaluated: prompt.len() - keep,
            ms: t0.elapsed().as_secs_f64() * 1000.0,
        };
        Ok((info, self.state.logits(self.model.model.n_vocab())))
    }

    /// A prompt must have a token and fit the context.
    fn check_prompt(&self, prompt: &[u32]) -> Result<(), EngineError> {
        if prompt.is_empty() {
            return Err(EngineError::EmptyPrompt);
        }
        if prompt.len() > self.n_ctx() {
            return Err(EngineError::PromptTooLong {
                n_prompt: prompt.len(),
                n_ctx: self.n_ctx(),
            });
        }
        Ok(())
    }

    /// How much of `prompt` can stay: all the state holds when `prompt` extends it
    /// by at least one token (the last token must be evaluated to get logits), else
    /// the later of the checkpoint and the shared prefix's copy that `prompt`
    /// extends, else nothing.
    fn reusable_prefix(&self, prompt: &[u32]) -> usize {
        let common = self
            .tokens
            .iter()
            .zip(prompt)
            .take_while(|(a, b)| a == b)
            .count();
        if common == self.tokens.len() && common < prompt.len() {
            return common;
        }
        // The held KV cache covers `common` positions of `prompt`; a copy of the
        // recurrent state at or below that restarts there (the shared prefix's copy
        // only for a prompt that starts with that prefix).
        let shared = self
            .shared_state
            .as_ref()
            .filter(|_| prompt.starts_with(&self.shared));
        [self.checkpoint.as_ref(), shared]
            .into_iter()
            .flatten()
            .map(|c| c.pos)
            .filter(|&pos| pos <= common && pos < prompt.len())
            .max()
            .unwrap_or(0)
    }

    /// Declares the prefix prompts are expected to share (a chat's system prompt).
    /// The next evaluation that passes its end keeps a copy of the recurrent state
    /// there, so that a later prompt sharing only this prefix restarts there instead
    /// of from nothing. An empty prefix turns this off.
    pub fn keep_prefix(&mut self, prefix: &[u32]) {
        if self.shared != prefix {
            self.shared = prefix.to_vec();
            self.shared_state = None;
        }
    }

    fn restore_shared(&mut self) {
        let Some(c) = &self.shared_state else { return };
        for (dst, src) in self.state.recurrent.iter_mut().zip(&c.recurrent) {
            dst.conv.copy_from_slice(&src.conv);
            dst.ssm.copy_from_slice(&src.ssm);
        }
        self.state.kv.truncate(c.pos);
        self.tokens.truncate(c.pos);
    }

    /// Scores `prompt`: each token after the first with its log-probability
    /// given the tokens before it and the `top` most likely tokens there
    /// ([`crate::score::next_token_logprobs`]). The state then holds all but the last
    /// token, checkpointed, so that generating from `prompt` next evaluates
    /// only that token. Nothing held is reused (every position needs its
    /// logits); the batches are short, so their logits stay small.
    /// `go_on` is asked before each batch: `false` stops with
    /// [`EngineError::Cancelled`] (a client that left).
    pub fn score_prompt(
        &mut self,
        prompt: &[u32],
        top: usize,
        go_on: &dyn Fn() -> bool,
    ) -> Result<Vec<crate::sample::TokenLogprob>, EngineError> {
        /// Positions per forward pass: their logits are `SCORE_BATCH × V`.
        const SCORE_BATCH: usize = 32;
        self.check_prompt(prompt)?;
        self.reset();
        let v = self.model.model.n_vocab();
        let n = prompt.len();
        let mut out = Vec::with_capacity(n - 1);
        for chunk in prompt[..n - 1].chunks(SCORE_BATCH) {
            if !go_on() {
                return Err(EngineError::Cancelled);
            }
            let pos = self.tokens.len();
            let (model, state) = (&self.model.model, &mut self.state);
            let pool = self.pool_batch.as_ref().unwrap_or(&self.pool);
            let rows = pool.install(|| model.forward(state, chunk, pos, LogitsFor::All))?;
            let next = &prompt[pos + 1..pos + 1 + chunk.len()];
            out.extend(crate::score::next_token_logprobs(rows, v, next, top));
            self.tokens.extend_from_slice(chunk);
        }
        self.checkpoint();
        Ok(out)
    }

    /// Runs one token at the next position and returns its logits.
    pub fn decode(&mut self, token: u32) -> Result<&[f32], EngineError> {
        let pos = self.tokens.len();
        let (model, state) = (&self.model.model, &mut self.state);
        let logits = self
            .pool
            .install(|| model.forward(state, &[token], pos, LogitsFor::Last))?;
        self.tokens.push(token);
        Ok(logits)
    }

    /// Remembers the recurrent state at the current position, so that a later
    /// prompt sharing only this prefix does not start from scratch.
    pub fn checkpoint(&mut self) {
        let pos = self.tokens.len();
        match &mut self.checkpoint {
            Some(c) => {
                c.pos = pos;
                for (dst, src) in c.recurrent.iter_mut().zip(&self.state.recurrent) {
                    dst.conv.copy_from_slice(&src.conv);
                    dst.ssm.copy_from_slice(&src.ssm);
                }
            }
            None => {
                self.checkpoint = Some(Checkpoint {
                    pos,
                    recurrent: self.state.recurrent.clone(),
                })
            }
        }
    }

    /// Position of the checkpoint, if any.
    pub fn checkpoint_pos(&self) -> Option<usize> {
        self.checkpoint.as_ref().map(|c| c.pos)
    }

    fn restore_checkpoint(&mut self) {
        let Some(c) = &self.checkpoint else { return };
        for (dst, src) in self.state.recurrent.iter_mut().zip(&c.recurrent) {
            dst.conv.copy_from_slice(&src.conv);
            dst.ssm.copy_from_slice(&src.ssm);
        }
        self.state.kv.truncate(c.pos);
        self.tokens.truncate(c.pos);
    }

    /// Runs `f` with the model and the state on the session's thread pool, for
    /// drivers that call the model directly (e.g. a speculative verify pass:
    /// `forward_verify` then `commit_verify`, followed by [`Session::note_committed`]).
    pub fn with_model<R: Send>(
        &mut self,
        f: impl FnOnce(&Model<'static>, &mut State) -> R + Send,
    ) -> R {
        let (model, state) = (&self.model.model, &mut self.state);
        self.pool.install(|| f(model, state))
    }

    /// Records that the state now also holds `tokens` (for drivers that advance
    /// the state themselves through [`Session::with_model`]). The state must hold
    /// exactly the known tokens plus these.
    pub fn note_committed(&mut self, tokens: &[u32]) -> Result<(), EngineError> {
        let want = self.tokens.len() + tokens.len();
        if self.state.n_past() != want {
            return Err(EngineError::Options(format!(
                "the state holds {} positions, but the session knows {want}",
                self.state.n_past()
            )));
        }
        self.tokens.extend_from_slice(tokens);
        Ok(())
    }
}
