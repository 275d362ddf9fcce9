"""Runs PyTorch's own distributed test suite against a torch.distributed backend.

    python3 tests/torch_suite.py --np 2 [--backend muster|gloo] [-k NAME ...] [--json OUT] [--verbose]

The suite is torch/testing/_internal/distributed/distributed_test.py of the
installed torch (Debian's python3-torch 1.13), read from the package, never
copied here. It runs the way third-party backends run it: this launcher
registers the backend (import muster.torch.distributed), declares what the
backend offers (DistTestCases.backend_feature "plugin", "ddp", "subgroup"),
imports the suite, and runs every case of a subclass of TestDistBackend and
DistributedTest._DistTestBase, whose ranks form their group with
init_method=file://. `--backend gloo` runs the same cases, the same way,
against torch's gloo: the baseline.

Two things are set alike for every backend, because the environment, not the
backend, needs them:
- tests/torch_suite_shim/expecttest.py stands in for `expecttest`, which
  Debian does not package and torch's common_utils imports;
- DDP's ReplicatedTensor mode, which the suite's ranks turn on, stays off:
  its import of torch.distributed._shard fails on this torch under Python
  3.11 (a dataclass with a mutable default), whatever the backend.
Each case's ranks are forked from this process (multiprocessing's "fork")
rather than spawned: a spawned rank imports torch again (about 13 minutes for
the file at 2 ranks against 1 here, same outcomes on gloo).

A case passed when all its ranks did. A case the suite skips counts as
skipped, never as passed, and its reason must be one the suite gives for a
case this backend cannot reach (SKIP_REASONS: CUDA or another backend, a
world-size requirement, a gate naming gloo or MPI, whose behaviour muster's
own tests cover: COVERED says which); any other reason fails the run, as
does any failure.

Exit status: 0 when every case passed or skipped for a known reason, 1
otherwise.
"""
import argparse
import json
import logging
import os
import re
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))

# Why the suite skips a case, and what that means here: the categories of
# sdk/python/muster/torch/README.md's table.
CUDA = "needs CUDA, GPUs or NCCL"
WORLD = "needs another world size"
NAMED = "the file runs it on gloo (or MPI) only, by name; muster's own test covers it"
OTHER_BACKEND = "the file runs it on another backend only, by name"
SKIP_REASONS = [
    (r"CUDA|cuda|GPU|gpu|NCCL|Nccl|nccl|multi-gpu|ROCm", CUDA),
    (r"world size|worldsize|Test requires world size", WORLD),
    (r"torchvision", "needs torchvision, which Debian's python3-torch lacks"),
]
NAMES_A_BACKEND = r"[Gg]loo|GLOO|MPI"
EXTRAS = "tests/torch_backend_extras_test.py"
# The cases the file gates on gloo or MPI by name, and the muster test that checks the same behaviour
# from torch's documentation (the worker's mode, and what in it).
COVERED = [
    (r"test_accumulate_gradients_no_sync", EXTRAS + " collectives: DDP no_sync(), with a comm hook using get_future()"),
    (r"test_(all_gather_object|gather_object|broadcast_object_list|scatter_object_list)",
     EXTRAS + " collectives: the object collectives, world and subgroup"),
    (r"test_all_reduce_coalesced_", EXTRAS + " collectives: all_reduce_coalesced, every op, world / full / subgroup"),
    (r"test_barrier_timeout_", EXTRAS + " timeouts: a lone barrier fails after the group's timeout"),
    (r"test_batch_isend_irecv_gloo", EXTRAS + " p2p: batch_isend_irecv, with tags"),
    (r"test_get_future$", EXTRAS + " collectives: Work.get_future() chains"),
    (r"test_monitored_barrier_(gloo|failure_order|wait_all_ranks)", EXTRAS + " monitored: monitored_barrier"),
    (r"test_sparse_all_reduce_sum$", EXTRAS + " collectives: sparse all_reduce"),
    (r"test_all_to_all", "tests/torch_distributed_test.py collectives (all_to_all, all_to_all_single even and uneven) "
                         "and " + EXTRAS + " collectives (subgroups, complex)"),
]
# Cases behind a gate naming gloo (backend_feature["gpu"] = {gloo, nccl}, "Only Gloo and NCCL ...") that
# need GPUs besides (each has a GPU decorator of its own): gloo skips them here too.
GPU_GATED = {
    "test_all_reduce_result_cuda", "test_all_reduce_sum_cuda", "test_all_reduce_sum_cuda_async",
    "test_all_reduce_sum_cuda_complex", "test_backend_full_group", "test_backend_group", "test_broadcast_cuda",
    "test_compute_bucket_assignment_by_size_sparse_error_with_logger",
    "test_compute_bucket_assignment_by_size_sparse_error_without_logger", "test_ddp_build_debug_param_to_name_mapping",
    "test_ddp_control_flow_different_across_ranks", "test_ddp_control_flow_same_across_ranks", "test_ddp_device",
    "test_ddp_forward_backward_hook", "test_ddp_ignore_params_arg", "test_ddp_model_diff_num_params_across_ranks",
    "test_ddp_model_diff_shape_across_ranks", "test_ddp_multiple_nested_unused_params_err_ignore_params",
    "test_ddp_multiple_nested_unused_params_error", "test_ddp_namedtuple", "test_ddp_profiling_autograd_profiler",
    "test_ddp_profiling_torch_profiler", "test_ddp_shared_grad_acc_unused_params",
    "test_ddp_unused_params_rebuild_buckets_exception", "test_different_graph_across_ranks",
    "test_invalid_static_graph", "test_monitored_barrier_allreduce_hang",
    "test_monitored_barrier_allreduce_hang_wait_all_ranks", "test_sparse_all_reduce_sum_cuda", "test_sync_bn_logged",
    "test_verify_model_across_rank_with_logger", "test_verify_model_across_rank_without_logger",
}


