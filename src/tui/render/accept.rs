//! Draft acceptance: what the adaptive controller chose and why, rounds drafted
//! (exploring ones counted) and plain steps, a histogram of accepted lengths per
//! round, acceptance by draft position, drafts accepted by the relaxed rule,
//! tokens per forward pass, time in
//! draft / verify / rollback and the measured speed-up over plain decoding. The
//! figures are packed into as few rows as the width allows, so all of them fit the
//! six text rows the panel has at 80×24.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Style};
use unicode_width::UnicodeWidthStr;

use super::{num, panel, put};
use crate::tui::state::{App, Focus};

const EIGHTHS: [&str; 9] = [" ", "▁", "▂", "▃", "▄", "▅", "▆", "▇", "█"];
const BAR: Color = Color::Green;
/// Columns per histogram bar (bar, gap).
const BAR_W: u16 = 3;
/// Width of the text column when it sits beside the histogram.
const TEXT_W: u16 = 30;

/// One figure of the panel: its text and style.
pub type Item = (String, Style);

/// Between items that share a row.
const SEP: &str = " · ";

/// The figures shown next to (or above) the histogram, in reading order: mode,
/// acceptance (relaxed included), tokens per forward, acceptance by position, time in
/// draft / verify / rollback, decode speeds and the speed-up over plain decoding.
pub fn summary(app: &App) -> Vec<Item> {
    let a = &app.accept;
    let s = &app.speeds;
    let e = app.spec_stats.as_ref();
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
    if let Some(e) = e {
        // What the controller did, and why (docs/DESIGN.md §4: never slower), then
        // what it bought: first, so the narrowest panel keeps them.
        if let Some(why) = &e.why {
            v.push((why.describe(), Style::new().fg(Color::Yellow)));
        }
        v.push(speedup_item(app));
        v.push((
            format!(
                "rounds {} (exploring {}) · plain steps {}",
                e.verify_passes, e.explore_rounds, e.plain_passes
            ),
            w,
        ));
    }
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
            "relaxed {}",
            e.map_or("–".into(), |e| e.accepted_relaxed.to_string())
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
    let ms = |ns: u64| num(ns as f64 / 1e6);
    match e {
        Some(e) => {
            v.push((format!("draft {} ms", ms(e.draft_ns)), g));
            v.push((format!("verify {} ms", ms(e.verify_ns)), g));
            v.push((format!("rollback {} ms", ms(e.rollback_ns)), g));
        }
        None => v.push(("draft/verify/rollback time n/a".into(), g)),
    }
    let speed = |m: Option<f64>| m.map_or("–".to_string(), num);
    // The engine's own clocks when it sends totals: token events reach the UI in
    // bursts, so arrival times understate the time a lone plain probe step took.
    let (plain_tps, spec_tps) = match e {
        Some(e) => (
            e.plain_token_ns().filter(|&ns| ns > 0.0).map(|ns| 1e9 / ns),
            (e.total_ns > 0 && e.tokens_emitted > 0)
                .then(|| e.tokens_emitted as f64 * 1e9 / e.total_ns as f64),
        ),
        None => (s.plain.tok_per_s(), s.spec.tok_per_s()),
    };
    v.push((
        format!(
            "plain step {} · spec loop {} tok/s",
            speed(plain_tps),
            speed(spec_tps)
        ),
        g,
    ));
    if e.is_none() {
        v.push(speedup_item(app));
    }
    v
}

/// The speed-up over plain decoding, and what it rests on; "n/a" with the reason
/// when nothing measured it.
fn speedup_item(app: &App) -> Item {
    let g = Style::new().fg(Color::Gray);
    let shown = |x: f64, basis: String| {
        let color = if x >= 1.0 {
            Color::LightGreen
        } else {
            Color::LightRed
        };
        (format!("speed-up ×{x:.2} {basis}"), Style::new().fg(color))
    };
    match &app.spec_stats {
        // The engine timed plain steps inside its loop: the estimate it gives.
        Some(e) => match e.speedup() {
            Some(x) => shown(
                x,
                format!(
                    "vs plain ({} plain step{} timed)",
                    e.plain_passes,
                    if e.plain_passes == 1 { "" } else { "s" }
                ),
            ),
            None => ("speed-up n/a: no plain step timed yet".into(), g),
        },
        // An engine without loop totals: wall-clock speeds of both modes.
        None => match app.speeds.speedup() {
            Some(x) => shown(x, "over plain (wall clock)".into()),
            None => ("speed-up n/a: run both modes (F2)".into(), g),
        },
    }
}

