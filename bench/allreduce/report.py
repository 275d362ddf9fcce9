#!/usr/bin/env python3
"""Merges the allreduce benchmarks' figures into bench/out/allreduce.json and
writes bench/out/allreduce.md.

  report.py OUT_DIR
reads OUT_DIR/allreduce_bandwidth.json (2 ranks) and allreduce_bandwidth_np4.json
(bandwidth_bench.cc), allreduce_latency_np{2,4}.json (latency_bench.cc), and if
present allreduce_scalar.json (scalar_bench.py, key "scalar") and
allreduce_fused_launch<i>.json (fused_bench.cc, one per launch; key "fused": the
median launch by speedup, with every launch's figures under "launches").

sizes[].ratio_vs_mpi is muster's allreduce as it runs by default on the
caller's memory (whichever path it takes) against MPI_Allreduce at that size.
"""
import json
import os
import sys

TARGET_RING_RATIO = 1.5      # ring algbw at 64 MB vs MPI_Allreduce, same run
TARGET_VS_MPI = 1.0          # muster vs MPI_Allreduce at every size, 2 and 4 ranks
TARGET_FUSED_RATIO = 1.15    # DistributedOptimizer step vs one single-buffer allreduce
TARGET_FUSED_SPEEDUP = 2.0   # vs one MPI_Allreduce per tensor
TARGET_CALLER_OWNED_RATIO = 1.2  # caller-owned gradients step vs optimizer-owned


def human(n):
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:g} {unit}"
        n /= 1024
    return str(n)


