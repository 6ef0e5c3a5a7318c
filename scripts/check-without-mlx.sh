#!/usr/bin/env bash
# Builds bundlescope without the `mlx` feature (what a user without MLX or a
# C++ compiler gets) and checks that everything but the spot checks works:
# a sample is written and audits valid, and `spotcheck` refuses with exit 2
# and says how to enable MLX. Built through `cargo test --no-run` so that
# the dependencies resolve with the same features as the test build (and
# Cargo.toml pins proc-macro2's span-locations, which cxx-build would
# otherwise be alone in turning on) and are reused: only bundlescope itself
# compiles again (the next default build compiles it back).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --profile ci --no-default-features --features gui --test engine --no-run 2>&1 | tail -n 1
bin=target/ci/bundlescope
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$bin" sample "$tmp/b" >/dev/null
"$bin" audit "$tmp/b" >/dev/null || { echo "FAIL: the sample does not audit valid without MLX"; exit 1; }
set +e
out=$("$bin" spotcheck "$tmp/b" 2>&1)
rc=$?
set -e
if [ "$rc" != 2 ] || ! grep -q "built without MLX" <<<"$out" || ! grep -q "install-mlx.sh" <<<"$out"; then
  echo "FAIL: spotcheck without MLX should exit 2 and say how to enable it; got exit $rc:"
  echo "$out"
  exit 1
fi
echo "ok: without MLX the audit works and spotcheck says: ${out:0:80}..."
