//! Soak: a 10,000-token conversation through line mode on the built-in default model
//! with a 2048-token context, so the context fills and shifts several times.
//! Resident memory is sampled every 500 generated tokens; the last sample must be
//! within 5 % of the first one after the first shift, and every line must get a
//! reply. Run with `--nocapture` to see the samples (`scripts/soak_chat.sh` does); it takes
//! about 25-40 s in the test profile on two cores.

use std::io::Read;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use clover::engine::{default_model, ChatSession, LoadedModel, Session, SessionOptions};
use clover::sample::SamplerParams;
use clover::tui::{
    run_lines_with, ChatEngine, ChatMessage, ChatOptions, Controls, EngineEvent, EngineInfo,
};

const N_CTX: usize = 2048;
const N_PREDICT: usize = 256;
const TARGET_TOKENS: usize = 10_000;
const SAMPLE_EVERY: usize = 500;

#[derive(Default)]
struct Tally {
    generated: usize,
    /// (tokens generated, resident bytes).
    samples: Vec<(usize, u64)>,
    /// Tokens generated when each context shift happened.
    shifts: Vec<usize>,
    lines: usize,
    replies: usize,
    errors: Vec<String>,
}

/// Resident memory of this process: `/proc/self/statm`'s second field, in pages
/// of 4 KiB (x86-64 and aarch64 Linux defaults).
fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("/proc/self/statm");
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

/// The real chat engine, counting what it emits.
struct Counting {
    inner: ChatSession,
    tally: Arc<Mutex<Tally>>,
}

impl ChatEngine for Counting {
    fn info(&self) -> EngineInfo {
        self.inner.info()
    }

    fn generate(
        &mut self,
        messages: &[ChatMessage],
        controls: &Controls,
        emit: &mut dyn FnMut(EngineEvent),
    ) {
        let tally = Arc::clone(&self.tally);
        self.inner.generate(messages, controls, &mut |ev| {
            let mut t = tally.lock().unwrap();
            match &ev {
                EngineEvent::Text { .. } => {
                    t.generated += 1;
                    if t.generated.is_multiple_of(SAMPLE_EVERY) {
                        let g = t.generated;
                        t.samples.push((g, resident_bytes()));
                    }
                }
                EngineEvent::ContextShift { .. } => {
                    let g = t.generated;
                    t.shifts.push(g);
                }
                EngineEvent::Done { .. } => t.replies += 1,
                EngineEvent::Error(e) => t.errors.push(e.clone()),
                _ => {}
            }
            drop(t);
            emit(ev);
        });
    }
}

/// User lines made up on demand, one per read, until the target is generated.
struct Lines {
    tally: Arc<Mutex<Tally>>,
}

impl Read for Lines {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let mut t = self.tally.lock().unwrap();
        if t.generated >= TARGET_TOKENS {
            return Ok(0);
        }
        t.lines += 1;
        let i = t.lines;
        let line = format!(
            "Question {i}: what is said of the {} and the {} in verse {}?\n",
            ["light", "waters", "earth", "heaven", "seed"][i % 5],
            ["night", "firmament", "fowl", "herb", "day"][i % 3],
            i * 7 % 31 + 1
        );
        let n = line.len().min(buf.len());
        buf[..n].copy_from_slice(&line.as_bytes()[..n]);
        Ok(n)
    }
}

#[test]
fn a_ten_thousand_token_chat_shifts_its_context_without_growing_or_losing_a_turn() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir
        .path()
        .join(default_model::file_name(default_model::MODEL_BYTES));
    std::fs::write(&path, default_model::MODEL_BYTES).unwrap();
    let model = Arc::new(LoadedModel::open(&path).unwrap());
    let mut opts = SessionOptions::new(N_CTX);
    opts.threads = Some(2);
    let session = Session::new(model, opts).unwrap();
    let params = SamplerParams {
        seed: Some(7),
        ..SamplerParams::default()
    };
    let tally = Arc::new(Mutex::new(Tally::default()));
    let mut engine = Counting {
        inner: ChatSession::new(session, params, Some(N_PREDICT)),
        tally: Arc::clone(&tally),
    };
    let chat = ChatOptions {
        system: Some("You answer questions about the Bible.".into()),
        ..ChatOptions::default()
    };
    let t0 = Instant::now();
    let input = std::io::BufReader::new(Lines {
        tally: Arc::clone(&tally),
    });
    let (mut out, mut notes) = (Vec::new(), Vec::new());
    let r = run_lines_with(&mut engine, &chat, input, &mut out, &mut notes);
    let wall = t0.elapsed().as_secs_f64();
    let t = tally.lock().unwrap();
    let notes = String::from_utf8_lossy(&notes);
    println!(
        "soak: {} tokens generated in {} turns, {} context shifts (at tokens {:?}), {wall:.1} s",
        t.generated,
        t.lines,
        t.shifts.len(),
        t.shifts
    );
    for (g, rss) in &t.samples {
        println!(
            "soak: {g:>6} tokens  resident {:.1} MiB",
            *rss as f64 / 1048576.0
        );
    }
    r.unwrap_or_else(|e| panic!("{e}; notes: {notes}"));
    assert!(t.errors.is_empty(), "{:?}", t.errors);
    assert_eq!(t.replies, t.lines, "every line gets a reply");
    let paragraphs = String::from_utf8_lossy(&out)
        .split("\n\n")
        .filter(|p| !p.trim().is_empty())
        .count();
    // A reply may be empty (the model ended at once); never more paragraphs than lines.
    assert!(paragraphs <= t.lines);
    assert!(t.generated >= TARGET_TOKENS);
    assert!(
        t.shifts.len() >= 3,
        "the context shifted {} times",
        t.shifts.len()
    );
    assert_eq!(notes.matches("the context is full").count(), t.shifts.len());
    let first_shift = t.shifts[0];
    let base = t
        .samples
        .iter()
        .find(|(g, _)| *g > first_shift)
        .expect("a sample after the first shift")
        .1 as f64;
    let last = t.samples.last().unwrap().1 as f64;
    let growth = (last - base) / base;
    println!(
        "soak: resident after the first shift {:.1} MiB, last {:.1} MiB ({:+.2} %)",
        base / 1048576.0,
        last / 1048576.0,
        growth * 100.0
    );
    assert!(
        growth.abs() <= 0.05,
        "resident memory moved {:+.2} %",
        growth * 100.0
    );
}
