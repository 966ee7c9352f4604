//! `/metrics`: counters in Prometheus' text format.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use super::conn::ConnStats;
use super::done::Done;

#[derive(Default)]
struct Counts {
    by_status: BTreeMap<u16, u64>,
    prompt_tokens: u64,
    prompt_ms: f64,
    predicted_tokens: u64,
    predicted_ms: f64,
    drafted: u64,
    accepted: u64,
}

/// What the server has done since it started.
#[derive(Default)]
pub struct Metrics {
    counts: Mutex<Counts>,
    /// The connections' counters (kept by `conn`).
    pub conns: Arc<ConnStats>,
}

impl Metrics {
    fn lock(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A response went out with `status`.
    pub fn request(&self, status: u16) {
        *self.lock().by_status.entry(status).or_default() += 1;
    }

    /// A generation finished.
    pub fn finished(&self, d: &Done) {
        let mut c = self.lock();
        c.prompt_tokens += (d.prompt_n - d.cached_n.min(d.prompt_n)) as u64;
        c.prompt_ms += d.prompt_ms;
        c.predicted_tokens += d.predicted_n as u64;
        c.predicted_ms += d.predicted_ms;
        c.drafted += d.draft_n as u64;
        c.accepted += d.draft_accepted as u64;
    }

    /// The text of `/metrics`, given the queue depth and slot use now.
    pub fn render(&self, queued: usize, busy: usize, slots: usize) -> String {
        let c = self.lock();
        let mut s = String::new();
        let mut metric = |name: &str, kind: &str, help: &str, lines: Vec<(String, String)>| {
            let _ = writeln!(s, "# HELP clover_{name} {help}");
            let _ = writeln!(s, "# TYPE clover_{name} {kind}");
            for (labels, v) in lines {
                let _ = writeln!(s, "clover_{name}{labels} {v}");
            }
        };
        let one = |v: String| vec![(String::new(), v)];
        metric(
            "requests_total",
            "counter",
            "HTTP responses by status",
            c.by_status
                .iter()
                .map(|(k, v)| (format!("{{status=\"{k}\"}}"), v.to_string()))
                .collect(),
        );
        metric(
            "prompt_tokens_total",
            "counter",
            "Prompt tokens evaluated (reused prefixes excluded)",
            one(c.prompt_tokens.to_string()),
        );
        metric(
            "tokens_predicted_total",
            "counter",
            "Tokens generated",
            one(c.predicted_tokens.to_string()),
        );
        let rate = |n: u64, ms: f64| if ms > 0.0 { n as f64 * 1e3 / ms } else { 0.0 };
        metric(
            "prompt_tokens_per_second",
            "gauge",
            "Prompt evaluation rate over all requests",
            one(format!("{:.3}", rate(c.prompt_tokens, c.prompt_ms))),
        );
        metric(
            "decode_tokens_per_second",
            "gauge",
            "Per-request decode rate over all requests",
            one(format!("{:.3}", rate(c.predicted_tokens, c.predicted_ms))),
        );
        metric(
            "draft_tokens_total",
            "counter",
            "Drafted tokens (--spec-type)",
            one(c.drafted.to_string()),
        );
        metric(
            "draft_tokens_accepted_total",
            "counter",
            "Drafted tokens accepted",
            one(c.accepted.to_string()),
        );
        metric(
            "queue_depth",
            "gauge",
            "Requests waiting for a slot",
            one(queued.to_string()),
        );
        metric(
            "slots_busy",
            "gauge",
            "Slots generating",
            one(busy.to_string()),
        );
        metric(
            "slots_total",
            "gauge",
            "Slots (-np)",
            one(slots.to_string()),
        );
        let n = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed).to_string();
        let k = &self.conns;
        metric(
            "connections_open",
            "gauge",
            "Connections being served",
            one(n(&k.open)),
        );
        metric(
            "connections_total",
            "counter",
            "Connections accepted and served",
            one(n(&k.accepted)),
        );
        metric(
            "connections_refused_total",
            "counter",
            "Connections answered 503 at accept (--max-connections reached)",
            one(n(&k.refused)),
        );
        metric(
            "connections_evicted_total",
            "counter",
            "Connections waiting without a request closed at the cap to make room for a new one",
            one(n(&k.evicted)),
        );
        metric(
            "connection_timeouts_total",
            "counter",
            "Connections closed by a timeout, by phase",
            vec![
                ("{phase=\"header\"}".into(), n(&k.header_timeouts)),
                ("{phase=\"idle\"}".into(), n(&k.idle_timeouts)),
            ],
        );
        s
    }
}
