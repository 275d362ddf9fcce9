// The world rendezvous protocol (clusterspec/rendezvous_protocol.h): every
// body round-trips, bytes survive base64 both ways, and what the protocol
// refuses is a SpecError naming the field.
#include "clusterspec/rendezvous_protocol.h"

#include <gtest/gtest.h>

#include "api/base/base64.h"
#include "clusterspec/spec_error.h"

namespace muster::clusterspec::rendezvous {
namespace {

using nlohmann::json;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const SpecError& e) {
    return e.what();
  }
  return "";
}

TEST(Base64, RoundTripsEveryLengthAndByte) {
  std::string all;
  for (int i = 0; i < 256; ++i) all += static_cast<char>(i);
  for (size_t n = 0; n <= all.size(); n += 1) {
    const std::string bytes = all.substr(0, n);
    const auto back = base::base64_decode(base::base64_encode(bytes));
    ASSERT_TRUE(back.has_value()) << n;
    EXPECT_EQ(*back, bytes) << n;
  }
  EXPECT_EQ(base::base64_encode("foobar"), "Zm9vYmFy");
  EXPECT_EQ(base::base64_encode("fo"), "Zm8=");
  EXPECT_EQ(base::base64_encode("f"), "Zg==");
}

TEST(Base64, RefusesWhatIsNotBase64) {
  for (const char* bad : {"Zg=", "Z===", "Zg=a", "Zm9v!mFy", "=Zg=", "Zg==Zg=="}) {
    EXPECT_FALSE(base::base64_decode(bad).has_value()) << bad;
  }
}

TEST(RendezvousProtocol, BodiesRoundTrip) {
  EXPECT_EQ(join_request_from_json(to_json(JoinRequest{4})).generation, 4);
  EXPECT_EQ(join_request_from_json(json::object()).generation, 0);  // none yet
  Assignment a{true, 3, 1, 4, "c-1/3"};
  auto b = assignment_from_json(to_json(a));
  EXPECT_TRUE(b.ready);
  EXPECT_EQ(b.generation, 3);
  EXPECT_EQ(b.rank, 1);
  EXPECT_EQ(b.size, 4);
  EXPECT_EQ(b.prefix, "c-1/3");
  EXPECT_FALSE(assignment_from_json(to_json(Assignment{})).ready);
  const std::string bytes("\0\xff\x01 endpoint", 12);
  auto s = kv_set_from_json(to_json(KvSet{2, "c-1/2/tcp/0", bytes}));
  EXPECT_EQ(s.value, bytes);
  EXPECT_EQ(s.key, "c-1/2/tcp/0");
  auto g = kv_get_from_json(to_json(KvGet{2, {"k0", "k1"}, 500}));
  EXPECT_EQ(g.keys, (std::vector<std::string>{"k0", "k1"}));
  EXPECT_EQ(g.timeout_ms, 500);
  auto v = kv_values_from_json(to_json(KvValues{true, {bytes, "x"}, {}}));
  EXPECT_EQ(v.values, (std::vector<std::string>{bytes, "x"}));
  auto m = kv_values_from_json(to_json(KvValues{false, {}, {"k1"}}));
  EXPECT_FALSE(m.ready);
  EXPECT_EQ(m.missing, (std::vector<std::string>{"k1"}));
  auto w = world_view_from_json(to_json(WorldView{5, true, 3, 1}));
  EXPECT_EQ(w.generation, 5);
  EXPECT_TRUE(w.changed);
  EXPECT_EQ(w.waiting, 1);
  auto r = report_from_json(to_json(Report{2, 7, true}));
  EXPECT_EQ(r.batches_redone, 7);
  EXPECT_EQ(path("3fa9", "kv/get"), "/api/v1/agent/workers/3fa9/rendezvous/kv/get");
}

TEST(RendezvousProtocol, RefusalsNameTheField) {
  EXPECT_NE(error_of([] { join_request_from_json(json{{"generation", -1}}); }).find("generation must be in"),
            std::string::npos);
  EXPECT_NE(error_of([] { join_request_from_json(json::array()); }).find("JSON object"), std::string::npos);
  EXPECT_NE(error_of([] { kv_set_from_json(json{{"generation", 1}, {"key", "k"}, {"value", "not base64!"}}); })
                .find("value must be base64"),
            std::string::npos);
  EXPECT_NE(error_of([] { kv_set_from_json(json{{"generation", 1}, {"key", ""}, {"value", ""}}); }).find("key must be"),
            std::string::npos);
  EXPECT_NE(error_of([] { kv_set_from_json(json{{"generation", 0}, {"key", "k"}, {"value", ""}}); })
                .find("generation must be in 1.."),
            std::string::npos);
  EXPECT_NE(error_of([] { kv_get_from_json(json{{"generation", 1}, {"keys", json::array()}}); }).find("keys must hold"),
            std::string::npos);
  EXPECT_NE(error_of([] { kv_get_from_json(json{{"generation", 1}, {"keys", {1}}}); }).find("keys[0] must be a string"),
            std::string::npos);
  EXPECT_NE(error_of([] { kv_values_from_json(json{{"ready", true}, {"values", {"%%%%"}}}); })
                .find("values[0] must be base64"),
            std::string::npos);
  EXPECT_NE(error_of([] { assignment_from_json(json{{"ready", true}, {"generation", 1}, {"size", 2}, {"rank", 2},
                                                    {"prefix", "p"}}); })
                .find("rank must be in 0..1"),
            std::string::npos);
}

}  // namespace
}  // namespace muster::clusterspec::rendezvous
