// Client::follow_worker_logs / follow_cluster_logs: a log followed as it is written.
//
// The daemon's GET .../logs?follow=true answers text/plain in chunks as the
// log grows and ends the answer when the worker (cluster) has ended. By
// default it starts at the end (the last lines, after a "[muster] ..." line
// whose length is in X-Log-Marker-Bytes: it is not part of the log);
// X-Log-Offset is the offset of the first log byte, counted across the
// daemon's log rotation. The loop:
//   1. connect (the first time: tail=K, from_start, offset=N, or the
//      daemon's default; afterwards offset=N, the byte reached);
//   2. hand every complete line to on_line as its bytes arrive;
//   3. the answer ended: if the owner has ended, hand over the last partial
//      line and stop; else reconnect from the offset reached;
//   4. the connection dropped or stayed quiet for read_timeout_seconds:
//      reconnect from the offset reached (nothing repeated or skipped);
//      after opts.retries failures in a row, MusterError("unavailable").
// A daemon that cannot stream (503/429: no follower slot; or an older one
// without X-Log-Offset) is polled every poll_seconds: its last lines (an
// older daemon: its whole log), passing on the bytes past the offset.
#include <chrono>
#include <thread>

#include <cpprest/http_client.h>
#include <cpprest/uri.h>

#include "sdk/cpp/client.h"
#include "sdk/cpp/tls.h"

