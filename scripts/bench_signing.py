#!/usr/bin/env python3
"""Signature benchmark: verifying an OMS-signed bundle (audit + signature +
every digest) vs `openssl dgst -sha256` of its payload, side by side.

    python3 scripts/bench_signing.py [--size-mib 2048] [--runs 3] [--shard-mib 256]
                                     [--format audio8|gguf] [--bin PATH]

Writes a sample bundle of about --size-mib MiB (once, into bench-out/;
audio8 by default, whose manifest gives the payload's SHA-256, so the pass
still hashes it whole; gguf carries no whole-file digest, so with shards
the pass leaves the whole-file hash out and only the shards are hashed),
signs it with the real model-signing tool (.pydeps-oms; see
scripts/install-mlx.sh) twice with a P-256 key, once by files and once by
--shard-mib shards (the signatures kept beside the folder and passed with
--signature), then times each verification --runs times, interleaved with
openssl, and prints medians and ratios. Run it after `cargo build --release`
(or pass --bin).
"""
import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def cpu_children():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed(cmd):
    """(wall s, CPU s of the command: user + system, all its threads)."""
    cpu0 = cpu_children()
    start = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wall = time.perf_counter() - start
    cpu = cpu_children() - cpu0
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.decode(errors='replace')}")
    return wall, cpu


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mib", type=int, default=2048)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--shard-mib", type=int, default=256)
    ap.add_argument("--format", choices=["audio8", "gguf"], default="audio8")
    ap.add_argument("--bin", default=str(ROOT / "target" / "release" / "bundlescope"))
    args = ap.parse_args()
    binary = args.bin
    base = ROOT / "bench-out" / f"signed-{args.format}-{args.size_mib}"
    out = base / "model"
    payload = out / ("model.gguf" if args.format == "gguf" else "weights.bin")
    if not payload.exists():
        shutil.rmtree(base, ignore_errors=True)
        base.mkdir(parents=True)
        extra = ["--format", "gguf"] if args.format == "gguf" else []
        subprocess.run([binary, "sample", str(out), "--size-mib", str(args.size_mib)] + extra, check=True,
                       stdout=subprocess.DEVNULL)
    env = dict(os.environ, PYTHONPATH=str(ROOT / ".pydeps-oms"))
    helper = [sys.executable, str(ROOT / "tests" / "oms" / "oms.py")]
    key, pub = base / "k.pem", base / "pub.pem"
    shard = args.shard_mib << 20
    sigs = {"files": base / "files.sig", f"shards ({args.shard_mib} MiB)": base / "shards.sig"}
    if not all(p.exists() for p in sigs.values()):
        subprocess.run(helper + ["keygen", "p256", str(key), str(pub)], check=True, env=env)
        for (name, sig), extra in zip(sigs.items(), [[], [str(shard)]]):
            t = time.perf_counter()
            subprocess.run(helper + ["sign-key", str(out), str(key)] + extra, check=True, env=env)
            (out / "model.sig").rename(sig)
            print(f"signed ({name}) by model-signing in {time.perf_counter() - t:.1f} s")
    size = payload.stat().st_size
    # Warm the page cache so every tool reads from memory.
    subprocess.run(["cat", str(payload)], stdout=subprocess.DEVNULL, check=True)
    tools = {"openssl dgst -sha256": ["openssl", "dgst", "-sha256", str(payload)],
             "bundlescope audit (unsigned)": [binary, "audit", str(out)]}
    for name, sig in sigs.items():
        tools[f"bundlescope verify, {name}"] = [binary, "audit", str(out), "--signature", str(sig), "--key", str(pub)]
    results = {k: [] for k in tools}
    for _ in range(args.runs):
        for name, cmd in tools.items():
            results[name].append(timed(cmd))
    med = {k: statistics.median(w for w, _ in v) for k, v in results.items()}
    cpu = {k: statistics.median(c for _, c in v) for k, v in results.items()}
    base_t = med["openssl dgst -sha256"]
    load = os.getloadavg()[0]
    print(f"{args.format} payload: {size / 2**20:.0f} MiB, {os.cpu_count()} cores, {args.runs} runs each, medians; "
          f"1-min load average at the end {load:.2f}")
    base_c = cpu["openssl dgst -sha256"]
    # CPU time (user + system) stays put when other work shares the
    # machine; on 2 cores a run can take no less than CPU / 2 of wall time.
    print(f"{'tool':<40} {'wall s':>8} {'GB/s':>7} {'× openssl':>10} {'CPU s':>7} {'CPU × openssl':>14}")
    for name, wall in med.items():
        print(f"{name:<40} {wall:>8.2f} {size / wall / 1e9:>7.2f} {wall / base_t:>10.2f}"
              f" {cpu[name]:>7.2f} {cpu[name] / base_c:>14.2f}")
    print("targets: files <= 1.15x openssl; shards <= 0.65x openssl (on 2 cores)")


if __name__ == "__main__":
    main()
