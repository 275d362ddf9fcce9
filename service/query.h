// Query parameters, read through base::Settings like every other setting
// (api/base/settings.h: one dialect per type, an error names the parameter
// and what it had). A route makes one QueryReader over its request and asks
// it for each parameter; a bad value is a 400 whose field is the parameter.
//
// The one exception, documented in api/openapi.yaml: a boolean given empty
// (`?follow=`) reads as false, as it always has.
//
//   QueryReader q(req);
//   auto follow = q.boolean("follow");
//   if (!follow) return reply(error_response(follow.status()));
#pragma once

#include <string>
#include <vector>

#include "api/base/settings.h"
#include "api/status.h"
#include "service/router.h"

namespace muster::service {

class QueryReader {
 public:
  explicit QueryReader(const Request& req) : settings_(base::Settings::of(req.query, "query parameter")) {}

  api::Result<bool> boolean(const std::string& name, bool fallback = false) const {
    if (const auto raw = settings_.raw(name); raw && raw->empty()) return false;
    return take(settings_.boolean(name, fallback), name);
  }
  api::Result<long long> integer(const std::string& name, long long fallback, long long min, long long max) const {
    return take(settings_.integer(name, fallback, min, max), name);
  }
  api::Result<std::string> choice(const std::string& name, std::string fallback,
                                  const std::vector<std::string>& allowed) const {
    return take(settings_.choice(name, std::move(fallback), allowed), name);
  }
  bool given(const std::string& name) const { return settings_.raw(name).has_value(); }

 private:
  template <class T>
  static api::Result<T> take(const base::Setting<T>& s, const std::string& name) {
    if (!s.ok()) return api::invalid_argument(s.error, name);
    return s.value;
  }

  base::Settings settings_;
};

}  // namespace muster::service
