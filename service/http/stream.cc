#include "service/http/stream.h"

#include <cstdio>

namespace muster::service::http {

bool ChunkedStream::write(std::string chunk) {
  bool notify = false, drop = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return false;
    if (chunk.empty()) return true;  // an empty chunk would end the body
    if (queued_bytes_ + chunk.size() > max_queued_bytes_) {
      closed_ = true;
      drop = true;
      queue_.clear();
      queued_bytes_ = 0;
    } else {
      queued_bytes_ += chunk.size();
      queue_.push_back(std::move(chunk));
      notify = !notified_;
      notified_ = true;
    }
  }
  if (drop) {
    notify_(true);
    return false;
  }
  if (notify) notify_(false);
  return true;
}

void ChunkedStream::close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return;
    closed_ = true;
    ended_ = true;
  }
  notify_(false);
}

bool ChunkedStream::closed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return closed_;
}

size_t ChunkedStream::queued_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queued_bytes_;
}

ChunkedStream::Taken ChunkedStream::take() {
  std::lock_guard<std::mutex> lock(mu_);
  Taken t;
  t.chunks.swap(queue_);
  queued_bytes_ = 0;
  t.ended = ended_;
  notified_ = false;
  return t;
}

void ChunkedStream::abort() {
  std::lock_guard<std::mutex> lock(mu_);
  closed_ = true;
  queue_.clear();
  queued_bytes_ = 0;
}

void append_chunk(std::string& out, const std::string& data) {
  if (data.empty()) return;
  char size[24];
  const int n = std::snprintf(size, sizeof size, "%zx\r\n", data.size());
  out.append(size, static_cast<size_t>(n));
  out.append(data);
  out.append("\r\n");
}

}  // namespace muster::service::http
