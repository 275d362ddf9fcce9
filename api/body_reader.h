// BodyReader: the one way a JSON request body becomes typed values. The
// launch, await and stop bodies (service/validation.cc) and the cluster body
// (api/cluster_request.cc) are all read with it, so every body follows the
// same rules and every error names its field:
// - the body is a JSON object with no field outside the allowed set (a typo
//   like "memroy" is refused, not ignored);
// - an absent field keeps the caller's default (required() says which may
//   not be absent); a null one too where the body's schema allows null
//   (Nulls::kAbsent, the cluster body), else it is of the wrong type;
// - integers are JSON integers (3 and 3.0, as JSON Schema reads them) within
//   the range asked for; numbers are finite; strings hold no NUL;
// - env is an object of NAME: string, names matching [A-Za-z_][A-Za-z0-9_]*
//   (is_env_name(), the one such rule: clusterspec's).
//
//   auto r = BodyReader::of(body, {"n", "cpu"});
//   if (!r) return r.status();
//   if (auto s = r->required("n"); !s) return s;
//   if (auto s = r->integer("n", 1, 64, &req.n); !s) return s;
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/status.h"

namespace muster::api {

// [A-Za-z_][A-Za-z0-9_]*: the one rule for an environment variable's name.
bool is_env_name(const std::string& name);

class BodyReader {
 public:
  enum class Nulls { kWrongType, kAbsent };
  static Result<BodyReader> of(const nlohmann::json& body, const std::set<std::string>& allowed,
                               Nulls nulls = Nulls::kWrongType);

  // Present (and, with Nulls::kAbsent, not null).
  bool has(const char* field) const;
  // "<field> is required" unless has(field).
  Status required(const char* field) const;
  Status integer(const char* field, long long lo, long long hi, int* out) const;
  // > 0, or >= 0 with allow_zero.
  Status number(const char* field, bool allow_zero, double* out) const;
  Status string(const char* field, std::string* out) const;
  Status boolean(const char* field, bool* out) const;
  Status strings(const char* field, std::vector<std::string>* out) const;
  Status env(const char* field, std::map<std::string, std::string>* out) const;
  const nlohmann::json& at(const char* field) const { return body_.at(field); }

 private:
  BodyReader(const nlohmann::json& body, Nulls nulls) : body_(body), nulls_(nulls) {}
  const nlohmann::json& body_;
  Nulls nulls_;
};

}  // namespace muster::api
