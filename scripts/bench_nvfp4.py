#!/usr/bin/env python3
"""NVFP4 audit benchmark: `bundlescope audit` vs sequential `openssl dgst -sha256`.

    python3 scripts/bench_nvfp4.py [--size-mib 4096] [--runs 3]

Writes an mlx-nvfp4 sample of about --size-mib MiB in at least 4 shards
(once, into bench-out/), warms the page cache, then times, --runs times
and interleaved: openssl hashing the shards one after another (one
process, the files in order) and `bundlescope audit` (every check, every
shard hashed, shards in parallel). Prints medians, peak resident memory
and the speed-up. Run it after `cargo build --release`.
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


def timed(cmd):
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    err = proc.stderr.read().decode(errors="replace")
    return wall, usage.ru_maxrss * 1024, os.waitstatus_to_exitcode(status), err


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mib", type=int, default=4096)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    out = ROOT / "bench-out" / f"nvfp4-{args.size_mib}"
    if not (out / "manifest.json").exists():
        subprocess.run(["rm", "-rf", str(out)], check=True)
        t = time.perf_counter()
        subprocess.run(
            [str(BIN), "sample", str(out), "--format", "nvfp4", "--size-mib", str(args.size_mib)],
            check=True,
        )
        print(f"sample written in {time.perf_counter() - t:.1f} s")
    shards = sorted(out.glob("*.safetensors"))
    size = sum(s.stat().st_size for s in shards)
    if len(shards) < 4:
        sys.exit(f"expected at least 4 shards, found {len(shards)}")
    for s in shards:
        subprocess.run(["cat", str(s)], stdout=subprocess.DEVNULL, check=True)

    tools = {
        "openssl dgst -sha256 (sequential)": ["openssl", "dgst", "-sha256", *map(str, shards)],
        # What the machine allows for hashing alone: one openssl per core,
        # the shards split between them.
        f"openssl, {min(os.cpu_count(), len(shards))} in parallel": [
            "sh", "-c",
            " & ".join(
                "openssl dgst -sha256 " + " ".join(f"'{s}'" for s in shards[k::min(os.cpu_count(), len(shards))]) + " >/dev/null"
                for k in range(min(os.cpu_count(), len(shards)))
            ) + "; wait",
        ],
        "bundlescope audit": [str(BIN), "audit", str(out)],
    }
    results = {k: [] for k in tools}
    for _ in range(args.runs):
        for name, cmd in tools.items():
            wall, rss, code, err = timed(cmd)
            if code != 0:
                sys.exit(f"{name} failed ({code}): {err}")
            results[name].append((wall, rss))
    print(f"{len(shards)} shards, {size / 2**30:.2f} GiB, {os.cpu_count()} cores, {args.runs} runs each, medians")
    print(f"{'tool':<36} {'wall s':>8} {'GB/s':>7} {'peak RSS MiB':>13}")
    for name, runs in results.items():
        wall = statistics.median(w for w, _ in runs)
        rss = max(r for _, r in runs)
        print(f"{name:<36} {wall:>8.2f} {size / wall / 1e9:>7.2f} {rss / 2**20:>13.0f}")
    base = statistics.median(w for w, _ in results["openssl dgst -sha256 (sequential)"])
    ours = statistics.median(w for w, _ in results["bundlescope audit"])
    par = statistics.median(w for w, _ in results[f"openssl, {min(os.cpu_count(), len(shards))} in parallel"])
    print(f"speed-up over sequential openssl: {base / ours:.2f}x (target >= 1.7 on 2 cores)")
    print(f"parallel openssl over sequential: {base / par:.2f}x (the machine's ceiling for hashing)")


if __name__ == "__main__":
    main()
