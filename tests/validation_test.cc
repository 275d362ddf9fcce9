// Request validation: a table of bad inputs (each must name its field and
// never be accepted), the good cases, and script resolution inside the
// project directory (absolute, .., symlinks out, directories).
#include "service/script_path.h"
#include "service/validation.h"

#include <limits>

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "temp_dir.h"

namespace fs = std::filesystem;
using muster::api::ErrorCode;
using muster::service::parse_await_request;
using muster::service::parse_launch_request;
using muster::service::parse_stop_request;
using muster::service::resolve_script;
using muster::service::ValidationOptions;
using nlohmann::json;

namespace {

class ProjectDir : public ::testing::Test {
 protected:
  void SetUp() override {
    project_ = root_ / "project";
    fs::create_directories(project_ / "sub");
    std::ofstream(project_ / "train.py") << "print(1)\n";
    std::ofstream(project_ / "sub" / "job.sh") << "echo hi\n";
    std::ofstream(project_ / "run.bin") << "#!/bin/sh\n";
    ::chmod((project_ / "run.bin").c_str(), 0755);
    std::ofstream(root_ / "secret.py") << "print('outside')\n";
    fs::create_symlink(root_ / "secret.py", project_ / "escape.py");
    fs::create_symlink(project_ / "train.py", project_ / "inside_link.py");
    fs::create_symlink(root_, project_ / "uplink");
    options_.max_workers = 8;
    options_.project_dir = fs::canonical(project_);
  }

  json good() const { return {{"n", 2}, {"cpu", 0.5}, {"memory", 2}, {"script", "train.py"}}; }

  muster::testing::TempDir tmp_{"muster-validation"};
  fs::path root_ = tmp_.path(), project_;
  ValidationOptions options_;
};

struct BadCase {
  const char* name;
  json patch;        // merged into a good request (null values remove the key)
  const char* field;  // the field the error must name
};

TEST_F(ProjectDir, BadLaunchRequestsNameTheirField) {
  const std::vector<BadCase> cases = {
      {"n missing", {{"n", nullptr}}, "n"},
      {"n zero", {{"n", 0}}, "n"},
      {"n negative", {{"n", -1}}, "n"},
      {"n above max_workers", {{"n", 9}}, "n"},
      {"n huge", {{"n", 1e12}}, "n"},
      {"n float", {{"n", 1.5}}, "n"},
      {"n string", {{"n", "2"}}, "n"},
      {"n bool", {{"n", true}}, "n"},
      {"cpu missing", {{"cpu", nullptr}}, "cpu"},
      {"cpu zero", {{"cpu", 0}}, "cpu"},
      {"cpu negative", {{"cpu", -0.5}}, "cpu"},
      {"cpu string", {{"cpu", "1"}}, "cpu"},
      {"memory zero", {{"memory", 0}}, "memory"},
      {"memory list", {{"memory", json::array({1})}}, "memory"},
      {"gpu negative", {{"nvidia_gpu", -1}}, "nvidia_gpu"},
      // llabs(INT64_MIN) overflows: this one used to pass.
      {"gpu INT64_MIN", {{"nvidia_gpu", std::numeric_limits<int64_t>::min()}}, "nvidia_gpu"},
      {"gpu INT64_MAX", {{"nvidia_gpu", std::numeric_limits<int64_t>::max()}}, "nvidia_gpu"},
      {"gpu UINT64_MAX", {{"nvidia_gpu", std::numeric_limits<uint64_t>::max()}}, "nvidia_gpu"},
      {"n INT64_MIN", {{"n", std::numeric_limits<int64_t>::min()}}, "n"},
      {"gpu float", {{"nvidia_gpu", 0.5}}, "nvidia_gpu"},
      {"gpu above 64", {{"nvidia_gpu", 65}}, "nvidia_gpu"},
      {"kernel unknown", {{"kernel", "ruby"}}, "kernel"},
      {"kernel number", {{"kernel", 3}}, "kernel"},
      {"no script nor code", {{"script", nullptr}}, "script"},
      {"script absolute", {{"script", "/etc/passwd"}}, "script"},
      {"script dotdot", {{"script", "../secret.py"}}, "script"},
      {"script inner dotdot", {{"script", "sub/../../secret.py"}}, "script"},
      {"script symlink out", {{"script", "escape.py"}}, "script"},
      {"script through dir symlink", {{"script", "uplink/secret.py"}}, "script"},
      {"script missing", {{"script", "nope.py"}}, "script"},
      {"script directory", {{"script", "sub"}}, "script"},
      {"script NUL", {{"script", std::string("train.py\0x", 10)}}, "script"},
      {"script number", {{"script", 7}}, "script"},
      {"executable not executable", {{"kernel", "executable"}}, "script"},
      {"env not object", {{"env", json::array()}}, "env"},
      {"env bad name", {{"env", {{"1BAD", "x"}}}}, "env"},
      {"env name with dash", {{"env", {{"A-B", "x"}}}}, "env"},
      {"env empty name", {{"env", {{"", "x"}}}}, "env"},
      {"env value number", {{"env", {{"A", 1}}}}, "env"},
      {"env value NUL", {{"env", {{"A", std::string("a\0b", 3)}}}}, "env"},
      {"args not list", {{"args", "a b"}}, "args"},
      {"args number", {{"args", json::array({1})}}, "args"},
      {"args NUL", {{"args", json::array({std::string("a\0", 2)})}}, "args"},
      {"unknown field", {{"memroy", 2}}, "memroy"},
  };
  for (const auto& c : cases) {
    json body = good();
    for (const auto& item : c.patch.items()) {
      if (item.value().is_null()) {
        body.erase(item.key());
      } else {
        body[item.key()] = item.value();
      }
    }
    auto r = parse_launch_request(body, options_);
    ASSERT_FALSE(r.is_ok()) << c.name << ": accepted " << body.dump();
    EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument) << c.name;
    EXPECT_EQ(r.status().field(), c.field) << c.name << ": " << r.status().message();
    EXPECT_FALSE(r.status().message().empty()) << c.name;
  }
}

