#!/usr/bin/env bash
# Opens the app on the built-in demo bundle: installs MLX into .pydeps/
# when missing (the spot checks link it), builds, runs `bundlescope --demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-mlx.sh
exec cargo run --release -- --demo "$@"
