// The C++ runtime's elastic state and run loop (runtime/elastic/), with
// ranks on threads over in-process collectives (distributed_fake_collectives.h):
// a world that breaks is formed again, the ranks go back to the last commit
// and end where an uninterrupted run ends; a membership change re-forms
// without a rollback; the batches redone are reported once; outside an
// elastic cluster a failure is rethrown.
#include "runtime/elastic/run.h"

#include <atomic>
#include <map>
#include <mutex>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <set>

#include "tests/distributed_fake_collectives.h"

namespace muster::runtime::elastic {
namespace {

using distributed::testing::FakeWorld;
using namespace std::chrono_literals;

// The worlds of a test: world k is shared by every rank's k-th make_world().
class Worlds {
 public:
  explicit Worlds(int n) : n_(n) {}
  std::shared_ptr<FakeWorld> get(size_t k) {
    std::lock_guard<std::mutex> lock(mu_);
    // The first world's peers learn of a failed rank by timing out; the rank
    // that failed is in the next world at once and must wait there for them
    // longer than that (as a real world's formation timeout outlasts an op's).
    while (worlds_.size() <= k) worlds_.push_back(std::make_shared<FakeWorld>(n_, worlds_.empty() ? 1000ms : 10000ms));
    return worlds_[k];
  }

 private:
  int n_;
  std::mutex mu_;
  std::vector<std::shared_ptr<FakeWorld>> worlds_;
};

class ThreadWorld final : public World {
 public:
  ThreadWorld(std::shared_ptr<FakeWorld> w, int rank, int generation)
      : world_(std::move(w)), collectives_(world_->rank(rank)), generation_(generation) {}
  distributed::Collectives& collectives() override { return *collectives_; }
  int generation() const override { return generation_; }

 private:
  std::shared_ptr<FakeWorld> world_;
  std::unique_ptr<distributed::Collectives> collectives_;
  int generation_;
};

// A job that "trains" a vector: each step adds the average of every rank's
// (step + 1) to each element, so the result depends only on the steps done.
class CountingJob final : public ElasticJob {
 public:
  explicit CountingJob(int steps, int commit_every) : steps_(steps), commit_every_(commit_every) {}
  void form(World&, State& state) override {
    ++formed;
    state.set_buffers({{"weights", weights.data(), weights.size()}});
    state.set_counter("step", &step);
  }
  void train(World& world, State& state) override {
    while (step < steps_) {
      float add = static_cast<float>(step + 1);
      world.collectives().allreduce(&add, 1, DataType::kFloat32, comm::ReduceOp::kAverage);
      for (auto& w : weights) w += add;
      ++step;
      state.step_done();
      if (step % commit_every_ == 0) state.commit();
    }
  }
  void teardown() override { ++torn_down; }

  std::vector<float> weights = std::vector<float>(4, 0.0f);
  int64_t step = 0;
  int formed = 0;
  int torn_down = 0;

