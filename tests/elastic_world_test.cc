// The world rendezvous of elastic clusters (service/elastic/world.h), driven
// call by call with a FakeClock: generations, timeouts, late and stale
// joiners, deaths during the rendezvous itself, the key-value exchange and a
// restored world.
#include "service/elastic/world.h"

#include <optional>

#include <gtest/gtest.h>

namespace muster::service::elastic {
namespace {

using namespace std::chrono_literals;

// One parked call's answer, once it came.
template <typename T>
struct Answer {
  std::optional<api::Result<T>> got;
  std::function<void(api::Result<T>)> callback() {
    return [this](api::Result<T> r) { got = std::move(r); };
  }
  bool came() const { return got.has_value(); }
  const T& value() const { return got->value(); }
  std::string error() const { return got && !got->is_ok() ? got->status().message() : ""; }
};

class WorldTest : public ::testing::Test {
 protected:
  void make(int min_np, int max_np) {
    WorldOptions o;
    o.cluster_id = "c-1";
    o.min_np = min_np;
    o.max_np = max_np;
    o.rejoin_timeout = 10s;
    o.poll_bound = 20s;
    world_ = std::make_unique<World>(o, clock_);
  }
  void admit(std::initializer_list<const char*> ids) {
    for (auto id : ids) world_->admit(id);
  }
  Answer<proto::Assignment>& join(const std::string& id, int seen) {
    auto& a = joins_[id + "@" + std::to_string(seen) + "#" + std::to_string(++calls_)];
    world_->join(id, {seen}, a.callback());
    return a;
  }
  api::Status set(const std::string& id, int g, const std::string& k, const std::string& v) {
    return world_->set(id, {g, k, v});
  }
  Answer<proto::KvValues>& get(const std::string& id, int g, std::vector<std::string> keys, int timeout_ms) {
    auto& a = gets_[++calls_];
    world_->get(id, {g, std::move(keys), timeout_ms}, a.callback());
    return a;
  }
  proto::WorldView view(const std::string& id, int g) {
    std::optional<api::Result<proto::WorldView>> got;
    world_->world(id, g, 0ms, [&](api::Result<proto::WorldView> r) { got = std::move(r); });
    EXPECT_TRUE(got && got->is_ok());
    return got && got->is_ok() ? got->value() : proto::WorldView{};
  }
  // The daemon restarts: a new World restored from the current one's record,
  // with `alive` admitted again.
  void restart(int min_np, int max_np, std::initializer_list<const char*> alive) {
    auto record = world_->to_record();
    make(min_np, max_np);
    world_->restore(record);
    admit(alive);
  }
  // Forms the first generation of `ids` (in this order).
  void form_first(std::initializer_list<const char*> ids) {
    for (auto id : ids) world_->admit(id);
    std::vector<Answer<proto::Assignment>*> all;
    for (auto id : ids) all.push_back(&join(id, 0));
    for (auto* a : all) ASSERT_TRUE(a->came() && a->got->is_ok());
  }

