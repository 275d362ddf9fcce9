"""musterd's heartbeat budget with real agents (local backend):

- past --heartbeat-rate heartbeats a second, every agent is told a longer
  interval (running workers / rate) in its register and heartbeat replies,
  and beats at it;
- the loss timeout stretches with it: workers beating every 2 s under a
  --heartbeat-timeout of 1 s are not lost;
- when the fleet shrinks, the interval shrinks back at the next beat, and an
  agent that stops beating is still found lost, after the timeout of the
  interval it was told.
"""
import os
import signal
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from sdk_daemon import Daemon, RestApi, agent_of, sdk_session, write_scripts  # noqa: E402
from testutil import wait_for  # noqa: E402

import muster  # noqa: E402

BASE_S = 0.2   # --heartbeat-interval
RATE = 2       # --heartbeat-rate: 4 running workers -> every 2 s
TIMEOUT_S = 1  # --heartbeat-timeout at the base interval: 5 beats


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    project = write_scripts(tmp_path_factory.mktemp("project"), {"sleep.sh": "sleep 600\n"})
    args = ["--heartbeat-interval", str(BASE_S), "--heartbeat-rate", str(RATE), "--heartbeat-timeout", str(TIMEOUT_S)]
    d = Daemon(project, tmp_path_factory.mktemp("state"), extra_args=args)
    d.start()
    try:
        with sdk_session(d):
            yield d
    finally:
        d.stop()


def metrics(daemon):
    status, text = RestApi(daemon).call("GET", "/metrics")
    assert status == 200, text
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#") and "{" not in line:
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def beats_over(daemon, seconds):
    before = metrics(daemon)["muster_heartbeat_interval_seconds_count"]
    time.sleep(seconds)
    return metrics(daemon)["muster_heartbeat_interval_seconds_count"] - before


def test_the_interval_stretches_past_the_rate_and_nobody_is_lost(daemon):
    workers = muster.launch_workers(4, cpu=0.1, memory=0.1, kernel="bash", script="sleep.sh")
    try:
        ready = muster.await_workers(workers, wait_for_completion=False, timeout_seconds=60)
        assert not ready["failures"], ready["failures"]
        wait_for(lambda: metrics(daemon)["muster_heartbeat_assigned_interval_seconds"] == 2.0, timeout=10,
                 what="the assigned interval to reach 4 workers / 2 a second = 2 s")
        time.sleep(2.5)  # every agent past a beat at the interval it was told last
        beats = beats_over(daemon, 6)
        # At 0.2 s the 4 agents would beat 120 times in 6 s; at 2 s, 12.
        assert 4 <= beats <= 24, "%d heartbeats in 6 s from 4 agents told 2 s" % beats
        # 6 s without a beat at 0.2 s would be lost after 1 s; told 2 s, after 10 s.
        assert all(muster.get_worker(w["id"])["status"] == "running" for w in workers)

        # The fleet shrinks to one: 1 / 2 a second = 0.5 s, told at its next beat.
        muster.stop_workers(*workers[1:])
        wait_for(lambda: metrics(daemon)["muster_heartbeat_assigned_interval_seconds"] == 0.5, timeout=10,
                 what="the assigned interval back to 0.5 s")
        time.sleep(2.5)
        beats = beats_over(daemon, 3)
        assert 4 <= beats <= 9, "%d heartbeats in 3 s from one agent told 0.5 s" % beats

        # An agent that stops beating is lost after 1 s x 0.5 / 0.2 = 2.5 s.
        last = workers[0]["id"]
        agent = wait_for(lambda: agent_of(last), timeout=10, what="the last worker's agent")
        os.kill(agent, signal.SIGSTOP)
        try:
            t = time.monotonic()
            w = wait_for(lambda: (lambda w: w if w["status"] == "lost" else None)(muster.get_worker(last)),
                         timeout=20, what="the stopped agent's worker to be lost")
            assert time.monotonic() - t < 10
            assert w["reason"] == "no heartbeat from the agent for 2.5 s", w["reason"]
        finally:
            os.kill(agent, signal.SIGCONT)
    finally:
        muster.stop_workers(*workers)
