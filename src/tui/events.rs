//! Inputs to the app state: keys, mouse, paste (converted from crossterm here, so the
//! state never sees terminal types) and messages from the engine worker.

use crossterm::event::{
    Event as CtEvent, KeyCode as CtKey, KeyEvent, KeyEventKind, KeyModifiers, MouseEventKind,
};

use super::engine::EngineEvent;

/// A key, without terminal-library types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Code {
    Char(char),
    Enter,
    Esc,
    Backspace,
    Delete,
    Left,
    Right,
    Up,
    Down,
    Home,
    End,
    PageUp,
    PageDown,
    Tab,
    BackTab,
    F(u8),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Key {
    pub code: Code,
    pub ctrl: bool,
    pub alt: bool,
    pub shift: bool,
}

impl Key {
    pub fn plain(code: Code) -> Self {
        Key {
            code,
            ctrl: false,
            alt: false,
            shift: false,
        }
    }
    pub fn ctrl(code: Code) -> Self {
        Key {
            ctrl: true,
            ..Key::plain(code)
        }
    }
    pub fn alt(code: Code) -> Self {
        Key {
            alt: true,
            ..Key::plain(code)
        }
    }
}

/// What the user did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Input {
    Key(Key),
    /// Bracketed paste: inserted as text, never sent.
    Paste(String),
    /// Mouse wheel, in lines (positive: towards older text).
    Scroll(i32),
    /// The terminal changed size (the next draw adapts).
    Resize,
}

/// Lines one wheel notch scrolls.
pub const WHEEL_LINES: i32 = 3;

/// Converts a crossterm event; `None` for events the app ignores (key releases, moves).
pub fn from_crossterm(ev: CtEvent) -> Option<Input> {
    match ev {
        CtEvent::Key(k) => key(k).map(Input::Key),
        CtEvent::Paste(s) => Some(Input::Paste(s)),
        CtEvent::Mouse(m) => match m.kind {
            MouseEventKind::ScrollUp => Some(Input::Scroll(WHEEL_LINES)),
            MouseEventKind::ScrollDown => Some(Input::Scroll(-WHEEL_LINES)),
            _ => None,
        },
        CtEvent::Resize(..) => Some(Input::Resize),
        _ => None,
    }
}

fn key(k: KeyEvent) -> Option<Key> {
    if k.kind == KeyEventKind::Release {
        return None;
    }
    let code = match k.code {
        CtKey::Char(c) => Code::Char(c),
        CtKey::Enter => Code::Enter,
        CtKey::Esc => Code::Esc,
        CtKey::Backspace => Code::Backspace,
        CtKey::Delete => Code::Delete,
        CtKey::Left => Code::Left,
        CtKey::Right => Code::Right,
        CtKey::Up => Code::Up,
        CtKey::Down => Code::Down,
        CtKey::Home => Code::Home,
        CtKey::End => Code::End,
        CtKey::PageUp => Code::PageUp,
        CtKey::PageDown => Code::PageDown,
        CtKey::Tab => Code::Tab,
        CtKey::BackTab => Code::BackTab,
        CtKey::F(n) => Code::F(n),
        _ => return None,
    };
    Some(Key {
        code,
        ctrl: k.modifiers.contains(KeyModifiers::CONTROL),
        alt: k.modifiers.contains(KeyModifiers::ALT),
        shift: k.modifiers.contains(KeyModifiers::SHIFT),
    })
}

/// From the engine worker to the main thread.
#[derive(Debug)]
pub enum WorkerMsg {
    Event(EngineEvent),
    /// `generate` returned.
    Finished,
    /// `generate` panicked; the message is shown as the reply's error.
    Panicked(String),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crossterm::event::{KeyEventState, MouseEvent};

    #[test]
    fn crossterm_keys_convert_with_modifiers_and_releases_are_dropped() {
        let press = KeyEvent::new(CtKey::Enter, KeyModifiers::ALT);
        assert_eq!(
            from_crossterm(CtEvent::Key(press)),
            Some(Input::Key(Key::alt(Code::Enter)))
        );
        let release = KeyEvent {
            code: CtKey::Char('a'),
            modifiers: KeyModifiers::NONE,
            kind: KeyEventKind::Release,
            state: KeyEventState::NONE,
        };
        assert_eq!(from_crossterm(CtEvent::Key(release)), None);
        let wheel = MouseEvent {
            kind: MouseEventKind::ScrollDown,
            column: 0,
            row: 0,
            modifiers: KeyModifiers::NONE,
        };
        assert_eq!(
            from_crossterm(CtEvent::Mouse(wheel)),
            Some(Input::Scroll(-WHEEL_LINES))
        );
    }
}