  FakeClock clock_;
  std::unique_ptr<World> world_;
  std::map<std::string, Answer<proto::Assignment>> joins_;
  std::map<int, Answer<proto::KvValues>> gets_;
  int calls_ = 0;
};

TEST_F(WorldTest, TheFirstGenerationFormsOnceEveryAdmittedWorkerJoined) {
  make(2, 3);
  admit({"a", "b", "c"});
  auto& a = join("a", 0);
  auto& b = join("b", 0);
  EXPECT_FALSE(a.came());
  EXPECT_FALSE(b.came());
  EXPECT_EQ(world_->joined(), 2);
  auto& c = join("c", 0);
  ASSERT_TRUE(a.came() && b.came() && c.came());
  EXPECT_EQ(a.value().generation, 1);
  EXPECT_EQ(a.value().size, 3);
  // Ranks in admission order; the prefix names cluster and generation.
  EXPECT_EQ(a.value().rank, 0);
  EXPECT_EQ(b.value().rank, 1);
  EXPECT_EQ(c.value().rank, 2);
  EXPECT_EQ(c.value().prefix, "c-1/1");
  auto events = world_->drain_events();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, WorldEvent::Kind::kFormed);
  EXPECT_EQ(events[0].members, (std::vector<std::string>{"a", "b", "c"}));
}

TEST_F(WorldTest, AWorkerThatWasNeverAdmittedCannotJoin) {
  make(1, 2);
  admit({"a"});
  auto& x = join("x", 0);
  ASSERT_TRUE(x.came());
  EXPECT_NE(x.error().find("never released"), std::string::npos) << x.error();
}

TEST_F(WorldTest, AMemberDeathBreaksTheGenerationAndTheSurvivorsReformKeepingTheirOrder) {
  make(2, 3);
  form_first({"a", "b", "c"});
  // A survivor waits on a key of the dead rank when the death is noticed.
  ASSERT_TRUE(set("a", 1, "ep/0", "x").is_ok());
  auto& waiting = get("c", 1, {"ep/0", "ep/1"}, 5000);
  EXPECT_FALSE(waiting.came());
  world_->remove("b", "was killed by signal 9");
  ASSERT_TRUE(waiting.came());
  EXPECT_NE(waiting.error().find("generation 1 broke: rank 1 (worker b) was killed by signal 9"), std::string::npos)
      << waiting.error();
  EXPECT_TRUE(view("a", 1).changed);
  // The survivors join again: generation 2 keeps a before c.
  auto& c = join("c", 1);
  EXPECT_FALSE(c.came());
  auto& a = join("a", 1);
  ASSERT_TRUE(a.came() && c.came());
  EXPECT_EQ(a.value().generation, 2);
  EXPECT_EQ(a.value().size, 2);
  EXPECT_EQ(a.value().rank, 0);
  EXPECT_EQ(c.value().rank, 1);
  EXPECT_EQ(a.value().prefix, "c-1/2");
  // Generation 2's keys start empty; generation 1's are refused as over.
  auto& fresh = get("a", 2, {"ep/0"}, 0);
  ASSERT_TRUE(fresh.came() && fresh.got->is_ok());
  EXPECT_FALSE(fresh.value().ready);
  auto& old = get("a", 1, {"ep/0"}, 0);
  EXPECT_NE(old.error().find("generation 1 is over: the world is at generation 2"), std::string::npos) << old.error();
  auto events = world_->drain_events();
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[1].kind, WorldEvent::Kind::kBroken);
  EXPECT_EQ(events[1].worker_id, "b");
  EXPECT_EQ(events[2].members, (std::vector<std::string>{"a", "c"}));
}

TEST_F(WorldTest, BelowMinNpTheRoundWaitsForANewcomer) {
  make(2, 2);
  form_first({"a", "b"});
  world_->remove("b", "was lost");
  auto& a = join("a", 1);
  EXPECT_FALSE(a.came());  // 1 < min_np
  clock_.advance(15s);
  world_->tick();  // no rejoin timeout applies: nobody is missing, there are too few
  EXPECT_FALSE(a.came());
  world_->admit("r");  // the replacement
  auto& r = join("r", 0);
  ASSERT_TRUE(a.came() && r.came());
  EXPECT_EQ(a.value().generation, 2);
  EXPECT_EQ(a.value().rank, 0);  // the survivor holds the state: rank 0
  EXPECT_EQ(r.value().rank, 1);
}

