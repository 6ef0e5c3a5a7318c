#!/usr/bin/env python3
"""MLX-LM benchmark: `bundlescope audit` vs one `openssl dgst -sha256` per core,
and the time to open a 20,000-tensor checkpoint's index.

    python3 scripts/bench_mlxlm.py [--size-mib 2048] [--runs 3] [--tensors 20000] [--bin PATH]

Writes (once, into bench-out/) an MLX-LM checkpoint of about --size-mib MiB
with `bundlescope sample --format mlx-lm --size-mib`, in one shard per core
(at least 2), warms the page cache, then times, --runs times and
interleaved: one openssl process per core with the shards split between
them (what the machine can hash), and `bundlescope audit` (every check,
every shard hashed, every code histogram). Prints medians and the ratio
(target <= 1.15).

Then writes a small-layered checkpoint of about --tensors tensors and times
`bundlescope list DIR --json` (process start, config, index and every
shard header parsed, modules resolved, the index printed), the work the app
does before it shows the table (target < 100 ms).

Uses target/release/bundlescope (else target/ci/bundlescope) unless --bin.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def binary(given):
    if given:
        return Path(given)
    for p in ["release", "ci"]:
        b = ROOT / "target" / p / "bundlescope"
        if b.exists():
            return b
    sys.exit("build first: cargo build --release")


def timed(cmd, stdout=subprocess.DEVNULL):
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=stdout, stderr=subprocess.PIPE)
    out = proc.stdout.read() if stdout == subprocess.PIPE else b""
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    err = proc.stderr.read().decode(errors="replace")
    return wall, usage.ru_maxrss * 1024, os.waitstatus_to_exitcode(status), err, out


def sample(bin_, out, args):
    if not (out / "config.json").exists():
        subprocess.run(["rm", "-rf", str(out)], check=True)
        t = time.perf_counter()
        subprocess.run([str(bin_), "sample", str(out), "--format", "mlx-lm", *args], check=True)
        print(f"sample {out.name} written in {time.perf_counter() - t:.1f} s")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mib", type=int, default=2048)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--tensors", type=int, default=20000)
    ap.add_argument("--bin")
    args = ap.parse_args()
    bin_ = binary(args.bin)
    cores = os.cpu_count() or 2
    shards_n = max(2, cores)

    out = ROOT / "bench-out" / f"mlxlm-{args.size_mib}-{shards_n}"
    sample(bin_, out, ["--size-mib", str(args.size_mib), "--shards", str(shards_n)])
    shards = sorted(out.glob("*.safetensors"))
    size = sum(s.stat().st_size for s in shards)
    for s in shards:
        subprocess.run(["cat", str(s)], stdout=subprocess.DEVNULL, check=True)
    k = min(cores, len(shards))
    tools = {
        f"openssl dgst -sha256, {k} in parallel": [
            "sh", "-c",
            " & ".join(
                "openssl dgst -sha256 " + " ".join(f"'{s}'" for s in shards[j::k]) + " >/dev/null"
                for j in range(k)
            ) + "; wait",
        ],
        "bundlescope audit": [str(bin_), "audit", str(out)],
    }
    results = {n: [] for n in tools}
    for _ in range(args.runs):
        for name, cmd in tools.items():
            wall, rss, code, err, _ = timed(cmd)
            if code != 0:
                sys.exit(f"{name} failed ({code}): {err}")
            results[name].append((wall, rss))
    print(f"{len(shards)} shards, {size / 2**30:.2f} GiB, {cores} cores, {args.runs} runs each, medians")
    print(f"{'tool':<36} {'wall s':>8} {'GB/s':>7} {'peak RSS MiB':>13}")
    for name, runs in results.items():
        wall = statistics.median(w for w, _ in runs)
        rss = max(r for _, r in runs)
        print(f"{name:<36} {wall:>8.2f} {size / wall / 1e9:>7.2f} {rss / 2**20:>13.0f}")
    base = statistics.median(w for w, _ in results[f"openssl dgst -sha256, {k} in parallel"])
    ours = statistics.median(w for w, _ in results["bundlescope audit"])
    print(f"bundlescope audit / parallel openssl: {ours / base:.2f} (target <= 1.15)")

    # About 24 tensors a layer (norms, router, 7 modules of 3 tensors).
    layers = max(1, args.tensors // 24)
    many = ROOT / "bench-out" / f"mlxlm-{layers}-layers"
    sample(bin_, many, ["--layers", str(layers), "--experts", "2"])
    walls = []
    count = 0
    for _ in range(max(5, args.runs)):
        wall, _, code, err, stdout = timed([str(bin_), "list", str(many), "--json"], subprocess.PIPE)
        if code != 0:
            sys.exit(f"list failed ({code}): {err}")
        count = len(json.loads(stdout)["tensors"])
        walls.append(wall)
    print(f"open + list of {count} tensors: median {statistics.median(walls) * 1e3:.0f} ms, "
          f"best {min(walls) * 1e3:.0f} ms (target < 100 ms)")


if __name__ == "__main__":
    main()
