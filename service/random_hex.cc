#include "service/random_hex.h"

#include <openssl/rand.h>

#include <fstream>

namespace muster::service {

std::string random_hex(size_t n_bytes) {
  std::string bytes(n_bytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(bytes.data()), static_cast<int>(n_bytes)) != 1) {
    std::ifstream urandom("/dev/urandom", std::ios::binary);
    urandom.read(bytes.data(), static_cast<std::streamsize>(n_bytes));
  }
  static const char* kHex = "0123456789abcdef";
  std::string out;
  out.reserve(2 * n_bytes);
  for (unsigned char c : bytes) {
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 15]);
  }
  return out;
}

}  // namespace muster::service
