#!/usr/bin/env python3
"""GGUF audit benchmark: bundlescope vs openssl and gguf-py.

    python3 scripts/bench_gguf.py [--size-mib 1024] [--runs 3] [--file X.gguf]

Writes a GGUF sample of about --size-mib MiB (one tensor of each decoded
ggml type, matrices grown; once, into bench-out/) unless --file names a
GGUF to use, then times, interleaved, `openssl dgst -sha256` of the file,
`bundlescope audit` (every check, SHA-256, every block decoded into the
histograms) and gguf-py reading the file and dequantizing every tensor it
can (tests/gguf/dequant_all.py), and prints medians, ratios and peak
resident memory. Run it after `cargo build --release` and
scripts/install-mlx.sh (which installs gguf-py into .pydeps).
"""
import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(os.environ.get("BUNDLESCOPE_BIN", ROOT / "target" / "release" / "bundlescope"))


def timed(cmd, env=None):
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    err = proc.stderr.read().decode(errors="replace")
    cpu = usage.ru_utime + usage.ru_stime
    return wall, cpu, usage.ru_maxrss * 1024, os.waitstatus_to_exitcode(status), err


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--file", type=Path)
    args = ap.parse_args()
    if args.file:
        path = args.file
    else:
        out = ROOT / "bench-out" / f"gguf-{args.size_mib}"
        path = out / "model.gguf"
        if not path.exists():
            subprocess.run(["rm", "-rf", str(out)], check=True)
            subprocess.run([str(BIN), "sample", str(out), "--format", "gguf",
                            "--size-mib", str(args.size_mib)], check=True)
    size = path.stat().st_size
    subprocess.run(["cat", str(path)], stdout=subprocess.DEVNULL, check=True)
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT / ".pydeps")
    py = str(ROOT / ".pydeps" / "python") if (ROOT / ".pydeps" / "python").exists() else sys.executable
    tools = {
        "openssl dgst -sha256": ["openssl", "dgst", "-sha256", str(path)],
        "bundlescope audit": [str(BIN), "audit", str(path)],
        "gguf-py dequantize all": [py, str(ROOT / "tests" / "gguf" / "dequant_all.py"), str(path)],
    }
    results = {k: [] for k in tools}
    load_before = os.getloadavg()
    for _ in range(args.runs):
        for name, cmd in tools.items():
            wall, cpu, rss, code, err = timed(cmd, env)
            if code != 0:
                sys.exit(f"{name} failed ({code}): {err}")
            results[name].append((wall, cpu, rss))
    load_after = os.getloadavg()
    print(f"file: {size / 2**20:.0f} MiB, {args.runs} runs each, medians; {os.cpu_count()} CPUs")
    print("load average (1, 5, 15 min) before: {:.2f} {:.2f} {:.2f}, after: {:.2f} {:.2f} {:.2f}".format(
        *load_before, *load_after))
    med = {k: statistics.median(w for w, _, _ in v) for k, v in results.items()}
    cpu = {k: statistics.median(c for _, c, _ in v) for k, v in results.items()}
    base = med["openssl dgst -sha256"]
    print(f"{'tool':<26} {'wall s':>8} {'min s':>7} {'cpu s':>7} {'GB/s':>7} {'peak RSS MiB':>13} {'× openssl':>10}")
    for name, runs in results.items():
        rss = max(r for _, _, r in runs)
        best = min(w for w, _, _ in runs)
        print(f"{name:<26} {med[name]:>8.2f} {best:>7.2f} {cpu[name]:>7.2f} {size / med[name] / 1e9:>7.2f} {rss / 2**20:>13.0f} {med[name] / base:>10.2f}")
    ours = med["bundlescope audit"]
    print(f"bundlescope audit / openssl: {ours / base:.2f} (target <= 1.15)")
    print(f"gguf-py / bundlescope audit: {med['gguf-py dequantize all'] / ours:.1f}x (target >= 20)")


if __name__ == "__main__":
    main()