/// Greedily packs `items` into rows of at most `width` columns, `SEP` between
/// items on a row; an item wider than a row gets a row of its own (clipped).
pub fn pack(items: &[Item], width: u16) -> Vec<Vec<&Item>> {
    let width = width as usize;
    let mut rows: Vec<Vec<&Item>> = Vec::new();
    let mut used = 0;
    for it in items {
        let w = it.0.width();
        match rows.last_mut() {
            Some(row) if used + SEP.width() + w <= width => {
                row.push(it);
                used += SEP.width() + w;
            }
            _ => {
                rows.push(vec![it]);
                used = w;
            }
        }
    }
    rows
}

pub fn render(app: &App, area: Rect, buf: &mut Buffer) {
    if area.is_empty() {
        return;
    }
    let inner = panel("draft acceptance", app.focus == Focus::Accept, area, buf);
    if inner.is_empty() {
        return;
    }
    let items = summary(app);
    let hist = &app.accept.hist;
    let hist_w = (hist.len().max(1) as u16) * BAR_W + 1;
    // Beside the histogram when the figures fit there, else above it.
    let beside_w = inner.width.saturating_sub(hist_w + 1);
    let beside = inner.width >= hist_w + TEXT_W
        && inner.height >= 4
        && items.iter().all(|i| i.0.width() <= beside_w as usize)
        && pack(&items, beside_w).len() <= inner.height as usize;
    let text_w = if beside { beside_w } else { inner.width };
    let rows = pack(&items, text_w);
    let (chart, text) = if beside {
        (
            Rect::new(inner.x, inner.y, hist_w, inner.height),
            Rect::new(inner.x + hist_w + 1, inner.y, text_w, inner.height),
        )
    } else {
        // Stacked: the numbers first; the chart gets whatever rows are left.
        let th = (rows.len() as u16).min(inner.height);
        (
            Rect::new(inner.x, inner.y + th, inner.width, inner.height - th),
            Rect::new(inner.x, inner.y, inner.width, th),
        )
    };
    for (i, row) in rows.iter().enumerate().take(text.height as usize) {
        let y = text.y + i as u16;
        let mut x = text.x;
        for (k, (s, st)) in row.iter().enumerate() {
            if k > 0 {
                x += put(buf, text, x, y, SEP, Style::new().fg(Color::DarkGray));
            }
            x += put(buf, text, x, y, s, *st);
        }
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
    use crate::tui::engine::{ChatEngine, SpecStats};
    use ratatui::backend::TestBackend;
    use ratatui::Terminal;

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
    fn wall_clock_speedup_appears_when_the_engine_sends_no_totals() {
        let mut app = app_after_reply(true);
        app.spec_stats = None;
        app.speeds = crate::tui::stats::Speeds::default();
        let area = Rect::new(0, 0, 80, 12);
        let (_, text) = render_with(area, |b| render(&app, area, b));
        assert!(
            contains(&text, "speed-up n/a: run both modes (F2)"),
            "{text:#?}"
        );
        assert!(
            contains(&text, "draft/verify/rollback time n/a"),
            "{text:#?}"
        );
        assert!(contains(&text, "relaxed –"), "{text:#?}");
        app.speeds.plain.add(10, 400.0);
        app.speeds.spec.add(10, 200.0);
        let (_, text) = render_with(area, |b| render(&app, area, b));
        assert!(
            contains(&text, "speed-up ×2.00 over plain (wall clock)"),
            "{text:#?}"
        );
    }

    /// Loop totals as an engine sends them: 2 relaxed acceptances, 12.5 ms drafting,
    /// 40 ms verifying, 1.5 ms rolling back, 2 plain steps of 10 ms each, and 30
    /// tokens in 200 ms: plain decoding would have taken 300 ms, a ×1.50 speed-up.
    fn engine_totals() -> SpecStats {
        SpecStats {
            drafts_proposed: 120,
            drafts_accepted: 63,
            accepted_relaxed: 2,
            draft_ns: 12_500_000,
            verify_ns: 40_000_000,
            rollback_ns: 1_500_000,
            plain_passes: 2,
            plain_ns: 20_000_000,
            tokens_emitted: 30,
            total_ns: 200_000_000,
            ..SpecStats::default()
        }
    }

    /// The whole UI drawn on a `w`×`h` test terminal with the acceptance panel shown.
    fn screen(app: &mut App, w: u16, h: u16) -> Vec<String> {
        app.side = Focus::Accept;
        let mut term = Terminal::new(TestBackend::new(w, h)).unwrap();
        term.draw(|f| {
            crate::tui::render::draw_frame(f, app);
        })
        .unwrap();
        crate::tui::render::buffer_text(term.backend().buffer(), Rect::new(0, 0, w, h))
    }

    #[test]
    fn panel_shows_relaxed_count_phase_times_and_measured_speedup_at_80x24_and_larger() {
        let mut app = app_with_rounds();
        app.spec_stats = Some(engine_totals());
        for (w, h) in [(80, 24), (100, 30), (120, 30), (200, 60)] {
            let text = screen(&mut app, w, h);
            for want in [
                "accepted 63 of 120 drafts (52%)",
                "relaxed 2",
                "tokens/forward 3.6",
                "by position ▕",
                "draft 12.5 ms",
                "verify 40.0 ms",
                "rollback 1.50 ms",
                "speed-up ×1.50 vs plain (2 plain steps timed)",
            ] {
                assert!(contains(&text, want), "{w}x{h}: no {want:?} in\n{text:#?}");
            }
        }
    }

    #[test]
    fn decode_speeds_come_from_the_engine_clocks_not_from_bursty_token_arrivals() {
        let mut app = app_with_rounds();
        app.spec_stats = Some(engine_totals());
        // Token events that arrived in one burst: a near-zero wall-clock time.
        app.speeds.plain.add(10, 0.001);
        app.speeds.spec.add(10, 0.002);
        let items = summary(&app);
        // 2 plain steps in 20 ms: 100 tok/s; 30 tokens in 200 ms: 150 tok/s.
        assert!(
            items
                .iter()
                .any(|i| i.0 == "plain step 100 · spec loop 150 tok/s"),
            "{items:#?}"
        );
    }

    #[test]
    fn speedup_is_na_with_the_reason_when_no_plain_step_was_timed() {
        let mut app = app_with_rounds();
        app.spec_stats = Some(SpecStats {
            plain_passes: 0,
            plain_ns: 0,
            ..engine_totals()
        });
        // Wall-clock speeds of both modes do not stand in for the engine's figure.
        app.speeds.plain.add(10, 400.0);
        app.speeds.spec.add(10, 200.0);
        let text = screen(&mut app, 80, 24);
        assert!(
            contains(&text, "speed-up n/a: no plain step timed yet"),
            "{text:#?}"
        );
        assert!(!contains(&text, "speed-up ×"), "{text:#?}");
    }

    #[test]
    fn packed_rows_keep_every_figure_in_order_within_the_width() {
        let mut app = app_with_rounds();
        app.spec_stats = Some(engine_totals());
        let items = summary(&app);
        for width in [38, 52, 78, 120] {
            let rows = pack(&items, width);
            let flat: Vec<&Item> = rows.iter().flatten().copied().collect();
            assert_eq!(flat.len(), items.len());
            assert!(flat.iter().zip(&items).all(|(a, b)| *a == b));
            for row in &rows {
                let w: usize =
                    row.iter().map(|i| i.0.width()).sum::<usize>() + SEP.width() * (row.len() - 1);
                assert!(w <= width as usize || row.len() == 1, "{width}: {row:?}");
            }
        }
        // At 80 columns the figures need no more than the panel's six text rows.
        assert!(pack(&items, 78).len() <= 6, "{:#?}", pack(&items, 78));
    }

    #[test]
    fn demo_reply_fills_the_totals_with_a_timed_plain_step() {
        let mut app = app_after_reply(true);
        let st = app.spec_stats.clone().expect("the demo sends loop totals");
        assert!(st.plain_passes >= 1 && st.verify_passes > 0);
        let text = screen(&mut app, 80, 24);
        assert!(contains(&text, "plain step"), "{text:#?}");
        assert!(contains(&text, "vs plain ("), "{text:#?}");
        assert!(contains(&text, "relaxed 0"), "{text:#?}");
    }
}
