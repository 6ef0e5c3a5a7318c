//! Build script: with the `mlx` feature, compiles the small C++ bridge to
//! MLX (`src/mlx/bridge.{rs,cc,h}`) against an installed MLX and links it.
//! Without the feature it does nothing, so the rest of the crate builds on a
//! machine without MLX or a C++ compiler.
//!
//! MLX is looked for, in order, in
//! 1. `MLX_DIR` (a folder with `include/mlx/` and `lib/libmlx.{so,dylib}`:
//!    the wheel's `mlx` package folder, or a CMake install prefix),
//! 2. the project-local install `.pydeps/mlx` (what `scripts/test.sh` makes),
//! 3. the active Python's `mlx` package (`python3`, or `$PYTHON`),
//!
//! and the build fails with the pip command to run when none has it. The
//! binaries carry an rpath to the library's folder (and, on macOS, to
//! `@executable_path`, where `bundle/make-app.sh` copies the dylib).

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The MLX release the bridge is written and tested against.
const MLX_VERSION: &str = "0.32.4";

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if env::var_os("CARGO_FEATURE_MLX").is_none() {
        return;
    }
    println!("cargo:rerun-if-env-changed=MLX_DIR");
    println!("cargo:rerun-if-env-changed=PYTHON");
    for f in ["src/mlx/bridge.rs", "src/mlx/bridge.cc", "src/mlx/bridge.h"] {
        println!("cargo:rerun-if-changed={f}");
    }
    let mlx = match find_mlx() {
        Ok(dir) => dir,
        Err(tried) => fail(&tried),
    };
    let include = mlx.join("include");
    let lib = mlx.join("lib");
    println!("cargo:rerun-if-changed={}", lib.display());

    compile_bridge(&include);

    println!("cargo:rustc-link-search=native={}", lib.display());
    println!("cargo:rustc-link-lib=dylib=mlx");
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", lib.display());
    if env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("macos") {
        // The app bundle carries libmlx.dylib (and mlx.metallib) beside the binary.
        println!("cargo:rustc-link-arg=-Wl,-rpath,@executable_path");
    }
    println!("cargo:rustc-env=BUNDLESCOPE_MLX_LIB_DIR={}", lib.display());
}

/// Compiles the cxx bridge; `cxx-build` is a build dependency of the `mlx`
/// feature alone, so without it this is never reached (main returns first).
#[cfg(feature = "mlx")]
fn compile_bridge(include: &Path) {
    cxx_build::bridge("src/mlx/bridge.rs")
        .file("src/mlx/bridge.cc")
        // A system include: MLX's headers trip -Wextra, and they are not ours.
        .flag("-isystem")
        .flag(include.display().to_string())
        .std("c++20")
        .compile("bundlescope-mlx");
}

#[cfg(not(feature = "mlx"))]
fn compile_bridge(_: &Path) {}

/// The first MLX install that has both headers and the library, or the
/// list of places tried and why each was refused.
fn find_mlx() -> Result<PathBuf, Vec<String>> {
    let mut tried = Vec::new();
    if let Some(dir) = env::var_os("MLX_DIR") {
        let dir = PathBuf::from(dir);
        // MLX_DIR is an explicit choice: a wrong one is an error, not a fall-through.
        return check(&dir)
            .map(|()| dir.clone())
            .map_err(|why| vec![format!("MLX_DIR={}: {why}", dir.display())]);
    }
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let local = manifest.join(".pydeps").join("mlx");
    match check(&local) {
        Ok(()) => return Ok(local),
        Err(why) => tried.push(format!("{}: {why}", local.display())),
    }
    let python = env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    // `mlx` is a namespace package in the wheels (no __init__.py, so no
    // __file__); its __path__ names the folder either way.
    let script = "import mlx, os; f = getattr(mlx, '__file__', None); \
                  print(os.path.dirname(f) if f else list(mlx.__path__)[0])";
    match Command::new(&python).args(["-c", script]).output() {
        Ok(out) if out.status.success() => {
            let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
            match check(&dir) {
                Ok(()) => return Ok(dir),
                Err(why) => tried.push(format!("{python}'s mlx at {}: {why}", dir.display())),
            }
        }
        Ok(_) => tried.push(format!("{python}: has no mlx package")),
        Err(e) => tried.push(format!("{python}: could not run ({e})")),
    }
    Err(tried)
}

/// Does `dir` hold MLX's headers and shared library?
fn check(dir: &Path) -> Result<(), String> {
    if !dir.join("include/mlx/ops.h").is_file() {
        return Err("no include/mlx/ops.h".into());
    }
    let lib = dir.join("lib");
    if !["libmlx.so", "libmlx.dylib"]
        .iter()
        .any(|name| lib.join(name).is_file())
    {
        return Err("no lib/libmlx.so or lib/libmlx.dylib".into());
    }
    Ok(())
}

fn fail(tried: &[String]) -> ! {
    let wheel = if env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("macos") {
        format!("mlx-metal=={MLX_VERSION}")
    } else {
        format!("\"mlx[cpu]=={MLX_VERSION}\"")
    };
    let mut msg = String::from(
        "\n\nbundlescope's `mlx` feature (on by default) needs MLX's C++ library and headers, \
         and none was found. Looked in:\n",
    );
    for t in tried {
        msg.push_str(&format!("  - {t}\n"));
    }
    msg.push_str(&format!(
        "\nInstall it into the project, then build again:\n\n    \
         ./scripts/install-mlx.sh\n\n\
         (it finds a Python >= 3.10 and runs pip install --target .pydeps {wheel} numpy), \
         or point MLX_DIR at a folder with include/mlx/ and lib/libmlx.*, \
         or build without spot checks: cargo build --no-default-features --features gui\n"
    ));
    panic!("{msg}");
}
