//! The application state: what is shown and what keys do. No terminal types here;
//! inputs come as [`Input`], engine output as [`WorkerMsg`], times as milliseconds.

use std::path::PathBuf;
use std::sync::Arc;

use super::chat::{ChatLog, Ending};
use super::engine::{ChatMessage, Controls, EngineEvent, EngineInfo, Role, SpecStats, TokenKind};
use super::events::{Code, Input, Key, WorkerMsg};
use super::input::InputEditor;
use super::lines::ChatOptions;
use super::stats::{AcceptStats, HeatWindow, LayerTiming, OpTiming, RoutingStats, Speeds};
use super::transcript::{self, Transcript};

/// Tokens the recent routing window covers.
pub const ROUTING_WINDOW: usize = 64;

/// The panel keys go to (Tab cycles). Text typing always goes to the input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Focus {
    Input,
    Chat,
    Timing,
    Routing,
    Accept,
}

impl Focus {
    const ORDER: [Focus; 5] = [
        Focus::Input,
        Focus::Chat,
        Focus::Timing,
        Focus::Routing,
        Focus::Accept,
    ];
    fn step(self, by: isize) -> Focus {
        let i = Focus::ORDER.iter().position(|&f| f == self).unwrap_or(0) as isize;
        Focus::ORDER[(i + by).rem_euclid(Focus::ORDER.len() as isize) as usize]
    }
    pub fn is_side_panel(self) -> bool {
        matches!(self, Focus::Timing | Focus::Routing | Focus::Accept)
    }
}

/// What the main loop must do for the state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// Start a reply to this conversation on the worker.
    Generate(Vec<ChatMessage>),
}

/// Facts from the last draw that key handling needs (page sizes).
#[derive(Clone, Copy, Debug, Default)]
pub struct ViewInfo {
    /// Rows of the chat text area.
    pub chat_rows: u16,
    /// Wrapped lines of the whole chat at the last draw.
    pub chat_lines: usize,
    /// Layers the timing panel shows at once.
    pub timing_rows: u16,
}

pub struct App {
    pub info: EngineInfo,
    pub chat: ChatLog,
    pub input: InputEditor,
    pub timing: LayerTiming,
    /// Time by op kind (the timing panel's second line).
    pub ops: OpTiming,
    pub routing: RoutingStats,
    pub accept: AcceptStats,
    pub speeds: Speeds,
    /// The engine's speculative-loop totals, once it sent any.
    pub spec_stats: Option<SpecStats>,
    /// Shared with the engine worker: stop and speculation switches.
    pub controls: Arc<Controls>,
    pub focus: Focus,
    /// The side panel the compact layout shows (the last side panel focused).
    pub side: Focus,
    pub show_help: bool,
    pub fold_thinking: bool,
    pub heat: HeatWindow,
    pub generating: bool,
    pub quit: bool,
    /// A one-line message in the status area, cleared by the next key.
    pub notice: Option<String>,
    /// Chat lines scrolled up from the bottom (0 follows the stream).
    pub chat_scroll: usize,
    /// First layer row shown in the timing panel.
    pub timing_scroll: usize,
    /// Context positions held after the last reply, and tokens since.
    pub context_used: usize,
    reply_tokens: usize,
    prefill_tokens: usize,
    /// A context shift was reported and its prefill not yet.
    after_shift: bool,
    pub view: ViewInfo,
    /// Where Ctrl-S saves the conversation.
    pub save_dir: PathBuf,
}

