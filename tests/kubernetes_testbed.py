"""A real Kubernetes 1.20 control plane and kubelets on this machine (root).

    with KubernetesTestbed(nodes=2, tag="kt") as bed:
        bed.kubectl("get", "nodes")                 # kubectl as the cluster admin
        bed.api_server, bed.ca_file, bed.token      # what a client needs
        bed.node_address(bed.node_names[0])         # "10.218.x.2"
        bed.host_address                            # where pods reach this machine

The programs are those scripts/kubernetes.sh builds once from Debian's
kubernetes source package into /var/cache/muster (MUSTER_KUBE_CACHE). What it
starts, all private to one testbed (its own folder, addresses, names and
cgroups), and stops in reverse in __exit__ (and at interpreter exit):
  - etcd on loopback, its data on /dev/shm (etcd fsyncs every write);
  - kube-apiserver, HTTPS only, on the bridge address (host_address:6443),
    authorization Node,RBAC. Everyone authenticates with a bearer token from
    a static token file: the admin (group system:masters), each kubelet
    (system:node:<name>), the controller manager and the scheduler under their
    bootstrap RBAC names. The apiserver reaches the kubelets with a client
    certificate of the testbed's CA;
  - kube-controller-manager (one service account per controller, as kubeadm
    runs it; a node is NotReady 20 s after its kubelet's last heartbeat and
    pods tolerate that for 10 s before they are evicted) and kube-scheduler;
  - per node, a network namespace of tests/netns_hosts.py (the node IP is its
    veth address) holding containerd and the kubelet. Both also share a
    mount namespace of their own, in which per-node folders are bound over
    the paths the kubelet and CNI fix (/var/lib/kubelet, /var/log/pods,
    /var/log/containers, /var/lib/cni; on the machine they are only empty
    mount points, made when missing), so two kubelets on one machine do not
    clean up each other's pods, and the kubelet's tmpfs and bind mounts never
    reach the machine's mount table: they go with the namespace. containerd
    runs runc with cgroupfs (the machine has cgroup v1), restrict_oom_score_adj
    (this VM refuses to lower oom_score_adj), the sandbox image imported
    locally, and CNI bridge + host-local: each node has a pod subnet of its own
    (10.219.x.0/24) on a bridge cni0 in its namespace, with no NAT;
  - routes: the machine reaches every pod subnet via its node's address, and
    each node reaches the other nodes' pod subnets the same way, so pods,
    nodes and the machine (host_address) all reach each other by IP;
  - the kubelet's cgroups under a root of their own in every cgroup v1
    hierarchy; its allocatable CPU and memory are cut down to cpus and
    memory_mb with system-reserved, so "does not fit" is reached quickly;
  - the images of tests/kubernetes_images.py: worker pods use `image`
    (localhost/muster-base:1, an empty Debian root) and mount `host_mounts`
    (the machine's /usr read-only, plus the folders a test needs) by hostPath.

The kubelet sets a few kernel settings at start (vm.overcommit_memory,
kernel.panic, kernel.panic_on_oops, ...); the testbed puts the machine's values
back when it stops. A testbed left behind by a killed test (its owner process
is gone) is removed, by tag, when the next one starts.

Each program's log is in <dir>/logs/<program>.log; a failure to start names
the program and ends with the tails of the logs; MUSTER_KUBE_KEEP_LOGS=1
keeps a copy of the logs after the testbed stops.

Beside this file: kubernetes_images.py makes the images,
kubernetes_node_files.py a node's CNI, containerd and kubelet configuration,
and kubernetes_leftovers.py removes what a testbed made.
"""
from __future__ import annotations

import atexit
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

from kubernetes_leftovers import (cgroup_hierarchies, kill_cgroup_tree, kill_processes_mentioning,
                                 remove_leftovers, remove_stale_testbeds, run)
from kubernetes_images import BASE_IMAGE, PAUSE_IMAGE, write_base_image, write_pause_image
from kubernetes_node_files import cni_conflist, containerd_toml, kubelet_configuration
from netns_hosts import NetnsHosts

