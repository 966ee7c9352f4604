//! The text side of a response, as it streams: stop strings (text after a
//! stop string is never sent; a possible start of one is held back until it is
//! decided) and Qwen-style tool calls (`<tool_call>{"name": …, "arguments":
//! …}</tool_call>` in the content become `tool_calls`).

use serde::Serialize;
use serde_json::Value;

/// Cuts the stream at the first stop string.
#[derive(Debug, Default)]
pub struct StopMatcher {
    stops: Vec<String>,
    held: String,
    pub stopped: bool,
    /// The stop string that ended the text.
    pub word: Option<String>,
}

impl StopMatcher {
    pub fn new(stops: Vec<String>) -> StopMatcher {
        StopMatcher {
            stops: stops.into_iter().filter(|s| !s.is_empty()).collect(),
            held: String::new(),
            stopped: false,
            word: None,
        }
    }

    /// Adds `piece`; returns the text that can be sent now.
    pub fn push(&mut self, piece: &str) -> String {
        if self.stopped {
            return String::new();
        }
        self.held.push_str(piece);
        if let Some((at, word)) = self
            .stops
            .iter()
            .filter_map(|s| self.held.find(s.as_str()).map(|at| (at, s)))
            .min_by_key(|&(at, _)| at)
        {
            self.stopped = true;
            self.word = Some(word.clone());
            let out = self.held[..at].to_string();
            self.held.clear();
            return out;
        }
        // Hold back the longest tail that could still begin a stop string.
        let mut keep = 0;
        for s in &self.stops {
            for (i, _) in s.char_indices().skip(1) {
                if i > keep && self.held.ends_with(&s[..i]) {
                    keep = i;
                }
            }
        }
        let cut = self.held.len() - keep;
        let out = self.held[..cut].to_string();
        self.held.drain(..cut);
        out
    }

    /// The end of generation: whatever is held is sent.
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.held)
    }
}

const OPEN: &str = "<tool_call>";
const CLOSE: &str = "</tool_call>";

/// One piece of parsed content.
#[derive(Clone, Debug, PartialEq)]
pub enum Piece {
    Text(String),
    /// A complete call: `{"name": …, "arguments": "<json text>"}`.
    Call {
        name: String,
        arguments: String,
    },
}

/// Splits streamed content into text and tool calls.
#[derive(Debug, Default)]
pub struct ToolCallParser {
    held: String,
    inside: bool,
}

/// A tool call's JSON (`{"name", "arguments"}`) as name and argument text; a
/// block that is not such JSON stays text.
fn parse_call(body: &str) -> Option<(String, String)> {
    let v: Value = serde_json::from_str(body.trim()).ok()?;
    let name = v.get("name")?.as_str()?.to_string();
    let arguments = match v.get("arguments") {
        Some(Value::String(s)) => s.clone(),
        Some(a) => a.to_string(),
        None => "{}".to_string(),
    };
    Some((name, arguments))
}

impl ToolCallParser {
    pub fn push(&mut self, text: &str) -> Vec<Piece> {
        self.held.push_str(text);
        let mut out = Vec::new();
        loop {
            if self.inside {
                let Some(end) = self.held.find(CLOSE) else {
                    return out;
                };
                let body = self.held[..end].to_string();
                self.held.drain(..end + CLOSE.len());
                self.inside = false;
                match parse_call(&body) {
                    Some((name, arguments)) => out.push(Piece::Call { name, arguments }),
                    None => out.push(Piece::Text(format!("{OPEN}{body}{CLOSE}"))),
                }
            } else if let Some(start) = self.held.find(OPEN) {
                if start > 0 {
                    out.push(Piece::Text(self.held[..start].to_string()));
                }
                self.held.drain(..start + OPEN.len());
                self.inside = true;
            } else {
                // Hold back a possible start of the tag.
                let keep = (1..OPEN.len())
                    .rev()
                    .find(|&i| self.held.ends_with(&OPEN[..i]))
                    .unwrap_or(0);
                let cut = self.held.len() - keep;
                if cut > 0 {
                    out.push(Piece::Text(self.held[..cut].to_string()));
                    self.held.drain(..cut);
                }
                return out;
            }
        }
    }

