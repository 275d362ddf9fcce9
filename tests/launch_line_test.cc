// horovodrun and mpirun argument vectors.
#include "clusterspec/launch_line.h"

#include <algorithm>
#include <functional>

#include <gtest/gtest.h>

#include "clusterspec/shell.h"
#include "clusterspec/spec_error.h"

namespace muster::clusterspec {
namespace {

using Argv = std::vector<std::string>;

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const SpecError& e) {
    return e.what();
  }
  return "(no error)";
}

HorovodrunOptions two_hosts() {
  HorovodrunOptions h;
  h.hosts = {{"10.0.0.5", 1}, {"10.0.0.6", 1}};
  h.command = {"python3", "train.py"};
  return h;
}

TEST(HorovodrunTest, MinimalLine) {
  EXPECT_EQ(horovodrun_argv(two_hosts()),
            (Argv{"horovodrun", "-np", "2", "-H", "10.0.0.5:1,10.0.0.6:1", "python3", "train.py"}));
}

TEST(HorovodrunTest, EveryFlagInHorovodsSpelling) {
  auto h = two_hosts();
  h.hosts = {{"a", 2}, {"b", 2}};
  h.num_proc = 3;
  h.ssh_port = 2222;
  h.ssh_identity_file = "/root/.ssh/id_rsa";
  h.network_interfaces = {"eth0", "ib0"};
  h.fusion_threshold_mb = 64;
  h.cycle_time_ms = 2.5;
  h.timeline_filename = "/tmp/timeline.json";
  h.start_timeout_s = 30;
  h.verbose = true;
  h.command = {"python3", "train.py", "--epochs", "2"};
  // --network-interfaces, not the deprecated --network-interface (horovod#3506).
  EXPECT_EQ(horovodrun_argv(h),
            (Argv{"horovodrun", "-np", "3", "-H", "a:2,b:2", "-p", "2222", "-i", "/root/.ssh/id_rsa",
                  "--network-interfaces", "eth0,ib0", "--fusion-threshold-mb", "64", "--cycle-time-ms", "2.5",
                  "--timeline-filename", "/tmp/timeline.json", "--start-timeout", "30", "--verbose", "python3",
                  "train.py", "--epochs", "2"}));
}

TEST(HorovodrunTest, OneToManyHostsAndSlots) {
  for (int n_hosts : {1, 2, 5, 64}) {
    for (int slots : {1, 4}) {
      HorovodrunOptions h;
      std::string expected_hosts;
      for (int i = 0; i < n_hosts; ++i) {
        h.hosts.push_back({"h" + std::to_string(i), slots});
        expected_hosts += (i ? "," : "") + std::string("h") + std::to_string(i) + ":" + std::to_string(slots);
      }
      h.command = {"./app"};
      auto argv = horovodrun_argv(h);
      EXPECT_EQ(argv[2], std::to_string(n_hosts * slots));
      EXPECT_EQ(argv[4], expected_hosts);
      auto m = mpirun_argv(mpirun_options_for(h));
      EXPECT_EQ(m[4], std::to_string(n_hosts * slots));
      EXPECT_EQ(m[6], expected_hosts);
    }
  }
}

