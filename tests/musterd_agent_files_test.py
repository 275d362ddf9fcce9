"""What a running worker holds open, against a real musterd (local backend):

- its agent heartbeats over one kept connection: across ten heartbeats the
  agent holds the same one socket (a connection per heartbeat left 10,842
  sockets in TIME_WAIT 20 s after 1,024 workers started);
- musterd, started with a low soft limit on open files, raises its own to
  the hard limit (it holds a pidfd and a connection per running worker),
  while the workers' scripts start with the soft limit musterd was given.
"""
import os
import resource
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from sdk_daemon import Daemon, RestApi, agent_of, sdk_session, write_scripts  # noqa: E402
from testutil import wait_for  # noqa: E402

import muster  # noqa: E402

HEARTBEAT_S = 0.2
LOW_SOFT = 512
SCRIPTS = {"limits.sh": 'echo "soft=$(ulimit -Sn)"\nsleep 600\n'}


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard <= LOW_SOFT:
        pytest.skip("the hard limit on open files (%d) leaves no room above %d" % (hard, LOW_SOFT))
    project = write_scripts(tmp_path_factory.mktemp("project"), SCRIPTS)
    args = ["--heartbeat-interval", str(HEARTBEAT_S), "--heartbeat-timeout", "5"]
    # musterd inherits the soft limit of whoever starts it.
    resource.setrlimit(resource.RLIMIT_NOFILE, (LOW_SOFT, hard))
    try:
        d = Daemon(project, tmp_path_factory.mktemp("state"), extra_args=args)
        d.start()
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    try:
        with sdk_session(d):
            yield d
    finally:
        d.stop()


def soft_and_hard_limit(pid):
    with open("/proc/%d/limits" % pid) as f:
        for line in f:
            if line.startswith("Max open files"):
                fields = line.split()
                return int(fields[3]), int(fields[4])
    raise AssertionError("no open-files line in /proc/%d/limits" % pid)


def sockets_of(pid):
    found = set()
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            target = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue
        if target.startswith("socket:"):
            found.add(target)
    return found


def test_the_daemon_takes_the_hard_limit_and_scripts_keep_the_soft_one(daemon):
    soft, hard = soft_and_hard_limit(daemon.proc.pid)
    assert soft == hard, "musterd kept the soft limit %d (hard %d)" % (soft, hard)
    [w] = muster.launch_workers(1, cpu=0.1, memory=0.1, kernel="bash", script="limits.sh")
    try:
        line = wait_for(lambda: next((l for l in muster.worker_logs(w["id"]).splitlines() if l.startswith("soft=")),
                                     None), timeout=30, what="the script's soft limit in its log")
        assert line == "soft=%d" % LOW_SOFT, line
        agent = wait_for(lambda: agent_of(w["id"]), timeout=10, what="the worker's agent")
        assert soft_and_hard_limit(agent)[0] == LOW_SOFT
    finally:
        muster.stop_workers(w)


def heartbeats_seen(daemon):
    status, text = RestApi(daemon).call("GET", "/metrics")
    assert status == 200, text
    for line in text.splitlines():
        if line.startswith("muster_heartbeat_interval_seconds_count"):
            return float(line.split()[-1])
    raise AssertionError("no muster_heartbeat_interval_seconds_count in /metrics")


def test_an_agent_heartbeats_over_one_kept_connection(daemon):
    [w] = muster.launch_workers(1, cpu=0.1, memory=0.1, kernel="bash", script="limits.sh")
    try:
        ready = muster.await_workers([w], wait_for_completion=False, timeout_seconds=60)
        assert not ready["failures"], ready["failures"]
        agent = wait_for(lambda: agent_of(w["id"]), timeout=10, what="the worker's agent")
        before = heartbeats_seen(daemon)
        seen = set()
        deadline = time.monotonic() + 10 * HEARTBEAT_S
        while time.monotonic() < deadline:
            seen |= sockets_of(agent)
            time.sleep(HEARTBEAT_S / 4)
        beats = heartbeats_seen(daemon) - before
        assert beats >= 5, "only %d heartbeats arrived in %.1f s" % (beats, 10 * HEARTBEAT_S)
        assert len(seen) == 1, "the agent opened %d sockets over %d heartbeats: %s" % (len(seen), beats, sorted(seen))
        assert muster.get_worker(w["id"])["status"] == "running"
    finally:
        muster.stop_workers(w)
