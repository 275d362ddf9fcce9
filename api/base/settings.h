// Settings: the one strict reader of settings given as text. Environment
// variables (the runtime's and the agent's MUSTER_*), musterd's
// --backend-opt key=value pairs and the REST API's query parameters are all
// read through it, with one dialect per type:
//   boolean   exactly true, false, 1 or 0 (not on/off, yes/no, True or "")
//   integer   optional '-', decimal digits, nothing else, within [min, max]
//   number    a finite decimal number (strtod's whole text), within [min, max]
//   choice    one of the listed words
//   text      anything (a present but empty value counts as given)
// A value that does not parse is an error naming the setting ("environment
// variable MUSTER_PS_TIMEOUT_MS", "--backend-opt cancel_on_shutdown", "query
// parameter tail"), the text it had and what is expected; it is never a
// silent default. An absent setting (and, for environment variables, an
// empty one) gives the caller's fallback.
//
// The source is injectable: Settings::environment() reads the process's
// environment; Settings::of(map, kind) reads a map (backend options, query
// parameters, tests). unread() lists the keys of a map source nobody asked
// for, so a typo in an option is an error too.
//
//   auto s = base::Settings::environment();
//   auto timeout = s.integer("MUSTER_PS_TIMEOUT_MS", 120000, 1, 86'400'000);
//   if (!timeout.ok()) throw InvalidArgument(timeout.error);
//   use(timeout.value);
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace muster::base {

template <class T>
struct Setting {
  T value{};
  std::string error;  // "" when the value is good (or the fallback)
  bool given = false;  // the source had the setting
  bool ok() const { return error.empty(); }
};

class Settings {
 public:
  using Lookup = std::function<std::optional<std::string>(const std::string& name)>;
  // `kind` prefixes every name in errors ("environment variable").
  Settings(Lookup lookup, std::string kind, bool empty_is_absent);

  // The process environment (getenv; an empty variable counts as unset).
  static Settings environment();
  // A map; every key counts, an empty value included.
  static Settings of(std::map<std::string, std::string> values, std::string kind);

  Setting<bool> boolean(const std::string& name, bool fallback) const;
  Setting<long long> integer(const std::string& name, long long fallback, long long min, long long max) const;
  Setting<double> number(const std::string& name, double fallback, double min, double max) const;
  Setting<std::string> text(const std::string& name, std::string fallback = "") const;
  Setting<std::string> choice(const std::string& name, std::string fallback,
                              const std::vector<std::string>& allowed) const;
  // The raw value, nullopt when absent.
  std::optional<std::string> raw(const std::string& name) const;

  // Keys of a map source that no call above asked for, in order (empty for
  // the environment).
  std::vector<std::string> unread() const;
  // "environment variable X" / "--backend-opt X".
  std::string describe(const std::string& name) const;

 private:
  std::optional<std::string> lookup(const std::string& name) const;

  Lookup lookup_;
  std::string kind_;
  bool empty_is_absent_;
  std::vector<std::string> keys_;  // map sources only
  // Which keys were asked for (shared by copies).
  std::shared_ptr<std::set<std::string>> read_ = std::make_shared<std::set<std::string>>();
  std::shared_ptr<std::mutex> read_mu_ = std::make_shared<std::mutex>();
};

// The dialect's parsers, for callers that hold a value already.
std::optional<bool> parse_bool(const std::string& text);
std::optional<long long> parse_integer(const std::string& text);
std::optional<double> parse_number(const std::string& text);

}  // namespace muster::base
