// SyncReplicas semantics with in-process PS tasks and worker threads:
// equivalence with single-process training, stale gradients, backup workers,
// async mode, checkpoint/resume.
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <thread>

#include <boost/filesystem.hpp>
#include <gtest/gtest.h>

#include "runtime/error.h"
#include "runtime/ps/checkpoint.h"
#include "ps_test_model.h"
#include "temp_dir.h"

namespace muster::runtime::ps::testing {
namespace {

struct WorkerResult {
  Model model;
  int64_t start_step = -1;
  int64_t final_step = -1;
  std::string error;
};

// Runs `n_workers` threads; worker i trains on samples [i*batch, (i+1)*batch)
// of each step (or all on the same samples when same_data), until the
// global step reaches `steps`. `before_push` can delay or kill a worker.
std::vector<WorkerResult> train(const LocalPs& ps, int n_workers, ClientOptions opt, int64_t steps, int batch,
                                bool same_data = false,
                                std::function<bool(int worker, int64_t step)> keep_going = nullptr) {
  std::vector<WorkerResult> results(n_workers);
  std::vector<std::thread> threads;
  for (int i = 0; i < n_workers; ++i) {
    threads.emplace_back([&, i] {
      auto& r = results[i];
      try {
        SyncReplicasClient client(ps.cluster(n_workers, i), opt);
        client.register_variables({{"w", r.model.w.data(), r.model.w.size()}, {"b", r.model.b.data(), r.model.b.size()}});
        int64_t step = client.initialize_or_wait();
        r.start_step = step;
        std::vector<float> dw, db;
        while (step < steps) {
          if (keep_going && !keep_going(i, step)) {
            r.final_step = step;
            return;  // dies: no done()
          }
          gradients(r.model, step, same_data ? 0 : i * batch, batch, &dw, &db);
          step = client.step({dw.data(), db.data()});
        }
        r.final_step = step;
        client.done();
      } catch (const std::exception& e) {
        r.error = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return results;
}

void expect_servers_finish(LocalPs& ps) {
  for (auto& s : ps.servers) {
    ASSERT_TRUE(s->wait_for(10000)) << "a PS did not finish after every worker was done";
    EXPECT_NO_THROW(s->wait());
  }
}

struct EquivalenceCase {
  int n_ps;
  int n_workers;
  const char* optimizer;
  int streams;  // connections per PS task
};

class PsEquivalence : public ::testing::TestWithParam<EquivalenceCase> {};

TEST_P(PsEquivalence, SyncTrainingMatchesOneProcessOnTheConcatenatedBatches) {
  const auto c = GetParam();
  const int batch = 4;
  const int64_t steps = 12;
  LocalPs ps(c.n_ps);
  ClientOptions opt = small_slices({});
  opt.optimizer = c.optimizer;
  opt.learning_rate = 0.05f;
  opt.streams = c.streams;
  auto results = train(ps, c.n_workers, opt, steps, batch);
  Model expected = reference(c.optimizer, 0.05f, steps, batch * c.n_workers);
  for (int i = 0; i < c.n_workers; ++i) {
    ASSERT_EQ(results[i].error, "") << "worker " << i;
    EXPECT_EQ(results[i].final_step, steps);
    EXPECT_LT(max_abs_diff(results[i].model.w, expected.w), 1e-4f) << "worker " << i;
    EXPECT_LT(max_abs_diff(results[i].model.b, expected.b), 1e-4f) << "worker " << i;
  }
  // It trained: the parameters moved away from the initial ones.
  EXPECT_GT(max_abs_diff(results[0].model.w, Model().w), 1e-2f);
  auto t = ps.total();
  EXPECT_EQ(t.stale_dropped, 0u);
  EXPECT_EQ(t.pushes_accepted, t.steps_applied * c.n_workers);
  if (c.n_ps > 1) {
    for (auto& s : ps.servers) EXPECT_GT(s->stats().steps_applied, 0u) << "every PS holds some slices";
  }
  expect_servers_finish(ps);
}

INSTANTIATE_TEST_SUITE_P(Cases, PsEquivalence,
                         ::testing::Values(EquivalenceCase{1, 2, "sgd", 1}, EquivalenceCase{1, 3, "momentum", 2},
                                           EquivalenceCase{2, 2, "adam", 3}, EquivalenceCase{2, 3, "sgd", 5}));

TEST(PsSync, StaleGradientsAreDroppedAndCounted) {
  LocalPs ps(2);
  ClientOptions opt = small_slices({});
  Model m;
  SyncReplicasClient client(ps.cluster(1, 0), opt);
  client.register_variables({{"w", m.w.data(), m.w.size()}, {"b", m.b.data(), m.b.size()}});
  ASSERT_EQ(client.initialize_or_wait(), 0);
  std::vector<float> dw, db;
  gradients(m, 0, 0, 4, &dw, &db);
  ASSERT_EQ(client.step({dw.data(), db.data()}), 1);
  // A gradient of step 0 arriving now that the global step is 1: dropped.
  std::vector<float> junk_w(m.w.size(), 1000.0f), junk_b(m.b.size(), 1000.0f);
  client.push_gradients(0, {junk_w.data(), junk_b.data()});
  gradients(m, 1, 0, 4, &dw, &db);
  ASSERT_EQ(client.step({dw.data(), db.data()}), 2);  // answered after the stale push was handled
  const auto n_slices = client.placement().slices.size();
  EXPECT_EQ(ps.total().stale_dropped, n_slices);
  EXPECT_EQ(client.stats().stale_dropped, n_slices) << "the worker sees its dropped pushes in the pull answers";
  EXPECT_EQ(client.stats().stale_steps, 1u);
  Model expected = reference("sgd", opt.learning_rate, 2, 4);
  EXPECT_LT(max_abs_diff(m.w, expected.w), 1e-5f) << "a stale gradient changed the parameters";
  client.done();
  expect_servers_finish(ps);
}

TEST(PsSync, BackupWorkersDropTheSlowestAndNeverMixSteps) {
  LocalPs ps(2);
  ClientOptions opt = small_slices({});
  opt.replicas_to_aggregate = 2;
  opt.total_num_replicas = 3;
  opt.learning_rate = 0.05f;
  const int64_t steps = 10;
  // Every worker uses the same samples for a step: whichever 2 of the 3
  // gradients are averaged, the result is the one-process result, unless a
  // step mixed in a gradient computed at another step.
  // The fast two wait for the slow one to reach its first step: on a loaded
  // machine its thread could otherwise start after they had finished, pull
  // the final step and push nothing at all.
  std::atomic<bool> slow_started{false};
  auto results = train(ps, 3, opt, steps, 4, /*same_data=*/true, [&ps, &slow_started](int worker, int64_t step) {
    if (worker != 2) {
      for (int i = 0; i < 5000 && !slow_started; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (worker == 2) {  // the slow one: pushes only once the others have completed its step on slice 0
      slow_started = true;
      for (int i = 0; i < 5000; ++i) {
        int64_t global = -1;
        for (auto& s : ps.servers) global = std::max(global, s->global_step(0));
        if (global > step) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
    return true;
  });
  Model expected = reference("sgd", 0.05f, steps, 4);
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(results[i].error, "") << "worker " << i;
    EXPECT_EQ(results[i].final_step, steps);
    EXPECT_LT(max_abs_diff(results[i].model.w, expected.w), 1e-4f) << "worker " << i;
  }
  auto t = ps.total();
  EXPECT_GT(t.stale_dropped, 0u) << "the slow worker's gradients should have been dropped";
  EXPECT_EQ(t.pushes_accepted, t.steps_applied * 2);
  expect_servers_finish(ps);
}

TEST(PsSync, BackupWorkersLetTrainingGoOnWhenAWorkerDies) {
  LocalPs ps(1, /*timeout_ms=*/15000);
  ClientOptions opt = small_slices({});
  opt.replicas_to_aggregate = 2;
  opt.total_num_replicas = 3;
  opt.learning_rate = 0.05f;
  const int64_t steps = 10;
  auto results = train(ps, 3, opt, steps, 4, true, [](int worker, int64_t step) { return !(worker == 1 && step >= 3); });
  Model expected = reference("sgd", 0.05f, steps, 4);
  for (int i : {0, 2}) {
    ASSERT_EQ(results[i].error, "") << "worker " << i;
    EXPECT_EQ(results[i].final_step, steps);
    EXPECT_LT(max_abs_diff(results[i].model.w, expected.w), 1e-4f);
  }
  EXPECT_GE(results[1].final_step, 3) << "worker 1 dies at its first step >= 3 (a lagging backup may skip steps)";
  expect_servers_finish(ps);  // two done + one lost: the PS ends
}

TEST(PsAsync, EveryPushIsAppliedAtOnce) {
  LocalPs ps(2);
  ClientOptions opt = small_slices({});
  opt.mode = Mode::kAsync;
  opt.learning_rate = 0.02f;
  const int n_workers = 2;
  const int pushes_each = 15;
  std::vector<Model> models(n_workers);
  std::vector<std::string> errors(n_workers);
  std::vector<std::thread> threads;
  std::vector<std::size_t> slices(n_workers);
  for (int i = 0; i < n_workers; ++i) {
    threads.emplace_back([&, i] {
      try {
        Model& m = models[i];
        SyncReplicasClient client(ps.cluster(n_workers, i), opt);
        client.register_variables({{"w", m.w.data(), m.w.size()}, {"b", m.b.data(), m.b.size()}});
        client.initialize_or_wait();
        slices[i] = client.placement().slices.size();
        std::vector<float> dw, db;
        for (int k = 0; k < pushes_each; ++k) {
          gradients(m, k, i * 4, 4, &dw, &db);
          client.step({dw.data(), db.data()});
        }
        client.done();
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) ASSERT_EQ(e, "");
  auto t = ps.total();
  EXPECT_EQ(t.steps_applied, uint64_t{n_workers} * pushes_each * slices[0]) << "one update per push";
  EXPECT_EQ(t.pushes_accepted, t.steps_applied);
  EXPECT_EQ(t.stale_dropped, 0u);
  // Every slice went through every push: its global step is the push count.
  for (std::size_t s = 0; s < slices[0]; ++s) {
    int64_t step = -1;
    for (auto& srv : ps.servers) step = std::max(step, srv->global_step(static_cast<uint32_t>(s)));
    EXPECT_EQ(step, n_workers * pushes_each);
  }
  EXPECT_LT(loss(models[0], 1000, 32), loss(Model(), 1000, 32)) << "async training did not reduce the loss";
  expect_servers_finish(ps);
}

class PsCheckpoint : public ::testing::TestWithParam<const char*> {};

// Kill at step 12 with checkpoints every 5 steps, restart: the run ends
// exactly where an uninterrupted one does, optimizer state (momentum, Adam
// moments and iteration count) included.
TEST_P(PsCheckpoint, RestartResumesFromTheLastCheckpoint) {
  const std::string optimizer = GetParam();
  muster::testing::TempDir dir("muster-ps-ckpt");
  ClientOptions opt = small_slices({});
  opt.checkpoint_dir = dir.str();
  opt.checkpoint_every = 5;
  opt.optimizer = optimizer;
  opt.learning_rate = 0.05f;
  const int64_t steps = 20;
  {
    // First run: killed after step 12 (no done(), the PS tasks stopped).
    LocalPs ps(2);
    auto results = train(ps, 2, opt, steps, 4, false, [](int, int64_t step) { return step < 12; });
    for (auto& r : results) ASSERT_EQ(r.error, "");
    for (auto& s : ps.servers) s->stop();
  }
  auto newest = newest_checkpoint(dir.str());
  ASSERT_TRUE(newest.has_value());
  EXPECT_EQ(load_checkpoint(*newest).step, 10);
  // w and b, each followed by the optimizer's slots: momentum 1, Adam 2.
  const std::size_t slots = optimizer == "sgd" ? 0 : optimizer == "momentum" ? 1 : 2;
  EXPECT_EQ(load_checkpoint(*newest).names.size(), 2 * (1 + slots));
  EXPECT_NE(newest->find("ckpt-000000000010.bin"), std::string::npos) << *newest;
  // Second run: fresh PS tasks; the chief resumes from step 10.
  LocalPs ps(2);
  auto results = train(ps, 2, opt, steps, 4);
  Model expected = reference(optimizer, 0.05f, steps, 8);
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(results[i].error, "");
    EXPECT_EQ(results[i].start_step, 10) << "worker " << i;
    EXPECT_EQ(results[i].final_step, steps);
    EXPECT_LT(max_abs_diff(results[i].model.w, expected.w), 1e-4f) << "steps before the checkpoint were lost";
  }
  EXPECT_EQ(load_checkpoint(*newest_checkpoint(dir.str())).step, steps) << "done() writes the final checkpoint";
  // No temporary files are left behind.
  for (boost::filesystem::directory_iterator it(dir.str()), end; it != end; ++it) {
    EXPECT_EQ(it->path().string().find(".tmp"), std::string::npos) << it->path();
  }
  expect_servers_finish(ps);
}

INSTANTIATE_TEST_SUITE_P(Optimizers, PsCheckpoint, ::testing::Values("sgd", "momentum", "adam"));

}  // namespace
}  // namespace muster::runtime::ps::testing
