#!/usr/bin/env bash
# Runs the scanners' unit tests as aarch64 code (the instruction set of
# Apple Silicon) on an x86-64 Linux machine: cross-compiled for
# aarch64-unknown-linux-gnu and run under qemu's user-mode emulator. This
# is where the NEON code tally (src/audit/scan/neon.rs) is tested against
# the portable kernel and the naive references; on x86-64 the AVX2 kernels
# run instead. It checks the results, not the speed (qemu emulates).
#
# Not part of scripts/test.sh: building the dependencies for a second
# target takes 5 to 9 minutes on 2 cores. Installs what it lacks: Debian's
# gcc-aarch64-linux-gnu and qemu-user (as root, or through sudo) and the
# Rust target (rustup).
set -euo pipefail
cd "$(dirname "$0")/.."
target=aarch64-unknown-linux-gnu
if ! command -v aarch64-linux-gnu-gcc >/dev/null || ! command -v qemu-aarch64 >/dev/null; then
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update -q >/dev/null
  $sudo apt-get install -y -q gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user >/dev/null
fi
rustup target list --installed | grep -qx "$target" || rustup target add "$target"
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
export CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -L /usr/aarch64-linux-gnu"
# The library alone, without the app and MLX (neither is needed by the
# scanners, and MLX's C++ library is not cross-built here).
cargo test --target "$target" --no-default-features --lib -- audit::scan "$@"
