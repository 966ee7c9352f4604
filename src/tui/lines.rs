//! The chat without a terminal UI, for pipes: each input line is a user turn, the
//! reply (thinking left out) is written as one paragraph followed by a blank line.
//!
//! Nothing in the input ends the session early but `/quit` (or `/exit`) and its end:
//! * a turn the engine fails is answered with `error: …` and the next line is read
//!   (the session's status is an error at the end, [`LineError::TurnsFailed`]);
//! * a line that is not valid UTF-8 is decoded lossily (U+FFFD), with a note;
//! * when the engine drops the oldest turns to fit the context (`ContextShift`),
//!   they are not sent again, and a note says so; a reply cut by the end of the
//!   context ends with [`CONTEXT_FULL_MARKER`];
//! * `/clear` starts a fresh conversation (the system prompt kept);
//! * a line longer than [`MAX_LINE`] bytes (1 MiB) is read no further than
//!   that: the rest of it up to its newline is skipped unread into memory,
//!   and the turn fails with `error: …` like any failed turn.
//!
//! Notes go to stderr (or the `notes` writer of [`run_lines_with`]), prefixed `clover:`.

use std::borrow::Cow;
use std::io::{self, BufRead, Write};
use std::path::PathBuf;

use super::chat::ThinkSplitter;
use super::engine::{ChatEngine, ChatMessage, Controls, EngineEvent, Role, CONTEXT_FULL_MARKER};

/// Session options shared by both front ends.
#[derive(Clone, Debug, Default)]
pub struct ChatOptions {
    /// A system prompt, sent as the first turn.
    pub system: Option<String>,
    /// Start with self-speculation on (ignored when the engine cannot speculate).
    pub spec: bool,
    /// A note shown on the status line until the first key (e.g. which model runs).
    pub notice: Option<String>,
    /// Earlier turns to continue from (`clover chat --load`), without the system
    /// prompt.
    pub history: Vec<ChatMessage>,
    /// Where Ctrl-S saves the conversation (`None`: the current directory).
    pub save_dir: Option<PathBuf>,
}

impl ChatOptions {
    /// The system prompt as the conversation's first message, if there is one.
    pub fn system_messages(&self) -> Vec<ChatMessage> {
        self.system
            .as_deref()
            .filter(|s| !s.trim().is_empty())
            .map(|s| ChatMessage::new(Role::System, s))
            .into_iter()
            .collect()
    }
}

