#!/usr/bin/env python3
"""Audit benchmark: bundlescope vs openssl, sha256sum and the seed loader.

    python3 scripts/bench_audit.py [--size-mib 2048] [--runs 3] [--no-seed]

Writes a sample bundle of about --size-mib MiB (once, into bench-out/),
then times each tool --runs times on the same payload, interleaved, and
prints medians, ratios and peak resident memory (ru_maxrss of the process).
Run it after `cargo build --release`.
"""
import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = ROOT / "target" / "release" / "bundlescope"


def timed(cmd, env=None):
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    err = proc.stderr.read().decode(errors="replace")
    code = os.waitstatus_to_exitcode(status)
    return wall, usage.ru_maxrss * 1024, code, err


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mib", type=int, default=2048)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--no-seed", action="store_true")
    args = ap.parse_args()
    out = ROOT / "bench-out" / f"audio8-{args.size_mib}"
    if not (out / "manifest.json").exists():
        subprocess.run(["rm", "-rf", str(out)], check=True)
        t = time.perf_counter()
        subprocess.run([str(BIN), "sample", str(out), "--size-mib", str(args.size_mib)], check=True)
        print(f"sample written in {time.perf_counter() - t:.1f} s")
    payload = out / "weights.bin"
    size = payload.stat().st_size
    # Warm the page cache so every tool reads from memory, as a second run would.
    subprocess.run(["cat", str(payload)], stdout=subprocess.DEVNULL, check=True)

    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT / ".pydeps")
    seed = ROOT.parent / "shared" / "seeds" / "weights.py"
    tools = {
        "openssl dgst -sha256": ["openssl", "dgst", "-sha256", str(payload)],
        "sha256sum": ["sha256sum", str(payload)],
        "bundlescope audit": [str(BIN), "audit", str(out)],
    }
    if not args.no_seed and seed.exists():
        tools["seed loader (weights.py)"] = [sys.executable, str(ROOT / "tests" / "seed" / "run_seed.py"), str(seed), str(out)]
    results = {k: [] for k in tools}
    for _ in range(args.runs):
        for name, cmd in tools.items():
            wall, rss, code, err = timed(cmd, env)
            if code != 0:
                sys.exit(f"{name} failed ({code}): {err}")
            results[name].append((wall, rss))
    print(f"payload: {size / 2**20:.0f} MiB, {args.runs} runs each, medians")
    base = statistics.median(w for w, _ in results["openssl dgst -sha256"])
    ours = statistics.median(w for w, _ in results["bundlescope audit"])
    print(f"{'tool':<28} {'wall s':>8} {'GB/s':>7} {'peak RSS MiB':>13} {'× openssl':>10}")
    for name, runs in results.items():
        wall = statistics.median(w for w, _ in runs)
        rss = max(r for _, r in runs)
        print(f"{name:<28} {wall:>8.2f} {size / wall / 1e9:>7.2f} {rss / 2**20:>13.0f} {wall / base:>10.2f}")
    print(f"bundlescope audit / openssl: {ours / base:.2f} (target <= 1.15)")
    if "seed loader (weights.py)" in results:
        seed_wall = statistics.median(w for w, _ in results["seed loader (weights.py)"])
        print(f"seed loader / bundlescope audit: {seed_wall / ours:.1f}x (target >= 20)")


if __name__ == "__main__":
    main()
