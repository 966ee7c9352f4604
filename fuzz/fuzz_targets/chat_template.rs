//! Renders an arbitrary chat template over arbitrary messages through `ChatTemplate`, with the
//! limits a model file's template gets (fuel, output cap, nesting). It must fail with a typed
//! error or render; never panic, overflow the stack, or run past libFuzzer's `-timeout`.
//!
//! Input layout: sections separated by `0x00`; the first is the template source, each later one
//! a message whose first byte picks the role (`% 4`: system, user, assistant, tool) and, when
//! bit 7 is set, splits the rest at its first `\n` into reasoning and content. The last byte of
//! the input picks `add_generation_prompt` (bit 0) and `enable_thinking` (bits 1-2).
#![no_main]

use clover::chat::{ChatMessage, ChatTemplate};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut sections = data.split(|&b| b == 0);
    let source = String::from_utf8_lossy(sections.next().unwrap_or_default());
    let Ok(template) = ChatTemplate::new(&source, "<s>", "</s>") else {
        return;
    };
    let mut messages = Vec::new();
    for s in sections.take(64) {
        let Some((&head, body)) = s.split_first() else {
            continue;
        };
        let role = ["system", "user", "assistant", "tool"][usize::from(head % 4)];
        let body = String::from_utf8_lossy(body).into_owned();
        let message = match body.split_once('\n') {
            Some((reasoning, content)) if head & 0x80 != 0 => {
                ChatMessage::new(role, content).with_reasoning(reasoning)
            }
            _ => ChatMessage::new(role, body),
        };
        messages.push(message);
    }
    let last = data.last().copied().unwrap_or(0);
    let thinking = match (last >> 1) & 3 {
        0 => None,
        1 => Some(false),
        _ => Some(true),
    };
    let _ = template.render(&messages, last & 1 != 0, thinking);
});
