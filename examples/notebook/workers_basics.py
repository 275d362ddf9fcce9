#!/usr/bin/env python3
"""Notebook example: workers with the muster SDK, the way cdsw notebooks do it.

Run from a notebook session (or by scripts/demo.sh) with musterd running:
launches 4 workers, waits until they are running, prints their IP
addresses and any failures, shows the tail of one worker's log, stops them;
then shows what a crashing worker looks like in `failures`.

This same file is also the workers' program: the daemon runs it inside each
worker, where MUSTER_WORKER_ID is set.
"""
import os
import socket
import sys
import time

import muster as cdsw  # a cdsw notebook ported to muster keeps its spelling


def worker_main():
    """What each worker runs: say hello, do a bit of work, then serve until stopped."""
    me = os.environ["MUSTER_WORKER_ID"]
    print("worker %s up on %s (ip %s), master %s" % (me, socket.gethostname(), os.environ.get("MUSTER_IP_ADDRESS"),
                                                  os.environ.get("MUSTER_MASTER_IP")), flush=True)
    total = sum(i * i for i in range(200000))
    print("worker %s computed sum of squares = %d" % (me, total), flush=True)
    print("worker %s waiting to be stopped" % me, flush=True)
    time.sleep(float(os.environ.get("WORK_SECONDS", "120")))


def this_script():
    """This file's path as the daemon resolves scripts: relative to its --project-dir."""
    project = os.environ.get("MUSTER_PROJECT_DIR") or os.getcwd()
    return os.path.relpath(os.path.abspath(__file__), os.path.abspath(project))


def wait_for_log(worker, text, seconds=30):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        log = cdsw.worker_logs(worker)
        if text in log:
            return log
        time.sleep(0.2)
    return cdsw.worker_logs(worker)


def notebook_main():
    print("launching 4 workers running %s" % this_script())
    workers = cdsw.launch_workers(n=4, cpu=0.5, memory=1, script=this_script(), env={"WORK_SECONDS": "120"})
    worker_ids = [worker["id"] for worker in workers]
    try:
        running = cdsw.await_workers(worker_ids, wait_for_completion=False, timeout_seconds=60)
        worker_ips = [worker["ip_address"] for worker in running["workers"]]
        print("running workers:")
        for w in running["workers"]:
            print("  %-24s %-8s ip %s" % (w["id"], w["status"], w["ip_address"]))
        print("worker IPs:", worker_ips)
        print("failures:", [(f["id"], f["status"], f.get("reason")) for f in running["failures"]] or "none")

        log = wait_for_log(worker_ids[0], "waiting to be stopped")
        print("tail of %s's log:" % worker_ids[0])
        for line in cdsw.worker_logs(worker_ids[0], tail=3).splitlines():
            print("  | " + line)
        if "waiting to be stopped" not in log:
            print("(the worker has not finished starting yet)")
    finally:
        stopped = cdsw.stop_workers(*worker_ids)
        print("stopped:", ", ".join("%s=%s" % (w["id"], w["status"]) for w in stopped))

    print("\na worker whose code crashes ends up in failures:")
    bad = cdsw.launch_workers(n=1, cpu=0.5, memory=1, code="print('loading data'); raise SystemExit(2)")
    res = cdsw.await_workers(bad, wait_for_completion=True, timeout_seconds=60)
    for f in res["failures"]:
        print("  %s %s, exit code %s, reason: %s" % (f["id"], f["status"], f.get("exit_code"), f.get("reason")))
        print("  log: " + cdsw.worker_logs(f).strip().replace("\n", " / "))
    return 0 if len(running["failures"]) == 0 and len(worker_ips) == 4 else 1


if __name__ == "__main__":
    if os.environ.get("MUSTER_WORKER_ID"):
        worker_main()
    else:
        sys.exit(notebook_main())
