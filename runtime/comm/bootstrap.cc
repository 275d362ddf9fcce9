// The world of one (bootstrap.h).
#include "runtime/comm/bootstrap.h"
#include "runtime/error.h"

namespace muster::runtime::comm {
namespace {

class SingleBootstrap final : public Bootstrap {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string kind() const override { return "single"; }
  std::vector<std::string> allgather(const std::string& mine, const std::string&, std::chrono::milliseconds) override {
    return {mine};
  }
  std::unique_ptr<Bootstrap> subset(const std::vector<int>& ranks, const std::string&) override {
    if (ranks != std::vector<int>{0}) throw InvalidArgument("the world of one has only rank 0");
    return std::make_unique<SingleBootstrap>();
  }
};

}  // namespace

std::unique_ptr<Bootstrap> single_process_bootstrap() { return std::make_unique<SingleBootstrap>(); }

}  // namespace muster::runtime::comm
