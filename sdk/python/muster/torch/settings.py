"""Horovod's environment variables, read once where muster.torch needs them.

  HOROVOD_FUSION_THRESHOLD  bytes fused into one allreduce (0: no fusion);
                            MUSTER_FUSION_THRESHOLD_MB (megabytes) wins if set
  HOROVOD_TIMELINE          Chrome-trace file of the fusion buckets (rank 0);
                            MUSTER_TIMELINE wins if set
  HOROVOD_CYCLE_TIME,       accepted and ignored, with a log line: muster has no
  HOROVOD_CACHE_CAPACITY    negotiation cycle or response cache to tune (every
                            rank issues its buckets in a fixed order)
  MUSTER_COMM_TIMEOUT_MS    how long a silent peer is waited for (runtime's own)
"""
import logging
import os

log = logging.getLogger("muster.torch")

_IGNORED = {
    "HOROVOD_CYCLE_TIME": "muster has no negotiation cycle: buckets go out as soon as they are full",
    "HOROVOD_CACHE_CAPACITY": "muster has no response cache: ranks issue buckets in a fixed order",
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
    return os.environ.get("MUSTER_TIMELINE") or os.environ.get("HOROVOD_TIMELINE") or ""


def timeout_ms():
    return 0  # the runtime reads MUSTER_COMM_TIMEOUT_MS itself
