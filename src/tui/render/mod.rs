//! Drawing the app state into a ratatui buffer. Every function here clips to the area
//! it is given and returns early on empty areas, so any terminal size is safe.
//!
//! Layout: a status line on top. Wide terminals (≥ 120×30) put the chat and input on
//! the left and stack timing, routing and acceptance on the right; smaller ones show
//! the chat, one side panel (the last one focused with Tab) and the input, stacked;
//! the side panel collapses first when there is no room.

pub mod accept;
pub mod chat;
pub mod help;
pub mod input;
pub mod routing;
pub mod status;
pub mod timing;
pub mod wrap;

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::widgets::{Block, Widget};
use ratatui::Frame;
use unicode_width::UnicodeWidthChar;

use super::state::{App, Focus, ViewInfo};

/// Sizes from which the full side column is shown.
pub const WIDE_MIN_W: u16 = 120;
pub const WIDE_MIN_H: u16 = 30;

/// Where each panel goes; side panels are `None` when collapsed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Areas {
    pub status: Rect,
    pub chat: Rect,
    pub input: Rect,
    pub timing: Option<Rect>,
    pub routing: Option<Rect>,
    pub accept: Option<Rect>,
}

/// Splits `area` into the panels.
pub fn layout(app: &App, area: Rect) -> Areas {
    let mut a = Areas::default();
    if area.is_empty() {
        return a;
    }
    a.status = Rect::new(area.x, area.y, area.width, 1);
    let body = Rect::new(area.x, area.y + 1, area.width, area.height - 1);
    if body.is_empty() {
        return a;
    }
    if area.width >= WIDE_MIN_W && area.height >= WIDE_MIN_H {
        let left_w = (area.width * 11 / 20).max(60);
        let left = Rect::new(body.x, body.y, left_w, body.height);
        let right = Rect::new(body.x + left_w, body.y, body.width - left_w, body.height);
        let (chat, inp) = split_chat_input(app, left);
        a.chat = chat;
        a.input = inp;
        let t_h = right.height * 2 / 5;
        let r_h = right.height * 7 / 20;
        a.timing = Some(Rect::new(right.x, right.y, right.width, t_h));
        a.routing = Some(Rect::new(right.x, right.y + t_h, right.width, r_h));
        a.accept = Some(Rect::new(
            right.x,
            right.y + t_h + r_h,
            right.width,
            right.height - t_h - r_h,
        ));
    } else {
        let (rest, inp) = split_chat_input(app, body);
        a.input = inp;
        let side_h = if rest.height >= 14 {
            (rest.height * 2 / 5).clamp(6, 14)
        } else {
            0
        };
        a.chat = Rect::new(rest.x, rest.y, rest.width, rest.height - side_h);
        if side_h > 0 {
            let side = Rect::new(rest.x, rest.y + rest.height - side_h, rest.width, side_h);
            match app.side {
                Focus::Routing => a.routing = Some(side),
                Focus::Accept => a.accept = Some(side),
                _ => a.timing = Some(side),
            }
        }
    }
    a
}

/// The input takes the rows its text needs (3 to 8 with borders, at most a third).
fn split_chat_input(app: &App, area: Rect) -> (Rect, Rect) {
    let want = input::height(app, area.width);
    let h = want.min((area.height / 3).max(1)).min(area.height);
    let chat = Rect::new(area.x, area.y, area.width, area.height - h);
    let inp = Rect::new(area.x, area.y + area.height - h, area.width, h);
    (chat, inp)
}

/// What a draw tells the main loop: where the cursor goes and sizes for paging.
#[derive(Clone, Copy, Debug, Default)]
pub struct Drawn {
    pub cursor: Option<(u16, u16)>,
    pub view: ViewInfo,
}

/// Draws everything into `buf` within `area`.
pub fn draw(app: &App, area: Rect, buf: &mut Buffer) -> Drawn {
    let area = area.intersection(buf.area);
    let a = layout(app, area);
    let mut drawn = Drawn::default();
    status::render(app, a.status, buf);
    let (rows, lines) = chat::render(app, a.chat, buf);
    drawn.view.chat_rows = rows;
    drawn.view.chat_lines = lines;
    drawn.cursor = input::render(app, a.input, buf);
    if let Some(r) = a.timing {
        drawn.view.timing_rows = timing::render(app, r, buf);
    }
    if let Some(r) = a.routing {
        routing::render(app, r, buf);
    }
    if let Some(r) = a.accept {
        accept::render(app, r, buf);
    }
    if app.show_help {
        help::render(area, buf);
        drawn.cursor = None;
    }
    drawn
}