    /// The end: an unterminated call or a held tag start is text.
    pub fn finish(&mut self) -> Vec<Piece> {
        let rest = std::mem::take(&mut self.held);
        let text = if self.inside {
            format!("{OPEN}{rest}")
        } else {
            rest
        };
        self.inside = false;
        if text.is_empty() {
            Vec::new()
        } else {
            vec![Piece::Text(text)]
        }
    }
}

/// OpenAI's `tool_calls` entry of a response.
#[derive(Serialize)]
struct ToolCall<'a> {
    index: usize,
    id: String,
    #[serde(rename = "type")]
    kind: &'static str,
    function: Function<'a>,
}

#[derive(Serialize)]
struct Function<'a> {
    name: &'a str,
    arguments: &'a str,
}

/// OpenAI's `tool_calls` entry for call number `i` of a response.
pub fn tool_call_json(id: &str, i: usize, name: &str, arguments: &str) -> Value {
    let call = ToolCall {
        index: i,
        id: format!("call_{id}_{i}"),
        kind: "function",
        function: Function { name, arguments },
    };
    serde_json::to_value(call).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_stops(stops: &[&str], pieces: &[&str]) -> (String, bool) {
        let mut m = StopMatcher::new(stops.iter().map(|s| s.to_string()).collect());
        let mut out = String::new();
        for p in pieces {
            out += &m.push(p);
        }
        if !m.stopped {
            out += &m.finish();
        }
        (out, m.stopped)
    }

    #[test]
    fn stop_strings_cut_the_text_even_across_pieces() {
        assert_eq!(
            run_stops(&["END"], &["abc E", "N", "Dxyz"]),
            ("abc ".into(), true)
        );
        assert_eq!(
            run_stops(&["\n\n"], &["one\n", "\ntwo"]),
            ("one".into(), true)
        );
        // A held prefix that turns out not to be a stop is sent.
        assert_eq!(
            run_stops(&["END"], &["EN", "x", "E"]),
            ("ENxE".into(), false)
        );
        // The earliest of several stops wins; no stops passes everything.
        assert_eq!(run_stops(&["b", "a"], &["xyab"]), ("xy".into(), true));
        assert_eq!(run_stops(&[], &["a", "b"]), ("ab".into(), false));
    }

    #[test]
    fn held_text_never_contains_a_sent_stop_prefix_too_early() {
        let mut m = StopMatcher::new(vec!["STOP".into()]);
        assert_eq!(m.push("xxST"), "xx");
        assert_eq!(m.push("O"), "");
        assert_eq!(m.push("P!"), "");
        assert!(m.stopped);
    }

    fn parse(pieces: &[&str]) -> Vec<Piece> {
        let mut p = ToolCallParser::default();
        let mut out: Vec<Piece> = pieces.iter().flat_map(|s| p.push(s)).collect();
        out.extend(p.finish());
        // Merge adjacent text for comparison.
        let mut merged: Vec<Piece> = Vec::new();
        for x in out {
            match (merged.last_mut(), x) {
                (Some(Piece::Text(a)), Piece::Text(b)) => a.push_str(&b),
                (_, x) => merged.push(x),
            }
        }
        merged
    }

    #[test]
    fn tool_calls_are_parsed_from_streamed_content() {
        let got = parse(&[
            "Let me look.\n<tool",
            "_call>\n{\"name\": \"get_weather\", \"argu",
            "ments\": {\"city\": \"Paris\"}}\n</tool_call>",
        ]);
        assert_eq!(
            got,
            vec![
                Piece::Text("Let me look.\n".into()),
                Piece::Call {
                    name: "get_weather".into(),
                    arguments: "{\"city\":\"Paris\"}".into()
                }
            ]
        );
        // Not JSON: stays text. Unterminated: text at the end.
        assert_eq!(
            parse(&["<tool_call>oops</tool_call>"]),
            vec![Piece::Text("<tool_call>oops</tool_call>".into())]
        );
        assert_eq!(
            parse(&["a <tool_call>{\"name\""]),
            vec![Piece::Text("a <tool_call>{\"name\"".into())]
        );
        assert_eq!(parse(&["a <tool"]), vec![Piece::Text("a <tool".into())]);
    }
}
