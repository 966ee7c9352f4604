//! Instruction-set tiers, chosen once at run time into a table of function
//! pointers. `CLOVER_ISA=scalar|avx2|avx512|neon` forces a tier and is refused
//! when the host lacks it.

use std::fmt;
use std::sync::OnceLock;

use crate::plan::Mode;
use crate::{scalar, GgmlType};

pub use crate::cpu::{Isa, IsaError};
pub use crate::sig::{
    DeltaReplayFn, DeltaRowsFn, DeltaStepsFn, GemmFn, PromptFn, QuantizeFn, ReplayStep, VecDotFn,
};

/// The kernels of one tier, per weight type.
pub struct KernelTable {
    pub isa: Isa,
    vec_dot: [VecDotFn; GgmlType::ALL.len()],
    gemm: [Option<GemmFn>; GgmlType::ALL.len()],
    quantize: [QuantizeFn; GgmlType::ALL.len()],
    gemm_f32: VecDotFn,
    gemm_f16: VecDotFn,
    ggml_repack: [Option<VecDotFn>; GgmlType::ALL.len()],
    tiled: [Option<VecDotFn>; GgmlType::ALL.len()],
    ggml_repack_gemm: [Option<VecDotFn>; GgmlType::ALL.len()],
    ggml_repack_rows: [Option<GemmFn>; GgmlType::ALL.len()],
    packed_order_rows: [Option<GemmFn>; GgmlType::ALL.len()],
    prompt_gemm: [Option<PromptFn>; GgmlType::ALL.len()],
    packed_gemm: [Option<GemmFn>; GgmlType::ALL.len()],
    packed_prompt_gemm: [Option<PromptFn>; GgmlType::ALL.len()],
    delta_rows: Option<DeltaRowsFn>,
    delta_replay: Option<DeltaReplayFn>,
    delta_steps: Option<DeltaStepsFn>,
}

fn type_index(ty: GgmlType) -> usize {
    GgmlType::ALL
        .iter()
        .position(|t| *t == ty)
        .expect("every GgmlType is in ALL")
}

fn scalar_quantize(ty: GgmlType) -> QuantizeFn {
    macro_rules! q {
        ($t:expr) => {
            |src: &[f32], dst: &mut [u8]| scalar::quantize_row($t, src, dst, None)
        };
    }
    match ty {
        GgmlType::F32 => q!(GgmlType::F32),
        GgmlType::F16 => q!(GgmlType::F16),
        GgmlType::BF16 => q!(GgmlType::BF16),
        // Activations use ggml's x86 converters, not the weight quantisers.
        GgmlType::Q8_0 => scalar::q8_0::quantize_act,
        GgmlType::Q8_1 => scalar::q8_1::quantize_act,
        GgmlType::Q8_K => q!(GgmlType::Q8_K),
        GgmlType::Q4_0 => q!(GgmlType::Q4_0),
        GgmlType::Q4_1 => q!(GgmlType::Q4_1),
        GgmlType::Q5_0 => q!(GgmlType::Q5_0),
        GgmlType::Q5_1 => q!(GgmlType::Q5_1),
        GgmlType::Q2_K => q!(GgmlType::Q2_K),
        GgmlType::Q3_K => q!(GgmlType::Q3_K),
        GgmlType::Q4_K => q!(GgmlType::Q4_K),
        GgmlType::Q5_K => q!(GgmlType::Q5_K),
        GgmlType::Q6_K => q!(GgmlType::Q6_K),
        GgmlType::IQ4_NL => q!(GgmlType::IQ4_NL),
        GgmlType::IQ4_XS => q!(GgmlType::IQ4_XS),
    }
}

fn scalar_vec_dot(ty: GgmlType) -> VecDotFn {
    macro_rules! d {
        ($t:expr) => {
            |n: usize, w: &[u8], a: &[u8]| scalar::vec_dot($t, n, w, a)
        };
    }
    match ty {
        GgmlType::F32 => d!(GgmlType::F32),
        GgmlType::F16 => d!(GgmlType::F16),
        GgmlType::BF16 => d!(GgmlType::BF16),
        GgmlType::Q8_0 => d!(GgmlType::Q8_0),
        GgmlType::Q8_1 => d!(GgmlType::Q8_1),
        GgmlType::Q8_K => d!(GgmlType::Q8_K),
        GgmlType::Q4_0 => d!(GgmlType::Q4_0),
        GgmlType::Q4_1 => d!(GgmlType::Q4_1),
        GgmlType::Q5_0 => d!(GgmlType::Q5_0),
        GgmlType::Q5_1 => d!(GgmlType::Q5_1),
        GgmlType::Q2_K => d!(GgmlType::Q2_K),
        GgmlType::Q3_K => d!(GgmlType::Q3_K),
        GgmlType::Q4_K => d!(GgmlType::Q4_K),
        GgmlType::Q5_K => d!(GgmlType::Q5_K),
        GgmlType::Q6_K => d!(GgmlType::Q6_K),
        GgmlType::IQ4_NL => d!(GgmlType::IQ4_NL),
        GgmlType::IQ4_XS => d!(GgmlType::IQ4_XS),
    }
}

