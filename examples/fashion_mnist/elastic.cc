// Elastic allreduce (--elastic): the training survives a lost rank. The
// runtime's elastic run loop (runtime/elastic/run.h) forms the world (in an
// elastic cluster, through musterd), this job builds its DistributedOptimizer
// on it and trains; when a rank dies the others go back to the last commit
// and the world re-forms without it, when a replacement arrives the world
// re-forms with it (it receives the state from rank 0).
//
// What the state holds: the model's parameters, the optimizer's buffers,
// the epoch and the samples of that epoch the world has done. Each epoch
// shuffles the whole training set alike on every rank (seed + epoch); a step
// takes the next size x batch samples of what is left, rank r every size-th,
// so a world of another size goes on where the last one stopped. A commit
// every --commit-every steps (an in-memory copy). At the end every rank
// holds the same parameters; rank 0 evaluates and prints them hashed
// (`final params_fnv1a=...`), every rank writes them to
// <--params-out>/rank<r>.bin when asked.
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <random>
#include <vector>

#include "examples/fashion_mnist/mode.h"
#include "examples/fashion_mnist/trainer.h"
#include "runtime/data/dataset.h"
#include "runtime/distributed/distributed_optimizer.h"
#include "runtime/elastic/run.h"
#include "runtime/error.h"
#include "runtime/nn/model.h"

namespace muster::examples::fashion_mnist {
namespace {

namespace rt = muster::runtime;

uint64_t fnv1a(const void* data, std::size_t bytes, uint64_t h = 1469598103934665603ull) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

class ElasticTraining final : public rt::elastic::ElasticJob {
 public:
  explicit ElasticTraining(const TrainOptions& o)
      : o_(o),
        train_(rt::data::load_mnist(o.data_dir, "train").head(o.limit)),
        test_(rt::data::load_mnist(o.data_dir, "t10k").head(o.test_limit)),
        model_(rt::nn::make_model(o.model)) {
    if (o.batch_size <= 0 || o.epochs < 0) throw rt::InvalidArgument("--batch-size must be > 0, --epochs >= 0");
    model_->initialize(o.seed);
    base_lr_ = o.lr > 0 ? o.lr : default_lr(o.optimizer);
  }

  void form(rt::elastic::World& world, rt::elastic::State& state) override {
    rt::comm::Communicator* comm = world.communicator();
    if (!comm) throw rt::InvalidArgument("fashion_mnist --elastic needs a Communicator");
    rank_ = comm->rank();
    size_ = comm->size();
    optimizer_ = std::make_unique<rt::distributed::DistributedOptimizer>(
        *comm, rt::optim::make_optimizer(o_.optimizer, base_lr_ * static_cast<float>(size_)));
    auto& params = model_->parameters();
    std::vector<std::size_t> sizes;
    for (auto& p : params) {
      optimizer_->add_parameter(p.name, p.value.data(), nullptr, p.size());
      sizes.push_back(p.size());
    }
    for (std::size_t i = 0; i < params.size(); ++i) params[i].grad.borrow(optimizer_->gradient(static_cast<int>(i)));
    optimizer_->optimizer().init(sizes);
    std::vector<rt::elastic::State::Buffer> buffers;
    for (auto& p : params) buffers.push_back({p.name, p.value.data(), p.size()});
    for (auto& s : optimizer_->optimizer().state()) buffers.push_back({"optimizer/" + s.name, s.data, s.size});
    state.set_buffers(std::move(buffers));
    state.set_counter("epoch", &epoch_);
    state.set_counter("done", &done_);
    state.set_counter("step", &step_);
    if (rank_ == 0) {
      std::printf("elastic world: generation %d, %d ranks, at epoch %lld step %lld\n", world.generation(), size_,
                  static_cast<long long>(epoch_ + 1), static_cast<long long>(step_));
      std::fflush(stdout);
    }
  }

