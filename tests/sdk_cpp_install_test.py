"""The C++ SDK installed and used as a package by another project (integration).

`cmake --install <build> --component sdk --prefix <tmp>` installs the headers,
libmuster_sdk.a and lib/cmake/muster; sdk/cpp/example_consumer (a separate
CMake project: find_package(muster), target muster::sdk) is configured
against that prefix only, built, and run against a real musterd: it launches
a worker, follows its log live (follow_worker_logs) and checks the worker
succeeded with every line seen.
"""
import os
import subprocess

from sdk_daemon import Daemon

SOURCE = os.environ.get("MUSTER_SOURCE_DIR") or os.path.join(os.path.dirname(__file__), "..")
BUILD = os.environ.get("MUSTER_BINARY_DIR") or os.path.join(SOURCE, "build")


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=280, **kw)
    assert r.returncode == 0, (cmd, r.stdout[-3000:], r.stderr[-3000:])
    return r.stdout


def test_install_then_find_package_from_a_consumer_project(tmp_path):
    prefix = tmp_path / "prefix"
    run(["cmake", "--install", BUILD, "--component", "sdk", "--prefix", str(prefix)])
    assert (prefix / "include" / "muster" / "sdk" / "cpp" / "client.h").exists()
    libdirs = [d for d in ("lib", "lib64") if (prefix / d / "cmake" / "muster" / "musterConfig.cmake").exists()]
    assert libdirs, "no musterConfig.cmake under %s" % prefix
    consumer = tmp_path / "consumer"
    env = dict(os.environ)
    env.pop("CMAKE_PREFIX_PATH", None)
    run(["cmake", "-S", os.path.join(SOURCE, "sdk", "cpp", "example_consumer"), "-B", str(consumer),
         "-DCMAKE_BUILD_TYPE=Release", "-DCMAKE_PREFIX_PATH=%s" % prefix], env=env)
    run(["cmake", "--build", str(consumer), "-j2"], env=env)
    project = tmp_path / "project"
    project.mkdir()
    with Daemon(project, tmp_path / "state") as d:
        out = run([str(consumer / "follow_logs"), "4"], env=d.env())
    lines = [x for x in out.splitlines() if "] [muster-agent]" not in x]
    assert [x.split("] ", 1)[1] for x in lines[:4]] == ["line 0", "line 1", "line 2", "line 3"], out
    assert " succeeded running_at 20" in lines[4] and "duration unknown" not in lines[4], out
