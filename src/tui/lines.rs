//! The chat without a terminal UI, for pipes: each input line is a user turn, the
//! reply (thinking left out) is written as one paragraph followed by a blank line.

use std::io::{self, BufRead, Write};

use super::chat::ThinkSplitter;
use super::engine::{ChatEngine, ChatMessage, Controls, EngineEvent, Role};

/// Session options shared by both front ends.
#[derive(Clone, Debug, Default)]
pub struct ChatOptions {
    /// A system prompt, sent as the first turn.
    pub system: Option<String>,
    /// Start with self-speculation on (ignored when the engine cannot speculate).
    pub spec: bool,
    /// A note shown on the status line until the first key (e.g. which model runs).
    pub notice: Option<String>,
}

/// Reads lines from `input` until end of input (or a line `/quit`), generates a reply
/// to each non-blank one and writes it to `output`. An engine error is written as
/// `error: …` and ends the session with an error.
pub fn run_lines<E: ChatEngine>(
    engine: &mut E,
    opts: &ChatOptions,
    input: impl BufRead,
    mut output: impl Write,
) -> io::Result<()> {
    let controls = Controls::new(opts.spec && engine.info().spec_available);
    let mut messages: Vec<ChatMessage> = Vec::new();
    if let Some(s) = opts.system.as_deref().filter(|s| !s.trim().is_empty()) {
        messages.push(ChatMessage::new(Role::System, s));
    }
    for line in input.lines() {
        let line = line?;
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if line == "/quit" || line == "/exit" {
            break;
        }
        messages.push(ChatMessage::new(Role::User, line));
        let mut reply = String::new();
        let mut error: Option<String> = None;
        let mut splitter = ThinkSplitter::default();
        let mut write_err: Option<io::Error> = None;
        let mut started = false;
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
            EngineEvent::Error(e) => error = Some(e),
            _ => {}
        });
        if let Some(e) = write_err {
            return Err(e);
        }
        if let Some((rest, inside)) = splitter.finish() {
            if !inside {
                output.write_all(rest.as_bytes())?;
                reply.push_str(&rest);
            }
        }
        if let Some(e) = error {
            writeln!(output, "\nerror: {e}")?;
            output.flush()?;
            return Err(io::Error::other(e));
        }
        writeln!(output, "\n")?;
        output.flush()?;
        messages.push(ChatMessage::new(Role::Assistant, reply.trim()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tui::demo::DemoEngine;

    #[test]
    fn line_mode_answers_each_line_without_the_thinking() {
        let mut engine = DemoEngine::instant();
        let input = b"first question\n\nsecond one\n" as &[u8];
        let mut out = Vec::new();
        run_lines(&mut engine, &ChatOptions::default(), input, &mut out).unwrap();
        let out = String::from_utf8(out).unwrap();
        let paragraphs: Vec<&str> = out.split("\n\n").filter(|p| !p.is_empty()).collect();
        assert_eq!(paragraphs.len(), 2, "{out}");
        assert!(
            paragraphs[0].starts_with("You wrote \"first question\"."),
            "{out}"
        );
        assert!(paragraphs[1].starts_with("You wrote \"second one\"."));
        assert!(!out.contains("think"));
        assert!(!out.contains("The user wants a reply"));
    }

    #[test]
    fn line_mode_with_speculation_prints_the_same_text() {
        let run = |spec| {
            let mut out = Vec::new();
            let opts = ChatOptions {
                spec,
                ..ChatOptions::default()
            };
            run_lines(
                &mut DemoEngine::instant(),
                &opts,
                b"hi\n" as &[u8],
                &mut out,
            )
            .unwrap();
            out
        };
        assert_eq!(run(false), run(true));
    }

    #[test]
    fn line_mode_stops_at_quit_and_reports_engine_errors() {
        let mut out = Vec::new();
        let input = b"/quit\nnever answered\n" as &[u8];
        run_lines(
            &mut DemoEngine::instant(),
            &ChatOptions::default(),
            input,
            &mut out,
        )
        .unwrap();
        assert!(out.is_empty());
        let mut out = Vec::new();
        let input = b"please /error\n" as &[u8];
        let r = run_lines(
            &mut DemoEngine::instant(),
            &ChatOptions::default(),
            input,
            &mut out,
        );
        assert!(r.is_err());
        assert!(String::from_utf8(out)
            .unwrap()
            .contains("error: the demo engine was asked to fail"));
    }
}
