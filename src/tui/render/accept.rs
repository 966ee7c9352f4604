//! Draft acceptance: a histogram of accepted lengths per round, acceptance by draft
//! position, tokens per forward pass and the measured speed-up over plain decoding.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Style};

use super::{num, panel, put};
use crate::tui::state::{App, Focus};

const EIGHTHS: [&str; 9] = [" ", "▁", "▂", "▃", "▄", "▅", "▆", "▇", "█"];
const BAR: Color = Color::Green;
/// Columns per histogram bar (bar, gap).
const BAR_W: u16 = 3;
/// Width of the text column when it sits beside the histogram.
const TEXT_W: u16 = 30;

/// The lines of numbers shown next to the histogram.
pub fn summary(app: &App) -> Vec<(String, Style)> {
    let a = &app.accept;
    let s = &app.speeds;
    let w = Style::new().fg(Color::White);
    let g = Style::new().fg(Color::Gray);
    let mut v = Vec::new();
    let mode = if !app.info.spec_available {
        "speculation n/a for this model"
    } else if app.spec() {
        "speculation ON (F2 turns off)"
    } else {
        "speculation off (F2 turns on)"
    };
    v.push((mode.to_string(), g));
    v.push((
        format!(
            "accepted {} of {} drafts ({}%)",
            a.accepted,
            a.drafted,
            a.rate().map_or("–".into(), |r| format!("{:.0}", r * 100.0))
        ),
        w,
    ));
    v.push((
        format!(
            "tokens/forward {}",
            a.tokens_per_forward().map_or("–".into(), num)
        ),
        w,
    ));
    let by_pos: String = a
        .by_position()
        .iter()
        .map(|&r| EIGHTHS[(r * 8.0).round().clamp(0.0, 8.0) as usize])
        .collect();
    v.push((format!("by position ▕{by_pos}▏"), Style::new().fg(BAR)));
    let speed = |m: Option<f64>| m.map_or("–".to_string(), num);
    v.push((
        format!(
            "plain {} · spec {} tok/s",
            speed(s.plain.tok_per_s()),
            speed(s.spec.tok_per_s())
        ),
        g,
    ));
    v.push(match s.speedup() {
        Some(x) => (
            format!("speed-up ×{x:.2} over plain"),
            Style::new().fg(if x >= 1.0 {
                Color::LightGreen
            } else {
                Color::LightRed
            }),
        ),
        None => ("speed-up: run both modes (F2)".into(), g),
    });
    v
}

pub fn render(app: &App, area: Rect, buf: &mut Buffer) {
    if area.is_empty() {
        return;
    }
    let inner = panel("draft acceptance", app.focus == Focus::Accept, area, buf);
    if inner.is_empty() {
        return;
    }
    let lines = summary(app);
    let hist = &app.accept.hist;
    let hist_w = (hist.len().max(1) as u16) * BAR_W + 1;
    let beside = inner.width >= hist_w + TEXT_W && inner.height >= 4;
    let (chart, text) = if beside {
        (
            Rect::new(inner.x, inner.y, hist_w, inner.height),
            Rect::new(
                inner.x + hist_w + 1,
                inner.y,
                inner.width - hist_w - 1,
                inner.height,
            ),
        )
    } else {
        // Stacked: the numbers first; the chart gets whatever rows are left.
        let th = (lines.len() as u16).min(inner.height);
        (
            Rect::new(inner.x, inner.y + th, inner.width, inner.height - th),
            Rect::new(inner.x, inner.y, inner.width, th),
        )
    };
    for (i, (s, st)) in lines.iter().enumerate().take(text.height as usize) {
        put(buf, text, text.x, text.y + i as u16, s, *st);
    }
    draw_histogram(hist, chart, buf);
}