 private:
  int steps_;
  int commit_every_;
};

float expected_after(int steps) {
  float w = 0;
  for (int s = 0; s < steps; ++s) w += static_cast<float>(s + 1);
  return w;
}

// Rank 0's view: a newcomer waits once its job passed step 3 (asked on rank 0's own thread).
struct FakeMembership final : Membership {
  const int64_t* step = nullptr;
  bool* fired = nullptr;
  bool changed(bool* newcomers) override {
    if (*fired || *step < 3) return false;
    *fired = true;
    *newcomers = true;
    return true;
  }
};

TEST(ElasticRun, ABrokenWorldReformsFromTheLastCommitAndEndsLikeAnUninterruptedRun) {
  constexpr int kRanks = 3, kSteps = 10;
  Worlds worlds(kRanks);
  // Rank 1's link breaks at its 9th collective: the sync is 2, steps 1-4 and
  // the commit's membership check 5, step 5 one more; its step 6 fails.
  worlds.get(0)->fail_rank(1, 8);
  std::vector<std::unique_ptr<CountingJob>> jobs;
  std::vector<std::vector<std::pair<int, int64_t>>> reports(kRanks);
  std::vector<std::thread> threads;
  std::vector<std::string> errors(kRanks);
  for (int r = 0; r < kRanks; ++r) jobs.push_back(std::make_unique<CountingJob>(kSteps, 4));
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      size_t k = 0;
      RunOptions o;
      o.make_world = [&, r] {
        auto w = std::make_unique<ThreadWorld>(worlds.get(k), r, static_cast<int>(k) + 1);
        ++k;
        return std::unique_ptr<World>(std::move(w));
      };
      o.make_membership = [](int) { return nullptr; };
      o.report = [&, r](int g, int64_t redone) { reports[static_cast<size_t>(r)].emplace_back(g, redone); };
      o.elastic = [] { return true; };
      State state;
      try {
        run(*jobs[static_cast<size_t>(r)], state, o);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < kRanks; ++r) {
    const auto& job = *jobs[static_cast<size_t>(r)];
    EXPECT_EQ(errors[static_cast<size_t>(r)], "") << "rank " << r;
    EXPECT_EQ(job.step, kSteps) << "rank " << r;
    EXPECT_EQ(job.formed, 2) << "rank " << r;
    EXPECT_EQ(job.torn_down, 2) << "rank " << r;
    for (float w : job.weights) EXPECT_EQ(w, expected_after(kSteps)) << "rank " << r;
  }
  // Only rank 0 reports: generation 2 redid the steps after the commit at step 4.
  ASSERT_EQ(reports[0].size(), 1u);
  EXPECT_EQ(reports[0][0].first, 2);
  EXPECT_EQ(reports[0][0].second, 1);  // step 5 was done after the commit at step 4, then step 6 failed
  EXPECT_TRUE(reports[1].empty());
}

TEST(ElasticRun, AMembershipChangeReformsWithoutRollback) {
  constexpr int kRanks = 2, kSteps = 8;
  Worlds worlds(kRanks);
  bool fired = false;
  std::vector<std::unique_ptr<CountingJob>> jobs;
  for (int r = 0; r < kRanks; ++r) jobs.push_back(std::make_unique<CountingJob>(kSteps, 2));
  std::vector<std::thread> threads;
  std::atomic<int> reported{0};
  std::atomic<int64_t> redone_reported{-1};
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      size_t k = 0;
      RunOptions o;
      o.make_world = [&, r] { return std::unique_ptr<World>(std::make_unique<ThreadWorld>(worlds.get(k++), r, 1)); };
      o.make_membership = [&](int) {
        auto m = std::make_unique<FakeMembership>();
        m->step = &jobs[0]->step;
        m->fired = &fired;
        return std::unique_ptr<Membership>(std::move(m));
      };
      o.report = [&](int, int64_t redone) {
        ++reported;
        redone_reported = redone;
      };
      o.elastic = [] { return true; };
      State state;
      run(*jobs[static_cast<size_t>(r)], state, o);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_TRUE(fired);
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(jobs[static_cast<size_t>(r)]->step, kSteps);
    EXPECT_EQ(jobs[static_cast<size_t>(r)]->formed, 2) << "re-formed once for the newcomer";
    for (float w : jobs[static_cast<size_t>(r)]->weights) EXPECT_EQ(w, expected_after(kSteps));
  }
  // Rank 0 reports the new world's first step once, with nothing redone.
  EXPECT_EQ(reported.load(), 1);
  EXPECT_EQ(redone_reported.load(), 0);
}

TEST(ElasticRun, OutsideAnElasticClusterAFailureIsRethrown) {
  Worlds worlds(2);
  worlds.get(0)->fail_rank(0, 3);
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      CountingJob job(10, 2);
      RunOptions o;
      o.make_world = [&, r] { return std::unique_ptr<World>(std::make_unique<ThreadWorld>(worlds.get(0), r, 0)); };
      o.make_membership = [](int) { return nullptr; };
      o.elastic = [] { return false; };
      State state;
      try {
        run(job, state, o);
      } catch (const CommError& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
      EXPECT_EQ(job.torn_down, 1);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_NE(errors[0].find("fake: link to rank 1 broke"), std::string::npos) << errors[0];
  EXPECT_FALSE(errors[1].empty());
}

// tests/elastic_loop_scenarios.json, the answers the Python loop gives too
// (torch_elastic_unit_test.py runs the same file): one rank, a job that
// fails once after each `fail_at` step and whose commit after each
// `change_at` step finds a newcomer waiting.
class ScenarioJob final : public ElasticJob {
 public:
  explicit ScenarioJob(const nlohmann::json& s)
      : steps_(s.at("steps")), commit_every_(s.at("commit_every")),
        fail_at_(s.at("fail_at").begin(), s.at("fail_at").end()) {}
  void form(World&, State& state) override {
    ++worlds;
    state.set_buffers({{"weights", &weight, 1}});
    state.set_counter("step", &step);
  }
  void train(World&, State& state) override {
    starts.push_back(step);
    while (step < steps_) {
      ++step;
      weight += 1.0f;
      state.step_done();
      if (fail_at_.erase(step)) throw CommError("scenario: a collective failed after step " + std::to_string(step), 0);
      if (step % commit_every_ == 0) state.commit();
    }
  }
  void teardown() override {}

  float weight = 0;
  int64_t step = 0;
  int worlds = 0;
  std::vector<int64_t> starts;

 private:
  int64_t steps_;
  int64_t commit_every_;
  std::set<int64_t> fail_at_;
};

struct ScenarioMembership final : Membership {
  const int64_t* step = nullptr;
  std::set<int64_t>* change_at = nullptr;
  bool changed(bool* newcomers) override {
    if (!change_at->erase(*step)) return false;
    *newcomers = true;
    return true;
  }
};

TEST(ElasticRun, TheSharedScenariosGiveThePythonLoopsAnswers) {
  std::ifstream in(MUSTER_TESTS_DIR "/elastic_loop_scenarios.json");
  ASSERT_TRUE(in) << "tests/elastic_loop_scenarios.json is missing";
  const auto doc = nlohmann::json::parse(in);
  ASSERT_GE(doc.at("scenarios").size(), 3u);
  for (const auto& sc : doc.at("scenarios")) {
    SCOPED_TRACE(sc.at("name").get<std::string>());
    Worlds worlds(1);
    ScenarioJob job(sc);
    std::set<int64_t> change_at(sc.at("change_at").begin(), sc.at("change_at").end());
    std::vector<std::vector<int64_t>> reports;
    size_t k = 0;
    RunOptions o;
    o.make_world = [&] {
      auto w = std::make_unique<ThreadWorld>(worlds.get(k), 0, static_cast<int>(k) + 1);
      ++k;
      return std::unique_ptr<World>(std::move(w));
    };
    o.make_membership = [&](int) {
      auto m = std::make_unique<ScenarioMembership>();
      m->step = &job.step;
      m->change_at = &change_at;
      return std::unique_ptr<Membership>(std::move(m));
    };
    o.report = [&](int g, int64_t redone) { reports.push_back({g, redone}); };
    o.elastic = [] { return true; };
    State state;
    run(job, state, o);
    EXPECT_EQ(job.starts, sc.at("starts").get<std::vector<int64_t>>());
    EXPECT_EQ(reports, sc.at("reports").get<std::vector<std::vector<int64_t>>>());
    EXPECT_EQ(job.step, sc.at("final").get<int64_t>());
    EXPECT_EQ(job.weight, static_cast<float>(sc.at("final").get<int64_t>())) << "a redone step counted twice";
    EXPECT_EQ(job.worlds, sc.at("worlds").get<int>());
  }
}

TEST(ElasticState, CommitRestoreAndCheckOutsideAWorld) {
  std::vector<float> buf = {1, 2, 3};
  int64_t step = 5;
  State state;
  state.set_buffers({{"b", buf.data(), buf.size()}});
  state.set_counter("step", &step);
  state.commit();  // no world: no membership check
  buf = {9, 9, 9};
  step = 8;
  state.step_done();
  EXPECT_EQ(state.steps_since_commit(), 1);
  state.restore();
  EXPECT_EQ(buf, (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(step, 5);
  EXPECT_EQ(state.steps_since_commit(), 0);
  // Buffers registered again (moved) take the copies by name.
  std::vector<float> moved(3, 0.0f);
  state.set_buffers({{"b", moved.data(), moved.size()}});
  state.restore();
  EXPECT_EQ(moved, (std::vector<float>{1, 2, 3}));
  std::vector<float> wrong(2, 0.0f);
  state.set_buffers({{"b", wrong.data(), wrong.size()}});
  EXPECT_THROW(state.restore(), InvalidArgument);
}

}  // namespace
}  // namespace muster::runtime::elastic
