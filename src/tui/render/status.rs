//! The status line: model, quant mix, threads, context, speeds, speculation, hints.
//! Fields are dropped from the right end of the priority list when the line is short.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use unicode_width::UnicodeWidthStr;

use super::{num, put};
use crate::tui::state::App;

/// The status fields in priority order (most important first), with their styles.
pub fn fields(app: &App) -> Vec<(String, Style)> {
    let info = &app.info;
    let dim = Style::new().fg(Color::Gray);
    let spec = if !info.spec_available {
        ("spec n/a".to_string(), dim)
    } else if app.spec() {
        (
            "spec ON".to_string(),
            Style::new()
                .fg(Color::LightGreen)
                .add_modifier(Modifier::BOLD),
        )
    } else {
        ("spec off".to_string(), Style::new().fg(Color::Yellow))
    };
    let decode = match app.speeds.current() {
        Some(t) => format!("decode {} tok/s", num(t)),
        None => "decode – tok/s".into(),
    };
    let prefill = match app.speeds.prefill_tps {
        Some(t) => format!("prefill {} tok/s", num(t)),
        None => "prefill – tok/s".into(),
    };
    let mut v = vec![
        (
            info.model.clone(),
            Style::new().fg(Color::White).add_modifier(Modifier::BOLD),
        ),
        spec,
        (decode, Style::new().fg(Color::LightCyan)),
        (format!("ctx {}/{}", app.context_now(), info.n_ctx), dim),
        (prefill, dim),
        (info.quant_mix.clone(), dim),
        (format!("{} thr", info.threads), dim),
        (info.arch.clone(), dim),
        ("F1 help".into(), Style::new().fg(Color::DarkGray)),
    ];
    if app.generating {
        v.insert(
            1,
            ("● generating".into(), Style::new().fg(Color::LightGreen)),
        );
    }
    if let Some(n) = &app.notice {
        v.insert(
            0,
            (n.clone(), Style::new().fg(Color::Black).bg(Color::Yellow)),
        );
    }
    v
}

pub fn render(app: &App, area: Rect, buf: &mut Buffer) {
    if area.is_empty() {
        return;
    }
    let bg = Style::new().bg(Color::Rgb(30, 30, 40));
    buf.set_style(area.intersection(buf.area), bg);
    let sep = " │ ";
    let mut x = area.x;
    let mut first = true;
    for (text, style) in fields(app) {
        let need = text.width() as u16 + if first { 1 } else { sep.len() as u16 };
        if x + need > area.right() && !first {
            continue;
        }
        if first {
            x += put(buf, area, x, area.y, " ", bg);
        } else {
            x += put(buf, area, x, area.y, sep, bg.fg(Color::DarkGray));
        }
        x += put(
            buf,
            area,
            x,
            area.y,
            &text,
            style.bg(style.bg.unwrap_or(Color::Rgb(30, 30, 40))),
        );
        first = false;
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

    #[test]
    fn status_line_shows_model_quant_threads_context_speeds_and_spec() {
        let app = app_after_reply(true);
        let area = Rect::new(0, 0, 200, 1);
        let (_, text) = render_with(area, |b| render(&app, area, b));
        let line = &text[0];
        for want in [
            "demo (no weights)",
            "Q4_K_M",
            "4 thr",
            "ctx ",
            "/4096",
            "prefill ",
            "decode ",
            "spec ON",
            "clover_moe",
        ] {
            assert!(line.contains(want), "{want} missing from {line}");
        }
        assert!(!line.contains("decode –"), "{line}");
    }

    #[test]
    fn narrow_status_line_keeps_the_most_important_fields() {
        let app = app_after_reply(false);
        for (w, h) in SIZES {
            let area = Rect::new(0, 0, w, h.min(1));
            let (_, text) = render_with(area, |b| render(&app, area, b));
            if w == 80 {
                assert!(text[0].contains("demo (no weights)"));
                assert!(text[0].contains("spec off"));
            }
        }
    }
}
