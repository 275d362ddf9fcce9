#include "clusterspec/launch_line.h"

#include <cmath>
#include <sstream>

#include "clusterspec/names.h"
#include "clusterspec/spec_error.h"

namespace muster::clusterspec {
namespace {

// Open MPI tweaks for many hosts (horovodrun applies them from 64 hosts on).
constexpr std::size_t kLargeClusterHosts = 64;

void check_no_nul(const std::string& value, const std::string& field) {
  if (value.find('\0') != std::string::npos) throw SpecError(field + " contains a NUL byte");
}

// A word mpirun will split out of plm_rsh_args again: no whitespace, quotes,
// backslashes or control characters, and not empty.
void check_rsh_word(const std::string& value, const std::string& field) {
  if (value.empty()) throw SpecError(field + " is empty");
  for (char c : value) {
    unsigned char u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u == 0x7f || c == '"' || c == '\'' || c == '\\') {
      throw SpecError(field + " " + quoted(value) + " must not contain spaces, quotes, backslashes or control characters");
    }
  }
}

void check_port(const std::optional<int>& port, const std::string& field) {
  if (port && (*port < 1 || *port > 65535)) throw SpecError(field + " " + std::to_string(*port) + " is not in 1..65535");
}

int checked_num_proc(int num_proc, const std::vector<HostSlots>& hosts) {
  if (auto error = hosts_error(hosts)) throw SpecError(*error);
  int slots = total_slots(hosts);
  if (num_proc == 0) return slots;
  if (num_proc < 0 || num_proc > slots) {
    throw SpecError("num_proc " + std::to_string(num_proc) + " must be in 1.." + std::to_string(slots) +
                    " (the hosts have " + std::to_string(slots) + " slots)");
  }
  return num_proc;
}

void check_interfaces(const std::vector<std::string>& names) {
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (!is_valid_interface(names[i])) {
      throw SpecError("network_interfaces[" + std::to_string(i) + "] " + quoted(names[i]) +
                      " is not an interface name ([A-Za-z0-9._-], at most 15)");
    }
  }
}

std::string comma_joined(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : ",") + item;
  return out;
}

void check_command(const std::vector<std::string>& command) {
  if (command.empty()) throw SpecError("command is empty: give the program every rank runs, e.g. python3 train.py");
  if (command[0].empty() || command[0][0] == '-') {
    throw SpecError("command must start with a program, not " + quoted(command[0]));
  }
  for (std::size_t i = 0; i < command.size(); ++i) check_no_nul(command[i], "command[" + std::to_string(i) + "]");
}

void check_program(const std::string& program, const std::string& field) {
  if (program.empty() || program[0] == '-') throw SpecError(field + " must name a program");
  check_no_nul(program, field);
}

std::string format_number(double value) {
  std::ostringstream out;
  out.precision(15);
  out << value;
  return out.str();
}

}  // namespace

std::vector<std::string> horovodrun_argv(const HorovodrunOptions& o) {
  check_program(o.program, "program");
  int np = checked_num_proc(o.num_proc, o.hosts);
  check_port(o.ssh_port, "ssh_port");
  check_interfaces(o.network_interfaces);
  check_command(o.command);
  if (o.fusion_threshold_mb && *o.fusion_threshold_mb < 0) throw SpecError("fusion_threshold_mb must be >= 0");
  if (o.cycle_time_ms && !(*o.cycle_time_ms > 0 && std::isfinite(*o.cycle_time_ms))) {
    throw SpecError("cycle_time_ms must be a positive number");
  }
  if (o.start_timeout_s && *o.start_timeout_s <= 0) throw SpecError("start_timeout_s must be > 0");

  std::vector<std::string> argv = {o.program, "-np", std::to_string(np), "-H", hosts_arg(o.hosts)};
  if (o.ssh_port) argv.insert(argv.end(), {"-p", std::to_string(*o.ssh_port)});
  if (!o.ssh_identity_file.empty()) {
    check_no_nul(o.ssh_identity_file, "ssh_identity_file");
    // horovodrun hands the key to mpirun inside plm_rsh_args, split on spaces.
    check_rsh_word(o.ssh_identity_file, "ssh_identity_file");
    argv.insert(argv.end(), {"-i", o.ssh_identity_file});
  }
  if (!o.network_interfaces.empty()) argv.insert(argv.end(), {"--network-interfaces", comma_joined(o.network_interfaces)});
  if (o.fusion_threshold_mb) argv.insert(argv.end(), {"--fusion-threshold-mb", std::to_string(*o.fusion_threshold_mb)});
  if (o.cycle_time_ms) argv.insert(argv.end(), {"--cycle-time-ms", format_number(*o.cycle_time_ms)});
  if (!o.timeline_filename.empty()) {
    check_no_nul(o.timeline_filename, "timeline_filename");
    if (o.timeline_filename[0] == '-') throw SpecError("timeline_filename must not start with '-'");
    argv.insert(argv.end(), {"--timeline-filename", o.timeline_filename});
  }
  if (o.start_timeout_s) argv.insert(argv.end(), {"--start-timeout", std::to_string(*o.start_timeout_s)});
  if (o.verbose) argv.push_back("--verbose");
  argv.insert(argv.end(), o.command.begin(), o.command.end());
  return argv;
}

