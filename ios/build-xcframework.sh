#!/usr/bin/env bash
# Build ios/TernFFI.xcframework: libtern.a (ffi crate, staticlib) for iOS devices, the iOS
# simulator (arm64 + x86_64) and macOS (arm64 + x86_64), each with include/tern.h and the module
# map that makes it the Swift module `TernFFI`. Needs macOS with Xcode and rustup.
set -euo pipefail
cd "$(dirname "$0")/.."

targets=(aarch64-apple-ios aarch64-apple-ios-sim x86_64-apple-ios aarch64-apple-darwin x86_64-apple-darwin)
for t in "${targets[@]}"; do
  rustup target add "$t" >/dev/null
  cargo build --release -p tern-ffi --target "$t"
done

out=target/xcframework
rm -rf "$out" ios/TernFFI.xcframework
mkdir -p "$out/headers" "$out/ios-sim" "$out/macos"
cp include/tern.h ios/xcframework/module.modulemap "$out/headers/"
lipo -create target/aarch64-apple-ios-sim/release/libtern.a target/x86_64-apple-ios/release/libtern.a \
  -output "$out/ios-sim/libtern.a"
lipo -create target/aarch64-apple-darwin/release/libtern.a target/x86_64-apple-darwin/release/libtern.a \
  -output "$out/macos/libtern.a"

xcodebuild -create-xcframework \
  -library target/aarch64-apple-ios/release/libtern.a -headers "$out/headers" \
  -library "$out/ios-sim/libtern.a" -headers "$out/headers" \
  -library "$out/macos/libtern.a" -headers "$out/headers" \
  -output ios/TernFFI.xcframework
echo "built ios/TernFFI.xcframework"