impl App {
    /// A fresh session; `system` becomes the first turn; speculation starts as `spec`
    /// (forced off when the engine cannot speculate).
    pub fn new(info: EngineInfo, system: Option<&str>, spec: bool) -> Self {
        let spec = spec && info.spec_available;
        let mut chat = ChatLog::default();
        if let Some(s) = system.filter(|s| !s.trim().is_empty()) {
            chat.push_plain(Role::System, s);
        }
        let routing = RoutingStats::new(info.n_layers(), info.n_experts, ROUTING_WINDOW);
        App {
            info,
            chat,
            input: InputEditor::default(),
            timing: LayerTiming::default(),
            ops: OpTiming::default(),
            routing,
            accept: AcceptStats::default(),
            speeds: Speeds::default(),
            spec_stats: None,
            controls: Arc::new(Controls::new(spec)),
            focus: Focus::Input,
            side: Focus::Timing,
            show_help: false,
            fold_thinking: false,
            heat: HeatWindow::Recent,
            generating: false,
            quit: false,
            notice: None,
            chat_scroll: 0,
            timing_scroll: 0,
            context_used: 0,
            reply_tokens: 0,
            prefill_tokens: 0,
            after_shift: false,
            view: ViewInfo::default(),
            save_dir: PathBuf::from("."),
        }
    }

    /// A session set up from the front ends' options: system prompt, speculation,
    /// the first notice, a loaded conversation (shown as earlier turns, sent with
    /// the next message) and where Ctrl-S saves.
    pub fn from_options(info: EngineInfo, opts: &ChatOptions) -> Self {
        let mut app = App::new(info, opts.system.as_deref(), opts.spec);
        for m in &opts.history {
            app.chat.push_loaded(m.role, &m.content);
        }
        app.notice = opts.notice.clone();
        if let Some(d) = &opts.save_dir {
            app.save_dir = d.clone();
        }
        app
    }

    pub fn spec(&self) -> bool {
        self.controls.spec()
    }

    /// Takes the sizes of a new draw. A chat scrolled up stays on the same text while
    /// new lines stream in below it.
    pub fn set_view(&mut self, v: ViewInfo) {
        if self.chat_scroll > 0 && v.chat_lines > self.view.chat_lines {
            self.chat_scroll += v.chat_lines - self.view.chat_lines;
        }
        self.view = v;
        let max = v.chat_lines.saturating_sub(v.chat_rows as usize);
        self.chat_scroll = self.chat_scroll.min(max);
    }

    /// Context in use now: after the last reply, plus the reply in flight.
    pub fn context_now(&self) -> usize {
        if self.generating {
            self.context_used + self.prefill_tokens + self.reply_tokens
        } else {
            self.context_used
        }
    }

    /// Handles one user input; returns what the main loop must start, if anything.
    pub fn handle_input(&mut self, input: Input) -> Option<Request> {
        match input {
            Input::Key(k) => self.handle_key(k),
            Input::Paste(s) => {
                self.input.insert_str(&s);
                None
            }
            Input::Scroll(lines) => {
                self.scroll_chat(lines as isize);
                None
            }
            Input::Resize => None,
        }
    }

    pub fn handle_key(&mut self, k: Key) -> Option<Request> {
        self.notice = None;
        if k.ctrl && matches!(k.code, Code::Char('c') | Code::Char('C')) {
            self.controls.request_stop();
            self.quit = true;
            return None;
        }
        if self.show_help {
            // Any key (but Ctrl-C) only closes the help.
            self.show_help = false;
            return None;
        }
        match k.code {
            Code::Esc if self.generating => {
                self.controls.request_stop();
                self.notice = Some("stopping…".into());
            }
            Code::F(1) => self.show_help = true,
            Code::F(2) => self.toggle_spec(),
            Code::F(3) => {
                self.heat = match self.heat {
                    HeatWindow::Recent => HeatWindow::Cumulative,
                    HeatWindow::Cumulative => HeatWindow::Recent,
                }
            }
            Code::F(4) => self.fold_thinking = !self.fold_thinking,
            Code::F(5) => self.fresh_start(),
            Code::Char('s') | Code::Char('S') if k.ctrl => self.save(transcript::now_unix()),
            Code::Tab => self.set_focus(self.focus.step(1)),
            Code::BackTab => self.set_focus(self.focus.step(-1)),
            Code::PageUp => self.page(1),
            Code::PageDown => self.page(-1),
            Code::Enter if k.alt || k.shift || k.ctrl => self.input.newline(),
            Code::Char('j') if k.ctrl => self.input.newline(),
            Code::Enter => return self.send(),
            Code::Up if k.ctrl => self.input.history_prev(),
            Code::Down if k.ctrl => self.input.history_next(),
            Code::Up => {
                if self.input.is_empty() || self.input.is_browsing() {
                    self.input.history_prev();
                } else {
                    self.input.line_up();
                }
            }
            Code::Down => {
                if self.input.is_browsing() {
                    self.input.history_next();
                } else {
                    self.input.line_down();
                }
            }
            Code::Left => self.input.left(),
            Code::Right => self.input.right(),
            Code::Home => self.input.home(),
            Code::End => self.input.end(),
            Code::Backspace => self.input.backspace(),
            Code::Delete => self.input.delete(),
            Code::Char('a') if k.ctrl => self.input.home(),
            Code::Char('e') if k.ctrl => self.input.end(),
            Code::Char('u') if k.ctrl => self.input.clear(),
            Code::Char(c) if !k.ctrl && !k.alt => self.input.insert_char(c),
            _ => {}
        }
        None
    }

