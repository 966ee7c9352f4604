#!/usr/bin/env bash
# Builds llama.cpp (the outside oracle for the autoregressive math and the
# speed yardstick) from the llama-cpp-python 0.3.36 source package on PyPI,
# which vendors llama.cpp 0c1e570 with `qwen35moe`. The build lives outside the
# repository: $LLAMA_DIR (default ~/.cache/clover/llama.cpp). Prints the bin dir.
#
#   scripts/build_llama_cpp.sh            # ~6 min on 2 cores, once
#   LLAMA_BIN=$(scripts/build_llama_cpp.sh | tail -1)
#
#   scripts/build_llama_cpp.sh --fixtures # the oracle of the stored parity,
#                                         # KLD and imatrix fixtures (libllama,
#                                         # llama-perplexity, llama-imatrix),
#                                         # and the speed and start-up yardstick
#                                         # on AMX hosts (llama-bench,
#                                         # llama-completion, llama-server)
#
# --fixtures builds for a fixed ISA (AVX-512 F/CD/VL/DQ/BW, AVX2, FMA, F16C)
# instead of -march=native, in $LLAMA_DIR/build-avx512: GCC's choices for the
# host's own -march change which products of a sum it fuses (on a Sapphire
# Rapids host its ggml_ssm_conv fuses none of the 4 taps, on others all 4), so
# a native build reproduces tests/fixtures/parity bit for bit only on some
# hosts; the fixed-ISA build does on any AVX-512 host. Without AMX it also runs
# on hosts whose kernel does not enable AMX tiles (where a native build dies
# of SIGILL on q8_0).
set -euo pipefail
LLAMA_DIR=${LLAMA_DIR:-$HOME/.cache/clover/llama.cpp}
VERSION=0.3.36
fixtures=false
[ "${1:-}" = "--fixtures" ] && fixtures=true
bin="$LLAMA_DIR/build/bin"
if $fixtures; then
  bin="$LLAMA_DIR/build-avx512/bin"
  if [ -e "$bin/libllama.so" ] && [ -x "$bin/llama-perplexity" ] && [ -x "$bin/llama-imatrix" ] && [ -x "$bin/llama-bench" ] \
    && [ -x "$bin/llama-completion" ] && [ -x "$bin/llama-server" ]; then
    echo "$bin"; exit 0
  fi
fi
if [ -x "$bin/llama-completion" ] && [ -x "$bin/llama-bench" ] && [ -x "$bin/llama-perplexity" ] \
  && [ -x "$bin/llama-quantize" ] && [ -x "$bin/llama-imatrix" ] && [ -x "$bin/llama-server" ]; then
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
if $fixtures; then
  cmake -S "$src" -B build-avx512 -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF \
    -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX512=ON \
    -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF >&2
  cmake --build build-avx512 -j"$(nproc)" --target llama llama-perplexity llama-imatrix llama-bench \
    llama-completion llama-server >&2
  echo "$bin"; exit 0
fi
cmake -S "$src" -B build -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
  -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF >&2
cmake --build build -j"$(nproc)" --target llama-bench llama-completion llama-perplexity llama-quantize \
  llama-imatrix llama-server >&2
echo "$bin"