TEST(HorovodrunTest, RejectsBadOptions) {
  auto h = two_hosts();
  h.num_proc = 3;
  EXPECT_EQ(error_of([&] { horovodrun_argv(h); }), "num_proc 3 must be in 1..2 (the hosts have 2 slots)");
  h = two_hosts();
  h.hosts.push_back({"x;reboot", 1});
  EXPECT_NE(error_of([&] { horovodrun_argv(h); }).find("hosts[2]: host \"x;reboot\""), std::string::npos);
  h = two_hosts();
  h.ssh_port = 0;
  EXPECT_EQ(error_of([&] { horovodrun_argv(h); }), "ssh_port 0 is not in 1..65535");
  h = two_hosts();
  h.network_interfaces = {"eth0", "eth0;id"};
  EXPECT_NE(error_of([&] { horovodrun_argv(h); }).find("network_interfaces[1]"), std::string::npos);
  h = two_hosts();
  h.command = {};
  EXPECT_NE(error_of([&] { horovodrun_argv(h); }).find("command is empty"), std::string::npos);
  h = two_hosts();
  h.command = {"--verbose", "x"};
  EXPECT_NE(error_of([&] { horovodrun_argv(h); }).find("must start with a program"), std::string::npos);
  h = two_hosts();
  h.command = {"python3", std::string("a\0b", 3)};
  EXPECT_NE(error_of([&] { horovodrun_argv(h); }).find("command[1] contains a NUL"), std::string::npos);
  h = two_hosts();
  h.ssh_identity_file = "/a key";
  EXPECT_NE(error_of([&] { horovodrun_argv(h); }).find("must not contain spaces"), std::string::npos);
  h = two_hosts();
  h.cycle_time_ms = 0;
  EXPECT_NE(error_of([&] { horovodrun_argv(h); }).find("cycle_time_ms"), std::string::npos);
  h = two_hosts();
  h.fusion_threshold_mb = -1;
  EXPECT_NE(error_of([&] { horovodrun_argv(h); }).find("fusion_threshold_mb"), std::string::npos);
  h = two_hosts();
  h.start_timeout_s = 0;
  EXPECT_NE(error_of([&] { horovodrun_argv(h); }).find("start_timeout_s"), std::string::npos);
  h = two_hosts();
  h.hosts = {};
  EXPECT_NE(error_of([&] { horovodrun_argv(h); }).find("hosts: the list is empty"), std::string::npos);
}

TEST(MpirunTest, MatchesWhatHorovodrunWouldRun) {
  auto h = two_hosts();
  h.ssh_port = 2222;
  h.network_interfaces = {"eth0"};
  auto m = mpirun_options_for(h);
  m.forward_env = {"PATH", "PYTHONPATH"};
  EXPECT_EQ(mpirun_argv(m),
            (Argv{"mpirun", "--allow-run-as-root", "--tag-output", "-np", "2", "-H", "10.0.0.5:1,10.0.0.6:1",
                  "-bind-to", "none", "-map-by", "slot", "-mca", "pml", "ob1", "-mca", "btl", "^openib", "-mca",
                  "plm_rsh_args", "-p 2222", "-mca", "btl_tcp_if_include", "eth0", "-mca", "oob_tcp_if_include",
                  "eth0", "-x", "NCCL_SOCKET_IFNAME=eth0", "-x", "PATH", "-x", "PYTHONPATH", "python3", "train.py"}));
  EXPECT_EQ(join_for_shell(mpirun_argv(m)),
            "mpirun --allow-run-as-root --tag-output -np 2 -H 10.0.0.5:1,10.0.0.6:1 -bind-to none -map-by slot "
            "-mca pml ob1 -mca btl '^openib' -mca plm_rsh_args '-p 2222' -mca btl_tcp_if_include eth0 "
            "-mca oob_tcp_if_include eth0 -x NCCL_SOCKET_IFNAME=eth0 -x PATH -x PYTHONPATH python3 train.py");
  // Several interfaces: one comma-separated list for each of the three.
  m.network_interfaces = {"eth0", "ib0"};
  EXPECT_NE(join_for_shell(mpirun_argv(m)).find("-mca btl_tcp_if_include eth0,ib0 -mca oob_tcp_if_include eth0,ib0 "
                                                "-x NCCL_SOCKET_IFNAME=eth0,ib0"),
            std::string::npos);
}

TEST(MpirunTest, TunablesBecomeHorovodEnvironment) {
  auto h = two_hosts();
  h.fusion_threshold_mb = 32;
  h.cycle_time_ms = 5;
  h.timeline_filename = "/tmp/t.json";
  h.start_timeout_s = 60;
  h.verbose = true;
  auto m = mpirun_options_for(h);
  EXPECT_EQ(m.set_env.at("HOROVOD_FUSION_THRESHOLD"), "33554432");
  EXPECT_EQ(m.set_env.at("HOROVOD_CYCLE_TIME"), "5");
  EXPECT_EQ(m.set_env.at("HOROVOD_TIMELINE"), "/tmp/t.json");
  EXPECT_EQ(m.set_env.at("HOROVOD_START_TIMEOUT"), "60");
  auto argv = mpirun_argv(m);
  EXPECT_NE(std::find(argv.begin(), argv.end(), "HOROVOD_FUSION_THRESHOLD=33554432"), argv.end());
}

