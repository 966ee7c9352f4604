#!/usr/bin/env bash
# Retrains the default model from scratch and re-exports it with its fixture:
#   bash training/retrain.sh [MINUTES]        (default 105)
# Needs: apt-get install -y bible-kjv bible-kjv-text; pip install -r training/requirements.txt
# Writes models/clover-tiny-kjv.gguf and tests/fixtures/trained_model.json, then
# checks them with `cargo test --test trained_model`.
set -euo pipefail
cd "$(dirname "$0")"
minutes="${1:-105}"
python3 -m unittest test_model test_rope_sections
python3 corpus.py --seed 1
python3 tokenizer.py --vocab 2048
python3 train.py --minutes "$minutes" --seed 1 --out runs/main
python3 export.py --ckpt runs/main/ckpt.pt --type f32 \
  --out ../models/clover-tiny-kjv.gguf --fixture ../tests/fixtures/trained_model.json
cd .. && cargo test --release --test trained_model -- --nocapture
