#!/usr/bin/env bash
# The desktop app in a real window (issue 16): start `tern-app` under Xvfb on Mesa lavapipe with
# the GPU device, load SmolLM2-135M-Instruct, send a prompt, wait for the whole reply and save a
# screenshot of the window (docs/app-screenshot.png comes from this run).
#   bash scripts/app-ci.sh [OUT.png]      (default target/app-screenshot.png)
# Needs Xvfb (apt package xvfb) and the X11 client libraries winit loads; scripts/test.sh
# installs them.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-target/app-screenshot.png}
mkdir -p "$(dirname "$out")"
# scripts/test.sh passes the binary its workspace build made (building it here alone would
# resolve other features and compile the GPU stack again).
app=${TERN_APP_BIN:-}
if [ -z "$app" ]; then
  cargo build --release -q -p tern-app --bin tern-app
  app=target/release/tern-app
fi

# A private X display: Xvfb picks a free number and writes it to fd 3.
dfile=$(mktemp)
Xvfb -displayfd 3 -screen 0 1280x800x24 -nolisten tcp 3>"$dfile" 2>/dev/null &
xpid=$!
rdir=$(mktemp -d)
trap 'kill "$xpid" 2>/dev/null || true; rm -rf "$dfile" "$rdir"' EXIT
for _ in $(seq 100); do [ -s "$dfile" ] && break; sleep 0.1; done
[ -s "$dfile" ] || { echo "Xvfb did not start"; exit 1; }
export DISPLAY=":$(head -n1 "$dfile")" XDG_RUNTIME_DIR="$rdir"

rm -f "$out"
t0=$(date +%s)
# Both the window and the engine run on lavapipe (the only Vulkan adapter here).
reply=$(WGPU_BACKEND=vulkan "$app" --device gpu --ctx 1024 --max-tokens 48 \
  --script "What is the capital of France? Answer in one sentence." \
  --screenshot "$out" --timeout 540)
echo "   reply: $reply"
echo "   screenshot: $out ($(stat -c %s "$out") bytes) in $(( $(date +%s) - t0 ))s"
case "$reply" in *Paris*) ;; *) echo "the reply does not name Paris"; exit 1 ;; esac
