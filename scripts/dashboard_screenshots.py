#!/usr/bin/python3
"""Takes the README's dashboard screenshots (docs/dashboard-workers.png,
docs/dashboard-cluster.png) with headless Chromium against a fresh musterd:
a few workers (one failing, one stopped) and a 2-rank fashion_mnist mpi
cluster with its loss curve. Usage: scripts/dashboard_screenshots.py [build-dir]."""
import os
import re
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "tests"), os.path.join(ROOT, "sdk", "python")]
os.environ["MUSTER_BINARY_DIR"] = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build"))

import muster  # noqa: E402
from dashboard_browser import Browser  # noqa: E402
from dashboard_common import write_project  # noqa: E402
from testutil import wait_for  # noqa: E402
from sdk_daemon import Daemon, binary_dir  # noqa: E402
import pathlib  # noqa: E402


def main():
    work = pathlib.Path(tempfile.mkdtemp(prefix="muster-dash-shots-"))
    project = work / "project"
    project.mkdir()
    write_project(project)
    (project / "train.sh").write_text('exec "$FASHION_MNIST" "$@"\n')
    (project / "fail.py").write_text("import sys\nprint('cannot open data.csv', flush=True)\nsys.exit(2)\n")
    d = Daemon(project, work / "state").start()
    b = Browser(1400, 900)
    try:
        c = muster.Client(d.url, d.token)
        workers = c.launch_workers(n=3, cpu=0.5, memory=1, script="sleep.py")
        c.launch_workers(n=1, cpu=1, memory=2, script="fail.py")
        cluster = c.create_cluster(
            mode="mpi", n_workers=2, slots=1, cpu=1, memory=2, worker_script="train.sh",
            args=["--data-dir", "/usr/share/datasets/fashion-mnist", "--model", "mlp", "--limit", "12000",
                  "--test-limit", "2000", "--epochs", "2", "--log-every", "10", "--threads", "1"],
            env={"FASHION_MNIST": os.path.join(binary_dir(), "bin", "fashion_mnist")}, launch=True)
        time.sleep(2)
        c.stop_workers(workers[2]["id"])
        url = re.search(r"musterd dashboard: (\S+)", d.log()).group(1)
        b.driver.get(url)
        time.sleep(3)
        b.driver.save_screenshot(os.path.join(ROOT, "docs", "dashboard-workers.png"))
        b.driver.set_window_size(1400, 1900)
        b.driver.get(d.url + "/#/clusters/" + cluster["id"])
        wait_for(lambda: c.get_cluster(cluster["id"])["status"] != "running", timeout=300, interval=1,
                 what="the training to end")
        time.sleep(2)
        b.driver.save_screenshot(os.path.join(ROOT, "docs", "dashboard-cluster.png"))
    finally:
        b.close()
        d.stop()


if __name__ == "__main__":
    main()