def load(out_dir, name):
    path = os.path.join(out_dir, name)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def fused_median_launch(out_dir, prefix="allreduce_fused_launch"):
    """The fused bench's launches (<prefix><i>.json): the median one by speedup, with every launch's
    figures under "launches". An older single allreduce_fused.json is taken as it is."""
    numbered = []
    for name in os.listdir(out_dir):
        stem = name[len(prefix):-len(".json")] if name.startswith(prefix) and name.endswith(".json") else ""
        if stem.isdigit():
            numbered.append((int(stem), name))
    runs = [run for run in (load(out_dir, name) for _, name in sorted(numbered)) if run]
    if not runs:
        return load(out_dir, "allreduce_fused.json") if prefix == "allreduce_fused_launch" else None
    order = sorted(runs, key=lambda r: r["speedup_vs_per_tensor"])
    median = dict(order[(len(order) - 1) // 2])
    median["launches"] = [
        {k: r.get(k) for k in ("step_s", "step_copy_s", "single_buffer_private_s", "per_tensor_s", "memory_pass_s",
                               "speedup_vs_per_tensor")} for r in runs]
    return median


BW_KEYS = ("size_bytes", "muster_algbw_gbs", "ring_algbw_gbs", "mpi_algbw_gbs", "ratio_vs_mpi", "ring_ratio_vs_mpi",
           "direct_algbw_gbs")


def main(out_dir):
    bw = load(out_dir, "allreduce_bandwidth.json")
    bw4 = load(out_dir, "allreduce_bandwidth_np4.json")
    result = {
        "sizes": [{k: row[k] for k in BW_KEYS if k in row} for row in bw["sizes"]],
        "memcpy_gbs": bw["memcpy_gbs"],
        "ranks": bw.get("ranks", 2),
    }
    if bw4:
        result["sizes_np4"] = [{k: row[k] for k in BW_KEYS if k in row} for row in bw4["sizes"]]
    result["latency"] = {}
    for np_ in (2, 4):
        lat = load(out_dir, f"allreduce_latency_np{np_}.json")
        if lat:
            result["latency"][str(np_)] = lat["rows"]
    load_path = os.path.join(out_dir, "allreduce_load.txt")
    if os.path.exists(load_path):
        with open(load_path) as f:
            loads = [float(x) for x in f.read().split()]
        result["load_average"] = {"before": loads[0], "after": loads[-1], "cores": os.cpu_count()}
    scalar = load(out_dir, "allreduce_scalar.json")
    if scalar:
        result["scalar"] = scalar
    fused = fused_median_launch(out_dir)
    if fused:
        result["fused"] = fused
    check = load(out_dir, "allreduce_check_cost.json")
    if check:
        result["check_cost"] = check
    # The same two benchmarks on a lent machine (scripts/device_run.sh), kept
    # apart: another machine's cores and memory.
    device = fused_median_launch(out_dir, "allreduce_fused_device_launch")
    if device:
        result["device"] = {"fused": device, "latency_np2": (load(out_dir, "allreduce_latency_device_np2.json") or {})
                            .get("rows", [])}
        load_path = os.path.join(out_dir, "allreduce_device_load.txt")
        if os.path.exists(load_path):
            with open(load_path) as f:
                fields = f.read().split()  # the load average before, then the machine's cores
            result["device"]["load_before"] = float(fields[0])
            result["device"]["cores"] = int(fields[1]) if len(fields) > 1 else None

    # Every size, both world sizes: the worst same-run ratio against MPI.
    ratios = []
    for np_, rows in result["latency"].items():
        ratios += [(r["ratio_vs_mpi"], int(np_), r["size_bytes"]) for r in rows]
    for np_, rows in ((2, result["sizes"]), (4, result.get("sizes_np4", []))):
        ratios += [(r["ratio_vs_mpi"], np_, r["size_bytes"]) for r in rows if r.get("mpi_algbw_gbs")]
    if ratios:
        worst = min(ratios)
        result["worst_ratio_vs_mpi"] = {"ratio": worst[0], "ranks": worst[1], "size_bytes": worst[2]}
    with open(os.path.join(out_dir, "allreduce.json"), "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")

    lines = ["## Allreduce (bench/allreduce)", ""]
    lines.append(
        "Ranks on this host in one `mpirun`, float32 sum. \"muster\" is `Communicator::allreduce` as it runs by "
        "default on the caller's own memory (`Algorithm::kAuto`: on one host, the shared-memory small path, in "
        "256 KB pieces past its slot; the ring only where 3 or more ranks have a CPU each, which this host has "
        "not); "
        "\"ring\" forces the ring; \"direct\" is the default on a buffer in "
        "`Communicator::allocate_shared` memory (where the DistributedOptimizer keeps the gradients it owns); "
        "MPI_Allreduce is Open MPI's (vader + tcp). All interleaved rep by rep in the same run; medians over reps.")
    if "load_average" in result:
        la = result["load_average"]
        lines.append("")
        lines.append(
            f"The host was shared while this ran: 1-minute load average {la['before']:.1f} before and "
            f"{la['after']:.1f} after, on {la['cores']} cores (4 ranks oversubscribe them). Load slows every "
            "column, the latency-bound ones most, so compare the ratios measured side by side rather than "
            "absolute figures.")
    for np_ in ("2", "4"):
        rows = result["latency"].get(np_)
        if not rows:
            continue
        lines += ["", f"### Latency, {np_} ranks (per-op microseconds, synchronous calls)", "",
                  "| size | muster µs | ring µs | MPI_Allreduce µs | muster vs MPI | ring vs MPI |",
                  "|---:|---:|---:|---:|---:|---:|"]
        for r in rows:
            lines.append(f"| {human(r['size_bytes'])} | {r['muster_us']:.2f} | {r['ring_us']:.2f} | {r['mpi_us']:.2f} "
                         f"| {r['ratio_vs_mpi']:.2f}x | {r['ring_ratio_vs_mpi']:.2f}x |")
    for title, rows in (("2 ranks", result["sizes"]), ("4 ranks", result.get("sizes_np4"))):
        if not rows:
            continue
        lines += ["", f"### Bandwidth, {title} (algbw GB/s)", "",
                  "| size | muster | ring | direct | MPI_Allreduce | muster vs MPI | direct vs MPI |",
                  "|---:|---:|---:|---:|---:|---:|---:|"]
        for row in rows:
            m = row["mpi_algbw_gbs"]
            d = row.get("direct_algbw_gbs", 0.0)
            lines.append(f"| {human(row['size_bytes'])} | {row.get('muster_algbw_gbs', 0):.3f} | "
                         f"{row['ring_algbw_gbs']:.3f} | {d:.3f} | {m:.3f} | {row['ratio_vs_mpi']:.2f}x | "
                         f"{d / m if m else 0:.2f}x |")
    lines.append("")
    lines.append(f"memcpy reference (64 MB, both ranks copying at once): **{result['memcpy_gbs']:.2f} GB/s**.")
    lines.append("")
    if "worst_ratio_vs_mpi" in result:
        w = result["worst_ratio_vs_mpi"]
        ok = w["ratio"] >= TARGET_VS_MPI
        lines.append(
            f"Target: muster's allreduce at least {TARGET_VS_MPI:.1f}x MPI_Allreduce at every size, 2 and 4 ranks. "
            f"Worst measured: **{w['ratio']:.2f}x** at {human(w['size_bytes'])}, {w['ranks']} ranks: "
            f"{'met' if ok else 'NOT met'}.")
        lines.append("")
    at64 = next((r for r in result["sizes"] if r["size_bytes"] == 64 << 20), None)
    if at64 and at64.get("ring_ratio_vs_mpi"):
        ok = at64["ring_ratio_vs_mpi"] >= TARGET_RING_RATIO
        lines.append(
            f"Target: ring at 64 MB >= {TARGET_RING_RATIO}x MPI_Allreduce. Measured "
            f"**{at64['ring_ratio_vs_mpi']:.2f}x** ({at64['ring_algbw_gbs']:.3f} vs {at64['mpi_algbw_gbs']:.3f} GB/s): "
            f"{'met' if ok else 'NOT met'}.")
        lines.append("")
    if scalar:
        us = scalar["us"]
        lines += [f"### A scalar from Python ({scalar['ranks']} ranks, per-call microseconds)", "",
                  "| `hvd.allreduce(t)` | `hvd.allreduce(t, op=Sum)` | gloo `dist.all_reduce(t)` | the runtime call |",
                  "|---:|---:|---:|---:|",
                  f"| {us['hvd']:.1f} | {us['hvd_sum']:.1f} | {us['gloo']:.1f} | {us['runtime']:.1f} |", "",
                  f"`hvd.allreduce` of a 0-d float32 tensor against torch.distributed on gloo: "
                  f"**{scalar['hvd_vs_gloo']:.1f}x** faster; the Python layers over the runtime's own call "
                  f"(`Communicator.allreduce_async(...).wait()` on the same memory) add "
                  f"{scalar['hvd_over_runtime_us']:.1f} µs.", ""]
    if fused:
        lines.append(
            f"### DistributedOptimizer, ResNet-50 gradient set ({fused.get('tensors', '?')} tensors, "
            f"{fused.get('parameters', 0) / 1e6:.1f} M float32)"
        )
        lines.append("")
        lines.append("| step (fusion buckets, background thread) | one allreduce of all bytes, shared buffer | "
                     "the same, private buffer | one MPI_Allreduce per tensor |")
        lines.append("|---:|---:|---:|---:|")
        lines.append(f"| {fused['step_s'] * 1e3:.1f} ms | {fused['single_buffer_s'] * 1e3:.1f} ms | "
                     f"{fused.get('single_buffer_private_s', 0) * 1e3:.1f} ms | {fused['per_tensor_s'] * 1e3:.1f} ms |")
        lines.append("")
        lines.append(
            "The optimizer owns the gradients here (add_parameter with a null gradient), so they sit back to "
            "back in shared memory (direct: " + ("yes" if fused.get("gradients_direct") else "no") + ") and each "
            "bucket is reduced in place by the direct allreduce; the single-buffer reference is the same op on "
            "one shared buffer. With the gradients in the caller's own separate buffers (Horovod's usual case "
            "in C++; muster.torch gives the runtime the gradients' memory by default) "
            "each of 64 KB or more (the default on one host at 2 ranks) is reduced in place, one op each (the "
            "small path's rounds: flat up to 64 KB, 256 KB pieces above), and the smaller ones packed "
            f"into fusion buffers: {fused.get('step_copy_s', 0) * 1e3:.1f} ms. The peers cannot reach a "
            "process's private memory, so every byte goes through shared slots, in and out: the "
            "single private buffer (third column) is what that path costs with no per-tensor overhead."
        )
        lines.append("")
        launches = fused.get("launches", [])
        if len(launches) > 1:
            lines.append(
                f"The bench ran in {len(launches)} separate launches. On this VM the same binary's figures move "
                "together from launch to launch: where the optimizer-owned step is fastest, per-tensor MPI and the "
                "private buffer are slowest, so the two ratios below swing in opposite directions between "
                "launches. The figures in this section are the median launch by speedup over per-tensor MPI. "
                "Every launch, in order:")
            lines.append("")
            lines.append("| launch | step | caller-owned step | one MPI_Allreduce per tensor | memory pass | "
                         "speedup vs per-tensor | caller-owned / owned |")
            lines.append("|---:|---:|---:|---:|---:|---:|---:|")
            for i, run in enumerate(launches, 1):
                lines.append(
                    f"| {i} | {run['step_s'] * 1e3:.1f} ms | {run['step_copy_s'] * 1e3:.1f} ms | "
                    f"{run['per_tensor_s'] * 1e3:.1f} ms | {run['memory_pass_s'] * 1e3:.1f} ms | "
                    f"{run['speedup_vs_per_tensor']:.2f}x | {run['step_copy_s'] / run['step_s']:.2f}x |")
            lines.append("")
        r, s = fused["ratio_vs_single_buffer"], fused["speedup_vs_per_tensor"]
        lines.append(
            f"Targets: step within {TARGET_FUSED_RATIO}x of the single buffer (measured **{r:.2f}x**: "
            f"{'met' if r <= TARGET_FUSED_RATIO else 'NOT met'}) and at least {TARGET_FUSED_SPEEDUP}x faster than "
            f"per-tensor (measured **{s:.2f}x**: {'met' if s >= TARGET_FUSED_SPEEDUP else 'NOT met'})."
        )
        if fused.get("step_copy_s"):
            c = fused["step_copy_s"] / fused["step_s"]
            lines.append("")
            lines.append(
                f"Target: the caller-owned step within {TARGET_CALLER_OWNED_RATIO}x of the optimizer-owned one "
                f"(measured **{c:.2f}x**: {'met' if c <= TARGET_CALLER_OWNED_RATIO else 'NOT met'}; the private "
                f"single buffer alone is {fused.get('single_buffer_private_s', 0) / fused['step_s']:.2f}x)."
            )
        if fused.get("memory_pass_s"):
            p = fused["memory_pass_s"]
            lines.append("")
            lines.append(
                f"Memory reference, same run: every rank scaling its own {fused.get('bytes', 0) / 1e6:.0f} MB in "
                f"place (a plain loop reading and writing each byte once, all ranks at once) takes {p * 1e3:.1f} "
                f"ms. Against it: the optimizer-owned step {fused['step_s'] / p:.2f}x, the caller-owned step "
                f"{fused['step_copy_s'] / p:.2f}x, the private single buffer "
                f"{fused.get('single_buffer_private_s', 0) / p:.2f}x, one MPI_Allreduce per tensor "
                f"{fused['per_tensor_s'] / p:.2f}x. It is a reference, not a floor: the direct allreduce, which "
                "also reads and writes each byte once, has measured below it since it stopped dividing by the "
                "rank count (runtime/comm/README.md, \"What the memory allows\").")
        lines.append("")
    check = result.get("check_cost")
    if check:
        lines.append("### What the op-descriptor check costs (check_cost_bench.cc)")
        lines.append("")
        lines.append(
            f"{check['ranks']} ranks, ring links {check.get('transport', '?')}, float32 sum, median microseconds "
            "per op: the ring alone, the descriptor exchange then the ring, and the default path (at 4 KB and "
            "64 KB on one host the small path, whose descriptors ride in its one round), interleaved rep by rep.")
        lines.append("")
        lines.append("| size | ring, unchecked | ring, checked | cost | default (checked) |")
        lines.append("|---|---|---|---|---|")
        for row in check["sizes"]:
            lines.append(f"| {human(row['size_bytes'])} | {row['ring_unchecked_us']:.1f} | "
                         f"{row['ring_checked_us']:.1f} | {row['check_cost'] * 100:+.1f}% | "
                         f"{row['auto_checked_us']:.1f} |")
        lines.append("")
    device = result.get("device")
    if device:
        d = device["fused"]
        lines += ["### The same on a lent GPU machine's CPUs (scripts/device_run.sh)", "",
                  f"{device.get('cores') or '?'} cores (1-minute load average {device.get('load_before', '?')} "
                  "before), 2 ranks, one `mpirun` each launch, the same binaries and transports "
                  "(run there by hand, not by `make bench`; its figures stay until the next such run). "
                  "DistributedOptimizer on the ResNet-50 gradient set, per launch:", "",
                  "| launch | optimizer-owned step | caller-owned step | one MPI_Allreduce per tensor | "
                  "speedup (target 2x) | caller-owned / owned (target 1.2x) |",
                  "|---:|---:|---:|---:|---:|---:|"]
        for i, r in enumerate(d.get("launches", []), 1):
            lines.append(f"| {i} | {r['step_s'] * 1e3:.1f} ms | {r['step_copy_s'] * 1e3:.1f} ms | "
                         f"{r['per_tensor_s'] * 1e3:.1f} ms | {r['speedup_vs_per_tensor']:.2f}x | "
                         f"{r['step_copy_s'] / r['step_s']:.2f}x |")
        rows = device.get("latency_np2")
        if rows:
            worst = min(rows, key=lambda r: r["ratio_vs_mpi"])
            lines += ["", "Latency there, 2 ranks, muster vs MPI_Allreduce from 8 B to 256 KB: " +
                      ", ".join(f"{human(r['size_bytes'])} {r['muster_us']:.2f} vs {r['mpi_us']:.2f} µs"
                                for r in rows[::2]) +
                      f"; worst **{worst['ratio_vs_mpi']:.2f}x** at {human(worst['size_bytes'])}."]
        lines.append("")
    with open(os.path.join(out_dir, "allreduce.md"), "w") as f:
        f.write("\n".join(lines))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "out"))
