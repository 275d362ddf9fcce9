// fleet_agents: many simulated muster agents in one process, for the fleet
// benchmark (bench/fleet/run.py). It connects to a FleetBackend's Unix
// socket (fleet_backend.h) and, for every worker announced there, does what
// muster-agent does over the real agent protocol (api/agent_protocol.h):
// register on a connection of its own, kept open while musterd keeps it
// (a response with Connection: close, or a close while idle, means a new
// connection for the next request, as the agent's HttpConnection does);
// heartbeat every --interval-ms, or every heartbeat_s once a register or
// heartbeat reply gives one (at a random phase, on schedule, not drifting);
// end with an
// exit report when the backend says stop or a heartbeat answers 409; and
// write the worker's log file. It runs no script.
//
//   fleet_agents --socket PATH --port PORT [--interval-ms 2000]
//                [--source 127.0.0.2 ...]   (--help says more)
//
// Each agent's connection leaves from one of the --source loopback addresses
// (round-robin; IP_BIND_ADDRESS_NO_PORT), so 30,000 connections to one port
// do not run out of ephemeral ports. SIGUSR1 prints one JSON line of what
// happened since the last one (latencies per request kind, statuses,
// errors, agents alive); SIGTERM ends the process.
#include <netinet/in.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

enum class Kind { kRegister = 0, kHeartbeat = 1, kExit = 2 };
const char* kKindNames[] = {"register", "heartbeat", "exit"};

struct Stats {
  std::vector<uint32_t> micros[3];
  std::map<int, uint64_t> statuses[3];
  uint64_t errors = 0;        // connect/read/write failures (each retried)
  uint64_t queued = 0;        // heartbeats due while the previous request was still out
  uint64_t stale = 0;         // kept connections found closed (asked again at once on a new one)
  uint64_t reconnects = 0;    // connections opened after the first
  uint64_t registered = 0, exited = 0;

  static nlohmann::json summary(std::vector<uint32_t>& v) {
    nlohmann::json j{{"count", v.size()}};
    if (v.empty()) return j;
    std::sort(v.begin(), v.end());
    auto at = [&](double q) { return v[std::min(v.size() - 1, static_cast<size_t>(q * v.size()))] / 1000.0; };
    j["p50_ms"] = at(0.50);
    j["p99_ms"] = at(0.99);
    j["max_ms"] = v.back() / 1000.0;
    return j;
  }
};

struct Options {
  std::string socket;
  unsigned short port = 0;
  std::chrono::milliseconds interval{2000};
  std::vector<asio::ip::address_v4> sources;
};

class Fleet;

class Agent : public std::enable_shared_from_this<Agent> {
 public:
  Agent(Fleet& fleet, std::string id, std::string token, std::string log_path, asio::ip::address_v4 source);
  void start();
  void stop();  // the backend stopped the worker: report exit 143

 private:
  void connect();
  void enqueue(Kind kind);
  void send_next();
  void on_response(Kind kind, beast::error_code ec);
  void schedule_heartbeat(Clock::time_point at);
  void retry_later();
  void take_interval(const std::string& body);

  Fleet& fleet_;
  const std::string id_, token_, log_path_;
  const asio::ip::address_v4 source_;
  tcp::socket socket_;
  asio::steady_timer heartbeat_timer_;
  asio::steady_timer retry_timer_;
  beast::flat_buffer buffer_;
  http::response<http::string_body> response_;
  std::string request_;
  std::deque<Kind> queue_;
  bool connected_ = false, busy_ = false, registered_ = false, ending_ = false, done_ = false;
  Clock::time_point sent_{};
  Clock::time_point next_beat_{};
  std::chrono::milliseconds interval_{};  // as the daemon last said (--interval-ms until it does)
  int answered_here_ = 0;  // requests answered on the open connection
  bool reused_ = false;    // the request in flight went on a connection kept from an earlier one
};

class Fleet {
 public:
  Fleet(asio::io_context& io, Options options) : io_(io), options_(std::move(options)), control_(io), rng_(std::random_device{}()) {}

  void run() {
    control_.connect(asio::local::stream_protocol::endpoint(options_.socket));
    read_control();
  }
  asio::io_context& io() { return io_; }
  const Options& options() const { return options_; }
  Stats& stats() { return stats_; }
  long random_below(long n) { return std::uniform_int_distribution<long>(0, std::max(n, 1L) - 1)(rng_); }
  void finished(const std::string& id) { agents_.erase(id); }

  void report() {
    nlohmann::json j{{"agents", agents_.size()},    {"registered", stats_.registered}, {"exited", stats_.exited},
                     {"errors", stats_.errors},     {"queued_heartbeats", stats_.queued},
                     {"stale_connections", stats_.stale}, {"reconnects", stats_.reconnects}};
    for (int k = 0; k < 3; ++k) {
      auto s = Stats::summary(stats_.micros[k]);
      for (const auto& [code, n] : stats_.statuses[k]) s["status"][std::to_string(code)] = n;
      j[kKindNames[k]] = s;
      stats_.micros[k].clear();
      stats_.statuses[k].clear();
    }
    stats_.errors = stats_.queued = stats_.stale = stats_.reconnects = 0;
    std::cout << j.dump() << std::endl;
  }

