#!/usr/bin/env bash
# The project's one test command (README, .ci/run): installs what the tests
# need, then runs them. Safe to re-run; installs are skipped when present.
set -euo pipefail
cd "$(dirname "$0")/.."

# MLX (library, headers, Python package) and numpy, project-local: the
# build links MLX for the spot checks; the seed loader and the MLX
# cross-checks run on the Python side.
./scripts/install-mlx.sh
. scripts/platform.sh
# GGUF files written by llama.cpp's converter (vocabulary-only), pinned.
./scripts/fetch-llamacpp-vocab.sh
# GGUF files with quantized tensors written by llama.cpp's own quantizers
# (ggml's base library built from the same pinned sdist, about 45 s once).
./scripts/make-llamacpp-gguf.sh

# Snapshot tests render the real app on a CPU adapter: Mesa's lavapipe
# (Vulkan) on Linux. macOS renders through Metal and needs nothing.
if [ "$(uname)" = Linux ]; then
  if ! command -v dpkg >/dev/null || ! command -v apt-get >/dev/null; then
    if ! ls /usr/share/vulkan/icd.d/lvp_icd*.json >/dev/null 2>&1; then
      echo "The snapshot tests need Mesa's CPU Vulkan driver (lavapipe) and the Vulkan loader, and this Linux has no apt to install them: install them with your package manager (Fedora: mesa-vulkan-drivers vulkan-loader; Arch: vulkan-swrast vulkan-icd-loader), then run this again." >&2
      exit 1
    fi
  elif ! dpkg -s mesa-vulkan-drivers libvulkan1 >/dev/null 2>&1; then
    echo "== installing Mesa's CPU Vulkan driver for the snapshot tests"
    if [ "$(id -u)" = 0 ]; then sudo=""; else sudo="sudo"; fi
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq mesa-vulkan-drivers libvulkan1 >/dev/null
  fi
fi

echo "== cargo fmt --check"
cargo fmt --check

echo "== cargo clippy --all-targets (warnings are errors)"
# shellcheck disable=SC2086 # CARGO_FEATURES is a list of flags
cargo clippy --profile ci $CARGO_FEATURES --all-targets -- -D warnings

echo "== the headless build (no app, no MLX: a CI server's CLI) compiles, warnings are errors"
cargo clippy --profile ci --no-default-features --lib --bins -- -D warnings

echo "== cargo test"
[ "$MLX_OK" = 1 ] || echo "== $MLX_WHY: testing without the mlx feature (no spot-check tests)"
# shellcheck disable=SC2086
cargo test --profile ci $CARGO_FEATURES --lib --bins --tests 2>&1

echo "== benches build (run them with cargo bench)"
# shellcheck disable=SC2086
cargo bench --profile ci $CARGO_FEATURES --no-run 2>&1 | tail -n 3

if [ "$MLX_OK" = 1 ]; then
  echo "== build and smoke-test without the mlx feature"
  ./scripts/check-without-mlx.sh
fi