def covered_by(name):
    for pattern, test in COVERED:
        if re.match(pattern, name):
            return test
    return None


def classify(name, reason, backend):
    """The category of a skipped case, or None when its reason is not one this backend may have."""
    if re.search(NAMES_A_BACKEND, reason):
        if backend == "gloo":
            return OTHER_BACKEND  # the baseline: cases the file keeps for MPI
        if covered_by(name):
            return NAMED
        return CUDA if name in GPU_GATED else None
    for pattern, category in SKIP_REASONS:
        if re.search(pattern, reason):
            return category
    return None


def prepare(backend, np):
    """Sets the environment the suite reads at import, registers the backend; returns the suite's module."""
    os.environ["BACKEND"] = backend
    os.environ["WORLD_SIZE"] = str(np)
    os.environ.setdefault("TEMP_DIR", tempfile.mkdtemp(prefix="torch-suite-"))
    # The cases that form a group a second time (test_barrier_timeout_global) use this init_method, read at import.
    os.environ["INIT_METHOD"] = "file://" + os.path.join(tempfile.mkdtemp(prefix="torch-suite-init-"), "init_file")
    sys.path.insert(0, os.path.join(HERE, "torch_suite_shim"))
    # From a plain shell, as the README has it: the repository's SDK (forked ranks inherit sys.path).
    sdk = os.path.join(os.path.dirname(HERE), "sdk", "python")
    if sdk not in sys.path:
        sys.path.insert(0, sdk)
    import torch.nn.parallel._replicated_tensor_ddp_utils as replicated
    replicated._set_ddp_with_replicated_tensor = lambda value: None  # see the docstring
    from torch.testing._internal.common_distributed import DistTestCases
    if backend != "gloo":
        if backend == "muster":
            import muster.torch.distributed  # noqa: F401 - registers the backend
        for feature in ("plugin", "ddp", "subgroup"):
            DistTestCases.backend_feature[feature].add(backend)
    from torch.testing._internal.distributed import distributed_test
    return distributed_test


class SkipReasons(logging.Handler):
    """Catches the reason a rank gives for skipping (the suite logs it in the rank, exits 86, and the parent
    only sees "skipped at subprocess level"): appends "test<TAB>reason" lines to a file the parent reads."""

    PATTERN = re.compile(r"skipping test (\S+) for following reason: (.*)", re.S)

    def __init__(self, path):
        super().__init__()
        self.path = path

    def emit(self, record):
        m = self.PATTERN.search(record.getMessage())
        if m:
            with open(self.path, "a") as f:
                f.write("%s\t%s\n" % (m.group(1), m.group(2).strip().replace("\n", " ")))