KUBE_CACHE = Path(os.environ.get("MUSTER_KUBE_CACHE", "/var/cache/muster/kubernetes-1.20.2"))
KUBE_BIN = KUBE_CACHE / "bin"
_PROGRAMS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kubectl", "pause")
_TOOLS = ("etcd", "containerd", "containerd-shim-runc-v2", "runc", "ctr", "openssl", "ip", "nsenter", "unshare")
_CNI_BIN = Path("/usr/lib/cni")
_KERNEL_SETTINGS = ("vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
                    "kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes")
_FIXED_PATHS = ("/var/lib/kubelet", "/var/log/pods", "/var/log/containers", "/var/lib/cni")
_API_PORT = 6443


def have_kubernetes() -> str | None:
    """None when a testbed can run here, else why not."""
    if os.geteuid() != 0:
        return "needs root (network namespaces, containerd, kubelets)"
    missing = [p for p in _PROGRAMS if not (KUBE_BIN / p).exists()]
    if missing or not (KUBE_BIN / ".built").exists():
        return f"{', '.join(missing) or 'the build stamp'} not in {KUBE_BIN}: run scripts/kubernetes.sh"
    for tool in _TOOLS:
        if not shutil.which(tool):
            return f"{tool} is not installed (scripts/setup.sh installs it)"
    for plugin in ("bridge", "host-local", "loopback"):
        if not (_CNI_BIN / plugin).exists():
            return f"{_CNI_BIN / plugin} is missing (scripts/setup.sh installs containernetworking-plugins)"
    if not Path("/sys/fs/cgroup/memory").is_dir():
        return "needs cgroup v1 with the memory controller at /sys/fs/cgroup/memory"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class KubernetesTestbed:
    def __init__(self, nodes: int = 1, tag: str = "kt", cpus: int = 2, memory_mb: int = 2048,
                 namespace: str = "muster-test", subnet_octet: int = 218):
        if not 1 <= nodes <= 4:
            raise ValueError(f"nodes={nodes}: a testbed has 1 to 4 nodes")
        if not (tag.isalnum() and len(tag) <= 3):
            # Link names (at most 15 characters) are made of it: see NetnsHosts.
            raise ValueError(f"tag={tag!r}: a testbed's tag is 1 to 3 letters or digits")
        self.tag = tag.lower()
        self.cpus = cpus
        self.memory_mb = memory_mb
        self.namespace = namespace
        self.image = BASE_IMAGE
        pid = os.getpid()
        self.hosts = NetnsHosts(nodes, "k" + self.tag, subnet_octet)
        self.node_names = [f"{self.tag}-node{i + 1}" for i in range(nodes)]
        self._pod_base = (pid % 60) * 4
        self._service_prefix = f"10.220.{pid % 200}."
        self.dir = Path(tempfile.mkdtemp(prefix=f"muster-kube-{self.tag}-"))
        self.dir.chmod(0o755)
        self._etcd_dir = Path(tempfile.mkdtemp(prefix=f"muster-kube-{self.tag}-etcd-", dir="/dev/shm"))
        self._cgroups = [f"muster-kube-{self.tag}-{pid}-{i + 1}" for i in range(nodes)]
        self.procs: dict[str, subprocess.Popen] = {}
        self._kernel: dict[str, str] = {}
        self.token = secrets.token_hex(16)
        # The machine's folders every worker pod mounts by hostPath: (host
        # path, path in the pod, read-only). Tests add the build and project
        # folders they need.
        self.host_mounts: list[tuple[str, str, bool]] = [("/usr", "/usr", True)]

    # -- what clients need -------------------------------------------------
    @property
    def host_address(self) -> str:
        """This machine's address on the nodes' bridge: pods reach musterd
        here, and the apiserver listens here."""
        return self.hosts.gateway

    @property
    def api_server(self) -> str:
        return f"https://{self.host_address}:{_API_PORT}"

    @property
    def ca_file(self) -> str:
        return str(self.dir / "pki" / "ca.crt")

    @property
    def token_file(self) -> str:
        return str(self.dir / "admin.token")

    @property
    def kubeconfig(self) -> str:
        return str(self.dir / "admin.kubeconfig")

    def node_address(self, node: str) -> str:
        return self.hosts.address(self.node_names.index(node))

    def _free_pod_base(self) -> int:
        """The first of 4 consecutive 10.219.x.0/24 pod subnets that no route
        of this machine uses yet (another testbed's), from a pid-derived start."""
        routes = run("ip", "route", "show", "root", "10.219.0.0/16").stdout.splitlines()
        used = {int(line.split(".")[2]) for line in routes if line.startswith("10.219.")}
        for k in range(60):
            base = ((self._pod_base // 4 + k) % 60) * 4
            if not used & set(range(base, base + 4)):
                return base
        raise RuntimeError("kubernetes testbed: every 10.219.x.0/24 pod subnet is routed already (stale testbeds?)")

    def pod_subnet(self, node: str) -> str:
        return f"10.219.{self._pod_base + self.node_names.index(node)}.0/24"

    def musterd_backend_args(self, mounts) -> list[str]:
        """`--backend-opt` pairs for `musterd --backend kubernetes` against this testbed: its API server,
        token, CA, namespace and image, the address pods reach the host at, `mounts` (host paths
        mounted read-only at the same path in every pod, besides /usr: the image is an empty root),
        and its kubectl (mpi clusters start Open MPI's daemons in the pods with `kubectl exec`)."""
        mounts = sorted({"/usr", *(os.path.realpath(m) for m in mounts)})
        opts = {"api_server": self.api_server, "token_file": self.token_file, "ca_file": self.ca_file,
                "namespace": self.namespace, "image": self.image, "image_pull_policy": "Never",
                "master_address": self.host_address, "host_mounts": ",".join(mounts), "poll_ms": "500",
                "kubectl": str(KUBE_BIN / "kubectl")}
        args = []
        for k, v in opts.items():
            args += ["--backend-opt", f"{k}={v}"]
        return args

    def kubectl(self, *args: str, check: bool = True, timeout: float = 60,
                input: str | None = None) -> subprocess.CompletedProcess:
        """kubectl as the cluster admin; raises with its stderr when check and it fails."""
        r = subprocess.run([str(KUBE_BIN / "kubectl"), "--kubeconfig", self.kubeconfig, *args],
                           capture_output=True, text=True, timeout=timeout, input=input)
        if check and r.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)} failed ({r.returncode}): {r.stderr.strip()}")
        return r

    def get_json(self, *args: str) -> dict:
        return json.loads(self.kubectl("get", "-o", "json", *args).stdout)

    def pod_manifest(self, name: str, command: list[str], cpu: str = "500m", memory: str = "64Mi",
                     node: str | None = None, labels: dict | None = None) -> dict:
        """A worker-like pod: `image`, requests = limits, restartPolicy Never,
        host_mounts by hostPath; pinned to node when given."""
        volumes, mounts = [], []
        for k, (host, inside, read_only) in enumerate(self.host_mounts):
            volumes.append({"name": f"host{k}", "hostPath": {"path": host, "type": "Directory"}})
            mounts.append({"name": f"host{k}", "mountPath": inside, "readOnly": read_only})
        resources = {"cpu": cpu, "memory": memory}
        spec = {"restartPolicy": "Never", "automountServiceAccountToken": False, "volumes": volumes,
                "containers": [{"name": "main", "image": self.image, "imagePullPolicy": "Never",
                                "command": command, "volumeMounts": mounts,
                                "resources": {"requests": resources, "limits": resources}}]}
        if node:
            spec["nodeName"] = node
        return {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": self.namespace, "labels": labels or {}}, "spec": spec}

    def create(self, manifest: dict) -> None:
        self.kubectl("create", "-f", "-", input=json.dumps(manifest))

    def wait_pod(self, name: str, phases: tuple = ("Succeeded", "Failed"), timeout: float = 120) -> dict:
        """Waits for the pod to reach one of phases; returns it (as JSON)."""
        deadline = time.monotonic() + timeout
        pod: dict = {}
        while time.monotonic() < deadline:
            r = self.kubectl("get", "pod", name, "-o", "json", check=False, timeout=20)
            if r.returncode == 0:
                pod = json.loads(r.stdout)
                if pod.get("status", {}).get("phase") in phases:
                    return pod
            time.sleep(0.5)
        events = self.kubectl("get", "events", "--field-selector", f"involvedObject.name={name}", check=False).stdout
        raise RuntimeError(f"pod {name} did not reach {'/'.join(phases)} within {timeout:.0f} s; it is "
                           f"{json.dumps(pod.get('status', {}))[:2000]}\nevents:\n{events}\n{self.log_tails(800)}")

    # -- life cycle --------------------------------------------------------
    def __enter__(self) -> "KubernetesTestbed":
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        atexit.register(self.stop)
        remove_stale_testbeds(self.tag)
        self._save_state()
        self.hosts.create()
        self._save_state()
        self._pod_base = self._free_pod_base()
        self._pki()
        self._etcd()
        self._apiserver()
        self._controller_manager()
        self._scheduler()
        self._images()
        self._kernel = {k: Path("/proc/sys", k).read_text() for k in _KERNEL_SETTINGS}
        self._save_state()
        for i, node in enumerate(self.node_names):
            self._node(i, node)
        self._routes()
        for node in self.node_names:
            self.wait_node(node, ready=True, timeout=120)
        self._namespace()

    def stop(self) -> None:
        if not self.dir.exists():
            return
        if os.environ.get("MUSTER_KUBE_KEEP_LOGS") == "1" and (self.dir / "logs").is_dir():
            kept = Path(tempfile.mkdtemp(prefix=f"muster-kube-logs-{self.tag}-"))
            shutil.copytree(self.dir / "logs", kept, dirs_exist_ok=True)
            print(f"kubernetes testbed: its logs are kept in {kept}")
        for name in [n for n in reversed(list(self.procs)) if n.startswith("kubelet.")]:
            self._kill(name)
        for name in [n for n in reversed(list(self.procs)) if n.startswith("containerd.")]:
            self._kill(name)
        for cgroup in self._cgroups:  # the pods' processes
            kill_cgroup_tree(cgroup)
        for name in reversed(list(self.procs)):
            self._kill(name, signal.SIGTERM)
        self.procs.clear()
        kill_processes_mentioning(str(self.dir))  # containerd's shims
        self.hosts.remove()
        remove_leftovers(self._state())

    def _state(self) -> dict:
        return {"owner": os.getpid(), "dir": str(self.dir), "etcd_dir": str(self._etcd_dir),
                "netns": self.hosts.namespaces, "bridge": self.hosts.bridge, "cgroups": self._cgroups,
                "kernel": self._kernel}

    def _save_state(self) -> None:
        (self.dir / "state.json").write_text(json.dumps(self._state()))

    def _kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        p = self.procs.get(name)
        if p is None or p.poll() is not None:
            return
        try:
            os.killpg(p.pid, sig)
            p.wait(timeout=10)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()

    # -- logs and waiting --------------------------------------------------
    def log(self, name: str) -> str:
        try:
            return (self.dir / "logs" / f"{name}.log").read_text(errors="replace")
        except OSError:
            return ""

    def log_tails(self, chars: int = 1500) -> str:
        """The end of every component's log, for a failed test's report."""
        out = []
        for path in sorted((self.dir / "logs").glob("*.log")):
            out.append(f"--- {path} (last {chars} characters)\n{path.read_text(errors='replace')[-chars:]}")
        return "\n".join(out)

    def _fail(self, component: str, what: str) -> None:
        raise RuntimeError(f"kubernetes testbed: {component}: {what} (the testbed's logs are removed when it "
                           f"stops; MUSTER_KUBE_KEEP_LOGS=1 keeps a copy)\n"
                           f"--- {component}:\n{self.log(component)[-5000:]}\n{self.log_tails(800)}")

    def _wait(self, component: str, cond, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            p = self.procs.get(component)
            if p is not None and p.poll() is not None:
                self._fail(component, f"exited with {p.returncode} before it could {what}")
            try:
                if cond():
                    return
            except (OSError, ValueError, RuntimeError, subprocess.SubprocessError):
                pass
            time.sleep(0.3)
        self._fail(component, f"did not {what} within {timeout:.0f} s")

    def _spawn(self, name: str, argv: list[str]) -> subprocess.Popen:
        (self.dir / "logs").mkdir(exist_ok=True)
        with open(self.dir / "logs" / f"{name}.log", "ab") as out:
            p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 start_new_session=True)
        self.procs[name] = p
        return p

    def _https_ok(self, url: str, verify: bool = True, token: str | None = None) -> bool:
        ctx = ssl.create_default_context(cafile=self.ca_file) if verify else ssl._create_unverified_context()
        req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
        with urllib.request.urlopen(req, context=ctx, timeout=3) as r:
            return r.status == 200 and r.read().strip() == b"ok"

    # -- certificates and credentials --------------------------------------
    def _pki(self) -> None:
        pki = self.dir / "pki"
        pki.mkdir()

        def openssl(*args: str) -> None:
            run("openssl", *args)

        openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(pki / "ca.key"), "-out",
                self.ca_file, "-days", "30", "-subj", f"/CN=muster-testbed-{self.tag}-ca")

        def signed(name: str, subject: str, extensions: str) -> None:
            (pki / f"{name}.ext").write_text(extensions)
            openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(pki / f"{name}.key"), "-out",
                    str(pki / f"{name}.csr"), "-subj", subject)
            openssl("x509", "-req", "-in", str(pki / f"{name}.csr"), "-CA", self.ca_file, "-CAkey",
                    str(pki / "ca.key"), "-CAcreateserial", "-out", str(pki / f"{name}.crt"), "-days", "30",
                    "-extfile", str(pki / f"{name}.ext"))

        sans = ",".join([f"IP:{self.host_address}", "IP:127.0.0.1", f"IP:{self._service_prefix}1", "DNS:localhost",
                         "DNS:kubernetes", "DNS:kubernetes.default", "DNS:kubernetes.default.svc",
                         "DNS:kubernetes.default.svc.cluster.local"])
        signed("apiserver", "/CN=kube-apiserver",
               f"subjectAltName={sans}\nextendedKeyUsage=serverAuth\nkeyUsage=digitalSignature,keyEncipherment\n")
        signed("apiserver-kubelet-client", "/O=system:masters/CN=kube-apiserver-kubelet-client",
               "extendedKeyUsage=clientAuth\nkeyUsage=digitalSignature,keyEncipherment\n")
        openssl("genrsa", "-out", str(pki / "sa.key"), "2048")
        openssl("rsa", "-in", str(pki / "sa.key"), "-pubout", "-out", str(pki / "sa.pub"))

        # Bearer tokens: token,user,uid,"groups".
        self._tokens = {"admin": self.token, "controller-manager": secrets.token_hex(16),
                        "scheduler": secrets.token_hex(16)}
        rows = [f'{self.token},muster-admin,muster-admin,"system:masters"',
                f"{self._tokens['controller-manager']},system:kube-controller-manager,system:kube-controller-manager",
                f"{self._tokens['scheduler']},system:kube-scheduler,system:kube-scheduler"]
        for node in self.node_names:
            self._tokens[node] = secrets.token_hex(16)
            rows.append(f'{self._tokens[node]},system:node:{node},system:node:{node},"system:nodes"')
        (pki / "tokens.csv").write_text("\n".join(rows) + "\n")
        Path(self.token_file).write_text(self.token)
        Path(self.token_file).chmod(0o600)
        self._write_kubeconfig(Path(self.kubeconfig), "admin", self.namespace)
        self._write_kubeconfig(self.dir / "controller-manager.kubeconfig", "controller-manager")
        self._write_kubeconfig(self.dir / "scheduler.kubeconfig", "scheduler")
        for node in self.node_names:
            self._write_kubeconfig(self.dir / f"{node}.kubeconfig", node)

    def _write_kubeconfig(self, path: Path, who: str, namespace: str = "default") -> None:
        config = {
            "apiVersion": "v1", "kind": "Config", "current-context": "testbed",
            "clusters": [{"name": "testbed", "cluster": {"server": self.api_server,
                                                         "certificate-authority": self.ca_file}}],
            "users": [{"name": who, "user": {"token": self._tokens[who]}}],
            "contexts": [{"name": "testbed", "context": {"cluster": "testbed", "user": who,
                                                         "namespace": namespace}}],
        }
        path.write_text(json.dumps(config, indent=1))
        path.chmod(0o600)

    # -- the control plane -------------------------------------------------
    def _etcd(self) -> None:
        client, peer = _free_port(), _free_port()
        self._etcd_url = f"http://127.0.0.1:{client}"
        # The data directory's path names the testbed, so a stale etcd is
        # found by it (_kill_processes_mentioning) like every other program.
        self._spawn("etcd", ["etcd", "--name", "testbed", "--data-dir", str(self._etcd_dir / "data"),
                             "--listen-client-urls", self._etcd_url, "--advertise-client-urls", self._etcd_url,
                             "--listen-peer-urls", f"http://127.0.0.1:{peer}",
                             "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
                             "--initial-cluster", f"testbed=http://127.0.0.1:{peer}",
                             "--initial-cluster-token", self.dir.name, "--log-outputs", "stderr",
                             "--logger", "zap"])

        def healthy() -> bool:
            with urllib.request.urlopen(self._etcd_url + "/health", timeout=2) as r:
                return json.loads(r.read()).get("health") == "true"
        self._wait("etcd", healthy, 30, "answer /health")

    def _apiserver(self) -> None:
        pki = self.dir / "pki"
        self._spawn("kube-apiserver", [
            str(KUBE_BIN / "kube-apiserver"),
            f"--advertise-address={self.host_address}", f"--bind-address={self.host_address}",
            f"--secure-port={_API_PORT}", "--insecure-port=0", f"--cert-dir={pki}",
            f"--etcd-servers={self._etcd_url}",
            f"--tls-cert-file={pki / 'apiserver.crt'}", f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={self.ca_file}", f"--token-auth-file={pki / 'tokens.csv'}",
            "--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction",
            f"--service-cluster-ip-range={self._service_prefix}0/24",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--kubelet-client-certificate={pki / 'apiserver-kubelet-client.crt'}",
            f"--kubelet-client-key={pki / 'apiserver-kubelet-client.key'}",
            "--kubelet-preferred-address-types=InternalIP,Hostname",
            "--default-not-ready-toleration-seconds=10", "--default-unreachable-toleration-seconds=10",
            "--allow-privileged=true", "--profiling=false", "--v=1"])
        self._wait("kube-apiserver", lambda: self._https_ok(self.api_server + "/readyz", token=self.token), 120,
                   "answer /readyz")

    def _controller_manager(self) -> None:
        pki = self.dir / "pki"
        cert_dir = self.dir / "controller-manager"
        cert_dir.mkdir()
        self._spawn("kube-controller-manager", [
            str(KUBE_BIN / "kube-controller-manager"),
            f"--kubeconfig={self.dir / 'controller-manager.kubeconfig'}",
            f"--bind-address={self.host_address}", "--secure-port=10257", "--port=0", f"--cert-dir={cert_dir}",
            "--leader-elect=false", "--use-service-account-credentials=true",
            f"--service-account-private-key-file={pki / 'sa.key'}", f"--root-ca-file={self.ca_file}",
            f"--cluster-signing-cert-file={self.ca_file}", f"--cluster-signing-key-file={pki / 'ca.key'}",
            "--node-monitor-period=2s", "--node-monitor-grace-period=20s", "--pod-eviction-timeout=20s",
            "--profiling=false", "--v=1"])

    def _scheduler(self) -> None:
        cert_dir = self.dir / "scheduler"
        cert_dir.mkdir()
        self._spawn("kube-scheduler", [
            str(KUBE_BIN / "kube-scheduler"), f"--kubeconfig={self.dir / 'scheduler.kubeconfig'}",
            f"--bind-address={self.host_address}", "--secure-port=10259", "--port=0", f"--cert-dir={cert_dir}",
            "--leader-elect=false", "--profiling=false", "--v=1"])
        self._wait("kube-controller-manager",
                   lambda: self._https_ok(f"https://{self.host_address}:10257/healthz", verify=False), 60,
                   "answer /healthz")
        self._wait("kube-scheduler",
                   lambda: self._https_ok(f"https://{self.host_address}:10259/healthz", verify=False), 60,
                   "answer /healthz")

    def _images(self) -> None:
        images = self.dir / "images"
        images.mkdir()
        write_pause_image(KUBE_BIN / "pause", images / "pause.tar")
        write_base_image(images / "base.tar")

    # -- nodes -------------------------------------------------------------
    def _node(self, i: int, node: str) -> None:
        root = self.dir / node
        root.mkdir()
        self._make_cgroup(self._cgroups[i])
        (root / "cni" / "net.d").mkdir(parents=True)
        (root / "cni" / "net.d" / "10-muster.conflist").write_text(
            json.dumps(cni_conflist(self.pod_subnet(node), root / "cni" / "ipam"), indent=1))
        (root / "containerd.toml").write_text(containerd_toml(root, PAUSE_IMAGE, _CNI_BIN))
        binds = []
        for fixed in _FIXED_PATHS:
            private = root / "fixed" / fixed.strip("/").replace("/", "-")
            private.mkdir(parents=True)
            Path(fixed).mkdir(parents=True, exist_ok=True)  # the mount point, empty on the machine
            binds.append(f"mount --bind {private} {fixed}")
        # One mount namespace for containerd and the kubelet (nsenter'd into
        # it), private to the node: see the module's docstring.
        script = " && ".join(binds + [f"exec containerd --config {root / 'containerd.toml'}"])
        self._spawn(f"containerd.{node}", self.hosts.argv(i, [
            "unshare", "--mount", "--propagation", "private", "sh", "-c", script]))
        sock = root / "containerd.sock"
        self._wait(f"containerd.{node}", lambda: sock.exists() and self._ctr(node, "version").returncode == 0,
                   30, "answer on its socket")
        for image in ("pause.tar", "base.tar"):
            r = self._ctr(node, "images", "import", str(self.dir / "images" / image))
            if r.returncode != 0:
                self._fail(f"containerd.{node}", f"ctr images import {image} failed: {r.stderr.strip()}")
        (root / "kubelet.json").write_text(json.dumps(kubelet_configuration(
            self.hosts.address(i), self.ca_file, self._cgroups[i], self.cpus, self.memory_mb), indent=1))
        self._start_kubelet(node)

    def _ctr(self, node: str, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["ctr", "--address", str(self.dir / node / "containerd.sock"), "-n", "k8s.io",
                               *args], capture_output=True, text=True, timeout=120)

    def _make_cgroup(self, name: str) -> None:
        for h in cgroup_hierarchies():
            (h / name).mkdir(exist_ok=True)
            if h.name == "cpuset":  # a new cpuset has no CPUs or memory nodes until given its parent's
                for f in ("cpuset.cpus", "cpuset.mems"):
                    (h / name / f).write_text((h / f).read_text())

    def _start_kubelet(self, node: str) -> None:
        i = self.node_names.index(node)
        root = self.dir / node
        containerd = self.procs[f"containerd.{node}"].pid
        self._spawn(f"kubelet.{node}", [
            "nsenter", f"--target={containerd}", "--mount", "--net",
            str(KUBE_BIN / "kubelet"), f"--config={root / 'kubelet.json'}",
            f"--kubeconfig={self.dir / f'{node}.kubeconfig'}", f"--root-dir={root / 'kubelet'}",
            f"--hostname-override={node}", f"--node-ip={self.hosts.address(i)}",
            "--container-runtime=remote", f"--container-runtime-endpoint=unix://{root / 'containerd.sock'}",
            f"--pod-infra-container-image={PAUSE_IMAGE}", "--runtime-request-timeout=2m", "--v=1"])

    def _routes(self) -> None:
        for i, node in enumerate(self.node_names):
            run("ip", "route", "add", self.pod_subnet(node), "via", self.hosts.address(i))
            for j, other in enumerate(self.node_names):
                if j != i:
                    run("ip", "-n", self.hosts.netns(j), "route", "add", self.pod_subnet(node), "via",
                         self.hosts.address(i))

    def node_ready(self, node: str) -> bool | None:
        """The node's Ready condition (None: not registered or unknown)."""
        r = self.kubectl("get", "node", node, "-o", "json", check=False, timeout=20)
        if r.returncode != 0:
            return None
        for c in json.loads(r.stdout).get("status", {}).get("conditions", []):
            if c["type"] == "Ready":
                return {"True": True, "False": False}.get(c["status"])
        return None

    def wait_node(self, node: str, ready: bool = True, timeout: float = 120) -> None:
        """Waits until the node's Ready condition is ready (True) or not (False
        or Unknown, as after its kubelet stopped)."""
        component = f"kubelet.{node}"
        if not ready:
            component = "kube-controller-manager"  # it marks a silent node NotReady
        self._wait(component, lambda: (self.node_ready(node) is True) == ready, timeout,
                   f"see node {node} {'Ready' if ready else 'NotReady'}")

    def _namespace(self) -> None:
        self.kubectl("create", "namespace", self.namespace)

        def default_account() -> bool:
            r = self.kubectl("get", "serviceaccount", "default", "-n", self.namespace, "-o", "json", check=False)
            return r.returncode == 0 and bool(json.loads(r.stdout).get("secrets"))
        self._wait("kube-controller-manager", default_account, 60,
                   f"create the default service account and its token in namespace {self.namespace}")

    # -- faults ------------------------------------------------------------
    def kill_kubelet(self, node: str) -> None:
        """SIGKILL to the node's kubelet, as a node crash would (its pods and
        containerd keep running, unseen). About 20 s later
        (node-monitor-grace-period) the node's Ready condition is Unknown and
        its pods' Ready condition False; wait_node(node, ready=False). With
        two or more nodes, its pods are evicted 10-20 s after that (a deletion
        timestamp: they stay Terminating, since no kubelet confirms). With one
        node nothing is evicted: the controller manager treats every node of
        a zone down as its own outage, not the nodes'. restart_kubelet brings
        the node back; its kubelet then ends the evicted pods."""
        self._kill(f"kubelet.{node}")

    def restart_kubelet(self, node: str, timeout: float = 120) -> None:
        """Starts the node's kubelet again and waits for the node to be Ready."""
        self._kill(f"kubelet.{node}")
        self._start_kubelet(node)
        self.wait_node(node, ready=True, timeout=timeout)


if __name__ == "__main__":  # manual smoke: python3 tests/kubernetes_testbed.py [nodes]
    import sys
    why = have_kubernetes()
    if why:
        raise SystemExit(f"skip: {why}")
    t0 = time.monotonic()
    with KubernetesTestbed(nodes=int(sys.argv[1]) if len(sys.argv) > 1 else 1, tag="man") as bed:
        print(f"up in {time.monotonic() - t0:.1f} s: {bed.api_server}")
        print(bed.kubectl("get", "nodes", "-o", "wide").stdout)
