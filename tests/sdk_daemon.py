"""A real musterd for SDK integration tests, started as a subprocess.

Daemon(project_dir, state_dir).start() runs $MUSTER_BINARY_DIR/bin/musterd
on 127.0.0.1 with a port the OS picks (--listen 127.0.0.1:0) and the local
backend, waits until it has written <state>/musterd.json and answers
/healthz, and sets nothing global: callers read .url / .token / .env().
A daemon listening beyond loopback serves https: .tls (a muster.tls.TlsVerify
pinning musterd.json's fingerprint) verifies it, and .opener() is a urllib
opener that does.
stop() first stops every worker through the API, then ends the daemon (its
process group), then kills, by pid, any leftover process that carries this
daemon's MUSTER_URL in its environment (workers outlive the daemon by design:
a restarted daemon adopts them), so a failing test leaves nothing behind.

conforming_sdk() makes every answer the Python SDK receives meanwhile be
checked against api/openapi.yaml (tests/openapi_contract.py).

A module's daemon fixture is usually:

    @pytest.fixture(scope="module")
    def daemon(tmp_path_factory):
        project = write_scripts(tmp_path_factory.mktemp("project"), SCRIPTS)
        with Daemon(project, tmp_path_factory.mktemp("state")) as d, sdk_session(d, check_contract=True):
            yield d

sdk_session() gives the module-level muster.* calls the environment of a
notebook beside the daemon and undoes it (and stops the clusters the tests
left running) at the end.
"""
import contextlib
import json
import os
import pathlib
import signal
import subprocess
import textwrap
import time
import urllib.error
import urllib.request


def binary_dir():
    return os.environ.get("MUSTER_BINARY_DIR") or os.path.join(os.path.dirname(__file__), "..", "build")


def musterd_path():
    return os.path.join(binary_dir(), "bin", "musterd")


class Daemon:
    """`unset_env`: names left out of musterd's environment (e.g. PYTHONPATH, as a
    musterd started from a plain shell has none)."""

    def __init__(self, project_dir, state_dir, extra_args=(), listen="127.0.0.1:0", backend="local", unset_env=()):
        self.project_dir = str(project_dir)
        self.listen = listen
        self.backend = backend
        self.state_dir = str(state_dir)
        self.extra_args = list(extra_args)
        self.unset_env = list(unset_env)
        self.proc = None
        self.url = None
        self.token = None
        self.tls = None  # https: what verifies the daemon's certificate
        self.log_path = os.path.join(self.state_dir, "musterd.log")

    def env(self):
        """Environment for SDK calls and child programs: only the state dir, so discovery is exercised."""
        env = dict(os.environ)
        env.pop("MUSTER_URL", None)
        env.pop("MUSTER_TOKEN", None)
        env["MUSTER_STATE_DIR"] = self.state_dir
        return env

    def log(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()[-4000:]
        except OSError:
            return ""

    def start(self, timeout=30):
        os.makedirs(self.state_dir, exist_ok=True)
        info = os.path.join(self.state_dir, "musterd.json")
        if os.path.exists(info):
            os.unlink(info)
        cmd = [musterd_path(), "--listen", self.listen, "--project-dir", self.project_dir,
               "--state-dir", self.state_dir, "--backend", self.backend] + self.extra_args
        env = {k: v for k, v in os.environ.items() if k not in self.unset_env}
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True, env=env)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("musterd exited with %s:\n%s" % (self.proc.returncode, self.log()))
            if self._ready(info):
                return self
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("musterd not ready within %s s:\n%s" % (timeout, self.log()))

    def client(self, **kwargs):
        """A muster.Client for this daemon (its certificate pinned over https)."""
        import muster
        return muster.Client(self.url, self.token, tls_fingerprint=self.tls.fingerprint if self.tls else None,
                             **kwargs)

    def opener(self):
        """A urllib opener without proxies that verifies this daemon's certificate (https)."""
        from muster._http import opener
        return opener(self.url, self.tls)

    def _ready(self, info):
        from muster.tls import TlsVerify
        try:
            with open(info) as f:
                data = json.load(f)
            url = data["url"].rstrip("/")
            with open(os.path.join(self.state_dir, "token")) as f:
                token = f.read().strip()
            self.url = url
            self.tls = TlsVerify(None, data["tls"]["fingerprint"], info) if data.get("tls") else None
            with self.opener().open(url + "/healthz", timeout=2) as resp:
                if resp.status != 200:
                    return False
        except (OSError, ValueError, KeyError):
            return False
        self.token = token
        return bool(token)

    def stop(self):
        if self.proc is None:
            return
        if self.url and self.token and self.proc.poll() is None:
            try:
                import muster
                muster.Client(self.url, self.token,
                              tls_fingerprint=self.tls.fingerprint if self.tls else None).stop_workers()
            except Exception:  # noqa: BLE001 - best effort; the sweep below is the safety net
                pass
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self.proc = None
        kill_processes_with_env("MUSTER_URL=" + self.url if self.url else None, self.state_dir)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