/// Why a line-mode session ended with an error.
#[derive(Debug, thiserror::Error)]
pub enum LineError {
    /// Reading the input or writing the replies failed.
    #[error(transparent)]
    Io(#[from] io::Error),
    /// Every line was read, but some turns failed (each was reported as `error: …`).
    #[error("{failed} of {turns} turns failed; the first: {first}")]
    TurnsFailed {
        failed: usize,
        turns: usize,
        first: String,
    },
}

/// The longest input line line mode takes, in bytes: a turn beyond it is
/// refused, so `clover chat < /dev/zero` holds 1 MiB, not all of memory.
pub const MAX_LINE: usize = 1 << 20;

/// Reads up to and including the next `\n` into `buf`, keeping at most
/// `cap` bytes. Returns the bytes consumed (0 at the end of input) and
/// whether the line was longer than `cap` (its rest was skipped).
fn read_line_capped(
    input: &mut impl BufRead,
    buf: &mut Vec<u8>,
    cap: usize,
) -> io::Result<(usize, bool)> {
    let (mut consumed, mut long) = (0, false);
    loop {
        let chunk = match input.fill_buf() {
            Ok(c) => c,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if chunk.is_empty() {
            return Ok((consumed, long));
        }
        let (n, done) = match chunk.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (chunk.len(), false),
        };
        let room = cap.saturating_sub(buf.len());
        buf.extend_from_slice(&chunk[..n.min(room)]);
        long |= n > room;
        input.consume(n);
        consumed += n;
        if done {
            return Ok((consumed, long));
        }
    }
}

/// [`run_lines_with`] with notes on stderr.
pub fn run_lines<E: ChatEngine>(
    engine: &mut E,
    opts: &ChatOptions,
    input: impl BufRead,
    output: impl Write,
) -> Result<(), LineError> {
    run_lines_with(engine, opts, input, output, io::stderr())
}

/// Reads lines from `input` until end of input (or a line `/quit`), generates a reply
/// to each non-blank one and writes it to `output`; notes go to `notes` (see the
/// module docs).
pub fn run_lines_with<E: ChatEngine>(
    engine: &mut E,
    opts: &ChatOptions,
    mut input: impl BufRead,
    mut output: impl Write,
    mut notes: impl Write,
) -> Result<(), LineError> {
    let controls = Controls::new(opts.spec && engine.info().spec_available);
    let system = opts.system_messages();
    let mut messages: Vec<ChatMessage> = system.clone();
    messages.extend(opts.history.iter().cloned());
    let (mut turns, mut failed, mut first_error) = (0, 0, None::<String>);
    let mut buf = Vec::new();
    let mut line_no = 0;
    loop {
        buf.clear();
        let (n, too_long) = read_line_capped(&mut input, &mut buf, MAX_LINE)?;
        if n == 0 {
            break;
        }
        line_no += 1;
        if too_long {
            let e = format!(
                "input line {line_no} is longer than {} MiB ({n} bytes): it was skipped",
                MAX_LINE >> 20
            );
            writeln!(output, "error: {e}\n")?;
            output.flush()?;
            turns += 1;
            failed += 1;
            first_error.get_or_insert(e);
            continue;
        }
        let line = match std::str::from_utf8(&buf) {
            Ok(s) => Cow::Borrowed(s),
            Err(_) => {
                // Notes are best effort: a closed stderr must not end the chat.
                let _ = writeln!(
                    notes,
                    "clover: input line {line_no} is not valid UTF-8; \
                     its invalid bytes were replaced by U+FFFD"
                );
                String::from_utf8_lossy(&buf)
            }
        };
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if line == "/quit" || line == "/exit" {
            break;
        }
        if line == "/clear" {
            messages.clone_from(&system);
            let _ = writeln!(notes, "clover: new conversation");
            continue;
        }
        turns += 1;
        messages.push(ChatMessage::new(Role::User, line));
        let mut reply = String::new();
        let mut error: Option<String> = None;
        let mut splitter = ThinkSplitter::default();
        let mut write_err: Option<io::Error> = None;
        let mut started = false;
        let mut dropped = 0;
        let mut context_full = false;
        engine.generate(&messages, &controls, &mut |ev| match ev {
            EngineEvent::Text { text, thinking, .. } => {
                for (piece, inside) in splitter.push(&text) {
                    if thinking || inside {
                        continue;
                    }
                    // The answer's leading whitespace after thinking is noise.
                    let piece = if started {
                        piece.as_str()
                    } else {
                        piece.trim_start()
                    };
                    if piece.is_empty() {
                        continue;
                    }
                    started = true;
                    reply.push_str(piece);
                    if write_err.is_none() {
                        if let Err(e) = output
                            .write_all(piece.as_bytes())
                            .and_then(|_| output.flush())
                        {
                            write_err = Some(e);
                            controls.request_stop();
                        }
                    }
                }
            }
            EngineEvent::ContextShift { dropped: d, tokens } => {
                dropped = d;
                let _ = writeln!(
                    notes,
                    "clover: the context is full: left out the {d} oldest message{}; \
                     {tokens} tokens kept",
                    if d == 1 { "" } else { "s" }
                );
            }
            EngineEvent::Done {
                context_full: full, ..
            } => context_full = full,
            EngineEvent::Error(e) => error = Some(e),
            _ => {}
        });
        if let Some(e) = write_err {
            return Err(e.into());
        }
        let n_system = system.len();
        messages.drain(n_system..(n_system + dropped).min(messages.len() - 1));
        if let Some((rest, inside)) = splitter.finish() {
            if !inside {
                output.write_all(rest.as_bytes())?;
                reply.push_str(&rest);
            }
        }
        if let Some(e) = error {
            writeln!(output, "\nerror: {e}\n")?;
            output.flush()?;
            // A failed exchange is not part of the conversation.
            messages.pop();
            failed += 1;
            first_error.get_or_insert(e);
            continue;
        }
        if context_full {
            let sep = if reply.is_empty() { "" } else { " " };
            write!(output, "{sep}{CONTEXT_FULL_MARKER}")?;
        }
        writeln!(output, "\n")?;
        output.flush()?;
        messages.push(ChatMessage::new(Role::Assistant, reply.trim()));
    }
    if controls.spec() {
        if let Some(report) = engine.spec_report() {
            let _ = notes.write_all(report.as_bytes());
        }
    }
    match first_error {
        Some(first) => Err(LineError::TurnsFailed {
            failed,
            turns,
            first,
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
#[path = "lines_tests.rs"]
mod tests;
