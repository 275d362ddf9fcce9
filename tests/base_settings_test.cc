// base::Settings, the one reader of environment variables, --backend-opt
// pairs and query parameters: one dialect per type, and every bad value an
// error naming the setting and what it had.
#include "api/base/settings.h"

#include <stdlib.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <string>
#include <type_traits>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace muster::base {
namespace {

TEST(Settings, OneBooleanDialect) {
  const auto s = Settings::of({{"a", "true"}, {"b", "0"}, {"c", "on"}, {"d", "yes"}, {"e", "True"}, {"f", ""}},
                              "--backend-opt");
  EXPECT_TRUE(s.boolean("a", false).value);
  EXPECT_FALSE(s.boolean("b", true).value);
  for (const char* bad : {"c", "d", "e", "f"}) {
    const auto v = s.boolean(bad, true);
    EXPECT_FALSE(v.ok()) << bad;
    EXPECT_NE(v.error.find(std::string("--backend-opt ") + bad), std::string::npos) << v.error;
    EXPECT_NE(v.error.find("expected true, false, 1 or 0"), std::string::npos) << v.error;
  }
  EXPECT_TRUE(s.boolean("absent", true).value);
  EXPECT_FALSE(s.boolean("absent", true).given);
}

TEST(Settings, IntegersAreWholeAndInRange) {
  const auto s = Settings::of({{"ok", "12"}, {"neg", "-3"}, {"junk", "12abc"}, {"space", " 12"}, {"plus", "+1"},
                               {"big", "99999999999999999999"}, {"high", "70000"}},
                              "environment variable");
  EXPECT_EQ(s.integer("ok", 0, 0, 100).value, 12);
  EXPECT_EQ(s.integer("neg", 0, -10, 10).value, -3);
  for (const char* bad : {"junk", "space", "plus", "big", "high"}) {
    const auto v = s.integer(bad, 7, 0, 65535);
    EXPECT_FALSE(v.ok()) << bad;
    EXPECT_EQ(v.value, 7) << "a bad value never becomes a number: " << bad;
    EXPECT_NE(v.error.find(std::string("environment variable ") + bad + " is '"), std::string::npos) << v.error;
  }
  EXPECT_NE(s.integer("high", 0, 1, 65535).error.find("1..65535"), std::string::npos);
}

TEST(Settings, NumbersChoicesAndText) {
  const auto s = Settings::of({{"x", "2.5"}, {"inf", "inf"}, {"mode", "tcp"}, {"bad", "udp"}, {"empty", ""}},
                              "query parameter");
  EXPECT_DOUBLE_EQ(s.number("x", 0, 0, 10).value, 2.5);
  EXPECT_FALSE(s.number("inf", 0, 0, 1e300).ok());
  EXPECT_EQ(s.choice("mode", "auto", {"auto", "shm", "tcp"}).value, "tcp");
  const auto bad = s.choice("bad", "auto", {"auto", "shm", "tcp"});
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.error.find("expected auto, shm or tcp"), std::string::npos) << bad.error;
  EXPECT_TRUE(s.text("empty", "x").given);  // a map's empty value counts as given
  EXPECT_EQ(s.text("empty", "x").value, "");
}

TEST(Settings, UnreadKeysAreTypos) {
  const auto s = Settings::of({{"stop_on_shutdown", "1"}, {"stop_on_shutdwn", "1"}}, "--backend-opt");
  (void)s.boolean("stop_on_shutdown", false);
  EXPECT_EQ(s.unread(), std::vector<std::string>{"stop_on_shutdwn"});
}

