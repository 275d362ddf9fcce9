#!/usr/bin/env python3
"""Rewrites bench/RESULTS.md from the figures the benchmarks left in bench/out/.

Each benchmark's run.sh writes bench/out/<name>.json (its figures) and
bench/out/<name>.md (a section of prose and tables made from them). This
script only stitches the sections together, in a fixed order, under a header
saying when and where they were measured.
"""
import datetime
import os
import platform
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "out")
ORDER = ["launch", "api", "logs", "allreduce", "ps", "train", "torch", "multihost", "shaped", "elastic", "kubernetes", "fleet"]


def machine():
    cpus = os.cpu_count()
    try:
        mem = subprocess.run(["free", "-g"], capture_output=True, text=True).stdout.split("\n")[1].split()[1]
    except Exception:  # noqa: BLE001 - informational only
        mem = "?"
    return f"{platform.node()}: {cpus} cores, {mem} GiB, {platform.platform()}"


def main():
    parts = [
        "# Benchmark results\n",
        "Written by `make bench` (bench/report.py) from bench/out/*.json; do not edit by hand.",
        f"Last run {datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC on {machine()}.",
        "Every figure is a median, measured against its reference in the same run. Each section comes from",
        "its benchmark's last run (`make bench-<name>` rewrites one section); the section says what the load was.\n",
    ]
    names = sorted(f[:-3] for f in os.listdir(OUT) if f.endswith(".md")) if os.path.isdir(OUT) else []
    names = [n for n in ORDER if n in names] + [n for n in names if n not in ORDER]
    if not names:
        parts.append("No benchmark has been run yet: `make bench`.")
    for n in names:
        with open(os.path.join(OUT, n + ".md")) as f:
            parts.append(f.read().rstrip() + "\n")
    with open(os.path.join(HERE, "RESULTS.md"), "w") as f:
        f.write("\n".join(parts) + "\n")
    print("wrote bench/RESULTS.md from", ", ".join(names) or "nothing")


if __name__ == "__main__":
    main()
