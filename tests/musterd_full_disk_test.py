"""A full disk under a real musterd: its state directory on an 8 MiB tmpfs
(mounted in a mount namespace of its own, so nothing leaks out of the
test), filled up while workers run.

- A stop still signals: the worker is `stopped` and its process is gone.
- Scripts that exit 0 are `succeeded`, never "agent exited without reporting".
- A launch is refused (500 naming the state), leaving no half-made directory.
- The store's failures are logged once for the whole episode, /healthz says
  `degraded` with the problem, and once there is room again the daemon
  writes what it kept, says so, and /healthz is `ok`.
"""
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from sdk_daemon import kill_processes_with_env, musterd_path, pid_alive, write_scripts  # noqa: E402
from testutil import wait_for  # noqa: E402

import muster  # noqa: E402
from muster.errors import MusterError  # noqa: E402

SCRIPTS = {
    "long.sh": 'echo "pid=$$"\nsleep 600\n',
    # Waits for a file in the project (not on the full disk), then exits 0.
    "clean.sh": 'while [ ! -e "$MUSTER_PROJECT_DIR/go" ]; do sleep 0.1; done\nexit 0\n',
}

WRAPPER = 'mount -t tmpfs -o size=8m muster-test "$1" && shift && exec "$@"'


def have_mount_namespaces():
    if shutil.which("unshare") is None:
        return False
    r = subprocess.run(["unshare", "-m", "--propagation", "private", "true"], capture_output=True)
    return r.returncode == 0


class TmpfsDaemon:
    """musterd in a mount namespace of its own, its state dir an 8 MiB tmpfs
    there; the test reaches that tmpfs through /proc/<pid>/root."""

    def __init__(self, project, state):
        self.project, self.state = str(project), str(state)
        os.makedirs(self.state, exist_ok=True)
        self.log_path = os.path.join(os.path.dirname(self.state), "musterd.log")
        cmd = ["unshare", "-m", "--propagation", "private", "sh", "-c", WRAPPER, "sh", self.state,
               musterd_path(), "--listen", "127.0.0.1:0", "--project-dir", self.project, "--state-dir", self.state,
               "--stop-grace", "2", "--heartbeat-timeout", "30"]
        self.log_file = open(self.log_path, "ab")
        self.proc = subprocess.Popen(cmd, stdout=self.log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True)
        self.url = wait_for(self._url, timeout=30, what="musterd listening")
        self.token = open(self.inside("token")).read().strip()

    def inside(self, *parts):
        """A path of the state dir as the daemon sees it (its mount namespace)."""
        return os.path.join("/proc/%d/root" % self.proc.pid, self.state.lstrip("/"), *parts)

    def log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def _url(self):
        if self.proc.poll() is not None:
            raise RuntimeError("musterd exited:\n" + self.log())
        for line in self.log().splitlines():
            if line.startswith("musterd listening on "):
                return line.split()[-1]
        return None

    def healthz(self):
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(self.url + "/healthz", timeout=10) as resp:
            return json.loads(resp.read())

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log_file.close()
        kill_processes_with_env("MUSTER_URL=" + self.url, self.state)


@pytest.mark.skipif(not have_mount_namespaces(), reason="needs mount namespaces (unshare -m) and tmpfs")
def test_a_full_disk_never_stops_a_stop_nor_fails_a_clean_exit(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    write_scripts(project, SCRIPTS)
    d = TmpfsDaemon(project, tmp_path / "state")
    try:
        client = muster.Client(d.url, d.token)
        [long_w] = client.launch_workers(n=1, cpu=0.1, memory=0.1, kernel="bash", script="long.sh")
        clean = client.launch_workers(n=2, cpu=0.1, memory=0.1, kernel="bash", script="clean.sh")
        ready = client.await_workers([long_w] + clean, wait_for_completion=False, timeout_seconds=60, progress=False)
        assert not ready["failures"], ready["failures"]
        pid = wait_for(lambda: "pid=" in client.worker_logs(long_w) and
                       int(client.worker_logs(long_w).split("pid=")[1].split()[0]), what="the script's pid")
        dirs_before = sorted(os.listdir(d.inside("workers")))

        # Fill the disk.
        with open(d.inside("filler"), "wb") as f:
            chunk = b"\0" * (1 << 16)
            try:
                while True:
                    f.write(chunk)
                    f.flush()
            except OSError:
                pass
        assert d.healthz()["status"] == "ok"

        stopped = client.stop_workers(long_w)
        assert stopped[0]["status"] == "stopped"
        wait_for(lambda: not pid_alive(pid), timeout=15, what="the stopped script to end")
        (project / "go").touch()
        for w in clean:
            wait_for(lambda w=w: client.get_worker(w["id"])["status"] in ("succeeded", "failed"), timeout=30,
                     what="worker %s to end" % w["id"])
            got = client.get_worker(w["id"])
            assert got["status"] == "succeeded", got
        with pytest.raises(MusterError) as err:
            client.launch_workers(n=3, cpu=0.1, memory=0.1, kernel="bash", script="clean.sh")
        assert err.value.http_status == 500
        assert sorted(os.listdir(d.inside("workers"))) == dirs_before, "a refused launch left directories"

        health = wait_for(lambda: d.healthz()["status"] == "degraded" and d.healthz(), timeout=10,
                          what="/healthz degraded")
        assert any("state database" in p for p in health["problems"]), health
        # Three changes at least were refused (the stop, two exits), and the
        # tick retries every 100 ms: one log line for all of it.
        time.sleep(1)
        assert d.log().count("the state database refuses writes") == 1, d.log()

        # Room again: what memory kept is written, the episode ends, once.
        os.unlink(d.inside("filler"))
        wait_for(lambda: d.healthz()["status"] == "ok", timeout=15, what="/healthz ok again")
        assert d.log().count("the state database takes writes again") == 1, d.log()
        statuses = {w["id"]: w["status"] for w in client.list_workers()}
        assert statuses == {long_w["id"]: "stopped", clean[0]["id"]: "succeeded", clean[1]["id"]: "succeeded"}
    finally:
        d.stop()


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v"]))
