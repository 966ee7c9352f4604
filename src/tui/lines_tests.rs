use super::*;
use crate::tui::demo::DemoEngine;
use std::time::Duration;

/// Passes everything to `inner` and keeps the conversations it was sent.
struct Recording<E> {
    inner: E,
    sent: Vec<Vec<ChatMessage>>,
}

impl<E: ChatEngine> ChatEngine for Recording<E> {
    fn info(&self) -> crate::tui::EngineInfo {
        self.inner.info()
    }
    fn generate(
        &mut self,
        messages: &[ChatMessage],
        controls: &Controls,
        emit: crate::tui::Emit<'_>,
    ) {
        self.sent.push(messages.to_vec());
        self.inner.generate(messages, controls, emit);
    }
}

fn recording(n_ctx: usize) -> Recording<DemoEngine> {
    Recording {
        inner: DemoEngine::new(1, n_ctx, Duration::ZERO),
        sent: Vec::new(),
    }
}

/// Runs line mode; returns the result, stdout and the notes.
fn run(
    engine: &mut impl ChatEngine,
    opts: &ChatOptions,
    input: &[u8],
) -> (Result<(), LineError>, String, String) {
    let (mut out, mut notes) = (Vec::new(), Vec::new());
    let r = run_lines_with(engine, opts, input, &mut out, &mut notes);
    (
        r,
        String::from_utf8(out).unwrap(),
        String::from_utf8(notes).unwrap(),
    )
}

#[test]
fn line_mode_goes_on_after_a_failed_turn_and_fails_only_at_the_end() {
    let mut e = recording(4096);
    let (r, out, _) = run(
        &mut e,
        &ChatOptions::default(),
        b"please /error\nsecond line\n",
    );
    assert!(
        out.contains("error: the demo engine was asked to fail"),
        "{out}"
    );
    assert!(out.contains("You wrote \"second line\"."), "{out}");
    assert!(
        matches!(
            r,
            Err(LineError::TurnsFailed {
                failed: 1,
                turns: 2,
                ..
            })
        ),
        "{r:?}"
    );
    // The failed exchange is not sent again.
    assert_eq!(e.sent[1], vec![ChatMessage::new(Role::User, "second line")]);
}

#[test]
fn line_mode_decodes_invalid_utf8_lossily_with_a_note() {
    let (r, out, notes) = run(
        &mut DemoEngine::instant(),
        &ChatOptions::default(),
        b"caf\xff ok\nnext\n",
    );
    r.unwrap();
    assert!(out.contains("You wrote \"caf\u{fffd} ok\"."), "{out}");
    assert!(out.contains("You wrote \"next\"."), "{out}");
    assert_eq!(notes.matches("not valid UTF-8").count(), 1, "{notes}");
    assert!(notes.contains("line 1 "), "{notes}");
}

#[test]
fn a_line_longer_than_the_cap_is_one_failed_turn_read_in_bounded_memory() {
    let mut input = vec![b'x'; MAX_LINE * 3];
    input.extend_from_slice(b"\nnext\n");
    let (r, out, _) = run(&mut DemoEngine::instant(), &ChatOptions::default(), &input);
    assert!(
        out.contains("error: input line 1 is longer than 1 MiB"),
        "{out}"
    );
    assert!(out.contains("You wrote \"next\"."), "{out}");
    assert!(
        matches!(
            r,
            Err(LineError::TurnsFailed {
                failed: 1,
                turns: 2,
                ..
            })
        ),
        "{r:?}"
    );
    // The buffer never holds more than the cap.
    let mut buf = Vec::new();
    let mut rd = std::io::BufReader::new(&input[..]);
    let (n, long) = read_line_capped(&mut rd, &mut buf, MAX_LINE).unwrap();
    assert_eq!((n, long, buf.len()), (MAX_LINE * 3 + 1, true, MAX_LINE));
}

#[test]
fn line_mode_clear_starts_a_fresh_conversation_with_the_system_prompt() {
    let mut e = recording(4096);
    let opts = ChatOptions {
        system: Some("be brief".into()),
        ..ChatOptions::default()
    };
    let (r, _, notes) = run(&mut e, &opts, b"one\n/clear\ntwo\n");
    r.unwrap();
    assert!(notes.contains("new conversation"), "{notes}");
    assert_eq!(
        e.sent[1],
        vec![
            ChatMessage::new(Role::System, "be brief"),
            ChatMessage::new(Role::User, "two")
        ]
    );
}

#[test]
fn line_mode_leaves_out_dropped_turns_and_marks_replies_cut_by_the_context() {
    let mut e = recording(300);
    let opts = ChatOptions {
        system: Some("be brief".into()),
        ..ChatOptions::default()
    };
    let input: String = (0..12).map(|i| format!("question number {i}\n")).collect();
    let (r, out, notes) = run(&mut e, &opts, input.as_bytes());
    r.unwrap();
    for i in 0..12 {
        assert!(out.contains(&format!("You wrote \"question number {i}\".")));
    }
    assert!(out.contains(CONTEXT_FULL_MARKER), "{out}");
    assert!(notes.contains("the context is full"), "{notes}");
    // After a shift the conversation sent is shorter, and still led by the system
    // prompt; the newest question is always there.
    assert!(e.sent.windows(2).any(|w| w[1].len() < w[0].len()));
    for (i, m) in e.sent.iter().enumerate() {
        assert_eq!(m[0].role, Role::System);
        assert_eq!(m.last().unwrap().content, format!("question number {i}"));
    }
}

#[test]
fn line_mode_continues_a_loaded_conversation() {
    let mut e = recording(4096);
    let opts = ChatOptions {
        history: vec![
            ChatMessage::new(Role::User, "earlier"),
            ChatMessage::new(Role::Assistant, "answer"),
        ],
        ..ChatOptions::default()
    };
    let (r, _, _) = run(&mut e, &opts, b"now\n");
    r.unwrap();
    assert_eq!(e.sent[0].len(), 3);
    assert_eq!(e.sent[0][0].content, "earlier");
}

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
