#!/usr/bin/env bash
# Runs every fuzz target for SECONDS each (default 60) with cargo-fuzz
# (libFuzzer, AddressSanitizer) on the stable toolchain.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]
#
# Needs `cargo install cargo-fuzz`. The stable toolchain ships the sanitizer
# runtimes (librustc-stable_rt.asan.a); RUSTC_BOOTSTRAP=1 lets stable accept
# the -Zsanitizer flag cargo-fuzz passes, so no nightly is needed.
# New inputs go to fuzz/work/<target> (ignored by git); the committed seeds
# in fuzz/corpus/<target> (scripts/fuzz_seeds.py) are only read. A crash
# leaves its input in fuzz/artifacts/<target>/ and stops the script; turn it
# into a regression test in tests/fuzz_regressions.rs.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
SECONDS_EACH="${1:-60}"
shift || true
TARGETS=(
  audio8_manifest
  safetensors_header
  nvfp4_manifest
  mlxlm_config_index
  gguf_header
  audit_bundle
  oms_signature
)
if [ "$#" -gt 0 ]; then TARGETS=("$@"); fi
export RUSTC_BOOTSTRAP=1
cargo fuzz build -O
for t in "${TARGETS[@]}"; do
  mkdir -p "work/$t" "artifacts/$t"
  echo "== $t: ${SECONDS_EACH}s"
  # -timeout: one input taking over 10 s is a hang; -rss_limit_mb: the
  # audit's 256 MiB bound plus the sanitizer's own overhead.
  # audit_bundle runs the whole audit, whose threads end after each input
  # returns: the per-input leak check then sees std's per-thread objects
  # (thread name, channel context) of a thread still exiting, a report
  # that does not reproduce on the same input. Its memory is bounded by
  # -rss_limit_mb here and by tests/bounds.rs and tests/soak.rs.
  extra=()
  if [ "$t" = audit_bundle ]; then extra=(-detect_leaks=0); fi
  cargo fuzz run -O "$t" "work/$t" "corpus/$t" -- \
    -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=1024 \
    -max_len=65536 -print_final_stats=1 "${extra[@]}" 2>&1 | tee "work/$t.log" | grep -E "^(#[0-9]+ +DONE|stat::number_of_executed_units|==[0-9]+==ERROR|SUMMARY|Done)" || true
  if ls "artifacts/$t"/crash-* "artifacts/$t"/timeout-* "artifacts/$t"/oom-* "artifacts/$t"/leak-* >/dev/null 2>&1; then
    echo "!! $t left inputs in fuzz/artifacts/$t"; exit 1
  fi
done