TEST(MpirunTest, PrefixSshExtrasAndExtraArgs) {
  MpirunOptions m;
  m.hosts = {{"10.0.0.5", 2}};
  m.prefix = "/usr/lib/x86_64-linux-gnu/openmpi";
  m.ssh_port = 2222;
  m.ssh_identity_file = "/keys/id";
  m.ssh_extra_args = {"-o", "StrictHostKeyChecking=no"};
  m.set_env = {{"A", "x y"}};
  m.extra_mpi_args = {"--oversubscribe"};
  m.command = {"./hello"};
  EXPECT_EQ(mpirun_argv(m),
            (Argv{"mpirun", "--allow-run-as-root", "--tag-output", "--prefix", "/usr/lib/x86_64-linux-gnu/openmpi",
                  "-np", "2", "-H", "10.0.0.5:2", "-bind-to", "none", "-map-by", "slot", "-mca", "pml", "ob1", "-mca",
                  "btl", "^openib", "-mca", "plm_rsh_args", "-p 2222 -i /keys/id -o StrictHostKeyChecking=no", "-x",
                  "A=x y", "--oversubscribe", "./hello"}));
}

TEST(MpirunTest, LargeClustersGetTreeSpawnOff) {
  MpirunOptions m;
  for (int i = 0; i < 64; ++i) m.hosts.push_back({"h" + std::to_string(i), 1});
  m.command = {"./a"};
  auto line = join_for_shell(mpirun_argv(m));
  EXPECT_NE(line.find("-mca plm_rsh_no_tree_spawn true -mca plm_rsh_num_concurrent 64"), std::string::npos);
  m.hosts.resize(63);
  EXPECT_EQ(join_for_shell(mpirun_argv(m)).find("plm_rsh_no_tree_spawn"), std::string::npos);
}

TEST(MpirunTest, HostileInputCannotInjectArguments) {
  MpirunOptions base;
  base.hosts = {{"a", 1}};
  base.command = {"./a"};
  auto m = base;
  m.forward_env = {"A;id"};
  EXPECT_NE(error_of([&] { mpirun_argv(m); }).find("forward_env"), std::string::npos);
  m = base;
  m.set_env = {{"$(id)", "1"}};
  EXPECT_NE(error_of([&] { mpirun_argv(m); }).find("set_env"), std::string::npos);
  m = base;
  m.set_env = {{"A", std::string("x\0y", 3)}};
  EXPECT_NE(error_of([&] { mpirun_argv(m); }).find("NUL"), std::string::npos);
  // plm_rsh_args is re-split on spaces by mpirun: nothing in it may add words.
  for (const char* bad : {"-o ProxyCommand=id", "x\"y", "x'y", "a\nb", "a\tb", ""}) {
    m = base;
    m.ssh_extra_args = {bad};
    EXPECT_NE(error_of([&] { mpirun_argv(m); }), "(no error)") << bad;
  }
  m = base;
  m.prefix = "relative";
  EXPECT_NE(error_of([&] { mpirun_argv(m); }).find("absolute"), std::string::npos);
  // Hostile command arguments are fine in the vector: they stay one word each,
  // and quoting keeps them inert for a shell.
  m = base;
  m.command = {"python3", "-c", "print('$(id)'); `id`", "a b;c"};
  auto argv = mpirun_argv(m);
  EXPECT_EQ(argv.back(), "a b;c");
  EXPECT_NE(join_for_shell(argv).find("'a b;c'"), std::string::npos);
}

}  // namespace
}  // namespace muster::clusterspec
