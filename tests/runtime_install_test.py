"""The training runtime installed and used as a package by another project.

`cmake --install <build> --component runtime --prefix <tmp>` installs the
runtime's static libraries, their headers under include/muster/<folder>/,
muster-ps and lib/cmake/muster (the muster package, component runtime).
tests/runtime_consumer (a separate CMake project: find_package(muster
COMPONENTS runtime), target muster::runtime) is configured against that
prefix only, built, and run under a real `mpirun -np 2`: both ranks must
print the sum of rank+1 over the ranks, through MPI and through the ring.
"""
import os
import re
import shutil
import signal
import subprocess

SOURCE = os.environ.get("MUSTER_SOURCE_DIR") or os.path.join(os.path.dirname(__file__), "..")
BUILD = os.environ.get("MUSTER_BINARY_DIR") or os.path.join(SOURCE, "build")
MPIEXEC = os.environ.get("MUSTER_MPIEXEC", "mpirun")


def run(cmd, timeout=280, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    assert r.returncode == 0, (cmd, r.stdout[-3000:], r.stderr[-3000:])
    return r.stdout


def consumer_env():
    env = dict(os.environ)
    env.pop("CMAKE_PREFIX_PATH", None)
    return env


def install(prefix, component):
    run(["cmake", "--install", BUILD, "--component", component, "--prefix", str(prefix)])
    libdirs = [d for d in ("lib", "lib64") if (prefix / d / "cmake" / "muster" / "musterConfig.cmake").exists()]
    assert libdirs, "no musterConfig.cmake under %s" % prefix
    return prefix / libdirs[0]


def test_runtime_package_allreduce_under_mpirun(tmp_path):
    prefix = tmp_path / "prefix"
    libdir = install(prefix, "runtime")
    include = prefix / "include" / "muster"
    for header in ("runtime/comm/communicator.h", "runtime/comm/mpi/mpi_world.h", "runtime/dtype.h",
                   "runtime/distributed/distributed_optimizer.h", "runtime/ps/client.h",
                   "runtime/data/idx_reader.h", "clusterspec/tf_config.h", "api/base/atomic_file.h"):
        assert (include / header).is_file(), header
    for lib in ("comm", "distributed", "ps", "data", "nn", "optim", "report", "clusterspec", "base"):
        assert (libdir / ("libmuster_%s.a" % lib)).is_file(), lib
    assert (prefix / "bin" / "muster-ps").is_file()
    # Relocatable: nothing installed points back into the source or build tree.
    for name in os.listdir(libdir / "cmake" / "muster"):
        text = (libdir / "cmake" / "muster" / name).read_text()
        for tree in (os.path.realpath(SOURCE), os.path.realpath(BUILD)):
            assert tree not in text, "%s names %s" % (name, tree)

    consumer = tmp_path / "consumer"
    run(["cmake", "-S", os.path.join(SOURCE, "tests", "runtime_consumer"), "-B", str(consumer),
         "-DCMAKE_BUILD_TYPE=Release", "-DCMAKE_PREFIX_PATH=%s" % prefix], env=consumer_env())
    run(["cmake", "--build", str(consumer), "-j2"], env=consumer_env())

    session = tmp_path / "mpi"
    session.mkdir()
    env = consumer_env()
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    argv = [MPIEXEC, "--allow-run-as-root", "--oversubscribe",
            "-mca", "btl", "self,vader,tcp", "-mca", "btl_vader_single_copy_mechanism", "none",
            "-mca", "orte_tmpdir_base", str(session), "-np", "2", str(consumer / "allreduce_sum")]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=120)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # ranks mpirun left behind
        except ProcessLookupError:
            pass
        shutil.rmtree(session, ignore_errors=True)
    assert proc.returncode == 0, out
    lines = sorted(re.findall(r"^rank \d of \d: .*$", out, re.M))
    # 1 + 2 = 3 on both ranks, through MPI (small) and the ring (large).
    assert lines == ["rank 0 of 2: small 3 large 3", "rank 1 of 2: small 3 large 3"], out


def test_missing_component_is_a_clear_error(tmp_path):
    prefix = tmp_path / "prefix"
    install(prefix, "sdk")  # the package config, without the runtime
    project = tmp_path / "project"
    project.mkdir()
    (project / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.16)\nproject(p NONE)\n"
        "find_package(muster REQUIRED COMPONENTS runtime)\n")
    r = subprocess.run(["cmake", "-S", str(project), "-B", str(tmp_path / "b"), "-DCMAKE_PREFIX_PATH=%s" % prefix],
                       capture_output=True, text=True, timeout=120, env=consumer_env())
    assert r.returncode != 0
    assert "muster component runtime is not installed" in r.stderr, r.stderr
