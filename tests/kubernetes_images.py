"""Container images for tests/kubernetes_testbed.py, made on this machine.

Nothing can be pulled here, so the testbed imports two images of its own into
every node's containerd (`ctr -n k8s.io images import`):

  - the sandbox image (PAUSE_IMAGE): the pause binary that scripts/kubernetes.sh
    compiles from the Kubernetes tree, as /pause;
  - the workers' base image (BASE_IMAGE): the skeleton of a Debian root with
    nothing in /usr. A worker pod mounts the machine's /usr read-only over it
    (hostPath), so the machine's muster-agent, python3, torch and Open MPI run
    in the pod. Debian is merged-usr, so /bin, /lib, /lib64 and /sbin are the
    same symlinks into /usr as on the machine, and the few /etc files those
    programs read (the loader's cache and configuration, the alternatives
    symlinks that choose BLAS and LAPACK, Open MPI's and Python's settings,
    the CA certificates) are copied from the machine when the image is made,
    so they match its /usr. A real cluster uses an image that holds
    muster-agent and the runtime instead.

Each image is an OCI image layout (oci-layout, index.json, blobs/sha256/...)
in one tar: one uncompressed layer, written with fixed times and owners so the
same inputs give the same digests.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
from pathlib import Path

PAUSE_IMAGE = "localhost/muster-pause:1"
BASE_IMAGE = "localhost/muster-base:1"

_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# /etc entries of the machine the base image copies (those that exist).
_ETC_COPIES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "openmpi", "libibverbs.d",
               "python3", "python3.11", "ssl", "ca-certificates.conf", "nsswitch.conf", "host.conf",
               "gai.conf", "localtime", "timezone", "debian_version", "os-release", "mime.types")

_PASSWD = "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
_GROUP = "root:x:0:\nnogroup:x:65534:\n"


class _Layer:
    """A layer tar built in memory, entries owned by root with time 0."""

    def __init__(self) -> None:
        self._buf = io.BytesIO()
        self._tar = tarfile.open(fileobj=self._buf, mode="w", format=tarfile.PAX_FORMAT)

    def _info(self, name: str, kind: bytes, mode: int) -> tarfile.TarInfo:
        info = tarfile.TarInfo(name)
        info.type, info.mode, info.mtime = kind, mode, 0
        info.uid = info.gid = 0
        info.uname = info.gname = "root"
        return info

    def dir(self, name: str, mode: int = 0o755) -> None:
        self._tar.addfile(self._info(name, tarfile.DIRTYPE, mode))

    def symlink(self, name: str, target: str) -> None:
        info = self._info(name, tarfile.SYMTYPE, 0o777)
        info.linkname = target
        self._tar.addfile(info)

    def file(self, name: str, data: bytes, mode: int = 0o644) -> None:
        info = self._info(name, tarfile.REGTYPE, mode)
        info.size = len(data)
        self._tar.addfile(info, io.BytesIO(data))

    def copy(self, source: Path, name: str) -> None:
        """source (a file, symlink or folder, recursively) as name; private
        folders (/etc/ssl/private's keys) are left out."""
        if source.name == "private":
            return
        if source.is_symlink():
            self.symlink(name, os.readlink(source))
        elif source.is_dir():
            self.dir(name, source.stat().st_mode & 0o7777)
            for child in sorted(source.iterdir()):
                self.copy(child, f"{name}/{child.name}")
        elif source.is_file():
            try:
                data = source.read_bytes()
            except OSError:
                return  # unreadable (a key file): not needed by the workers
            self.file(name, data, source.stat().st_mode & 0o7777)

    def bytes(self) -> bytes:
        self._tar.close()
        return self._buf.getvalue()


def _write_layout(path: Path, name: str, layer: bytes, config: dict) -> None:
    """One OCI image layout tar holding one image (name, one layer)."""
    blobs: dict[str, bytes] = {}

    def blob(data: bytes) -> dict:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        blobs[digest] = data
        return {"digest": digest, "size": len(data)}

    platform = {"architecture": "amd64", "os": "linux"}
    layer_desc = {"mediaType": "application/vnd.oci.image.layer.v1.tar", **blob(layer)}
    image_config = {**platform, "config": {"Env": [f"PATH={_PATH}"], **config},
                    "rootfs": {"type": "layers", "diff_ids": [layer_desc["digest"]]},
                    "history": [{"created_by": "tests/kubernetes_images.py"}]}
    config_desc = {"mediaType": "application/vnd.oci.image.config.v1+json",
                   **blob(json.dumps(image_config, sort_keys=True).encode())}
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": config_desc, "layers": [layer_desc]}
    manifest_desc = {"mediaType": "application/vnd.oci.image.manifest.v1+json",
                     **blob(json.dumps(manifest, sort_keys=True).encode()), "platform": platform,
                     "annotations": {"io.containerd.image.name": name,
                                     "org.opencontainers.image.ref.name": name.rsplit(":", 1)[1]}}
    index = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
             "manifests": [manifest_desc]}
    out = _Layer()
    out.file("oci-layout", json.dumps({"imageLayoutVersion": "1.0.0"}).encode())
    out.file("index.json", json.dumps(index, sort_keys=True).encode())
    out.dir("blobs")
    out.dir("blobs/sha256")
    for digest, data in sorted(blobs.items()):
        out.file("blobs/sha256/" + digest.split(":", 1)[1], data)
    path.write_bytes(out.bytes())


def write_pause_image(pause_binary: Path, path: Path) -> None:
    layer = _Layer()
    layer.file("pause", pause_binary.read_bytes(), 0o755)
    _write_layout(path, PAUSE_IMAGE, layer.bytes(), {"Entrypoint": ["/pause"]})


def write_base_image(path: Path, etc: Path = Path("/etc")) -> None:
    layer = _Layer()
    for d in ("usr", "etc", "proc", "sys", "dev", "var", "run", "home", "mnt", "opt", "srv"):
        layer.dir(d)
    layer.dir("tmp", 0o1777)
    layer.dir("var/tmp", 0o1777)
    layer.dir("root", 0o700)
    for link in ("bin", "lib", "lib64", "sbin"):
        layer.symlink(link, f"usr/{link}")
    layer.file("etc/passwd", _PASSWD.encode())
    layer.file("etc/group", _GROUP.encode())
    for name in _ETC_COPIES:
        source = etc / name
        if source.exists() or source.is_symlink():
            layer.copy(source, f"etc/{name}")
    _write_layout(path, BASE_IMAGE, layer.bytes(), {"Cmd": ["/bin/sh"], "WorkingDir": "/"})
