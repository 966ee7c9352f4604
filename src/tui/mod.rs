//! `clover chat`: the terminal UI (docs/DESIGN.md §7) and its line-mode fallback.
//!
//! * [`engine`]: the [`ChatEngine`] interface the model implements, and its events.
//! * [`demo`]: a deterministic fake engine (`clover chat --demo`, tests).
//! * [`state`] (+ [`chat`], [`input`], [`stats`]): app state, no terminal types.
//! * [`events`]: crossterm input converted to the state's own types; worker messages.
//! * [`render`]: drawing, one file per panel.
//! * this file: terminal setup and teardown, the panic hook, the worker thread and the
//!   main loop (poll input, drain engine events, redraw at most [`FRAME`] apart).
//! * [`lines`]: the line-based chat used when stdout is not a terminal.
//! * [`transcript`]: a conversation saved (Ctrl-S) and loaded (`--load`).

pub mod chat;
pub mod demo;
pub mod engine;
pub mod events;
pub mod input;
pub mod lines;
pub mod render;
pub mod state;
pub mod stats;
pub mod transcript;

use std::io::{self, Stdout};
use std::panic::{self, AssertUnwindSafe};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crossterm::event::{
    self as ct_event, DisableBracketedPaste, DisableMouseCapture, EnableBracketedPaste,
    EnableMouseCapture,
};
use crossterm::execute;
use crossterm::terminal::{
    disable_raw_mode, enable_raw_mode, EnterAlternateScreen, LeaveAlternateScreen,
};
use ratatui::backend::CrosstermBackend;
use ratatui::Terminal;

pub use engine::{
    ChatEngine, ChatMessage, Controls, Emit, EngineEvent, EngineInfo, LayerKind, Role, TokenKind,
};
pub use lines::{run_lines, run_lines_with, ChatOptions, LineError};

use events::WorkerMsg;
use state::{App, Request};

/// The shortest time between two redraws (at most ~30 frames a second).
pub const FRAME: Duration = Duration::from_millis(33);
/// How long to wait for the engine to notice a stop when quitting.
const QUIT_GRACE: Duration = Duration::from_secs(2);
/// When set, the UI panics after its first draw (to test the panic hook).
pub const PANIC_TEST_VAR: &str = "CLOVER_TUI_TEST_PANIC";
/// The worker thread's name; the panic hook leaves the terminal alone for it.
const WORKER_NAME: &str = "clover-engine";

/// Runs the full-screen chat until the user quits. The terminal is restored on every
/// exit path: normal return, error, and panic (by the hook installed here).
pub fn run_tui<E: ChatEngine>(engine: E, opts: &ChatOptions) -> io::Result<()> {
    let info = engine.info();
    let mut app = App::from_options(info, opts);
    let hook = PanicHook::install();
    let mut guard = TerminalGuard::enter()?;
    let worker = Worker::spawn(engine, Arc::clone(&app.controls));
    let result = main_loop(&mut guard.terminal, &mut app, &worker);
    worker.shut_down(&app.controls);
    drop(guard);
    hook.uninstall();
    result
}

fn main_loop(
    terminal: &mut Terminal<CrosstermBackend<Stdout>>,
    app: &mut App,
    worker: &Worker,
) -> io::Result<()> {
    let start = Instant::now();
    let panic_for_test = std::env::var_os(PANIC_TEST_VAR).is_some();
    let mut dirty = true;
    let mut last_draw: Option<Instant> = None;
    loop {
        // Engine output first, so a burst of tokens is drawn in one frame.
        while let Ok((msg, at)) = worker.rx.try_recv() {
            // Timed when the engine sent it, not when this loop got to it: a
            // burst drained in one frame would otherwise look instantaneous.
            let at_ms = at.saturating_duration_since(start).as_secs_f64() * 1000.0;
            app.on_worker(msg, at_ms);
            dirty = true;
        }
        if app.quit {
            return Ok(());
        }
        let due = last_draw.map_or(Duration::ZERO, |t| FRAME.saturating_sub(t.elapsed()));
        if dirty && due.is_zero() {
            let mut view = app.view;
            terminal.draw(|f| view = render::draw_frame(f, app))?;
            app.set_view(view);
            dirty = false;
            last_draw = Some(Instant::now());
            if panic_for_test {
                // Exercised by tests/tui_e2e.rs: the hook must restore the terminal.
                panic!("{PANIC_TEST_VAR} is set: panicking after the first draw");
            }
        }
        // Wait for input, but not past the next frame the engine may need.
        let wait = if dirty {
            due.max(Duration::from_millis(1))
        } else {
            FRAME
        };
        if ct_event::poll(wait)? {
            // Take everything already queued before drawing again.
            loop {
                let ev = ct_event::read()?;
                if let Some(input) = events::from_crossterm(ev) {
                    if let Some(Request::Generate(messages)) = app.handle_input(input) {
                        worker.send(messages);
                    }
                    dirty = true;
                }
                if app.quit || !ct_event::poll(Duration::ZERO)? {
                    break;
                }
            }
        }
    }
}

