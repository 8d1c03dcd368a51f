#!/usr/bin/env bash
# Stripped size of the library an app ships, libtern.so, for x86-64 and aarch64-linux-gnu
# (cross-linked with Debian's gcc-aarch64-linux-gnu), in the `release` profile (what
# `cargo build --release` gives) and the `release-lib` profile (Cargo.toml: fat LTO, one codegen
# unit, stripped, panic = unwind for the C ABI's panic boundary), with a per-crate table of what
# takes the space. Budget: TERN_LIB_BUDGET bytes (default 8 MiB) for aarch64 release-lib.
#
#   scripts/lib-size.sh [x86_64|aarch64|both]     (default both; slow: two LTO builds)
#
# Not part of CI (a fat-LTO build of the whole tree takes too long on CI's 2 cores); the numbers
# it printed are committed in docs/bench/i32-size/.
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
  for p in release release-lib; do
    build "$t" "$p"
    local so; so=$(lib_path "$t" "$p")
    cp "$so" "$out/libtern-$t-$p.so.tmp"
    "$(strip_tool "$t")" "$out/libtern-$t-$p.so.tmp"
    s=$(size_of "$out/libtern-$t-$p.so.tmp")
    echo "$t $p: $(size_of "$so") bytes as built, $s stripped" | tee -a "$out/sizes.txt"
    rm -f "$out/libtern-$t-$p.so.tmp"
  done
  if [ "$t" = aarch64 ] && [ "$s" -gt "$budget" ]; then
    echo "aarch64 release-lib: $s bytes stripped, over the budget of $budget"; return 1
  fi
}

: >"$out/sizes.txt"
case $which in
  x86_64) report x86_64 ;;
  aarch64) report aarch64 ;;
  both) report x86_64; report aarch64 ;;
esac
# What takes the space (x86-64 release build with symbols): per crate, from nm's sizes.
nm --size-sort -S -C target/release/libtern.so 2>/dev/null | awk '
  { size = strtonum("0x" $2); name = $0; sub(/^[^ ]+ [^ ]+ [^ ]+ /, "", name);
    crate = name; sub(/^(<|_<)?/, "", crate); sub(/::.*/, "", crate); sub(/ .*/, "", crate);
    total[crate] += size; all += size }
  END { for (c in total) printf "%10d %5.1f%% %s\n", total[c], 100 * total[c] / all, c }' \
  | sort -rn | head -25 | tee "$out/by-crate.txt"
