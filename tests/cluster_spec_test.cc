// ClusterSpec and the name/address checks under it.
#include "clusterspec/cluster_spec.h"

#include <gtest/gtest.h>

#include "clusterspec/names.h"
#include "clusterspec/spec_error.h"

namespace muster::clusterspec {
namespace {

// Asserts that `fn` throws SpecError whose message contains `needle`.
template <typename Fn>
void expect_spec_error(Fn fn, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "expected SpecError containing: " << needle;
  } catch (const SpecError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << "message: " << e.what();
  }
}

TEST(HostNameTest, AcceptsNamesAndIpv4) {
  for (const char* host : {"localhost", "10.0.0.5", "node-1.example.com", "a_b", "X"}) {
    EXPECT_TRUE(is_valid_host(host)) << host;
  }
}

TEST(HostNameTest, RejectsHostileAndMalformed) {
  for (const std::string& host :
       {std::string(""), std::string("-oProxyCommand=x"), std::string(".hidden"), std::string("a b"),
        std::string("a;b"), std::string("$(id)"), std::string("`id`"), std::string("a'b"), std::string("a\"b"),
        std::string("a\nb"), std::string("a\0b", 3), std::string("h:1"), std::string("a/b"), std::string(254, 'a')}) {
    EXPECT_FALSE(is_valid_host(host)) << host;
  }
}

TEST(EnvNameTest, FollowsPosixShape) {
  EXPECT_TRUE(is_valid_env_name("PATH"));
  EXPECT_TRUE(is_valid_env_name("_x1"));
  EXPECT_FALSE(is_valid_env_name(""));
  EXPECT_FALSE(is_valid_env_name("1A"));
  EXPECT_FALSE(is_valid_env_name("A-B"));
  EXPECT_FALSE(is_valid_env_name("A=B"));
  EXPECT_FALSE(is_valid_env_name("A B"));
  EXPECT_FALSE(is_valid_env_name(std::string("A\0B", 3)));
}

TEST(AddressTest, ParsesHostPortAndBracketedIpv6) {
  auto a = parse_address("10.0.0.5:2222");
  EXPECT_EQ(a.host, "10.0.0.5");
  EXPECT_EQ(a.port, 2222);
  auto b = parse_address("[::1]:65535");
  EXPECT_EQ(b.host, "::1");
  EXPECT_EQ(b.port, 65535);
  EXPECT_EQ(format_address("::1", 80), "[::1]:80");
  EXPECT_EQ(format_address("h", 1), "h:1");
}

TEST(AddressTest, RejectsBadPortsAndHosts) {
  expect_spec_error([] { parse_address("host"); }, "expected \"host:port\"");
  expect_spec_error([] { parse_address("host:0"); }, "not in 1..65535");
  expect_spec_error([] { parse_address("host:65536"); }, "not in 1..65535");
  expect_spec_error([] { parse_address("host:-1"); }, "1..65535");
  expect_spec_error([] { parse_address("host:22a"); }, "1..65535");
  expect_spec_error([] { parse_address("host:"); }, "1..65535");
  expect_spec_error([] { parse_address(":22"); }, "host is empty");
  expect_spec_error([] { parse_address("a;rm -rf:22"); }, "must match");
  expect_spec_error([] { parse_address("::1:22"); }, "IPv6 goes in brackets");
  expect_spec_error([] { parse_address("[::1]22"); }, "[ipv6]:port");
  expect_spec_error([] { parse_address("[zz]:22"); }, "not an IPv6 address");
  EXPECT_FALSE(address_error("h:1").has_value());
}

TEST(AddressTest, ErrorMessagesEscapeControlCharacters) {
  auto error = address_error(std::string("a\nb\0c:1", 7));
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->find('\n'), std::string::npos);
  EXPECT_EQ(error->find('\0'), std::string::npos);
  EXPECT_NE(error->find("\\x0a"), std::string::npos);
}

TEST(ClusterSpecTest, BuildsInIndexOrderAndSerialises) {
  ClusterSpec spec;
  EXPECT_EQ(spec.add_task("worker", "h1:1"), 0);
  EXPECT_EQ(spec.add_task("worker", "h2:1"), 1);
  EXPECT_EQ(spec.add_task("ps", "h3:1"), 0);
  EXPECT_EQ(spec.add_task("chief", "h4:1"), 0);
  EXPECT_EQ(spec.num_tasks(), 4u);
  EXPECT_EQ(spec.num_tasks("worker"), 2u);
  EXPECT_EQ(spec.num_tasks("evaluator"), 0u);
  EXPECT_EQ(spec.address("worker", 1), "h2:1");
  EXPECT_EQ(spec.task_types(), (std::vector<std::string>{"chief", "ps", "worker"}));
  EXPECT_EQ(spec.dump(), R"({"chief":["h4:1"],"ps":["h3:1"],"worker":["h1:1","h2:1"]})");
  EXPECT_FALSE(spec.validate().has_value());
  EXPECT_EQ(ClusterSpec::parse(spec.dump()), spec);
}

