// The C++ SDK against a musterd that serves https (listening on 0.0.0.0):
// found through the state dir, it pins musterd.json's fingerprint; a CA file
// (the self-signed certificate) verifies it too; a wrong pin is refused with
// MusterError("untrusted_certificate") naming both fingerprints; a worker
// launched through it runs (its agent over TLS) and its log streams back.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "sdk/cpp/client.h"

namespace {

namespace fs = std::filesystem;
using muster::sdk::Client;
using muster::sdk::ClientOptions;
using muster::sdk::MusterError;

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class SdkCppTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* bin = std::getenv("MUSTER_BINARY_DIR");
    ASSERT_NE(bin, nullptr) << "run under ctest";
    const std::string musterd = std::string(bin) + "/bin/musterd";
    char tmpl[] = "/tmp/muster-sdk-tls-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    fs::create_directories(root_ / "project");
    std::ofstream(root_ / "project/hello.py") << "print('hello over tls', flush=True)\n";
    const std::string project = (root_ / "project").string(), state = (root_ / "state").string();
    const std::string log = (root_ / "musterd.log").string();
    pid_ = fork();
    ASSERT_GE(pid_, 0);
    if (pid_ == 0) {
      setsid();
      FILE* out = std::freopen(log.c_str(), "w", stdout);
      if (out) dup2(fileno(stdout), STDERR_FILENO);
      execl(musterd.c_str(), musterd.c_str(), "--listen", "0.0.0.0:0", "--project-dir", project.c_str(),
            "--state-dir", state.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    ::setenv("MUSTER_STATE_DIR", state.c_str(), 1);
    ::unsetenv("MUSTER_URL");
    ::unsetenv("MUSTER_TOKEN");
    ::unsetenv("MUSTER_CA_FILE");
    ::unsetenv("MUSTER_TLS_FINGERPRINT");
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < deadline) {
      info_ = nlohmann::json::parse(read_file(root_ / "state/musterd.json"), nullptr, false);
      token_ = read_file(root_ / "state/token");
      while (!token_.empty() && std::isspace(static_cast<unsigned char>(token_.back()))) token_.pop_back();
      if (info_.is_object() && info_.contains("tls") && !token_.empty()) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    FAIL() << "musterd not ready:\n" << read_file(log);
  }

  void TearDown() override {
    if (pid_ > 0) {
      kill(-pid_, SIGTERM);
      for (int i = 0; i < 100 && waitpid(pid_, nullptr, WNOHANG) == 0; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      kill(-pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    ::unsetenv("MUSTER_STATE_DIR");
    std::error_code ec;
    fs::remove_all(root_, ec);
  }

  fs::path root_;
  pid_t pid_ = -1;
  nlohmann::json info_;
  std::string token_;
};

TEST_F(SdkCppTlsTest, PinsCaFilesAndRefusesAWrongFingerprint) {
  const std::string url = info_["url"], cert = info_["tls"]["cert"], fingerprint = info_["tls"]["fingerprint"];
  ASSERT_EQ(url.rfind("https://", 0), 0u) << url;

  Client discovered;  // MUSTER_STATE_DIR: the URL, the token and the pin from musterd.json
  EXPECT_EQ(discovered.url(), url);
  muster::sdk::LaunchOptions launch;
  launch.cpu = 0.1;
  launch.memory = 0.1;
  launch.script = "hello.py";
  auto workers = discovered.launch_workers(launch);
  ASSERT_EQ(workers.size(), 1u);
  discovered.await_workers({workers[0].id});
  EXPECT_EQ(discovered.get_worker(workers[0].id).status, "succeeded");
  EXPECT_NE(discovered.worker_logs(workers[0].id, std::nullopt, /*from_start=*/true).find("hello over tls"),
            std::string::npos);
  std::string followed;
  muster::sdk::FollowOptions follow;
  follow.from_start = true;
  discovered.follow_worker_logs(workers[0].id, [&](const std::string& line) {
    followed += line + "\n";
    return true;
  }, follow);
  EXPECT_NE(followed.find("hello over tls"), std::string::npos) << followed;

  ClientOptions ca{url, token_, 10, cert, ""};
  EXPECT_NO_THROW(Client(ca).list_workers());

  ClientOptions wrong{url, token_, 10, "", std::string(64, 'b')};
  try {
    Client(wrong).list_workers();
    FAIL() << "a wrong fingerprint was accepted";
  } catch (const MusterError& e) {
    EXPECT_EQ(e.code(), "untrusted_certificate") << e.what();
    EXPECT_NE(e.message().find(fingerprint), std::string::npos) << e.message();
    EXPECT_NE(e.message().find(std::string(64, 'b')), std::string::npos) << e.message();
  }
  ClientOptions bad{url, token_, 10, "", "not-a-fingerprint"};
  try {
    Client c(bad);
    FAIL() << "a malformed fingerprint was accepted";
  } catch (const MusterError& e) {
    EXPECT_EQ(e.code(), "invalid_argument") << e.what();
  }
}

}  // namespace
