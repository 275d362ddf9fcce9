#include "clusterspec/cluster_spec.h"

#include <algorithm>
#include <cctype>

#include "clusterspec/names.h"
#include "clusterspec/spec_error.h"

namespace muster::clusterspec {
namespace {

const std::vector<std::string>& empty_list() {
  static const std::vector<std::string> kEmpty;
  return kEmpty;
}

std::string allowed_types_message() { return "allowed task types are chief, worker, ps, evaluator"; }

// "0", "1", ... without sign, spaces or leading zeros.
std::optional<std::size_t> parse_index(const std::string& key) {
  if (key.empty() || key.size() > 9) return std::nullopt;
  if (key.size() > 1 && key[0] == '0') return std::nullopt;
  for (char c : key) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return std::nullopt;
  }
  return static_cast<std::size_t>(std::stoul(key));
}

std::vector<std::string> parse_task_list(const nlohmann::json& value, const std::string& where) {
  std::vector<std::string> out;
  if (value.is_array()) {
    for (std::size_t i = 0; i < value.size(); ++i) {
      if (!value[i].is_string()) {
        throw SpecError(where + "[" + std::to_string(i) + "] must be a \"host:port\" string, got " +
                        value[i].type_name());
      }
      out.push_back(value[i].get<std::string>());
    }
    return out;
  }
  if (value.is_object()) {
    // Dict-of-index form: {"0": "h:1", "1": "h:2"}; indices must be 0..n-1.
    std::map<std::size_t, std::string> by_index;
    for (auto it = value.begin(); it != value.end(); ++it) {
      auto index = parse_index(it.key());
      if (!index) throw SpecError(where + ": key " + quoted(it.key()) + " is not a task index (0, 1, ...)");
      if (!it.value().is_string()) {
        throw SpecError(where + "[" + it.key() + "] must be a \"host:port\" string, got " + it.value().type_name());
      }
      by_index[*index] = it.value().get<std::string>();
    }
    for (std::size_t i = 0; i < by_index.size(); ++i) {
      if (by_index.count(i) == 0) {
        throw SpecError(where + ": task index " + std::to_string(i) + " is missing (indices must be 0.." +
                        std::to_string(by_index.size() - 1) + ")");
      }
      out.push_back(by_index[i]);
    }
    return out;
  }
  throw SpecError(where + " must be a list of \"host:port\" strings, got " + std::string(value.type_name()));
}

}  // namespace

bool is_known_task_type(const std::string& type) {
  return type == kChief || type == kWorker || type == kPs || type == kEvaluator;
}

int ClusterSpec::add_task(const std::string& type, const std::string& address) {
  if (!is_known_task_type(type)) throw SpecError("cluster: unknown task type " + quoted(type) + "; " + allowed_types_message());
  if (auto error = address_error(address)) throw SpecError("cluster: " + type + " " + std::to_string(jobs_[type].size()) + ": " + *error);
  auto& list = jobs_[type];
  list.push_back(address);
  return static_cast<int>(list.size()) - 1;
}

void ClusterSpec::set_tasks(const std::string& type, std::vector<std::string> addresses) {
  if (!is_known_task_type(type)) throw SpecError("cluster: unknown task type " + quoted(type) + "; " + allowed_types_message());
  for (std::size_t i = 0; i < addresses.size(); ++i) {
    if (auto error = address_error(addresses[i])) throw SpecError("cluster: " + type + " " + std::to_string(i) + ": " + *error);
  }
  if (addresses.empty()) {
    jobs_.erase(type);
  } else {
    jobs_[type] = std::move(addresses);
  }
}

std::vector<std::string> ClusterSpec::task_types() const {
  std::vector<std::string> out;
  for (const auto& [type, list] : jobs_) out.push_back(type);
  return out;
}

bool ClusterSpec::has_type(const std::string& type) const { return jobs_.count(type) > 0; }

const std::vector<std::string>& ClusterSpec::tasks(const std::string& type) const {
  auto it = jobs_.find(type);
  return it == jobs_.end() ? empty_list() : it->second;
}

std::size_t ClusterSpec::num_tasks(const std::string& type) const { return tasks(type).size(); }

std::size_t ClusterSpec::num_tasks() const {
  std::size_t n = 0;
  for (const auto& [type, list] : jobs_) n += list.size();
  return n;
}

const std::string& ClusterSpec::address(const std::string& type, int index) const {
  const auto& list = tasks(type);
  if (index < 0 || static_cast<std::size_t>(index) >= list.size()) {
    throw SpecError("cluster: no task " + type + " " + std::to_string(index) + ": cluster has " +
                    std::to_string(list.size()) + " \"" + type + "\" tasks");
  }
  return list[static_cast<std::size_t>(index)];
}

std::optional<std::string> ClusterSpec::validate(const std::string& context) const {
  std::map<std::string, std::string> owner;  // address -> "worker 1"
  for (const auto& [type, list] : jobs_) {
    if (!is_known_task_type(type)) {
      return context + ": unknown task type " + quoted(type) + "; " + allowed_types_message();
    }
    if (list.empty()) return context + ": task type \"" + type + "\" has no tasks";
    if ((type == kChief || type == kEvaluator) && list.size() > 1) {
      return context + ": there must be at most one \"" + type + "\" task, found " + std::to_string(list.size());
    }
    for (std::size_t i = 0; i < list.size(); ++i) {
      const std::string task = type + " " + std::to_string(i);
      if (auto error = address_error(list[i])) return context + ": " + task + ": " + *error;
      auto [it, inserted] = owner.emplace(list[i], task);
      if (!inserted) return context + ": address " + quoted(list[i]) + " is used by both " + it->second + " and " + task;
    }
  }
  return std::nullopt;
}

nlohmann::json ClusterSpec::to_json() const {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [type, list] : jobs_) out[type] = list;
  return out;
}

ClusterSpec ClusterSpec::from_json(const nlohmann::json& json, const std::string& context) {
  if (!json.is_object()) throw SpecError(context + " must be a JSON object of task type -> addresses, got " + json.type_name());
  ClusterSpec spec;
  for (auto it = json.begin(); it != json.end(); ++it) {
    if (!is_known_task_type(it.key())) {
      throw SpecError(context + ": unknown task type " + quoted(it.key()) + "; " + allowed_types_message());
    }
    auto list = parse_task_list(it.value(), context + "." + it.key());
    if (!list.empty()) spec.jobs_[it.key()] = std::move(list);
  }
  if (auto error = spec.validate(context)) throw SpecError(*error);
  return spec;
}

ClusterSpec ClusterSpec::parse(const std::string& json) {
  nlohmann::json parsed;
  try {
    parsed = nlohmann::json::parse(json);
  } catch (const nlohmann::json::exception& e) {  // parse_error, and out_of_range for numbers past double
    throw SpecError(std::string("cluster: not valid JSON: ") + e.what());
  }
  return from_json(parsed);
}

}  // namespace muster::clusterspec
