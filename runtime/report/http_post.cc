#include "runtime/report/http_post.h"

#include <cerrno>
#include <cctype>
#include <cstdlib>
#include <cstring>

namespace muster::runtime::report {

using Steady = std::chrono::steady_clock;

std::optional<HttpTarget> parse_http_url(const std::string& url, std::string* error) {
  const auto parts = base::parse_url(url);
  if (!parts) return std::nullopt;
  HttpTarget t;
  t.host = parts->host;
  t.port = parts->port;
  t.tls = parts->tls;
  t.base_path = parts->path;
  while (!t.base_path.empty() && t.base_path.back() == '/') t.base_path.pop_back();
  if (t.tls) {
    const std::string bad = base::tls_verify_from_process_env(&t.verify);
    if (!bad.empty()) {
      if (error) *error = bad;
      return std::nullopt;
    }
  }
  return t;
}

namespace {

using Io = base::ClientSocket::Io;

// Connects and sends `request` before `deadline`; the socket, or why not.
HttpResponse connect_and_send(const HttpTarget& target, const std::string& request, Steady::time_point deadline,
                              base::ClientSocket& s) {
  s = base::ClientSocket::connect(target.host, target.port, target.tls ? &target.verify : nullptr, deadline);
  if (!s.is_open()) return {0, "", s.error()};
  switch (s.send_all(request.data(), request.size(), deadline)) {
    case Io::kOk:
      return {1, "", ""};
    case Io::kTimeout:
      return {0, "", "send timed out"};
    case Io::kClosed:
      return {0, "", "send: the connection was closed"};
    default:
      return {0, "", s.error()};
  }
}

std::string request_text(const HttpTarget& target, const std::string& method, const std::string& path,
                         const std::string& bearer, const std::string& body) {
  std::string r = method + " " + target.base_path + path + " HTTP/1.1\r\nHost: " + target.host + ":" +
                  std::to_string(target.port) + "\r\nAuthorization: Bearer " + bearer + "\r\n";
  if (method != "GET") {
    r += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  }
  r += "Connection: close\r\n\r\n";
  if (method != "GET") r += body;
  return r;
}

// Reads until `done(buffer)` or the peer closes; false on a timeout or an error.
template <typename Done>
bool read_until(base::ClientSocket& s, std::string& buffer, Steady::time_point deadline, Done done,
                std::string& error) {
  char buf[16384];
  while (!done(buffer)) {
    size_t n = 0;
    switch (s.recv_some(buf, sizeof buf, &n, deadline)) {
      case Io::kOk:
        buffer.append(buf, n);
        if (buffer.size() > (64u << 20)) {
          error = "answer larger than 64 MiB";
          return false;
        }
        break;
      case Io::kClosed:
        return true;
      case Io::kTimeout:
        error = "no answer in time";
        return false;
      default:
        error = s.error();
        return false;
    }
  }
  return true;
}

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// A chunked body decoded; nullopt while incomplete.
std::optional<std::string> dechunk(const std::string& raw) {
  std::string out;
  size_t pos = 0;
  for (;;) {
    const size_t eol = raw.find("\r\n", pos);
    if (eol == std::string::npos) return std::nullopt;
    const size_t size = std::strtoul(raw.substr(pos, eol - pos).c_str(), nullptr, 16);
    pos = eol + 2;
    if (size == 0) return out;
    if (raw.size() < pos + size + 2) return std::nullopt;
    out.append(raw, pos, size);
    pos += size + 2;
  }
}

}  // namespace

HttpResponse http_request(const HttpTarget& target, const std::string& method, const std::string& path,
                          const std::string& bearer, const std::string& body, std::chrono::milliseconds timeout) {
  const auto deadline = Steady::now() + timeout;
  base::ClientSocket s;
  HttpResponse r = connect_and_send(target, request_text(target, method, path, bearer, body), deadline, s);
  if (r.status == 0) return r;
  std::string raw;
  std::string error;
  auto have_head = [](const std::string& b) { return b.find("\r\n\r\n") != std::string::npos; };
  if (!read_until(s, raw, deadline, have_head, error)) return {0, "", error};
  const size_t head_end = raw.find("\r\n\r\n");
  if (raw.compare(0, 5, "HTTP/") != 0 || head_end == std::string::npos) return {0, "", "not an HTTP answer"};
  const int status = std::atoi(raw.c_str() + raw.find(' ') + 1);
  const std::string head = lower(raw.substr(0, head_end));
  std::string rest = raw.substr(head_end + 4);
  const size_t cl = head.find("\r\ncontent-length:");
  if (cl != std::string::npos) {
    const size_t want = std::strtoul(head.c_str() + cl + 17, nullptr, 10);
    if (!read_until(s, rest, deadline, [want](const std::string& b) { return b.size() >= want; }, error)) {
      return {0, "", error};
    }
    if (rest.size() < want) return {0, "", "the answer was cut short"};
    rest.resize(want);
    return {status, rest, ""};
  }
  if (head.find("\r\ntransfer-encoding: chunked") != std::string::npos) {
    if (!read_until(s, rest, deadline, [](const std::string& b) { return dechunk(b).has_value(); }, error)) {
      return {0, "", error};
    }
    auto decoded = dechunk(rest);
    if (!decoded) return {0, "", "the answer was cut short"};
    return {status, *decoded, ""};
  }
  if (!read_until(s, rest, deadline, [](const std::string&) { return false; }, error)) return {0, "", error};
  return {status, rest, ""};
}

HttpResult http_post_json(const HttpTarget& target, const std::string& path, const std::string& bearer,
                          const std::string& body, std::chrono::milliseconds timeout) {
  const auto deadline = Steady::now() + timeout;
  base::ClientSocket s;
  HttpResponse sent = connect_and_send(target, request_text(target, "POST", path, bearer, body), deadline, s);
  if (sent.status == 0) return {0, sent.error};
  // The status line is all we need: "HTTP/1.1 202 ...".
  std::string head;
  std::string error;
  if (!read_until(s, head, deadline, [](const std::string& b) { return b.find("\r\n") != std::string::npos || b.size() >= 4096; },
                  error)) {
    return {0, error};
  }
  const size_t sp = head.find(' ');
  if (head.compare(0, 5, "HTTP/") != 0 || sp == std::string::npos) return {0, "not an HTTP answer"};
  return {std::atoi(head.c_str() + sp + 1), ""};
}

}  // namespace muster::runtime::report