TEST(ClusterSpecTest, AddressOfMissingTaskThrows) {
  ClusterSpec spec;
  spec.add_task("worker", "h:1");
  expect_spec_error([&] { spec.address("worker", 1); }, "cluster has 1 \"worker\" tasks");
  expect_spec_error([&] { spec.address("ps", 0); }, "no task ps 0");
}

TEST(ClusterSpecTest, BuilderRejectsUnknownTypeAndBadAddress) {
  ClusterSpec spec;
  expect_spec_error([&] { spec.add_task("master", "h:1"); }, "unknown task type \"master\"");
  expect_spec_error([&] { spec.add_task("worker", "h:99999"); }, "worker 0");
  expect_spec_error([&] { spec.set_tasks("ps", {"a:1", "b"}); }, "ps 1");
  spec.set_tasks("ps", {"a:1"});
  EXPECT_TRUE(spec.has_type("ps"));
  spec.set_tasks("ps", {});
  EXPECT_FALSE(spec.has_type("ps"));
}

TEST(ClusterSpecTest, ParsesDictOfIndexForm) {
  auto spec = ClusterSpec::parse(R"({"worker": {"1": "h:2", "0": "h:1"}, "ps": ["p:1"]})");
  EXPECT_EQ(spec.tasks("worker"), (std::vector<std::string>{"h:1", "h:2"}));
  EXPECT_EQ(spec.tasks("ps"), (std::vector<std::string>{"p:1"}));
}

TEST(ClusterSpecTest, DictOfIndexFormMustBeDense) {
  expect_spec_error([] { ClusterSpec::parse(R"({"worker": {"0": "h:1", "2": "h:2"}})"); }, "task index 1 is missing");
  expect_spec_error([] { ClusterSpec::parse(R"({"worker": {"a": "h:1"}})"); }, "is not a task index");
  expect_spec_error([] { ClusterSpec::parse(R"({"worker": {"-1": "h:1"}})"); }, "is not a task index");
  expect_spec_error([] { ClusterSpec::parse(R"({"worker": {"00": "h:1"}})"); }, "is not a task index");
  expect_spec_error([] { ClusterSpec::parse(R"({"worker": {"0": 5}})"); }, "must be a \"host:port\" string");
}

TEST(ClusterSpecTest, ValidationRules) {
  expect_spec_error([] { ClusterSpec::parse(R"({"chief": ["a:1", "b:1"]})"); }, "at most one \"chief\" task, found 2");
  expect_spec_error([] { ClusterSpec::parse(R"({"evaluator": ["a:1", "b:1"]})"); }, "at most one \"evaluator\"");
  expect_spec_error([] { ClusterSpec::parse(R"({"master": ["a:1"]})"); }, "unknown task type \"master\"");
  expect_spec_error([] { ClusterSpec::parse(R"({"worker": ["a:1"], "ps": ["a:1"]})"); },
                    "address \"a:1\" is used by both ps 0 and worker 0");
  expect_spec_error([] { ClusterSpec::parse(R"({"worker": ["a:0"]})"); }, "cluster: worker 0: address \"a:0\"");
  expect_spec_error([] { ClusterSpec::parse(R"({"worker": "a:1"})"); }, "cluster.worker must be a list");
  expect_spec_error([] { ClusterSpec::parse(R"({"worker": [1]})"); }, "cluster.worker[0] must be");
  expect_spec_error([] { ClusterSpec::parse(R"(["a:1"])"); }, "must be a JSON object");
  expect_spec_error([] { ClusterSpec::parse("{"); }, "not valid JSON");
  expect_spec_error([] { ClusterSpec::parse(R"({"ps":[1e999]})"); }, "not valid JSON");  // out_of_range, not parse_error
}

TEST(ClusterSpecTest, AcceptsEveryKnownTaskType) {
  auto spec = ClusterSpec::parse(
      R"({"chief":["c:1"],"worker":["w:1","w:2"],"ps":["p:1","p:2"],"evaluator":["e:1"]})");
  EXPECT_EQ(spec.num_tasks(), 6u);
  for (const char* t : {"chief", "worker", "ps", "evaluator"}) EXPECT_TRUE(is_known_task_type(t));
  EXPECT_FALSE(is_known_task_type("Worker"));
}

}  // namespace
}  // namespace muster::clusterspec
