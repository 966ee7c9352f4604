//! The chat panel: turns with role headers, streamed replies styled by how each token
//! came to be (plain, accepted draft, correction), dimmed and foldable thinking, and
//! the pending drafts of the round being verified.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};

use super::wrap::{wrap, Row};
use super::{corner_tag, num, panel, put};
use crate::tui::chat::{Ending, Segment, Turn};
use crate::tui::engine::{Role, TokenKind, CONTEXT_FULL_MARKER};
use crate::tui::state::{App, Focus};

pub const ACCEPTED: Style = Style::new().fg(Color::Green);
pub const CORRECTED: Style = Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD);
pub const PENDING: Style = Style::new()
    .fg(Color::DarkGray)
    .add_modifier(Modifier::UNDERLINED);
const THINKING: Modifier = Modifier::DIM.union(Modifier::ITALIC);

fn segment_style(s: &Segment) -> Style {
    let base = match s.kind {
        TokenKind::Plain => Style::new(),
        TokenKind::Accepted => ACCEPTED,
        TokenKind::Corrected => CORRECTED,
    };
    if s.thinking {
        base.add_modifier(THINKING)
    } else {
        base
    }
}

/// All wrapped rows of the conversation at `width`.
pub fn lines(app: &App, width: usize) -> Vec<Row> {
    let mut out: Vec<Row> = Vec::new();
    let last = app.chat.turns.len().saturating_sub(1);
    let n_system = app
        .chat
        .turns
        .iter()
        .take_while(|t| t.role == Role::System)
        .count();
    for (i, turn) in app.chat.turns.iter().enumerate() {
        if i > 0 {
            out.push(Vec::new());
        }
        if i == app.chat.start && i > n_system {
            out.push(fresh_marker());
            out.push(Vec::new());
        }
        let pending = if i == last && turn.ending == Ending::Streaming {
            app.chat.pending.as_slice()
        } else {
            &[]
        };
        turn_lines(turn, pending, app.fold_thinking, width, &mut out);
    }
    if app.chat.start == app.chat.turns.len() && app.chat.start > n_system {
        out.push(Vec::new());
        out.push(fresh_marker());
    }
    out
}

/// The line between an earlier conversation and a fresh start (F5).
fn fresh_marker() -> Row {
    vec![(
        "── new conversation (F5) ──".into(),
        Style::new().fg(Color::Yellow),
    )]
}

fn turn_lines(turn: &Turn, pending: &[String], fold: bool, width: usize, out: &mut Vec<Row>) {
    if let Some(note) = &turn.note {
        out.extend(wrap(
            &[(&format!("⚠ {note}"), Style::new().fg(Color::Yellow))],
            width,
        ));
    }
    let gone = if turn.in_context {
        ""
    } else {
        " · left out of the context"
    };
    let dim = Style::new().fg(Color::DarkGray);
    match turn.role {
        Role::System => {
            let t = turn.visible_text();
            out.extend(wrap(&[("system: ", dim.bold()), (&t, dim)], width));
            return;
        }
        Role::User => {
            out.push(vec![
                (
                    "› you".into(),
                    Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD),
                ),
                (gone.into(), dim),
            ]);
            out.extend(wrap(&[(&turn.visible_text(), Style::new())], width));
            return;
        }
        Role::Assistant => out.push(vec![
            (
                "◆ clover".into(),
                Style::new()
                    .fg(Color::LightGreen)
                    .add_modifier(Modifier::BOLD),
            ),
            (gone.into(), dim),
        ]),
    }
    // Paragraphs: runs of thinking and of answer text, each wrapped on its own.
    let mut groups: Vec<(bool, Vec<&Segment>)> = Vec::new();
    for s in &turn.segments {
        match groups.last_mut() {
            Some((th, v)) if *th == s.thinking => v.push(s),
            _ => groups.push((s.thinking, vec![s])),
        }
    }
    let n_groups = groups.len();
    for (gi, (thinking, segs)) in groups.into_iter().enumerate() {
        let is_last = gi + 1 == n_groups;
        if thinking && fold {
            let words: usize = segs.iter().map(|s| s.text.split_whitespace().count()).sum();
            out.push(vec![(
                format!("▸ thinking ({words} words, F4 unfolds)"),
                Style::new().add_modifier(THINKING),
            )]);
            continue;
        }
        let mut runs: Vec<(&str, Style)> = Vec::new();
        if thinking {
            runs.push(("thinking: ", Style::new().add_modifier(THINKING)));
        }
        for (k, s) in segs.iter().enumerate() {
            // The answer's leading whitespace after thinking is noise.
            let text = if k == 0 { s.text.trim_start() } else { &s.text };
            runs.push((text, segment_style(s)));
        }
        if is_last {
            for d in pending {
                runs.push((d, PENDING));
            }
        }
        out.extend(wrap(&runs, width));
    }
    if n_groups == 0 && !pending.is_empty() {
        let runs: Vec<(&str, Style)> = pending.iter().map(|d| (d.as_str(), PENDING)).collect();
        out.extend(wrap(&runs, width));
    }
    let footer = match &turn.ending {
        Ending::Streaming => ("▌".to_string(), Style::new().fg(Color::LightGreen)),
        Ending::Done {
            tokens, tok_per_s, ..
        } => (
            format!("{tokens} tokens · {} tok/s", num(*tok_per_s)),
            Style::new().fg(Color::DarkGray),
        ),
        Ending::Stopped => ("[stopped]".into(), Style::new().fg(Color::Yellow)),
        Ending::Loaded => (
            "(from the saved chat)".into(),
            Style::new().fg(Color::DarkGray),
        ),
        Ending::Error(e) => (format!("[error: {e}]"), Style::new().fg(Color::Red)),
    };
    let full = matches!(
        turn.ending,
        Ending::Done {
            context_full: true,
            ..
        }
    );
    let marker = Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD);
    if full {
        out.extend(wrap(
            &[
                (CONTEXT_FULL_MARKER, marker),
                (" ", dim),
                (&footer.0, footer.1),
            ],
            width,
        ));
    } else {
        out.extend(wrap(&[(&footer.0, footer.1)], width));
    }
}

