//! Builds the tokenizer from hostile `tokenizer.ggml.*` metadata through the constructor the
//! loader uses (`Tokenizer::new`, then `set_mask_token`), then encodes and decodes with it.
//! Building may fail with a typed error; nothing may panic.
//!
//! Input layout (carved, so seeds are easy to write by hand): five header bytes, then
//! sections separated by `0x00`:
//! - byte 0, flags: bit 0 `qwen2` (else `qwen35`) pre-tokenizer, bit 1 `add_bos`, bit 2
//!   parse specials when encoding, bit 3 give token types, bit 4 start the vocabulary with
//!   GPT-2's 256 byte tokens, bit 5 a model other than `gpt2`;
//! - bytes 1-4: bos, eos, padding and mask ids (`0xFF` = none; mask 0xFF..: not set);
//! - sections: tokens (`\n`-separated), token types (one byte each, `% 8`), merges
//!   (`\n`-separated `left right`), text to encode, ids to decode (`u16` little endian).
#![no_main]

use clover::tokenizer::{Tokenizer, TokenizerSpec};
use libfuzzer_sys::fuzz_target;

/// GPT-2's byte → character table (printable Latin-1 as itself, the rest from U+0100).
fn byte_chars() -> Vec<String> {
    let mut next = 256u32;
    (0u32..256)
        .map(|b| {
            let printable =
                (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
            let code = if printable {
                b
            } else {
                next += 1;
                next - 1
            };
            char::from_u32(code).unwrap_or('?').to_string()
        })
        .collect()
}

fn lines(section: Option<&[u8]>) -> Vec<String> {
    section
        .map(|s| {
            s.split(|&b| b == b'\n')
                .map(|l| String::from_utf8_lossy(l).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 5 {
        return;
    }
    let (head, rest) = data.split_at(5);
    let flags = head[0];
    let id = |b: u8| (b != 0xFF).then_some(u32::from(b));
    let mut sections = rest.split(|&b| b == 0);
    let mut tokens = if flags & 16 != 0 {
        byte_chars()
    } else {
        Vec::new()
    };
    tokens.extend(lines(sections.next()));
    let types_section = sections.next().unwrap_or_default();
    let token_types = if flags & 8 != 0 {
        let mut t: Vec<i32> = vec![1; tokens.len().saturating_sub(types_section.len())];
        t.extend(types_section.iter().map(|&b| i32::from(b % 8)));
        t.truncate(tokens.len());
        t
    } else {
        Vec::new()
    };
    let merges = lines(sections.next());
    let text = String::from_utf8_lossy(sections.next().unwrap_or_default()).into_owned();
    let ids: Vec<u32> = sections
        .next()
        .unwrap_or_default()
        .chunks_exact(2)
        .map(|c| u32::from(u16::from_le_bytes([c[0], c[1]])))
        .collect();
    let spec = TokenizerSpec {
        model: if flags & 32 != 0 { "llama" } else { "gpt2" }.to_owned(),
        pre: if flags & 1 != 0 { "qwen2" } else { "qwen35" }.to_owned(),
        tokens,
        token_types,
        merges,
        bos: id(head[1]),
        eos: id(head[2]),
        pad: id(head[3]),
        add_bos: flags & 2 != 0,
    };
    let Ok(mut tok) = Tokenizer::new(&spec) else {
        return;
    };
    if let Some(mask) = id(head[4]) {
        if tok.set_mask_token(mask).is_err() {
            return;
        }
    }
    let n = tok.vocab_size();
    if let Ok(encoded) = tok.encode(&text, flags & 4 != 0) {
        assert!(encoded.iter().all(|&i| (i as usize) < n));
        let _ = tok.decode(&encoded);
    }
    let _ = tok.decode(&ids);
    let mut stream = tok.stream_decoder();
    for &i in &ids {
        let _ = stream.push(i);
        let _ = tok.piece(i);
        let _ = tok.id_to_token(i);
        let _ = tok.is_eog(i);
        let _ = tok.is_control(i);
    }
    let _ = stream.finish();
    for t in spec.tokens.iter().take(64) {
        let _ = tok.token_to_id(t);
    }
});