/// Tier-specific kernels, where the tier has one for the type.
fn tier_vec_dot(isa: Isa, ty: GgmlType) -> Option<VecDotFn> {
    match isa {
        Isa::Scalar => None,
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => crate::x86::avx2::vec_dot_fn(ty),
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => {
            crate::x86::avx512::vec_dot_fn(ty).or_else(|| crate::x86::avx2::vec_dot_fn(ty))
        }
        #[cfg(target_arch = "aarch64")]
        Isa::Neon => crate::aarch64::neon::vec_dot_fn(ty),
        #[allow(unreachable_patterns)]
        _ => None,
    }
}

fn tier_gemm(isa: Isa, ty: GgmlType) -> Option<VecDotFn> {
    match (isa, ty) {
        #[cfg(target_arch = "x86_64")]
        (Isa::Avx2 | Isa::Avx512, GgmlType::F32) => crate::x86::avx2::gemm_f32_fn(),
        #[cfg(target_arch = "x86_64")]
        (Isa::Avx2 | Isa::Avx512, GgmlType::F16) => crate::x86::avx2::gemm_f16_fn(),
        _ => tier_vec_dot(isa, ty),
    }
}

// The tier_* lookups below share one shape (an x86-only arm, `let _ = ty` where it is compiled
// out), but each hands out its own kernel family for its own tiers; one plain match per table entry
// keeps visible which cfg arm serves it.
fn tier_ggml_repack(isa: Isa, ty: GgmlType) -> Option<VecDotFn> {
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 | Isa::Avx512 => crate::x86::avx2::ggml_repack_dot_fn(ty),
        _ => {
            let _ = ty;
            None
        }
    }
}

/// The tier's multi-row kernel in the order of [`tier_ggml_repack`] (a mat-vec
/// through a two-row kernel), where it has one.
fn tier_ggml_repack_rows(isa: Isa, ty: GgmlType) -> Option<GemmFn> {
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => crate::x86::avx512::gemm::ggml_repack_rows_fn(ty),
        _ => {
            let _ = ty;
            None
        }
    }
}

/// The tier's product on the file's rows in the order of its repacked
/// product ([`KernelTable::packed_order_rows`]), where it has one.
fn tier_packed_order_rows(isa: Isa, ty: GgmlType) -> Option<GemmFn> {
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => crate::x86::avx512::gemm::packed_order_gemm_fn(ty),
        _ => {
            let _ = ty;
            None
        }
    }
}

fn tier_ggml_repack_gemm(isa: Isa, ty: GgmlType) -> Option<VecDotFn> {
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 | Isa::Avx512 => crate::x86::avx2::ggml_repack_gemm_dot_fn(ty),
        _ => {
            let _ = ty;
            None
        }
    }
}

fn tier_delta_rows(isa: Isa) -> Option<DeltaRowsFn> {
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => Some(crate::x86::avx512::delta::delta_rows),
        _ => None,
    }
}

fn tier_delta_replay(isa: Isa) -> Option<DeltaReplayFn> {
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => Some(crate::x86::avx512::delta::delta_replay),
        _ => None,
    }
}

fn tier_delta_steps(isa: Isa) -> Option<DeltaStepsFn> {
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => Some(crate::x86::avx512::delta::delta_steps),
        _ => None,
    }
}

fn tier_tiled(isa: Isa, ty: GgmlType) -> Option<VecDotFn> {
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 | Isa::Avx512 => crate::x86::avx2::tiled_dot_fn(ty),
        _ => {
            let _ = ty;
            None
        }
    }
}

/// Tier-specific multi-row kernels (`None`: callers loop over `vec_dot`).
fn tier_gemm_rows(isa: Isa, ty: GgmlType) -> Option<GemmFn> {
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => match ty {
            GgmlType::F32 => crate::x86::avx512::gemm_f32::gemm_fn(),
            _ => crate::x86::avx512::gemm::gemm_fn(ty),
        },
        _ => {
            let _ = ty;
            None
        }
    }
}

