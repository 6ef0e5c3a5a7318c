#!/usr/bin/env python3
"""Diff benchmark: `bundlescope diff A B` vs `openssl dgst -sha256` over both
payloads one after the other (the least any comparison by hash must do).

    python3 scripts/bench_diff.py [--size-mib 2048] [--runs 3] [--changed 3]
                                  [--bin target/release/bundlescope]

Writes a sample bundle A of about --size-mib MiB (once, into bench-out/),
and B as a copy of A with --changed packed tensors re-coded (a few codes
moved by one level, the manifest hash updated), so the diff hashes both
payloads and decodes only those tensors, as in a real review of a
re-quantisation. Times each tool --runs times, interleaved, from a warm
page cache, and prints the medians and the ratio (target: at most 1.2).
Run it after `cargo build --release` (or pass --bin).
"""
import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def timed(cmd):
    start = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{cmd[0]} failed ({proc.returncode}): {proc.stderr.decode(errors='replace')}")
    return wall


def write_samples(binary, size_mib, changed):
    out = ROOT / "bench-out" / f"diff-{size_mib}"
    a, b = out / "a", out / "b"
    if (b / "manifest.json").exists():
        return a, b
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    subprocess.run([str(binary), "sample", str(a), "--size-mib", str(size_mib)], check=True,
                   stdout=subprocess.DEVNULL)
    shutil.copytree(a, b)
    manifest = json.loads((b / "manifest.json").read_text())
    packed = [t for t in manifest["tensors"] if t["precision"] in ("q3", "q3_full8", "q4")]
    # Re-code the middle of a few packed tensors: flipping the low bit of a
    # code byte moves one code by one level (4-bit) or keeps 3-bit codes on
    # their grid for most bytes; the diff reports whatever changed.
    with open(b / manifest["weights_file"], "r+b") as f:
        for t in packed[len(packed) // 2:][:changed]:
            f.seek(t["offset"] + t["row_bytes"])
            row = bytearray(f.read(t["row_bytes"]))
            for i in range(0, len(row), 7):
                row[i] ^= 0x01
            f.seek(t["offset"] + t["row_bytes"])
            f.write(row)
    h = hashlib.sha256()
    with open(b / manifest["weights_file"], "rb") as f:
        for chunk in iter(lambda: f.read(8 << 20), b""):
            h.update(chunk)
    manifest["weights_sha256"] = h.hexdigest()
    (b / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return a, b


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mib", type=int, default=2048)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--changed", type=int, default=3)
    ap.add_argument("--bin", default=str(ROOT / "target" / "release" / "bundlescope"))
    args = ap.parse_args()
    binary = Path(args.bin)
    a, b = write_samples(binary, args.size_mib, args.changed)
    pa, pb = a / "weights.bin", b / "weights.bin"
    for p in (pa, pb):
        # Warm the page cache so both tools read from memory.
        subprocess.run(["cat", str(p)], stdout=subprocess.DEVNULL, check=True)
    size = pa.stat().st_size + pb.stat().st_size
    times = {"openssl (A then B)": [], "bundlescope diff": []}
    for _ in range(args.runs):
        times["openssl (A then B)"].append(
            timed(["openssl", "dgst", "-sha256", str(pa)]) + timed(["openssl", "dgst", "-sha256", str(pb)]))
        times["bundlescope diff"].append(timed([str(binary), "diff", str(a), str(b)]))
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"payloads: 2 x {size / 2 / 2**20:.0f} MiB, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    for k, v in med.items():
        print(f"{k:<22} median {v:6.2f} s  ({size / v / 2**20:6.0f} MiB/s)  runs {', '.join(f'{x:.2f}' for x in times[k])}")
    print(f"ratio diff / openssl: {med['bundlescope diff'] / med['openssl (A then B)']:.2f}x (target <= 1.2x)")


if __name__ == "__main__":
    main()
