"""One rank of tests/horovod_suite.py: pytest on the staged test_torch.py.

Run by mpirun with MUSTER_SUITE_DIR (the staged test/parallel folder) and
MUSTER_SUITE_REPORTS (a folder); extra arguments go to pytest. Each test's
outcome is appended to rank-<r>.jsonl as soon as it is known, so a rank that
dies part-way still leaves the results it had (and the test it died in
shows as started without an outcome).
"""
import json
import os
import sys

import pytest

rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))


class Recorder:
    def __init__(self, path):
        self.out = open(path, "a", buffering=1)

    def write(self, **record):
        self.out.write(json.dumps(record) + "\n")
        self.out.flush()

    def pytest_runtest_logstart(self, nodeid, location):
        self.write(test=nodeid.split("::")[-1], event="start")

    def pytest_runtest_logreport(self, report):
        name = report.nodeid.split("::")[-1]
        if report.skipped:
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
            self.write(test=name, event="skipped", message=reason)
        elif report.failed:
            self.write(test=name, event="failed", phase=report.when, message=str(report.longrepr)[-3000:])
        elif report.when == "call":
            self.write(test=name, event="passed")


os.chdir(os.environ["MUSTER_SUITE_DIR"])
recorder = Recorder(os.path.join(os.environ["MUSTER_SUITE_REPORTS"], "rank-%d.jsonl" % rank))
code = pytest.main(["-v", "-p", "no:cacheprovider", "test_torch.py"] + sys.argv[1:], plugins=[recorder])
sys.exit(int(code))
