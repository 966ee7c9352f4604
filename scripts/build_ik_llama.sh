#!/usr/bin/env bash
# Builds ik_llama.cpp's llama-bench, llama-cli and llama-server (the fastest
# CPU peer for this model family), outside the repository, from a git checkout of the
# public repository ikawrakow/ik_llama.cpp at 8337e4c (2026-08-15, which runs
# qwen35moe). A hand-run yardstick for scripts/bench_vs_llama.sh, not a CI
# dependency. Prints the bin dir.
#
#   IK_GIT=/path/to/ik_llama.cpp/.git scripts/build_ik_llama.sh   # ~10 min on 2 cores, once
#
# IK_GIT: a git directory holding that commit (a clone, or the snapshot the
# workplace's fetch tool brings). Files whose contents the snapshot lacks (two
# web-UI files under examples/server/ and four models/ggml-vocab-*.gguf) are
# left out; the build does not need them.
set -euo pipefail
IK_DIR=${IK_DIR:-$HOME/.cache/clover/ik_llama.cpp}
IK_COMMIT=${IK_COMMIT:-8337e4cd3861406fc04e0854b1409cd1b027fbc9}
bin="$IK_DIR/build/bin"
if [ -x "$bin/llama-bench" ] && [ -x "$bin/llama-cli" ] && [ -x "$bin/llama-server" ]; then
  echo "$bin"; exit 0
fi
: "${IK_GIT:?set IK_GIT to a git directory of ikawrakow/ik_llama.cpp holding $IK_COMMIT}"
command -v cmake >/dev/null || { apt-get update -qq && apt-get install -y -qq cmake; } >&2
mkdir -p "$IK_DIR/src"
if [ ! -f "$IK_DIR/src/.extracted" ]; then
  # Every file of the commit whose contents the git directory holds.
  python3 - "$IK_GIT" "$IK_COMMIT" "$IK_DIR/src" <<'PY'
import os, subprocess, sys
git, commit, out = sys.argv[1], sys.argv[2], sys.argv[3]
tree = subprocess.run(["git", "--git-dir", git, "ls-tree", "-r", "-z", commit],
                      check=True, capture_output=True).stdout.split(b"\0")
entries = []
for e in tree:
    if not e:
        continue
    meta, path = e.split(b"\t", 1)
    mode, typ, obj = meta.split()
    if typ == b"blob":
        entries.append((mode, obj, path.decode()))
cat = subprocess.Popen(["git", "--git-dir", git, "cat-file", "--batch"],
                       stdin=subprocess.PIPE, stdout=subprocess.PIPE)
skipped = []
for mode, obj, path in entries:
    cat.stdin.write(obj + b"\n")
    cat.stdin.flush()
    head = cat.stdout.readline().split()
    if len(head) < 3 or head[1] == b"missing":
        skipped.append(path)
        continue
    data = cat.stdout.read(int(head[2]))
    cat.stdout.read(1)
    dst = os.path.join(out, path)
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    if mode == b"120000":
        if os.path.lexists(dst):
            os.remove(dst)
        os.symlink(data.decode(), dst)
    else:
        with open(dst, "wb") as f:
            f.write(data)
        if mode == b"100755":
            os.chmod(dst, 0o755)
print(f"extracted {len(entries) - len(skipped)} files; left out (absent): {skipped}", file=sys.stderr)
PY
  touch "$IK_DIR/src/.extracted"
fi
cmake -S "$IK_DIR/src" -B "$IK_DIR/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
  -DLLAMA_CURL=OFF >&2
cmake --build "$IK_DIR/build" -j"$(nproc)" --target llama-bench llama-cli llama-server >&2
echo "$bin"