/// Draws a frame and returns the view sizes for the state.
pub fn draw_frame(frame: &mut Frame, app: &App) -> ViewInfo {
    let area = frame.area();
    let drawn = draw(app, area, frame.buffer_mut());
    if let Some(pos) = drawn.cursor {
        frame.set_cursor_position(pos);
    }
    drawn.view
}

/// A bordered panel; the focused one has a highlighted border. Returns the inner area.
pub(crate) fn panel(title: &str, focused: bool, area: Rect, buf: &mut Buffer) -> Rect {
    if area.is_empty() {
        return area;
    }
    let style = if focused {
        Style::new()
            .fg(Color::LightCyan)
            .add_modifier(Modifier::BOLD)
    } else {
        Style::new().fg(Color::DarkGray)
    };
    let block = Block::bordered()
        .border_style(style)
        .title(format!(" {title} "));
    let inner = block.inner(area);
    block.render(area, buf);
    inner
}

/// A note such as " ↓ 3 more " on the bottom border of `area`, right-aligned,
/// in yellow.
pub(crate) fn corner_tag(buf: &mut Buffer, area: Rect, tag: &str) {
    let x = area.right().saturating_sub(tag.chars().count() as u16 + 1);
    put(
        buf,
        area,
        x,
        area.bottom() - 1,
        tag,
        Style::new().fg(Color::Yellow),
    );
}

/// Writes `s` at (x, y), clipped to `area`; returns the columns used. Control
/// characters are skipped; wide characters that do not fit are left out.
pub(crate) fn put(buf: &mut Buffer, area: Rect, x: u16, y: u16, s: &str, style: Style) -> u16 {
    let clip = area.intersection(buf.area);
    if y < clip.y || y >= clip.bottom() || x >= clip.right() {
        return 0;
    }
    let mut cx = x;
    for c in s.chars() {
        let w = match c.width() {
            Some(w) if w > 0 => w as u16,
            _ => continue,
        };
        if cx + w > clip.right() {
            break;
        }
        if cx >= clip.x {
            if let Some(cell) = buf.cell_mut((cx, y)) {
                cell.set_char(c).set_style(style);
            }
            // A wide character covers the next cell too.
            for k in 1..w {
                if let Some(cell) = buf.cell_mut((cx + k, y)) {
                    cell.reset();
                }
            }
        }
        cx += w;
    }
    cx.saturating_sub(x)
}

