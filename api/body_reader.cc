#include "api/body_reader.h"

#include <cmath>

#include "api/json_integer.h"
#include "clusterspec/names.h"

namespace muster::api {

using nlohmann::json;

namespace {

Status bad(const std::string& field, const std::string& message) { return invalid_argument(field + " " + message, field); }

bool has_nul(const std::string& s) { return s.find('\0') != std::string::npos; }

}  // namespace

bool is_env_name(const std::string& name) { return clusterspec::is_valid_env_name(name); }

Result<BodyReader> BodyReader::of(const json& body, const std::set<std::string>& allowed, Nulls nulls) {
  if (!body.is_object()) return invalid_argument("the request body must be a JSON object");
  for (const auto& item : body.items()) {
    if (!allowed.count(item.key())) return invalid_argument("unknown field '" + item.key() + "'", item.key());
  }
  return BodyReader(body, nulls);
}

bool BodyReader::has(const char* field) const {
  auto it = body_.find(field);
  return it != body_.end() && !(it->is_null() && nulls_ == Nulls::kAbsent);
}

Status BodyReader::required(const char* field) const { return has(field) ? Status::ok() : bad(field, "is required"); }

Status BodyReader::integer(const char* field, long long lo, long long hi, int* out) const {
  if (!has(field)) return Status::ok();
  const auto n = json_integer(body_.at(field));
  if (!n) return bad(field, "must be an integer");
  if (*n < lo || *n > hi) {
    return bad(field, "must be in " + std::to_string(lo) + ".." + std::to_string(hi) + ", got " + std::to_string(*n));
  }
  *out = static_cast<int>(*n);
  return Status::ok();
}

Status BodyReader::number(const char* field, bool allow_zero, double* out) const {
  if (!has(field)) return Status::ok();
  const json& v = body_.at(field);
  if (!v.is_number()) return bad(field, "must be a number");
  const double d = v.get<double>();
  if (!std::isfinite(d) || d < 0 || (!allow_zero && d == 0)) {
    return bad(field, allow_zero ? "must be a number >= 0" : "must be greater than 0");
  }
  *out = d;
  return Status::ok();
}

Status BodyReader::string(const char* field, std::string* out) const {
  if (!has(field)) return Status::ok();
  const json& v = body_.at(field);
  if (!v.is_string()) return bad(field, "must be a string");
  *out = v.get<std::string>();
  if (has_nul(*out)) return bad(field, "must not contain NUL characters");
  return Status::ok();
}

Status BodyReader::boolean(const char* field, bool* out) const {
  if (!has(field)) return Status::ok();
  const json& v = body_.at(field);
  if (!v.is_boolean()) return bad(field, "must be true or false");
  *out = v.get<bool>();
  return Status::ok();
}

Status BodyReader::strings(const char* field, std::vector<std::string>* out) const {
  if (!has(field)) return Status::ok();
  const json& v = body_.at(field);
  if (!v.is_array()) return bad(field, "must be a list of strings");
  for (const json& s : v) {
    if (!s.is_string()) return bad(field, "must be a list of strings");
    if (has_nul(s.get<std::string>())) return bad(field, "must not contain NUL characters");
    out->push_back(s.get<std::string>());
  }
  return Status::ok();
}

Status BodyReader::env(const char* field, std::map<std::string, std::string>* out) const {
  if (!has(field)) return Status::ok();
  const json& v = body_.at(field);
  if (!v.is_object()) return bad(field, "must be an object of NAME: value strings");
  for (const auto& item : v.items()) {
    if (!is_env_name(item.key())) {
      return invalid_argument(std::string(field) + " name " + clusterspec::quoted(item.key()) +
                                  " must match [A-Za-z_][A-Za-z0-9_]*",
                              field);
    }
    if (!item.value().is_string()) {
      return invalid_argument(std::string(field) + "." + item.key() + " must be a string", field);
    }
    if (has_nul(item.value().get<std::string>())) {
      return invalid_argument(std::string(field) + "." + item.key() + " must not contain NUL characters", field);
    }
    (*out)[item.key()] = item.value().get<std::string>();
  }
  return Status::ok();
}

}  // namespace muster::api
