//! A conversation saved to disk (Ctrl-S in the chat UI) and read back
//! (`clover chat --load FILE.json`): Markdown for people, JSON to continue from.
//!
//! The JSON file:
//! ```json
//! { "format": "clover-chat", "version": 1, "model": "tiny.gguf",
//!   "saved_unix": 1764621912, "system": "be brief",
//!   "messages": [ { "role": "user", "content": "hi" },
//!                 { "role": "assistant", "content": "Hello." } ] }
//! ```
//! `system` may be absent or null; `messages` never holds a system message. Replies
//! hold their visible text (thinking is not sent back to the model either).

use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::engine::{ChatMessage, Role};

/// The `format` field of a saved conversation.
pub const FORMAT: &str = "clover-chat";
/// The `version` field this build writes and reads.
pub const VERSION: u32 = 1;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SavedMessage {
    pub role: String,
    pub content: String,
}

/// A saved conversation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Transcript {
    pub format: String,
    pub version: u32,
    /// The model it was held with (informational).
    #[serde(default)]
    pub model: String,
    /// Seconds since the Unix epoch when it was saved.
    #[serde(default)]
    pub saved_unix: u64,
    #[serde(default)]
    pub system: Option<String>,
    pub messages: Vec<SavedMessage>,
}

impl From<serde_json::Error> for TranscriptError {
    fn from(e: serde_json::Error) -> TranscriptError {
        TranscriptError::Json(e)
    }
}

/// Why a saved conversation could not be read.
#[derive(Debug, thiserror::Error)]
pub enum TranscriptError {
    /// The parser's message is part of this one, not a source as well: an
    /// error chain printed whole (`{:#}`) would say it twice.
    #[error("not a saved clover chat (JSON): {0}")]
    Json(serde_json::Error),
    #[error("not a saved clover chat: format is {0:?}, expected {FORMAT:?}")]
    Format(String),
    #[error("saved chat version {0} is not supported (this build reads {VERSION})")]
    Version(u32),
    #[error("message {index}: role {role:?} is not user or assistant")]
    Role { index: usize, role: String },
}

impl Transcript {
    /// The conversation `messages` (a leading system message becomes `system`).
    pub fn new(model: &str, saved_unix: u64, messages: &[ChatMessage]) -> Transcript {
        let system = messages
            .iter()
            .take_while(|m| m.role == Role::System)
            .map(|m| m.content.as_str())
            .collect::<Vec<_>>();
        Transcript {
            format: FORMAT.into(),
            version: VERSION,
            model: model.into(),
            saved_unix,
            system: (!system.is_empty()).then(|| system.join("\n\n")),
            messages: messages[system.len()..]
                .iter()
                .map(|m| SavedMessage {
                    role: m.role.as_str().into(),
                    content: m.content.clone(),
                })
                .collect(),
        }
    }

    /// Reads a saved conversation, checking its format, version and roles.
    pub fn parse(bytes: &[u8]) -> Result<Transcript, TranscriptError> {
        let t: Transcript = serde_json::from_slice(bytes)?;
        if t.format != FORMAT {
            return Err(TranscriptError::Format(t.format));
        }
        if t.version != VERSION {
            return Err(TranscriptError::Version(t.version));
        }
        if let Some((index, m)) = t
            .messages
            .iter()
            .enumerate()
            .find(|(_, m)| !matches!(m.role.as_str(), "user" | "assistant"))
        {
            return Err(TranscriptError::Role {
                index,
                role: m.role.clone(),
            });
        }
        Ok(t)
    }

    /// The turns after the system prompt.
    pub fn history(&self) -> Vec<ChatMessage> {
        self.messages
            .iter()
            .map(|m| {
                let role = if m.role == "user" {
                    Role::User
                } else {
                    Role::Assistant
                };
                ChatMessage::new(role, m.content.as_str())
            })
            .collect()
    }

    pub fn to_json(&self) -> Vec<u8> {
        let mut v = serde_json::to_vec_pretty(self).unwrap_or_default();
        v.push(b'\n');
        v
    }

