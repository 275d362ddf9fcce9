// service/worker_python.h: where workers find muster's Python parts (a build
// tree, an install prefix, neither) and the environment they get, which keeps
// whatever PYTHONPATH the user set first.
#include "service/worker_python.h"

#include <gtest/gtest.h>

#include <fstream>

#include "tests/temp_dir.h"

namespace {

namespace fs = std::filesystem;
using muster::service::find_worker_python;
using muster::service::python_env;
using muster::service::WorkerPython;

void touch(const fs::path& p) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << "";
}

class WorkerPythonTest : public ::testing::Test {
 protected:
  muster::testing::TempDir tmp_{"worker-python"};
  fs::path root_ = fs::canonical(tmp_.path());
};

TEST_F(WorkerPythonTest, ABuildTreeGivesTheSourceSdkAndTheBuiltExtension) {
  const fs::path src = root_ / "src" / "sdk" / "python";
  touch(src / "muster" / "__init__.py");
  touch(root_ / "build" / "CMakeCache.txt");
  fs::create_directories(root_ / "build" / "bin");
  // Before the extension is built: the SDK all the same, and musterd says what is missing.
  WorkerPython p = find_worker_python(root_ / "build" / "bin", src, "lib/python3/dist-packages");
  ASSERT_TRUE(p.found());
  EXPECT_EQ(p.sdk_dir, src);
  EXPECT_TRUE(p.runtime_dir.empty());
  EXPECT_NE(p.found_in.find("not built yet"), std::string::npos) << p.found_in;
  touch(root_ / "build" / "python" / "muster" / "_muster_runtime.cpython-311-x86_64-linux-gnu.so");
  p = find_worker_python(root_ / "build" / "bin", src, "lib/python3/dist-packages");
  EXPECT_EQ(p.sdk_dir, src);
  EXPECT_EQ(p.runtime_dir, root_ / "build" / "python" / "muster");
  EXPECT_NE(p.found_in.find("build tree"), std::string::npos) << p.found_in;
}

TEST_F(WorkerPythonTest, AnInstallPrefixGivesThePackageWithItsExtensionBeside) {
  touch(root_ / "opt" / "lib" / "python3" / "dist-packages" / "muster" / "__init__.py");
  fs::create_directories(root_ / "opt" / "bin");
  // The build's source folder is gone (a copied install): the prefix still answers.
  const WorkerPython p = find_worker_python(root_ / "opt" / "bin", root_ / "gone", "lib/python3/dist-packages");
  ASSERT_TRUE(p.found());
  EXPECT_EQ(p.sdk_dir, root_ / "opt" / "lib" / "python3" / "dist-packages");
  EXPECT_TRUE(p.runtime_dir.empty());
  EXPECT_NE(p.found_in.find("install prefix"), std::string::npos) << p.found_in;
}

TEST_F(WorkerPythonTest, NeitherFindsNothingAndAddsNothing) {
  fs::create_directories(root_ / "bin");
  // A program copied out of its build tree (no CMakeCache.txt beside bin/) is in neither.
  touch(root_ / "src" / "muster" / "__init__.py");
  touch(root_ / "python" / "muster" / "_muster_runtime.so");
  const WorkerPython p = find_worker_python(root_ / "bin", root_ / "src", "lib/python3/dist-packages");
  EXPECT_FALSE(p.found());
  EXPECT_TRUE(python_env(p, {{"PYTHONPATH", "/mine"}}, {}).empty());
}

TEST_F(WorkerPythonTest, TheUsersPythonPathComesFirstAndIsKept) {
  WorkerPython p;
  p.sdk_dir = root_ / "sdk";
  p.runtime_dir = root_ / "ext";
  fs::create_directories(p.sdk_dir);
  // Nothing set anywhere: just muster's.
  auto env = python_env(p, {}, {});
  EXPECT_EQ(env["PYTHONPATH"], p.sdk_dir.string());
  EXPECT_EQ(env["MUSTER_RUNTIME_PATH"], p.runtime_dir.string());
  // musterd's own PYTHONPATH (inherited by local workers) is kept, in front.
  env = python_env(p, {}, {{"PYTHONPATH", "/a:/b"}});
  EXPECT_EQ(env["PYTHONPATH"], "/a:/b:" + p.sdk_dir.string());
  // The request's wins over musterd's.
  env = python_env(p, {{"PYTHONPATH", "/req"}}, {{"PYTHONPATH", "/daemon"}});
  EXPECT_EQ(env["PYTHONPATH"], "/req:" + p.sdk_dir.string());
  // Already there (also spelled differently): not added twice, order kept.
  env = python_env(p, {{"PYTHONPATH", (root_ / "sdk" / ".." / "sdk").string() + ":/x"}}, {});
  EXPECT_EQ(env["PYTHONPATH"], (root_ / "sdk" / ".." / "sdk").string() + ":/x");
  // An empty PYTHONPATH is a set one with nothing in it.
  env = python_env(p, {{"PYTHONPATH", ""}}, {{"PYTHONPATH", "/daemon"}});
  EXPECT_EQ(env["PYTHONPATH"], p.sdk_dir.string());
}

TEST_F(WorkerPythonTest, ARuntimePathTheUserSetIsLeftAlone) {
  WorkerPython p;
  p.sdk_dir = root_ / "sdk";
  p.runtime_dir = root_ / "ext";
  EXPECT_FALSE(python_env(p, {{"MUSTER_RUNTIME_PATH", "/mine"}}, {}).count("MUSTER_RUNTIME_PATH"));
  EXPECT_FALSE(python_env(p, {}, {{"MUSTER_RUNTIME_PATH", "/daemon"}}).count("MUSTER_RUNTIME_PATH"));
  p.runtime_dir.clear();  // installed: beside the package, nothing to say
  EXPECT_FALSE(python_env(p, {}, {}).count("MUSTER_RUNTIME_PATH"));
}

}  // namespace