TEST_F(WorldTest, ALateJoinerWaitsForTheMembersWhoSeeTheChangeAtTheirNextCheck) {
  make(2, 3);
  form_first({"a", "b"});
  EXPECT_FALSE(view("a", 1).changed);
  // A member's long-poll is answered the moment a newcomer arrives.
  std::optional<api::Result<proto::WorldView>> polled;
  world_->world("a", 1, 10'000ms, [&](api::Result<proto::WorldView> v) { polled = std::move(v); });
  EXPECT_FALSE(polled);
  world_->admit("n");
  auto& n = join("n", 0);
  ASSERT_TRUE(polled && polled->is_ok());
  EXPECT_TRUE(polled->value().changed);
  EXPECT_EQ(polled->value().waiting, 1);
  // A newcomer alone never times the members out.
  clock_.advance(60s);
  world_->tick();
  EXPECT_TRUE(n.came());  // the poll bound: "ask again"
  ASSERT_TRUE(n.got->is_ok());
  EXPECT_FALSE(n.value().ready);
  EXPECT_EQ(world_->generation(), 1);
  auto& n2 = join("n", 0);
  auto& b = join("b", 1);
  auto& a = join("a", 1);
  ASSERT_TRUE(a.came() && b.came() && n2.came());
  EXPECT_EQ(a.value().rank, 0);
  EXPECT_EQ(b.value().rank, 1);
  EXPECT_EQ(n2.value().rank, 2);
  EXPECT_EQ(n2.value().size, 3);
}

TEST_F(WorldTest, AHungMemberIsLeftOutAfterTheRejoinTimeoutAndCannotComeBack) {
  make(2, 3);
  form_first({"a", "b", "c"});
  world_->remove("c", "failed with exit code 1");
  auto& a = join("a", 1);
  clock_.advance(9s);
  world_->tick();
  EXPECT_FALSE(a.came());  // b (alive, hung) still has time
  world_->admit("r");
  auto& r = join("r", 0);
  EXPECT_FALSE(r.came());
  clock_.advance(2s);
  world_->tick();
  ASSERT_TRUE(a.came() && r.came());
  EXPECT_EQ(a.value().generation, 2);
  EXPECT_EQ(r.value().rank, 1);
  auto events = world_->drain_events();
  ASSERT_FALSE(events.empty());
  bool excluded = false;
  for (const auto& e : events) {
    if (e.kind == WorldEvent::Kind::kExcluded) {
      excluded = true;
      EXPECT_EQ(e.worker_id, "b");
      EXPECT_NE(e.reason.find("rank 1 (worker b) did not join generation 2 within 10 s"), std::string::npos) << e.reason;
    }
  }
  EXPECT_TRUE(excluded);
  // The hung rank wakes up: refused, naming why.
  auto& b = join("b", 1);
  ASSERT_TRUE(b.came());
  EXPECT_NE(b.error().find("did not join generation 2"), std::string::npos) << b.error();
  EXPECT_FALSE(world_->admitted("b"));
}

TEST_F(WorldTest, AStaleJoinerIsRefused) {
  make(1, 3);
  form_first({"a", "b"});
  world_->remove("b", "was lost");
  auto& a = join("a", 1);
  ASSERT_TRUE(a.came());
  EXPECT_EQ(a.value().generation, 2);
  // Admitted again (say, by a daemon that did not know), it names generation 1.
  world_->admit("b");
  auto& b = join("b", 1);
  ASSERT_TRUE(b.came());
  EXPECT_NE(b.error().find("stale: it was in generation 1, and generation 2 formed without it"), std::string::npos)
      << b.error();
  // And a generation from the future is a bad request.
  auto& future = join("a", 7);
  ASSERT_TRUE(future.came());
  EXPECT_NE(future.error().find("generation 7 has not formed"), std::string::npos) << future.error();
}

TEST_F(WorldTest, ADeathDuringTheRendezvousItselfFormsWithoutTheDead) {
  make(2, 3);
  admit({"a", "b", "c"});
  auto& a = join("a", 0);
  auto& b = join("b", 0);
  world_->remove("c", "failed with exit code 137");  // before it joined
  ASSERT_TRUE(a.came() && b.came());
  EXPECT_EQ(a.value().size, 2);
  // A joiner that dies while parked is answered with the reason.
  world_->admit("n");
  auto& n = join("n", 0);
  world_->remove("n", "was stopped");
  ASSERT_TRUE(n.came());
  EXPECT_NE(n.error().find("no longer part of cluster c-1's world: was stopped"), std::string::npos) << n.error();
  EXPECT_FALSE(view("a", 1).changed);
}

TEST_F(WorldTest, KeysAreWrittenOnceAndGetsWaitForAllOfThem) {
  make(2, 2);
  form_first({"a", "b"});
  auto& both = get("b", 1, {"k0", "k1"}, 5000);
  EXPECT_FALSE(both.came());
  ASSERT_TRUE(set("a", 1, "k0", std::string("\0\1bytes", 7)).is_ok());
  EXPECT_FALSE(both.came());
  ASSERT_TRUE(set("b", 1, "k1", "v1").is_ok());
  ASSERT_TRUE(both.came());
  ASSERT_TRUE(both.value().ready);
  EXPECT_EQ(both.value().values, (std::vector<std::string>{std::string("\0\1bytes", 7), "v1"}));
  EXPECT_TRUE(set("a", 1, "k0", std::string("\0\1bytes", 7)).is_ok());  // a retried set
  auto again = set("a", 1, "k0", "other");
  EXPECT_EQ(again.code(), api::ErrorCode::kConflict);
  EXPECT_NE(again.message().find("written once"), std::string::npos);
  // A get that runs out of time names what is missing.
  auto& slow = get("a", 1, {"k1", "k2"}, 3000);
  clock_.advance(3s);
  world_->tick();
  ASSERT_TRUE(slow.came() && slow.got->is_ok());
  EXPECT_FALSE(slow.value().ready);
  EXPECT_EQ(slow.value().missing, (std::vector<std::string>{"k2"}));
  // Only members of the generation may use its keys.
  world_->admit("n");
  EXPECT_NE(set("n", 1, "k9", "v").message().find("not a member of generation 1"), std::string::npos);
}

TEST_F(WorldTest, AMemberWhoseAnswerWasLostGetsItAgain) {
  make(2, 2);
  form_first({"a", "b"});
  auto& again = join("b", 0);
  ASSERT_TRUE(again.came());
  EXPECT_EQ(again.value().generation, 1);
  EXPECT_EQ(again.value().rank, 1);
  EXPECT_FALSE(view("a", 1).changed);
}

TEST_F(WorldTest, AMemberAskingForANewGenerationBreaksItsOwn) {
  make(2, 2);
  form_first({"a", "b"});
  auto& b = join("b", 1);  // its collective failed (HorovodInternalError)
  EXPECT_FALSE(b.came());
  auto v = view("a", 1);
  EXPECT_TRUE(v.changed);
  EXPECT_NE(set("a", 1, "k", "v").message().find("rank 1 (worker b) asked to form a new generation"),
            std::string::npos);
  auto& a = join("a", 1);
  ASSERT_TRUE(a.came() && b.came());
  EXPECT_EQ(b.value().generation, 2);
}

TEST_F(WorldTest, NewcomersBeyondMaxNpWaitForRoom) {
  make(1, 2);
  form_first({"a", "b"});
  world_->admit("n");
  auto& n = join("n", 0);
  EXPECT_FALSE(view("a", 1).changed);  // no room: nothing to interrupt training for
  world_->remove("b", "was lost");
  auto& a = join("a", 1);
  ASSERT_TRUE(a.came() && n.came());
  EXPECT_EQ(n.value().rank, 1);
  EXPECT_EQ(n.value().size, 2);
}

TEST_F(WorldTest, NewcomersAloneNeverFormAWorldAfterTheFirst) {
  make(1, 2);
  form_first({"a", "b"});
  world_->remove("a", "was lost");
  world_->remove("b", "was lost");
  world_->admit("r");
  auto& r = join("r", 0);
  clock_.advance(60s);
  world_->tick();
  ASSERT_TRUE(r.came());
  EXPECT_FALSE(r.value().ready);  // nobody holds the state: it does not form
  EXPECT_EQ(world_->generation(), 1);
}

TEST_F(WorldTest, ARestoredWorldKeepsItsGenerationButNotItsKeys) {
  make(2, 2);
  form_first({"a", "b"});
  ASSERT_TRUE(set("a", 1, "k", "v").is_ok());
  auto record = world_->to_record();
  make(2, 2);  // the next daemon
  world_->restore(record);
  admit({"a", "b"});
  EXPECT_EQ(world_->generation(), 1);
  EXPECT_FALSE(view("a", 1).changed);  // ranks that are training train on
  auto& k = get("b", 1, {"k"}, 0);
  EXPECT_NE(k.error().find("musterd restarted during generation 1"), std::string::npos) << k.error();
  auto& a = join("a", 1);
  auto& b = join("b", 1);
  ASSERT_TRUE(a.came() && b.came());
  EXPECT_EQ(a.value().generation, 2);
}

// musterd answered generation 2's joiners and died before it saved the
// world: the restored record says 1. The ranks hold 2; they must not be told
// that 2 "has not formed" (and die of it).
TEST_F(WorldTest, ARestoredRecordThatLagsCatchesUpWithTheRanks) {
  make(1, 3);
  form_first({"a", "b", "c"});
  // Generation 1 is a, b, c. c died; a and b formed generation 2, unsaved. The next daemon:
  restart(1, 3, {"a", "b"});
  auto& a = join("a", 2);
  EXPECT_FALSE(a.came()) << "b, admitted, may still come: " << a.error();
  EXPECT_EQ(world_->generation(), 2);
  auto& b = join("b", 2);
  ASSERT_TRUE(a.came() && b.came()) << a.error() << b.error();
  ASSERT_TRUE(a.got->is_ok() && b.got->is_ok()) << a.error() << b.error();
  EXPECT_EQ(a.value().generation, 3);
  EXPECT_EQ(a.value().size, 2);
  EXPECT_EQ(a.value().rank, 0);
  EXPECT_EQ(b.value().rank, 1);
  bool broke = false;
  for (const auto& e : world_->drain_events()) {
    if (e.kind == WorldEvent::Kind::kBroken && e.generation == 2) {
      broke = true;
      EXPECT_NE(e.reason.find("before it was saved"), std::string::npos) << e.reason;
    }
  }
  EXPECT_TRUE(broke);
}

TEST_F(WorldTest, AfterALaggedRecordARankFromAnOlderGenerationJoinsAsANewcomer) {
  make(1, 3);
  form_first({"a", "b"});
  restart(1, 3, {"a", "b"});
  auto& b = join("b", 1);  // its answer for 2 was lost with the daemon, or it was left out of 2
  auto& a = join("a", 2);
  ASSERT_TRUE(a.came() && b.came()) << a.error() << b.error();
  EXPECT_EQ(a.value().rank, 0) << "the member of 2 holds the state: it broadcasts";
  EXPECT_EQ(b.value().rank, 1);
  EXPECT_EQ(b.value().generation, 3);
}

TEST_F(WorldTest, ALaggedRecordStillWaitsNoLongerThanTheRejoinTimeout) {
  make(1, 3);
  form_first({"a", "b"});
  restart(1, 3, {"a", "b"});  // b hangs and never joins
  auto& a = join("a", 2);
  EXPECT_FALSE(a.came());
  clock_.advance(11s);
  world_->tick();
  ASSERT_TRUE(a.came() && a.got->is_ok()) << a.error();
  EXPECT_EQ(a.value().size, 1);
  EXPECT_FALSE(world_->admitted("b")) << "left out, as a hung member is";
}

TEST_F(WorldTest, WithoutARestartAJoinerFromTheFutureIsRefused) {
  make(1, 2);
  form_first({"a", "b"});
  auto& a = join("a", 5);
  ASSERT_TRUE(a.came());
  EXPECT_NE(a.error().find("generation 5 has not formed"), std::string::npos) << a.error();
}

TEST_F(WorldTest, ARankThatFinishedLeavesWithoutBreakingItsGeneration) {
  make(2, 2);
  form_first({"a", "b"});
  ASSERT_TRUE(set("a", 1, "k", "v").is_ok());
  world_->retire("a");  // done: exited 0
  auto& got = get("b", 1, {"k"}, 0);
  ASSERT_TRUE(got.came() && got.got->is_ok());
  EXPECT_TRUE(got.value().ready);  // b finishes in generation 1 undisturbed
  EXPECT_FALSE(view("b", 1).changed);
  EXPECT_FALSE(world_->admitted("a"));
  for (const auto& e : world_->drain_events()) EXPECT_NE(e.kind, WorldEvent::Kind::kBroken);
}

TEST_F(WorldTest, ClosingAnswersEveryParkedCall) {
  make(2, 2);
  admit({"a", "b"});
  auto& a = join("a", 0);
  world_->close("the cluster was stopped");
  ASSERT_TRUE(a.came());
  EXPECT_NE(a.error().find("closed: the cluster was stopped"), std::string::npos);
  auto& b = join("b", 0);
  EXPECT_NE(b.error().find("closed"), std::string::npos);
}

}  // namespace
}  // namespace muster::service::elastic
