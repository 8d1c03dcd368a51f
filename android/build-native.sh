#!/usr/bin/env bash
# Build libtern.so for the Android ABIs into android/src/main/jniLibs with cargo-ndk, in the
# `release-lib` profile (Cargo.toml: fat LTO, stripped, panic = unwind for the C ABI's panic
# boundary). Called by `./gradlew cargoNdk` (build.gradle.kts); runnable on its own.
#
# Needs: the Android NDK (ANDROID_NDK_HOME, r26 or newer), `cargo install cargo-ndk`, and
#   rustup target add aarch64-linux-android armv7-linux-androideabi x86_64-linux-android
# NOT RUN in this repository's CI or by its authors: there is no NDK here (docs/app-developers.md,
# "What was and was not run").
set -euo pipefail
cd "$(dirname "$0")/.."
: "${ANDROID_NDK_HOME:?set ANDROID_NDK_HOME to the NDK directory}"
command -v cargo-ndk >/dev/null || { echo "install cargo-ndk: cargo install cargo-ndk"; exit 1; }
abis=${TERN_ANDROID_ABIS:-"arm64-v8a armeabi-v7a x86_64"}
targets=()
for a in $abis; do targets+=(-t "$a"); done
cargo ndk "${targets[@]}" -P 24 -o android/src/main/jniLibs \
  build --profile release-lib -p tern-ffi --features jni
ls -l android/src/main/jniLibs/*/libtern.so