TEST_F(ProjectDir, BodyMustBeAnObject) {
  for (const json& body : {json(nullptr), json::array(), json(3), json("x")}) {
    auto r = parse_launch_request(body, options_);
    ASSERT_FALSE(r.is_ok()) << body.dump();
    EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
  }
}

TEST_F(ProjectDir, GoodLaunchRequest) {
  json body = good();
  body["env"] = {{"LR", "0.1"}, {"_X1", ""}};
  body["args"] = {"--epochs", "2"};
  body["nvidia_gpu"] = 0;
  auto r = parse_launch_request(body, options_);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->n, 2);
  EXPECT_DOUBLE_EQ(r->cpu, 0.5);
  EXPECT_DOUBLE_EQ(r->memory, 2);
  EXPECT_EQ(r->kernel, "python3");
  EXPECT_EQ(r->script_path, fs::canonical(project_ / "train.py"));
  EXPECT_EQ(r->env.at("LR"), "0.1");
  EXPECT_EQ(r->args, (std::vector<std::string>{"--epochs", "2"}));
}

// cdsw runs the script when both are given; muster does too, with a warning.
TEST_F(ProjectDir, ScriptWinsOverCodeWithAWarning) {
  json body = good();
  body["code"] = "print(1)";
  auto r = parse_launch_request(body, options_);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->script_path, fs::canonical(project_ / "train.py"));
  EXPECT_TRUE(r->code.empty());
  ASSERT_EQ(r->warnings.size(), 1u);
  EXPECT_NE(r->warnings[0].find("script runs and code is ignored"), std::string::npos) << r->warnings[0];
  EXPECT_TRUE(parse_launch_request(good(), options_)->warnings.empty());
}

TEST_F(ProjectDir, PythonIsAnExecutableGivenByItsAbsolutePath) {
  json body = good();
  body["python"] = "/bin/sh";
  auto r = parse_launch_request(body, options_);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->python, "/bin/sh");
  for (const char* bad : {"python3", "/no/such/python", ""}) {
    body["python"] = bad;
    auto b = parse_launch_request(body, options_);
    if (std::string(bad).empty()) {
      EXPECT_TRUE(b.is_ok());  // the default
      continue;
    }
    ASSERT_FALSE(b.is_ok()) << bad;
    EXPECT_EQ(b.status().field(), "python") << bad;
  }
}