fn tier_prompt_gemm(isa: Isa, ty: GgmlType) -> Option<PromptFn> {
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => crate::x86::avx512::prompt::gemm_fn(ty),
        _ => {
            let _ = ty;
            None
        }
    }
}

/// The tier's prompt-batch product reading weights repacked for it
/// ([`crate::repack`]), with [`tier_prompt_gemm`]'s bits.
fn tier_packed_prompt_gemm(isa: Isa, ty: GgmlType) -> Option<PromptFn> {
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => crate::x86::avx512::prompt::packed_gemm_fn(ty),
        _ => {
            let _ = ty;
            None
        }
    }
}

/// The tier's product on weights repacked for it ([`crate::repack`]).
fn tier_packed_gemm(isa: Isa, ty: GgmlType) -> Option<GemmFn> {
    match (isa, ty) {
        #[cfg(target_arch = "x86_64")]
        (Isa::Avx512, GgmlType::IQ4_XS) => crate::x86::avx512::iq4_r8::gemm_fn(),
        #[cfg(target_arch = "x86_64")]
        (Isa::Avx512, GgmlType::Q4_K) => crate::x86::avx512::q4k_r8::gemm_fn(),
        #[cfg(target_arch = "x86_64")]
        (Isa::Avx512, GgmlType::Q3_K) => crate::x86::avx512::q3k_r8::gemm_fn(),
        #[cfg(target_arch = "x86_64")]
        (Isa::Avx512, GgmlType::Q6_K) => crate::x86::avx512::q6k_r8::gemm_fn(),
        #[cfg(target_arch = "x86_64")]
        (Isa::Avx512, GgmlType::Q5_K) => crate::x86::avx512::q5k_r8::gemm_fn(),
        #[cfg(target_arch = "x86_64")]
        (Isa::Avx512, GgmlType::Q8_0) => crate::x86::avx512::q80_r8::gemm_fn(),
        _ => None,
    }
}

fn tier_quantize(isa: Isa, ty: GgmlType) -> Option<QuantizeFn> {
    match isa {
        Isa::Scalar => None,
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => crate::x86::avx2::quantize_fn(ty),
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => {
            crate::x86::avx512::quantize_fn(ty).or_else(|| crate::x86::avx2::quantize_fn(ty))
        }
        #[cfg(target_arch = "aarch64")]
        Isa::Neon => crate::aarch64::neon::quantize_fn(ty),
        #[allow(unreachable_patterns)]
        _ => None,
    }
}

impl KernelTable {
    /// The table for `isa`; panics when the host lacks it (check `available()`).
    pub fn new(isa: Isa) -> KernelTable {
        assert!(isa.available(), "{isa} is not available on this CPU");
        KernelTable {
            isa,
            vec_dot: GgmlType::ALL
                .map(|t| tier_vec_dot(isa, t).unwrap_or_else(|| scalar_vec_dot(t))),
            gemm: GgmlType::ALL.map(|t| tier_gemm_rows(isa, t)),
            quantize: GgmlType::ALL
                .map(|t| tier_quantize(isa, t).unwrap_or_else(|| scalar_quantize(t))),
            gemm_f32: tier_gemm(isa, GgmlType::F32)
                .unwrap_or_else(|| scalar_vec_dot(GgmlType::F32)),
            gemm_f16: tier_gemm(isa, GgmlType::F16)
                .unwrap_or_else(|| scalar_vec_dot(GgmlType::F16)),
            ggml_repack: GgmlType::ALL.map(|t| tier_ggml_repack(isa, t)),
            tiled: GgmlType::ALL.map(|t| tier_tiled(isa, t)),
            ggml_repack_gemm: GgmlType::ALL.map(|t| tier_ggml_repack_gemm(isa, t)),
            ggml_repack_rows: GgmlType::ALL.map(|t| tier_ggml_repack_rows(isa, t)),
            packed_order_rows: GgmlType::ALL.map(|t| tier_packed_order_rows(isa, t)),
            delta_rows: tier_delta_rows(isa),
            delta_replay: tier_delta_replay(isa),
            delta_steps: tier_delta_steps(isa),
            prompt_gemm: GgmlType::ALL.map(|t| tier_prompt_gemm(isa, t)),
            packed_gemm: GgmlType::ALL.map(|t| tier_packed_gemm(isa, t)),
            packed_prompt_gemm: GgmlType::ALL.map(|t| tier_packed_prompt_gemm(isa, t)),
        }
    }

