"""Writes bench/out/elastic.md (the RESULTS.md section) from bench/out/elastic.json."""
import json
import os
import sys


def main():
    out = sys.argv[1]
    with open(os.path.join(out, "elastic.json")) as f:
        r = json.load(f)
    m, t = r["muster"], r["torchrun"]
    lines = [
        "## Elastic recovery (bench/elastic)\n",
        "A rank SIGKILLed mid-training: muster's elastic cluster (`hvd.elastic.run`, in-memory commits, the world",
        "re-formed through musterd) against torchrun `--max-restarts 1` (DDP over gloo, a checkpoint file), the",
        "same model in the same run: %s; a commit (checkpoint) every %d steps, rank 1 killed before step %d."
        % (r["model"], r["commit_every"], r["kill_step"]),
        "Load average %.1f before, %.1f after (a shared machine: `uptime`).\n" % tuple(r["load"]),
        "| | muster elastic | torchrun --max-restarts |",
        "|---|---|---|",
        "| recovery: SIGKILL to the first step of the new world | %.2f s%s | %.2f s |"
        % (m["recovery_seconds"], " (median of %s)" % ", ".join("%.2f" % x for x in m["recovery_runs"])
           if m.get("recovery_runs") else "", t["recovery_seconds"]),
        "| of which: SIGKILL to the world formed again | %s | |"
        % ("%.2f s" % m["reformed_seconds"] if m.get("reformed_seconds") is not None else "n/a"),
        "| steps redone | %d | %d |" % (m["steps_redone"], t["steps_redone"]),
        "| median step | %.0f ms | %.0f ms |" % (1000 * m["step_seconds"], 1000 * t["step_seconds"]),
        "",
        "Recovery is **%.1fx** faster than torchrun's restart (target: under 1 s and at least 4x: %s)."
        % (r["speedup"], "met" if m["recovery_seconds"] < 1.0 and r["speedup"] >= 4 else "NOT met"),
        "A survivor learns of the death at the first gradient of its next step (the DistributedOptimizer checks "
        "its peers there, before the backward pass) or, when the death comes mid-step, at the collective in "
        "flight; the recovery ends with a whole step of the new world, so the figure holds at least one step's "
        "compute whatever the rendezvous does.",
    ]
    joined = m.get("joined_median")
    if joined is not None:
        c = r.get("muster_commit_only") or {}
        lines.append("The replacement rank joined the world **%.2f s** after the SIGKILL (median of %s; target: within "
                     "5 s on the local backend: %s), with the script calling `state.check_host_updates()` after "
                     "every step that does not commit, as Horovod's elastic examples do (`--batches-per-host-check`): "
                     "that call is one 16-byte broadcast of what rank 0 heard from musterd, %.2f ms (median), "
                     "%.2f%% of a step."
                     % (joined, ", ".join("%.2f" % x for x in m["joined_runs"]),
                        "met" if joined <= 5 else "NOT met", 1000 * m["check_seconds"],
                        100 * m["check_cost_per_step"]))
        grown = [g for g in m["generations"][1:] if g["size"] == m["generations"][0]["size"]]
        if grown and grown[0].get("resume_seconds") is not None:
            lines.append("The world with the replacement completed its first step %.2f s after it formed: the "
                         "newcomer builds the model and its optimizer, receives the state from rank 0, and all "
                         "ranks run that step (not a target; the time a replacement costs the survivors)." % grown[0]["resume_seconds"])
        if c.get("replacement_joined_seconds") is not None:
            lines.append("A script that only commits admits a newcomer at its next commit(), after redoing the steps "
                         "since the last one: the same run with commits only (every %d steps) joined it %.2f s after "
                         "the SIGKILL." % (r["commit_every"], c["replacement_joined_seconds"]))
        lines.append("Either way nothing is rolled back at a join: the state is committed where the change was "
                     "found and handed to the newcomer from there.")
    lines.append("commit() every %d steps costs %.1f%% of a step: its copy of the model and optimizer state into "
                 "host memory takes %.0f ms (median; target: under 5%%: %s). The whole commit() took %.0f ms (median), "
                 "as it ends in a broadcast of rank 0's membership flag, where a rank waits for the slower one "
                 "instead of in the next allreduce."
                 % (r["commit_every"], 100 * m["commit_cost_per_step"], 1000 * m["save_seconds"],
                    "met" if m["commit_cost_per_step"] < 0.05 else "NOT met",
                    1000 * m["commit_seconds"]))
    lines.append("")
    lines.append("Generations of the muster run: " + "; ".join(
        "%d (%s, %d ranks%s)" % (g["generation"], g["cause"], g["size"],
                                 ", recovered in %.2f s" % g["recovery_seconds"] if g["recovery_seconds"] else "")
        for g in m["generations"]) + ".")
    with open(os.path.join(out, "elastic.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
