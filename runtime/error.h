// The runtime's errors: a small typed hierarchy carrying where and why.
//
// The training runtime (collectives, optimizers, parameter servers, data)
// throws these; callers catch muster::runtime::Error for all of them. Every
// message says what was wrong and, where there is one, which rank, variable,
// host or file.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace muster::runtime {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// A caller passed something invalid (sizes, dtypes, options).
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

// Ranks disagree about what they submitted (tensor count, sizes, order).
class MismatchError : public Error {
 public:
  using Error::Error;
};

// A peer died, a link broke or a collective failed. `rank` is the peer
// blamed, or -1 when unknown.
class CommError : public Error {
 public:
  CommError(const std::string& what, int rank = -1) : Error(what), rank_(rank) {}
  int rank() const { return rank_; }

 private:
  int rank_;
};

// A peer did not answer within the configured time.
class TimeoutError : public CommError {
 public:
  using CommError::CommError;
};

// A file or frame could not be read: bad magic, truncated, wrong counts.
class DataError : public Error {
 public:
  using Error::Error;
};

namespace detail {
template <typename A, typename B>
std::string check_message(const char* expr, const A& a, const B& b, const std::string& msg,
                          const char* file, int line) {
  std::ostringstream os;
  os << msg << " (" << expr << " failed: " << a << " vs " << b << " at " << file << ":" << line << ")";
  return os.str();
}
}  // namespace detail

}  // namespace muster::runtime

// Invariant checks that print both values. Throw muster::runtime::Error.
#define MUSTER_CHECK(cond, msg)                                                             \
  do {                                                                                      \
    if (!(cond)) {                                                                          \
      std::ostringstream muster_os_;                                                        \
      muster_os_ << msg << " (check " #cond " failed at " << __FILE__ << ":" << __LINE__ << ")"; \
      throw ::muster::runtime::Error(muster_os_.str());                                     \
    }                                                                                       \
  } while (0)

#define MUSTER_CHECK_OP(op, a, b, msg)                                                       \
  do {                                                                                       \
    const auto& muster_a_ = (a);                                                             \
    const auto& muster_b_ = (b);                                                             \
    if (!(muster_a_ op muster_b_)) {                                                         \
      std::ostringstream muster_os_;                                                         \
      muster_os_ << msg;                                                                     \
      throw ::muster::runtime::Error(::muster::runtime::detail::check_message(               \
          #a " " #op " " #b, muster_a_, muster_b_, muster_os_.str(), __FILE__, __LINE__));   \
    }                                                                                        \
  } while (0)

#define MUSTER_CHECK_EQ(a, b, msg) MUSTER_CHECK_OP(==, a, b, msg)
#define MUSTER_CHECK_LE(a, b, msg) MUSTER_CHECK_OP(<=, a, b, msg)
#define MUSTER_CHECK_LT(a, b, msg) MUSTER_CHECK_OP(<, a, b, msg)
