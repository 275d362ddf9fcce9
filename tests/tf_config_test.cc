// TfConfig: TF_CONFIG building, parsing and TensorFlow's validation rules.
#include "clusterspec/tf_config.h"

#include <cstdlib>

#include <gtest/gtest.h>

#include "clusterspec/spec_error.h"

namespace muster::clusterspec {
namespace {

std::string error_of(const std::string& json) {
  try {
    TfConfig::parse(json);
  } catch (const SpecError& e) {
    return e.what();
  }
  return "(no error)";
}

TfConfig two_workers_one_ps() {
  TfConfig c;
  c.cluster.add_task("worker", "10.0.0.5:2222");
  c.cluster.add_task("worker", "10.0.0.6:2222");
  c.cluster.add_task("ps", "10.0.0.7:2222");
  c.task_type = "worker";
  c.task_index = 1;
  return c;
}

TEST(TfConfigTest, SerialisesInTensorFlowFormat) {
  auto c = two_workers_one_ps();
  EXPECT_FALSE(c.validate().has_value());
  EXPECT_EQ(c.dump(),
            R"({"cluster":{"ps":["10.0.0.7:2222"],"worker":["10.0.0.5:2222","10.0.0.6:2222"]},)"
            R"("environment":"cloud","task":{"index":1,"type":"worker"}})");
  auto back = TfConfig::parse(c.dump());
  EXPECT_EQ(back.cluster, c.cluster);
  EXPECT_EQ(back.task_type, "worker");
  EXPECT_EQ(back.task_index, 1);
  EXPECT_EQ(back.environment, "cloud");
  EXPECT_EQ(back.task_address(), "10.0.0.6:2222");
}

TEST(TfConfigTest, ParsesDictOfIndexClusterAndMissingOptionalKeys) {
  auto c = TfConfig::parse(R"({"cluster":{"worker":{"0":"a:1","1":"b:1"}},"task":{"type":"worker"}})");
  EXPECT_EQ(c.task_index, 0);
  EXPECT_EQ(c.environment, "");
  EXPECT_EQ(c.cluster.tasks("worker").at(1), "b:1");
  EXPECT_EQ(c.dump().find("environment"), std::string::npos);
}

TEST(TfConfigTest, IndexOutOfRangeNamesTheCount) {
  EXPECT_EQ(error_of(R"({"cluster":{"worker":["a:1","b:1"]},"task":{"type":"worker","index":3}})"),
            "TF_CONFIG: task.index 3 out of range: cluster has 2 \"worker\" tasks");
  EXPECT_EQ(error_of(R"({"cluster":{"worker":["a:1"]},"task":{"type":"worker","index":1}})"),
            "TF_CONFIG: task.index 1 out of range: cluster has 1 \"worker\" task");
}

TEST(TfConfigTest, EachRuleHasItsError) {
  const std::string cluster = R"("cluster":{"worker":["a:1","b:1"],"ps":["p:1"]})";
  EXPECT_NE(error_of("{" + cluster + R"(,"task":{"type":"ps","index":-1}})").find("task.index -1 is out of range"),
            std::string::npos);
  EXPECT_NE(error_of("{" + cluster + R"(,"task":{"type":"chief","index":0}})").find("task.type \"chief\" is not in the cluster"),
            std::string::npos);
  EXPECT_NE(error_of("{" + cluster + R"(,"task":{"type":"boss","index":0}})").find("is not one of chief, worker, ps, evaluator"),
            std::string::npos);
  EXPECT_NE(error_of("{" + cluster + R"(,"task":{"index":0}})").find("task.type is missing"), std::string::npos);
  EXPECT_NE(error_of("{" + cluster + R"(,"task":{"type":1}})").find("task.type must be a string"), std::string::npos);
  EXPECT_NE(error_of("{" + cluster + R"(,"task":{"type":"ps","index":"0"}})").find("task.index must be an integer"),
            std::string::npos);
  EXPECT_NE(error_of("{" + cluster + R"(,"task":{"type":"ps","index":0.5}})").find("task.index must be an integer"),
            std::string::npos);
  EXPECT_NE(error_of("{" + cluster + R"(})").find("\"task\" is missing"), std::string::npos);
  EXPECT_NE(error_of(R"({"task":{"type":"ps"}})").find("\"cluster\" is missing"), std::string::npos);
  EXPECT_NE(error_of(R"({"cluster":{},"task":{"type":"ps"}})").find("cluster is empty"), std::string::npos);
  EXPECT_NE(error_of(R"({"cluster":{"chief":["a:1","b:1"]},"task":{"type":"chief"}})")
                .find("TF_CONFIG: cluster: there must be at most one \"chief\" task"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"cluster":{"worker":["a:99999"]},"task":{"type":"worker"}})").find("not in 1..65535"),
            std::string::npos);
  EXPECT_NE(error_of("{" + cluster + R"(,"task":{"type":"ps"},"environment":3})").find("environment must be a string"),
            std::string::npos);
  EXPECT_NE(error_of("[]").find("must be a JSON object"), std::string::npos);
  EXPECT_NE(error_of("{nope").find("TF_CONFIG: not valid JSON"), std::string::npos);
  // A number past double's range is nlohmann's out_of_range, not a parse_error
  // (found by fuzz_tf_config): still SpecError, never an escaping exception.
  EXPECT_NE(error_of(R"({"task":{"index":1e999}})").find("TF_CONFIG: not valid JSON"), std::string::npos);
}

TEST(TfConfigTest, EvaluatorMayStandOutsideTheCluster) {
  auto c = TfConfig::parse(R"({"cluster":{"worker":["a:1"]},"task":{"type":"evaluator","index":0}})");
  EXPECT_EQ(c.task_type, "evaluator");
  EXPECT_THROW(c.task_address(), SpecError);
  EXPECT_NE(error_of(R"({"cluster":{"worker":["a:1"]},"task":{"type":"evaluator","index":1}})").find("must be 0"),
            std::string::npos);
}

TEST(TfConfigTest, ValidateDoesNotThrow) {
  TfConfig c = two_workers_one_ps();
  c.task_index = 2;
  auto error = c.validate();
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(*error, "TF_CONFIG: task.index 2 out of range: cluster has 2 \"worker\" tasks");
}

TEST(TfConfigTest, IsChiefFollowsTensorFlowConvention) {
  TfConfig c = two_workers_one_ps();
  c.task_index = 0;
  EXPECT_TRUE(c.is_chief());
  c.task_index = 1;
  EXPECT_FALSE(c.is_chief());
  c.cluster.add_task("chief", "c:1");
  c.task_index = 0;
  EXPECT_FALSE(c.is_chief());
  c.task_type = "chief";
  EXPECT_TRUE(c.is_chief());
  c.task_type = "ps";
  EXPECT_FALSE(c.is_chief());
}

TEST(TfConfigTest, FromEnvReadsTfConfig) {
  ::unsetenv("TF_CONFIG");
  EXPECT_FALSE(TfConfig::from_env_if_set().has_value());
  try {
    TfConfig::from_env();
    ADD_FAILURE() << "from_env() without TF_CONFIG must throw";
  } catch (const SpecError& e) {
    EXPECT_NE(std::string(e.what()).find("TF_CONFIG is not set"), std::string::npos);
  }
  auto c = two_workers_one_ps();
  ::setenv("TF_CONFIG", c.dump().c_str(), 1);
  auto read = TfConfig::from_env();
  EXPECT_EQ(read.cluster, c.cluster);
  EXPECT_EQ(read.task_index, 1);
  ::setenv("TF_CONFIG", R"({"cluster":{"worker":["a:1"]},"task":{"type":"worker","index":4}})", 1);
  EXPECT_THROW(TfConfig::from_env(), SpecError);
  ::unsetenv("TF_CONFIG");
}

}  // namespace
}  // namespace muster::clusterspec