/// Raw mode, alternate screen, mouse capture and bracketed paste, undone on drop.
struct TerminalGuard {
    terminal: Terminal<CrosstermBackend<Stdout>>,
}

impl TerminalGuard {
    fn enter() -> io::Result<Self> {
        // Saved first, so that SIGTERM / SIGHUP / SIGBUS can put it back.
        crate::signals::terminal_entering();
        enable_raw_mode()?;
        let mut out = io::stdout();
        if let Err(e) = execute!(
            out,
            EnterAlternateScreen,
            EnableMouseCapture,
            EnableBracketedPaste
        ) {
            restore_terminal();
            return Err(e);
        }
        match Terminal::new(CrosstermBackend::new(out)) {
            Ok(terminal) => Ok(TerminalGuard { terminal }),
            Err(e) => {
                restore_terminal();
                Err(e)
            }
        }
    }
}

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        let _ = self.terminal.show_cursor();
        restore_terminal();
    }
}

/// Leaves every terminal mode the UI entered; safe to call more than once.
fn restore_terminal() {
    let _ = execute!(
        io::stdout(),
        DisableBracketedPaste,
        DisableMouseCapture,
        LeaveAlternateScreen,
        crossterm::cursor::Show
    );
    let _ = disable_raw_mode();
    crate::signals::terminal_left();
}