    /// Starts a fresh conversation (F5): the turns so far stay shown above a marker
    /// but are no longer sent; the system prompt leads the new one.
    fn fresh_start(&mut self) {
        if self.generating {
            self.notice = Some("a reply is still streaming: Esc stops it first".into());
            return;
        }
        self.chat.fresh_start();
        self.context_used = 0;
        self.chat_scroll = 0;
        self.notice = Some("new conversation: earlier turns are no longer sent".into());
    }

    /// Saves the current conversation as Markdown and JSON (Ctrl-S) and says where.
    pub fn save(&mut self, now_unix: u64) {
        let t = Transcript::new(&self.info.model, now_unix, &self.chat.saved_messages());
        self.notice = Some(match transcript::save(&self.save_dir, &t) {
            Ok((md, json)) => format!("saved {} and {}", md.display(), json.display()),
            Err(e) => format!("could not save in {}: {e}", self.save_dir.display()),
        });
    }

    fn set_focus(&mut self, f: Focus) {
        self.focus = f;
        if f.is_side_panel() {
            self.side = f;
        }
    }

    fn toggle_spec(&mut self) {
        if !self.info.spec_available {
            self.notice = Some("speculation is not available for this model".into());
            return;
        }
        let on = !self.controls.spec();
        self.controls.set_spec(on);
        self.notice = Some(format!(
            "speculation {}{}",
            if on { "on" } else { "off" },
            if self.generating {
                " (from the next round)"
            } else {
                ""
            }
        ));
    }

    fn page(&mut self, dir: isize) {
        match self.focus {
            Focus::Timing => {
                let page = self.view.timing_rows.max(1) as isize;
                let max = self
                    .info
                    .n_layers()
                    .saturating_sub(self.view.timing_rows as usize);
                let v = (self.timing_scroll as isize - dir * page).max(0) as usize;
                self.timing_scroll = v.min(max);
            }
            _ => {
                let page = (self.view.chat_rows as isize - 1).max(1);
                self.scroll_chat(dir * page);
            }
        }
    }

    /// Scrolls the chat by `lines` (positive: up, towards older text).
    pub fn scroll_chat(&mut self, lines: isize) {
        let max = self
            .view
            .chat_lines
            .saturating_sub(self.view.chat_rows as usize);
        let v = (self.chat_scroll as isize + lines).max(0) as usize;
        self.chat_scroll = v.min(max);
    }

    fn send(&mut self) -> Option<Request> {
        if self.generating {
            self.notice = Some("a reply is still streaming: Esc stops it".into());
            return None;
        }
        let text = self.input.take()?;
        self.chat.push_plain(Role::User, &text);
        let messages = self.chat.messages();
        self.chat.begin_reply();
        self.generating = true;
        self.chat_scroll = 0;
        self.reply_tokens = 0;
        self.prefill_tokens = 0;
        self.speeds.start_reply();
        self.controls.clear_stop();
        Some(Request::Generate(messages))
    }

