//! The signatures every tier's kernels share, as function-pointer types. The
//! tiers (`scalar`, `x86`, `aarch64`) implement them and `isa` collects them
//! into a table; both import this module, never each other.

/// Dot product of `n` weights (raw bytes of the weight type) with `n`
/// activations in the weight type's `vec_dot_type()` layout.
pub type VecDotFn = fn(n: usize, w: &[u8], act: &[u8]) -> f32;
/// Many dot products at once: `w_rows` contiguous weight rows (`w`) against
/// `act_rows` contiguous activation rows (`act`), all of `n` elements, into
/// `out[i * out_stride + t] = vec_dot(n, w_i, act_t)`. A tier's kernel equals
/// that tier's `VecDotFn` bit for bit on every output.
/// One token of the gated delta rule over one value head's state rows
/// (`s`, `q`, `k`, `v`, decay `e^g`, `β`, read-out scale, `out`; `out` empty:
/// the update alone): see `x86::avx512::delta::delta_rows`.
pub type DeltaRowsFn = fn(&mut [f32], &[f32], &[f32], &[f32], f32, f32, f32, &mut [f32]);

/// One position of a replay ([`DeltaReplayFn`], [`DeltaStepsFn`]): the key,
/// the value head's values (one per state row), the decay `e^g` and `β`;
/// for [`DeltaStepsFn`] the read-out query `q` (empty: no read-out).
#[derive(Clone, Copy, Debug)]
pub struct ReplayStep<'a> {
    pub k: &'a [f32],
    pub v: &'a [f32],
    pub q: &'a [f32],
    pub decay: f32,
    pub beta: f32,
}

/// Several positions of the gated delta rule over one value head's state
/// rows (`s`, `[v.len()][k.len()]`), without read-out: the bits of one
/// [`DeltaRowsFn`] call per position in order, each row kept in registers
/// across the positions. `false` (nothing done) for a shape it does not take.
pub type DeltaReplayFn = fn(&mut [f32], &[ReplayStep]) -> bool;

/// Several positions of the gated delta rule over one value head's state
/// rows with their read-outs: the bits of one [`DeltaRowsFn`] call per
/// position in order (`out[t·d_v + j]` = position t's read-out of row j,
/// times `scale`, for the positions with a `q`), each row kept in registers
/// across the positions. The rows start from `from` when given (which is
/// left untouched), else from `s`; the final rows go to `s` only with
/// `store` (`s` may be empty without it). `false` (nothing done) for a
/// shape it does not take.
pub type DeltaStepsFn = fn(
    s: &mut [f32],
    from: Option<&[f32]>,
    store: bool,
    steps: &[ReplayStep],
    scale: f32,
    out: &mut [f32],
) -> bool;

pub type GemmFn = fn(
    n: usize,
    w: &[u8],
    w_rows: usize,
    act: &[u8],
    act_rows: usize,
    out: &mut [f32],
    out_stride: usize,
);
/// A prompt-batch product writing token-major output:
/// `out[t·out_stride + i] = W_i · x_t` for weight rows `i < w_rows` and
/// activation rows `t < act_rows` (the rest as [`GemmFn`]).
///
/// # Safety
/// `out` must be valid for writes at every such index, and no other thread
/// may read or write those elements during the call.
pub type PromptFn = unsafe fn(
    n: usize,
    w: &[u8],
    w_rows: usize,
    act: &[u8],
    act_rows: usize,
    out: *mut f32,
    out_stride: usize,
);
/// Quantises an f32 activation row into an activation type (Q8_0, Q8_1, Q8_K,
/// F16, BF16, F32); `dst` is exactly `row_bytes(src.len())` long.
pub type QuantizeFn = fn(src: &[f32], dst: &mut [u8]);
