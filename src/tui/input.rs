//! The multi-line input editor with a history of sent messages.

/// Text being typed, a cursor (byte offset, always on a char boundary) and the history.
#[derive(Clone, Debug, Default)]
pub struct InputEditor {
    text: String,
    cursor: usize,
    history: Vec<String>,
    /// Index into `history` while browsing; `None` when editing fresh text.
    browsing: Option<usize>,
    /// The text that was being typed when browsing started.
    stash: String,
}

impl InputEditor {
    pub fn text(&self) -> &str {
        &self.text
    }
    pub fn cursor(&self) -> usize {
        self.cursor
    }
    pub fn is_empty(&self) -> bool {
        self.text.is_empty()
    }
    pub fn history(&self) -> &[String] {
        &self.history
    }
    /// True while the text shown is an unedited history entry.
    pub fn is_browsing(&self) -> bool {
        self.browsing.is_some()
    }

    pub fn set_text(&mut self, text: &str) {
        self.text = text.to_string();
        self.cursor = self.text.len();
    }

    fn edited(&mut self) {
        self.browsing = None;
    }

    pub fn insert_char(&mut self, c: char) {
        self.text.insert(self.cursor, c);
        self.cursor += c.len_utf8();
        self.edited();
    }

    pub fn insert_str(&mut self, s: &str) {
        let s = s.replace("\r\n", "\n").replace('\r', "\n");
        self.text.insert_str(self.cursor, &s);
        self.cursor += s.len();
        self.edited();
    }

    pub fn newline(&mut self) {
        self.insert_char('\n');
    }

    pub fn backspace(&mut self) {
        if let Some(c) = self.text[..self.cursor].chars().next_back() {
            self.cursor -= c.len_utf8();
            self.text.remove(self.cursor);
            self.edited();
        }
    }

    pub fn delete(&mut self) {
        if self.cursor < self.text.len() {
            self.text.remove(self.cursor);
            self.edited();
        }
    }

    pub fn left(&mut self) {
        if let Some(c) = self.text[..self.cursor].chars().next_back() {
            self.cursor -= c.len_utf8();
        }
    }

    pub fn right(&mut self) {
        if let Some(c) = self.text[self.cursor..].chars().next() {
            self.cursor += c.len_utf8();
        }
    }

    fn line_start(&self) -> usize {
        self.text[..self.cursor].rfind('\n').map_or(0, |i| i + 1)
    }

    fn line_end(&self) -> usize {
        self.text[self.cursor..]
            .find('\n')
            .map_or(self.text.len(), |i| self.cursor + i)
    }

    pub fn home(&mut self) {
        self.cursor = self.line_start();
    }

    pub fn end(&mut self) {
        self.cursor = self.line_end();
    }

    /// Clears the whole input.
    pub fn clear(&mut self) {
        self.text.clear();
        self.cursor = 0;
        self.edited();
    }

    /// Moves the cursor one line up; false when already on the first line.
    pub fn line_up(&mut self) -> bool {
        let start = self.line_start();
        if start == 0 {
            return false;
        }
        let col = self.text[start..self.cursor].chars().count();
        let prev_start = self.text[..start - 1].rfind('\n').map_or(0, |i| i + 1);
        self.cursor = advance(&self.text, prev_start, start - 1, col);
        true
    }

    /// Moves the cursor one line down; false when already on the last line.
    pub fn line_down(&mut self) -> bool {
        let end = self.line_end();
        if end == self.text.len() {
            return false;
        }
        let col = self.text[self.line_start()..self.cursor].chars().count();
        let next_start = end + 1;
        let next_end = self.text[next_start..]
            .find('\n')
            .map_or(self.text.len(), |i| next_start + i);
        self.cursor = advance(&self.text, next_start, next_end, col);
        true
    }

    /// Shows the previous history entry (older).
    pub fn history_prev(&mut self) {
        if self.history.is_empty() {
            return;
        }
        let i = match self.browsing {
            None => {
                self.stash = self.text.clone();
                self.history.len() - 1
            }
            Some(i) => i.saturating_sub(1),
        };
        self.browsing = Some(i);
        self.set_text(&self.history[i].clone());
    }

    /// Shows the next history entry (newer), or the stashed text past the newest.
    pub fn history_next(&mut self) {
        let Some(i) = self.browsing else { return };
        if i + 1 < self.history.len() {
            self.browsing = Some(i + 1);
            self.set_text(&self.history[i + 1].clone());
        } else {
            self.browsing = None;
            let stash = std::mem::take(&mut self.stash);
            self.set_text(&stash);
        }
    }

    /// Takes the text to send (None when blank) and records it in the history.
    pub fn take(&mut self) -> Option<String> {
        if self.text.trim().is_empty() {
            return None;
        }
        let text = std::mem::take(&mut self.text);
        self.cursor = 0;
        self.browsing = None;
        self.stash.clear();
        if self.history.last() != Some(&text) {
            self.history.push(text.clone());
        }
        Some(text)
    }
}

/// The byte offset `col` chars after `start`, but not past `end`.
fn advance(text: &str, start: usize, end: usize, col: usize) -> usize {
    text[start..end]
        .char_indices()
        .nth(col)
        .map_or(end, |(i, _)| start + i)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn typed(s: &str) -> InputEditor {
        let mut e = InputEditor::default();
        for c in s.chars() {
            if c == '\n' {
                e.newline();
            } else {
                e.insert_char(c);
            }
        }
        e
    }

    #[test]
    fn editing_keeps_the_cursor_on_char_boundaries() {
        let mut e = typed("héllo");
        e.left();
        e.left();
        e.left();
        e.left();
        e.backspace();
        assert_eq!(e.text(), "éllo");
        e.right();
        e.delete();
        assert_eq!(e.text(), "élo");
        e.end();
        e.insert_char('!');
        assert_eq!(e.text(), "élo!");
    }

    #[test]
    fn up_and_down_move_between_lines_keeping_the_column() {
        let mut e = typed("abcdef\nxy\nlonger line");
        assert!(e.line_up());
        assert_eq!(&e.text()[e.cursor()..], "\nlonger line");
        // Column 2 (clamped to the end of "xy") carries over to the first line.
        assert!(e.line_up());
        assert_eq!(&e.text()[e.cursor()..], "cdef\nxy\nlonger line");
        assert!(!e.line_up());
        assert!(e.line_down());
        assert!(e.line_down());
        assert!(!e.line_down());
    }

    #[test]
    fn history_browses_back_and_returns_to_the_stashed_text() {
        let mut e = InputEditor::default();
        e.set_text("first");
        e.take();
        e.set_text("second");
        e.take();
        e.set_text("draft");
        e.history_prev();
        assert_eq!(e.text(), "second");
        e.history_prev();
        assert_eq!(e.text(), "first");
        e.history_prev();
        assert_eq!(e.text(), "first");
        e.history_next();
        assert_eq!(e.text(), "second");
        e.history_next();
        assert_eq!(e.text(), "draft");
        assert!(!e.is_browsing());
    }

    #[test]
    fn blank_input_is_not_sent() {
        let mut e = typed("  \n ");
        assert_eq!(e.take(), None);
        assert!(e.history().is_empty());
    }
}
