//! Where a forward pass spends its time, op kind by op kind (`clover bench
//! --profile`, the TUI's timing panel).
//!
//! While a profile runs ([`start`] … [`finish`]), a watcher of the pass's
//! hook (`observe.rs`) follows the op kinds the pass enters
//! (`observe::enter`): a stopwatch that charges the time since the last
//! switch to the kind that was running and, when the kind is left, switches
//! back. The weight products' streamed bytes (`observe::bytes`) go to the
//! current kind. Only the thread that drives the forward pass switches; the
//! kernels' worker threads run inside one kind, so a kind's time is wall time
//! on the driving thread, and the kinds add up to the pass.

use std::time::Instant;

pub use super::observe::Op;
use super::observe::{self, Observer, Seen};

/// The marks a pass makes (the hook's): an op kind entered, bytes streamed.
pub use super::observe::{bytes, enter};

const N: usize = Op::ALL.len();

/// The profile's watcher ([`super::observe`]): a stack of the op kinds
/// entered, each switch charging the time since the last one to the kind
/// on top. Only the thread that started the profile (the one that drives
/// the passes) is followed.
struct Profiler {
    thread: std::thread::ThreadId,
    stack: Vec<Op>,
    last: Instant,
    p: Profile,
}

impl Profiler {
    fn charge(&mut self) {
        let now = Instant::now();
        let top = *self.stack.last().unwrap_or(&Op::Other);
        self.p.ns[top.index()] += (now - self.last).as_nanos() as u64;
        self.last = now;
    }
}

impl Observer for Profiler {
    fn kind(&self) -> &'static str {
        KIND
    }

    fn see(&mut self, _name: &str, _il: isize, _rows: usize, seen: &Seen) {
        if std::thread::current().id() != self.thread {
            return;
        }
        match *seen {
            Seen::Enter(op) => {
                self.charge();
                self.stack.push(op);
            }
            Seen::Leave => {
                self.charge();
                if self.stack.len() > 1 {
                    self.stack.pop();
                }
            }
            Seen::Bytes(n) => {
                let top = *self.stack.last().unwrap_or(&Op::Other);
                self.p.bytes[top.index()] += n as u64;
            }
            _ => {}
        }
    }

    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }
}

const KIND: &str = "profile";

/// Starts a profile on this thread, discarding anything collected before.
pub fn start() {
    observe::install(Box::new(Profiler {
        thread: std::thread::current().id(),
        stack: vec![Op::Other],
        last: Instant::now(),
        p: Profile::default(),
    }));
}

/// Stops the profile and returns what it collected.
pub fn finish() -> Profile {
    let Some(mut o) = observe::remove(KIND) else {
        return Profile::default();
    };
    match o.as_any_mut().downcast_mut::<Profiler>() {
        Some(pr) => {
            pr.charge();
            std::mem::take(&mut pr.p)
        }
        None => Profile::default(),
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