    /// Applies a message from the worker that arrived at `now_ms` (any fixed origin).
    pub fn on_worker(&mut self, msg: WorkerMsg, now_ms: f64) {
        match msg {
            WorkerMsg::Event(ev) => self.on_event(ev, now_ms),
            WorkerMsg::Finished => self.finish(),
            WorkerMsg::Panicked(m) => {
                self.chat
                    .end_reply(Ending::Error(format!("engine panicked: {m}")));
                self.finish();
            }
        }
    }

    fn finish(&mut self) {
        if self.chat.is_streaming() {
            let ending = if self.controls.stop_requested() {
                Ending::Stopped
            } else {
                Ending::Error("the engine ended the reply without Done".into())
            };
            self.chat.end_reply(ending);
        }
        if self.generating {
            self.context_used += self.prefill_tokens + self.reply_tokens;
        }
        self.generating = false;
        self.notice = None;
    }

    fn on_event(&mut self, ev: EngineEvent, now_ms: f64) {
        match ev {
            EngineEvent::Prefill { tokens, ms } => {
                if std::mem::take(&mut self.after_shift) {
                    self.context_used = self.context_used.saturating_sub(tokens);
                }
                self.prefill_tokens = tokens;
                self.speeds.prefill(tokens, ms, now_ms);
            }
            EngineEvent::Text {
                text,
                kind,
                thinking,
            } => {
                self.chat.pending.clear();
                self.chat.push_text(&text, kind, thinking);
                self.reply_tokens += 1;
                let spec = kind != TokenKind::Plain;
                let closes = kind != TokenKind::Accepted;
                self.speeds.token(spec, closes, now_ms);
            }
            EngineEvent::Drafted { texts } => self.chat.pending = texts,
            EngineEvent::Verified { accepted, drafted } => {
                self.chat.pending.clear();
                self.accept.record(accepted, drafted);
                self.speeds.verified();
            }
            EngineEvent::SpecStats(st) => self.spec_stats = Some(st),
            EngineEvent::LayerTimes { mixer_ms, moe_ms } => self.timing.record(&mixer_ms, &moe_ms),
            EngineEvent::OpTimes { ops } => self.ops.record(&ops),
            EngineEvent::Routing { layer_experts } => self.routing.record(&layer_experts),
            EngineEvent::ContextShift { dropped, tokens } => {
                self.chat.drop_oldest(dropped, tokens);
                // The context now holds the `tokens` kept; the prefill that follows
                // counts the part of them evaluated again.
                self.context_used = tokens;
                self.after_shift = true;
                self.notice = Some(format!(
                    "context full: {dropped} oldest message{} left out",
                    if dropped == 1 { "" } else { "s" }
                ));
            }
            EngineEvent::Done {
                tokens,
                decode_ms,
                context_used,
                context_full,
            } => {
                let tok_per_s = if decode_ms > 0.0 {
                    tokens as f64 / decode_ms * 1000.0
                } else {
                    0.0
                };
                self.chat.end_reply(Ending::Done {
                    tokens,
                    tok_per_s,
                    context_full,
                });
                self.speeds.reply_done(tok_per_s);
                // The engine's count replaces the estimate at `finish`.
                self.context_used = context_used;
                self.prefill_tokens = 0;
                self.reply_tokens = 0;
            }
            EngineEvent::Error(e) => self.chat.end_reply(Ending::Error(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tui::demo::DemoEngine;
    use crate::tui::engine::ChatEngine;

    fn app() -> App {
        App::new(DemoEngine::instant().info(), None, false)
    }

    fn type_text(app: &mut App, s: &str) {
        for c in s.chars() {
            app.handle_key(Key::plain(Code::Char(c)));
        }
    }

    fn text_event(t: &str, kind: TokenKind) -> WorkerMsg {
        WorkerMsg::Event(EngineEvent::Text {
            text: t.into(),
            kind,
            thinking: false,
        })
    }

    #[test]
    fn enter_sends_the_input_as_a_user_turn_and_requests_a_reply() {
        let mut a = app();
        type_text(&mut a, "hello");
        let req = a.handle_key(Key::plain(Code::Enter));
        assert_eq!(
            req,
            Some(Request::Generate(vec![ChatMessage::new(
                Role::User,
                "hello"
            )]))
        );
        assert!(a.generating);
        assert!(a.input.is_empty());
        assert_eq!(a.chat.turns.len(), 2);
        assert!(a.chat.is_streaming());
    }

    #[test]
    fn the_system_prompt_leads_the_conversation() {
        let mut a = App::new(DemoEngine::instant().info(), Some("be brief"), false);
        type_text(&mut a, "hi");
        let Some(Request::Generate(m)) = a.handle_key(Key::plain(Code::Enter)) else {
            panic!("no request")
        };
        assert_eq!(m[0], ChatMessage::new(Role::System, "be brief"));
        assert_eq!(m[1], ChatMessage::new(Role::User, "hi"));
    }

    #[test]
    fn alt_enter_inserts_a_newline_instead_of_sending() {
        let mut a = app();
        type_text(&mut a, "one");
        assert_eq!(a.handle_key(Key::alt(Code::Enter)), None);
        type_text(&mut a, "two");
        assert_eq!(a.input.text(), "one\ntwo");
        assert!(!a.generating);
        assert_eq!(a.handle_key(Key::ctrl(Code::Char('j'))), None);
        assert_eq!(a.input.text(), "one\ntwo\n");
    }

    #[test]
    fn enter_while_streaming_does_not_send_a_second_request() {
        let mut a = app();
        type_text(&mut a, "first");
        assert!(a.handle_key(Key::plain(Code::Enter)).is_some());
        type_text(&mut a, "second");
        assert_eq!(a.handle_key(Key::plain(Code::Enter)), None);
        assert_eq!(a.input.text(), "second");
        assert!(a.notice.as_deref().unwrap().contains("Esc"));
    }

    #[test]
    fn esc_sets_the_stop_flag_and_the_reply_ends_as_stopped() {
        let mut a = app();
        type_text(&mut a, "go");
        a.handle_key(Key::plain(Code::Enter));
        a.on_worker(text_event("partial", TokenKind::Plain), 1.0);
        assert!(!a.controls.stop_requested());
        a.handle_key(Key::plain(Code::Esc));
        assert!(a.controls.stop_requested());
        a.on_worker(WorkerMsg::Finished, 2.0);
        assert!(!a.generating);
        assert_eq!(a.chat.turns[1].ending, Ending::Stopped);
        // The next send clears the stop flag.
        type_text(&mut a, "again");
        a.handle_key(Key::plain(Code::Enter));
        assert!(!a.controls.stop_requested());
    }

    #[test]
    fn f2_toggles_speculation_in_the_shared_controls() {
        let mut a = app();
        assert!(!a.spec());
        a.handle_key(Key::plain(Code::F(2)));
        assert!(a.controls.spec());
        a.handle_key(Key::plain(Code::F(2)));
        assert!(!a.controls.spec());
    }

    #[test]
    fn f2_does_nothing_but_explain_when_the_model_cannot_speculate() {
        let mut info = DemoEngine::instant().info();
        info.spec_available = false;
        let mut a = App::new(info, None, true);
        assert!(!a.spec());
        a.handle_key(Key::plain(Code::F(2)));
        assert!(!a.spec());
        assert!(a.notice.as_deref().unwrap().contains("not available"));
    }

    #[test]
    fn ctrl_c_quits_and_stops_generation() {
        let mut a = app();
        a.handle_key(Key::ctrl(Code::Char('c')));
        assert!(a.quit);
        assert!(a.controls.stop_requested());
    }

    #[test]
    fn up_on_an_empty_input_recalls_history_and_ctrl_up_works_on_text() {
        let mut a = app();
        type_text(&mut a, "earlier");
        a.handle_key(Key::plain(Code::Enter));
        a.on_worker(WorkerMsg::Finished, 0.0);
        a.handle_key(Key::plain(Code::Up));
        assert_eq!(a.input.text(), "earlier");
        a.handle_key(Key::plain(Code::Down));
        assert_eq!(a.input.text(), "");
        type_text(&mut a, "typed");
        a.handle_key(Key::plain(Code::Up));
        assert_eq!(a.input.text(), "typed");
        a.handle_key(Key::ctrl(Code::Up));
        assert_eq!(a.input.text(), "earlier");
    }

    #[test]
    fn tab_cycles_focus_and_remembers_the_side_panel() {
        let mut a = app();
        let mut seen = vec![a.focus];
        for _ in 0..5 {
            a.handle_key(Key::plain(Code::Tab));
            seen.push(a.focus);
        }
        assert_eq!(seen.first(), seen.last());
        assert!(seen.contains(&Focus::Routing));
        a.handle_key(Key::plain(Code::BackTab));
        assert_eq!(a.focus, Focus::Accept);
        assert_eq!(a.side, Focus::Accept);
    }

    #[test]
    fn f1_opens_help_and_the_next_key_closes_it() {
        let mut a = app();
        a.handle_key(Key::plain(Code::F(1)));
        assert!(a.show_help);
        a.handle_key(Key::plain(Code::Char('x')));
        assert!(!a.show_help);
        assert!(a.input.is_empty(), "the closing key is not typed");
        a.handle_key(Key::plain(Code::F(1)));
        a.handle_key(Key::ctrl(Code::Char('c')));
        assert!(a.quit);
    }

    #[test]
    fn page_up_and_wheel_scroll_the_chat_within_its_length() {
        let mut a = app();
        a.view = ViewInfo {
            chat_rows: 10,
            chat_lines: 25,
            timing_rows: 5,
        };
        a.handle_key(Key::plain(Code::PageUp));
        assert_eq!(a.chat_scroll, 9);
        a.handle_key(Key::plain(Code::PageUp));
        assert_eq!(a.chat_scroll, 15);
        a.handle_input(Input::Scroll(-3));
        assert_eq!(a.chat_scroll, 12);
        a.handle_key(Key::plain(Code::PageDown));
        a.handle_key(Key::plain(Code::PageDown));
        assert_eq!(a.chat_scroll, 0);
    }

    #[test]
    fn a_chat_scrolled_up_stays_put_while_text_streams_in() {
        let mut a = app();
        let v = |lines| ViewInfo {
            chat_rows: 10,
            chat_lines: lines,
            timing_rows: 5,
        };
        a.set_view(v(30));
        a.scroll_chat(5);
        a.set_view(v(34));
        assert_eq!(a.chat_scroll, 9);
        // Following the stream (scroll 0) stays at the bottom.
        a.chat_scroll = 0;
        a.set_view(v(40));
        assert_eq!(a.chat_scroll, 0);
    }

    #[test]
    fn verified_rounds_clear_pending_drafts_and_feed_acceptance() {
        let mut a = app();
        type_text(&mut a, "x");
        a.handle_key(Key::plain(Code::Enter));
        a.on_worker(
            WorkerMsg::Event(EngineEvent::Drafted {
                texts: vec![" a".into(), " b".into()],
            }),
            1.0,
        );
        assert_eq!(a.chat.pending.len(), 2);
        a.on_worker(
            WorkerMsg::Event(EngineEvent::Verified {
                accepted: 1,
                drafted: 2,
            }),
            2.0,
        );
        assert!(a.chat.pending.is_empty());
        assert_eq!(a.accept.hist, vec![0, 1, 0]);
        a.on_worker(text_event(" a", TokenKind::Accepted), 3.0);
        a.on_worker(text_event(" c", TokenKind::Corrected), 3.0);
        a.on_worker(
            WorkerMsg::Event(EngineEvent::Done {
                tokens: 2,
                decode_ms: 10.0,
                context_used: 12,
                context_full: false,
            }),
            4.0,
        );
        a.on_worker(WorkerMsg::Finished, 4.0);
        assert_eq!(a.context_used, 12);
        assert!(matches!(
            a.chat.turns[1].ending,
            Ending::Done { tokens: 2, .. }
        ));
        assert_eq!(a.chat.messages()[1].content, "a c");
    }

    #[test]
    fn context_in_use_counts_the_reply_in_flight_until_the_engine_reports_it() {
        let mut a = app();
        a.context_used = 100;
        type_text(&mut a, "x");
        a.handle_key(Key::plain(Code::Enter));
        a.on_worker(
            WorkerMsg::Event(EngineEvent::Prefill {
                tokens: 10,
                ms: 5.0,
            }),
            0.0,
        );
        a.on_worker(text_event("a", TokenKind::Plain), 1.0);
        a.on_worker(text_event("b", TokenKind::Plain), 2.0);
        assert_eq!(a.context_now(), 112);
        // Stopped without Done: the estimate is kept.
        a.handle_key(Key::plain(Code::Esc));
        a.on_worker(WorkerMsg::Finished, 3.0);
        assert_eq!(a.context_now(), 112);
    }

    #[test]
    fn an_engine_panic_ends_the_reply_with_an_error() {
        let mut a = app();
        type_text(&mut a, "x");
        a.handle_key(Key::plain(Code::Enter));
        a.on_worker(WorkerMsg::Panicked("boom".into()), 1.0);
        assert!(!a.generating);
        assert!(matches!(&a.chat.turns[1].ending, Ending::Error(e) if e.contains("boom")));
    }

    /// Sends `text` and feeds the demo engine's reply (of `engine`) back in.
    fn exchange(a: &mut App, engine: &mut DemoEngine, text: &str) {
        a.input.set_text(text);
        let Some(Request::Generate(m)) = a.handle_key(Key::plain(Code::Enter)) else {
            panic!("no request")
        };
        let mut events = Vec::new();
        engine.generate(&m, &Controls::new(false), &mut |e| events.push(e));
        for e in events {
            a.on_worker(WorkerMsg::Event(e), 0.0);
        }
        a.on_worker(WorkerMsg::Finished, 0.0);
    }

    #[test]
    fn a_context_shift_leaves_the_oldest_turns_shown_but_no_longer_sent() {
        let mut engine = DemoEngine::new(1, 256, std::time::Duration::ZERO);
        let mut a = App::new(engine.info(), Some("sys"), false);
        for i in 0..4 {
            exchange(&mut a, &mut engine, &format!("question {i}"));
        }
        let out: Vec<&crate::tui::chat::Turn> =
            a.chat.turns.iter().filter(|t| !t.in_context).collect();
        assert!(!out.is_empty(), "no shift happened");
        assert!(a.chat.turns.iter().any(|t| t.note.is_some()));
        let sent = a.chat.messages();
        assert_eq!(sent[0], ChatMessage::new(Role::System, "sys"));
        assert_eq!(sent.len() + out.len(), a.chat.turns.len());
        // Some reply reached the end of the 256-token context and says so.
        assert!(a.chat.turns.iter().any(|t| matches!(
            t.ending,
            Ending::Done {
                context_full: true,
                ..
            }
        )));
        // The chat keeps answering: the last reply finished.
        assert!(matches!(
            a.chat.turns.last().unwrap().ending,
            Ending::Done { .. }
        ));
    }

    #[test]
    fn f5_starts_a_fresh_conversation_led_by_the_system_prompt() {
        let mut engine = DemoEngine::instant();
        let mut a = App::new(engine.info(), Some("sys"), false);
        exchange(&mut a, &mut engine, "first");
        a.handle_key(Key::plain(Code::F(5)));
        assert!(a.notice.as_deref().unwrap().contains("new conversation"));
        assert_eq!(a.context_used, 0);
        a.input.set_text("second");
        let Some(Request::Generate(m)) = a.handle_key(Key::plain(Code::Enter)) else {
            panic!("no request")
        };
        assert_eq!(
            m,
            vec![
                ChatMessage::new(Role::System, "sys"),
                ChatMessage::new(Role::User, "second")
            ]
        );
        // The earlier turns are still on screen.
        assert_eq!(a.chat.turns[1].visible_text(), "first");
    }

    #[test]
    fn f5_while_a_reply_streams_only_explains() {
        let mut a = app();
        type_text(&mut a, "x");
        a.handle_key(Key::plain(Code::Enter));
        a.handle_key(Key::plain(Code::F(5)));
        assert_eq!(a.chat.start, 0);
        assert!(a.notice.as_deref().unwrap().contains("Esc"));
    }

    #[test]
    fn ctrl_s_saves_markdown_and_json_that_load_back_as_the_conversation() {
        let dir = tempfile::tempdir().unwrap();
        let mut engine = DemoEngine::instant();
        let opts = ChatOptions {
            system: Some("sys".into()),
            save_dir: Some(dir.path().to_path_buf()),
            ..ChatOptions::default()
        };
        let mut a = App::from_options(engine.info(), &opts);
        exchange(&mut a, &mut engine, "hello there");
        a.handle_key(Key::ctrl(Code::Char('s')));
        let notice = a.notice.clone().unwrap();
        assert!(notice.starts_with("saved "), "{notice}");
        let mut files: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        assert_eq!(files.len(), 2, "{files:?}");
        assert!(notice.contains(&files[0].display().to_string()));
        assert!(files[0].to_string_lossy().ends_with(".json"));
        let t = Transcript::parse(&std::fs::read(&files[0]).unwrap()).unwrap();
        assert_eq!(t.system.as_deref(), Some("sys"));
        assert_eq!(t.history(), a.chat.messages()[1..].to_vec());
        let md = std::fs::read_to_string(&files[1]).unwrap();
        assert!(md.contains("hello there"), "{md}");
        // Loading it shows the turns and sends them with the next message.
        let opts = ChatOptions {
            system: t.system.clone(),
            history: t.history(),
            ..ChatOptions::default()
        };
        let mut b = App::from_options(engine.info(), &opts);
        b.input.set_text("more");
        let Some(Request::Generate(m)) = b.handle_key(Key::plain(Code::Enter)) else {
            panic!("no request")
        };
        assert_eq!(m.len(), 4);
        assert_eq!(m[1], ChatMessage::new(Role::User, "hello there"));
    }

    #[test]
    fn a_failed_exchange_is_not_sent_again() {
        let mut engine = DemoEngine::instant();
        let mut a = App::new(engine.info(), None, false);
        exchange(&mut a, &mut engine, "please /error");
        assert!(matches!(a.chat.turns[1].ending, Ending::Error(_)));
        a.input.set_text("next");
        let Some(Request::Generate(m)) = a.handle_key(Key::plain(Code::Enter)) else {
            panic!("no request")
        };
        assert_eq!(m, vec![ChatMessage::new(Role::User, "next")]);
    }

    #[test]
    fn context_in_use_after_a_shift_is_what_was_kept_plus_the_reply() {
        let mut a = app();
        a.context_used = 900;
        type_text(&mut a, "x");
        a.handle_key(Key::plain(Code::Enter));
        let ev = |e| WorkerMsg::Event(e);
        a.on_worker(
            ev(EngineEvent::ContextShift {
                dropped: 2,
                tokens: 300,
            }),
            0.0,
        );
        // 20 tokens of system prompt were kept in the cache; 280 evaluated again.
        a.on_worker(
            ev(EngineEvent::Prefill {
                tokens: 280,
                ms: 1.0,
            }),
            0.0,
        );
        a.on_worker(text_event("a", TokenKind::Plain), 1.0);
        assert_eq!(a.context_now(), 301);
    }
}
