# Sourced by the scripts: decides whether this machine can have MLX and
# which Python installs it. Sets
#   MLX_OK=1|0           MLX 0.32.4 has wheels here (Linux x86_64/aarch64,
#                        macOS >= 14 on Apple Silicon)
#   MLX_WHY              why not, in one sentence, when MLX_OK=0
#   CARGO_FEATURES       extra cargo flags: none, or the build without `mlx`
#   PY                   a Python >= 3.10 with pip (empty when none)
# Nothing here installs anything.

MLX_OK=1
MLX_WHY=""
case "$(uname -s)/$(uname -m)" in
  Darwin/arm64)
    major=$(sw_vers -productVersion 2>/dev/null | cut -d. -f1)
    if [ -n "$major" ] && [ "$major" -lt 14 ]; then
      MLX_OK=0; MLX_WHY="MLX's macOS wheels need macOS 14 or later (this is $(sw_vers -productVersion))"
    fi ;;
  Darwin/*)
    MLX_OK=0; MLX_WHY="MLX's macOS wheels are for Apple Silicon only (this Mac is $(uname -m))" ;;
  Linux/x86_64|Linux/aarch64) ;;
  *)
    MLX_OK=0; MLX_WHY="MLX publishes no wheel for $(uname -s) $(uname -m)" ;;
esac
if [ "$MLX_OK" = 1 ]; then CARGO_FEATURES=""; else CARGO_FEATURES="--no-default-features --features gui"; fi

# MLX 0.32.4 needs Python >= 3.10 (its cp39 wheels stop at 0.29.3), and a
# fresh Mac's python3 is Apple's 3.9: try the versioned names and
# Homebrew's paths too. BUNDLESCOPE_PYTHON wins when set.
PY=""
for cand in ${BUNDLESCOPE_PYTHON:-} python3 python3.13 python3.12 python3.11 python3.10 \
            /opt/homebrew/bin/python3 /usr/local/bin/python3 \
            /opt/homebrew/bin/python3.13 /opt/homebrew/bin/python3.12 \
            /opt/homebrew/bin/python3.11 /opt/homebrew/bin/python3.10; do
  if command -v "$cand" >/dev/null 2>&1 \
     && "$cand" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)' 2>/dev/null \
     && "$cand" -m pip --version >/dev/null 2>&1; then
    PY=$(command -v "$cand"); break
  fi
done
