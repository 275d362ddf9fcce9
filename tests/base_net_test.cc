// base::local_address_towards: the address the kernel picks for a peer, and
// a failure that names the host when there is none.
#include <gtest/gtest.h>

#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "api/base/net.h"

namespace muster::base {
namespace {

TEST(LocalAddressTowards, LoopbackIsReachedFromLoopback) {
  auto local = local_address_towards("127.0.0.1", 7878);
  EXPECT_FALSE(local.failure) << *local.failure;
  EXPECT_EQ(local.address, "127.0.0.1");
  // Any 127/8 address is loopback: the source is still 127.0.0.1.
  EXPECT_EQ(local_address_towards("127.0.0.2").address, "127.0.0.1");
}

TEST(LocalAddressTowards, NamesAreResolved) {
  auto local = local_address_towards("localhost");
  ASSERT_FALSE(local.failure) << *local.failure;
  EXPECT_EQ(local.address.rfind("127.", 0), 0u) << local.address;
}

TEST(LocalAddressTowards, FailureNamesTheHost) {
  // A UDP connect to the broadcast address is refused without SO_BROADCAST.
  auto broadcast = local_address_towards("255.255.255.255");
  ASSERT_TRUE(broadcast.failure);
  EXPECT_TRUE(broadcast.address.empty());
  EXPECT_NE(broadcast.failure->find("255.255.255.255"), std::string::npos) << *broadcast.failure;
  auto empty = local_address_towards("");
  ASSERT_TRUE(empty.failure);
  auto bad = local_address_towards("300.1.2.3.4");
  ASSERT_TRUE(bad.failure);
  EXPECT_NE(bad.failure->find("300.1.2.3.4"), std::string::npos) << *bad.failure;
}

// In a network namespace of its own (only `lo`, and that down) no address
// is reachable: the child reports what local_address_towards() said.
TEST(LocalAddressTowards, UnreachableInAnEmptyNetworkNamespace) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to unshare a network namespace";
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(fds[0]);
    std::string report;
    if (::unshare(CLONE_NEWNET) != 0) {
      report = std::string("unshare: ") + std::strerror(errno);
    } else {
      auto local = local_address_towards("10.11.12.13", 80);
      report = local.failure ? "failure: " + *local.failure : "address: " + local.address;
    }
    (void)!::write(fds[1], report.data(), report.size());
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string report;
  char buf[512];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) report.append(buf, static_cast<std::size_t>(n));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  if (report.rfind("unshare:", 0) == 0) GTEST_SKIP() << report;
  EXPECT_EQ(report.rfind("failure: no local address routes to 10.11.12.13", 0), 0u) << report;
}

}  // namespace
}  // namespace muster::base
