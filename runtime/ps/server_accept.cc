// Accepting connections and keeping them within limits (server.h,
// "Hostile clients"): the connection cap with eviction of silent
// connections, the deadline sweep, the hello's options and the seal of the
// slice set.

#include <cmath>

#include <spdlog/spdlog.h>

#include "runtime/ps/server_connection.h"
#include "runtime/ps/server_impl.h"

namespace muster::runtime::ps {

void PsServer::Impl::accept() {
  acceptor_.async_accept(asio::make_strand(io_), [this](boost::system::error_code ec, tcp::socket sock) {
    if (ec) {
      if (!acceptor_.is_open() || stopping()) return;
      spdlog::warn("{}: accept failed: {}", name(), ec.message());
      return accept();
    }
    boost::system::error_code ignore;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (open_ >= opt_.max_connections && !make_room_locked()) {
        if (refused_++ % 100 == 0) {
          spdlog::warn("{}: refusing a connection: {} connections open (max_connections); {} refused so far", name(),
                       open_.load(), refused_.load());
        }
        sock.close(ignore);
        return accept();
      }
      ++open_;
    }
    sock.set_option(tcp::no_delay(true), ignore);
    if (opt_.socket_buffer_bytes > 0) {
      sock.set_option(asio::socket_base::send_buffer_size(opt_.socket_buffer_bytes), ignore);
      sock.set_option(asio::socket_base::receive_buffer_size(opt_.socket_buffer_bytes), ignore);
    }
    auto c = std::make_shared<Connection>(*this, std::move(sock));
    {
      std::lock_guard<std::mutex> lock(mu_);
      conns_.push_back(c);
    }
    c->start();
    accept();
  });
}

bool PsServer::Impl::make_room_locked() {
  for (;;) {
    std::shared_ptr<Connection> oldest;
    for (auto& w : conns_) {
      auto c = w.lock();
      if (c && !c->authenticated() && !c->evicted() && (!oldest || c->accepted() < oldest->accepted())) oldest = c;
    }
    if (!oldest) return false;
    if (oldest->evict()) return true;  // its slot frees once the eviction has run on its strand
  }
}

void PsServer::Impl::sweep() {
  const auto now = Clock::now();
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = conns_.begin(); it != conns_.end();) {
    if (auto c = it->lock()) {
      c->expire_if_late(now);
      ++it;
    } else {
      it = conns_.erase(it);
    }
  }
}

void PsServer::Impl::seal() {
  if (sealed_.load(std::memory_order_relaxed)) return;
  std::vector<PendingPull> missing;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (sealed_) return;
    sealed_ = true;
    missing.swap(orphan_pulls_);  // every init of the chief on this PS has been handled
  }
  for (auto& p : missing) p.conn->send_error(missing_slice(p.slice));
}

void PsServer::Impl::chief_inits_over() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (++chief_inits_over_ < chief_streams_) return;
  }
  seal();
}

std::string PsServer::Impl::hello(Connection& c, const HelloPayload& h) {
  if (h.replicas_to_aggregate < 1 || h.total_num_replicas < h.replicas_to_aggregate) {
    return "hello: replicas_to_aggregate " + std::to_string(h.replicas_to_aggregate) + " must be in 1..total_num_replicas (" +
           std::to_string(h.total_num_replicas) + ")";
  }
  if (!std::isfinite(h.learning_rate) || h.learning_rate <= 0.0f) {
    return "hello: learning rate " + std::to_string(h.learning_rate) + " must be a finite number > 0";
  }
  if (h.mode != Mode::kSync && h.mode != Mode::kAsync) return "hello: unknown mode " + std::to_string(static_cast<int>(h.mode));
  if (h.worker_index >= h.total_num_replicas) {
    return "hello: worker index " + std::to_string(h.worker_index) + " >= total_num_replicas " + std::to_string(h.total_num_replicas);
  }
  if (h.streams < 1 || h.streams > kMaxStreams) {
    return "hello: " + std::to_string(h.streams) + " connections from one worker; expected 1.." + std::to_string(kMaxStreams);
  }
  try {
    optim::make_optimizer(h.optimizer, h.learning_rate);
  } catch (const std::exception& e) {
    return std::string("hello: ") + e.what();
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!have_options_) {
    have_options_ = true;
    options_ = h;
    spdlog::info("{}: {} mode, {} of {} replicas per step, optimizer {} lr {}", name(),
                 h.mode == Mode::kSync ? "sync" : "async", h.replicas_to_aggregate, h.total_num_replicas, h.optimizer,
                 h.learning_rate);
  } else if (!same_options(options_, h)) {
    return "worker " + std::to_string(h.worker_index) + " has options (replicas_to_aggregate, total_num_replicas, mode, optimizer, "
           "learning rate) different from the first worker's; start every worker with the same options";
  }
  if (h.worker_index == 0) {
    chief_seen_ = true;
    chief_streams_ = static_cast<int>(h.streams);
  }
  c.worker_ = static_cast<int>(h.worker_index);
  ++live_[c.worker_];
  lost_.erase(c.worker_);
  return "";
}

}  // namespace muster::runtime::ps
