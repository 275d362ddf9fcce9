#!/usr/bin/env python3
"""Writes bench/out/torch.md (the RESULTS.md section) from bench/out/torch.json.

usage: report.py OUT_DIR [load_before load_after [p2p_load_before p2p_load_after]]
Also records the load averages in torch.json / torch_p2p.json ("" keeps the one recorded) and
whether each target was met.
"""
import json
import os
import sys

TARGETS = {"mlp25m": 1.3, "mlp25m_b8": 1.3, "cnn": 1.0}
ALLREDUCE_TARGET = 5.0
OVERHEAD_TARGET = 0.05
# DDP on the "muster" backend (muster.torch.distributed), on the 25 M-parameter model:
DDP_MUSTER_VS_GLOO = 1.3        # at least this many times DDP(gloo)'s speed per step
DDP_MUSTER_OVER_MUSTER = 0.05   # at most this much slower than muster.torch's DistributedOptimizer
P2P_64MB_VS_GLOO = 2.0          # send/recv of 64 MB on one host: at least this many times gloo's speed


def main():
    out = sys.argv[1]
    path = os.path.join(out, "torch.json")
    with open(path) as f:
        r = json.load(f)
    if len(sys.argv) > 3 and sys.argv[2] and sys.argv[3]:
        r["load_average"] = {"before": float(sys.argv[2]), "after": float(sys.argv[3])}
    p2p = None
    p2p_path = os.path.join(out, "torch_p2p.json")
    if os.path.exists(p2p_path):
        with open(p2p_path) as f:
            p2p = json.load(f)
        if len(sys.argv) > 5 and sys.argv[4] and sys.argv[5]:
            p2p["load_average"] = {"before": float(sys.argv[4]), "after": float(sys.argv[5])}
        big = p2p["p2p"].get(str(64 << 20))
        if big:
            p2p["target_64mb_vs_gloo"] = {"speedup": P2P_64MB_VS_GLOO, "met": big["speedup_vs_gloo"] >= P2P_64MB_VS_GLOO}
        with open(p2p_path, "w") as f:
            json.dump(p2p, f, indent=2, sort_keys=True)
    r["targets"] = {
        # "reachable": whether even a zero-cost averaging (the floor) could meet it.
        "models": {k: {"speedup_vs_ddp": v, "met": r["models"][k]["speedup_vs_ddp"] >= v,
                       "reachable": r["models"][k].get("speedup_bound", v) >= v}
                   for k, v in TARGETS.items() if k in r["models"]},
        "allreduce_64mb_vs_gloo": {"speedup": ALLREDUCE_TARGET,
                                   "met": r["allreduce"][str(64 << 20)]["speedup_vs_gloo"] >= ALLREDUCE_TARGET},
        "extension_overhead": {"max": OVERHEAD_TARGET,
                               "met": r["overhead"]["extension_overhead"] < OVERHEAD_TARGET},
    }
    m25 = r["models"].get("mlp25m", {})
    if "ddp_muster_step_s" in m25:
        r["targets"]["ddp_muster_mlp25m"] = {
            "vs_gloo": DDP_MUSTER_VS_GLOO, "vs_gloo_met": m25["ddp_muster_vs_gloo"] >= DDP_MUSTER_VS_GLOO,
            "over_muster_torch": DDP_MUSTER_OVER_MUSTER,
            "over_muster_torch_met": m25["ddp_muster_over_muster"] <= DDP_MUSTER_OVER_MUSTER,
            # Whether even a zero-cost averaging (DDP at the floor) could meet each one.
            "vs_gloo_reachable": m25.get("speedup_bound", DDP_MUSTER_VS_GLOO) >= DDP_MUSTER_VS_GLOO,
            "over_muster_torch_reachable":
                m25.get("local_step_s", 0.0) <= m25["muster_step_s"] * (1.0 + DDP_MUSTER_OVER_MUSTER)}
    thp = None
    thp_path = os.path.join(out, "torch_thp.json")
    if os.path.exists(thp_path):
        with open(thp_path) as f:
            thp = json.load(f)
        t25 = thp["models"].get("mlp25m", {})
        if "ddp_muster_step_s" in t25:
            r["targets"]["ddp_muster_mlp25m_huge_pages"] = {
                "vs_gloo": DDP_MUSTER_VS_GLOO, "vs_gloo_met": t25["ddp_muster_vs_gloo"] >= DDP_MUSTER_VS_GLOO,
                "over_muster_torch": DDP_MUSTER_OVER_MUSTER,
                "over_muster_torch_met": t25["ddp_muster_over_muster"] <= DDP_MUSTER_OVER_MUSTER}
    with open(path, "w") as f:
        json.dump(r, f, indent=2, sort_keys=True)

    def mark(ok):
        return "met" if ok else "**missed**"

    lines = ["## PyTorch: muster.torch and DDP(muster) vs DistributedDataParallel (gloo)\n",
             "`make bench-torch` (bench/torch): %d ranks x %d thread, both stacks in the same job, measurements "
             "alternating rep by rep; times are the slowest rank's, medians." % (r["ranks"], r["threads_per_rank"])]
    if "load_average" in r:
        lines.append("Load average %.1f before, %.1f after (2-core machine)." %
                     (r["load_average"]["before"], r["load_average"]["after"]))
    lines += ["", "| model | params | batch/rank | muster step | DDP step | no-averaging floor | muster img/s "
              "| DDP img/s | speedup | bound (DDP / floor) | target |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, m in r["models"].items():
        t = r["targets"]["models"].get(name)
        lines.append("| %s | %.1f M | %d | %.1f ms | %.1f ms | %s | %.0f | %.0f | %.2fx | %s | %s |" % (
            name, m["parameters"] / 1e6, m["batch_per_rank"], m["muster_step_s"] * 1e3, m["ddp_step_s"] * 1e3,
            "%.1f ms" % (m["local_step_s"] * 1e3) if "local_step_s" in m else "",
            m["muster_images_per_s"], m["ddp_images_per_s"], m["speedup_vs_ddp"],
            "%.2fx" % m["speedup_bound"] if "speedup_bound" in m else "",
            ">= %.1fx %s%s" % (t["speedup_vs_ddp"], mark(t["met"]),
                               "" if t["reachable"] else " (above the bound)") if t else ""))
    lines += ["", "The floor is the same step with no gradient averaging, both ranks computing at once: no "
              "library's step can be shorter, so DDP step / floor bounds any speedup over DDP on this model "
              "and batch."]
    if any("ddp_muster_step_s" in m for m in r["models"].values()):
        lines += ["", "DistributedDataParallel on the `muster` backend (`import muster.torch.distributed`, "
                  "`process_group=` a muster group), same job, same steps:", "",
                  "| model | DDP(gloo) step | DDP(muster) step | muster.torch step | DDP(muster) vs DDP(gloo) "
                  "| DDP(muster) vs muster.torch | DDP(muster), bucket views | bucket views vs muster.torch "
                  "| max parameter difference vs DDP(gloo) |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for name, m in r["models"].items():
            if "ddp_muster_step_s" not in m:
                continue
            view = ("%.1f ms | %+.1f%%" % (m["ddp_muster_view_step_s"] * 1e3, m["ddp_muster_view_over_muster"] * 100)
                    if "ddp_muster_view_step_s" in m else " | ")
            lines.append("| %s | %.1f ms | %.1f ms | %.1f ms | %.2fx | %+.1f%% | %s | %.1e |" % (
                name, m["ddp_step_s"] * 1e3, m["ddp_muster_step_s"] * 1e3, m["muster_step_s"] * 1e3,
                m["ddp_muster_vs_gloo"], m["ddp_muster_over_muster"] * 100, view,
                max(m["ddp_muster_max_param_difference"], m.get("ddp_muster_view_max_param_difference", 0.0))))
        if any("per_rep_median" in m for m in r["models"].values()):
            lines += ["", "*Bucket views*: DDP(muster) with `gradient_as_bucket_view=True`, which skips DDP's "
                      "default copies of every gradient into its bucket and back each step (two passes over all "
                      "gradient bytes that muster.torch, whose gradients live in the runtime's buffers, does not "
                      "make). Rep by rep (the stacks of one rep ran back to back), median of the ratios: "
                      + "; ".join(
                          "%s DDP(muster) %.2fx DDP(gloo), %+.1f%% vs muster.torch, bucket views %+.1f%%" % (
                              name, m["per_rep_median"]["ddp_muster_vs_gloo"],
                              m["per_rep_median"]["ddp_muster_over_muster"] * 100,
                              m["per_rep_median"]["ddp_muster_view_over_muster"] * 100)
                          for name, m in r["models"].items() if "per_rep_median" in m) + "."]
        t = r["targets"].get("ddp_muster_mlp25m")
        if t:
            def bound(key):
                return "" if t.get(key, True) else " (above the bound: not even DDP at the no-averaging floor meets it)"
            lines += ["", "Targets on mlp25m: DDP(muster) >= %.1fx DDP(gloo) per step: %s%s; within %.0f%% of "
                      "muster.torch's step: %s%s." % (
                          DDP_MUSTER_VS_GLOO, mark(t["vs_gloo_met"]), bound("vs_gloo_reachable"),
                          DDP_MUSTER_OVER_MUSTER * 100, mark(t["over_muster_torch_met"]),
                          bound("over_muster_torch_reachable"))]
    if thp is not None:
        lines += huge_pages_section(r, thp, r["targets"].get("ddp_muster_mlp25m_huge_pages"), mark)
    lines += ["", "| allreduce (float32 sum, in place) | hvd.allreduce_ | gloo all_reduce | speedup "
              "| all_reduce on the muster backend | vs gloo |",
              "|---|---|---|---|---|---|"]
    for nbytes, a in sorted(r["allreduce"].items(), key=lambda kv: int(kv[0])):
        pg = ("%.2f GB/s (%.2f ms) | %.1fx" % (a["muster_pg_algbw_gbs"], a["muster_pg_s"] * 1e3,
                                                a["muster_pg_vs_gloo"])) if "muster_pg_s" in a else " | "
        lines.append("| %d MB | %.2f GB/s (%.2f ms) | %.2f GB/s (%.2f ms) | %.1fx | %s |" % (
            int(nbytes) >> 20, a["muster_algbw_gbs"], a["muster_s"] * 1e3, a["gloo_algbw_gbs"], a["gloo_s"] * 1e3,
            a["speedup_vs_gloo"], pg))
    moves = [(int(n) >> 20, a["muster_pg_second_op_s"]) for n, a in sorted(r["allreduce"].items(), key=lambda kv: int(kv[0]))
             if a.get("muster_pg_second_op_s") is not None and a.get("muster_pg_storage_shared")]
    if moves:
        lines += ["", "The muster backend's column reduces the tensor in place through shared memory: on its "
                  "second all_reduce the group moves the tensor's storage into shared memory and the ranks map "
                  "each other's (as it does DDP's buckets), a one-time cost not in the medians: " +
                  ", ".join("%d MB %.0f ms" % (mb, s * 1e3) for mb, s in moves) + "."]
    o = r["overhead"]
    t = r["targets"]
    lines += ["", "Targets: allreduce at 64 MB >= %.0fx gloo: %s. Extension overhead at 64 MB (hvd.allreduce_ "
              "%.2f ms vs the runtime's own Communicator allreduce %.2f ms on the same tensor, medians; the "
              "overhead is the median of the two calls' ratio within each rep, which leaves out the load that "
              "moves both%s): %+.1f%% (target < %.0f%%: %s). The runtime on a numpy array (huge pages): %.2f ms." % (
                  ALLREDUCE_TARGET, mark(t["allreduce_64mb_vs_gloo"]["met"]), o["extension_s"] * 1e3,
                  o["runtime_s"] * 1e3,
                  ("; the ratio of the medians: %+.1f%%" % (o["extension_overhead_of_medians"] * 100)
                   if "extension_overhead_of_medians" in o else ""),
                  o["extension_overhead"] * 100, OVERHEAD_TARGET * 100,
                  mark(t["extension_overhead"]["met"]), o.get("runtime_numpy_s", float("nan")) * 1e3)]
    if p2p is not None:
        lines += p2p_section(p2p, mark)
    with open(os.path.join(out, "torch.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


def p2p_section(p, mark):
    """send/recv between the two ranks (bench/out/torch_p2p.json)."""
    lines = ["", "Point to point (`dist.send` / `dist.recv`, float32 tensors, rank 0 to rank 1 and back; one-way "
             "time = round trip / 2, the slowest rank's, medians; gloo over TCP on localhost, the muster backend "
             "on its shared-memory rings, and from 32 MB on copied once, straight between the two tensors "
             "(`process_vm_readv`/`writev`, each side half: runtime/comm/point_to_point.h)%s):" % (
                 "; load average %.1f before, %.1f after" % (p["load_average"]["before"], p["load_average"]["after"])
                 if "load_average" in p else ""), "",
             "| message | muster backend | gloo | muster vs gloo | same, rep by rep |", "|---|---|---|---|---|"]
    for nbytes, a in sorted(p["p2p"].items(), key=lambda kv: int(kv[0])):
        n = int(nbytes)
        size = "%d KB" % (n >> 10) if n < (1 << 20) else "%d MB" % (n >> 20)
        lines.append("| %s | %.3f ms (%.2f GB/s) | %.3f ms (%.2f GB/s) | %.2fx | %.2fx |" % (
            size, a["muster_s"] * 1e3, a["muster_gbs"], a["gloo_s"] * 1e3, a["gloo_gbs"], a["speedup_vs_gloo"],
            a["speedup_vs_gloo_paired"]))
    t = p.get("target_64mb_vs_gloo")
    if t:
        lines += ["", "Target: send/recv of 64 MB on one host >= %.0fx gloo: %s." % (t["speedup"], mark(t["met"]))]
    return lines


def huge_pages_section(r, thp, t, mark):
    """The models again with torch's memory on transparent huge pages (bench/out/torch_thp.json)."""
    base, huge = r["models"].get("mlp25m", {}), thp["models"].get("mlp25m", {})
    floors = ("%.1fx less time with huge pages (%.0f against %.0f ms)" % (
        base["local_step_s"] / huge["local_step_s"], huge["local_step_s"] * 1e3, base["local_step_s"] * 1e3)
        if "local_step_s" in base and "local_step_s" in huge else "less time with huge pages")
    lines = ["", "**With huge pages.** The same models in a second job with `GLIBC_TUNABLES=glibc.malloc.hugetlb=1` "
             "(glibc's malloc asks for transparent huge pages; the host's THP mode is `%s`, shared memory's `%s`, "
             "and torch 1.13's allocator does not ask), every stack in the same job as before. On this VM a 4 KiB page costs: a "
             "no-averaging step of the 25 M MLP takes %s, so the steps above are mostly the memory system's "
             "(they also swing from run to run with it), and these show the libraries' own differences. "
             "muster.torch keeps its gradients in %s here (`MUSTER_SHARED_GRADIENTS=auto` chooses: "
             "muster/torch/README.md)." % (
                 thp.get("thp", {}).get("enabled") or "?", thp.get("thp", {}).get("shmem_enabled") or "?",
                 floors, "private tensors" if not any(
                 m.get("gradients_direct") for m in thp["models"].values()) else "shared memory"), "",
             "| model | no-averaging floor | DDP(gloo) | DDP(muster) | DDP(muster), bucket views | muster.torch "
             "| DDP(muster) vs DDP(gloo) | DDP(muster) vs muster.torch | muster.torch vs DDP(gloo) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, m in thp["models"].items():
        if "ddp_muster_step_s" not in m:
            continue
        lines.append("| %s | %.1f ms | %.1f ms | %.1f ms | %.1f ms | %.1f ms | %.2fx | %+.1f%% | %.2fx |" % (
            name, m["local_step_s"] * 1e3, m["ddp_step_s"] * 1e3, m["ddp_muster_step_s"] * 1e3,
            m["ddp_muster_view_step_s"] * 1e3, m["muster_step_s"] * 1e3, m["ddp_muster_vs_gloo"],
            m["ddp_muster_over_muster"] * 100, m["speedup_vs_ddp"]))
    if t:
        lines += ["", "Targets on mlp25m with huge pages: DDP(muster) >= %.1fx DDP(gloo) per step: %s; within "
                  "%.0f%% of muster.torch's step: %s." % (DDP_MUSTER_VS_GLOO, mark(t["vs_gloo_met"]),
                                                         DDP_MUSTER_OVER_MUSTER * 100,
                                                         mark(t["over_muster_torch_met"]))]
    return lines


if __name__ == "__main__":
    main()
