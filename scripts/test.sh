#!/usr/bin/env bash
# The project's one test command (README, .ci/run): installs what the tests
# need, then runs them. Safe to re-run; installs are skipped when present.
set -euo pipefail
cd "$(dirname "$0")/.."

# Python with MLX (CPU) and numpy, project-local: the seed loader and MLX
# cross-checks run on it.
if ! PYTHONPATH=.pydeps python3 -c "import mlx.core, numpy" 2>/dev/null; then
  echo "== installing mlx-cpu 0.32.4 and numpy into .pydeps"
  rm -rf .pydeps
  python3 -m pip install --quiet --disable-pip-version-check --target .pydeps "mlx[cpu]==0.32.4" numpy
fi

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

echo "== cargo test"
cargo test --release --lib --bins --tests 2>&1

echo "== benches build (run them with cargo bench)"
cargo bench --no-run 2>&1 | tail -n 3