/// Vertical bars of `hist[a]` (rounds that accepted `a` drafts) with `a` below each.
fn draw_histogram(hist: &[u64], area: Rect, buf: &mut Buffer) {
    if area.height < 3 || area.width < BAR_W || hist.iter().all(|&c| c == 0) {
        return;
    }
    put(
        buf,
        area,
        area.x,
        area.y,
        "accepted/round",
        Style::new().fg(Color::Gray),
    );
    let bars_h = (area.height - 2) as u64;
    let peak = hist.iter().copied().max().unwrap_or(1).max(1);
    let base = area.bottom() - 2;
    for (len, &count) in hist.iter().enumerate() {
        let x = area.x + len as u16 * BAR_W;
        if x + 1 >= area.right() {
            break;
        }
        // Height in eighths of a row, so small differences still show.
        let eighths = (count * bars_h * 8).div_ceil(peak);
        for row in 0..bars_h {
            let fill = eighths.saturating_sub(row * 8).min(8) as usize;
            if fill > 0 {
                let y = base - row as u16;
                put(
                    buf,
                    area,
                    x,
                    y,
                    &EIGHTHS[fill].repeat(2),
                    Style::new().fg(BAR),
                );
            }
        }
        put(
            buf,
            area,
            x,
            area.bottom() - 1,
            &format!("{len:<2}"),
            Style::new().fg(Color::Gray),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use crate::tui::demo::DemoEngine;
    use crate::tui::engine::ChatEngine;

    fn app_with_rounds() -> App {
        let mut app = App::new(DemoEngine::instant().info(), None, true);
        for (acc, times) in [(0, 2), (1, 3), (2, 4), (3, 9), (4, 5), (5, 1)] {
            for _ in 0..times {
                app.accept.record(acc, 5);
            }
        }
        app
    }

    /// Filled cells of the bar above the label `len` in the rendered rows.
    fn bar_height(text: &[String], len: usize) -> usize {
        let label_row = text.iter().rposition(|l| l.contains("0  1  2")).unwrap();
        let row = &text[label_row];
        let zero = row[..row.find("0  1  2").unwrap()].chars().count();
        let col = zero + len * BAR_W as usize;
        text[..label_row]
            .iter()
            .filter(|l| {
                l.chars()
                    .nth(col)
                    .is_some_and(|c| EIGHTHS[1..].contains(&c.to_string().as_str()))
            })
            .count()
    }

    #[test]
    fn histogram_bar_of_the_most_common_length_is_the_tallest() {
        let app = app_with_rounds();
        for (w, h) in [(80, 24), (200, 60), (80, 12), (200, 20), (40, 16)] {
            let area = Rect::new(0, 0, w, h);
            let (_, text) = render_with(area, |b| render(&app, area, b));
            let heights: Vec<usize> = (0..=5).map(|l| bar_height(&text, l)).collect();
            let tallest = (0..=5).max_by_key(|&l| heights[l]).unwrap();
            assert_eq!(tallest, 3, "{w}x{h}: {heights:?}\n{text:#?}");
            assert!(heights[5] < heights[3], "{heights:?}");
        }
    }

    #[test]
    fn acceptance_numbers_are_shown() {
        let app = app_with_rounds();
        // 24 rounds of 5 drafts; 0·2 + 1·3 + 2·4 + 3·9 + 4·5 + 5·1 = 63 accepted.
        let area = Rect::new(0, 0, 80, 12);
        let (_, text) = render_with(area, |b| render(&app, area, b));
        assert!(
            contains(&text, "accepted 63 of 120 drafts (52%)"),
            "{text:#?}"
        );
        // (63 + 24) / 24 = 3.625
        assert!(contains(&text, "tokens/forward 3.6"), "{text:#?}");
        assert!(contains(&text, "by position ▕"));
    }

    #[test]
    fn acceptance_panel_renders_at_every_size() {
        let app = app_with_rounds();
        for (w, h) in SIZES {
            let area = Rect::new(0, 0, w, h);
            let (_, text) = render_with(area, |b| render(&app, area, b));
            if (w, h) == (200, 60) {
                assert!(contains(&text, "accepted/round"));
            }
        }
    }

    #[test]
    fn speedup_appears_once_both_modes_were_measured() {
        let app = app_after_reply(true);
        assert!(app.speeds.speedup().is_none());
        let mut app = app;
        app.speeds = crate::tui::stats::Speeds::default();
        app.speeds.plain.add(10, 400.0);
        app.speeds.spec.add(10, 200.0);
        let area = Rect::new(0, 0, 80, 12);
        let (_, text) = render_with(area, |b| render(&app, area, b));
        assert!(contains(&text, "speed-up ×2.00 over plain"), "{text:#?}");
    }
}