namespace muster::sdk {
namespace {

namespace http = web::http;

constexpr int kPollTailLines = 1000;  // what one poll asks for when the daemon cannot stream

bool worker_ended(const std::string& status) {
  return status == "succeeded" || status == "failed" || status == "timedout" || status == "stopped" ||
         status == "lost";
}

// Hands the complete lines of `buf` to on_line and keeps the partial rest; false once on_line said stop.
bool emit_lines(std::string& buf, const LineCallback& on_line) {
  std::size_t start = 0;
  for (std::size_t nl; (nl = buf.find('\n', start)) != std::string::npos; start = nl + 1) {
    if (!on_line(buf.substr(start, nl - start))) {
      buf.erase(0, nl + 1);
      return false;
    }
  }
  buf.erase(0, start);
  return true;
}

// Where the last k lines of `body` begin.
std::size_t tail_start(const std::string& body, int k) {
  if (k <= 0) return body.size();
  std::size_t pos = !body.empty() && body.back() == '\n' ? body.size() - 1 : body.size();
  for (int i = 0; i < k; ++i) {
    if (pos == 0) return 0;
    std::size_t nl = body.rfind('\n', pos - 1);
    if (nl == std::string::npos) return 0;
    pos = nl;
  }
  return pos + 1;
}

}  // namespace

std::uint64_t Client::follow_worker_logs(const std::string& id, const LineCallback& on_line,
                                         const FollowOptions& opts) {
  if (id.empty()) throw MusterError("invalid_argument", "empty id", "ids");
  return follow_log("/api/v1/workers/" + web::uri::encode_data_string(id) + "/logs",
                    [this, id] { return worker_ended(get_worker(id).status); }, on_line, opts);
}

std::uint64_t Client::follow_cluster_logs(const std::string& id, const LineCallback& on_line,
                                          const FollowOptions& opts) {
  if (id.empty()) throw MusterError("invalid_argument", "empty id", "ids");
  return follow_log("/api/v1/clusters/" + web::uri::encode_data_string(id) + "/logs",
                    [this, id] { return get_cluster(id).ended(); }, on_line, opts);
}

std::uint64_t Client::follow_log(const std::string& path, const std::function<bool()>& is_done,
                                 const LineCallback& on_line, const FollowOptions& opts) {
  std::optional<std::uint64_t> offset = opts.offset;
  std::string buf;
  bool streaming = true;
  bool old_daemon = false;
  bool first = true;
  int failures = 0;
  http::client::http_client_config config;
  config.set_proxy(web::web_proxy(web::web_proxy::disabled));
  config.set_timeout(std::chrono::milliseconds(static_cast<long long>(opts.read_timeout_seconds * 1000)));
  const auto tls = verify_tls(config, endpoint_);
  for (;;) {
    const bool done_before = streaming ? false : is_done();
    bool clean = false;
    try {
      if (streaming) {
        std::string query = "?follow=true";
        if (offset) query += "&offset=" + std::to_string(*offset);
        else if (opts.from_start) query += "&from_start=true";
        else if (opts.tail) query += "&tail=" + std::to_string(*opts.tail);
        http::client::http_client client(endpoint_.url, config);
        http::http_request request(http::methods::GET);
        request.set_request_uri(path + query);
        request.headers().add("Authorization", "Bearer " + endpoint_.token);
        request.headers().add("Accept", "text/plain");
        http::http_response response = client.request(request).get();  // headers in, body streaming
        const int status = response.status_code();
        if (status == 503 || status == 429) {
          streaming = false;
          continue;
        }
        if (status < 200 || status >= 300) throw error_from_response(status, response.extract_utf8string(true).get());
        auto header = response.headers().find("X-Log-Offset");
        if (header == response.headers().end()) {
          streaming = false;  // an older daemon: poll its whole log from here on
          old_daemon = true;
          continue;
        }
        const std::uint64_t start = std::stoull(header->second);
        std::size_t marker_left = 0;  // the marker is shown but is not part of the log
        if (auto m = response.headers().find("X-Log-Marker-Bytes"); m != response.headers().end()) {
          marker_left = static_cast<std::size_t>(std::stoull(m->second));
        }
        if (!offset || start != *offset) {
          if (offset && start < *offset) buf.clear();
          offset = start;
        }
        auto body = response.body().streambuf();
        char chunk[4096];
        for (;;) {
          std::size_t want = std::min<std::size_t>(sizeof chunk, std::max<std::size_t>(1, body.in_avail()));
          std::size_t got = body.getn(reinterpret_cast<uint8_t*>(chunk), want).get();
          if (got == 0) {
            clean = true;
            break;
          }
          failures = 0;
          const std::size_t skip = std::min(marker_left, got);
          marker_left -= skip;
          *offset += got - skip;
          buf.append(chunk, got);
          if (buf.find('\n') != std::string::npos && !emit_lines(buf, on_line)) return *offset;
        }
      } else if (old_daemon) {
        std::string body = send("GET", path, nullptr, opts.read_timeout_seconds).body;
        if (first && !offset) offset = opts.tail ? tail_start(body, *opts.tail) : 0;
        std::size_t start = offset && *offset <= body.size() ? *offset : 0;
        buf.append(body, start, std::string::npos);
        offset = body.size();
        clean = true;
      } else {
        const int lines = first && opts.tail ? *opts.tail : kPollTailLines;
        Answer a = send("GET", path + "?tail=" + std::to_string(lines), nullptr, opts.read_timeout_seconds);
        const std::uint64_t at = a.log_offset.value_or(0);
        const std::size_t marker = std::min(a.marker_bytes, a.body.size());
        const std::uint64_t data = a.body.size() - marker;
        if (!offset || *offset < at) {
          buf += a.body;  // the first poll, or a gap: the marker says what was left out
        } else if (*offset < at + data) {
          buf.append(a.body, marker + static_cast<std::size_t>(*offset - at), std::string::npos);
        }
        offset = at + data;
        clean = true;
      }
    } catch (const MusterError& e) {
      if (e.http_status() != 0 || e.code() == "unconfigured" || e.code() == "untrusted_certificate" ||
          ++failures > opts.retries) {
        throw;
      }
    } catch (const std::exception& e) {
      if (auto refused = certificate_refused(endpoint_, tls.get(), e.what())) throw *refused;
      if (++failures > opts.retries)
        throw MusterError("unavailable", "lost the log stream of " + path + " after " +
                                             std::to_string(opts.retries) + " reconnects");
    }
    first = false;
    if (!emit_lines(buf, on_line)) return offset.value_or(0);
    if (clean && (streaming ? is_done() : done_before)) {
      if (!buf.empty()) on_line(buf);
      return offset.value_or(0);
    }
    const double pause = !streaming ? opts.poll_seconds : std::min(0.05 * std::max(failures, 1), 1.0);
    std::this_thread::sleep_for(std::chrono::duration<double>(pause));
  }
}

}  // namespace muster::sdk
