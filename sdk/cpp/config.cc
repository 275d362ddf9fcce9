#include "sdk/cpp/config.h"

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
  return given;
}

}  // namespace muster::sdk
