// PsServer: construction (bind and listen), the io threads, wait/stop and
// stats. The protocol steps are in protocol.h; what each part of the server
// does is listed in server_impl.h.

#include "runtime/ps/server.h"

#include <spdlog/spdlog.h>

#include "runtime/ps/server_connection.h"
#include "runtime/ps/server_impl.h"

namespace muster::runtime::ps {

PsServer::Impl::Impl(const ServerOptions& o) : opt_(o), acceptor_(io_), watchdog_timer_(io_) {
  boost::system::error_code ec;
  auto addr = asio::ip::make_address(o.host, ec);
  if (ec) throw InvalidArgument("ps task " + std::to_string(o.task_index) + ": bad listen host '" + o.host + "'");
  tcp::endpoint ep(addr, o.port);
  acceptor_.open(ep.protocol());
  acceptor_.set_option(tcp::acceptor::reuse_address(true));
  acceptor_.bind(ep, ec);
  if (ec) {
    throw CommError(name() + ": cannot listen on " + o.host + ":" + std::to_string(o.port) + ": " + ec.message());
  }
  acceptor_.listen(asio::socket_base::max_listen_connections);
  port_ = acceptor_.local_endpoint().port();
  if (opt_.secret.empty()) {
    spdlog::warn("{}: no secret configured (MUSTER_PS_SECRET): any client that reaches port {} can join this job", name(),
                 port_);
  }
}

void PsServer::Impl::stop() {
  std::vector<std::shared_ptr<Connection>> conns;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return;
    stopped_ = true;
    stopping_ = true;
    if (!finished_) {
      finished_ = true;
      failure_ = name() + ": stopped";
    }
    for (auto& w : conns_) {
      if (auto c = w.lock()) conns.push_back(c);
    }
    cv_.notify_all();
  }
  asio::post(io_, [this] {
    boost::system::error_code ec;
    acceptor_.close(ec);
    watchdog_timer_.cancel();
  });
  for (auto& c : conns) c->close();
  conns.clear();
  // Let the closes run, then end the io threads.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  io_.stop();
  for (auto& t : threads_) {
    if (t.joinable()) t.join();
  }
  // Drop what still refers to connections so their sockets close now.
  std::lock_guard<std::mutex> lock(mu_);
  orphan_pulls_.clear();
  for (auto& [id, s] : slices_) {
    std::lock_guard<std::mutex> sl(s->mu);
    s->pending.clear();
  }
}

PsServer::PsServer(const ServerOptions& options) : impl_(std::make_unique<Impl>(options)) {}

PsServer::~PsServer() { stop(); }

unsigned short PsServer::port() const { return impl_->port_; }

void PsServer::start() {
  impl_->accept();
  impl_->watchdog();
  for (int i = 0; i < std::max(1, impl_->opt_.threads); ++i) {
    impl_->threads_.emplace_back([this] {
      for (;;) {
        try {
          impl_->io_.run();
          return;
        } catch (const std::exception& e) {
          spdlog::error("{}: io thread: {}", impl_->name(), e.what());
        }
      }
    });
  }
}

bool PsServer::wait_for(int ms) {
  std::unique_lock<std::mutex> lock(impl_->mu_);
  return impl_->cv_.wait_for(lock, std::chrono::milliseconds(ms), [this] { return impl_->finished_; });
}

void PsServer::wait() {
  std::string failure;
  bool timeout = false;
  {
    std::unique_lock<std::mutex> lock(impl_->mu_);
    impl_->cv_.wait(lock, [this] { return impl_->finished_; });
    failure = impl_->failure_;
    timeout = impl_->failure_is_timeout_;
  }
  if (failure.empty()) return;
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // let the error frames reach the workers
  if (timeout) throw TimeoutError(failure);
  throw CommError(failure);
}

void PsServer::stop() { impl_->stop(); }

ServerStats PsServer::stats() const {
  ServerStats s;
  s.pushes_accepted = impl_->pushes_accepted_;
  s.stale_dropped = impl_->stale_dropped_;
  s.steps_applied = impl_->steps_applied_;
  s.bad_frames = impl_->bad_frames_;
  s.bytes_in = impl_->bytes_in_;
  s.bytes_out = impl_->bytes_out_;
  s.auth_failures = impl_->auth_failures_;
  s.refused = impl_->refused_;
  s.timed_out = impl_->timed_out_;
  s.init_bytes_buffered = impl_->init_buffered_;
  s.open_connections = impl_->open_;
  std::lock_guard<std::mutex> lock(impl_->mu_);
  s.workers_done = static_cast<int>(impl_->done_.size());
  return s;
}

int64_t PsServer::global_step(uint32_t slice) const {
  Slice* s = impl_->find_slice(slice);
  if (s == nullptr) return -1;
  std::lock_guard<std::mutex> lock(s->mu);
  return s->step;
}

}  // namespace muster::runtime::ps
