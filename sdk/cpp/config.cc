#include "sdk/cpp/config.h"

#include <cctype>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "sdk/cpp/error.h"

namespace muster::sdk {
namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

bool read_file(const std::string& path, std::string* out) {
  std::ifstream f(path);
  if (!f) return false;
  std::stringstream ss;
  ss << f.rdbuf();
  *out = ss.str();
  return true;
}

std::string trim(std::string s) {
  const char* ws = " \t\r\n";
  s.erase(0, s.find_first_not_of(ws));
  s.erase(s.find_last_not_of(ws) + 1);
  return s;
}

// 64 hex digits, colons and case ignored -> lowercase; throws naming `source`.
std::string fingerprint(const std::string& text, const std::string& source) {
  std::string out;
  bool hex = true;
  for (char c : text) {
    if (c == ':') continue;
    hex = hex && std::isxdigit(static_cast<unsigned char>(c));
    out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  if (!hex || out.size() != 64) {
    throw MusterError("invalid_argument", source + " must be the SHA-256 fingerprint of musterd's certificate (64 hex "
                                          "digits, colons allowed), not '" + text + "'");
  }
  return out;
}

void discover_tls(const std::string& dir, Endpoint& e) {
  if (e.url.compare(0, 8, "https://") != 0) return;
  if (!e.ca_file.empty() || !e.tls_fingerprint.empty()) {
    e.tls_source = "ClientOptions";
  } else if (!env("MUSTER_CA_FILE").empty() || !env("MUSTER_TLS_FINGERPRINT").empty()) {
    e.ca_file = env("MUSTER_CA_FILE");
    e.tls_fingerprint = env("MUSTER_TLS_FINGERPRINT");
    e.tls_source = "MUSTER_CA_FILE / MUSTER_TLS_FINGERPRINT";
  } else {
    std::string text;
    const std::string path = dir + "/musterd.json";
    if (read_file(path, &text)) {
      auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
      std::string url = j.is_object() && j.contains("url") && j["url"].is_string() ? j["url"].get<std::string>() : "";
      while (!url.empty() && url.back() == '/') url.pop_back();
      if (url == e.url && j.contains("tls") && j["tls"].is_object() && j["tls"].contains("fingerprint") &&
          j["tls"]["fingerprint"].is_string()) {
        e.tls_fingerprint = j["tls"]["fingerprint"].get<std::string>();
        e.tls_source = path + " (tls.fingerprint)";
      }
    }
  }
  if (!e.tls_fingerprint.empty()) e.tls_fingerprint = fingerprint(e.tls_fingerprint, e.tls_source);
  if (e.tls_source.empty()) e.tls_source = "the system's CAs";
}

}  // namespace

std::string state_dir() {
  std::string dir = env("MUSTER_STATE_DIR");
  if (!dir.empty()) return dir;
  return env("HOME") + "/.muster";
}

Endpoint discover(Endpoint given) {
  const std::string dir = state_dir();
  if (given.url.empty()) given.url = env("MUSTER_URL");
  if (given.url.empty()) {
    std::string text;
    const std::string path = dir + "/musterd.json";
    if (read_file(path, &text)) {
      auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
      if (!j.is_object() || !j.contains("url") || !j["url"].is_string())
        throw MusterError("unconfigured", path + " has no \"url\" string");
      given.url = j["url"].get<std::string>();
    }
  }
  if (given.token.empty()) given.token = env("MUSTER_TOKEN");
  if (given.token.empty()) {
    std::string text;
    if (read_file(dir + "/token", &text)) given.token = trim(text);
  }
  if (given.url.empty())
    throw MusterError("unconfigured", "no musterd URL: set MUSTER_URL or start musterd (it writes " + dir +
                                          "/musterd.json)");
  if (given.token.empty())
    throw MusterError("unconfigured", "no musterd token: set MUSTER_TOKEN or start musterd (it writes " + dir +
                                          "/token)");
  while (!given.url.empty() && given.url.back() == '/') given.url.pop_back();
  discover_tls(dir, given);
  return given;
}

}  // namespace muster::sdk
