// DaemonProcess: a real musterd started as a subprocess for integration
// tests, with its own temp project and state dirs and a free port. The
// destructor stops every worker through the API, then kills the daemon, and
// removes the temp dirs, also when the test failed.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <cpprest/http_client.h>
#include <nlohmann/json.hpp>

extern char** environ;

namespace muster::testing {

class DaemonProcess {
 public:
  struct Reply {
    int status = 0;
    std::string body;
    nlohmann::json json() const { return nlohmann::json::parse(body, nullptr, false); }
  };

  DaemonProcess() {
    char tmpl[] = "/tmp/muster-it-XXXXXX";
    root_ = mkdtemp(tmpl);
    project_ = root_ / "project";
    state_ = root_ / "state";
    std::filesystem::create_directories(project_);
  }
  ~DaemonProcess() {
    if (pid_ > 0) {
      if (alive()) (void)post("/api/v1/workers/stop", {{"ids", nlohmann::json::array()}});
      kill(SIGKILL);
    }
    std::error_code ec;
    std::filesystem::remove_all(root_, ec);
  }

  const std::filesystem::path& project() const { return project_; }
  const std::filesystem::path& state() const { return state_; }
  const std::string& url() const { return url_; }

  void write_script(const std::string& name, const std::string& text, bool executable = false) {
    std::ofstream(project_ / name) << text;
    if (executable) std::filesystem::permissions(project_ / name, std::filesystem::perms::owner_all);
  }

  // Starts musterd and waits for its "musterd listening on URL" line.
  // `listen` "127.0.0.1:0" picks a free port.
  bool start(std::vector<std::string> extra_args = {}, const std::string& listen = "127.0.0.1:0") {
    const std::string bin = std::string(std::getenv("MUSTER_BINARY_DIR")) + "/bin/musterd";
    std::vector<std::string> args = {bin, "--listen", listen, "--project-dir", project_.string(),
                                     "--state-dir", state_.string(), "--log-level", "warn"};
    args.insert(args.end(), extra_args.begin(), extra_args.end());
    int out[2];
    if (::pipe2(out, O_CLOEXEC) != 0) return false;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawn_file_actions_addopen(&fa, 2, (root_ / "musterd.err").c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    // Orphaned agents (daemon killed by a failing test) give up quickly.
    ::setenv("MUSTER_ORPHAN_TIMEOUT_S", "20", 1);
    const int rc = posix_spawn(&pid_, bin.c_str(), &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    ::close(out[1]);
    if (rc != 0) {
      ::close(out[0]);
      pid_ = -1;
      return false;
    }
    std::string line;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    char c;
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd p{out[0], POLLIN, 0};
      if (::poll(&p, 1, 200) <= 0) continue;
      if (::read(out[0], &c, 1) != 1) break;
      if (c != '\n') {
        line.push_back(c);
        continue;
      }
      const std::string prefix = "musterd listening on ";
      if (line.rfind(prefix, 0) == 0) {
        url_ = line.substr(prefix.size());
        break;
      }
      line.clear();
    }
    ::close(out[0]);
    if (url_.empty()) return false;
    std::ifstream in(state_ / "token");
    std::getline(in, token_);
    web::http::client::http_client_config cfg;
    cfg.set_timeout(std::chrono::seconds(90));
    if (url_.rfind("https://", 0) == 0) {
      // Beyond loopback musterd serves TLS: its certificate (musterd.json's
      // tls.cert, self-signed) is the CA, and the host is checked.
      std::ifstream info(state_ / "musterd.json");
      const auto j = nlohmann::json::parse(info, nullptr, false);
      if (!j.is_object() || !j.contains("tls")) return false;
      cert_ = j["tls"].value("cert", "");
      fingerprint_ = j["tls"].value("fingerprint", "");
      cfg.set_ssl_context_callback([cert = cert_](boost::asio::ssl::context& ctx) { ctx.load_verify_file(cert); });
    }
    client_ = std::make_unique<web::http::client::http_client>(url_, cfg);
    return true;
  }

  std::string port() const { return url_.substr(url_.rfind(':') + 1); }
  // https: musterd.json's tls.cert and tls.fingerprint ("" over http).
  const std::string& tls_cert() const { return cert_; }
  const std::string& tls_fingerprint() const { return fingerprint_; }
  bool alive() const { return pid_ > 0 && ::kill(pid_, 0) == 0; }

  // Sends `sig` and reaps the daemon (SIGKILL after 10 s).
  void kill(int sig) {
    if (pid_ <= 0) return;
    ::kill(pid_, sig);
    for (int i = 0; i < 1000; ++i) {
      if (::waitpid(pid_, nullptr, WNOHANG) == pid_) {
        pid_ = -1;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

  Reply request(const std::string& method, const std::string& path, const nlohmann::json& body = nullptr) {
    web::http::http_request req(method);
    req.set_request_uri(path);
    req.headers().add("Authorization", "Bearer " + token_);
    if (!body.is_null()) req.set_body(body.dump(), "application/json");
    try {
      auto r = client_->request(req).get();
      return Reply{r.status_code(), r.extract_string(true).get()};
    } catch (const std::exception& e) {
      return Reply{0, e.what()};
    }
  }
  Reply post(const std::string& path, const nlohmann::json& body) { return request("POST", path, body); }
  Reply get(const std::string& path) { return request("GET", path); }

  std::string stderr_text() const {
    std::ifstream in(root_ / "musterd.err");
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

 private:
  std::filesystem::path root_, project_, state_;
  pid_t pid_ = -1;
  std::string url_, token_, cert_, fingerprint_;
  std::unique_ptr<web::http::client::http_client> client_;
};

}  // namespace muster::testing
