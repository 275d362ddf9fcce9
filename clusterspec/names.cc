#include "clusterspec/names.h"

#include <cctype>

#include "clusterspec/spec_error.h"

namespace muster::clusterspec {
namespace {

bool is_host_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
}

bool is_ipv6_literal(const std::string& s) {
  if (s.empty() || s.size() > 45) return false;
  int colons = 0;
  for (char c : s) {
    if (c == ':') {
      ++colons;
    } else if (!std::isxdigit(static_cast<unsigned char>(c)) && c != '.') {
      return false;
    }
  }
  return colons >= 2;
}

}  // namespace

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s.substr(0, 80)) {
    unsigned char u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      static const char* kHex = "0123456789abcdef";
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 15];
    } else if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else {
      out += c;
    }
  }
  if (s.size() > 80) out += "...";
  return out + "\"";
}

bool is_valid_host(const std::string& host) {
  if (host.empty() || host.size() > 253 || host[0] == '-' || host[0] == '.') return false;
  for (char c : host) {
    if (!is_host_char(c)) return false;
  }
  return true;
}

bool is_valid_env_name(const std::string& name) {
  if (name.empty()) return false;
  if (!(std::isalpha(static_cast<unsigned char>(name[0])) || name[0] == '_')) return false;
  for (char c : name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  }
  return true;
}

bool is_valid_interface(const std::string& name) {
  if (name.empty() || name.size() > 15 || name[0] == '-') return false;
  for (char c : name) {
    if (!is_host_char(c)) return false;
  }
  return true;
}

std::optional<std::string> address_error(const std::string& address) {
  const std::string shown = quoted(address);
  std::string host;
  std::string port;
  if (!address.empty() && address[0] == '[') {
    auto close = address.find(']');
    if (close == std::string::npos) return "address " + shown + ": missing ']' after IPv6 host";
    host = address.substr(1, close - 1);
    if (close + 1 >= address.size() || address[close + 1] != ':') {
      return "address " + shown + ": expected \"[ipv6]:port\"";
    }
    port = address.substr(close + 2);
    if (!is_ipv6_literal(host)) return "address " + shown + ": " + quoted(host) + " is not an IPv6 address";
  } else {
    auto colon = address.rfind(':');
    if (colon == std::string::npos) return "address " + shown + ": expected \"host:port\"";
    host = address.substr(0, colon);
    port = address.substr(colon + 1);
    if (host.empty()) return "address " + shown + ": the host is empty";
    if (!is_valid_host(host)) {
      return "address " + shown + ": host " + quoted(host) +
             " " + kHostRule + " (IPv6 goes in brackets: \"[::1]:2222\")";
    }
  }
  if (port.empty() || port.size() > 5) return "address " + shown + ": port must be a number in 1..65535";
  for (char c : port) {
    if (!std::isdigit(static_cast<unsigned char>(c))) {
      return "address " + shown + ": port must be a number in 1..65535";
    }
  }
  int value = std::stoi(port);
  if (value < 1 || value > 65535) return "address " + shown + ": port " + port + " is not in 1..65535";
  return std::nullopt;
}

Address parse_address(const std::string& address) {
  if (auto error = address_error(address)) throw SpecError(*error);
  Address out;
  if (address[0] == '[') {
    auto close = address.find(']');
    out.host = address.substr(1, close - 1);
    out.port = std::stoi(address.substr(close + 2));
  } else {
    auto colon = address.rfind(':');
    out.host = address.substr(0, colon);
    out.port = std::stoi(address.substr(colon + 1));
  }
  return out;
}

std::string format_address(const std::string& host, int port) {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

}  // namespace muster::clusterspec
