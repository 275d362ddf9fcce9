// Tokens: the daemon token file (0600, stable across restarts) and which
// token may call which kind of route.
#include "service/auth.h"
#include "service/random_hex.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>

#include "temp_dir.h"

namespace fs = std::filesystem;
using muster::api::ErrorCode;
using muster::service::AuthKind;
using muster::service::Authenticator;

namespace {

TEST(Token, CreatedOnceWithMode0600) {
  muster::testing::TempDir tmp("muster-auth");
  const fs::path dir = tmp.path();
  auto first = muster::service::load_or_create_token(dir);
  ASSERT_TRUE(first.is_ok());
  EXPECT_EQ(first->size(), 64u);
  EXPECT_EQ(first->find_first_not_of("0123456789abcdef"), std::string::npos);
  struct stat st {};
  ASSERT_EQ(::stat((dir / "token").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600);
  auto second = muster::service::load_or_create_token(dir);
  ASSERT_TRUE(second.is_ok());
  EXPECT_EQ(first.value(), second.value());
}

TEST(Token, RandomAndComparedExactly) {
  EXPECT_NE(muster::service::random_hex(32), muster::service::random_hex(32));
  EXPECT_TRUE(muster::service::tokens_equal("abc", "abc"));
  EXPECT_FALSE(muster::service::tokens_equal("abc", "abd"));
  EXPECT_FALSE(muster::service::tokens_equal("abc", "abcd"));
}

TEST(Authenticator, Checks) {
  Authenticator auth("daemon-token", [](const std::string& t) -> std::optional<std::string> {
    if (t == "agent-a") return std::string("a");
    return std::nullopt;
  });
  EXPECT_TRUE(auth.check(AuthKind::kNone, "", "").is_ok());
  EXPECT_TRUE(auth.check(AuthKind::kUser, "Bearer daemon-token", "").is_ok());
  EXPECT_EQ(auth.check(AuthKind::kUser, "", "").code(), ErrorCode::kUnauthenticated);
  EXPECT_EQ(auth.check(AuthKind::kUser, "Basic daemon-token", "").code(), ErrorCode::kUnauthenticated);
  EXPECT_EQ(auth.check(AuthKind::kUser, "Bearer wrong", "").code(), ErrorCode::kUnauthenticated);
  EXPECT_EQ(auth.check(AuthKind::kUser, "Bearer agent-a", "").code(), ErrorCode::kPermissionDenied);
  EXPECT_TRUE(auth.check(AuthKind::kAgent, "Bearer agent-a", "a").is_ok());
  EXPECT_EQ(auth.check(AuthKind::kAgent, "Bearer agent-a", "b").code(), ErrorCode::kPermissionDenied);
  EXPECT_EQ(auth.check(AuthKind::kAgent, "Bearer daemon-token", "a").code(), ErrorCode::kPermissionDenied);
  EXPECT_EQ(auth.check(AuthKind::kAgent, "Bearer x", "a").code(), ErrorCode::kUnauthenticated);
}

}  // namespace
