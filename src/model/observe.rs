//! The one hook of a forward pass: whatever watches the model work is told
//! through [`see`], with a name, a layer and a number of rows, in the manner
//! of ggml's graph callback.
//!
//! What a pass shows ([`Seen`]): its named activations (ggml's graph names:
//! `attn_norm`, `l_out`, …), the input rows of its weight products (under the
//! weight's tensor name), the op kind it is in and the bytes it streams, the
//! experts it routes to and the time a layer's parts take. The watchers:
//!
//! - the tensor dumps (`CLOVER_DUMP_DIR`, installed at the first pass),
//! - the op profile (`profile::start` … `finish`),
//! - the importance-matrix capture (`capture::start` … `finish`),
//! - a sequence's statistics for the UI ([`super::state::Stats`]), which a
//!   pass shows its own rows directly, beside the process-wide watchers.
//!
//! Off (no watcher installed, the normal case) every call costs one relaxed
//! atomic load and builds nothing.

use std::path::PathBuf;
use std::sync::atomic::{AtomicIsize, AtomicU8, Ordering};
use std::sync::{Mutex, MutexGuard};

/// What a pass shows at one point.
#[derive(Clone, Copy, Debug)]
pub enum Seen<'a> {
    /// An activation: `rows` rows of the named tensor.
    Tensor(&'a [f32]),
    /// The input of a product with the named weight: `rows` rows of `n_in`.
    Product {
        x: &'a [f32],
        n_in: usize,
    },
    /// The input of the named expert stack: `(expert, row of n_in)`.
    Routed {
        n_expert: usize,
        n_in: usize,
        rows: &'a [(usize, &'a [f32])],
    },
    /// The pass enters op kind `Op` (until the matching `Leave`).
    Enter(Op),
    Leave,
    /// Bytes streamed by the op kind that runs.
    Bytes(usize),
    /// `[rows][k]` experts the router picked (best first).
    Experts(&'a [usize]),
    /// Nanoseconds a part of the layer took (`mixer`, `moe`, `head`).
    Time(u64),
}

/// A watcher of passes.
pub trait Observer: Send {
    /// Which watcher this is (one of each at a time).
    fn kind(&self) -> &'static str;
    /// Whether it looks at activations (`Tensor`): off, the pass does not
    /// build the ones it would build only to show them.
    fn wants_tensors(&self) -> bool {
        false
    }
    fn see(&mut self, name: &str, il: isize, rows: usize, seen: &Seen);
    /// The watcher itself, for its owner to read its findings.
    fn as_any_mut(&mut self) -> &mut dyn std::any::Any;
}

/// 0: not yet initialised; 1: no watcher; 2: watchers, none wants tensors;
/// 3: a watcher wants tensors.
static STATE: AtomicU8 = AtomicU8::new(0);
static HOOKS: Mutex<Vec<Box<dyn Observer>>> = Mutex::new(Vec::new());
static LAYER: AtomicIsize = AtomicIsize::new(-1);

fn hooks() -> MutexGuard<'static, Vec<Box<dyn Observer>>> {
    // A panic elsewhere while holding the lock leaves the watchers as they were.
    HOOKS.lock().unwrap_or_else(|e| e.into_inner())
}

#[inline]
fn state() -> u8 {
    match STATE.load(Ordering::Relaxed) {
        0 => init(),
        s => s,
    }
}

#[cold]
fn init() -> u8 {
    let mut h = hooks();
    if STATE.load(Ordering::Relaxed) == 0 {
        if let Some(dir) = std::env::var_os("CLOVER_DUMP_DIR") {
            h.push(Box::new(Dump(PathBuf::from(dir))));
        }
        refresh(&h);
    }
    STATE.load(Ordering::Relaxed)
}

fn refresh(h: &[Box<dyn Observer>]) {
    let s = match (h.is_empty(), h.iter().any(|o| o.wants_tensors())) {
        (true, _) => 1,
        (false, false) => 2,
        (false, true) => 3,
    };
    STATE.store(s, Ordering::Relaxed);
}

/// Whether any watcher is installed.
#[inline]
pub fn on() -> bool {
    state() >= 2
}

/// Whether a watcher looks at activations.
#[inline]
pub fn wants_tensors() -> bool {
    state() == 3
}

/// Installs `o`, replacing the watcher of the same kind.
pub fn install(o: Box<dyn Observer>) {
    state();
    let mut h = hooks();
    h.retain(|x| x.kind() != o.kind());
    h.push(o);
    refresh(&h);
}

/// Removes and returns the watcher of `kind`.
pub fn remove(kind: &str) -> Option<Box<dyn Observer>> {
    state();
    let mut h = hooks();
    let i = h.iter().position(|x| x.kind() == kind)?;
    let o = h.remove(i);
    refresh(&h);
    Some(o)
}

/// Runs `f` on the installed watcher of `kind`.
pub fn with<R>(kind: &str, f: impl FnOnce(&mut dyn Observer) -> R) -> Option<R> {
    let mut h = hooks();
    h.iter_mut()
        .find(|x| x.kind() == kind)
        .map(|o| f(o.as_mut()))
}

/// The hook: shows every watcher what the pass did at `name`, layer `il`
/// (−1: none), over `rows` rows.
#[inline]
pub fn see(name: &str, il: isize, rows: usize, seen: Seen) {
    if on() {
        see_all(name, il, rows, &seen);
    }
}

#[cold]
fn see_all(name: &str, il: isize, rows: usize, seen: &Seen) {
    for o in hooks().iter_mut() {
        o.see(name, il, rows, seen);
    }
}

