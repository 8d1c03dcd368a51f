#!/usr/bin/env bash
# (A copy of ../shared/tools/llamacpp-device-kit.sh, kept here because ../shared does not travel to the device.)
# llama.cpp as the speed anchor on the lent GPU, built THERE with a current shader toolchain.
#
# Why: Debian 12's glslc is too old for llama.cpp's cooperative-matrix (KHR coopmat, NV coopmat2) and
# integer-dot shaders, so a llama.cpp built here runs on NVIDIA without tensor cores or int8 dot products
# ("int dot: 0 | matrix cores: none" in `llama-bench --list-devices`). Measured on an H200, same call
# (2B4T shape, TQ2_0): pp512 6,975 (old glslc) vs 19,130 (current glslc, -fa 1); tg128 ~160-169 either way.
# A ratio against the old build flatters prefill by ~2.7x. Always compare against the full build, -fa 1.
#
#   bash llamacpp-device-kit.sh kit DIR     HERE: writes DIR/llama-src.tar.xz (llama.cpp 0c1e570 from the
#                                           llama-cpp-python 0.3.36 sdist, trimmed) and DIR/vk-tools.tar.xz
#                                           (Debian 13's glslc 2025.2, libshaderc, Vulkan 1.4 headers,
#                                           SPIRV headers: they need glibc >= 2.38, which the GPU machine has)
#   bash llamacpp-device-kit.sh build DIR   ON THE GPU MACHINE: builds DIR/bin/{llama-bench,llama-perplexity,
#                                           llama-quantize} (~2.5 min on 16 cores); prints the shader features
# Carry DIR (~13 MB) and the Vulkan loader debs (.gl, see the device tool's README) in the same call.
set -euo pipefail
cmd=${1:?kit|build}; DIR=$(mkdir -p "${2:?DIR}" && cd "$2" && pwd)
VER=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}
case $cmd in
kit)
  W=$(mktemp -d)
  command -v cmake >/dev/null || apt-get install -y -qq cmake >/dev/null
  python3 -m venv "$W/venv" && "$W/venv/bin/pip" install -q scikit-build-core
  # --no-build-isolation: pip only reads the sdist's metadata instead of building cmake from source
  (cd "$W" && "$W/venv/bin/pip" download -q --no-deps --no-binary :all: --no-build-isolation "llama-cpp-python==$VER" -d .)
  tar xzf "$W/llama_cpp_python-$VER.tar.gz" -C "$W"
  S="$W/llama_cpp_python-$VER/vendor/llama.cpp"
  tar cJf "$DIR/llama-src.tar.xz" -C "$S" --exclude=./models --exclude=./docs --exclude=./media \
    --exclude=./tests --exclude=./benches --exclude=./gguf-py --exclude=./.git .
  # Debian 13 packages through the machine's own Debian mirror (its URI read from the apt sources here)
  URI=$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | grep -v security | head -1)
  [ -n "$URI" ] || URI=$(awk '/^deb /{print $2; exit}' /etc/apt/sources.list)
  mkdir -p "$W/lists/partial" "$W/debs"
  echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $URI trixie main" > "$W/sources.list"
  o="-oAPT::Architecture=amd64 -oDir::State::Lists=$W/lists -oDir::Etc::SourceList=$W/sources.list -oDir::Etc::SourceParts=/dev/null"
  apt-get $o update -qq
  (cd "$W/debs" && apt-get $o download glslc libshaderc1 libvulkan-dev libvulkan1 spirv-headers 2>/dev/null)
  mkdir -p "$W/x" && for f in "$W"/debs/*.deb; do dpkg -x "$f" "$W/x"; done
  tar cJf "$DIR/vk-tools.tar.xz" -C "$W/x" usr
  rm -rf "$W"; ls -la "$DIR"
  ;;
build)
  B=/tmp/llama-build; rm -rf "$B"; mkdir -p "$B/src"
  tar xJf "$DIR/llama-src.tar.xz" -C "$B/src"; tar xJf "$DIR/vk-tools.tar.xz" -C "$B"
  T=$B/usr; L=$T/lib/x86_64-linux-gnu; export LD_LIBRARY_PATH=$L
  cd "$B/src"
  cmake -B build -DGGML_VULKAN=1 -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DGGML_NATIVE=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DGGML_CCACHE=OFF \
    -DCMAKE_BUILD_TYPE=Release -DVulkan_INCLUDE_DIR=$T/include -DVulkan_LIBRARY=$L/libvulkan.so \
    -DVulkan_GLSLC_EXECUTABLE=$T/bin/glslc -DCMAKE_PREFIX_PATH="$T;$L/cmake" > "$B/cmake.log" 2>&1 || { tail -20 "$B/cmake.log"; exit 1; }
  grep -E "supported by glslc" "$B/cmake.log" || true
  cmake --build build -j"$(nproc)" --target llama-bench llama-perplexity llama-quantize > "$B/build.log" 2>&1 || { tail -30 "$B/build.log"; exit 1; }
  mkdir -p "$DIR/bin" && cp build/bin/llama-bench build/bin/llama-perplexity build/bin/llama-quantize "$DIR/bin/"
  "$DIR/bin/llama-bench" --list-devices 2>&1 | grep -iE "int dot|matrix cores|Vulkan0" || true
  ;;
*) echo "usage: $0 kit|build DIR" >&2; exit 2 ;;
esac
