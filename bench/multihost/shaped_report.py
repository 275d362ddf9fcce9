"""bench/out/shaped.md from shaped.py's figures: the tables, then each target with its reference."""


def _mb(b):
    b = int(b)
    return f"{b} B" if b < 1024 else (f"{b >> 10} KB" if b < (1 << 20) else f"{b >> 20} MB")


def _link(c):
    return f"{c['rate_gbit']:g} Gbit/s" if c["rate_gbit"] else "unshaped"


def targets(r):
    """[(what, figure, reference, pass)] for the issue's two targets."""
    frac, hops = r["targets"]["fraction_of_rate"], r["targets"]["small_vs_ring_floor"]
    unshaped = {c["hosts"]: c for c in r["configs"] if not c["rate_gbit"]}
    out = []
    for c in r["configs"]:
        if not c["rate_gbit"]:
            continue
        where = f"{c['hosts']} hosts, {_link(c)}, +{c['rtt_us_added']} us RTT"
        for b, x in c["sizes"].items():
            if int(b) < (16 << 20):
                continue
            best_peer = max(x["mpi_fraction"], x["gloo_fraction"])
            ok = x["muster_fraction"] >= frac and x["muster_fraction"] > best_peer
            ref = (f"MPI {x['mpi_fraction']:.3f}x, gloo {x['gloo_fraction']:.3f}x, iperf3 one stream "
                   f"{c['iperf3_fraction']:.3f}x")
            if "iperf3_ring_fraction" in c:
                ref += f", {c['hosts']} at once {c['iperf3_ring_fraction']:.3f}x"
            # The machine's own ceiling: muster on the same hosts, unshaped, same run.
            free = unshaped.get(c["hosts"], {}).get("sizes", {}).get(b)
            if free:
                x_free = free["muster_busbw_gbs"] / c["reference_gbs"]
                ref += f"; unshaped, muster reached {x_free:.2f}x this rate" + (
                    " (CPU-bound)" if x_free < 1.1 else " (little headroom)" if x_free < 1.5 else "")
            out.append((f"{where}, {_mb(b)}: muster bus bandwidth >= {frac}x the rate and ahead of MPI and gloo",
                        f"{x['muster_fraction']:.3f}x", ref, ok))
        if c["rtt_us_added"]:
            s = c["sizes"][min(c["sizes"], key=int)]
            ratio = c["small_vs_floor"]["muster"]
            out.append((f"{where}: 8 B allreduce within {hops}x the ring's floor of 2 (p-1) hops",
                        f"{s['muster_us']:.0f} us = {ratio}x",
                        f"floor {c['ring_floor_us']:.0f} us ({2 * (c['hosts'] - 1)} x {c['one_way_hop_us']} us "
                        f"one-way, hop_ping); MPI {s['mpi_us']:.0f} us, gloo {s['gloo_us']:.0f} us" +
                        (f"; unshaped (a {unshaped[c['hosts']]['one_way_hop_us']:.0f} us hop) muster took "
                         f"{unshaped[c['hosts']]['sizes'][min(c['sizes'], key=int)]['muster_us']:.0f} us"
                         if c["hosts"] in unshaped else ""), ratio <= hops))
    return out


