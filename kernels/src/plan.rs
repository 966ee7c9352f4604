//! One way to pick a kernel: `KernelTable::plan` (in [`crate::matmul`], beside
//! the matrices it plans for) resolves a product — a weight matrix, how many
//! activation rows, and the numerics [`Mode`] — into the [`Kernel`] that
//! computes it. Every driver in [`crate::matmul`] runs a plan; none chooses on
//! its own. This module imports nothing but the signatures, so the table
//! (`isa`) and the drivers (`matmul`) both import it downward.
//!
//! The mode says what the outputs must equal:
//! * [`Mode::Decode`]: single-token decoding's bits. One token, and every
//!   batch that must reproduce it row for row (a verify pass, docs/DESIGN.md §4.1).
//! * [`Mode::Prompt`]: a prompt batch, which may take the tier's prompt
//!   kernels (faster, in their own f32 order).
//! * [`Mode::Ggml`]: llama.cpp's x86 orders for batches (llamafile's tinyBLAS
//!   for F32 / F16, the repacked gemm, the tiled K-quant matmul), for parity
//!   runs against llama.cpp; single tokens are llama.cpp's in every mode,
//!   except on matrices repacked at load ([`crate::repack`], never in this
//!   mode), whose one product serves every batch size in its own order.
//!
//! The process's batch order ([`BatchOrder`]) is chosen once at start-up by
//! the command line (`--batch-order`); the model passes a mode per product.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::sig::{GemmFn, PromptFn, VecDotFn};

/// The numerics of one product (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Decode,
    Prompt,
    Ggml,
}

impl Mode {
    /// The mode for a product that never takes the prompt kernels (a routed
    /// expert's gather, the shared expert's down projection): [`Mode::Prompt`]
    /// becomes [`Mode::Decode`].
    pub fn without_prompt(self) -> Mode {
        match self {
            Mode::Prompt => Mode::Decode,
            m => m,
        }
    }
}

/// Whether [`BatchOrder::chosen`] is llama.cpp's.
static CHOSEN: AtomicBool = AtomicBool::new(false);

/// How a model sums batches: its own fast orders (prompt kernels for prompts,
/// decoding's bits for verify passes), or llama.cpp's for parity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BatchOrder {
    Clover,
    Ggml,
}

impl BatchOrder {
    /// `clover` or `ggml`.
    pub fn parse(s: &str) -> Option<BatchOrder> {
        match s {
            "clover" => Some(BatchOrder::Clover),
            "ggml" => Some(BatchOrder::Ggml),
            _ => None,
        }
    }

    /// Makes this the order models of this process are built with (the
    /// command line's `--batch-order`, chosen once at start-up).
    pub fn choose(self) {
        CHOSEN.store(self == BatchOrder::Ggml, Ordering::Relaxed);
    }

    /// The order chosen with [`BatchOrder::choose`] (clover's when none was).
    pub fn chosen() -> BatchOrder {
        match CHOSEN.load(Ordering::Relaxed) {
            true => BatchOrder::Ggml,
            false => BatchOrder::Clover,
        }
    }

    /// The mode of a batch: a prompt batch (`prompt`), or one that must give
    /// decoding's bits (a verify or draft pass).
    pub fn mode(self, prompt: bool) -> Mode {
        match (self, prompt) {
            (BatchOrder::Ggml, _) => Mode::Ggml,
            (BatchOrder::Clover, true) => Mode::Prompt,
            (BatchOrder::Clover, false) => Mode::Decode,
        }
    }
}

/// How a weight is kept in memory for the kernels of a tier
/// (`KernelTable::layout`). A matrix carries it, with its copy's bytes, as
/// [`crate::matmul::Rows`], and `plan` asks that layout's own planner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// The file's rows only.
    FileRows,
    /// clover's eight-row copy ([`crate::repack`]) only: every product
    /// reads it.
    Packed,
    /// The copy for batches, and the file's rows beside it for mat-vecs,
    /// which read them in the copy's arithmetic (the same bits).
    PackedAndFileRows,
}

/// The computation of one product.
#[derive(Clone, Copy, Debug)]
pub enum Kernel {
    /// The product on the matrix's rows repacked eight at a time
    /// ([`crate::repack`]); any number of activation rows, the same bits for
    /// each.
    Packed(GemmFn),
    /// The tier's prompt kernel (weight rows as lanes), writing token-major.
    Prompt(PromptFn),
    /// The tier's prompt kernel reading the rows repacked eight at a time
    /// ([`crate::repack`]): the same outputs as [`Kernel::Prompt`] on the
    /// file's rows, bit for bit.
    PackedPrompt(PromptFn),
    /// A multi-row kernel whose every output equals the per-output dot.
    Rows(GemmFn),
    /// One dot per output: `dot` for activation rows `< split`, `tail` after
    /// (ggml's repacked gemm takes rows four at a time, its gemv the rest).
    Dots {
        dot: VecDotFn,
        split: usize,
        tail: VecDotFn,
    },
}
