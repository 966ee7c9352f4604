//! The parts of a reply as generation produces them: content (with its
//! tokens' log-probabilities), reasoning and tool calls, whichever dialect
//! answers.

use serde_json::Value;

use crate::sample::TokenLogprob;

use super::done::Done;
use super::request::Kind;
use super::text::{self, Piece, ToolCallParser};

/// Turns a slot's messages into response pieces: text (split into content,
/// reasoning and tool calls) and the end.
pub(crate) struct Assembler {
    kind: Kind,
    tools: Option<ToolCallParser>,
    pub n_calls: usize,
    id: String,
    /// Token log-probabilities not yet attached to content (the tool-call
    /// parser may hold text back).
    pending: Vec<TokenLogprob>,
}

/// One piece of a response; content comes with its tokens'
/// log-probabilities when they were asked for.
pub(crate) enum Part {
    Content(String, Vec<TokenLogprob>),
    Reasoning(String),
    Call(Value),
}

impl Assembler {
    /// An assembler for a reply of `kind` (with `tools`, its text is parsed
    /// for tool calls) whose id is `id`.
    pub fn new(kind: Kind, tools: bool, id: String) -> Assembler {
        Assembler {
            kind,
            tools: tools.then(ToolCallParser::default),
            n_calls: 0,
            id,
            pending: Vec::new(),
        }
    }

    pub fn text(&mut self, text: String, thinking: bool, logprobs: Vec<TokenLogprob>) -> Vec<Part> {
        if thinking && matches!(self.kind, Kind::Chat | Kind::Anthropic) {
            // OpenAI reports log-probabilities for the content only.
            return vec![Part::Reasoning(text)];
        }
        self.pending.extend(logprobs);
        match &mut self.tools {
            Some(p) => {
                let pieces = p.push(&text);
                self.pieces(pieces)
            }
            None => vec![Part::Content(text, std::mem::take(&mut self.pending))],
        }
    }

    pub fn finish(&mut self) -> Vec<Part> {
        match self.tools.as_mut() {
            Some(p) => {
                let pieces = p.finish();
                self.pieces(pieces)
            }
            None => Vec::new(),
        }
    }

    fn pieces(&mut self, pieces: Vec<Piece>) -> Vec<Part> {
        pieces
            .into_iter()
            .map(|p| match p {
                Piece::Text(t) => Part::Content(t, std::mem::take(&mut self.pending)),
                Piece::Call { name, arguments } => {
                    // The call's tokens are not content.
                    self.pending.clear();
                    let v = text::tool_call_json(&self.id, self.n_calls, &name, &arguments);
                    self.n_calls += 1;
                    Part::Call(v)
                }
            })
            .collect()
    }

    pub fn finish_reason(&self, d: &Done) -> &'static str {
        if self.n_calls > 0 {
            "tool_calls"
        } else if d.length {
            "length"
        } else {
            "stop"
        }
    }
}
