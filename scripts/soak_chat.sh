#!/usr/bin/env bash
# The chat soak (tests/chat_soak.rs) with its figures shown: a 10,000-token line-mode
# conversation on the default model at -c 2048, resident memory every 500 tokens.
set -euo pipefail
cd "$(dirname "$0")/.."
exec cargo test --test chat_soak -- --nocapture "$@"
