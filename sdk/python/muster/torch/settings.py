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
"""
import logging
import os

log = logging.getLogger("muster.torch")

_IGNORED = {
    "HOROVOD_CACHE_CAPACITY": "muster has no response cache: each round names the new ops",
    "HOROVOD_HIERARCHICAL_ALLREDUCE": "the runtime picks shared memory within a host by itself",
    "HOROVOD_AUTOTUNE": "no autotuner; set HOROVOD_FUSION_THRESHOLD instead",
}


def log_ignored():
    for name, why in _IGNORED.items():
        if os.environ.get(name):
            logging.getLogger("muster.torch").warning("muster.torch: %s=%s accepted and ignored (%s)",
                                                      name, os.environ[name], why)


def fusion_threshold_bytes():
    """The fusion threshold in bytes; 0 leaves it to the runtime (MUSTER_FUSION_THRESHOLD_MB, else 64 MB)."""
    if os.environ.get("MUSTER_FUSION_THRESHOLD_MB"):
        return 0
    raw = os.environ.get("HOROVOD_FUSION_THRESHOLD", "").strip()
    if not raw:
        return 0
    try:
        value = int(raw)
    except ValueError:
        raise ValueError("HOROVOD_FUSION_THRESHOLD must be a number of bytes, got %r" % raw) from None
    if value < 0:
        raise ValueError("HOROVOD_FUSION_THRESHOLD must be >= 0, got %d" % value)
    return max(value, 1)  # 0 in Horovod: no fusion, i.e. one tensor per bucket


def timeline_path():
    """The DistributedOptimizer's timeline file; "" for none.

    DYNAMIC (Horovod's "no file until start_timeline") gives os.devnull: the
    C++ optimizer reads HOROVOD_TIMELINE itself when given "", and would
    create a file named DYNAMIC.
    """
    path = os.environ.get("MUSTER_TIMELINE") or os.environ.get("HOROVOD_TIMELINE") or ""
    return os.devnull if path.strip().upper() == "DYNAMIC" else path


def cycle_seconds():
    """HOROVOD_CYCLE_TIME (milliseconds, default 1) in seconds."""
    raw = os.environ.get("HOROVOD_CYCLE_TIME", "").strip()
    if not raw:
        return 0.001
    try:
        value = float(raw)
    except ValueError:
        raise ValueError("HOROVOD_CYCLE_TIME must be a number of milliseconds, got %r" % raw) from None
    if not 0 <= value <= 10000:
        raise ValueError("HOROVOD_CYCLE_TIME must be between 0 and 10000 milliseconds, got %r" % raw)
    return value / 1000.0


def timeout_ms():
    return 0  # the runtime reads MUSTER_COMM_TIMEOUT_MS itself