TEST(Settings, TheEnvironmentTreatsEmptyAsUnset) {
  ::setenv("MUSTER_SETTINGS_TEST_EMPTY", "", 1);
  ::setenv("MUSTER_SETTINGS_TEST_MS", "12abc", 1);
  const auto env = Settings::environment();
  EXPECT_EQ(env.integer("MUSTER_SETTINGS_TEST_EMPTY", 5, 0, 10).value, 5);
  const auto ms = env.integer("MUSTER_SETTINGS_TEST_MS", 120000, 1, 86'400'000);
  EXPECT_FALSE(ms.ok());
  EXPECT_EQ(ms.error, "environment variable MUSTER_SETTINGS_TEST_MS is '12abc': expected a whole number in 1..86400000");
  ::unsetenv("MUSTER_SETTINGS_TEST_EMPTY");
  ::unsetenv("MUSTER_SETTINGS_TEST_MS");
}

// The cases the Python reader runs too (tests/settings_dialect.json): one
// dialect on both sides of the package.
nlohmann::json dialect_cases() {
  const char* source = std::getenv("MUSTER_SOURCE_DIR");
  std::ifstream in(std::string(source ? source : ".") + "/tests/settings_dialect.json");
  return nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
}

Setting<std::string> read_case(const nlohmann::json& cases, const std::string& kind, const std::string& text) {
  const auto s = Settings::of({{"X", text}}, "test setting");
  Setting<std::string> out;
  auto take = [&](const auto& v) {
    out.error = v.error;
    out.given = v.given;
    if constexpr (std::is_same_v<std::decay_t<decltype(v.value)>, std::string>) {
      out.value = v.value;
    } else {
      out.value = std::to_string(v.value);
    }
  };
  const auto& spec = cases[kind];
  if (kind == "boolean") take(s.boolean("X", false));
  if (kind == "integer") take(s.integer("X", 0, spec["min"].get<long long>(), spec["max"].get<long long>()));
  if (kind == "number") take(s.number("X", 0, spec["min"].get<double>(), spec["max"].get<double>()));
  if (kind == "choice") take(s.choice("X", "", spec["allowed"].get<std::vector<std::string>>()));
  return out;
}

TEST(Settings, DialectCasesSharedWithPython) {
  const auto cases = dialect_cases();
  ASSERT_TRUE(cases.is_object()) << "tests/settings_dialect.json not found or not JSON (MUSTER_SOURCE_DIR)";
  for (const std::string kind : {"boolean", "integer", "number"}) {
    for (const auto& [text, expected] : cases[kind]["ok"].items()) {
      const auto s = Settings::of({{"X", text}}, "test setting");
      if (kind == "boolean") {
        const auto v = s.boolean("X", !expected.get<bool>());
        EXPECT_TRUE(v.ok() && v.value == expected.get<bool>()) << text << ": " << v.error;
      } else if (kind == "integer") {
        const auto v = s.integer("X", 0, cases[kind]["min"], cases[kind]["max"]);
        EXPECT_TRUE(v.ok() && v.value == expected.get<long long>()) << text << ": " << v.error;
      } else {
        const auto v = s.number("X", 0, cases[kind]["min"], cases[kind]["max"]);
        EXPECT_TRUE(v.ok() && std::abs(v.value - expected.get<double>()) < 1e-12) << text << ": " << v.error;
      }
    }
  }
  for (const std::string kind : {"boolean", "integer", "number", "choice"}) {
    for (const auto& bad : cases[kind]["bad"]) {
      const auto v = read_case(cases, kind, bad.get<std::string>());
      EXPECT_FALSE(v.ok()) << kind << " '" << bad.get<std::string>() << "' was accepted as " << v.value;
      EXPECT_NE(v.error.find("test setting X is '" + bad.get<std::string>() + "'"), std::string::npos) << v.error;
    }
  }
  for (const auto& text : cases["choice"]["ok"]) {
    const auto v = read_case(cases, "choice", text.get<std::string>());
    EXPECT_TRUE(v.ok() && v.value == text.get<std::string>()) << v.error;
  }
  for (const auto& e : cases["errors"]) {
    EXPECT_EQ(read_case(cases, e["type"], e["text"]).error, e["message"].get<std::string>());
  }
}

}  // namespace
}  // namespace muster::base
