#!/usr/bin/env bash
# Builds llama.cpp (the outside oracle for the autoregressive math and the
# speed yardstick) from the llama-cpp-python 0.3.36 source package on PyPI,
# which vendors llama.cpp 0c1e570 with `qwen35moe`. The build lives outside the
# repository: $LLAMA_DIR (default ~/.cache/clover/llama.cpp). Prints the bin dir.
#
#   scripts/build_llama_cpp.sh            # ~6 min on 2 cores, once
#   LLAMA_BIN=$(scripts/build_llama_cpp.sh | tail -1)
set -euo pipefail
LLAMA_DIR=${LLAMA_DIR:-$HOME/.cache/clover/llama.cpp}
VERSION=0.3.36
bin="$LLAMA_DIR/build/bin"
if [ -x "$bin/llama-completion" ] && [ -x "$bin/llama-bench" ] && [ -x "$bin/llama-perplexity" ] \
  && [ -x "$bin/llama-quantize" ] && [ -x "$bin/llama-imatrix" ]; then
  echo "$bin"; exit 0
fi
mkdir -p "$LLAMA_DIR"
cd "$LLAMA_DIR"
command -v cmake >/dev/null || { apt-get update -qq && apt-get install -y -qq cmake; } >&2
if [ ! -d "llama_cpp_python-$VERSION" ]; then
  python3 -m pip download -q --no-deps --no-binary llama-cpp-python "llama-cpp-python==$VERSION" -d . >&2
  tar xzf "llama_cpp_python-$VERSION.tar.gz"
fi
src="llama_cpp_python-$VERSION/vendor/llama.cpp"
cmake -S "$src" -B build -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
  -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF >&2
cmake --build build -j"$(nproc)" --target llama-bench llama-completion llama-perplexity llama-quantize \
  llama-imatrix >&2
echo "$bin"
