// fashion_mnist checkpoints: a round trip restores parameters, optimizer
// state and step; a checkpoint of another model or a damaged file is refused
// with an error naming the file; a missing one means "start from scratch".
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "examples/fashion_mnist/checkpoint.h"
#include "runtime/error.h"

namespace muster::examples::fashion_mnist {
namespace {

namespace fs = std::filesystem;

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/muster_ckpt_test_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir_;
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

}  // namespace
}  // namespace muster::examples::fashion_mnist
