#include "api/base/settings.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace muster::base {

namespace {

std::string quoted(const std::string& s) { return "'" + s + "'"; }

std::string join(const std::vector<std::string>& words) {
  std::string out;
  for (size_t i = 0; i < words.size(); ++i) {
    if (i) out += i + 1 == words.size() ? " or " : ", ";
    out += words[i];
  }
  return out;
}

}  // namespace

std::optional<bool> parse_bool(const std::string& text) {
  if (text == "true" || text == "1") return true;
  if (text == "false" || text == "0") return false;
  return std::nullopt;
}

std::optional<long long> parse_integer(const std::string& text) {
  const size_t i = !text.empty() && text[0] == '-' ? 1 : 0;
  if (i == text.size()) return std::nullopt;
  for (size_t k = i; k < text.size(); ++k) {
    if (text[k] < '0' || text[k] > '9') return std::nullopt;
  }
  errno = 0;
  const long long v = std::strtoll(text.c_str(), nullptr, 10);
  if (errno == ERANGE) return std::nullopt;
  return v;
}

std::optional<double> parse_number(const std::string& text) {
  // Decimal only: strtod would also take hex ("0x1p3"), inf and nan.
  if (text.empty() || text.find_first_not_of("0123456789+-.eE") != std::string::npos) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size() || errno == ERANGE || !std::isfinite(v)) return std::nullopt;
  return v;
}

Settings::Settings(Lookup lookup, std::string kind, bool empty_is_absent)
    : lookup_(std::move(lookup)), kind_(std::move(kind)), empty_is_absent_(empty_is_absent) {}

Settings Settings::environment() {
  return Settings(
      [](const std::string& name) -> std::optional<std::string> {
        const char* v = std::getenv(name.c_str());
        if (!v) return std::nullopt;
        return std::string(v);
      },
      "environment variable", /*empty_is_absent=*/true);
}

Settings Settings::of(std::map<std::string, std::string> values, std::string kind) {
  std::vector<std::string> keys;
  for (const auto& [k, v] : values) keys.push_back(k);
  auto shared = std::make_shared<const std::map<std::string, std::string>>(std::move(values));
  Settings s(
      [shared](const std::string& name) -> std::optional<std::string> {
        auto it = shared->find(name);
        if (it == shared->end()) return std::nullopt;
        return it->second;
      },
      std::move(kind), /*empty_is_absent=*/false);
  s.keys_ = std::move(keys);
  return s;
}

std::string Settings::describe(const std::string& name) const { return kind_ + " " + name; }

std::optional<std::string> Settings::lookup(const std::string& name) const {
  {
    std::lock_guard<std::mutex> lock(*read_mu_);
    read_->insert(name);
  }
  auto v = lookup_(name);
  if (v && v->empty() && empty_is_absent_) return std::nullopt;
  return v;
}

std::optional<std::string> Settings::raw(const std::string& name) const { return lookup(name); }

std::vector<std::string> Settings::unread() const {
  std::lock_guard<std::mutex> lock(*read_mu_);
  std::vector<std::string> out;
  for (const auto& k : keys_) {
    if (!read_->count(k)) out.push_back(k);
  }
  return out;
}

Setting<bool> Settings::boolean(const std::string& name, bool fallback) const {
  Setting<bool> out;
  out.value = fallback;
  auto v = lookup(name);
  if (!v) return out;
  out.given = true;
  if (auto b = parse_bool(*v)) {
    out.value = *b;
  } else {
    out.error = describe(name) + " is " + quoted(*v) + ": expected true, false, 1 or 0";
  }
  return out;
}

Setting<long long> Settings::integer(const std::string& name, long long fallback, long long min,
                                     long long max) const {
  Setting<long long> out;
  out.value = fallback;
  auto v = lookup(name);
  if (!v) return out;
  out.given = true;
  const auto n = parse_integer(*v);
  if (!n || *n < min || *n > max) {
    out.error = describe(name) + " is " + quoted(*v) + ": expected a whole number in " + std::to_string(min) +
                ".." + std::to_string(max);
    return out;
  }
  out.value = *n;
  return out;
}

Setting<double> Settings::number(const std::string& name, double fallback, double min, double max) const {
  Setting<double> out;
  out.value = fallback;
  auto v = lookup(name);
  if (!v) return out;
  out.given = true;
  const auto n = parse_number(*v);
  if (!n || *n < min || *n > max) {
    char range[96];
    std::snprintf(range, sizeof range, "%g..%g", min, max);
    out.error = describe(name) + " is " + quoted(*v) + ": expected a number in " + range;
    return out;
  }
  out.value = *n;
  return out;
}

Setting<std::string> Settings::text(const std::string& name, std::string fallback) const {
  Setting<std::string> out;
  out.value = std::move(fallback);
  auto v = lookup(name);
  if (!v) return out;
  out.given = true;
  out.value = std::move(*v);
  return out;
}

Setting<std::string> Settings::choice(const std::string& name, std::string fallback,
                                      const std::vector<std::string>& allowed) const {
  Setting<std::string> out;
  out.value = std::move(fallback);
  auto v = lookup(name);
  if (!v) return out;
  out.given = true;
  for (const auto& a : allowed) {
    if (*v == a) {
      out.value = *v;
      return out;
    }
  }
  out.error = describe(name) + " is " + quoted(*v) + ": expected " + join(allowed);
  return out;
}

}  // namespace muster::base