/// A compact number of milliseconds or tokens per second.
pub(crate) fn num(v: f64) -> String {
    if !v.is_finite() {
        "–".into()
    } else if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// The text of `area` in `buf`, one string per row (for tests and debugging).
pub fn buffer_text(buf: &Buffer, area: Rect) -> Vec<String> {
    let area = area.intersection(buf.area);
    (area.y..area.bottom())
        .map(|y| {
            (area.x..area.right())
                .filter_map(|x| buf.cell((x, y)).map(|c| c.symbol().to_string()))
                .collect()
        })
        .collect()
}

#[cfg(test)]
pub(crate) mod testing {
    use super::*;
    use crate::tui::demo::DemoEngine;
    use crate::tui::engine::{ChatEngine, ChatMessage, Controls, Role};
    use crate::tui::events::WorkerMsg;

    /// The sizes every panel is tested at.
    pub const SIZES: [(u16, u16); 4] = [(80, 24), (200, 60), (1, 1), (0, 0)];

    /// An app that has run one speculative demo reply (instantly) to "tell me".
    pub fn app_after_reply(spec: bool) -> App {
        let mut engine = DemoEngine::instant();
        let mut app = App::new(engine.info(), Some("be helpful"), spec);
        app.input.set_text("tell me");
        let msgs = match app.handle_key(crate::tui::events::Key::plain(
            crate::tui::events::Code::Enter,
        )) {
            Some(crate::tui::state::Request::Generate(m)) => m,
            None => vec![ChatMessage::new(Role::User, "tell me")],
        };
        let controls = Controls::new(spec);
        let mut events = Vec::new();
        engine.generate(&msgs, &controls, &mut |e| events.push(e));
        for (i, e) in events.into_iter().enumerate() {
            app.on_worker(WorkerMsg::Event(e), i as f64 * 10.0);
        }
        app.on_worker(WorkerMsg::Finished, 1e6);
        app
    }

    pub fn render_with(area: Rect, f: impl FnOnce(&mut Buffer)) -> (Buffer, Vec<String>) {
        let mut buf = Buffer::empty(area);
        f(&mut buf);
        let text = buffer_text(&buf, area);
        (buf, text)
    }

    pub fn contains(text: &[String], needle: &str) -> bool {
        text.iter().any(|l| l.contains(needle))
    }
}

#[cfg(test)]
mod tests {
    use super::testing::*;
    use super::*;
    use ratatui::backend::TestBackend;
    use ratatui::Terminal;

    #[test]
    fn whole_ui_draws_at_every_size_without_panicking() {
        for spec in [false, true] {
            let mut app = app_after_reply(spec);
            for show_help in [false, true] {
                app.show_help = show_help;
                for (w, h) in SIZES
                    .into_iter()
                    .chain([(2, 2), (3, 40), (119, 29), (120, 30)])
                {
                    let mut term = Terminal::new(TestBackend::new(w, h)).unwrap();
                    term.draw(|f| {
                        draw_frame(f, &app);
                    })
                    .unwrap();
                }
            }
        }
    }

    /// One tok/s across the screen: after a reply the header's decode speed
    /// is the figure under the reply, and layer timing's whole token time is
    /// that speed turned around.
    #[test]
    fn the_screen_shows_one_decode_speed() {
        let app = app_after_reply(false);
        let area = Rect::new(0, 0, 200, 60);
        let (_, text) = render_with(area, |b| {
            draw(&app, area, b);
        });
        let after = |needle: &str| -> String {
            let line = text
                .iter()
                .find(|l| l.contains(needle))
                .unwrap_or_else(|| panic!("no {needle:?} on\n{}", text.join("\n")));
            let rest = &line[line.find(needle).unwrap() + needle.len()..];
            rest.split_whitespace().next().unwrap().to_string()
        };
        let header = after("decode ");
        let reply = after("tokens · ");
        assert_eq!(header, reply, "header vs reply line");
        let tps: f64 = header.parse().unwrap();
        assert!(tps > 0.0);
        let whole = text
            .iter()
            .find_map(|l| {
                let at = l.find(" ms/token")?;
                l[..at].rsplit(' ').next().map(str::to_string)
            })
            .unwrap();
        assert_eq!(whole, num(1000.0 / tps), "layer timing's token time");
    }

    #[test]
    fn wide_terminal_shows_all_panels_and_small_one_shows_one_side_panel() {
        let app = app_after_reply(true);
        let wide = layout(&app, Rect::new(0, 0, 200, 60));
        assert!(wide.timing.is_some() && wide.routing.is_some() && wide.accept.is_some());
        let small = layout(&app, Rect::new(0, 0, 80, 24));
        let shown = [small.timing, small.routing, small.accept]
            .iter()
            .filter(|r| r.is_some())
            .count();
        assert_eq!(shown, 1);
        assert!(small.chat.height >= 8, "{small:?}");
        let tiny = layout(&app, Rect::new(0, 0, 80, 10));
        assert!(tiny.timing.is_none() && tiny.routing.is_none() && tiny.accept.is_none());
    }

    #[test]
    fn panels_never_overlap_and_stay_inside_the_terminal() {
        let app = app_after_reply(true);
        for (w, h) in [(80, 24), (200, 60), (100, 30), (120, 30), (60, 12)] {
            let full = Rect::new(0, 0, w, h);
            let a = layout(&app, full);
            let rects: Vec<Rect> = [a.status, a.chat, a.input]
                .into_iter()
                .chain([a.timing, a.routing, a.accept].into_iter().flatten())
                .filter(|r| !r.is_empty())
                .collect();
            let area: u32 = rects.iter().map(|r| r.area()).sum();
            assert_eq!(area, full.area(), "{w}x{h}: {a:?}");
            for (i, r) in rects.iter().enumerate() {
                assert_eq!(full.intersection(*r), *r);
                for s in &rects[i + 1..] {
                    assert!(!r.intersects(*s), "{w}x{h}: {r:?} {s:?}");
                }
            }
        }
    }

    #[test]
    fn whole_ui_at_80x24_shows_status_chat_and_input() {
        let app = app_after_reply(false);
        let mut term = Terminal::new(TestBackend::new(80, 24)).unwrap();
        term.draw(|f| {
            draw_frame(f, &app);
        })
        .unwrap();
        let text = buffer_text(term.backend().buffer(), Rect::new(0, 0, 80, 24));
        assert!(text[0].contains("demo (no weights)"), "{}", text[0]);
        assert!(contains(&text, "Ctrl-C to quit"), "{text:#?}");
        assert!(contains(&text, "Type a message"), "{text:#?}");
    }

    #[test]
    fn put_clips_to_the_area_and_skips_control_characters() {
        let mut buf = Buffer::empty(Rect::new(0, 0, 6, 2));
        let area = Rect::new(1, 0, 3, 1);
        assert_eq!(put(&mut buf, area, 1, 0, "ab\tcdef", Style::new()), 3);
        assert_eq!(put(&mut buf, area, 1, 1, "zz", Style::new()), 0);
        assert_eq!(put(&mut buf, area, 2, 0, "日本", Style::new()), 2);
        assert_eq!(buffer_text(&buf, buf.area)[0], " a日   ");
    }
}
