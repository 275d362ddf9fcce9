#include "workers/remote/preflight.h"

#include <algorithm>
#include <future>
#include <set>
#include <sstream>

namespace muster::workers::remote {

std::string parse_route_dev(const std::string& output) {
  std::istringstream in(output);
  std::string word;
  while (in >> word)
    if (word == "dev" && (in >> word)) return word;
  return "";
}

std::string prefix_from_tool_path(const std::string& path) {
  auto slash = path.rfind('/');
  if (slash == std::string::npos || slash == 0) return "";
  std::string bin = path.substr(0, slash);
  auto up = bin.rfind('/');
  if (up == std::string::npos) return "";
  if (bin.substr(up + 1) != "bin") return "";
  return up == 0 ? "/" : bin.substr(0, up);
}

std::string probe_command(const std::vector<std::string>& names, const std::vector<std::string>& peers) {
  std::string cmd = "echo \"PATH=$PATH\"";
  for (const auto& n : names)
    cmd += "; printf '%s=' " + shell_quote(n) + "; command -v " + shell_quote(n) + " || echo";
  for (const auto& p : peers)
    cmd += "; printf '%s=' " + shell_quote("route:" + p) + "; ip -o route get " + shell_quote(p) +
           " 2>&1 | head -n 1 || echo";
  return cmd;
}

std::map<std::string, std::string> parse_probe(const std::string& output) {
  std::map<std::string, std::string> out;
  std::istringstream in(output);
  std::string line;
  while (std::getline(in, line)) {
    auto eq = line.find('=');
    if (eq == std::string::npos || eq == 0) continue;
    out[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return out;
}

std::string PreflightReport::summary() const {
  std::string s;
  for (const auto& h : hosts) {
    if (h.ok) continue;
    s += h.host.label() + ":";
    for (size_t i = 0; i < h.problems.size(); ++i) s += (i ? "; " : " ") + h.problems[i];
    s += "\n";
  }
  if (s.empty() && !ok) s = "preflight failed\n";
  return s;
}

namespace {

// Steps 1-3 for one host, over one session and one command.
HostReport check_host(Connector& connector, const PreflightOptions& options, size_t i,
                      const std::vector<std::string>& names) {
  const Host& host = options.hosts[i];
  HostReport r;
  r.host = host;
  auto session = connector.connect(host);
  if (!session) {
    r.problems.push_back("unreachable over SSH: " + session.status().message());
    return r;
  }
  std::vector<std::string> peers;
  for (size_t j = 0; j < options.hosts.size(); ++j)
    if (j != i && options.hosts[j].address != host.address) peers.push_back(options.hosts[j].address);
  if (peers.empty() && !options.master_address.empty()) peers.push_back(options.master_address);
  auto probe = session.value()->run(probe_command(names, peers));
  if (!probe) {
    r.problems.push_back(probe.status().message());
    return r;
  }
  auto found = parse_probe(probe->out);
  r.remote_path = found["PATH"];
  for (const auto& n : names) {
    const std::string& path = found[n];
    if (path.empty())
      r.problems.push_back(n + " not found on the non-interactive PATH (" + r.remote_path +
                           "); install it or put its directory on PATH in the shell's non-interactive startup "
                           "file (e.g. ~/.bashrc before its interactive-only guard)");
    else
      r.found[n] = path;
  }
  for (const auto& peer : peers) {
    const std::string& route = found["route:" + peer];
    std::string dev = parse_route_dev(route);
    if (dev.empty()) {
      r.problems.push_back("no route to " + peer + " (`ip -o route get " + peer + "`: " + route + ")");
      continue;
    }
    if (r.interface.empty()) r.interface = dev;
    else if (r.interface != dev)
      r.problems.push_back("peers are reached over different interfaces (" + r.interface + ", " + dev +
                           "); MPI needs one: check the routes");
  }
  r.ok = r.problems.empty();
  return r;
}

}  // namespace

PreflightReport run_preflight(Connector& connector, const PreflightOptions& options) {
  PreflightReport report;
  std::vector<std::string> names = options.tools;
  if (!options.program.empty()) names.push_back(options.program);
  // Hosts are checked in parallel (one session each), reported in order.
  std::vector<std::future<HostReport>> pending;
  for (size_t i = 0; i < options.hosts.size(); ++i)
    pending.push_back(std::async(std::launch::async,
                                 [&, i] { return check_host(connector, options, i, names); }));
  for (auto& f : pending) report.hosts.push_back(f.get());
  report.ok = !report.hosts.empty();
  std::set<std::string> prefixes;
  std::vector<std::string> ifaces;
  for (const auto& h : report.hosts) {
    report.ok = report.ok && h.ok;
    if (auto it = h.found.find("orted"); it != h.found.end()) prefixes.insert(prefix_from_tool_path(it->second));
    if (!h.interface.empty() && std::find(ifaces.begin(), ifaces.end(), h.interface) == ifaces.end())
      ifaces.push_back(h.interface);
  }
  if (prefixes.size() == 1) report.prefix = *prefixes.begin();
  for (const auto& i : ifaces) report.interfaces += (report.interfaces.empty() ? "" : ",") + i;
  return report;
}

}  // namespace muster::workers::remote
