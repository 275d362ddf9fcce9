"""Horovod's environment variables, read once where muster.torch needs them.

  HOROVOD_FUSION_THRESHOLD  bytes fused into one allreduce (0: no fusion);
                            MUSTER_FUSION_THRESHOLD_MB (megabytes) wins if set
  HOROVOD_TIMELINE          Chrome-trace file of the DistributedOptimizer's fusion
                            buckets (rank 0); MUSTER_TIMELINE wins if set.
                            DYNAMIC: no file until hvd.start_timeline(path)
                            (which records the collectives API's ops)
  HOROVOD_CYCLE_TIME        milliseconds between negotiation rounds while a rank
                            has ops in flight (engine.py; default 1)
  HOROVOD_CACHE_CAPACITY    accepted and ignored, with a log line: muster has no
                            response cache (a round carries every new op's name)
  MUSTER_COMM_TIMEOUT_MS    how long a silent peer is waited for (runtime's own),
                            and how long an op waits for the other ranks to start
                            it before it fails naming them
  MUSTER_SHARED_GRADIENTS   where the DistributedOptimizer keeps gradients: 1 (or
                            true) in the runtime's shared memory (the direct
                            allreduce reads them in place), 0 (or false) in the
                            process's own memory,
                            auto (default) shared unless only the process's own
                            memory gets transparent huge pages (shared_gradients());
                            the same for DDP's buckets on the "muster" backend
                            (muster.torch.distributed)

Every one is read with muster.settings' strict reader (the daemon's dialect):
a value that does not parse is a SettingError (a ValueError) naming it.
"""
import logging
import os

from ..settings import Settings

log = logging.getLogger("muster.torch")

_IGNORED = {
    "HOROVOD_CACHE_CAPACITY": "muster has no response cache: each round names the new ops",
    "HOROVOD_HIERARCHICAL_ALLREDUCE": "the runtime picks shared memory within a host by itself",
    "HOROVOD_AUTOTUNE": "no autotuner; set HOROVOD_FUSION_THRESHOLD instead",
}


def log_ignored():
    env = Settings.environment()
    for name, why in _IGNORED.items():
        if env.raw(name) is not None:
            logging.getLogger("muster.torch").warning("muster.torch: %s=%s accepted and ignored (%s)",
                                                      name, env.raw(name), why)


def fusion_threshold_bytes():
    """The fusion threshold in bytes; 0 leaves it to the runtime (MUSTER_FUSION_THRESHOLD_MB, else 64 MB)."""
    env = Settings.environment()
    if env.raw("MUSTER_FUSION_THRESHOLD_MB") is not None:
        return 0
    value = env.integer("HOROVOD_FUSION_THRESHOLD", None, 0, (1 << 63) - 1)
    if value is None:
        return 0
    return max(value, 1)  # 0 in Horovod: no fusion, i.e. one tensor per bucket


def timeline_path():
    """The DistributedOptimizer's timeline file; "" for none.

    DYNAMIC (Horovod's "no file until start_timeline") gives os.devnull: the
    C++ optimizer reads HOROVOD_TIMELINE itself when given "", and would
    create a file named DYNAMIC.
    """
    env = Settings.environment()
    path = env.text("MUSTER_TIMELINE") or env.text("HOROVOD_TIMELINE")
    return os.devnull if path.strip().upper() == "DYNAMIC" else path


def cycle_seconds():
    """HOROVOD_CYCLE_TIME (milliseconds, default 1) in seconds."""
    return Settings.environment().number("HOROVOD_CYCLE_TIME", 1.0, 0, 10000) / 1000.0


_THP = "/sys/kernel/mm/transparent_hugepage/"


def _thp_mode(name, root=_THP):
    """The bracketed choice in a THP sysfs file ("always", "madvise", "never", ...); "" if unreadable."""
    try:
        with open(os.path.join(root, name)) as f:
            text = f.read()
    except OSError:
        return ""
    start, end = text.find("["), text.find("]")
    return text[start + 1:end] if 0 <= start < end else ""


def private_memory_huge(enabled, glibc_tunables, torch_thp=""):
    """Whether torch's large CPU tensors get transparent huge pages here.

    `enabled` is /sys/kernel/mm/transparent_hugepage/enabled's choice:
    "always" backs any large anonymous mapping; "madvise" only what asks,
    which torch 1.13's allocator never does, but glibc's malloc does under
    GLIBC_TUNABLES=glibc.malloc.hugetlb=1 (and torch 2.x under
    THP_MEM_ALLOC_ENABLE=1).
    """
    if enabled == "always":
        return True
    if enabled != "madvise":
        return False
    tunables = dict(kv.split("=", 1) for kv in glibc_tunables.split(":") if "=" in kv)
    return tunables.get("glibc.malloc.hugetlb", "0") in ("1", "2") or torch_thp == "1"


def shared_memory_huge(shmem_enabled):
    """Whether the runtime's shared memory (tmpfs: shm_open) gets transparent huge pages."""
    return shmem_enabled in ("always", "within_size", "force")


def shared_gradients(environ=None, thp_root=_THP):
    """Whether the DistributedOptimizer keeps gradients in the runtime's shared memory.

    Shared, the direct allreduce reads every rank's gradients in place (no
    staging copy); private, the allreduce stages them through the ring's
    slots. But backward writes every gradient, and on a host where torch's
    own tensors get huge pages while shared memory does not, gradients on
    4 KiB pages cost more in the backward pass's TLB misses than the staging
    saves: bench/torch, 25 M-parameter MLP, 2 ranks on a VM with
    glibc.malloc.hugetlb=1: 256 ms a step shared against 169 ms private.
    """
    env = os.environ if environ is None else environ
    choice = Settings.environment(env).choice("MUSTER_SHARED_GRADIENTS", "auto", ["auto", "true", "false", "1", "0"])
    if choice != "auto":
        return choice in ("true", "1")
    private = private_memory_huge(_thp_mode("enabled", thp_root), env.get("GLIBC_TUNABLES", ""),
                                  env.get("THP_MEM_ALLOC_ENABLE", ""))
    return not private or shared_memory_huge(_thp_mode("shmem_enabled", thp_root))