class RestApi:
    """musterd's REST API, raw, with the daemon's token (or another one per
    call): call() answers (status, body), the body parsed as JSON, else as
    text. With `observer` (openapi_contract.ResponseObserver) every answer is
    also checked against api/openapi.yaml. No proxy, whatever the environment."""

    def __init__(self, daemon, observer=None, timeout=60):
        self.url, self.token, self.timeout = daemon.url, daemon.token, timeout
        opener = daemon.opener()
        self.opener = observer.wrap(opener) if observer else opener

    def call(self, method, path, body=None, token=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Authorization": "Bearer " + (token or self.token),
                                              "Content-Type": "application/json"})
        try:
            with self.opener.open(req, timeout=self.timeout) as resp:
                raw, status = resp.read(), resp.status
        except urllib.error.HTTPError as e:
            raw, status = e.read(), e.code
        try:
            return status, json.loads(raw or b"null")
        except ValueError:
            return status, raw.decode("utf-8", "replace")


def write_scripts(project, scripts):
    """Writes each {name: body} of `scripts` (dedented) into the directory `project`; returns `project`."""
    for name, body in scripts.items():
        (pathlib.Path(project) / name).write_text(textwrap.dedent(body))
    return project


def stop_live_clusters():
    """Stops, through the SDK's discovered daemon, every cluster that has not ended (best effort)."""
    try:
        import muster
        for c in muster.list_clusters():
            if c["status"] not in ("succeeded", "failed", "stopped"):
                muster.stop_cluster(c)
    except Exception:  # noqa: BLE001 - the daemon's stop() is the safety net
        pass


@contextlib.contextmanager
def sdk_session(daemon, env=None, check_contract=False):
    """The process environment of a notebook beside `daemon`: MUSTER_URL and
    MUSTER_TOKEN unset and MUSTER_STATE_DIR set, so muster.* finds the daemon
    by discovery; `env` on top. With check_contract, inside conforming_sdk().
    On exit the clusters still running are stopped and os.environ is put back
    as it was."""
    saved = dict(os.environ)
    os.environ.pop("MUSTER_URL", None)
    os.environ.pop("MUSTER_TOKEN", None)
    os.environ["MUSTER_STATE_DIR"] = daemon.state_dir
    os.environ.update(env or {})
    try:
        if check_contract:
            with conforming_sdk():
                yield daemon
        else:
            yield daemon
    finally:
        stop_live_clusters()
        os.environ.clear()
        os.environ.update(saved)


@contextlib.contextmanager
def conforming_sdk():
    """Inside, every answer any muster.Client receives is checked against
    api/openapi.yaml (route, status, body schema; strictly, so a field
    renamed in the daemon and not in the document fails the call that got
    it). Yields the ResponseObserver; on exit, at least one answer must have
    been checked, so a hook that stopped working fails too."""
    from openapi_contract import observe_sdk
    observer, undo = observe_sdk()
    try:
        yield observer
    finally:
        undo()
    assert observer.total() > 0, "no musterd answer was checked against api/openapi.yaml"


def kill_processes_with_env(marker, cwd_under=None):
    """SIGKILLs (by pid) every process whose environment holds `marker` ("NAME=value")
    or whose working directory lies under `cwd_under`: the workers a test's daemon started."""
    needle = marker.encode() if marker else None
    root = os.path.realpath(cwd_under) + os.sep if cwd_under else None
    me = os.getpid()
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == me:
            continue
        hit = False
        if root:
            try:
                hit = (os.readlink("/proc/%s/cwd" % pid) + os.sep).startswith(root)
            except OSError:
                pass
        if not hit and needle:
            try:
                with open("/proc/%s/environ" % pid, "rb") as f:
                    entries = f.read().split(b"\0")
            except OSError:
                continue
            hit = needle in entries or any(e.startswith(needle + b"/") for e in entries)
        if hit:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except OSError:
                pass


def pid_alive(pid):
    """True if pid exists and is not a zombie."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def processes_with_env(entry):
    """pids (not zombies) whose environment holds `entry` ("NAME=value"), e.g. MUSTER_CLUSTER_ID=c-1."""
    needle = entry.encode()
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/environ" % pid, "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if needle in env and pid_alive(int(pid)):
            found.append(int(pid))
    return found


def agent_of(worker_id):
    """The pid of the muster-agent process of worker `worker_id`, or None."""
    for pid in processes_with_env("MUSTER_WORKER_ID=" + worker_id):
        try:
            with open("/proc/%d/comm" % pid) as f:
                if f.read().strip() == "muster-agent":
                    return pid
        except OSError:
            continue
    return None