/// Draws the chat panel; returns (text rows, total wrapped lines) for paging.
pub fn render(app: &App, area: Rect, buf: &mut Buffer) -> (u16, usize) {
    if area.is_empty() {
        return (0, 0);
    }
    let inner = panel("chat", app.focus == Focus::Chat, area, buf);
    if inner.is_empty() {
        return (0, 0);
    }
    let all = lines(app, inner.width as usize);
    if app.chat.turns.is_empty() {
        let hint = "Type a message below and press Enter. F1 lists every key; Ctrl-C to quit.";
        for (i, row) in wrap(
            &[(hint, Style::new().fg(Color::DarkGray))],
            inner.width as usize,
        )
        .iter()
        .enumerate()
        .take(inner.height as usize)
        {
            draw_row(buf, inner, inner.y + i as u16, row);
        }
        return (inner.height, 0);
    }
    let rows = inner.height as usize;
    let scroll = app.chat_scroll.min(all.len().saturating_sub(rows));
    let end = all.len() - scroll;
    let start = end.saturating_sub(rows);
    for (i, row) in all[start..end].iter().enumerate() {
        draw_row(buf, inner, inner.y + i as u16, row);
    }
    if scroll > 0 {
        let tag = format!(" ↓ {scroll} more ");
        corner_tag(buf, area, &tag);
    }
    (inner.height, all.len())
}

