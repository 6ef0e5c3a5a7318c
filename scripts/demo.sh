#!/usr/bin/env bash
# Opens the app on the built-in demo bundle: installs MLX into .pydeps/
# when missing (the spot checks link it), builds, runs `bundlescope --demo`
# (add --demo-overlay for the calibrated GPTQ-Q4 overlay and its Lineage tab).
# Where MLX has no wheel (an Intel Mac) it builds without spot checks.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-mlx.sh
. scripts/platform.sh
# shellcheck disable=SC2086 # CARGO_FEATURES is a list of flags
exec cargo run --release $CARGO_FEATURES -- --demo "$@"
