#!/usr/bin/env bash
# Fetches GGUF files written by llama.cpp's own converter for the tests
# (tests/gguf_llamacpp.rs) into the git-ignored .cache/llamacpp/, unless
# they are already there. No small GGUF with tensors written by llama.cpp
# ships in a PyPI package; the llama-cpp-python sdist vendors llama.cpp,
# whose models/ folder holds vocabulary-only GGUF files (metadata and
# tokenizer, no tensors) made by convert_hf_to_gguf.py. The sdist
# (76.6 MB) is fetched with pip, pinned by version and SHA-256; only two
# files are kept: ggml-vocab-qwen2.gguf (151,936 tokens, 151,387 merges,
# a chat template) and ggml-vocab-llama-spm.gguf (32,000 tokens with
# scores). Safe to re-run.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=.cache/llamacpp
version=0.3.36
sdist_sha=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
files="ggml-vocab-qwen2.gguf:44c2f46b715f585c6ab513970e8a006bfa5badd6108560054921cf598d154d8c
ggml-vocab-llama-spm.gguf:16c3724582d59aa8bf84711894e833f916ee46a31d80e21312759c48bf8d0e69"
sha() { if command -v sha256sum >/dev/null; then sha256sum "$1"; else shasum -a 256 "$1"; fi | cut -d' ' -f1; }
have() {
  for f in $files; do
    [ -f "$dest/${f%%:*}" ] && [ "$(sha "$dest/${f%%:*}")" = "${f##*:}" ] || return 1
  done
}
have && exit 0
[ -x .pydeps/python ] || ./scripts/install-mlx.sh
echo "== fetching llama.cpp's vocabulary GGUF files (llama-cpp-python $version sdist) into $dest"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
.pydeps/python -m pip download --quiet --disable-pip-version-check --no-deps \
  --no-binary llama-cpp-python -d "$tmp" "llama-cpp-python==$version"
sdist="$tmp/llama_cpp_python-$version.tar.gz"
if [ "$(sha "$sdist")" != "$sdist_sha" ]; then
  echo "llama-cpp-python $version sdist: SHA-256 $(sha "$sdist"), expected $sdist_sha" >&2
  exit 1
fi
mkdir -p "$dest"
for f in $files; do
  name=${f%%:*}
  tar -xzf "$sdist" -C "$tmp" "llama_cpp_python-$version/vendor/llama.cpp/models/$name"
  mv "$tmp/llama_cpp_python-$version/vendor/llama.cpp/models/$name" "$dest/$name"
  if [ "$(sha "$dest/$name")" != "${f##*:}" ]; then
    echo "$name: SHA-256 $(sha "$dest/$name"), expected ${f##*:}" >&2
    rm -f "$dest/$name"
    exit 1
  fi
done
