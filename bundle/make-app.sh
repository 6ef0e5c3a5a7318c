#!/usr/bin/env bash
# Assembles target/bundlescope.app on macOS: binary, Info.plist, icon and,
# when built with MLX, libmlx.dylib and mlx.metallib beside the binary (the
# binary's rpath includes @executable_path). Run from the repository root:
#   cargo build --release && bundle/make-app.sh
# It needs macOS tools (sips, iconutil) and cannot run on Linux.
set -euo pipefail
[ "$(uname)" = Darwin ] || { echo "make-app.sh runs on macOS only" >&2; exit 2; }
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
app=target/bundlescope.app
rm -rf "$app"
mkdir -p "$app/Contents/MacOS" "$app/Contents/Resources"
cp target/release/bundlescope "$app/Contents/MacOS/bundlescope"
sed "s/@VERSION@/$version/g" bundle/Info.plist > "$app/Contents/Info.plist"
iconset=$(mktemp -d)/bundlescope.iconset
mkdir -p "$iconset"
for size in 16 32 128 256 512; do
  sips -z $size $size assets/icon.png --out "$iconset/icon_${size}x${size}.png" >/dev/null
  sips -z $((size * 2)) $((size * 2)) assets/icon.png --out "$iconset/icon_${size}x${size}@2x.png" >/dev/null
done
iconutil -c icns "$iconset" -o "$app/Contents/Resources/bundlescope.icns"
# MLX (the spot checks): the library the build linked, from MLX_LIB_DIR or
# the project-local install that scripts/install-mlx.sh makes. The Metal
# kernels (mlx.metallib) must sit beside the dylib.
mlx_lib=${MLX_LIB_DIR:-.pydeps/mlx/lib}
if otool -L target/release/bundlescope | grep -q libmlx; then
  [ -f "$mlx_lib/libmlx.dylib" ] || { echo "no libmlx.dylib in $mlx_lib; set MLX_LIB_DIR" >&2; exit 1; }
  cp "$mlx_lib/libmlx.dylib" "$app/Contents/MacOS/"
  [ -f "$mlx_lib/mlx.metallib" ] && cp "$mlx_lib/mlx.metallib" "$app/Contents/MacOS/"
fi
# Apple Silicon refuses to load unsigned code, and the copied dylib broke
# the linker's signature: sign the whole app ad hoc (no identity; the first
# open goes through Gatekeeper, see the README), then check the result.
codesign --force --deep -s - "$app"
codesign --verify --deep --strict "$app"
echo "wrote $app (ad-hoc signed)"