std::vector<std::string> mpirun_argv(const MpirunOptions& o) {
  check_program(o.program, "program");
  int np = checked_num_proc(o.num_proc, o.hosts);
  check_port(o.ssh_port, "ssh_port");
  check_interfaces(o.network_interfaces);
  check_command(o.command);

  std::vector<std::string> argv = {o.program, "--allow-run-as-root", "--tag-output"};
  if (!o.prefix.empty()) {
    check_no_nul(o.prefix, "prefix");
    if (o.prefix[0] != '/') throw SpecError("prefix " + quoted(o.prefix) + " must be an absolute path");
    argv.insert(argv.end(), {"--prefix", o.prefix});
  }
  argv.insert(argv.end(), {"-np", std::to_string(np), "-H", hosts_arg(o.hosts)});
  argv.insert(argv.end(), {"-bind-to", "none", "-map-by", "slot", "-mca", "pml", "ob1", "-mca", "btl", "^openib"});
  if (o.hosts.size() >= kLargeClusterHosts) {
    argv.insert(argv.end(), {"-mca", "plm_rsh_no_tree_spawn", "true", "-mca", "plm_rsh_num_concurrent",
                             std::to_string(o.hosts.size())});
  }

  std::vector<std::string> rsh;
  if (o.ssh_port) rsh.insert(rsh.end(), {"-p", std::to_string(*o.ssh_port)});
  if (!o.ssh_identity_file.empty()) {
    check_rsh_word(o.ssh_identity_file, "ssh_identity_file");
    rsh.insert(rsh.end(), {"-i", o.ssh_identity_file});
  }
  for (std::size_t i = 0; i < o.ssh_extra_args.size(); ++i) {
    check_rsh_word(o.ssh_extra_args[i], "ssh_extra_args[" + std::to_string(i) + "]");
    rsh.push_back(o.ssh_extra_args[i]);
  }
  if (!rsh.empty()) {
    std::string joined;
    for (const auto& word : rsh) joined += (joined.empty() ? "" : " ") + word;
    argv.insert(argv.end(), {"-mca", "plm_rsh_args", joined});
  }

  if (!o.network_interfaces.empty()) {
    const std::string ifs = comma_joined(o.network_interfaces);
    argv.insert(argv.end(), {"-mca", "btl_tcp_if_include", ifs, "-mca", "oob_tcp_if_include", ifs, "-x",
                             "NCCL_SOCKET_IFNAME=" + ifs});
  }
  for (const auto& name : o.forward_env) {
    if (!is_valid_env_name(name)) throw SpecError("forward_env: " + quoted(name) + " is not an environment variable name");
    argv.insert(argv.end(), {"-x", name});
  }
  for (const auto& [name, value] : o.set_env) {
    if (!is_valid_env_name(name)) throw SpecError("set_env: " + quoted(name) + " is not an environment variable name");
    check_no_nul(value, "set_env." + name);
    argv.insert(argv.end(), {"-x", name + "=" + value});
  }
  for (std::size_t i = 0; i < o.extra_mpi_args.size(); ++i) {
    check_no_nul(o.extra_mpi_args[i], "extra_mpi_args[" + std::to_string(i) + "]");
  }
  argv.insert(argv.end(), o.extra_mpi_args.begin(), o.extra_mpi_args.end());
  argv.insert(argv.end(), o.command.begin(), o.command.end());
  return argv;
}

MpirunOptions mpirun_options_for(const HorovodrunOptions& h) {
  horovodrun_argv(h);  // the same checks horovodrun's line gets
  MpirunOptions m;
  m.hosts = h.hosts;
  m.num_proc = h.num_proc;
  m.ssh_port = h.ssh_port;
  m.ssh_identity_file = h.ssh_identity_file;
  m.network_interfaces = h.network_interfaces;
  if (h.fusion_threshold_mb) {
    m.set_env["HOROVOD_FUSION_THRESHOLD"] = std::to_string(static_cast<long long>(*h.fusion_threshold_mb) * 1024 * 1024);
  }
  if (h.cycle_time_ms) m.set_env["HOROVOD_CYCLE_TIME"] = format_number(*h.cycle_time_ms);
  if (!h.timeline_filename.empty()) m.set_env["HOROVOD_TIMELINE"] = h.timeline_filename;
  if (h.start_timeout_s) m.set_env["HOROVOD_START_TIMEOUT"] = std::to_string(*h.start_timeout_s);
  m.command = h.command;
  return m;
}

}  // namespace muster::clusterspec