    /// The F32 × F32 dot of one output of a batched product (≥ 2 activation
    /// rows, `n % 16 == 0`, output rows a multiple of 4): on x86 the order of
    /// llamafile's tinyBLAS that ggml uses there (one 16-lane FMA
    /// accumulator, `_mm512_reduce_add_ps`); elsewhere the tier's F32 dot.
    #[inline]
    pub fn gemm_f32(&self) -> VecDotFn {
        self.gemm_f32
    }

    /// The dot for weights of type `ty` in rows of `n_out` where ggml's x86
    /// build repacks them (CPU_REPACK: Q4_K with `n_out % 8 == 0`), whose
    /// kernels sum in their own order; the plain `vec_dot` elsewhere.
    #[inline]
    pub fn weight_dot(&self, ty: GgmlType, n_out: usize) -> VecDotFn {
        match self.ggml_repack[type_index(ty)] {
            Some(f) if n_out.is_multiple_of(8) => f,
            _ => self.vec_dot(ty),
        }
    }

    /// The dot for one output of a product of `rows` activation rows (for a
    /// routed expert: the rows routed to it) with weights of type `ty` in
    /// rows of `n_out`, in the order llama.cpp's x86 build uses there:
    /// repacked weights their kernel's ([`KernelTable::weight_dot`]); K-quants
    /// on ≥ 8 rows the tiled matmul's; `vec_dot` otherwise.
    #[inline]
    pub fn batch_dot(&self, ty: GgmlType, n_out: usize, rows: usize, mode: Mode) -> VecDotFn {
        if mode != Mode::Ggml {
            return self.weight_dot(ty, n_out);
        }
        if let Some(f) = self.ggml_repack[type_index(ty)] {
            if n_out.is_multiple_of(8) {
                return f;
            }
        }
        match self.tiled[type_index(ty)] {
            Some(f) if rows >= 8 => f,
            _ => self.vec_dot(ty),
        }
    }

    /// For a plain (not per-expert) product of `rows` activation rows: where
    /// ggml repacks the weights, the dot of its gemm kernel, which takes the
    /// first `rows − rows % 4` rows (the rest take [`KernelTable::batch_dot`]).
    #[inline]
    pub fn ggml_repack_gemm_dot(&self, ty: GgmlType, n_out: usize, mode: Mode) -> Option<VecDotFn> {
        if mode != Mode::Ggml {
            return None;
        }
        match self.ggml_repack_gemm[type_index(ty)] {
            Some(f) if n_out.is_multiple_of(8) => Some(f),
            _ => None,
        }
    }

    /// As [`KernelTable::gemm_f32`] for F16 weights (activations in F16).
    #[inline]
    pub fn gemm_f16(&self) -> VecDotFn {
        self.gemm_f16
    }

    #[inline]
    pub fn vec_dot(&self, ty: GgmlType) -> VecDotFn {
        self.vec_dot[type_index(ty)]
    }

    /// The multi-row kernel for a batch of `rows` activation rows whose every
    /// output is [`KernelTable::batch_dot`]'s: on weights ggml repacks, the
    /// kernel in the repacked order for one row (a mat-vec) and none for
    /// more; elsewhere the tier's `vec_dot`-order kernel, in llama.cpp batch
    /// order only where that order is `vec_dot`'s too (not for F32 / F16,
    /// which take tinyBLAS's). `None` otherwise, so a batch row always
    /// equals what the per-row path would give, bit for bit.
    pub fn gemm_for_batch(
        &self,
        ty: GgmlType,
        n_out: usize,
        rows: usize,
        mode: Mode,
    ) -> Option<GemmFn> {
        let i = type_index(ty);
        let repacked = self.ggml_repack[i].is_some() && n_out.is_multiple_of(8);
        if repacked && rows == 1 {
            // A mat-vec on repacked weights: the kernel in their order (the
            // dot `batch_dot` gives one row in either batch order).
            return self.ggml_repack_rows[i];
        }
        let ggml_not_vec_dot = mode == Mode::Ggml
            && (matches!(ty, GgmlType::F32 | GgmlType::F16)
                || (self.tiled[i].is_some() && rows >= 8));
        if repacked || ggml_not_vec_dot {
            return None;
        }
        self.gemm(ty)
    }

    /// The tier's gated-delta-rule token step over a value head's state
    /// rows, when it has one: the same bits as decaying, dotting (this
    /// tier's F32 `vec_dot`) and updating the rows one by one.
    #[inline]
    pub fn delta_rows(&self) -> Option<DeltaRowsFn> {
        self.delta_rows
    }