 private:
  void read_control() {
    asio::async_read_until(control_, control_buf_, '\n', [this](beast::error_code ec, std::size_t) {
      if (ec) {
        std::cerr << "fleet_agents: control socket closed: " << ec.message() << "\n";
        io_.stop();
        return;
      }
      std::istream in(&control_buf_);
      std::string line;
      std::getline(in, line);
      handle(line);
      read_control();
    });
  }

  void handle(const std::string& line) {
    std::istringstream words(line);
    std::string verb, id;
    words >> verb >> id;
    if (verb == "L") {
      std::string token, log_path;
      words >> token >> log_path;
      const auto& sources = options_.sources;
      auto agent = std::make_shared<Agent>(*this, id, token, log_path, sources[placed_++ % sources.size()]);
      agents_[id] = agent;
      agent->start();
    } else if (verb == "S") {
      if (auto it = agents_.find(id); it != agents_.end()) it->second->stop();
    }
  }

  asio::io_context& io_;
  Options options_;
  asio::local::stream_protocol::socket control_;
  asio::streambuf control_buf_;
  std::map<std::string, std::shared_ptr<Agent>> agents_;
  size_t placed_ = 0;
  Stats stats_;
  std::mt19937 rng_;
};

Agent::Agent(Fleet& fleet, std::string id, std::string token, std::string log_path, asio::ip::address_v4 source)
    : fleet_(fleet), id_(std::move(id)), token_(std::move(token)), log_path_(std::move(log_path)), source_(source),
      socket_(fleet.io()), heartbeat_timer_(fleet.io()), retry_timer_(fleet.io()),
      interval_(fleet.options().interval) {}

// A reply's heartbeat_s, if any (api/agent_protocol.h): only where a
// number follows the key, as the agent reads it; anything else keeps it.
void Agent::take_interval(const std::string& body) {
  if (body.find("heartbeat_s") == std::string::npos) return;
  const auto j = nlohmann::json::parse(body, nullptr, false);
  if (!j.is_object() || !j.contains("heartbeat_s") || !j["heartbeat_s"].is_number()) return;
  const double s = j["heartbeat_s"].get<double>();
  if (s >= 0.01 && s <= 3600) interval_ = std::chrono::milliseconds(std::llround(s * 1000));
}

void Agent::start() {
  enqueue(Kind::kRegister);
}

void Agent::stop() {
  if (ending_) return;
  ending_ = true;
  heartbeat_timer_.cancel();
  queue_.clear();
  enqueue(Kind::kExit);
}

void Agent::connect() {
  if (registered_ || ending_) ++fleet_.stats().reconnects;
  beast::error_code ec;
  socket_ = tcp::socket(fleet_.io());
  socket_.open(tcp::v4(), ec);
  if (!ec) socket_.set_option(asio::detail::socket_option::boolean<IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT>(true), ec);
  if (!ec) socket_.bind(tcp::endpoint(source_, 0), ec);
  if (ec) {
    ++fleet_.stats().errors;
    return retry_later();
  }
  busy_ = true;
  socket_.async_connect(tcp::endpoint(asio::ip::address_v4::loopback(), fleet_.options().port),
                        [self = shared_from_this()](beast::error_code ec) {
                          self->busy_ = false;
                          if (ec) {
                            ++self->fleet_.stats().errors;
                            return self->retry_later();
                          }
                          self->socket_.set_option(tcp::no_delay(true));
                          self->connected_ = true;
                          self->answered_here_ = 0;
                          self->send_next();
                        });
}

void Agent::retry_later() {
  connected_ = false;
  retry_timer_.expires_after(std::chrono::seconds(1));
  retry_timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
    if (!ec) self->send_next();
  });
}

void Agent::enqueue(Kind kind) {
  if (kind == Kind::kHeartbeat && (busy_ || !queue_.empty())) ++fleet_.stats().queued;
  queue_.push_back(kind);
  send_next();
}

void Agent::send_next() {
  if (busy_ || queue_.empty() || done_) return;
  if (!connected_) return connect();
  const Kind kind = queue_.front();
  queue_.pop_front();
  std::string path = "/api/v1/agent/workers/" + id_;
  std::string body;
  switch (kind) {
    case Kind::kRegister:
      path += "/register";
      body = nlohmann::json{{"ip_address", source_.to_string()}}.dump();
      break;
    case Kind::kHeartbeat:
      path += "/heartbeat";
      body = "{}";
      break;
    case Kind::kExit:
      path += "/exit";
      body = R"({"exit_code":143})";
      break;
  }
  request_ = "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + token_ +
             "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  busy_ = true;
  reused_ = answered_here_ > 0;
  sent_ = Clock::now();
  asio::async_write(socket_, asio::buffer(request_), [self = shared_from_this(), kind](beast::error_code ec, std::size_t) {
    if (ec) return self->on_response(kind, ec);
    self->response_ = {};
    http::async_read(self->socket_, self->buffer_, self->response_,
                     [self, kind](beast::error_code ec, std::size_t) { self->on_response(kind, ec); });
  });
}