    pub fn to_markdown(&self) -> String {
        let mut s = format!(
            "# clover chat\n\nModel: {}. Saved {} UTC.\n",
            self.model,
            timestamp(self.saved_unix, true)
        );
        if let Some(sys) = &self.system {
            s.push_str(&format!("\n## System\n\n{sys}\n"));
        }
        for m in &self.messages {
            let who = if m.role == "user" { "You" } else { "clover" };
            s.push_str(&format!("\n## {who}\n\n{}\n", m.content));
        }
        s
    }
}

/// Writes `t` as `<dir>/clover-chat-<UTC timestamp>.md` and `.json` (atomically);
/// returns both paths.
pub fn save(dir: &Path, t: &Transcript) -> io::Result<(PathBuf, PathBuf)> {
    let stem = format!("clover-chat-{}", timestamp(t.saved_unix, false));
    let md = dir.join(format!("{stem}.md"));
    let json = dir.join(format!("{stem}.json"));
    crate::output::write_file_atomic(&md, t.to_markdown().as_bytes())?;
    crate::output::write_file_atomic(&json, &t.to_json())?;
    Ok((md, json))
}

/// `secs` since the Unix epoch as a UTC date and time: `20261201-204512`, or
/// `2026-12-01 20:45:12` when `readable`.
pub fn timestamp(secs: u64, readable: bool) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (h, mi, s) = (rem / 3600, rem % 3600 / 60, rem % 60);
    // Days to a civil date (proleptic Gregorian), after Howard Hinnant's algorithm.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    if readable {
        format!("{y:04}-{m:02}-{d:02} {h:02}:{mi:02}:{s:02}")
    } else {
        format!("{y:04}{m:02}{d:02}-{h:02}{mi:02}{s:02}")
    }
}

/// Seconds since the Unix epoch now.
pub fn now_unix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_utc_calendar_dates() {
        assert_eq!(timestamp(0, false), "19700101-000000");
        assert_eq!(timestamp(951_782_400, true), "2000-02-29 00:00:00");
        assert_eq!(timestamp(1_764_621_912, false), "20251201-204512");
    }

    #[test]
    fn a_transcript_survives_json_and_keeps_the_system_prompt_apart() {
        let msgs = [
            ChatMessage::new(Role::System, "be brief"),
            ChatMessage::new(Role::User, "hi"),
            ChatMessage::new(Role::Assistant, "Hello."),
        ];
        let t = Transcript::new("m.gguf", 5, &msgs);
        assert_eq!(t.system.as_deref(), Some("be brief"));
        let back = Transcript::parse(&t.to_json()).unwrap();
        assert_eq!(back, t);
        assert_eq!(back.history(), msgs[1..].to_vec());
        let md = t.to_markdown();
        assert!(md.contains("## System\n\nbe brief"), "{md}");
        assert!(md.contains("## You\n\nhi") && md.contains("## clover\n\nHello."));
    }

    #[test]
    fn reading_rejects_other_json_versions_and_roles() {
        assert!(matches!(
            Transcript::parse(b"{\"a\": 1}"),
            Err(TranscriptError::Json(_))
        ));
        // The parser's message once, also in a whole error chain.
        let e = anyhow::Error::new(Transcript::parse(b"{\"bad").unwrap_err());
        let line = format!("{e:#}");
        assert_eq!(line.matches("EOF while parsing").count(), 1, "{line}");
        let bad = br#"{"format":"x","version":1,"messages":[]}"#;
        assert!(matches!(
            Transcript::parse(bad),
            Err(TranscriptError::Format(_))
        ));
        let bad = br#"{"format":"clover-chat","version":9,"messages":[]}"#;
        assert!(matches!(
            Transcript::parse(bad),
            Err(TranscriptError::Version(9))
        ));
        let bad =
            br#"{"format":"clover-chat","version":1,"messages":[{"role":"tool","content":""}]}"#;
        assert!(matches!(
            Transcript::parse(bad),
            Err(TranscriptError::Role { index: 0, .. })
        ));
    }
}
