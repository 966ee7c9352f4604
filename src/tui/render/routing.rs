//! The expert-routing heatmap: layers down, experts across, each binned to the space
//! there is (a cell shows the busiest expert of its bin), with the hottest
//! (layer, expert) pairs listed beside or below.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Style};

use super::{panel, put};
use crate::tui::state::{App, Focus};
use crate::tui::stats::HeatWindow;

/// Shades from cold to hot.
const SHADES: [(&str, Color); 6] = [
    (" ", Color::Reset),
    ("·", Color::Blue),
    ("░", Color::Cyan),
    ("▒", Color::Green),
    ("▓", Color::Yellow),
    ("█", Color::Red),
];
/// Width of the hot list when it sits beside the map.
const LIST_W: u16 = 20;
const LABEL_W: u16 = 4;

/// Bins `n` items into `slots` (≥ 1) contiguous ranges; item i goes to slot i·slots/n.
fn bin_of(i: usize, n: usize, slots: usize) -> usize {
    if n <= slots {
        i
    } else {
        i * slots / n
    }
}

/// The binned grid: `rows × cols` of the maximum count in each bin.
pub fn binned(grid: &[Vec<u32>], rows: usize, cols: usize) -> Vec<Vec<u32>> {
    let n_l = grid.len();
    let n_e = grid.first().map_or(0, |r| r.len());
    let rows = rows.min(n_l).max(1);
    let cols = cols.min(n_e).max(1);
    let mut out = vec![vec![0u32; cols]; rows];
    for (l, row) in grid.iter().enumerate() {
        let r = bin_of(l, n_l, rows);
        for (e, &c) in row.iter().enumerate() {
            let k = bin_of(e, n_e, cols);
            out[r][k] = out[r][k].max(c);
        }
    }
    out
}

pub fn render(app: &App, area: Rect, buf: &mut Buffer) {
    if area.is_empty() {
        return;
    }
    let r = &app.routing;
    let (name, other) = match app.heat {
        HeatWindow::Recent => (
            format!("recent {} tok", r.tokens_in(app.heat)),
            "cumulative",
        ),
        HeatWindow::Cumulative => (format!("all {} tok", r.tokens_in(app.heat)), "recent"),
    };
    let title = format!("experts · {name} · F3 {other}");
    let inner = panel(&title, app.focus == Focus::Routing, area, buf);
    if inner.is_empty() {
        return;
    }
    let grid = r.grid(app.heat);
    if r.tokens_in(app.heat) == 0 {
        put(
            buf,
            inner,
            inner.x,
            inner.y,
            "no routing yet",
            Style::new().fg(Color::DarkGray),
        );
        return;
    }
    // The hot list goes beside the map when there is room, else on the last row.
    let beside = inner.width >= LABEL_W + 16 + LIST_W;
    let (map, list) = if beside {
        (
            Rect::new(inner.x, inner.y, inner.width - LIST_W, inner.height),
            Rect::new(inner.right() - LIST_W, inner.y, LIST_W, inner.height),
        )
    } else {
        let lh = u16::from(inner.height >= 2);
        (
            Rect::new(inner.x, inner.y, inner.width, inner.height - lh),
            Rect::new(inner.x, inner.bottom() - lh, inner.width, lh),
        )
    };
    draw_map(grid, r.n_experts, map, buf);
    let tokens = r.tokens_in(app.heat).max(1) as f64;
    let hot = r.hottest(app.heat, list.height.max(1) as usize * 4);
    let hot_style = Style::new().fg(Color::LightRed);
    if beside {
        put(
            buf,
            list,
            list.x + 1,
            list.y,
            "hottest",
            Style::new().fg(Color::White),
        );
        for (i, (l, e, c)) in hot
            .iter()
            .take(list.height.saturating_sub(1) as usize)
            .enumerate()
        {
            let s = format!("L{l:<2} E{e:<3} {:>3.0}%", *c as f64 / tokens * 100.0);
            put(buf, list, list.x + 1, list.y + 1 + i as u16, &s, hot_style);
        }
    } else if !list.is_empty() {
        let mut x = list.x;
        x += put(buf, list, x, list.y, "hot:", Style::new().fg(Color::White));
        for (l, e, _) in hot.iter().take(4) {
            x += put(buf, list, x, list.y, &format!(" L{l}·E{e}"), hot_style);
        }
    }
}

