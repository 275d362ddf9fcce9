// fashion_mnist checkpoints: a round trip restores parameters, optimizer
// state and step; a checkpoint of another model or a damaged file is refused
// with an error naming the file; a missing one means "start from scratch".
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "api/base/checkpoint_file.h"
#include "examples/fashion_mnist/checkpoint.h"
#include "runtime/error.h"
#include "temp_dir.h"

namespace muster::examples::fashion_mnist {
namespace {

namespace fs = std::filesystem;

class CheckpointTest : public ::testing::Test {
 protected:
  muster::testing::TempDir tmp_{"muster-fmnist-ckpt"};
  std::string dir_ = tmp_.str();
};

TEST_F(CheckpointTest, RoundTripRestoresParametersStateAndStep) {
  auto model = runtime::nn::make_model("mlp");
  model->initialize(1);
  auto opt = runtime::optim::make_optimizer("momentum", 0.1f);
  for (auto& p : model->parameters()) std::fill(p.grad.begin(), p.grad.end(), 0.5f);
  std::vector<runtime::optim::ParamRef> refs;
  for (auto& p : model->parameters()) refs.push_back({p.value.data(), p.grad.data(), p.size()});
  opt->step(refs);
  opt->step(refs);
  save_checkpoint(dir_, 1234, *model, *opt);
  EXPECT_FALSE(fs::exists(checkpoint_path(dir_) + ".tmp"));

  auto other = runtime::nn::make_model("mlp");
  other->initialize(2);
  auto other_opt = runtime::optim::make_optimizer("momentum", 0.1f);
  auto steps = load_checkpoint(dir_, *other, *other_opt);
  ASSERT_TRUE(steps.has_value());
  EXPECT_EQ(*steps, 1234);
  EXPECT_EQ(other_opt->iterations(), 2);
  for (std::size_t i = 0; i < model->parameters().size(); ++i) {
    EXPECT_EQ(other->parameters()[i].value, model->parameters()[i].value);
  }
  auto a = opt->state(), b = other_opt->state();
  ASSERT_EQ(a.size(), b.size());
  ASSERT_FALSE(a.empty());
  for (std::size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].size, b[i].size);
    EXPECT_TRUE(std::equal(a[i].data, a[i].data + a[i].size, b[i].data)) << a[i].name;
  }
}

TEST_F(CheckpointTest, MissingMeansStartFromScratch) {
  auto model = runtime::nn::make_model("mlp");
  auto opt = runtime::optim::make_optimizer("sgd", 0.1f);
  EXPECT_FALSE(load_checkpoint(dir_, *model, *opt).has_value());
}

TEST_F(CheckpointTest, AnotherModelOrADamagedFileIsRefused) {
  auto mlp = runtime::nn::make_model("mlp");
  auto cnn = runtime::nn::make_model("cnn");
  auto opt = runtime::optim::make_optimizer("sgd", 0.1f);
  save_checkpoint(dir_, 5, *mlp, *opt);
  try {
    load_checkpoint(dir_, *cnn, *opt);
    FAIL() << "a cnn loaded an mlp checkpoint";
  } catch (const runtime::DataError& e) {
    EXPECT_NE(std::string(e.what()).find(checkpoint_path(dir_)), std::string::npos) << e.what();
  }
  fs::resize_file(checkpoint_path(dir_), fs::file_size(checkpoint_path(dir_)) / 2);
  EXPECT_THROW(load_checkpoint(dir_, *mlp, *opt), runtime::DataError);
  std::ofstream(checkpoint_path(dir_), std::ios::trunc) << "not a checkpoint";
  EXPECT_THROW(load_checkpoint(dir_, *mlp, *opt), runtime::DataError);
}

// The format is shared with the parameter servers' checkpoints; the kind in
// the file keeps one from being loaded as the other.
TEST_F(CheckpointTest, AParameterServerCheckpointIsRefusedByKind) {
  std::vector<float> w(10, 1.0f);
  ASSERT_FALSE(base::write_checkpoint(checkpoint_path(dir_), {"ps", {{"step", 3}}, {{"w", w.data(), w.size()}}}));
  auto mlp = runtime::nn::make_model("mlp");
  auto opt = runtime::optim::make_optimizer("sgd", 0.1f);
  try {
    load_checkpoint(dir_, *mlp, *opt);
    FAIL() << "loaded a ps checkpoint";
  } catch (const runtime::DataError& e) {
    EXPECT_NE(std::string(e.what()).find("written by 'ps', not a 'fashion_mnist' checkpoint"), std::string::npos)
        << e.what();
  }
}

// A refused checkpoint leaves the model as it was.
TEST_F(CheckpointTest, ARefusedCheckpointLeavesTheModelAlone) {
  auto mlp = runtime::nn::make_model("mlp");
  mlp->initialize(1);
  auto opt = runtime::optim::make_optimizer("sgd", 0.1f);
  save_checkpoint(dir_, 5, *mlp, *opt);
  auto other = runtime::nn::make_model("mlp");
  other->initialize(2);
  const auto before = other->parameters().back().value;
  // Damage the last parameter's name: every buffer before it matches.
  auto read = base::read_checkpoint(checkpoint_path(dir_), "fashion_mnist");
  ASSERT_FALSE(read.failure) << *read.failure;
  base::CheckpointContents c{"fashion_mnist", read.checkpoint.counters, {}};
  for (const auto& t : read.checkpoint.tensors) c.tensors.push_back({t.name, t.values.data(), t.values.size()});
  c.tensors.back().name = "renamed";
  ASSERT_FALSE(base::write_checkpoint(checkpoint_path(dir_), c));
  EXPECT_THROW(load_checkpoint(dir_, *other, *opt), runtime::DataError);
  EXPECT_EQ(other->parameters().back().value, before);
  EXPECT_NE(other->parameters().front().value, mlp->parameters().front().value);
}

}  // namespace
}  // namespace muster::examples::fashion_mnist
