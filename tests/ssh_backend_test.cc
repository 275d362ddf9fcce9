// Unit tests of the SSH backend and preflight against a fake Connector:
// inventory parsing and its line-numbered errors, the remote command line,
// slot placement, log streaming, stop signalling the process group, lost
// connections, and the preflight parsers and per-host reports. No sockets.
#include <unistd.h>

#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "api/base/rotating_log.h"
#include "api/log_capture.h"
#include "workers/remote/preflight.h"
#include "workers/ssh/ssh_backend.h"

namespace muster::workers::ssh {
namespace {
using namespace ::muster::workers::remote;  // the seam, the preflight
namespace fs = std::filesystem;
using namespace std::chrono_literals;

// ---------- a scripted fake remote ----------
struct FakeWorld {
  std::mutex mu;
  std::vector<std::string> runs;            // "host: command"
  std::vector<std::string> started;         // "host: command"
  std::set<std::string> unreachable;        // addresses that refuse connections
  std::map<std::string, RemoteResult> replies;  // command substring -> reply (first match)
  // Events a started process returns, by its pgid ("4000") or else by host.
  std::map<std::string, std::deque<ReadEvent>> scripts;
  std::map<std::string, std::string> outputs;  // host -> output given with the first event
  int next_pgid = 4000;
  std::vector<std::string> uploads;
};

class FakeProcess : public RemoteProcess {
 public:
  FakeProcess(FakeWorld* w, std::string host, int pgid) : w_(w), host_(std::move(host)), pgid_(pgid) {}
  ReadEvent read(std::string& out, std::chrono::milliseconds) override {
    ReadEvent ev = read_locked(out);
    if (ev.state == ReadState::kIdle) std::this_thread::sleep_for(5ms);  // outside the lock: no starving
    return ev;
  }

 private:
  ReadEvent read_locked(std::string& out) {
    std::lock_guard<std::mutex> lock(w_->mu);
    if (!header_sent_) {
      header_sent_ = true;
      out += "muster-pgid " + std::to_string(pgid_) + "\n" + w_->outputs[host_];
      return {ReadState::kData, -1, {}};
    }
    std::string killed = host_ + ": kill -TERM -- -" + std::to_string(pgid_) + " 2>/dev/null";
    if (std::find(w_->runs.begin(), w_->runs.end(), killed) != w_->runs.end()) return {ReadState::kEnded, 143, {}};
    auto by_pgid = w_->scripts.find(std::to_string(pgid_));
    auto& q = by_pgid != w_->scripts.end() ? by_pgid->second : w_->scripts[host_];
    if (q.empty()) return {ReadState::kIdle, -1, {}};
    ReadEvent ev = q.front();
    q.pop_front();
    if (ev.state == ReadState::kData) out += ev.message;
    return ev;
  }

  FakeWorld* w_;
  std::string host_;
  int pgid_;
  bool header_sent_ = false;
};

class FakeSession : public RemoteSession {
 public:
  FakeSession(FakeWorld* w, std::string host) : w_(w), host_(std::move(host)) {}
  api::Result<RemoteResult> run(const std::string& command) override {
    std::lock_guard<std::mutex> lock(w_->mu);
    w_->runs.push_back(host_ + ": " + command);
    for (const auto& [pattern, reply] : w_->replies)
      if ((host_ + ": " + command).find(pattern) != std::string::npos) return reply;
    return RemoteResult{0, "", ""};
  }
  api::Result<std::unique_ptr<RemoteProcess>> start(const std::string& command) override {
    std::lock_guard<std::mutex> lock(w_->mu);
    w_->started.push_back(host_ + ": " + command);
    return std::unique_ptr<RemoteProcess>(std::make_unique<FakeProcess>(w_, host_, w_->next_pgid++));
  }
  api::Status upload(const fs::path& local, const std::string& remote, int mode) override {
    std::lock_guard<std::mutex> lock(w_->mu);
    w_->uploads.push_back(host_ + ": " + local.string() + " -> " + remote + " " + std::to_string(mode));
    return api::Status::ok();
  }

 private:
  FakeWorld* w_;
  std::string host_;
};

class FakeConnector : public Connector {
 public:
  explicit FakeConnector(FakeWorld* w) : w_(w) {}
  api::Result<std::unique_ptr<RemoteSession>> connect(const Host& host) override {
    {
      std::lock_guard<std::mutex> lock(w_->mu);
      if (w_->unreachable.count(host.address))
        return api::unavailable("host " + host.label() + ": cannot connect: Connection refused");
    }
    return std::unique_ptr<RemoteSession>(std::make_unique<FakeSession>(w_, host.address));
  }