fn draw_map(grid: &[Vec<u32>], n_experts: usize, area: Rect, buf: &mut Buffer) {
    if area.is_empty() || grid.is_empty() {
        return;
    }
    let axis = u16::from(area.height >= 3);
    let label = if area.width > LABEL_W + 4 { LABEL_W } else { 0 };
    let rows = (area.height - axis) as usize;
    let cols = (area.width - label) as usize;
    let cells = binned(grid, rows, cols);
    let peak = cells.iter().flatten().copied().max().unwrap_or(0).max(1);
    let n_l = grid.len();
    for (ri, row) in cells.iter().enumerate() {
        let y = area.y + ri as u16;
        if label > 0 {
            // The first layer of this bin.
            let first = (0..n_l)
                .find(|&l| bin_of(l, n_l, cells.len()) == ri)
                .unwrap_or(0);
            put(
                buf,
                area,
                area.x,
                y,
                &format!("L{first:<2}"),
                Style::new().fg(Color::Gray),
            );
        }
        for (ci, &c) in row.iter().enumerate() {
            let level = if c == 0 {
                0
            } else {
                1 + ((c as u64 * (SHADES.len() as u64 - 2)) / peak as u64) as usize
            };
            let (sym, color) = SHADES[level.min(SHADES.len() - 1)];
            put(
                buf,
                area,
                area.x + label + ci as u16,
                y,
                sym,
                Style::new().fg(color),
            );
        }
    }
    if axis > 0 {
        let y = area.bottom() - 1;
        let right = format!("E{}", n_experts.saturating_sub(1));
        put(
            buf,
            area,
            area.x + label,
            y,
            "E0",
            Style::new().fg(Color::Gray),
        );
        let used = cells.first().map_or(0, |r| r.len()) as u16;
        let x = (area.x + label + used).saturating_sub(right.len() as u16);
        put(buf, area, x, y, &right, Style::new().fg(Color::Gray));
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use crate::tui::demo::DemoEngine;
    use crate::tui::engine::ChatEngine;

    /// 40 layers; every token picks expert 137 in layer 9, otherwise spread experts.
    fn app_with_routing() -> App {
        let mut app = App::new(DemoEngine::instant().info(), None, false);
        for t in 0..50u16 {
            let layers: Vec<Vec<u16>> = (0..40u16)
                .map(|l| {
                    let mut v: Vec<u16> = (0..8).map(|k| (t * 8 + k + l) % 256).collect();
                    if l == 9 {
                        v[0] = 137;
                    }
                    v
                })
                .collect();
            app.routing.record(&layers);
        }
        app
    }

    #[test]
    fn heatmap_lists_the_hottest_expert_at_every_size() {
        let app = app_with_routing();
        for (w, h) in SIZES {
            let area = Rect::new(0, 0, w, h);
            let (_, text) = render_with(area, |b| render(&app, area, b));
            if (w, h) == (200, 60) {
                assert!(contains(&text, "L9  E137 100%"), "{text:#?}");
            }
            if (w, h) == (80, 24) {
                assert!(contains(&text, "E137"), "{text:#?}");
            }
        }
        // Narrow: the list moves below the map.
        let area = Rect::new(0, 0, 30, 8);
        let (_, text) = render_with(area, |b| render(&app, area, b));
        assert!(contains(&text, "hot: L9·E137"), "{text:#?}");
    }

    #[test]
    fn the_hottest_cell_is_drawn_in_the_hottest_shade() {
        let app = app_with_routing();
        // 256 experts over 256 columns, 40 layers over 40 rows: one cell per pair.
        let area = Rect::new(0, 0, 2 + LABEL_W + 256 + LIST_W, 2 + 40 + 1);
        let (buf, text) = render_with(area, |b| render(&app, area, b));
        let y = 1 + 9;
        assert!(text[y].starts_with("│L9 "), "{}", text[y]);
        let x = 1 + LABEL_W + 137;
        assert_eq!(buf[(x, y as u16)].symbol(), "█");
        let hottest = buf.content().iter().filter(|c| c.symbol() == "█").count();
        assert_eq!(hottest, 1);
    }

    #[test]
    fn binning_keeps_the_maximum_of_each_bin() {
        let grid = vec![vec![1, 5, 0, 2], vec![0, 0, 7, 0], vec![3, 0, 0, 0]];
        assert_eq!(
            binned(&grid, 3, 2),
            vec![vec![5, 2], vec![0, 7], vec![3, 0]]
        );
        assert_eq!(binned(&grid, 1, 1), vec![vec![7]]);
        assert_eq!(binned(&grid, 10, 10), grid);
    }

    #[test]
    fn f3_switches_between_recent_and_cumulative_counts() {
        let mut app = app_with_routing();
        let area = Rect::new(0, 0, 80, 20);
        let (_, text) = render_with(area, |b| render(&app, area, b));
        assert!(text[0].contains("recent 50 tok"), "{}", text[0]);
        for _ in 0..100 {
            app.routing.record(&vec![vec![1u16]; 40]);
        }
        let (_, text) = render_with(area, |b| render(&app, area, b));
        assert!(text[0].contains("recent 64 tok"), "{}", text[0]);
        app.handle_key(crate::tui::events::Key::plain(crate::tui::events::Code::F(
            3,
        )));
        let (_, text) = render_with(area, |b| render(&app, area, b));
        assert!(text[0].contains("all 150 tok"), "{}", text[0]);
    }
}