// On a host with 2 CPUs and 4 GB, bigger asks are accepted with a warning;
// without a host (remote backends) nothing is said.
TEST_F(ProjectDir, AsksBeyondTheHostGetAWarning) {
  options_.host = muster::service::HostCapacity{2, 4.0};
  json body = good();
  body["cpu"] = 64;
  body["memory"] = 10000;
  auto r = parse_launch_request(body, options_);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  ASSERT_EQ(r->warnings.size(), 2u);
  EXPECT_NE(r->warnings[0].find("cpu=64 is more than this host's 2 CPUs"), std::string::npos) << r->warnings[0];
  EXPECT_NE(r->warnings[1].find("memory=10000 (GB) is more than this host's 4 GB"), std::string::npos)
      << r->warnings[1];
  EXPECT_TRUE(parse_launch_request(good(), options_)->warnings.empty());
  options_.host.reset();
  EXPECT_TRUE(parse_launch_request(body, options_)->warnings.empty());
  const auto here = muster::service::host_capacity();
  EXPECT_GE(here.cpus, 1);
  EXPECT_GT(here.memory_gb, 0.1);
}

TEST_F(ProjectDir, CodeAndKernels) {
  auto code = parse_launch_request({{"n", 1}, {"cpu", 1}, {"memory", 1}, {"code", "print(2)"}}, options_);
  ASSERT_TRUE(code.is_ok()) << code.status().message();
  EXPECT_TRUE(code->script_path.empty());
  auto bash = parse_launch_request({{"n", 1}, {"cpu", 1}, {"memory", 1}, {"kernel", "bash"}, {"code", "echo"}},
                                   options_);
  EXPECT_TRUE(bash.is_ok());
  auto exe = parse_launch_request(
      {{"n", 1}, {"cpu", 1}, {"memory", 1}, {"kernel", "executable"}, {"script", "run.bin"}}, options_);
  EXPECT_TRUE(exe.is_ok()) << exe.status().message();
  auto exe_code = parse_launch_request(
      {{"n", 1}, {"cpu", 1}, {"memory", 1}, {"kernel", "executable"}, {"code", "x"}}, options_);
  ASSERT_FALSE(exe_code.is_ok());
  EXPECT_EQ(exe_code.status().field(), "code");
}

TEST_F(ProjectDir, ScriptResolution) {
  EXPECT_TRUE(resolve_script(project_, "train.py").is_ok());
  EXPECT_TRUE(resolve_script(project_, "sub/job.sh").is_ok());
  EXPECT_TRUE(resolve_script(project_, "./sub/job.sh").is_ok());
  // A symlink that stays inside is fine and resolves to its target.
  auto inside = resolve_script(project_, "inside_link.py");
  ASSERT_TRUE(inside.is_ok());
  EXPECT_EQ(inside.value(), fs::canonical(project_ / "train.py"));
  EXPECT_FALSE(resolve_script(project_, "escape.py").is_ok());
  EXPECT_FALSE(resolve_script(project_, "uplink/secret.py").is_ok());
  EXPECT_FALSE(resolve_script(project_, "../secret.py").is_ok());
  EXPECT_FALSE(resolve_script(project_, (root_ / "secret.py").string()).is_ok());
  EXPECT_FALSE(resolve_script(project_, "").is_ok());
  // A sibling directory whose name starts with the project's is still outside.
  fs::create_directories(root_ / "project2");
  std::ofstream(root_ / "project2" / "x.py") << "\n";
  fs::create_symlink(root_ / "project2" / "x.py", project_ / "sibling.py");
  EXPECT_FALSE(resolve_script(project_, "sibling.py").is_ok());
}

TEST(AwaitRequest, DefaultsAndErrors) {
  auto r = parse_await_request({{"ids", {"a", {{"id", "b"}}}}});
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->ids, (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(r->wait_for_completion);
  EXPECT_DOUBLE_EQ(r->timeout_seconds, 60);
  EXPECT_EQ(parse_await_request({{"ids", "a"}}).status().field(), "ids");
  EXPECT_EQ(parse_await_request({{"ids", {1}}}).status().field(), "ids");
  EXPECT_EQ(parse_await_request({{"timeout_seconds", -1}}).status().field(), "timeout_seconds");
  EXPECT_EQ(parse_await_request({{"timeout_seconds", "5"}}).status().field(), "timeout_seconds");
  EXPECT_EQ(parse_await_request({{"wait_for_completion", 1}}).status().field(), "wait_for_completion");
  EXPECT_EQ(parse_await_request({{"idz", {}}}).status().field(), "idz");
}

TEST(StopRequest, EmptyMeansAll) {
  auto r = parse_stop_request(nullptr);
  ASSERT_TRUE(r.is_ok());
  EXPECT_TRUE(r->ids.empty());
  EXPECT_TRUE(parse_stop_request({{"ids", json::array()}}).is_ok());
  EXPECT_EQ(parse_stop_request({{"ids", {nullptr}}}).status().field(), "ids");
}

}  // namespace