fn draw_row(buf: &mut Buffer, area: Rect, y: u16, row: &Row) {
    let mut x = area.x;
    for (s, st) in row {
        x += put(buf, area, x, y, s, *st);
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use crate::tui::engine::EngineEvent;
    use crate::tui::events::WorkerMsg;

    #[test]
    fn chat_panel_renders_at_every_size_and_shows_the_reply() {
        let app = app_after_reply(false);
        for (w, h) in SIZES {
            let (_, text) = render_with(Rect::new(0, 0, w, h), |b| {
                render(&app, Rect::new(0, 0, w, h), b);
            });
            if (w, h) == (200, 60) {
                assert!(contains(&text, "› you"), "{text:#?}");
                assert!(contains(&text, "tell me"));
                assert!(contains(&text, "Ctrl-C to quit."));
                assert!(contains(&text, "tokens ·"));
            }
        }
    }

    #[test]
    fn accepted_drafts_and_corrections_are_styled_differently() {
        let app = app_after_reply(true);
        let area = Rect::new(0, 0, 200, 60);
        let (buf, _) = render_with(area, |b| {
            render(&app, area, b);
        });
        let fgs: Vec<Option<Color>> = buf.content().iter().map(|c| Some(c.fg)).collect();
        assert!(fgs.contains(&Some(Color::Green)), "no accepted text");
        assert!(fgs.contains(&Some(Color::Yellow)), "no corrected text");
    }

    #[test]
    fn pending_drafts_show_until_verified() {
        let mut app = app_after_reply(false);
        app.input.set_text("more");
        app.handle_key(crate::tui::events::Key::plain(
            crate::tui::events::Code::Enter,
        ));
        app.on_worker(
            WorkerMsg::Event(EngineEvent::Drafted {
                texts: vec![" maybe".into(), " draft".into()],
            }),
            0.0,
        );
        let area = Rect::new(0, 0, 80, 24);
        let (buf, text) = render_with(area, |b| {
            render(&app, area, b);
        });
        assert!(contains(&text, "maybe draft"), "{text:#?}");
        let y = text.iter().position(|l| l.contains("maybe draft")).unwrap();
        let x = text[y][..text[y].find("maybe draft").unwrap()]
            .chars()
            .count();
        let cell = &buf[(x as u16, y as u16)];
        assert_eq!(cell.symbol(), "m");
        assert!(cell.modifier.contains(Modifier::UNDERLINED));
        app.on_worker(
            WorkerMsg::Event(EngineEvent::Verified {
                accepted: 0,
                drafted: 2,
            }),
            1.0,
        );
        let (_, text) = render_with(area, |b| {
            render(&app, area, b);
        });
        assert!(!contains(&text, "maybe draft"));
    }

    #[test]
    fn thinking_is_dimmed_and_folds_to_one_line() {
        let mut app = app_after_reply(false);
        let area = Rect::new(0, 0, 200, 60);
        let (buf, text) = render_with(area, |b| {
            render(&app, area, b);
        });
        assert!(contains(&text, "The user wants a reply."));
        assert!(!contains(&text, "<think>"));
        let dim = buf
            .content()
            .iter()
            .filter(|c| c.modifier.contains(Modifier::DIM))
            .count();
        assert!(dim > 20);
        app.fold_thinking = true;
        let (_, text) = render_with(area, |b| {
            render(&app, area, b);
        });
        assert!(!contains(&text, "The user wants a reply."));
        assert!(contains(&text, "▸ thinking ("), "{text:#?}");
    }

    #[test]
    fn scrolling_up_shows_older_lines_and_a_marker() {
        let mut app = app_after_reply(false);
        let area = Rect::new(0, 0, 40, 10);
        let (_, bottom) = render_with(area, |b| {
            render(&app, area, b);
        });
        app.chat_scroll = 1000;
        let (_, top) = render_with(area, |b| {
            render(&app, area, b);
        });
        assert!(contains(&top, "system:"), "{top:#?}");
        assert!(!contains(&bottom, "system:"));
        assert!(contains(&top, "more"));
    }

    #[test]
    fn a_reply_cut_by_the_context_shows_the_marker_and_left_out_turns_say_so() {
        use crate::tui::demo::DemoEngine;
        use crate::tui::engine::{ChatEngine, Controls};
        let mut engine = DemoEngine::new(1, 256, std::time::Duration::ZERO);
        let mut app = App::new(engine.info(), None, false);
        for q in ["one", "two", "three"] {
            app.input.set_text(q);
            let Some(crate::tui::state::Request::Generate(m)) = app.handle_key(
                crate::tui::events::Key::plain(crate::tui::events::Code::Enter),
            ) else {
                panic!("no request")
            };
            let mut events = Vec::new();
            engine.generate(&m, &Controls::new(false), &mut |e| events.push(e));
            for e in events {
                app.on_worker(WorkerMsg::Event(e), 0.0);
            }
            app.on_worker(WorkerMsg::Finished, 0.0);
        }
        let area = Rect::new(0, 0, 100, 400);
        let (_, text) = render_with(area, |b| {
            render(&app, area, b);
        });
        assert!(contains(&text, CONTEXT_FULL_MARKER), "{text:#?}");
        assert!(contains(&text, "left out of the context"), "{text:#?}");
        assert!(contains(&text, "⚠ context full:"), "{text:#?}");
    }
}