 private:
  FakeWorld* w_;
};

Host make_host(const std::string& address, int slots = 1) {
  Host h;
  h.address = address;
  h.port = 2222;
  h.user = "root";
  h.identity_file = "/k";
  h.slots = slots;
  return h;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// ---------- inventory ----------
TEST(InventoryTest, ParsesHostsWithDefaultsAndComments) {
  auto hosts = parse_inventory(
      "# lab\n"
      "gpu1.lab  user=alice identity=/keys/a slots=4\n"
      "\n"
      "10.0.0.7 port=2222   # the pi\n",
      "inv.txt");
  ASSERT_TRUE(hosts.is_ok()) << hosts.status().message();
  ASSERT_EQ(hosts->size(), 2u);
  EXPECT_EQ((*hosts)[0].address, "gpu1.lab");
  EXPECT_EQ((*hosts)[0].user, "alice");
  EXPECT_EQ((*hosts)[0].identity_file, "/keys/a");
  EXPECT_EQ((*hosts)[0].slots, 4);
  EXPECT_EQ((*hosts)[0].port, 22);
  EXPECT_EQ((*hosts)[1].port, 2222);
  EXPECT_EQ((*hosts)[1].slots, 1);
}

TEST(InventoryTest, ErrorsNameFileAndLine) {
  struct Case {
    const char* text;
    const char* expect;
  } cases[] = {
      {"a\nb prt=22\n", "inv.txt:2: unknown key 'prt'"},
      {"a port=0\n", "inv.txt:1: port '0'"},
      {"a port=22x\n", "inv.txt:1: port '22x'"},
      {"\n\na slots=-1\n", "inv.txt:3: slots '-1'"},
      {"a user=-oProxyCommand\n", "inv.txt:1: user"},
      {"-oProxyCommand=x\n", "inv.txt:1: '-oProxyCommand=x' is not a host"},
      {"a novalue\n", "inv.txt:1: expected key=value"},
      {"a\na\n", "inv.txt:2: host a:22 is listed twice"},
      {"# nothing\n", "inv.txt: the inventory lists no hosts"},
  };
  for (const auto& c : cases) {
    auto r = parse_inventory(c.text, "inv.txt");
    ASSERT_FALSE(r.is_ok()) << c.text;
    EXPECT_EQ(r.status().code(), api::ErrorCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(c.expect), std::string::npos) << r.status().message();
  }
  auto missing = load_inventory("/nonexistent/inventory");
  ASSERT_FALSE(missing.is_ok());
  EXPECT_NE(missing.status().message().find("/nonexistent/inventory"), std::string::npos);
}

TEST(SshOptionsTest, FromMap) {
  auto ok = SshOptions::from_map({{"inventory", "/i"}, {"accept_new", "true"}, {"dead_after_ms", "500"}});
  ASSERT_TRUE(ok.is_ok()) << ok.status().message();
  EXPECT_TRUE(ok->accept_new);
  EXPECT_EQ(ok->dead_after, 500ms);
  EXPECT_FALSE(SshOptions::from_map({}).is_ok()) << "inventory is required";
  EXPECT_EQ(SshOptions::from_map({{"inventory", "/i"}, {"acept_new", "on"}}).status().field(), "acept_new");
  EXPECT_FALSE(SshOptions::from_map({{"inventory", "/i"}, {"accept_new", "maybe"}}).is_ok());
  EXPECT_TRUE(ok->mpi_ssh) << "the daemon hands mpirun its ssh settings by default";
}

TEST(SshOptionsTest, MpiRshAgentOnlyWhenHostsShareUserAndKey) {
  FakeWorld world;
  SshOptions o;
  o.hosts = {make_host("h1"), make_host("h2")};
  o.master_address = "10.0.0.1";
  o.known_hosts = "/kh";
  auto b = SshBackend::create(o, std::make_unique<FakeConnector>(&world));
  ASSERT_TRUE(b.is_ok());
  EXPECT_EQ(b.value()->mpi_rsh_agent(),
            "ssh -i /k -l root -o IdentitiesOnly=yes -o BatchMode=yes -o StrictHostKeyChecking=yes "
            "-o UserKnownHostsFile=/kh");
  o.hosts[1].identity_file = "/other";
  auto c = SshBackend::create(o, std::make_unique<FakeConnector>(&world));
  ASSERT_TRUE(c.is_ok());
  EXPECT_EQ(c.value()->mpi_rsh_agent(), "");
}

TEST(RemoteCommandTest, QuotesEverythingAndReportsTheProcessGroup) {
  LaunchSpec s;
  s.agent_argv = {"/local/muster-agent", "--script", "it's.py"};
  s.working_dir = "/proj dir";
  std::string cmd = SshBackend::remote_command(s, "/opt/muster-agent", {{"A", "x y"}, {"B", "$HOME"}});
  EXPECT_EQ(cmd.rfind("echo muster-pgid $$; cd '/proj dir' || ", 0), 0u) << cmd;
  EXPECT_NE(cmd.find("exec 2>&1; exec env 'A=x y' 'B=$HOME' /opt/muster-agent --script 'it'\\''s.py'"),
            std::string::npos)
      << cmd;
  EXPECT_EQ(shell_quote("a'b"), "'a'\\''b'");
}

// The working directory used to be pasted unquoted into the error message of
// the remote command: a directory named "$(touch ...)" ran that command on the
// host. Run the command through a real shell with such a directory.
TEST(RemoteCommandTest, AHostileWorkingDirectoryNeverRuns) {
  const std::filesystem::path scratch = std::filesystem::temp_directory_path() / ("muster-harden-rc-" + std::to_string(::getpid()));
  std::filesystem::create_directories(scratch);
  const std::filesystem::path marker = scratch / "PWNED";
  LaunchSpec s;
  s.agent_argv = {"/local/muster-agent"};
  s.working_dir = scratch.string() + "/no such $(touch " + marker.string() + ") `touch " + marker.string() + "`";
  const std::string cmd = SshBackend::remote_command(s, "/bin/true", {});
  const std::string shell = "/bin/sh -c " + shell_quote(cmd) + " > " + (scratch / "out").string() + " 2>&1";
  const int rc = std::system(shell.c_str());
  EXPECT_EQ(WEXITSTATUS(rc), 126);
  EXPECT_FALSE(std::filesystem::exists(marker)) << cmd;
  std::ifstream in(scratch / "out");
  const std::string out((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(out.find("muster: no directory " + s.working_dir.string()), std::string::npos) << out;
  std::filesystem::remove_all(scratch);
}

// ---------- the backend over the fake ----------
class SshBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("muster-sshut-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    backend_.reset();
    fs::remove_all(dir_);
  }
  void make(std::vector<Host> hosts) {
    SshOptions o;
    o.hosts = std::move(hosts);
    o.master_address = "10.9.0.1";
    o.known_hosts = dir_ / "kh";
    o.teardown_threads = 0;  // a stop's teardown runs before stop() returns
    auto b = SshBackend::create(o, std::make_unique<FakeConnector>(&world_));
    ASSERT_TRUE(b.is_ok()) << b.status().message();
    backend_ = std::move(b.value());
  }
  LaunchSpec spec(const std::string& id) {
    LaunchSpec s;
    s.worker_id = id;
    s.agent_argv = {"/bin/muster-agent"};
    // As the registry builds it: MUSTER_URL names the backend's master address.
    s.env = {{"MUSTER_URL", "http://10.9.0.1:7878"}, {"MUSTER_MASTER_IP", "10.9.0.1"}};
    s.log_path = dir_ / (id + ".log");
    return s;
  }
  ProcessStatus wait_state(const std::string& id, ProcessState not_this) {
    ProcessStatus st = backend_->poll(id);
    for (int i = 0; i < 2000 && st.state == not_this; ++i) {
      std::this_thread::sleep_for(5ms);
      st = backend_->poll(id);
    }
    return st;
  }

  FakeWorld world_;
  fs::path dir_;
  std::unique_ptr<SshBackend> backend_;
};

TEST_F(SshBackendTest, PlacesBySlotsAndStreamsLogs) {
  make({make_host("h1", 2), make_host("h2", 1)});
  world_.outputs["h1"] = "hello from h1\n";
  // Worker a is the first started: pgid 4000 (c, also on h1, gets 4002).
  world_.scripts["4000"] = {ReadEvent{ReadState::kData, -1, "more\n"}, ReadEvent{ReadState::kEnded, 0, {}}};
  ASSERT_TRUE(backend_->launch({spec("a"), spec("b"), spec("c")}).is_ok());
  EXPECT_EQ(backend_->host_of("a")->address, "h1");
  EXPECT_EQ(backend_->host_of("b")->address, "h2");
  EXPECT_EQ(backend_->host_of("c")->address, "h1");
  // Plain words go unquoted (api/base/shell_quote.h), everything else in single quotes.
  ASSERT_EQ(world_.started.size(), 3u);
  EXPECT_NE(world_.started[0].find(" MUSTER_URL=http://10.9.0.1:7878 "), std::string::npos) << world_.started[0];
  EXPECT_NE(world_.started[0].find(" MUSTER_MASTER_IP=10.9.0.1 "), std::string::npos);
  // The agent presence is checked once per host.
  int checks = 0;
  for (const auto& r : world_.runs) checks += r.find("test -x /bin/muster-agent") != std::string::npos;
  EXPECT_EQ(checks, 2);

  ProcessStatus a = wait_state("a", ProcessState::kRunning);
  EXPECT_EQ(a.state, ProcessState::kExited);
  EXPECT_EQ(a.exit_code, 0);
  std::string log = slurp(dir_ / "a.log");
  EXPECT_EQ(log, "hello from h1\nmore\n") << "the pgid header is not part of the log";

  api::Status full = backend_->launch({spec("d"), spec("e")});
  EXPECT_EQ(full.code(), api::ErrorCode::kUnavailable);
  EXPECT_NE(full.message().find("no free slot"), std::string::npos);
}

TEST_F(SshBackendTest, StopSignalsTheProcessGroupOverASecondSession) {
  make({make_host("h1")});
  ASSERT_TRUE(backend_->launch({spec("a")}).is_ok());
  EXPECT_EQ(backend_->poll("a").state, ProcessState::kRunning);
  ASSERT_TRUE(backend_->stop("a", 1000ms).is_ok());
  EXPECT_NE(std::find(world_.runs.begin(), world_.runs.end(), "h1: kill -TERM -- -4000 2>/dev/null"),
            world_.runs.end());
  ProcessStatus st = backend_->poll("a");
  EXPECT_EQ(st.state, ProcessState::kExited);
  EXPECT_EQ(st.exit_code, 143);
  EXPECT_TRUE(backend_->stop("a", 0ms).is_ok());
  EXPECT_EQ(backend_->poll("zzz").state, ProcessState::kUnknown);
}

TEST_F(SshBackendTest, LostConnectionMarksLost) {
  make({make_host("h1")});
  world_.scripts["h1"] = {ReadEvent{ReadState::kLost, -1, "Connection timed out"}};
  ASSERT_TRUE(backend_->launch({spec("a")}).is_ok());
  EXPECT_EQ(wait_state("a", ProcessState::kRunning).state, ProcessState::kLost);
  EXPECT_NE(slurp(dir_ / "a.log").find("lost the connection to root@h1:2222"), std::string::npos);
}

TEST_F(SshBackendTest, StreamedOutputIsCappedHereAndTheRemoteAgentWritesNoFile) {
  make({make_host("h1")});
  std::deque<ReadEvent> events;
  std::string line = std::string(99, 'x') + "\n";
  std::string chunk;
  for (int i = 0; i < 100; ++i) chunk += line;  // 10 kB a read
  for (int i = 0; i < 100; ++i) events.push_back(ReadEvent{ReadState::kData, -1, chunk});
  events.push_back(ReadEvent{ReadState::kEnded, 0, {}});
  world_.scripts["4000"] = events;
  LaunchSpec s = spec("a");
  s.log_limits = {8192, 1};
  api::add_log_capture_env(s.env, {s.log_path.string(), s.log_limits});
  ASSERT_TRUE(backend_->launch({s}).is_ok());
  EXPECT_EQ(world_.started[0].find("MUSTER_LOG_"), std::string::npos) << "the remote host cannot write our file";
  EXPECT_EQ(wait_state("a", ProcessState::kRunning).state, ProcessState::kExited);
  EXPECT_LE(fs::file_size(s.log_path), 8192u);
  EXPECT_LE(fs::file_size(base::rotated_path(s.log_path, 1)), 8192u);
  EXPECT_FALSE(fs::exists(base::rotated_path(s.log_path, 2)));
  const base::LogFileInfo info = base::describe_log(s.log_path);
  const uint64_t total = info.base_offset + info.size;  // every byte the log ever held
  EXPECT_EQ(info.dropped + fs::file_size(base::rotated_path(s.log_path, 1)) + info.size, total);
  EXPECT_GE(total, 1000u * 1000u) << "every byte streamed back is on disk or counted as dropped";
  EXPECT_LT(total, 1000u * 1000u + 200u * (total / 4000u)) << "plus one rotation line per file";
}

TEST_F(SshBackendTest, LaunchIsAllOrNothing) {
  make({make_host("h1"), make_host("h2")});
  world_.unreachable.insert("h2");
  api::Status s = backend_->launch({spec("a"), spec("b")});
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("worker b on root@h2:2222"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("Connection refused"), std::string::npos) << s.message();
  EXPECT_EQ(backend_->poll("a").state, ProcessState::kUnknown);
  EXPECT_NE(std::find(world_.runs.begin(), world_.runs.end(), "h1: kill -TERM -- -4000 2>/dev/null"),
            world_.runs.end())
      << "the worker already started on h1 is stopped";
  world_.unreachable.clear();
  EXPECT_TRUE(backend_->launch({spec("a"), spec("b")}).is_ok()) << "the slots were given back";
}

TEST_F(SshBackendTest, CopiesAgentWhenMissing) {
  make({make_host("h1")});
  world_.replies["test -x"] = RemoteResult{1, "", ""};
  LaunchSpec s = spec("a");
  ASSERT_TRUE(backend_->launch({s}).is_ok());
  ASSERT_EQ(world_.uploads.size(), 1u);
  EXPECT_EQ(world_.uploads[0], "h1: /bin/muster-agent -> /bin/muster-agent 493");
}

// ---------- preflight ----------
TEST(PreflightParseTest, RouteDevPrefixAndProbe) {
  EXPECT_EQ(parse_route_dev("10.213.0.3 dev eth0 src 10.213.0.2 uid 0 \\    cache \n"), "eth0");
  EXPECT_EQ(parse_route_dev("local 127.0.0.1 dev lo table local src 127.0.0.1"), "lo");
  EXPECT_EQ(parse_route_dev("RTNETLINK answers: Network is unreachable"), "");
  EXPECT_EQ(prefix_from_tool_path("/usr/bin/orted"), "/usr");
  EXPECT_EQ(prefix_from_tool_path("/opt/openmpi-4.1/bin/orted"), "/opt/openmpi-4.1");
  EXPECT_EQ(prefix_from_tool_path("/weird/orted"), "");
  auto p = parse_probe("PATH=/usr/bin:/bin\nmpirun=/usr/bin/mpirun\norted=\npython3=/usr/bin/python3\n");
  EXPECT_EQ(p["PATH"], "/usr/bin:/bin");
  EXPECT_EQ(p["mpirun"], "/usr/bin/mpirun");
  EXPECT_EQ(p["orted"], "");
  EXPECT_NE(probe_command({"orted"}, {}).find("command -v orted"), std::string::npos);
  EXPECT_NE(probe_command({}, {"10.0.0.3"}).find("ip -o route get 10.0.0.3"), std::string::npos);
  auto q = parse_probe("route:10.0.0.3=10.0.0.3 dev eth0 src 10.0.0.2 uid 0\n");
  EXPECT_EQ(parse_route_dev(q["route:10.0.0.3"]), "eth0");
}

TEST(PreflightTest, GoodHostsGivePrefixAndInterface) {
  FakeWorld world;
  world.replies["command -v"] =
      RemoteResult{0,
                   "PATH=/usr/bin\nmpirun=/usr/bin/mpirun\norted=/usr/bin/orted\npython3=/usr/bin/python3\n"
                   "route:10.213.0.3=10.213.0.3 dev eth0 src 10.213.0.2 uid 0\n"
                   "route:10.213.0.2=10.213.0.2 dev eth0 src 10.213.0.3 uid 0\n",
                   ""};
  FakeConnector connector(&world);
  PreflightOptions o;
  o.hosts = {make_host("10.213.0.2"), make_host("10.213.0.3")};
  o.program = "python3";
  PreflightReport r = run_preflight(connector, o);
  EXPECT_TRUE(r.ok) << r.summary();
  EXPECT_EQ(r.prefix, "/usr");
  EXPECT_EQ(r.interfaces, "eth0");
  EXPECT_EQ(r.hosts[0].found["orted"], "/usr/bin/orted");
  ASSERT_EQ(world.runs.size(), 2u) << "one command per host";
}

TEST(PreflightTest, FailuresAreReportedPerHost) {
  FakeWorld world;
  world.unreachable.insert("10.213.0.4");
  world.replies["10.213.0.3: echo"] = RemoteResult{0, "PATH=/usr/bin\nmpirun=/usr/bin/mpirun\norted=\npython3=\n", ""};
  world.replies["10.213.0.2: echo"] =
      RemoteResult{0,
                   "PATH=/usr/bin\nmpirun=/usr/bin/mpirun\norted=/usr/bin/orted\npython3=/usr/bin/python3\n"
                   "route:10.213.0.3=10.213.0.3 dev eth0 src 10.213.0.2\n"
                   "route:10.213.0.4=10.213.0.4 dev eth0 src 10.213.0.2\n",
                   ""};
  FakeConnector connector(&world);
  PreflightOptions o;
  o.hosts = {make_host("10.213.0.2"), make_host("10.213.0.3"), make_host("10.213.0.4")};
  o.program = "python3";
  PreflightReport r = run_preflight(connector, o);
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(r.hosts[0].ok);
  EXPECT_FALSE(r.hosts[1].ok);
  EXPECT_FALSE(r.hosts[2].ok);
  std::string s = r.summary();
  EXPECT_EQ(s.find("root@10.213.0.2:2222"), std::string::npos) << "good hosts are not in the summary: " << s;
  EXPECT_NE(s.find("root@10.213.0.3:2222: orted not found on the non-interactive PATH (/usr/bin)"), std::string::npos)
      << s;
  EXPECT_NE(s.find("python3 not found"), std::string::npos) << s;
  EXPECT_NE(s.find("root@10.213.0.4:2222: unreachable over SSH"), std::string::npos) << s;
}

// MpiHosts of the ssh backend: the preflight's findings and the rsh agent
// come back explicitly (nothing reaches mpirun through the environment).
TEST(PreflightTest, SshBackendAnswersTheLaunchLineValues) {
  FakeWorld world;
  world.replies["command -v"] =
      RemoteResult{0,
                   "PATH=/usr/bin\nmpirun=/usr/bin/mpirun\norted=/opt/ompi/bin/orted\n/usr/bin/python3=/usr/bin/python3\n"
                   "route:10.213.0.3=10.213.0.3 dev eth1 src 10.213.0.2 uid 0\n"
                   "route:10.213.0.2=10.213.0.2 dev eth1 src 10.213.0.3 uid 0\n",
                   ""};
  SshOptions o;
  o.hosts = {make_host("10.213.0.2"), make_host("10.213.0.3")};
  o.master_address = "10.213.0.1";
  o.known_hosts = "/kh";
  o.mpi_ssh = true;
  auto b = SshBackend::create(o, std::make_unique<FakeConnector>(&world));
  ASSERT_TRUE(b.is_ok());
  MpiHosts& hosts = *b.value();
  auto found = hosts.preflight_mpi({{"10.213.0.2", "10.213.0.3"}, 2222, "/usr/bin/python3"});
  ASSERT_TRUE(found.is_ok()) << found.status().message();
  EXPECT_EQ(found->prefix, "/opt/ompi");
  EXPECT_EQ(found->network_interfaces, std::vector<std::string>{"eth1"});
  EXPECT_EQ(found->rsh_agent, b.value()->mpi_rsh_agent());
  EXPECT_EQ(std::getenv("OMPI_MCA_plm_rsh_agent"), nullptr) << "no process-wide channel to mpirun";

  world.unreachable.insert("10.213.0.3");
  auto failed = hosts.preflight_mpi({{"10.213.0.2", "10.213.0.3"}, 2222, "/usr/bin/python3"});
  ASSERT_FALSE(failed.is_ok());
  EXPECT_EQ(failed.status().code(), api::ErrorCode::kUnavailable);
  EXPECT_NE(failed.status().message().find("root@10.213.0.3:2222: unreachable over SSH"), std::string::npos)
      << failed.status().message();

  o.mpi_ssh = false;
  world.unreachable.clear();
  auto quiet = SshBackend::create(o, std::make_unique<FakeConnector>(&world));
  ASSERT_TRUE(quiet.is_ok());
  auto plain = quiet.value()->preflight_mpi({{"10.213.0.2", "10.213.0.3"}, 2222, "/usr/bin/python3"});
  ASSERT_TRUE(plain.is_ok()) << plain.status().message();
  EXPECT_EQ(plain->rsh_agent, "") << "mpi_ssh off: mpirun's own ssh";
}

}  // namespace
}  // namespace muster::workers::ssh
