//! Word wrapping of styled text to a width, by display columns.

use ratatui::style::Style;
use unicode_width::UnicodeWidthChar;

/// One wrapped row: runs of text with their style.
pub type Row = Vec<(String, Style)>;

/// Wraps styled runs to `width` columns: breaks at spaces where it can, splits words
/// longer than a row, starts a row at every `\n`. Tabs become spaces; other control
/// characters are dropped. Always returns at least one row.
pub fn wrap(runs: &[(&str, Style)], width: usize) -> Vec<Row> {
    let width = width.max(1);
    let mut rows: Vec<Row> = Vec::new();
    let mut row: Row = Vec::new();
    let mut row_w = 0usize;
    let mut word: Vec<(char, Style, usize)> = Vec::new();
    let mut word_w = 0usize;

    fn push(row: &mut Row, c: char, style: Style) {
        match row.last_mut() {
            Some((s, st)) if *st == style => s.push(c),
            _ => row.push((c.to_string(), style)),
        }
    }

    let flush_word = |rows: &mut Vec<Row>,
                      row: &mut Row,
                      row_w: &mut usize,
                      word: &mut Vec<(char, Style, usize)>,
                      word_w: &mut usize| {
        if word.is_empty() {
            return;
        }
        if *row_w + *word_w > width && *row_w > 0 {
            // Drop the trailing space the row ended with, then break.
            if let Some((s, _)) = row.last_mut() {
                if s.ends_with(' ') {
                    s.pop();
                }
            }
            rows.push(std::mem::take(row));
            *row_w = 0;
        }
        for (c, st, w) in word.drain(..) {
            if *row_w + w > width {
                rows.push(std::mem::take(row));
                *row_w = 0;
            }
            push(row, c, st);
            *row_w += w;
        }
        *word_w = 0;
    };

    for (text, style) in runs {
        for c in text.chars() {
            match c {
                '\n' => {
                    flush_word(&mut rows, &mut row, &mut row_w, &mut word, &mut word_w);
                    rows.push(std::mem::take(&mut row));
                    row_w = 0;
                }
                ' ' | '\t' => {
                    flush_word(&mut rows, &mut row, &mut row_w, &mut word, &mut word_w);
                    if row_w < width {
                        push(&mut row, ' ', *style);
                        row_w += 1;
                    }
                }
                _ => match c.width() {
                    Some(w) if w > 0 => {
                        word.push((c, *style, w));
                        word_w += w;
                    }
                    _ => {}
                },
            }
        }
    }
    flush_word(&mut rows, &mut row, &mut row_w, &mut word, &mut word_w);
    rows.push(row);
    rows
}

/// Display width of a row.
pub fn row_width(row: &Row) -> usize {
    row.iter()
        .flat_map(|(s, _)| s.chars())
        .map(|c| c.width().unwrap_or(0))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(rows: &[Row]) -> Vec<String> {
        rows.iter()
            .map(|r| r.iter().map(|(s, _)| s.as_str()).collect())
            .collect()
    }

    #[test]
    fn wraps_at_spaces_and_never_exceeds_the_width() {
        let rows = wrap(&[("the quick brown fox jumps", Style::new())], 10);
        assert_eq!(plain(&rows), vec!["the quick", "brown fox", "jumps"]);
        assert!(rows.iter().all(|r| row_width(r) <= 10));
    }

    #[test]
    fn splits_long_words_and_keeps_newlines() {
        let rows = wrap(&[("abcdefghij\nxy", Style::new())], 4);
        assert_eq!(plain(&rows), vec!["abcd", "efgh", "ij", "xy"]);
    }

    #[test]
    fn keeps_styles_per_run_and_counts_wide_characters() {
        let bold = Style::new().bold();
        let rows = wrap(&[("ab", Style::new()), ("cd 日本語", bold)], 5);
        assert_eq!(plain(&rows), vec!["abcd", "日本", "語"]);
        assert_eq!(rows[0].len(), 2);
        assert_eq!(rows[0][1].1, bold);
    }

    #[test]
    fn zero_width_and_empty_text_give_one_row() {
        assert_eq!(wrap(&[], 0).len(), 1);
        assert_eq!(plain(&wrap(&[("ab", Style::new())], 0)), vec!["a", "b"]);
    }
}
