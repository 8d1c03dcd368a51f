#!/usr/bin/env bash
# Build the Swift package in ios/ and run its tests on Linux against libtern.so, the way this
# repository can without a Mac: Debian 13's `swiftlang` (Swift 6.0.3) inside a debootstrapped
# Debian 13 chroot, the worktree bind-mounted. Needs root (debootstrap, chroot, mount).
#
#   scripts/swift-test.sh [--log FILE]
#
# Steps (each skipped when already done): debootstrap trixie into $TERN_SWIFT_CHROOT
# (default /work/chroot-trixie; ~1 min, 214 MB), apt-get install swiftlang (~1.5 min), build
# libtern.so (cargo build --release -p tern-ffi), fetch the default model, then in the chroot:
#   swift test --package-path ios -Xlinker -L<target/release> -Xlinker -rpath -Xlinker <same>
# with TERN_TEST_MODEL set. Exits with swift test's status.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
chroot_dir=${TERN_SWIFT_CHROOT:-/work/chroot-trixie}
log=
if [ "${1:-}" = --log ]; then log=$2; fi

if [ ! -x "$chroot_dir/usr/bin/apt-get" ]; then
  command -v debootstrap >/dev/null || apt-get install -y -qq debootstrap
  debootstrap --variant=minbase trixie "$chroot_dir" http://deb.debian.org/debian
fi
mountpoint -q "$chroot_dir/proc" || mount -t proc proc "$chroot_dir/proc"
mountpoint -q "$chroot_dir/dev" || mount --bind /dev "$chroot_dir/dev"
cp /etc/resolv.conf "$chroot_dir/etc/resolv.conf"
if [ ! -x "$chroot_dir/usr/bin/swift" ] || [ ! -e "$chroot_dir/usr/lib/x86_64-linux-gnu/crti.o" ]; then
  chroot "$chroot_dir" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive chroot "$chroot_dir" apt-get install -y -qq --no-install-recommends swiftlang libc6-dev libgcc-14-dev libstdc++-14-dev
fi
cargo build --release -q -p tern-ffi --features jni  # the same libtern.so as tests/c/run.sh
model=$(./target/release/tern fetch-default 2>/dev/null || true)
[ -n "$model" ] || { cargo build --release -q --bin tern; model=$(./target/release/tern fetch-default); }
mkdir -p "$chroot_dir/work/repo" "$chroot_dir/work/model"
mountpoint -q "$chroot_dir/work/repo" || mount --bind "$root" "$chroot_dir/work/repo"
mountpoint -q "$chroot_dir/work/model" || mount --bind "$(dirname "$model")" "$chroot_dir/work/model"
cleanup() { umount "$chroot_dir/work/repo" "$chroot_dir/work/model" 2>/dev/null || true; }
trap cleanup EXIT
lib=/work/repo/target/release
cmd="cd /work/repo && swift --version && TERN_TEST_MODEL=/work/model/$(basename "$model") swift test --package-path ios --scratch-path /tmp/tern-swift-build -Xlinker -L$lib -Xlinker -rpath -Xlinker $lib"
echo "chroot $chroot_dir: $cmd"
if [ -n "$log" ]; then
  chroot "$chroot_dir" bash -c "$cmd" 2>&1 | tee "$log"
  exit "${PIPESTATUS[0]}"
else
  chroot "$chroot_dir" bash -c "$cmd"
fi
