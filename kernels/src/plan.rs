//! One way to pick a kernel: [`KernelTable::plan`] resolves a product — a
//! weight matrix, how many activation rows, and the numerics [`Mode`] — into
//! the [`Kernel`] that computes it. Every driver in [`crate::matmul`] runs a
//! plan; none chooses on its own.
//!
//! The mode says what the outputs must equal:
//! * [`Mode::Decode`]: single-token decoding's bits. One token, and every
//!   batch that must reproduce it row for row (a verify pass, DESIGN §4.1).
//! * [`Mode::Prompt`]: a prompt batch, which may take the tier's prompt
//!   kernels (faster, in their own f32 order).
//! * [`Mode::Ggml`]: llama.cpp's x86 orders for batches (llamafile's tinyBLAS
//!   for F32 / F16, the repacked gemm, the tiled K-quant matmul), for parity
//!   runs against llama.cpp; single tokens are llama.cpp's in every mode.
//!
//! The process-wide default of the model's batch order ([`BatchOrder`]) is read
//! from `CLOVER_BATCH_ORDER` once, here; the model passes a mode per product.

use std::sync::OnceLock;

use crate::isa::KernelTable;
use crate::matmul::{QMatrix, PROMPT_MIN_ROWS};
use crate::sig::{GemmFn, VecDotFn};

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

/// How a model sums batches: its own fast orders (prompt kernels for prompts,
/// decoding's bits for verify passes), or llama.cpp's for parity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BatchOrder {
    Clover,
    Ggml,
}

impl BatchOrder {
    /// `CLOVER_BATCH_ORDER=ggml` selects llama.cpp's order; read once.
    pub fn from_env() -> BatchOrder {
        static ORDER: OnceLock<BatchOrder> = OnceLock::new();
        *ORDER.get_or_init(|| {
            match std::env::var("CLOVER_BATCH_ORDER").is_ok_and(|v| v == "ggml") {
                true => BatchOrder::Ggml,
                false => BatchOrder::Clover,
            }
        })
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

/// The computation of one product.
#[derive(Clone, Copy, Debug)]
pub enum Kernel {
    /// The product on the matrix's rows repacked eight at a time
    /// ([`crate::repack`]); any number of activation rows, the same bits for
    /// each.
    Packed(GemmFn),
    /// The tier's prompt kernel (tokens as lanes).
    Prompt(GemmFn),
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

impl KernelTable {
    /// The kernel for `w` times `rows` activation rows in `mode`.
    pub fn plan(&self, w: &QMatrix, rows: usize, mode: Mode) -> Kernel {
        let (ty, n_out) = (w.ty, w.n_out);
        if let Some(g) = self.packed_gemm(ty, mode).filter(|_| w.packed().is_some()) {
            return Kernel::Packed(g);
        }
        if rows <= 1 {
            // A mat-vec: the dot ggml uses for one token (its repacked gemv
            // where it repacks), through a multi-row kernel where one gives
            // those bits.
            return match self.gemm_for_batch(ty, n_out, 1, mode) {
                Some(g) => Kernel::Rows(g),
                None => {
                    let dot = self.weight_dot(ty, n_out);
                    Kernel::Dots {
                        dot,
                        split: 1,
                        tail: dot,
                    }
                }
            };
        }
        if rows >= PROMPT_MIN_ROWS {
            if let Some(g) = self.prompt_gemm(ty, mode) {
                return Kernel::Prompt(g);
            }
        }
        let (dot, split, tail) = if mode == Mode::Ggml && !w.expert {
            // ggml hands a batch of F32 / F16 weights to llamafile's tinyBLAS
            // when its shape allows; a routed expert (MUL_MAT_ID) never.
            let tinyblas = w.n_in.is_multiple_of(16) && n_out.is_multiple_of(4);
            let dot = match ty {
                crate::GgmlType::F32 if tinyblas => self.gemm_f32(),
                crate::GgmlType::F16 if tinyblas => self.gemm_f16(),
                _ => self.batch_dot(ty, n_out, rows, mode),
            };
            let split = rows - rows % 4;
            match self.repacked_gemm_dot(ty, n_out, mode) {
                Some(gemm) if split > 0 => (gemm, split, dot),
                _ => (dot, rows, dot),
            }
        } else {
            let dot = self.batch_dot(ty, n_out, rows, mode);
            (dot, rows, dot)
        };
        if split == rows {
            if let Some(g) = self.gemm_for_batch(ty, n_out, rows, mode) {
                return Kernel::Rows(g);
            }
        }
        Kernel::Dots { dot, split, tail }
    }
}