/// Sets the layer [`here`] names (the pass calls it per layer).
pub fn set_layer(il: usize) {
    if on() {
        LAYER.store(il as isize, Ordering::Relaxed);
    }
}

/// The layer last given to [`set_layer`].
pub fn layer() -> isize {
    LAYER.load(Ordering::Relaxed)
}

/// An activation of `rows` rows, under the layer last set.
#[inline]
pub fn here(name: &str, rows: usize, data: &[f32]) {
    if wants_tensors() {
        see_all(name, layer(), rows, &Seen::Tensor(data));
    }
}

/// An activation of layer `il` (−1: none), `rows` rows.
#[inline]
pub fn tensor(name: &str, il: isize, rows: usize, data: &[f32]) {
    if wants_tensors() {
        see_all(name, il, rows, &Seen::Tensor(data));
    }
}

/// Leaves the op kind entered by [`enter`] when dropped.
#[must_use = "the op kind ends when the guard drops"]
pub struct Span(bool);

impl Drop for Span {
    fn drop(&mut self) {
        if self.0 {
            see("", -1, 0, Seen::Leave);
        }
    }
}

/// Marks `op` as running until the guard drops (nothing when off).
#[inline]
pub fn enter(op: Op) -> Span {
    let on = on();
    if on {
        see_all("", -1, 0, &Seen::Enter(op));
    }
    Span(on)
}

/// `n` bytes streamed by the op kind that runs.
#[inline]
pub fn bytes(n: usize) {
    see("", -1, 0, Seen::Bytes(n));
}

/// The input of a product through weight `name`: `x`, rows of `n_in`.
#[inline]
pub fn product(name: &str, x: &[f32], n_in: usize) {
    if on() {
        let rows = x.len() / n_in.max(1);
        see_all(name, layer(), rows, &Seen::Product { x, n_in });
    }
}

/// The input of expert stack `name` (`n_expert` experts): each `(expert,
/// row)` is one row of `n_in` sent to that expert.
#[inline]
pub fn routed<'x>(
    name: &str,
    n_expert: usize,
    n_in: usize,
    rows: impl Iterator<Item = (usize, &'x [f32])>,
) {
    if on() {
        let rows: Vec<(usize, &[f32])> = rows.collect();
        let seen = Seen::Routed {
            n_expert,
            n_in,
            rows: &rows,
        };
        see_all(name, layer(), rows.len(), &seen);
    }
}

/// The tensor dumps: `CLOVER_DUMP_DIR/NAME-IL.f32` (layer −1: `NAME.f32`),
/// raw little-endian f32, for layer-by-layer comparisons with llama.cpp
/// (`scripts/oracle/llama_logits.c dump` writes the same names).
struct Dump(PathBuf);

impl Observer for Dump {
    fn kind(&self) -> &'static str {
        "dump"
    }

    fn wants_tensors(&self) -> bool {
        true
    }

    fn see(&mut self, name: &str, il: isize, _rows: usize, seen: &Seen) {
        let Seen::Tensor(data) = seen else { return };
        let file = if il < 0 {
            format!("{name}.f32")
        } else {
            format!("{name}-{il}.f32")
        };
        let bytes: Vec<u8> = data.iter().flat_map(|v| v.to_le_bytes()).collect();
        if let Err(e) = crate::output::write_file_atomic(&self.0.join(file), &bytes) {
            eprintln!("CLOVER_DUMP_DIR: {e}");
        }
    }

    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }
}

/// The op kinds of a forward pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// The RMS norms around every block and inside the mixers.
    Norm,
    /// The GDN input and output projections.
    GdnProj,
    /// The GDN causal convolution.
    Conv,
    /// The GDN gates, q/k normalisation and the delta rule.
    Recurrence,
    /// The attention q/k/v and output projections.
    AttnProj,
    /// Attention itself: q/k norms, rope, the cache, scores and values.
    Attention,
    /// The router's product and top-k.
    Router,
    /// The routed experts (grouping, products, weighted sum).
    Experts,
    /// The shared expert and its gate.
    SharedExpert,
    /// The final norm and the output head.
    Head,
    /// Token embedding, residual adds, state copies: everything unmarked
    /// (in the chat, whose profile spans whole steps, sampling too).
    Other,
}

impl Op {
    /// Every kind, in declaration order (so `op as usize` indexes it).
    pub const ALL: [Op; 11] = [
        Op::Norm,
        Op::GdnProj,
        Op::Conv,
        Op::Recurrence,
        Op::AttnProj,
        Op::Attention,
        Op::Router,
        Op::Experts,
        Op::SharedExpert,
        Op::Head,
        Op::Other,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Op::Other => "other",
            Op::Norm => "norms",
            Op::GdnProj => "GDN projections",
            Op::Conv => "GDN conv",
            Op::Recurrence => "GDN recurrence",
            Op::AttnProj => "attention projections",
            Op::Attention => "attention",
            Op::Router => "router",
            Op::Experts => "routed experts",
            Op::SharedExpert => "shared expert",
            Op::Head => "output head",
        }
    }

    /// A short name, for narrow displays (the chat's timing panel).
    pub fn short(self) -> &'static str {
        match self {
            Op::Other => "other",
            Op::Norm => "norm",
            Op::GdnProj => "GDN proj",
            Op::Conv => "conv",
            Op::Recurrence => "recur",
            Op::AttnProj => "attn proj",
            Op::Attention => "attn",
            Op::Router => "router",
            Op::Experts => "experts",
            Op::SharedExpert => "shared",
            Op::Head => "head",
        }
    }

    pub(crate) fn index(self) -> usize {
        self as usize
    }
}
