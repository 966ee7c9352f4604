//! The input editor panel: the text wrapped by characters, the cursor kept in view.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Style};
use unicode_width::UnicodeWidthChar;

use super::{panel, put};
use crate::tui::state::{App, Focus};

/// Rows of text shown at most before the input scrolls.
const MAX_ROWS: u16 = 6;

/// Splits `text` into rows of at most `width` columns (breaking at `\n` and wherever
/// a row is full) and finds the cursor's (row, column).
fn rows(text: &str, cursor: usize, width: usize) -> (Vec<String>, (usize, usize)) {
    let width = width.max(1);
    let mut out = vec![String::new()];
    let mut col = 0;
    let mut pos = (0, 0);
    for (i, c) in text.char_indices() {
        if i == cursor {
            pos = (out.len() - 1, col);
        }
        if c == '\n' {
            out.push(String::new());
            col = 0;
            continue;
        }
        let w = if c == '\t' { 1 } else { c.width().unwrap_or(0) };
        if col + w > width {
            out.push(String::new());
            col = 0;
            if i == cursor {
                pos = (out.len() - 1, 0);
            }
        }
        if let Some(last) = out.last_mut() {
            last.push(if c == '\t' { ' ' } else { c });
        }
        col += w;
    }
    if cursor >= text.len() {
        if col >= width {
            out.push(String::new());
            col = 0;
        }
        pos = (out.len() - 1, col);
    }
    (out, pos)
}

/// Rows the input panel wants at `width`, borders included.
pub fn height(app: &App, width: u16) -> u16 {
    let inner = width.saturating_sub(2) as usize;
    let (r, _) = rows(app.input.text(), app.input.cursor(), inner);
    (r.len() as u16).clamp(1, MAX_ROWS) + 2
}

/// Draws the input; returns where the terminal cursor goes.
pub fn render(app: &App, area: Rect, buf: &mut Buffer) -> Option<(u16, u16)> {
    if area.is_empty() {
        return None;
    }
    let title = if app.generating {
        "message · reply streaming, Esc stops it"
    } else {
        "message · Enter sends, Alt+Enter new line"
    };
    let inner = panel(title, app.focus == Focus::Input, area, buf);
    if inner.is_empty() {
        return None;
    }
    if app.input.is_empty() {
        put(
            buf,
            inner,
            inner.x,
            inner.y,
            "Type a message… (F1: keys)",
            Style::new().fg(Color::DarkGray),
        );
        return Some((inner.x, inner.y));
    }
    let (lines, (crow, ccol)) = rows(app.input.text(), app.input.cursor(), inner.width as usize);
    let h = inner.height as usize;
    let first = (crow + 1)
        .saturating_sub(h)
        .min(lines.len().saturating_sub(1));
    for (i, line) in lines.iter().skip(first).take(h).enumerate() {
        put(buf, inner, inner.x, inner.y + i as u16, line, Style::new());
    }
    let x = inner.x + (ccol as u16).min(inner.width - 1);
    let y = inner.y + (crow - first) as u16;
    Some((x, y))
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use crate::tui::demo::DemoEngine;
    use crate::tui::engine::ChatEngine;

    #[test]
    fn rows_wrap_by_width_and_locate_the_cursor() {
        let (r, pos) = rows("abcdef\ngh", 9, 4);
        assert_eq!(r, vec!["abcd", "ef", "gh"]);
        assert_eq!(pos, (2, 2));
        let (r, pos) = rows("abcd", 4, 4);
        assert_eq!(r, vec!["abcd", ""]);
        assert_eq!(pos, (1, 0));
        let (_, pos) = rows("abcd", 1, 4);
        assert_eq!(pos, (0, 1));
    }

    #[test]
    fn input_panel_shows_multi_line_text_and_places_the_cursor() {
        let mut app = App::new(DemoEngine::instant().info(), None, false);
        app.input.set_text("first line\nsecond");
        for (w, h) in SIZES {
            let area = Rect::new(0, 0, w, h);
            let (_, text) = render_with(area, |b| {
                let cur = render(&app, area, b);
                if let Some((x, y)) = cur {
                    assert!(x < w && y < h, "cursor {x},{y} outside {w}x{h}");
                }
            });
            if (w, h) == (80, 24) {
                assert!(text[1].contains("first line"));
                assert!(text[2].contains("second"));
            }
        }
        let area = Rect::new(0, 0, 80, 4);
        let mut buf = Buffer::empty(area);
        assert_eq!(render(&app, area, &mut buf), Some((7, 2)));
    }

    #[test]
    fn input_height_grows_with_lines_up_to_a_limit() {
        let mut app = App::new(DemoEngine::instant().info(), None, false);
        assert_eq!(height(&app, 80), 3);
        app.input.set_text("a\nb\nc");
        assert_eq!(height(&app, 80), 5);
        app.input.set_text(&"x\n".repeat(50));
        assert_eq!(height(&app, 80), MAX_ROWS + 2);
    }
}
