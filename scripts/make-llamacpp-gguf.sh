#!/usr/bin/env bash
# Writes GGUF files with quantized tensors made by llama.cpp's own code
# for the tests (tests/gguf_llamacpp.rs) into the git-ignored
# .cache/llamacpp/written/, unless they are already there for this script.
# No small GGUF with quantized tensors written by llama.cpp ships in a PyPI
# package, so this builds ggml's base library (ggml.c, ggml-quants.c,
# gguf.cpp and what they link: no CPU backend, no llama library) from the
# sources vendored in the pinned llama-cpp-python sdist (the one
# scripts/fetch-llamacpp-vocab.sh takes its vocabulary files from, checked
# against the same SHA-256), links it with scripts/llamacpp/write_gguf.c,
# and runs that on real weights: the six output.dense matrices of
# all-MiniLM-L6-v2 (.pymodels, from scripts/install-mlx.sh), their first
# 256 rows. ggml_quantize_chunk quantizes them into every type it makes
# and gguf_write_to_file writes the files (see write_gguf.c). It takes
# about 36 s of CPU time, once: 19 s compiling (-O2, the files in
# parallel), 17 s writing (mostly the IQ1/IQ2 quantizers' grid set-up);
# measured 33 s to 90 s of wall time on a shared 2-core machine. Safe to
# re-run.
set -euo pipefail
cd "$(dirname "$0")/.."
version=0.3.36
sdist_sha=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
rows=256
base=.cache/llamacpp
out=$base/written
sha() { if command -v sha256sum >/dev/null; then sha256sum "$1"; else shasum -a 256 "$1"; fi | cut -d' ' -f1; }
# The files are kept while this script, the generator and the sdist are the same.
stamp="$version $rows $(sha scripts/llamacpp/write_gguf.c) $(sha scripts/make-llamacpp-gguf.sh)"
if [ -f "$out/stamp" ] && [ "$(cat "$out/stamp")" = "$stamp" ] \
   && [ -f "$out/all-types.gguf" ] && [ -f "$out/mlx-types.gguf" ] && [ -f "$out/q2_0.gguf" ] && [ -f "$out/ggml-types.tsv" ]; then
  exit 0
fi
[ -x .pydeps/python ] && [ -f .pymodels/all-minilm-l6-v2/model.safetensors ] || ./scripts/install-mlx.sh
for tool in cc c++; do
  command -v $tool >/dev/null || { echo "make-llamacpp-gguf.sh needs a C and C++ compiler ($tool)" >&2; exit 1; }
done
src=$base/ggml-$version
if [ ! -f "$src/src/gguf.cpp" ]; then
  echo "== fetching llama.cpp's ggml sources (llama-cpp-python $version sdist) into $src"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  .pydeps/python -m pip download --quiet --disable-pip-version-check --no-deps \
    --no-binary llama-cpp-python -d "$tmp" "llama-cpp-python==$version"
  sdist="$tmp/llama_cpp_python-$version.tar.gz"
  if [ "$(sha "$sdist")" != "$sdist_sha" ]; then
    echo "llama-cpp-python $version sdist: SHA-256 $(sha "$sdist"), expected $sdist_sha" >&2
    exit 1
  fi
  prefix=llama_cpp_python-$version/vendor/llama.cpp/ggml
  tar -xzf "$sdist" -C "$tmp" "$prefix/include" "$prefix/src/ggml-cpu/ggml-cpu-impl.h" \
    $(for f in ggml.c ggml-quants.c ggml-quants.h gguf.cpp ggml-impl.h ggml-common.h \
        ggml-threading.cpp ggml-threading.h ggml-backend.cpp ggml-backend-impl.h \
        ggml-backend-meta.cpp ggml-alloc.c; do echo "$prefix/src/$f"; done)
  rm -rf "$src"
  mkdir -p "$base"
  mv "$tmp/$prefix" "$src"
fi
echo "== building ggml's base library and scripts/llamacpp/write_gguf.c"
started=$(date +%s)
build=$base/build
rm -rf "$build" "$out"
mkdir -p "$build" "$out"
printf '#pragma once\n#define GGML_VERSION "%s"\n#define GGML_COMMIT "llama-cpp-python-%s"\n' "$version" "$version" \
  > "$build/ggml-version.h"
flags=(-O2 -w -pthread -I"$build" -I"$src/include" -I"$src/src")
objs=()
for f in ggml.c ggml-quants.c ggml-alloc.c; do
  cc -std=gnu11 "${flags[@]}" -c "$src/src/$f" -o "$build/$f.o" & objs+=("$build/$f.o")
done
for f in gguf.cpp ggml-threading.cpp ggml-backend.cpp ggml-backend-meta.cpp; do
  c++ -std=c++17 "${flags[@]}" -c "$src/src/$f" -o "$build/$f.o" & objs+=("$build/$f.o")
done
cc -std=gnu11 "${flags[@]}" -c scripts/llamacpp/write_gguf.c -o "$build/write_gguf.o" & objs+=("$build/write_gguf.o")
wait
c++ -pthread "${objs[@]}" -o "$build/write_gguf" -lm
built=$(date +%s)
echo "== writing GGUF files with llama.cpp's quantizers into $out (compiled in $((built - started)) s)"
.pydeps/python - "$build/weights.f32" "$rows" <<'PY'
import json, struct, sys
out, rows = sys.argv[1], int(sys.argv[2])
with open('.pymodels/all-minilm-l6-v2/model.safetensors', 'rb') as f:
    n = struct.unpack('<Q', f.read(8))[0]
    header = json.loads(f.read(n))
    with open(out, 'wb') as o:
        for layer in range(6):
            t = header[f'encoder.layer.{layer}.output.dense.weight']
            assert t['dtype'] == 'F32' and t['shape'] == [384, 1536], t
            f.seek(8 + n + t['data_offsets'][0])
            o.write(f.read(rows * 1536 * 4))
PY
"$build/write_gguf" "$build/weights.f32" "$rows" 1536 6 "$out"
rm -f "$build/weights.f32"
echo "$stamp" > "$out/stamp"
echo "== written in $(($(date +%s) - built)) s"
