//! The conversation as the chat panel shows it: finished turns and the reply being
//! streamed, split into styled segments (plain / accepted / corrected, thinking or not).

use super::engine::{ChatMessage, Role, TokenKind};

/// A run of reply text with one look.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Segment {
    pub text: String,
    pub kind: TokenKind,
    pub thinking: bool,
}

/// How a reply ended.
#[derive(Clone, Debug, PartialEq)]
pub enum Ending {
    /// Still streaming.
    Streaming,
    /// Finished on its own: tokens and decode speed; `context_full`: cut because the
    /// context had no room left.
    Done {
        tokens: usize,
        tok_per_s: f64,
        context_full: bool,
    },
    /// Stopped by the user (Esc).
    Stopped,
    /// Read from a saved conversation (`--load`).
    Loaded,
    Error(String),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Turn {
    pub role: Role,
    /// For user and system turns, one plain segment.
    pub segments: Vec<Segment>,
    pub ending: Ending,
    /// False once the engine left this turn out to fit the context (it stays shown).
    pub in_context: bool,
    /// A line shown above the turn (e.g. that older turns were left out).
    pub note: Option<String>,
}

impl Turn {
    /// The visible text (thinking excluded), as sent back to the model.
    pub fn visible_text(&self) -> String {
        self.segments
            .iter()
            .filter(|s| !s.thinking)
            .map(|s| s.text.as_str())
            .collect::<String>()
            .trim()
            .to_string()
    }
    /// Words of thinking text, for the folded summary.
    pub fn thinking_words(&self) -> usize {
        self.segments
            .iter()
            .filter(|s| s.thinking)
            .map(|s| s.text.split_whitespace().count())
            .sum()
    }
}

/// Splits streamed text on `<think>` / `</think>` tags, also when a tag arrives in pieces.
#[derive(Clone, Debug, Default)]
pub struct ThinkSplitter {
    inside: bool,
    held: String,
}

const OPEN: &str = "<think>";
const CLOSE: &str = "</think>";

impl ThinkSplitter {
    pub fn inside(&self) -> bool {
        self.inside
    }

    /// Feeds a piece; returns the text pieces with their thinking flag, tags removed.
    /// A trailing prefix of a tag is held back until the next piece decides it.
    pub fn push(&mut self, piece: &str) -> Vec<(String, bool)> {
        let mut s = std::mem::take(&mut self.held);
        s.push_str(piece);
        let mut out: Vec<(String, bool)> = Vec::new();
        let mut rest = s.as_str();
        loop {
            let tag = if self.inside { CLOSE } else { OPEN };
            if let Some(at) = rest.find(tag) {
                if at > 0 {
                    out.push((rest[..at].to_string(), self.inside));
                }
                self.inside = !self.inside;
                rest = &rest[at + tag.len()..];
                continue;
            }
            // Hold back the longest suffix that could start the tag.
            let keep = (1..tag.len())
                .rev()
                .find(|&k| {
                    rest.len() >= k
                        && rest.is_char_boundary(rest.len() - k)
                        && tag.starts_with(&rest[rest.len() - k..])
                })
                .unwrap_or(0);
            let (emit, hold) = rest.split_at(rest.len() - keep);
            if !emit.is_empty() {
                out.push((emit.to_string(), self.inside));
            }
            self.held = hold.to_string();
            return out;
        }
    }

    /// Releases held-back text at the end of a reply.
    pub fn finish(&mut self) -> Option<(String, bool)> {
        let held = std::mem::take(&mut self.held);
        let inside = self.inside;
        self.inside = false;
        (!held.is_empty()).then_some((held, inside))
    }
}

/// All turns, plus the pending drafts of the reply in flight.
///
/// Turns before `start` belong to an earlier conversation (before a fresh start): they
/// stay on screen but are neither sent nor saved. The system turns at the very start
/// lead every conversation.
#[derive(Clone, Debug, Default)]
pub struct ChatLog {
    pub turns: Vec<Turn>,
    /// The first turn of the current conversation.
    pub start: usize,
    /// Drafts of the current speculative round, not yet verified.
    pub pending: Vec<String>,
    splitter: ThinkSplitter,
}

impl ChatLog {
    /// Adds a turn of a saved conversation (`--load`).
    pub fn push_loaded(&mut self, role: Role, text: &str) {
        self.push_plain(role, text);
        if let Some(t) = self.turns.last_mut() {
            t.ending = Ending::Loaded;
        }
    }

