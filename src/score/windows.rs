//! Windows of a token stream, each evaluated from an empty state.

use anyhow::Context;

use crate::kernels::GgmlType;
use crate::model::{LogitsFor, Model, State, StateOptions};

/// How a token stream is cut: `n` windows of `c` tokens, the rest unused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Windows {
    pub c: usize,
    pub n: usize,
}

impl Windows {
    /// The whole windows of `c` in `n_tokens`, at most `limit` of them
    /// (`--chunks`; negative: all).
    pub fn of(n_tokens: usize, c: usize, limit: i64) -> Windows {
        let mut n = n_tokens / c;
        if limit >= 0 {
            n = n.min(limit as usize);
        }
        Windows { c, n }
    }

    /// The tokens of window `w`.
    pub fn get<'t>(&self, tokens: &'t [u32], w: usize) -> &'t [u32] {
        &tokens[w * self.c..(w + 1) * self.c]
    }

    /// The tokens every window covers.
    pub fn covered<'t>(&self, tokens: &'t [u32]) -> &'t [u32] {
        &tokens[..self.n * self.c]
    }
}

/// The thread pool and the state that windows of `c` tokens run in (a
/// prompt batch of at most 512, as llama.cpp's tools use).
pub struct WindowRunner {
    pool: rayon::ThreadPool,
    state: State,
}

impl WindowRunner {
    /// A runner for windows of `c` on `threads` (default: all cores), with a
    /// K and V cache of `types`, flash attention on or off.
    pub fn new(
        model: &Model<'_>,
        c: usize,
        threads: Option<usize>,
        (type_k, type_v): (GgmlType, GgmlType),
        flash: bool,
    ) -> anyhow::Result<WindowRunner> {
        // llama.cpp casts an f32 cache to f16 for flash attention.
        let cast = |ty| match (flash, ty) {
            (true, GgmlType::F32) => GgmlType::F16,
            _ => ty,
        };
        let (type_k, type_v) = (cast(type_k), cast(type_v));
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads.unwrap_or(0))
            .build()
            .context("thread pool")?;
        let state_opts = StateOptions {
            max_batch: c.min(512),
            type_k,
            type_v,
            ..StateOptions::new(c)
        };
        model.check_memory(&state_opts)?;
        let mut state = model.new_state(state_opts)?;
        state.kv.flash = flash;
        Ok(WindowRunner { pool, state })
    }

    /// Evaluates `window` from an empty state in one prompt pass: the
    /// logits `want` asks for.
    pub fn eval(
        &mut self,
        model: &Model<'_>,
        window: &[u32],
        want: LogitsFor,
    ) -> anyhow::Result<&[f32]> {
        self.state.reset();
        let state = &mut self.state;
        Ok(self
            .pool
            .install(|| model.forward(state, window, 0, want))?)
    }
}