def report(r):
    lines = ["## Shaped links (bench/multihost/shaped.py: veth links with tbf and a delay line, one rank per host)\n",
             f"Load average {r['load_before']} before, {r['load_after']} after, {r['cpus']} cores"
             f"{', quick mode' if r.get('quick') else ''}; {r['reps']} reps per figure (median), a rep 64 MB worth "
             "of ops back to back between barriers (at most 32), or 512 of 8 B (the barrier's exit skew spread "
             "thin, as OSU's latency tests do). Every host's link is "
             "shaped both ways (tbf on both ends of its veth) to the rate, and each host's incoming packets are "
             "held half the added round trip (this kernel has no sch_netem: an NFQUEUE delay line). Bus bandwidth "
             "= algbw x 2 (p-1)/p, the bytes each link carries each way per second, as a fraction of the rate "
             "(unshaped: of one iperf3 stream's figure on the same link). One TCP stream can carry at most "
             "1448/1514 = 0.956x of a rate counted in frame bytes. iperf3 p at once: one stream from every host to the "
             "next at the same time (each host sends one and receives one, as a ring does), per link: what the "
             "shared cores let every link carry together. muster: its ring over its TCP transport "
             "(8 B: its default path); MPI: Open MPI's MPI_Allreduce over the tcp btl; gloo: torch.distributed. "
             "All from the same pass over each link.\n",
             "| hosts | link | added RTT | ping RTT (one-way hop) | iperf3 1 stream | iperf3 p at once, each "
             "| size | muster | MPI | gloo |"
             + (" probe |" if r.get("probe") else "") + " CPU s/op muster / MPI / gloo |",
             "|---|---|---|---|---|---|---|---|---|---|" + ("---|" if r.get("probe") else "") + "---|"]
    for c in r["configs"]:
        head = (f"| {c['hosts']} | {_link(c)} | {c['rtt_us_added']} us | {c['ping_rtt_us']['median']:.0f} us "
                f"({c['one_way_hop_us']:.0f}) | {c['iperf3_gbs']:.3f} GB/s = {c['iperf3_fraction']:.3f}x | "
                + (f"{c['iperf3_ring_gbs']:.3f} GB/s = {c['iperf3_ring_fraction']:.3f}x " if "iperf3_ring_gbs" in c
                   else "- "))
        for b, x in c["sizes"].items():
            cpu = x["cpu_s_per_op"]
            if int(b) <= 4096:
                cells = [f"{x['muster_us']:.0f} us", f"{x['mpi_us']:.0f} us", f"{x['gloo_us']:.0f} us"]
                if r.get("probe"):
                    cells.append("")
            else:
                cells = [f"{x[k + '_busbw_gbs']:.3f} GB/s = {x[k + '_fraction']:.3f}x" for k in ("muster", "mpi", "gloo")]
                if r.get("probe"):
                    cells.append(f"{x['probe_busbw_gbs']:.3f} = {x['probe_fraction']:.3f}x")
            lines.append(head + f"| {_mb(b)} | " + " | ".join(cells) +
                         f" | {cpu['muster']} / {cpu['mpi']} / {cpu['gloo']} |")
            head = "| | | | | | "
    if r.get("probe"):
        lines.append(f"\nprobe: muster's ring created with {r['probe']}.")
    t = targets(r)
    lines += ["", f"Targets ({sum(ok for *_, ok in t)} of {len(t)} met):", "",
              "| target | muster | reference (same pass) | |", "|---|---|---|---|"]
    lines += [f"| {what} | {fig} | {ref} | {'pass' if ok else '**fail**'} |" for what, fig, ref, ok in t]
    unshaped = {c["hosts"]: c for c in r["configs"] if not c["rate_gbit"]}
    if unshaped:
        lines += ["", "Unshaped (the machine's own ceiling for the same hosts, same run): " + "; ".join(
            f"{p} hosts: one iperf3 stream {c['iperf3_gbs']:.2f} GB/s ({c['iperf3_gbs'] * 8:.1f} Gbit/s)"
            + (f", {p} at once {c['iperf3_ring_gbs']:.2f} GB/s each ({c['iperf3_ring_gbs'] * 8:.1f} Gbit/s)"
               if "iperf3_ring_gbs" in c else "") + ", muster's "
            f"bus bandwidth at 64 MB {c['sizes'].get(str(64 << 20), {}).get('muster_busbw_gbs', 0):.2f} GB/s "
            f"({c['sizes'].get(str(64 << 20), {}).get('muster_busbw_gbs', 0) * 8:.1f} Gbit/s)"
            for p, c in sorted(unshaped.items())) +
            ". Where a shaped rate comes near these, the cores, not the link, set the figure "
            "(runtime/comm/README.md, \"On a shaped link\")."]
    return "\n".join(lines) + "\n"
