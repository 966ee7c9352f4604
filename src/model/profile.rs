//! Where a forward pass spends its time, op kind by op kind (`clover bench
//! --profile`, the TUI's timing panel).
//!
//! While a profile runs ([`start`] … [`finish`]), the forward pass marks the
//! op kind it is in with [`enter`]: a stopwatch that charges the time since
//! the last switch to the kind that was running and, when the returned guard
//! drops, switches back. The weight products add the bytes they stream
//! ([`bytes`]) to the current kind. Only the thread that drives the forward
//! pass switches; the kernels' worker threads run inside one kind, so a
//! kind's time is wall time on the driving thread, and the kinds add up to
//! the pass.
//!
//! Off (the normal case) each mark costs one relaxed atomic load.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

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

    fn index(self) -> usize {
        self as usize
    }
}

const N: usize = Op::ALL.len();

static ON: AtomicBool = AtomicBool::new(false);
static CUR: AtomicUsize = AtomicUsize::new(0);
/// Nanoseconds since [`epoch`] of the last switch.
static LAST: AtomicU64 = AtomicU64::new(0);
static NS: [AtomicU64; N] = [const { AtomicU64::new(0) }; N];
static BYTES: [AtomicU64; N] = [const { AtomicU64::new(0) }; N];

fn epoch() -> Instant {
    static E: OnceLock<Instant> = OnceLock::new();
    *E.get_or_init(Instant::now)
}

fn now_ns() -> u64 {
    epoch().elapsed().as_nanos() as u64
}

/// The kind at index `i` (the enum is declared in [`Op::ALL`]'s order).
fn op_at(i: usize) -> Op {
    Op::ALL[i]
}

/// Whether a profile runs.
#[inline]
pub fn on() -> bool {
    ON.load(Ordering::Relaxed)
}

/// Charges the time since the last switch to the running kind and makes
/// `op` the running one; returns the kind that was running.
fn switch(op: Op) -> Op {
    let now = now_ns();
    let prev = CUR.swap(op.index(), Ordering::Relaxed);
    let last = LAST.swap(now, Ordering::Relaxed);
    NS[prev].fetch_add(now.saturating_sub(last), Ordering::Relaxed);
    op_at(prev)
}

/// Starts a profile, discarding anything collected before.
pub fn start() {
    for (t, b) in NS.iter().zip(&BYTES) {
        t.store(0, Ordering::Relaxed);
        b.store(0, Ordering::Relaxed);
    }
    CUR.store(Op::Other.index(), Ordering::Relaxed);
    LAST.store(now_ns(), Ordering::Relaxed);
    ON.store(true, Ordering::Relaxed);
}

/// Stops the profile and returns what it collected.
pub fn finish() -> Profile {
    switch(Op::Other);
    ON.store(false, Ordering::Relaxed);
    let mut p = Profile::default();
    for op in Op::ALL {
        p.ns[op.index()] = NS[op.index()].load(Ordering::Relaxed);
        p.bytes[op.index()] = BYTES[op.index()].load(Ordering::Relaxed);
    }
    p
}

/// Switches back to the kind that ran before [`enter`] when dropped.
#[must_use = "the op kind ends when the guard drops"]
pub struct Guard(Option<Op>);

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(prev) = self.0 {
            if on() {
                switch(prev);
            }
        }
    }
}

/// Marks `op` as running until the guard drops (nothing when off).
#[inline]
pub fn enter(op: Op) -> Guard {
    Guard(on().then(|| switch(op)))
}

/// Adds `n` streamed bytes to the running kind.
#[inline]
pub fn bytes(n: usize) {
    if on() {
        BYTES[CUR.load(Ordering::Relaxed)].fetch_add(n as u64, Ordering::Relaxed);
    }
}

/// Time and bytes by op kind.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Profile {
    pub ns: [u64; N],
    pub bytes: [u64; N],
}

impl Profile {
    pub fn ns(&self, op: Op) -> u64 {
        self.ns[op.index()]
    }

    pub fn bytes(&self, op: Op) -> u64 {
        self.bytes[op.index()]
    }

    pub fn total_ns(&self) -> u64 {
        self.ns.iter().sum()
    }

    /// Adds `other` into `self`.
    pub fn add(&mut self, other: &Profile) {
        for i in 0..N {
            self.ns[i] += other.ns[i];
            self.bytes[i] += other.bytes[i];
        }
    }

    /// The table `clover bench --profile` prints: per kind, time per token,
    /// share of the pass, bytes per token and their rate, over `tokens`
    /// tokens, beside the machine's read probe (`probe_gbs`, if measured).
    pub fn table(&self, title: &str, tokens: usize, probe_gbs: Option<f64>) -> String {
        self.table_per(title, "token", tokens, probe_gbs)
    }

    /// [`Profile::table`] per `unit` (a token, a pass) over `count` of them.
    pub fn table_per(
        &self,
        title: &str,
        unit: &str,
        count: usize,
        probe_gbs: Option<f64>,
    ) -> String {
        use std::fmt::Write;
        let n = count.max(1) as f64;
        let plural = if unit.ends_with('s') { "es" } else { "s" };
        let total = self.total_ns().max(1) as f64;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{title}: {:.3} ms/{unit} over {count} {unit}{plural}{}",
            total / n / 1e6,
            probe_gbs.map_or(String::new(), |g| format!("; read probe {g:.1} GB/s"))
        );
        let _ = writeln!(
            s,
            "  {:<22} {:>10} {:>7} {:>11} {:>8}",
            "op",
            format!("ms/{unit}"),
            "share",
            format!("MiB/{unit}"),
            "GB/s"
        );
        let row = |s: &mut String, name: &str, ns: f64, b: f64| {
            let gbs = if ns > 0.0 && b > 0.0 {
                format!("{:.1}", b / ns)
            } else {
                "-".to_string()
            };
            let _ = writeln!(
                s,
                "  {name:<22} {:>10.3} {:>6.1}% {:>11.1} {gbs:>8}",
                ns / n / 1e6,
                100.0 * ns / total,
                b / n / (1u64 << 20) as f64,
            );
        };
        for op in Op::ALL {
            let (ns, b) = (self.ns(op) as f64, self.bytes(op) as f64);
            if ns > 0.0 || b > 0.0 {
                row(&mut s, op.name(), ns, b);
            }
        }
        let all_bytes: u64 = self.bytes.iter().sum();
        row(&mut s, "total", total, all_bytes as f64);
        s
    }
}
