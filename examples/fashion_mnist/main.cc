// fashion_mnist: train an MLP or a CNN on Fashion-MNIST, in whichever mode
// the environment asks for:
//   mpirun -np 2 fashion_mnist ...     allreduce (OMPI_COMM_WORLD_SIZE is set)
//   TF_CONFIG='{...}' fashion_mnist    parameter-server worker (TF_CONFIG is set)
//   fashion_mnist ...                  one process
//   fashion_mnist --elastic ...        allreduce that survives a lost rank (an elastic cluster's ranks)
// The chief prints progress and, at the end, `final test_accuracy=0.8876`.
#include <CLI/CLI.hpp>
#include <Eigen/Core>
#include <cstdio>
#include <cstdlib>
#include <exception>

#include "examples/fashion_mnist/mode.h"
#include "examples/fashion_mnist/trainer.h"
#include "runtime/error.h"

namespace fm = muster::examples::fashion_mnist;

namespace {

std::string detect_mode() {
  if (std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr) return "allreduce";
  const char* tf = std::getenv("TF_CONFIG");
  if (tf != nullptr && *tf != '\0') return "ps";
  return "single";
}

}  // namespace

int main(int argc, char** argv) {
  fm::TrainOptions o;
  std::string mode_name = "auto";
  CLI::App app{"Train an MLP or CNN on Fashion-MNIST: single-process, allreduce (mpirun) or parameter-server (TF_CONFIG)"};
  app.add_option("--model", o.model, "mlp or cnn")->check(CLI::IsMember({"mlp", "cnn"}));
  app.add_option("--epochs", o.epochs, "passes over the training set");
  app.add_option("--batch-size", o.batch_size, "images per step per worker");
  app.add_option("--lr", o.lr, "base learning rate per worker, scaled by the number of workers (default: 0.05 for sgd/momentum, 0.001 for adam)");
  app.add_option("--optimizer", o.optimizer, "sgd, momentum or adam")->check(CLI::IsMember({"sgd", "momentum", "adam"}));
  app.add_option("--data-dir", o.data_dir, "folder with {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]");
  app.add_option("--checkpoint-dir", o.checkpoint_dir, "save a checkpoint every epoch and resume from it");
  app.add_option("--seed", o.seed, "initialisation and shuffling seed (the same on every worker)");
  app.add_option("--threads", o.threads, "Eigen threads per process");
  app.add_option("--limit", o.limit, "train on the first N images only (0: all)");
  app.add_option("--test-limit", o.test_limit, "evaluate on the first N test images only (0: all)");
  app.add_option("--log-every", o.log_every, "steps between progress lines");
  app.add_option("--warmup-steps", o.warmup_steps, "steps of linear learning-rate warm-up when there are several workers (default: one epoch)");
  app.add_option("--max-steps", o.max_steps, "stop after N steps per worker (0: run the epochs)");
  app.add_option("--compression", o.compression, "allreduce wire format: none or fp16");
  app.add_flag("!--no-eval", o.evaluate, "skip the test-set evaluation");
  app.add_flag("--elastic", o.elastic,
               "allreduce that survives a lost rank: run as an elastic cluster (muster.horovodrun(np, ..., min_np=))");
  app.add_option("--commit-every", o.commit_every, "--elastic: steps between in-memory commits of the state")
      ->check(CLI::PositiveNumber);
  app.add_option("--params-out", o.params_out, "--elastic: each rank writes its final parameters to DIR/rank<r>.bin");
  app.add_option("--mode", mode_name, "auto (from the environment), single, allreduce or ps")
      ->check(CLI::IsMember({"auto", "single", "allreduce", "ps"}));
  CLI11_PARSE(app, argc, argv);

  try {
    if (o.log_every <= 0) o.log_every = 1;
    Eigen::setNbThreads(o.threads);
    if (o.elastic) {
      fm::train_elastic(o);
      return 0;
    }
    if (mode_name == "auto") mode_name = detect_mode();
    std::unique_ptr<fm::Mode> mode = mode_name == "allreduce" ? fm::make_allreduce_mode(o)
                                     : mode_name == "ps"      ? fm::make_ps_mode(o)
                                                              : fm::make_single_mode(o);
    fm::train(o, *mode);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fashion_mnist: error: %s\n", e.what());
    return 1;
  }
}
