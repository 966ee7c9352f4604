//! The F1 overlay listing every key.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::widgets::{Clear, Widget};

use super::{panel, put};

/// Every key the chat UI understands, with what it does.
pub const KEYS: [(&str, &str); 19] = [
    ("Enter", "send the message"),
    ("Alt+Enter, Ctrl-J", "new line in the message"),
    ("Esc", "stop the reply being generated"),
    ("Ctrl-C", "quit"),
    ("Tab, Shift+Tab", "move focus between panels"),
    (
        "PgUp, PgDn",
        "scroll the focused panel (chat or layer timing)",
    ),
    ("mouse wheel", "scroll the chat"),
    (
        "Up, Down",
        "history if the input is empty, else line up / down",
    ),
    ("Ctrl-Up, Ctrl-Down", "history, always"),
    (
        "Left, Right, Home, End",
        "move in the input (Ctrl-A, Ctrl-E: line start, end)",
    ),
    ("Backspace, Delete", "delete a character"),
    ("Ctrl-U", "clear the input"),
    ("F1", "this help (any key closes it)"),
    ("F2", "speculation on / off, live"),
    ("F3", "heatmap: recent window / cumulative"),
    ("F4", "fold / unfold thinking"),
    ("F5", "new conversation (earlier turns stay shown)"),
    ("Ctrl-S", "save the conversation (.md and .json)"),
    (
        "colours",
        "green accepted, yellow corrected, underlined pending",
    ),
];

pub fn render(area: Rect, buf: &mut Buffer) {
    let area = area.intersection(buf.area);
    if area.is_empty() {
        return;
    }
    let key_w = KEYS.iter().map(|(k, _)| k.len()).max().unwrap_or(0) as u16 + 2;
    let want_w = key_w + KEYS.iter().map(|(_, d)| d.len()).max().unwrap_or(0) as u16 + 4;
    let w = want_w.min(area.width);
    let h = (KEYS.len() as u16 + 2).min(area.height);
    let r = Rect::new(
        area.x + (area.width - w) / 2,
        area.y + (area.height - h) / 2,
        w,
        h,
    );
    Clear.render(r, buf);
    let inner = panel("keys · any key closes", true, r, buf);
    for (i, (k, d)) in KEYS.iter().enumerate().take(inner.height as usize) {
        let y = inner.y + i as u16;
        put(
            buf,
            inner,
            inner.x + 1,
            y,
            k,
            Style::new()
                .fg(Color::LightCyan)
                .add_modifier(Modifier::BOLD),
        );
        put(buf, inner, inner.x + 1 + key_w, y, d, Style::new());
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

    #[test]
    fn help_lists_every_key_at_a_large_size_and_fits_any_size() {
        for (w, h) in SIZES {
            let area = Rect::new(0, 0, w, h);
            let (_, text) = render_with(area, |b| render(area, b));
            if (w, h) == (200, 60) {
                for (k, d) in KEYS {
                    assert!(contains(&text, k), "{k}");
                    assert!(contains(&text, d), "{d}");
                }
            }
        }
    }

    #[test]
    fn help_at_80x24_shows_every_key_and_description_whole() {
        let area = Rect::new(0, 0, 80, 24);
        let (_, text) = render_with(area, |b| render(area, b));
        for (k, d) in KEYS {
            assert!(contains(&text, k), "{k} missing:\n{text:#?}");
            assert!(contains(&text, d), "{d} cut:\n{text:#?}");
        }
    }
}
