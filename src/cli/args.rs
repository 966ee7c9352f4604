//! llama.cpp's multi-letter single-dash flags (`-ub`, `-ctk`, …), which clap
//! cannot declare as short flags, rewritten to their long spellings before
//! parsing. Only whole arguments that match exactly are rewritten.

use std::ffi::OsString;

/// `(llama.cpp spelling, clover long flag)`.
const SPELLINGS: [(&str, &str); 5] = [
    ("-ub", "--ubatch-size"),
    ("-ctk", "--cache-type-k"),
    ("-ctv", "--cache-type-v"),
    ("-tb", "--threads-batch"),
    ("-fa", "--flash-attn"),
];

/// The arguments with every llama.cpp multi-letter flag in its long form.
pub fn llama_spellings<I: IntoIterator<Item = OsString>>(args: I) -> Vec<OsString> {
    args.into_iter()
        .map(|a| {
            match SPELLINGS
                .iter()
                .find(|(short, _)| a.to_str() == Some(short))
            {
                Some((_, long)) => OsString::from(long),
                None => a,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewrite(args: &[&str]) -> Vec<String> {
        llama_spellings(args.iter().map(OsString::from))
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect()
    }

    #[test]
    fn multi_letter_flags_become_long_flags() {
        assert_eq!(
            rewrite(&["clover", "bench", "-ub", "64", "-ctk", "q8_0", "-ctv", "f32"]),
            [
                "clover",
                "bench",
                "--ubatch-size",
                "64",
                "--cache-type-k",
                "q8_0",
                "--cache-type-v",
                "f32"
            ]
        );
    }

    #[test]
    fn values_and_other_flags_are_left_alone() {
        // A value that happens to look like a flag is only rewritten when it
        // is the whole argument; `-t`, `-ubx` and `--ub` stay as they are.
        assert_eq!(
            rewrite(&["-t", "2", "-ubx", "--ub", "-p", "512"]),
            ["-t", "2", "-ubx", "--ub", "-p", "512"]
        );
    }
}
