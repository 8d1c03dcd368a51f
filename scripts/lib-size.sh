#!/usr/bin/env bash
# Stripped size of the library an app ships, libtern.so, for x86-64 and aarch64-linux-gnu
# (cross-linked with Debian's gcc-aarch64-linux-gnu), in the `release` profile (what
# `cargo build --release` gives) and the `release-lib` profile (Cargo.toml: fat LTO, one codegen
# unit, stripped, panic = unwind for the C ABI's panic boundary), with a per-crate table of what
# takes the space, and `release-lib-z` (the same at opt-level "z"). Budget: TERN_LIB_BUDGET bytes
# (default 8 MiB) for aarch64 release-lib-z.
#
#   scripts/lib-size.sh [x86_64|aarch64|both|ci]  (default both: six builds; ci: aarch64 release-lib-z
#                                                 only, against the budget — what CI runs)
#
# CI runs the `ci` mode (scripts/test.sh); the full tables are committed in docs/bench/i32-size/.
set -euo pipefail
cd "$(dirname "$0")/.."
which=${1:-both}
budget=${TERN_LIB_BUDGET:-8388608}
out=docs/bench/i32-size
mkdir -p "$out"

size_of() { stat -c %s "$1"; }

build() { # target profile
  local target=$1 profile=$2
  local args=(-p tern-ffi --profile "$profile")
  if [ "$target" = aarch64 ]; then
    command -v aarch64-linux-gnu-gcc >/dev/null || apt-get install -y -qq gcc-aarch64-linux-gnu
    rustup target list --installed | grep -q aarch64-unknown-linux-gnu \
      || rustup target add aarch64-unknown-linux-gnu
    export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
    args+=(--target aarch64-unknown-linux-gnu)
  fi
  nice cargo build -q "${args[@]}"
}

lib_path() { # target profile
  local dir=target
  [ "$1" = aarch64 ] && dir=target/aarch64-unknown-linux-gnu
  echo "$dir/$2/libtern.so"
}

strip_tool() { [ "$1" = aarch64 ] && echo aarch64-linux-gnu-strip || echo strip; }

report() { # target
  local t=$1 s
  for p in release release-lib release-lib-z; do
    build "$t" "$p"
    local so; so=$(lib_path "$t" "$p")
    cp "$so" "$out/libtern-$t-$p.so.tmp"
    "$(strip_tool "$t")" "$out/libtern-$t-$p.so.tmp"
    s=$(size_of "$out/libtern-$t-$p.so.tmp")
    echo "$t $p: $(size_of "$so") bytes as built, $s stripped" | tee -a "$out/sizes.txt"
    rm -f "$out/libtern-$t-$p.so.tmp"
  done
  if [ "$t" = aarch64 ] && [ "$s" -gt "$budget" ]; then
    echo "aarch64 release-lib-z: $s bytes stripped, over the budget of $budget"; over=1
  fi
}

over=0
: >"$out/sizes.txt"
case $which in
  ci) # CI's check: aarch64 release-lib-z only (one fat-LTO build, ~2 min here), against the budget
    # (a machine that cannot get the cross linker or the target says so and skips, as the
    # Android/iOS compile checks do)
    command -v aarch64-linux-gnu-gcc >/dev/null || apt-get install -y -qq gcc-aarch64-linux-gnu >/dev/null 2>&1 || true
    rustup target list --installed 2>/dev/null | grep -qx aarch64-unknown-linux-gnu \
      || rustup target add aarch64-unknown-linux-gnu >/dev/null 2>&1 || true
    if ! command -v aarch64-linux-gnu-gcc >/dev/null \
      || ! rustup target list --installed 2>/dev/null | grep -qx aarch64-unknown-linux-gnu; then
      echo "   (no aarch64 cross linker or Rust target here: the size check is skipped)"; exit 0
    fi
    build aarch64 release-lib-z
    so=$(lib_path aarch64 release-lib-z)
    size=$(size_of "$so")
    echo "libtern.so aarch64-linux-gnu release-lib-z: $size bytes stripped; budget $budget"
    [ "$size" -le "$budget" ] || { echo "over the budget: scripts/lib-size.sh shows what takes the space"; exit 1; }
    exit 0 ;;
  x86_64) report x86_64 ;;
  aarch64) report aarch64 ;;
  both) report x86_64; report aarch64 ;;
esac
# What takes the space: per crate, from the symbol sizes of the aarch64 `release` build (before
# LTO; generic code instantiated elsewhere counts under core/alloc), else x86-64's.
so=target/aarch64-unknown-linux-gnu/release/libtern.so; nmt=aarch64-linux-gnu-nm
[ -f "$so" ] || { so=target/release/libtern.so; nmt=nm; }
"$nmt" --size-sort -S -C "$so" 2>/dev/null | python3 -c '
import sys, re, collections
tot = collections.Counter(); allb = 0
for line in sys.stdin:
    p = line.rstrip("\n").split(" ", 3)
    if len(p) < 4:
        continue
    try:
        sz = int(p[1], 16)
    except ValueError:
        continue
    n = re.sub(r"^(<|_<)+", "", p[3])
    n = re.sub(r"^(impl |dyn )", "", n)
    tot[re.split(r"::| |<|>", n)[0] or "?"] += sz
    allb += sz
print("symbol bytes in total: %d (%s)" % (allb, sys.argv[1]))
for c, s in tot.most_common(25):
    print("%10d %5.1f%% %s" % (s, 100 * s / allb, c))
' "$so" | tee "$out/by-crate.txt"
[ "$over" = 0 ] || { echo "aarch64 release-lib-z is over the budget of $budget bytes"; exit 1; }
