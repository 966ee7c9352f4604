#!/usr/bin/env bash
# Static release binaries: x86-64 and aarch64 Linux with no dynamic
# dependencies (no interpreter, no shared libraries), so they run on any Linux
# of those CPUs whatever its C library. They link glibc statically
# (`-C target-feature=+crt-static`): a musl build was measured 5-7 % slower
# at pp512 (its allocator), a static glibc one within the noise of the
# dynamic build (docs/PERFORMANCE.md, "Static binaries"). Writes
#
#   target/dist/clover-VERSION-x86_64-linux
#   target/dist/clover-VERSION-aarch64-linux
#   target/dist/SHA256SUMS
#
# and checks each: no program interpreter and no NEEDED library,
# `--version`, and a tiny model written and run (the aarch64 one under
# qemu-aarch64, with no sysroot).
#
#   scripts/release.sh                 # both (about 2.5 min each on 2 cores)
#   scripts/release.sh x86_64          # one
#
# Needs, for aarch64: apt-get install gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user.
set -euo pipefail
cd "$(dirname "$0")/.."
out=target/dist
mkdir -p "$out"
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
if [ $# -gt 0 ]; then arches=("$@"); else arches=(x86_64 aarch64); fi

check_static() {
  local bin=$1
  if readelf -l "$bin" | grep -q INTERP || readelf -d "$bin" 2>/dev/null | grep -q NEEDED; then
    echo "$bin has dynamic dependencies:" >&2
    readelf -d "$bin" | grep NEEDED >&2 || true
    exit 1
  fi
}

smoke() {
  local dir
  dir=$(mktemp -d)
  "$@" --version
  "$@" synth --arch qwen35moe --preset tiny --recipe q8_0 -o "$dir/t.gguf" >/dev/null
  "$@" run -m "$dir/t.gguf" -p "In the beginning" -n 8 --temp 0 -t 2 >/dev/null 2>&1
  rm -rf "$dir"
}

for arch in "${arches[@]}"; do
  target="$arch-unknown-linux-gnu"
  rustup target add "$target" >/dev/null
  if [ "$arch" = aarch64 ]; then
    export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
  fi
  RUSTFLAGS="-C target-feature=+crt-static" \
    cargo build --release --locked --target "$target" --bin clover
  bin="$out/clover-$version-$arch-linux"
  cp "target/$target/release/clover" "$bin"
  check_static "$bin"
  case $arch in
    x86_64) smoke "$bin" ;;
    aarch64) smoke qemu-aarch64 "$bin" ;;
  esac
  echo "built $bin ($(du -h "$bin" | cut -f1), static)"
done
(cd "$out" && sha256sum clover-"$version"-*-linux > SHA256SUMS && cat SHA256SUMS)
