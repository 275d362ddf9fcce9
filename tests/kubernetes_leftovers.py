"""What a Kubernetes testbed (tests/kubernetes_testbed.py) leaves on the
machine, and how it is removed, also after a test that was killed.

A testbed writes a state file (<its folder>/state.json) as it goes: its
folder, etcd's folder, its network namespaces and bridge, its cgroup roots and
the kernel settings the kubelet changes. remove_leftovers(state) undoes them
in reverse: every process that names one of its folders (all of its programs
and containerd's shims do), every process in its cgroups (the pods), the
namespaces and the bridge (the routes go with it), the kernel settings, and
the folders. The kubelets' mounts need no unmounting: they live in the nodes'
own mount namespaces and end with them.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path


def run(*argv: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
    r = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({r.returncode}): {r.stderr.strip() or r.stdout.strip()}")
    return r


def cgroup_hierarchies() -> list[Path]:
    """Every mounted cgroup hierarchy under /sys/fs/cgroup (v1 controllers,
    name=systemd, and the hybrid's unified v2)."""
    found = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        _, target, fstype = line.split()[:3]
        if fstype in ("cgroup", "cgroup2") and target.startswith("/sys/fs/cgroup/"):
            found.append(Path(target))
    return found


def kill_cgroup_tree(name: str) -> None:
    """SIGKILL to every process in cgroup /<name> (all hierarchies), then the
    cgroups removed, deepest first."""
    roots = [h / name for h in cgroup_hierarchies() if (h / name).is_dir()]
    for _ in range(50):
        pids = set()
        for root in roots:
            for procs in root.rglob("cgroup.procs"):
                try:
                    pids.update(int(p) for p in procs.read_text().split())
                except OSError:
                    pass
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.1)
    for root in roots:
        for _ in range(20):
            for dirpath, _dirs, _files in sorted(os.walk(root, topdown=False), key=lambda w: -len(w[0])):
                try:
                    os.rmdir(dirpath)
                except OSError:
                    pass
            if not root.exists():
                break
            time.sleep(0.1)


def kill_processes_mentioning(text: str) -> None:
    """SIGKILL to every process whose command line mentions text (a testbed's
    folder: each of its programs is given a path in it)."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            if text.encode() in (proc / "cmdline").read_bytes():
                os.kill(int(proc.name), signal.SIGKILL)
        except (OSError, ProcessLookupError):
            pass


def unmount_under(folder: str) -> None:
    mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    for target in sorted((m for m in mounts if m == folder or m.startswith(folder + "/")), key=len, reverse=True):
        run("umount", "-l", target, check=False)


def remove_leftovers(state: dict) -> None:
    """Removes what a testbed described by its state file made, in reverse."""
    folder = state["dir"]
    for _ in range(2):  # again after the pods: a shim may have been starting one
        kill_processes_mentioning(folder)
        if state.get("etcd_dir"):
            kill_processes_mentioning(state["etcd_dir"])
        for cgroup in state.get("cgroups", []):
            kill_cgroup_tree(cgroup)
    for ns in state.get("netns", []):
        for pid in run("ip", "netns", "pids", ns, check=False).stdout.split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
        run("ip", "netns", "del", ns, check=False)
    if state.get("bridge"):
        run("ip", "link", "del", state["bridge"], check=False)  # its routes go with it
    for key, value in state.get("kernel", {}).items():
        try:
            Path("/proc/sys", key).write_text(value)
        except OSError:
            pass
    for path in (folder, state.get("etcd_dir")):
        if path:
            unmount_under(path)
            shutil.rmtree(path, ignore_errors=True)


def remove_stale_testbeds(tag: str) -> None:
    """Removes testbeds of this tag whose owner process is gone (a test that
    was killed before it could stop its testbed)."""
    for state_file in Path(tempfile.gettempdir()).glob(f"muster-kube-{tag}-*/state.json"):
        try:
            state = json.loads(state_file.read_text())
        except (OSError, ValueError):
            continue
        owner = state.get("owner", 0)
        if owner != os.getpid() and Path(f"/proc/{owner}").exists():
            continue  # a live testbed of another test
        remove_leftovers(state)