  void train(rt::elastic::World&, rt::elastic::State& state) override {
    const int64_t n = train_.count;
    std::vector<float> images(static_cast<std::size_t>(o_.batch_size) * train_.pixels());
    std::vector<int32_t> labels(static_cast<std::size_t>(o_.batch_size));
    while (epoch_ < o_.epochs && (o_.max_steps <= 0 || step_ < o_.max_steps)) {
      std::vector<int64_t> order(static_cast<std::size_t>(n));
      std::iota(order.begin(), order.end(), 0);
      std::shuffle(order.begin(), order.end(), std::mt19937_64(o_.seed + static_cast<uint64_t>(epoch_)));
      while (done_ < n && (o_.max_steps <= 0 || step_ < o_.max_steps)) {
        // This step's samples: the next size x batch of the epoch, rank r every size-th.
        const int64_t take = std::min<int64_t>(static_cast<int64_t>(size_) * o_.batch_size, n - done_);
        std::vector<int64_t> mine;
        for (int64_t i = rank_; i < take; i += size_) mine.push_back(order[static_cast<std::size_t>(done_ + i)]);
        const int count = static_cast<int>(mine.size());
        float loss = 0.0f;
        if (count > 0) {
          train_.gather(mine.data(), count, images.data(), labels.data());
          loss = model_->forward_backward(images.data(), labels.data(), count);
        } else {
          for (auto& p : model_->parameters()) std::fill(p.grad.data(), p.grad.data() + p.size(), 0.0f);
        }
        optimizer_->optimizer().set_learning_rate(base_lr_ * static_cast<float>(size_));
        optimizer_->step();  // averages the gradients of every rank, then updates
        done_ += take;
        ++step_;
        state.step_done();
        if (rank_ == 0 && step_ % o_.log_every == 0) {
          std::printf("epoch %lld step %lld loss %.4f ranks %d\n", static_cast<long long>(epoch_ + 1),
                      static_cast<long long>(step_), loss, size_);
          std::fflush(stdout);
        }
        if (step_ % o_.commit_every == 0) state.commit();
      }
      if (done_ >= n) {
        ++epoch_;
        done_ = 0;
        state.commit();
      }
    }
    finish();
  }

  void teardown() override {
    // The gradients go back to the model's own memory before the optimizer goes.
    for (auto& p : model_->parameters()) p.grad.allocate(p.size());
    optimizer_.reset();
  }

 private:
  void finish() {
    uint64_t h = 1469598103934665603ull;
    for (const auto& p : model_->parameters()) h = fnv1a(p.value.data(), p.size() * sizeof(float), h);
    if (!o_.params_out.empty()) {
      std::ofstream out(o_.params_out + "/rank" + std::to_string(rank_) + ".bin", std::ios::binary);
      for (const auto& p : model_->parameters()) {
        out.write(reinterpret_cast<const char*>(p.value.data()), static_cast<std::streamsize>(p.size() * sizeof(float)));
      }
    }
    if (rank_ != 0) return;
    if (o_.evaluate) {
      const int64_t correct = model_->count_correct(test_.image(0), test_.labels.data(), test_.count);
      std::printf("final test_accuracy=%.4f\n", static_cast<double>(correct) / static_cast<double>(test_.count));
    }
    std::printf("final steps=%lld\nfinal params_fnv1a=%016" PRIx64 "\n", static_cast<long long>(step_), h);
    std::fflush(stdout);
  }

  TrainOptions o_;
  rt::data::Dataset train_, test_;
  std::unique_ptr<rt::nn::Model> model_;
  std::unique_ptr<rt::distributed::DistributedOptimizer> optimizer_;
  float base_lr_ = 0.0f;
  int rank_ = 0, size_ = 1;
  int64_t epoch_ = 0, done_ = 0, step_ = 0;
};

}  // namespace

void train_elastic(const TrainOptions& options) {
  ElasticTraining job(options);
  rt::elastic::State state;
  rt::elastic::run(job, state);
}

}  // namespace muster::examples::fashion_mnist