    pub fn push_plain(&mut self, role: Role, text: &str) {
        self.turns.push(Turn {
            role,
            segments: vec![Segment {
                text: text.to_string(),
                kind: TokenKind::Plain,
                thinking: false,
            }],
            ending: Ending::Done {
                tokens: 0,
                tok_per_s: 0.0,
                context_full: false,
            },
            in_context: true,
            note: None,
        });
    }

    /// Opens an empty assistant turn that streamed text goes into.
    pub fn begin_reply(&mut self) {
        self.splitter = ThinkSplitter::default();
        self.pending.clear();
        self.turns.push(Turn {
            role: Role::Assistant,
            segments: Vec::new(),
            ending: Ending::Streaming,
            in_context: true,
            note: None,
        });
    }

    fn streaming(&mut self) -> Option<&mut Turn> {
        self.turns
            .last_mut()
            .filter(|t| t.role == Role::Assistant && t.ending == Ending::Streaming)
    }

    pub fn is_streaming(&self) -> bool {
        self.turns
            .last()
            .is_some_and(|t| t.role == Role::Assistant && t.ending == Ending::Streaming)
    }

    /// Appends streamed text; `thinking` is the engine's flag, tags in `text` also count.
    pub fn push_text(&mut self, text: &str, kind: TokenKind, thinking: bool) {
        let pieces = self.splitter.push(text);
        if let Some(turn) = self.streaming() {
            for (piece, inside) in pieces {
                append(&mut turn.segments, &piece, kind, thinking || inside);
            }
        }
    }

    /// Ends the reply in flight, if any.
    pub fn end_reply(&mut self, ending: Ending) {
        self.pending.clear();
        let rest = self.splitter.finish();
        if let Some(turn) = self.streaming() {
            if let Some((text, inside)) = rest {
                append(&mut turn.segments, &text, TokenKind::Plain, inside);
            }
            turn.ending = ending;
        }
    }

    /// The conversation to send to the engine (visible text only): the system
    /// prompt, then the current conversation's turns still in the context, without
    /// failed exchanges (a user turn whose reply failed, and that reply).
    pub fn messages(&self) -> Vec<ChatMessage> {
        self.sent()
            .map(|i| &self.turns[i])
            .map(|t| ChatMessage::new(t.role, t.visible_text()))
            .collect()
    }

    fn failed(&self, i: usize) -> bool {
        let is_failed_reply =
            |t: &Turn| t.role == Role::Assistant && matches!(t.ending, Ending::Error(_));
        let t = &self.turns[i];
        is_failed_reply(t)
            || (t.role == Role::User && self.turns.get(i + 1).is_some_and(is_failed_reply))
    }

    /// The system turns that lead the log.
    fn n_system(&self) -> usize {
        self.turns
            .iter()
            .take_while(|t| t.role == Role::System)
            .count()
    }

    /// Indices of the turns [`ChatLog::messages`] sends.
    fn sent(&self) -> impl Iterator<Item = usize> + '_ {
        let n_system = self.n_system();
        (0..n_system).chain(
            (self.start.max(n_system)..self.turns.len())
                .filter(|&i| self.turns[i].in_context && !self.failed(i)),
        )
    }

    /// The engine left out the `dropped` oldest non-system messages it was sent:
    /// marks those turns as out of the context and notes it on the reply in flight.
    pub fn drop_oldest(&mut self, dropped: usize, tokens: usize) {
        let n_system = self.n_system();
        let gone: Vec<usize> = self.sent().skip(n_system).take(dropped).collect();
        for &i in &gone {
            self.turns[i].in_context = false;
        }
        if let Some(turn) = self.streaming() {
            turn.note = Some(format!(
                "context full: left out the {dropped} oldest message{} (marked above); \
                 {tokens} tokens kept",
                if dropped == 1 { "" } else { "s" }
            ));
        }
    }

