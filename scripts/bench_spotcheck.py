#!/usr/bin/env python3
"""Spot-check benchmark: every tensor of a >= 2 GiB sample through MLX.

    python3 scripts/bench_spotcheck.py [--size-mib 2048] [--max-rows 4096]

Writes an audio8 sample of about --size-mib MiB (once, into bench-out/,
shared with bench_audit.py), then runs `bundlescope spotcheck --all --json`
on MLX's default device (the CPU here) twice: bounded (--max-rows rows per
tensor, what `--all` and the GUI's "Spot-check all" do) and on every row
(--max-rows 0). Prints the total wall time and, summed over the tensors,
MLX's GFLOP/s against bundlescope's f64 reference product.
Run it after `cargo build --release`.
"""
import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = ROOT / "target" / "release" / "bundlescope"


def run(out, max_rows):
    start = time.perf_counter()
    proc = subprocess.run(
        [str(BIN), "spotcheck", str(out), "--all", "--json", "--max-rows", str(max_rows)],
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - start
    if proc.returncode not in (0, 1):
        sys.exit(f"spotcheck failed ({proc.returncode}): {proc.stderr}")
    return wall, json.loads(proc.stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mib", type=int, default=2048)
    ap.add_argument("--max-rows", type=int, default=4096)
    args = ap.parse_args()
    out = ROOT / "bench-out" / f"audio8-{args.size_mib}"
    if not (out / "manifest.json").exists():
        subprocess.run(["rm", "-rf", str(out)], check=True)
        subprocess.run([str(BIN), "sample", str(out), "--size-mib", str(args.size_mib)], check=True)
    payload = (out / "weights.bin").stat().st_size
    subprocess.run(["cat", str(out / "weights.bin")], stdout=subprocess.DEVNULL, check=True)
    print(f"payload {payload / 2**30:.2f} GiB")
    print(f"{'rows per tensor':<16} {'checks':>6} {'failed':>6} {'wall s':>7} {'MLX s':>7} {'ref s':>7} "
          f"{'MLX GFLOP/s':>11} {'ref GFLOP/s':>11} {'MLX/ref':>7}")
    for max_rows in (args.max_rows, 0):
        wall, report = run(out, max_rows)
        mm = [r for r in report["results"] if r["kind"] == "matmul"]
        flops = sum(2 * r["batch"] * r["rows_checked"] * r["shape"][1] for r in mm)
        t_mlx = sum(r["time_s"] for r in mm)
        t_ref = sum(r["ref_time_s"] for r in mm)
        label = "every row" if max_rows == 0 else f"<= {max_rows}"
        g_mlx, g_ref = flops / t_mlx / 1e9, flops / t_ref / 1e9
        print(f"{label:<16} {len(report['results']):>6} {report['failed']:>6} {wall:>7.2f} {t_mlx:>7.2f} "
              f"{t_ref:>7.2f} {g_mlx:>11.2f} {g_ref:>11.2f} {g_mlx / g_ref:>7.2f}")
        print(f"  device {report['device']}, MLX {report['mlx_version']}, batch {mm[0]['batch']}, x {mm[0]['dtype']}")


if __name__ == "__main__":
    main()
