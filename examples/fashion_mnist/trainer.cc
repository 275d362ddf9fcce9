#include "examples/fashion_mnist/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <ctime>
#include <vector>

#include "runtime/data/dataset.h"
#include "runtime/data/distributed_sampler.h"
#include "runtime/error.h"
#include "runtime/nn/model.h"
#include "runtime/report/metrics_reporter.h"

namespace muster::examples::fashion_mnist {

namespace data = runtime::data;
using Clock = std::chrono::steady_clock;

// CPU time of the calling (training) thread: unlike wall time, it does not
// grow when other work on the machine takes the core away.
static double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

float learning_rate(float base, int workers, int warmup_steps, int64_t step, int64_t total_steps) {
  const float target = base * static_cast<float>(workers);
  if (workers > 1 && warmup_steps > 0 && step < warmup_steps) {
    const float t = static_cast<float>(step + 1) / static_cast<float>(warmup_steps);
    return base + (target - base) * t;
  }
  if (total_steps <= 0) return target;
  // Cosine decay over the whole run (SGDR without restarts), to 5% at the end.
  const double progress = std::min(1.0, static_cast<double>(step) / static_cast<double>(total_steps));
  return target * static_cast<float>(0.05 + 0.95 * 0.5 * (1.0 + std::cos(3.14159265358979 * progress)));
}

namespace {

double evaluate(runtime::nn::Model& model, const data::Dataset& test, Mode& mode) {
  int64_t begin = 0, end = test.count;
  if (mode.shares_evaluation()) {  // contiguous shards, no padding: an exact total
    begin = test.count * mode.rank() / mode.size();
    end = test.count * (mode.rank() + 1) / mode.size();
  }
  const int64_t correct =
      model.count_correct(test.image(begin), test.labels.data() + begin, end - begin);
  const double total_correct = mode.shares_evaluation() ? mode.sum(static_cast<double>(correct))
                                                        : static_cast<double>(correct);
  return total_correct / static_cast<double>(test.count);
}

}  // namespace

TrainResult train(const TrainOptions& o, Mode& mode) {
  if (o.batch_size <= 0 || o.epochs < 0) throw runtime::InvalidArgument("--batch-size must be > 0, --epochs >= 0");
  const data::Dataset train_set = data::load_mnist(o.data_dir, "train").head(o.limit);
  const data::Dataset test_set = data::load_mnist(o.data_dir, "t10k").head(o.test_limit);

  auto model = runtime::nn::make_model(o.model);
  if (model->input_size() != train_set.pixels()) {
    throw runtime::InvalidArgument("model " + o.model + " takes " + std::to_string(model->input_size()) +
                                   " pixels, " + o.data_dir + " has " + std::to_string(train_set.pixels()));
  }
  model->initialize(o.seed);

  data::DistributedSampler sampler({train_set.count, mode.rank(), mode.size(), o.seed, true});
  const int64_t steps_per_epoch = sampler.batches(o.batch_size);
  // The schedule spans the epochs asked for, even when --max-steps stops early.
  const int64_t schedule_steps = steps_per_epoch * o.epochs;
  int64_t total_steps = schedule_steps;
  if (o.max_steps > 0) total_steps = std::min(total_steps, o.max_steps);
  const float base_lr = o.lr > 0.0f ? o.lr : default_lr(o.optimizer);
  // One epoch of warm-up by default: with 200 steps the 2-rank CNN ended
  // 0.6 points below one process after 10 epochs, with one epoch 0.2.
  const int warmup_steps = o.warmup_steps >= 0 ? o.warmup_steps : static_cast<int>(steps_per_epoch);

  int64_t step = mode.start(*model, steps_per_epoch);
  // Every process reports its curves to musterd when it runs under it
  // (MUSTER_URL etc. set; one line per rank or worker): its own loss every
  // step, and the chief the job's images/s and learning rate at each
  // progress line. Elsewhere the reporter does nothing.
  auto reporter = runtime::report::MetricsReporter::from_env();
  if (mode.is_chief()) {
    std::printf("mode=%s workers=%d model=%s params=%zu optimizer=%s lr=%g (x%d after %d warm-up steps) "
                "batch=%d/worker train=%lld test=%lld steps/epoch=%lld start_step=%lld\n",
                mode.name().c_str(), mode.size(), o.model.c_str(), model->parameter_count(), o.optimizer.c_str(),
                base_lr, mode.size(), mode.size() > 1 ? warmup_steps : 0, o.batch_size,
                static_cast<long long>(train_set.count), static_cast<long long>(test_set.count),
                static_cast<long long>(steps_per_epoch), static_cast<long long>(step));
    std::fflush(stdout);
  }

  std::vector<float> images(static_cast<std::size_t>(o.batch_size) * train_set.pixels());
  std::vector<int32_t> labels(static_cast<std::size_t>(o.batch_size));
  TrainResult result;
  double window_loss = 0.0;
  int64_t window_steps = 0, window_images = 0, images_done = 0;
  double train_seconds = 0.0, cpu_seconds = 0.0;
  int64_t my_images = 0;
  auto window_start = Clock::now();
  double window_cpu = thread_cpu_seconds();

  while (step < total_steps) {
    const int64_t epoch = step / steps_per_epoch;
    const std::vector<int64_t> mine = sampler.indices(epoch);
    for (int64_t b = step % steps_per_epoch; b < steps_per_epoch && step < total_steps; ++b) {
      const int64_t first = b * o.batch_size;
      const int n = static_cast<int>(std::min<int64_t>(o.batch_size, sampler.per_rank() - first));
      train_set.gather(mine.data() + first, n, images.data(), labels.data());
      const float loss = model->forward_backward(images.data(), labels.data(), n);
      mode.apply(*model, step, learning_rate(base_lr, mode.size(), warmup_steps, step, schedule_steps));
      ++step;
      runtime::report::Point dense;
      dense.step = step;
      dense.loss = loss;
      dense.total_steps = total_steps;
      reporter->report(dense);
      window_loss += loss;
      ++window_steps;
      window_images += n;
      const bool last = step == total_steps;
      if (step % o.log_every == 0 || last) {
        // Every process reaches this point at the same steps (equal batch counts).
        const double seconds = std::chrono::duration<double>(Clock::now() - window_start).count();
        const double mean_loss = mode.sum(window_loss / window_steps) / (mode.shares_evaluation() ? mode.size() : 1);
        const double job_images = static_cast<double>(window_images) * mode.size();
        train_seconds += seconds;
        cpu_seconds += thread_cpu_seconds() - window_cpu;
        images_done += window_images * mode.size();
        my_images += window_images;
        result.final_loss = mean_loss;
        if (mode.is_chief()) {
          const double lr = learning_rate(base_lr, mode.size(), warmup_steps, step - 1, schedule_steps);
          std::printf("epoch %lld step %lld loss %.4f lr %.4g images/s %.0f\n", static_cast<long long>(epoch + 1),
                      static_cast<long long>(step), mean_loss, lr, job_images / seconds);
          runtime::report::Point point;
          point.step = step;
          point.lr = lr;
          point.images_per_sec = job_images / seconds;
          point.scalars["mean_loss"] = mean_loss;  // over the job's ranks, as printed
          point.total_steps = total_steps;
          reporter->report(point);
          std::fflush(stdout);
        }
        window_loss = 0.0;
        window_steps = window_images = 0;
        window_start = Clock::now();
        window_cpu = thread_cpu_seconds();
      }
    }
    if (step % steps_per_epoch == 0 || step == total_steps) {
      const auto t = Clock::now();
      const double c = thread_cpu_seconds();
      mode.end_epoch(*model, step);
      window_start += Clock::now() - t;  // checkpoints do not count as training time
      window_cpu += thread_cpu_seconds() - c;
    }
  }
  result.steps = step;
  result.images_per_sec = train_seconds > 0 ? images_done / train_seconds : 0.0;
  // What the job would reach with a core per process: each process's images
  // per CPU-second of its training thread (waits in the collectives or for
  // the parameter servers count when they spin; sleeping waits do not),
  // summed over the processes (PS mode: the chief's times the workers).
  const double mine = cpu_seconds > 0 ? my_images / cpu_seconds : 0.0;
  result.images_per_cpu_sec = mode.shares_evaluation() ? mode.sum(mine) : mine * mode.size();

  if (o.evaluate) result.test_accuracy = evaluate(*model, test_set, mode);
  if (o.evaluate && mode.is_chief()) {
    runtime::report::Point point;
    point.step = step;
    point.accuracy = result.test_accuracy;
    point.total_steps = total_steps;
    reporter->report(point);
  }
  mode.finish(*model);
  if (mode.is_chief()) {
    std::printf("final images_per_sec=%.0f\n", result.images_per_sec);
    std::printf("final images_per_cpu_sec=%.0f\n", result.images_per_cpu_sec);
    if (o.evaluate) std::printf("final test_accuracy=%.4f\n", result.test_accuracy);
    std::printf("final loss=%.4f\n", result.final_loss);
    std::fflush(stdout);
  }
  return result;
}

}  // namespace muster::examples::fashion_mnist
