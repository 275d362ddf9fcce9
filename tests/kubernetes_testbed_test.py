"""The Kubernetes testbed itself (tests/kubernetes_testbed.py): label
integration, root only, skipped until scripts/kubernetes.sh has built the
control plane (`make test` runs it first).

One testbed of two nodes serves every test of this module, in order:
  - both nodes register Ready on their veth addresses, with the CPU and
    memory the testbed gives them;
  - a pod of the base image with the machine's /usr mounted, requests = limits,
    imports torch and Succeeds, and its log (kubectl logs, through the
    kubelet) has torch's version;
  - a pod that allocates past its 64 Mi memory limit ends OOMKilled, as
    runc and the memory cgroup enforce it;
  - pods on two nodes reach each other, and the machine (host_address), by
    IP; the machine reaches them;
  - a kubelet killed with SIGKILL leaves its node NotReady within the
    controller manager's grace period, and Ready again once restarted.
"""
import http.server
import json
import os
import re
import sys
import threading
import time
import urllib.request

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from kubernetes_testbed import KubernetesTestbed, have_kubernetes  # noqa: E402

WHY_NOT = have_kubernetes()
pytestmark = pytest.mark.skipif(WHY_NOT is not None, reason=f"a Kubernetes testbed cannot run here: {WHY_NOT}")

# Measured: `import torch` peaks at about 230 MB resident, so its pod gets
# 512 Mi; at 64 Mi it is OOMKilled (which the OOM test does on purpose).
TORCH_MEMORY = "512Mi"


@pytest.fixture(scope="module")
def bed():
    started = time.monotonic()
    with KubernetesTestbed(nodes=2, tag="kts", cpus=2, memory_mb=2048) as b:
        print(f"testbed up in {time.monotonic() - started:.1f} s")
        yield b


@pytest.fixture(autouse=True)
def no_pods_left(bed):
    yield
    bed.kubectl("delete", "pods", "--all", "--grace-period=0", "--force", check=False)


def _mebibytes(quantity: str) -> float:
    for suffix, scale in (("Ki", 1 / 1024), ("Mi", 1), ("Gi", 1024)):
        if quantity.endswith(suffix):
            return float(quantity[:-2]) * scale
    return int(quantity) / (1 << 20)


def test_nodes_are_ready_on_their_addresses(bed):
    for node in bed.node_names:
        assert bed.node_ready(node) is True
        status = bed.get_json("node", node)["status"]
        addresses = {a["type"]: a["address"] for a in status["addresses"]}
        assert addresses["InternalIP"] == bed.node_address(node)
        assert status["allocatable"]["cpu"] == "2"
        assert _mebibytes(status["allocatable"]["memory"]) == 2048, status["allocatable"]


def test_torch_pod_succeeds_and_its_log_has_the_version(bed):
    pod = bed.pod_manifest("torch", ["/usr/bin/python3", "-c", "import torch; print('torch', torch.__version__)"],
                           cpu="500m", memory=TORCH_MEMORY)
    bed.create(pod)
    done = bed.wait_pod("torch", timeout=180)
    assert done["status"]["phase"] == "Succeeded", json.dumps(done["status"])[:2000]
    limits = done["spec"]["containers"][0]["resources"]
    assert limits["requests"] == limits["limits"] == {"cpu": "500m", "memory": TORCH_MEMORY}
    assert done["status"]["qosClass"] == "Guaranteed"
    log = bed.kubectl("logs", "torch").stdout
    assert re.search(r"^torch \d+\.\d+", log, re.M), log


def test_pod_over_its_memory_limit_is_oomkilled(bed):
    pod = bed.pod_manifest("hog", ["/usr/bin/python3", "-c", "x = b'x' * (256 << 20); print(len(x))"],
                           cpu="500m", memory="64Mi")
    bed.create(pod)
    done = bed.wait_pod("hog", timeout=120)
    assert done["status"]["phase"] == "Failed", json.dumps(done["status"])[:2000]
    terminated = done["status"]["containerStatuses"][0]["state"]["terminated"]
    assert terminated["reason"] == "OOMKilled", terminated
    assert terminated["exitCode"] == 137, terminated


class _Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"hello from the machine"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_pods_the_machine_and_other_nodes_reach_each_other(bed):
    server = http.server.ThreadingHTTPServer((bed.host_address, 0), _Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        first, second = bed.node_names
        bed.create(bed.pod_manifest("server", ["/usr/bin/python3", "-m", "http.server", "8080"], node=first))
        server_pod = bed.wait_pod("server", phases=("Running",), timeout=120)
        ip = server_pod["status"]["podIP"]
        assert ip.startswith(bed.pod_subnet(first).rsplit(".", 1)[0] + ".")
        # The machine reaches the pod (a route via the node's address).
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://{ip}:8080/", timeout=3) as r:
                    assert r.status == 200
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        # A pod on the other node reaches that pod and the machine.
        machine = f"http://{bed.host_address}:{server.server_address[1]}/"
        probe = ("import urllib.request as u\n"
                 f"print(u.urlopen('http://{ip}:8080/', timeout=10).status)\n"
                 f"print(u.urlopen('{machine}', timeout=10).read().decode())\n")
        bed.create(bed.pod_manifest("client", ["/usr/bin/python3", "-c", probe], node=second))
        done = bed.wait_pod("client", timeout=120)
        log = bed.kubectl("logs", "client").stdout
        assert done["status"]["phase"] == "Succeeded", log
        assert "200" in log and "hello from the machine" in log, log
    finally:
        server.shutdown()


def test_killed_kubelet_makes_its_node_not_ready(bed):
    node = bed.node_names[1]
    started = time.monotonic()
    bed.kill_kubelet(node)
    bed.wait_node(node, ready=False, timeout=90)
    took = time.monotonic() - started
    print(f"{node} NotReady {took:.1f} s after its kubelet was killed")
    assert took < 60
    assert bed.node_ready(bed.node_names[0]) is True
    bed.restart_kubelet(node)
    assert bed.node_ready(node) is True
