#include "service/admission.h"

#include <sched.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

namespace muster::service {

namespace {

// Sums of fractional asks (0.1 + 0.2) must not miss a fit by a rounding.
constexpr double kSlack = 1e-9;

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

std::string cpus(double v) { return number(v) + (v == 1 ? " CPU" : " CPUs"); }

}  // namespace

HostCapacity host_capacity() {
  HostCapacity h;
  cpu_set_t set;
  CPU_ZERO(&set);
  h.cpus = ::sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set)
                                                          : static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN));
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  double kib = 0;
  while (meminfo >> key >> kib) {
    if (key == "MemTotal:") {
      h.memory_gb = kib / (1024.0 * 1024.0);
      break;
    }
    meminfo.ignore(1 << 10, '\n');
  }
  return h;
}

Shortfall shortfall(const HostCapacity& host, const Demand& in_use, const Demand& ask) {
  Shortfall s;
  s.total = in_use;
  s.total += ask;
  if (host.cpus > 0 && s.total.cpu > host.cpus + kSlack) s.cpus = s.total.cpu - host.cpus;
  if (host.memory_gb > 0 && s.total.memory_gb > host.memory_gb + kSlack) s.memory_gb = s.total.memory_gb - host.memory_gb;
  return s;
}

std::string wait_reason(const HostCapacity& host, const Shortfall& s) {
  std::string out;
  if (s.cpus > 0) {
    out = "waiting for " + cpus(s.cpus) + ": " + number(s.total.cpu) + " of " + std::to_string(host.cpus) +
          " requested";
  }
  if (s.memory_gb > 0) {
    out += (out.empty() ? "" : "; ") + std::string("waiting for ") + number(s.memory_gb) + " GB of memory: " +
           number(s.total.memory_gb) + " of " + number(host.memory_gb) + " GB requested";
  }
  return out;
}

std::string overcommit_warning(const HostCapacity& host, const Shortfall& s, const Demand& in_use) {
  std::string out;
  auto by = [](double running, double asked, const std::string& unit) {
    return " (" + number(running) + unit + " by the workers already there, " + number(asked) + unit +
           " by this launch)";
  };
  if (s.cpus > 0) {
    out = "this launch takes the host's CPUs past its capacity: " + number(s.total.cpu) + " of " +
          std::to_string(host.cpus) + " CPUs requested" + by(in_use.cpu, s.total.cpu - in_use.cpu, "") +
          "; the workers share the CPUs";
  }
  if (s.memory_gb > 0) {
    out += (out.empty() ? "" : "; ") + std::string("this launch takes the host's memory past its capacity: ") +
           number(s.total.memory_gb) + " of " + number(host.memory_gb) + " GB requested" +
           by(in_use.memory_gb, s.total.memory_gb - in_use.memory_gb, " GB") +
           "; a worker that uses its share may be killed or swap";
  }
  if (!out.empty()) out += " (musterd --overcommit=false makes such workers wait until the host has room)";
  return out;
}

std::string never_fits(const HostCapacity& host, const Shortfall& alone, const std::string& what) {
  std::string asks;
  if (alone.cpus > 0) asks = cpus(alone.total.cpu) + " asked for and this host has " + std::to_string(host.cpus);
  if (alone.memory_gb > 0) {
    asks += (asks.empty() ? "" : "; ") + number(alone.total.memory_gb) + " GB of memory asked for and this host has " +
            number(host.memory_gb) + " GB";
  }
  return what + ": " + asks + ", so it could never start (musterd --overcommit=false); ask for less";
}

}  // namespace muster::service