type Hook = Box<dyn Fn(&panic::PanicHookInfo<'_>) + Sync + Send + 'static>;

/// A panic hook that restores the terminal before the default report is printed.
/// Panics on the engine worker are caught there and shown in the chat instead, so the
/// hook stays quiet for that thread.
struct PanicHook {
    previous: Arc<Mutex<Option<Hook>>>,
}

impl PanicHook {
    fn install() -> Self {
        let previous: Arc<Mutex<Option<Hook>>> = Arc::new(Mutex::new(Some(panic::take_hook())));
        let prev = Arc::clone(&previous);
        panic::set_hook(Box::new(move |info| {
            if thread::current().name() == Some(WORKER_NAME) {
                return;
            }
            restore_terminal();
            if let Ok(guard) = prev.lock() {
                if let Some(h) = guard.as_ref() {
                    h(info);
                }
            }
        }));
        PanicHook { previous }
    }

    fn uninstall(self) {
        let _ = panic::take_hook();
        let prev = self.previous.lock().ok().and_then(|mut g| g.take());
        if let Some(h) = prev {
            panic::set_hook(h);
        }
    }
}

/// The engine on its own thread: receives conversations, streams events back.
struct Worker {
    tx: Option<Sender<Vec<ChatMessage>>>,
    /// Worker messages and when they were sent.
    rx: Receiver<(WorkerMsg, Instant)>,
    handle: Option<JoinHandle<()>>,
}

impl Worker {
    fn spawn<E: ChatEngine>(mut engine: E, controls: Arc<Controls>) -> Self {
        let (req_tx, req_rx) = mpsc::channel::<Vec<ChatMessage>>();
        let (msg_tx, msg_rx) = mpsc::channel::<(WorkerMsg, Instant)>();
        let handle = thread::Builder::new()
            .name(WORKER_NAME.into())
            .spawn(move || {
                while let Ok(messages) = req_rx.recv() {
                    let tx = msg_tx.clone();
                    let result = panic::catch_unwind(AssertUnwindSafe(|| {
                        engine.generate(&messages, &controls, &mut |ev| {
                            let _ = tx.send((WorkerMsg::Event(ev), Instant::now()));
                        });
                    }));
                    let done = match result {
                        Ok(()) => WorkerMsg::Finished,
                        Err(payload) => WorkerMsg::Panicked(panic_message(payload.as_ref())),
                    };
                    let failed = matches!(done, WorkerMsg::Panicked(_));
                    if msg_tx.send((done, Instant::now())).is_err() || failed {
                        // The UI is gone, or the engine's state is unknown after a panic.
                        break;
                    }
                }
            })
            .ok();
        Worker {
            tx: Some(req_tx),
            rx: msg_rx,
            handle,
        }
    }

    fn send(&self, messages: Vec<ChatMessage>) {
        if let Some(tx) = &self.tx {
            let _ = tx.send(messages);
        }
    }

    /// Asks the engine to stop and waits a little for it; a worker stuck in a long
    /// computation is left behind (the process is about to exit).
    fn shut_down(mut self, controls: &Controls) {
        controls.request_stop();
        self.tx = None;
        let deadline = Instant::now() + QUIT_GRACE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(_) => continue,
                Err(RecvTimeoutError::Disconnected) => {
                    if let Some(h) = self.handle.take() {
                        let _ = h.join();
                    }
                    return;
                }
                Err(RecvTimeoutError::Timeout) => return,
            }
        }
    }
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Panicky;

    impl ChatEngine for Panicky {
        fn info(&self) -> EngineInfo {
            demo::DemoEngine::instant().info()
        }
        fn generate(&mut self, _: &[ChatMessage], _: &Controls, emit: Emit<'_>) {
            emit(EngineEvent::Prefill { tokens: 1, ms: 1.0 });
            panic!("engine exploded");
        }
    }

    fn collect(worker: &Worker) -> Vec<WorkerMsg> {
        let mut out = Vec::new();
        while let Ok((m, _)) = worker.rx.recv_timeout(Duration::from_secs(10)) {
            let last = matches!(m, WorkerMsg::Finished | WorkerMsg::Panicked(_));
            out.push(m);
            if last {
                break;
            }
        }
        out
    }

    #[test]
    fn worker_streams_the_engine_events_then_finished() {
        let controls = Arc::new(Controls::new(true));
        let worker = Worker::spawn(demo::DemoEngine::instant(), Arc::clone(&controls));
        worker.send(vec![ChatMessage::new(Role::User, "hi")]);
        let msgs = collect(&worker);
        assert!(matches!(
            msgs.first(),
            Some(WorkerMsg::Event(EngineEvent::Prefill { .. }))
        ));
        assert!(msgs
            .iter()
            .any(|m| matches!(m, WorkerMsg::Event(EngineEvent::Verified { .. }))));
        assert!(matches!(msgs.last(), Some(WorkerMsg::Finished)));
        let t = Instant::now();
        worker.shut_down(&controls);
        assert!(t.elapsed() < QUIT_GRACE);
    }

    /// Sends two prefill events 60 ms apart.
    struct Slow;

    impl ChatEngine for Slow {
        fn info(&self) -> EngineInfo {
            demo::DemoEngine::instant().info()
        }
        fn generate(&mut self, _: &[ChatMessage], _: &Controls, emit: Emit<'_>) {
            emit(EngineEvent::Prefill { tokens: 1, ms: 1.0 });
            thread::sleep(Duration::from_millis(60));
            emit(EngineEvent::Prefill { tokens: 1, ms: 1.0 });
        }
    }

    #[test]
    fn worker_messages_carry_when_they_were_sent_not_when_they_are_read() {
        let controls = Arc::new(Controls::new(false));
        let worker = Worker::spawn(Slow, Arc::clone(&controls));
        worker.send(vec![ChatMessage::new(Role::User, "hi")]);
        // Read both only after they were sent, as a busy UI would.
        thread::sleep(Duration::from_millis(200));
        let (_, a) = worker.rx.recv_timeout(Duration::from_secs(10)).unwrap();
        let (_, b) = worker.rx.recv_timeout(Duration::from_secs(10)).unwrap();
        assert!(
            b.duration_since(a) >= Duration::from_millis(50),
            "{:?}",
            b - a
        );
        worker.shut_down(&controls);
    }

    #[test]
    fn worker_turns_an_engine_panic_into_a_message() {
        let controls = Arc::new(Controls::new(false));
        let worker = Worker::spawn(Panicky, Arc::clone(&controls));
        worker.send(vec![ChatMessage::new(Role::User, "hi")]);
        let msgs = collect(&worker);
        assert_eq!(msgs.len(), 2);
        assert!(matches!(&msgs[1], WorkerMsg::Panicked(m) if m == "engine exploded"));
        worker.shut_down(&controls);
    }
}