    /// Starts a fresh conversation: earlier turns stay shown but are no longer sent.
    pub fn fresh_start(&mut self) {
        self.pending.clear();
        self.start = self.turns.len();
    }

    /// The current conversation as saved (`Ctrl-S`): the system prompt and every
    /// turn since the last fresh start, also those left out of the context, but no
    /// failed reply.
    pub fn saved_messages(&self) -> Vec<ChatMessage> {
        let n_system = self.n_system();
        (0..n_system)
            .chain(self.start.max(n_system)..self.turns.len())
            .map(|i| &self.turns[i])
            .filter(|t| !(t.role == Role::Assistant && matches!(t.ending, Ending::Error(_))))
            .map(|t| ChatMessage::new(t.role, t.visible_text()))
            .filter(|m| m.role == Role::User || !m.content.is_empty())
            .collect()
    }
}

fn append(segments: &mut Vec<Segment>, text: &str, kind: TokenKind, thinking: bool) {
    if text.is_empty() {
        return;
    }
    if let Some(last) = segments.last_mut() {
        if last.kind == kind && last.thinking == thinking {
            last.text.push_str(text);
            return;
        }
    }
    segments.push(Segment {
        text: text.to_string(),
        kind,
        thinking,
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed(pieces: &[&str]) -> Vec<(String, bool)> {
        let mut s = ThinkSplitter::default();
        let mut out: Vec<(String, bool)> = Vec::new();
        for p in pieces {
            for (t, th) in s.push(p) {
                match out.last_mut() {
                    Some(last) if last.1 == th => last.0.push_str(&t),
                    _ => out.push((t, th)),
                }
            }
        }
        if let Some((t, th)) = s.finish() {
            match out.last_mut() {
                Some(last) if last.1 == th => last.0.push_str(&t),
                _ => out.push((t, th)),
            }
        }
        out
    }

    #[test]
    fn think_tags_are_stripped_and_mark_the_text_between() {
        let out = feed(&["<think>", " hmm", "</think>", " Hello"]);
        assert_eq!(
            out,
            vec![(" hmm".to_string(), true), (" Hello".to_string(), false)]
        );
    }

    #[test]
    fn think_tags_split_across_pieces_are_recognised() {
        let out = feed(&["a<thi", "nk>b</th", "ink>c"]);
        assert_eq!(
            out,
            vec![
                ("a".to_string(), false),
                ("b".to_string(), true),
                ("c".to_string(), false)
            ]
        );
    }

    #[test]
    fn a_lone_angle_bracket_is_released_at_the_end() {
        assert_eq!(feed(&["x <"]), vec![("x <".to_string(), false)]);
        assert_eq!(feed(&["a < b"]), vec![("a < b".to_string(), false)]);
    }

    #[test]
    fn streamed_segments_merge_by_kind_and_history_excludes_thinking() {
        let mut log = ChatLog::default();
        log.push_plain(Role::User, "hi");
        log.begin_reply();
        log.push_text("<think>", TokenKind::Plain, false);
        log.push_text(" ponder", TokenKind::Plain, false);
        log.push_text("</think>", TokenKind::Plain, false);
        log.push_text("Hello", TokenKind::Plain, false);
        log.push_text(" there", TokenKind::Accepted, false);
        log.push_text(" friend", TokenKind::Accepted, false);
        log.end_reply(Ending::Stopped);
        let turn = &log.turns[1];
        assert_eq!(turn.segments.len(), 3);
        assert!(turn.segments[0].thinking);
        assert_eq!(turn.segments[2].text, " there friend");
        assert_eq!(turn.ending, Ending::Stopped);
        let msgs = log.messages();
        assert_eq!(msgs[1].content, "Hello there friend");
    }
}