    /// The tier's replay of several positions into a value head's state
    /// (the bits of [`KernelTable::delta_rows`] once per position), when it
    /// has one.
    #[inline]
    pub fn delta_replay(&self) -> Option<DeltaReplayFn> {
        self.delta_replay
    }

    /// The tier's several positions of the delta rule with read-outs,
    /// starting from a state it may leave untouched (the bits of
    /// [`KernelTable::delta_rows`] once per position), when it has one.
    #[inline]
    pub fn delta_steps(&self) -> Option<DeltaStepsFn> {
        self.delta_steps
    }

    /// The tier's product for a prompt batch of weight type `ty`, when it
    /// has one (only in [`Mode::Prompt`]): faster, in its own f32 order (not
    /// `vec_dot`'s bits), so never for a verify pass.
    #[inline]
    pub fn prompt_gemm(&self, ty: GgmlType, mode: Mode) -> Option<PromptFn> {
        if mode != Mode::Prompt {
            return None;
        }
        self.prompt_gemm[type_index(ty)]
    }

    /// The prompt-batch product ([`Mode::Prompt`] only) reading weights of
    /// type `ty` repacked eight rows at a time: [`KernelTable::prompt_gemm`]'s
    /// outputs from the repacked copy, so a mapped file's original rows may
    /// leave memory.
    #[inline]
    pub fn packed_prompt_gemm(&self, ty: GgmlType, mode: Mode) -> Option<PromptFn> {
        if mode != Mode::Prompt {
            return None;
        }
        self.packed_prompt_gemm[type_index(ty)]
    }

    /// The product on weights of type `ty` repacked eight rows at a time
    /// ([`crate::repack`]), when the tier has one and `mode` is not
    /// llama.cpp's order ([`Mode::Ggml`]). It takes the repacked bytes, serves any
    /// number of activation rows and gives every output the same bits for
    /// any of them (a verify batch reproduces decoding); a GemmFn whose
    /// `w_rows` is a multiple of 8.
    #[inline]
    pub fn packed_gemm(&self, ty: GgmlType, mode: Mode) -> Option<GemmFn> {
        if mode == Mode::Ggml {
            return None;
        }
        self.packed_gemm[type_index(ty)]
    }

    /// A product on the file's rows of `ty` (any number of rows and
    /// activation rows) that gives every output the bits of
    /// [`KernelTable::packed_gemm`] on the same rows repacked, when the tier
    /// has one and `mode` is not llama.cpp's order: a mat-vec whose file rows
    /// stay in memory beside the repacked copy reads them through it
    /// ([`crate::matmul::QMatrix::with_file_matvec`]).
    pub fn packed_order_rows(&self, ty: GgmlType, mode: Mode) -> Option<GemmFn> {
        if mode == Mode::Ggml || self.packed_gemm(ty, mode).is_none() {
            return None;
        }
        self.packed_order_rows[type_index(ty)]
    }

    /// The tier's multi-row kernel for weight type `ty`, when it has one
    /// (bit-identical to looping over [`KernelTable::vec_dot`]).
    #[inline]
    pub fn gemm(&self, ty: GgmlType) -> Option<GemmFn> {
        self.gemm[type_index(ty)]
    }

    /// The quantiser into activation type `act_ty` (a `vec_dot_type()`).
    #[inline]
    pub fn quantize(&self, act_ty: GgmlType) -> QuantizeFn {
        self.quantize[type_index(act_ty)]
    }
}

static ACTIVE: OnceLock<KernelTable> = OnceLock::new();

/// Chooses the tier from `CLOVER_ISA` (or detection) once. Call at start-up to
/// surface a bad `CLOVER_ISA` as an error; later calls return the same tier.
pub fn init() -> Result<Isa, IsaError> {
    if let Some(t) = ACTIVE.get() {
        return Ok(t.isa);
    }
    let isa = Isa::from_env()?;
    Ok(ACTIVE.get_or_init(|| KernelTable::new(isa)).isa)
}

impl KernelTable {
    /// The table of the tier this process chose ([`init`]; the detected tier
    /// when `init` was never called or `CLOVER_ISA` is invalid). A model is
    /// bound to it once, at load, and hands it down.
    pub fn chosen() -> &'static KernelTable {
        ACTIVE.get_or_init(|| KernelTable::new(Isa::from_env().unwrap_or_else(|_| Isa::detect())))
    }
}

impl fmt::Debug for KernelTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KernelTable")
            .field("isa", &self.isa)
            .finish()
    }
}
