#!/usr/bin/env bash
# The project's one test command (README, .ci/run): installs what the tests
# need, then runs them. Safe to re-run; installs are skipped when present.
set -euo pipefail
cd "$(dirname "$0")/.."

# MLX (library, headers, Python package) and numpy, project-local: the
# build links MLX for the spot checks; the seed loader and the MLX
# cross-checks run on the Python side.
./scripts/install-mlx.sh

# Snapshot tests render the real app on a CPU adapter: Mesa's lavapipe
# (Vulkan) on Linux. macOS renders through Metal and needs nothing.
if [ "$(uname)" = Linux ] && ! dpkg -s mesa-vulkan-drivers libvulkan1 >/dev/null 2>&1; then
  echo "== installing Mesa's CPU Vulkan driver for the snapshot tests"
  if [ "$(id -u)" = 0 ]; then sudo=""; else sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq mesa-vulkan-drivers libvulkan1 >/dev/null
fi

echo "== cargo fmt --check"
cargo fmt --check

echo "== cargo clippy --all-targets (warnings are errors)"
cargo clippy --profile ci --all-targets -- -D warnings

echo "== cargo test"
cargo test --profile ci --lib --bins --tests 2>&1

echo "== benches build (run them with cargo bench)"
cargo bench --profile ci --no-run 2>&1 | tail -n 3

echo "== build and smoke-test without the mlx feature"
./scripts/check-without-mlx.sh
