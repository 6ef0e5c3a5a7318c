#!/usr/bin/env bash
# Installs MLX 0.32.4 (C++ library, headers and Python package) and numpy
# into the project-local, git-ignored .pydeps/ unless they are already
# there: the build links the library (build.rs), the tests run the Python
# side. Linux gets the CPU wheel, macOS the Metal one. Safe to re-run.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(uname)" = Darwin ]; then wheel="mlx==0.32.4"; else wheel="mlx[cpu]==0.32.4"; fi
if PYTHONPATH=.pydeps python3 -c "import mlx.core, numpy" 2>/dev/null \
   && [ -d .pydeps/mlx/include/mlx ] && ls .pydeps/mlx/lib/libmlx.* >/dev/null 2>&1; then
  exit 0
fi
echo "== installing $wheel and numpy into .pydeps"
rm -rf .pydeps
python3 -m pip install --quiet --disable-pip-version-check --target .pydeps "$wheel" numpy
