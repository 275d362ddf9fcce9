"""muster.torch.settings: where the DistributedOptimizer keeps gradients (label unit).

settings.shared_gradients() reads the host's transparent-huge-page modes
(sysfs) and the process's environment; here the sysfs files are written to
a temporary directory, so every combination is checked on any host.
"""
import pytest

from muster.torch import settings


def thp_root(tmp_path, enabled, shmem):
    (tmp_path / "enabled").write_text(" ".join("[%s]" % m if m == enabled else m
                                              for m in ("always", "madvise", "never")) + "\n")
    (tmp_path / "shmem_enabled").write_text(" ".join("[%s]" % m if m == shmem else m
                                                    for m in ("always", "within_size", "advise", "never", "deny",
                                                              "force")) + "\n")
    return str(tmp_path)


@pytest.mark.parametrize("enabled,shmem,env,shared", [
    # torch's tensors on 4 KiB pages like shared memory: shared (the direct allreduce, no staging copy).
    ("madvise", "never", {}, True),
    ("never", "never", {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}, True),
    # Only private memory gets huge pages: gradients stay private.
    ("madvise", "never", {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}, False),
    ("madvise", "never", {"GLIBC_TUNABLES": "glibc.malloc.check=0:glibc.malloc.hugetlb=2"}, False),
    ("madvise", "never", {"THP_MEM_ALLOC_ENABLE": "1"}, False),
    ("always", "never", {}, False),
    ("always", "advise", {}, False),
    ("madvise", "never", {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=0"}, True),
    # Shared memory gets them too: shared again.
    ("always", "always", {}, True),
    ("always", "within_size", {}, True),
    ("always", "force", {}, True),
    # The user's word wins.
    ("always", "never", {"MUSTER_SHARED_GRADIENTS": "1"}, True),
    ("madvise", "never", {"MUSTER_SHARED_GRADIENTS": "0"}, False),
    ("madvise", "never", {"MUSTER_SHARED_GRADIENTS": "auto"}, True),
])
def test_where_gradients_live(tmp_path, enabled, shmem, env, shared):
    assert settings.shared_gradients(env, thp_root(tmp_path, enabled, shmem)) is shared


def test_without_sysfs_gradients_are_shared(tmp_path):
    # No transparent huge pages at all (a kernel without them, a sandbox hiding /sys).
    assert settings.shared_gradients({"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}, str(tmp_path / "none")) is True


def test_a_bad_setting_is_named():
    # muster's one dialect (muster.settings, as the daemon's): yes/no are not booleans.
    for bad in ("maybe", "yes", "TRUE", " 1"):
        with pytest.raises(ValueError, match="environment variable MUSTER_SHARED_GRADIENTS is '%s': expected auto, "
                                             "true, false, 1 or 0" % bad):
            settings.shared_gradients({"MUSTER_SHARED_GRADIENTS": bad})


def test_horovod_numbers_are_read_strictly(monkeypatch):
    monkeypatch.setenv("HOROVOD_CYCLE_TIME", "2.5")
    assert settings.cycle_seconds() == 0.0025
    monkeypatch.setenv("HOROVOD_CYCLE_TIME", "fast")
    with pytest.raises(ValueError, match="environment variable HOROVOD_CYCLE_TIME is 'fast': expected a number in "
                                         "0..10000"):
        settings.cycle_seconds()
    monkeypatch.setenv("HOROVOD_FUSION_THRESHOLD", "0")
    assert settings.fusion_threshold_bytes() == 1  # Horovod's 0: no fusion, one tensor per bucket
    monkeypatch.setenv("HOROVOD_FUSION_THRESHOLD", "64MB")
    with pytest.raises(ValueError, match="HOROVOD_FUSION_THRESHOLD is '64MB': expected a whole number"):
        settings.fusion_threshold_bytes()
