#!/usr/bin/env bash
# Times first builds (an empty target directory each, dependencies included)
# of the release binary and of the test binaries, with the profiles as
# Cargo.toml sets them and with one setting changed at a time, through
# Cargo's CARGO_PROFILE_* variables (Cargo.toml is not touched):
#
#   scripts/build_times.sh [release|test|all]      (default: all)
#
# Run it on a quiet machine: every build uses all cores. Each target
# directory is removed after its build.
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-all}
tmp=${TMPDIR:-/tmp}/clover-build-times
export CARGO_INCREMENTAL=0 CARGO_TERM_COLOR=never
time_build() { # label, env assignments..., then -- and the cargo arguments
  local label=$1; shift
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  rm -rf "$tmp"; mkdir -p "$tmp"
  local t0=$SECONDS
  env "${envs[@]}" CARGO_TARGET_DIR="$tmp" cargo "$@" >"$tmp.log" 2>&1 \
    || { tail "$tmp.log" >&2; exit 1; }
  printf '| %s | %d s |\n' "$label" $((SECONDS - t0))
}
echo "| build ($(nproc) cores) | wall |"
echo "|---|--:|"
if [ "$what" = release ] || [ "$what" = all ]; then
  time_build "release, as Cargo.toml (line tables, 4 codegen units)" -- build --release --bin clover
  time_build "release, no debug info" CARGO_PROFILE_RELEASE_DEBUG=false -- build --release --bin clover
  time_build "release, 16 codegen units" CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 -- build --release --bin clover
fi
if [ "$what" = test ] || [ "$what" = all ]; then
  time_build "tests, as Cargo.toml (opt-level 2)" -- test --workspace --no-run
  time_build "tests, opt-level 1" CARGO_PROFILE_TEST_OPT_LEVEL=1 -- test --workspace --no-run
fi
rm -rf "$tmp" "$tmp.log"