class Outcomes(unittest.TextTestResult):
    """Each case's outcome: passed, failed, skipped, with its message."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.outcomes = {}

    @staticmethod
    def _name(test):
        return test.id().split(".")[-1]

    def addSuccess(self, test):  # noqa: N802 - unittest's names
        super().addSuccess(test)
        self.outcomes[self._name(test)] = ("passed", "")

    def addFailure(self, test, err):  # noqa: N802
        super().addFailure(test, err)
        self.outcomes[self._name(test)] = ("failed", self._exc_info_to_string(err, test))

    def addError(self, test, err):  # noqa: N802
        super().addError(test, err)
        self.outcomes[self._name(test)] = ("failed", self._exc_info_to_string(err, test))

    def addSkip(self, test, reason):  # noqa: N802
        super().addSkip(test, reason)
        self.outcomes[self._name(test)] = ("skipped", reason)


def run(backend, np, names, verbose):
    suite_module = prepare(backend, np)
    import torch

    class TestSuiteOnBackend(suite_module.TestDistBackend, suite_module.DistributedTest._DistTestBase):
        def setUp(self):
            super().setUp()
            self._start_processes(torch.multiprocessing.get_context("fork").Process)

    results_dir = tempfile.mkdtemp(prefix="torch-suite-results-")
    reasons_path = os.path.join(results_dir, "skips.tsv")
    logging.getLogger("torch.testing._internal.common_distributed").addHandler(SkipReasons(reasons_path))
    loader = unittest.TestLoader()
    tests = loader.loadTestsFromTestCase(TestSuiteOnBackend)
    if names:
        tests = unittest.TestSuite(t for t in tests if any(n in t.id() for n in names))
    with open(os.devnull, "w") as quiet:
        runner = unittest.TextTestRunner(stream=sys.stdout if verbose else quiet, resultclass=Outcomes,
                                         verbosity=2 if verbose else 0)
        result = runner.run(tests)
    outcomes = dict(result.outcomes)
    if os.path.exists(reasons_path):
        with open(reasons_path) as f:
            for line in f:
                name, _, reason = line.rstrip("\n").partition("\t")
                if outcomes.get(name, ("",))[0] == "skipped":
                    outcomes[name] = ("skipped", reason)
    return outcomes


def report(outcomes, backend, np, elapsed, verbose):
    counts = {k: sum(1 for o, _ in outcomes.values() if o == k) for k in ("passed", "failed", "skipped")}
    unknown = {n: r for n, (o, r) in outcomes.items() if o == "skipped" and classify(n, r, backend) is None}
    by_category = {}
    for name, (outcome, reason) in sorted(outcomes.items()):
        if outcome == "skipped" and name not in unknown:
            by_category.setdefault(classify(name, reason, backend), []).append(name)
    print("torch %s distributed_test.py on %s at %d ranks: %d cases, %d passed, %d failed, %d skipped (%.0f s)"
          % (__import__("torch").__version__, backend, np, len(outcomes), counts["passed"], counts["failed"],
             counts["skipped"], elapsed))
    for category, names in sorted(by_category.items()):
        print("  skipped, %s: %d" % (category, len(names)))
        if verbose or category == NAMED:
            for name in names:
                print("    %s%s" % (name, " -> " + covered_by(name) if category == NAMED else ""))
    for name, (outcome, reason) in sorted(outcomes.items()):
        if outcome == "failed":
            print("FAILED %s\n%s" % (name, reason[-3000:]))
    for name, reason in sorted(unknown.items()):
        print("SKIPPED FOR A REASON NOT IN SKIP_REASONS %s: %s" % (name, reason))
    return counts["failed"] == 0 and not unknown and counts["passed"] > 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--np", type=int, required=True, help="world size (WORLD_SIZE)")
    parser.add_argument("--backend", default="muster", help="muster (default) or gloo, the baseline")
    parser.add_argument("-k", action="append", default=[], help="run only cases whose name contains this")
    parser.add_argument("--json", help="write {case: [outcome, reason]} here")
    parser.add_argument("--verbose", action="store_true", help="unittest's line per case")
    args = parser.parse_args()
    start = time.monotonic()
    outcomes = run(args.backend, args.np, args.k, args.verbose)
    elapsed = time.monotonic() - start
    if args.json:
        with open(args.json, "w") as f:
            json.dump({n: list(v) for n, v in sorted(outcomes.items())}, f, indent=1)
    sys.stdout.flush()
    ok = report(outcomes, args.backend, args.np, elapsed, args.verbose)
    sys.stdout.flush()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
