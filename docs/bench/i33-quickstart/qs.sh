#!/bin/bash
set -x
export DEBIAN_FRONTEND=noninteractive HOME=/root
# this sandbox reaches the internet through a TLS-intercepting proxy: its CA bundle (infrastructure, not project set-up)
export SSL_CERT_FILE=/root/host-ca.crt CURL_CA_BUNDLE=/root/host-ca.crt CARGO_HTTP_CAINFO=/root/host-ca.crt PIP_CERT=/root/host-ca.crt REQUESTS_CA_BUNDLE=/root/host-ca.crt
curl -sSf -o /tmp/rustup-init https://static.rust-lang.org/rustup/dist/x86_64-unknown-linux-gnu/rustup-init && chmod +x /tmp/rustup-init && /tmp/rustup-init -y -q --profile minimal
. /root/.cargo/env
cd /root/tern
printf 'What is the capital of France?\n' | timeout 1500 cargo run -q --release --bin tern -- chat --temp 0 -n 24
echo "rc=$?"
