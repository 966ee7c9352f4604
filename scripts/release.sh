#!/usr/bin/env bash
# Static release binaries: x86-64 and aarch64 Linux, linked against musl with
# no dynamic dependencies (no interpreter, no shared libraries), so they run
# on any Linux of those CPUs whatever its glibc. Writes
#
#   target/dist/clover-VERSION-x86_64-linux
#   target/dist/clover-VERSION-aarch64-linux
#   target/dist/SHA256SUMS
#
# and checks each: no dynamic section, `--version`, and a tiny model written
# and run (the aarch64 one under qemu-aarch64, with no sysroot).
#
#   scripts/release.sh                 # both (about 5 min each on 2 cores)
#   scripts/release.sh x86_64          # one
#
# Needs: rustup (the musl targets are added), for aarch64 the
# gcc-aarch64-linux-gnu linker and qemu-user (apt-get install).
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
  local run=("$@")
  local dir
  dir=$(mktemp -d)
  "${run[@]}" --version
  "${run[@]}" synth --arch qwen35moe --preset tiny --recipe q8_0 -o "$dir/t.gguf" >/dev/null
  "${run[@]}" run -m "$dir/t.gguf" -p "In the beginning" -n 8 --temp 0 -t 2 >/dev/null 2>&1
  rm -rf "$dir"
}

for arch in "${arches[@]}"; do
  target="$arch-unknown-linux-musl"
  rustup target add "$target" >/dev/null
  case $arch in
    aarch64)
      export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_MUSL_LINKER=aarch64-linux-gnu-gcc
      ;;
  esac
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