void Agent::on_response(Kind kind, beast::error_code ec) {
  busy_ = false;
  auto& stats = fleet_.stats();
  if (ec) {
    beast::error_code ignored;
    socket_.close(ignored);
    buffer_.clear();
    connected_ = false;
    if (!(kind == Kind::kHeartbeat && ending_)) queue_.push_front(kind);  // asked again once reconnected
    // A kept connection the daemon closed while idle: once more at once
    // on a new one (the agent's HttpConnection does the same).
    if (reused_) {
      ++stats.stale;
      return send_next();
    }
    ++stats.errors;
    return retry_later();
  }
  ++answered_here_;
  take_interval(response_.body());
  const int status = response_.result_int();
  // 5xx (503: over the connection limit, a full lane): asked again later,
  // as the agent's post_retrying does; a heartbeat waits for its next turn.
  const bool retry = status >= 500;
  stats.micros[static_cast<int>(kind)].push_back(
      static_cast<uint32_t>(std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - sent_).count()));
  ++stats.statuses[static_cast<int>(kind)][status];
  if (!response_.keep_alive()) {
    beast::error_code ignored;
    socket_.close(ignored);
    connected_ = false;
  }
  if (retry && kind != Kind::kHeartbeat) {
    queue_.push_front(kind);
    return retry_later();
  }
  switch (kind) {
    case Kind::kRegister:
      if (status == 200 && !registered_) {
        registered_ = true;
        ++stats.registered;
        std::ofstream(log_path_, std::ios::app) << "fleet agent: worker " << id_ << " registered\n";
        // At a random phase of the interval the reply gave.
        schedule_heartbeat(Clock::now() + std::chrono::milliseconds(fleet_.random_below(interval_.count())));
      } else if (status != 200) {
        return stop();
      }
      break;
    case Kind::kHeartbeat:
      if (status == 409 || status == 404) return stop();
      break;
    case Kind::kExit:
      done_ = true;
      ++stats.exited;
      heartbeat_timer_.cancel();
      retry_timer_.cancel();
      {
        beast::error_code ignored;
        socket_.close(ignored);
      }
      fleet_.finished(id_);
      return;
  }
  send_next();
}

void Agent::schedule_heartbeat(Clock::time_point at) {
  next_beat_ = at;
  heartbeat_timer_.expires_at(at);
  heartbeat_timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
    if (ec || self->ending_) return;
    self->enqueue(Kind::kHeartbeat);
    self->schedule_heartbeat(self->next_beat_ + self->interval_);
  });
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"fleet_agents: simulated muster agents for bench/fleet"};
  long interval_ms = o.interval.count();
  std::vector<std::string> sources;
  app.add_option("--socket", o.socket, "the fleet backend's Unix socket")->required();
  app.add_option("--port", o.port, "musterd's port on 127.0.0.1")->required()->check(CLI::Range(1, 65535));
  app.add_option("--interval-ms", interval_ms, "heartbeat interval")->check(CLI::Range(1L, 3'600'000L));
  app.add_option("--source", sources, "loopback source addresses, round-robin (repeatable)");
  CLI11_PARSE(app, argc, argv);
  o.interval = std::chrono::milliseconds(interval_ms);
  for (const auto& a : sources) {
    boost::system::error_code ec;
    o.sources.push_back(asio::ip::make_address_v4(a, ec));
    if (ec) {
      std::cerr << "fleet_agents: --source " << a << ": not an IPv4 address\n";
      return 2;
    }
  }
  if (o.sources.empty()) o.sources.push_back(asio::ip::make_address_v4("127.0.0.1"));
  rlimit files{};
  if (::getrlimit(RLIMIT_NOFILE, &files) == 0) {
    files.rlim_cur = files.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &files);
  }
  asio::io_context io(1);
  Fleet fleet(io, o);
  asio::signal_set signals(io, SIGUSR1, SIGTERM, SIGINT);
  std::function<void(beast::error_code, int)> on_signal = [&](beast::error_code ec, int signal) {
    if (ec) return;
    if (signal == SIGUSR1) {
      fleet.report();
      signals.async_wait(on_signal);
    } else {
      io.stop();
    }
  };
  signals.async_wait(on_signal);
  try {
    fleet.run();
  } catch (const std::exception& e) {
    std::cerr << "fleet_agents: cannot reach the fleet backend at " << o.socket << ": " << e.what() << "\n";
    return 1;
  }
  std::cout << R"({"ready":true})" << std::endl;
  io.run();
  return 0;
}
