//! Per-layer timing: one row per layer with a bar split into mixer time (coloured by
//! layer kind: Gated DeltaNet or attention) and MoE time, and the total in ms per token.
//! Layers flow into several columns when the panel is wide, and scroll otherwise.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Style};

use super::{corner_tag, num, panel, put};
use crate::tui::engine::LayerKind;
use crate::tui::state::{App, Focus};

pub const GDN: Color = Color::Cyan;
pub const ATTN: Color = Color::Magenta;
pub const MOE: Color = Color::Yellow;
/// Narrowest useful column: label, a bar of 10, and the number.
const MIN_COL: u16 = 24;

/// A layer's kind as one letter, G (Gated DeltaNet) or A (attention).
pub fn kind_letter(k: LayerKind) -> &'static str {
    match k {
        LayerKind::DeltaNet => "G",
        LayerKind::Attention => "A",
    }
}

/// Draws the panel; returns how many layers fit at once (the page size).
pub fn render(app: &App, area: Rect, buf: &mut Buffer) -> u16 {
    if area.is_empty() {
        return 0;
    }
    let inner = panel("layer timing", app.focus == Focus::Timing, area, buf);
    if inner.is_empty() {
        return 0;
    }
    let t = &app.timing;
    let (mix, moe) = t.totals();
    // Before the first timed step there is nothing to show (and a sum of
    // negative zeros would print as "-0.00").
    // The layers' share of a token's time: the token's whole time is the
    // header's decode speed turned around (the same tok/s as everywhere).
    let whole = app
        .speeds
        .current()
        .map_or("–".to_string(), |t| num(1000.0 / t));
    let header = if mix + moe > 0.0 {
        format!(
            "layers {} of {whole} ms/token = mixer {} + MoE {}",
            num((mix + moe) as f64),
            num(mix as f64),
            num(moe as f64)
        )
    } else {
        format!("layers – of {whole} ms/token = mixer – + MoE –")
    };
    let mut x = inner.x;
    x += put(
        buf,
        inner,
        x,
        inner.y,
        &header,
        Style::new().fg(Color::White),
    );
    x += put(buf, inner, x, inner.y, "  ", Style::new());
    x += put(buf, inner, x, inner.y, "█ GDN ", Style::new().fg(GDN));
    x += put(buf, inner, x, inner.y, "█ attn ", Style::new().fg(ATTN));
    put(buf, inner, x, inner.y, "▒ MoE", Style::new().fg(MOE));
    if inner.height < 2 {
        return 0;
    }
    // Where the step's time goes by op kind, on its own line when there is
    // room for it and a few layers.
    let shares = app.ops.shares();
    let op_line = !shares.is_empty() && inner.height >= 5;
    if op_line {
        let y = inner.y + 1;
        let mut x = inner.x + put(buf, inner, inner.x, y, "ops ", Style::new().fg(Color::Gray));
        for (i, (name, share)) in shares.iter().enumerate() {
            let item = format!(
                "{}{name} {:.0}%",
                if i > 0 { " · " } else { "" },
                100.0 * share
            );
            if x + item.chars().count() as u16 > inner.x + inner.width {
                break;
            }
            x += put(buf, inner, x, y, &item, Style::new().fg(Color::White));
        }
    }
    let skip = 1 + op_line as u16;
    let body = Rect::new(inner.x, inner.y + skip, inner.width, inner.height - skip);
    let n = t.mixer_ms.len().max(app.info.n_layers());
    if t.samples == 0 {
        put(
            buf,
            body,
            body.x,
            body.y,
            "waiting for the first token…",
            Style::new().fg(Color::DarkGray),
        );
        return body.height;
    }
    let rows = body.height as usize;
    let max_cols = (body.width / MIN_COL).max(1) as usize;
    let cols = n.div_ceil(rows.max(1)).clamp(1, max_cols);
    let col_w = body.width / cols as u16;
    let per_col = rows;
    let slots = cols * per_col;
    let first = if slots >= n {
        0
    } else {
        app.timing_scroll.min(n - slots)
    };
    let max_total = (0..n)
        .map(|i| t.mixer_ms.get(i).unwrap_or(&0.0) + t.moe_ms.get(i).unwrap_or(&0.0))
        .fold(0.0f32, f32::max)
        .max(1e-6);
    let label_w = 5u16; // "39 G "
    let num_w = 6u16; // " 12.34"
    for (slot, layer) in (first..n).enumerate().take(slots) {
        let col = (slot / per_col) as u16;
        let row = (slot % per_col) as u16;
        let cx = body.x + col * col_w;
        let y = body.y + row;
        let cell = Rect::new(cx, y, col_w.saturating_sub(1).max(1), 1).intersection(body);
        let kind = app
            .info
            .layer_kinds
            .get(layer)
            .copied()
            .unwrap_or(LayerKind::DeltaNet);
        let kcol = if kind == LayerKind::Attention {
            ATTN
        } else {
            GDN
        };
        let mut x = cell.x;
        x += put(
            buf,
            cell,
            x,
            y,
            &format!("{layer:>2} "),
            Style::new().fg(Color::Gray),
        );
        x += put(buf, cell, x, y, kind_letter(kind), Style::new().fg(kcol));
        x += put(buf, cell, x, y, " ", Style::new());
        let mx = *t.mixer_ms.get(layer).unwrap_or(&0.0);
        let mo = *t.moe_ms.get(layer).unwrap_or(&0.0);
        let bar_w = cell.width.saturating_sub(label_w + num_w) as f32;
        let whole = (((mx + mo) / max_total) * bar_w).round() as usize;
        let a = (((mx / max_total) * bar_w).round() as usize).min(whole);
        let b = whole - a;
        x += put(buf, cell, x, y, &"█".repeat(a), Style::new().fg(kcol));
        x += put(buf, cell, x, y, &"▒".repeat(b), Style::new().fg(MOE));
        let pad = (bar_w as usize).saturating_sub(a + b);
        x += put(buf, cell, x, y, &" ".repeat(pad), Style::new());
        put(
            buf,
            cell,
            x,
            y,
            &format!("{:>6}", num((mx + mo) as f64)),
            Style::new().fg(Color::White),
        );
    }
    if first + slots < n || first > 0 {
        let tag = format!(
            " {}-{} of {n} · PgUp/PgDn ",
            first,
            (first + slots).min(n) - 1
        );
        corner_tag(buf, area, &tag);
    }
    slots.min(u16::MAX as usize) as u16
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use crate::tui::demo::DemoEngine;
    use crate::tui::engine::ChatEngine;

    fn app_with_times() -> App {
        let mut app = App::new(DemoEngine::instant().info(), None, false);
        // Layer 5 is by far the slowest; attention layers (3, 7, ...) spend 2 ms mixing.
        let mixer: Vec<f32> = (0..40)
            .map(|i| if (i + 1) % 4 == 0 { 2.0 } else { 1.0 })
            .collect();
        let mut moe = vec![1.0f32; 40];
        moe[5] = 9.0;
        app.timing.record(&mixer, &moe);
        app
    }

    #[test]
    fn the_op_split_takes_a_line_once_reported() {
        let mut app = app_with_times();
        app.ops.record(&[
            ("experts", 6.0),
            ("GDN proj", 3.0),
            ("head", 1.0),
            ("conv", 0.0),
        ]);
        let area = Rect::new(0, 0, 100, 20);
        let (_, text) = render_with(area, |b| {
            render(&app, area, b);
        });
        assert!(
            contains(&text, "ops experts 60% · GDN proj 30% · head 10%"),
            "{text:#?}"
        );
        assert!(
            !contains(&text, "conv"),
            "kinds that took no time are left out"
        );
        // Too short a panel keeps its rows for the layers.
        let small = Rect::new(0, 0, 100, 5);
        let (_, text) = render_with(small, |b| {
            render(&app, small, b);
        });
        assert!(!contains(&text, "ops "), "{text:#?}");
    }

    #[test]
    fn timing_panel_renders_at_every_size() {
        let app = app_with_times();
        for (w, h) in SIZES {
            let area = Rect::new(0, 0, w, h);
            let (_, text) = render_with(area, |b| {
                render(&app, area, b);
            });
            if (w, h) == (200, 60) {
                // All 40 layers fit in one or more columns, no scrolling.
                assert!(contains(&text, " 0 G"), "{text:#?}");
                assert!(contains(&text, "39 A"));
                assert!(contains(&text, "  10.0"), "layer 5 total");
                assert!(!contains(&text, "PgUp"));
            }
            if (w, h) == (80, 24) {
                assert!(contains(&text, "ms/token"));
                assert!(contains(&text, " 3 A"));
            }
        }
    }

    #[test]
    fn attention_and_deltanet_bars_have_their_own_colours_and_moe_another() {
        let app = app_with_times();
        let area = Rect::new(0, 0, 60, 12);
        let (buf, text) = render_with(area, |b| {
            render(&app, area, b);
        });
        // Row of layer 3 (attention) and layer 0 (GDN): the first bar cell's colour.
        let bar_fg = |layer: &str| {
            let y = text.iter().position(|l| l.contains(layer)).unwrap() as u16;
            let row = &text[y as usize];
            let x = row[..row.find(layer).unwrap()].chars().count() as u16 + 5;
            buf[(x, y)].fg
        };
        assert_eq!(bar_fg(" 3 A"), ATTN);
        assert_eq!(bar_fg(" 0 G"), GDN);
        assert!(buf
            .content()
            .iter()
            .any(|c| c.symbol() == "▒" && c.fg == MOE));
    }

    #[test]
    fn the_slowest_layer_has_the_longest_bar() {
        let app = app_with_times();
        let area = Rect::new(0, 0, 60, 50);
        let (_, text) = render_with(area, |b| {
            render(&app, area, b);
        });
        let bar = |l: &str| l.chars().filter(|&c| c == '█' || c == '▒').count();
        let longest = text.iter().max_by_key(|l| bar(l)).unwrap();
        assert!(longest.contains(" 5 G"), "{longest}");
    }

    #[test]
    fn many_layers_in_a_short_panel_scroll() {
        let mut app = app_with_times();
        let area = Rect::new(0, 0, 30, 10);
        let (_, text) = render_with(area, |b| {
            render(&app, area, b);
        });
        assert!(contains(&text, "PgUp"));
        assert!(!contains(&text, "20 G"));
        app.timing_scroll = 20;
        let (_, text) = render_with(area, |b| {
            render(&app, area, b);
        });
        assert!(contains(&text, "20 G"), "{text:#?}");
    }
}
