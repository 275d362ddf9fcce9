// Round-trip time of an 8-byte UDP datagram between two hosts: what one hop
// of a link costs, measured the way ping measures it (one blocking send and
// receive per side, no spinning), for the ring's latency floor.
//
//   hop_ping serve PORT                   (echoes until killed)
//   hop_ping ADDRESS PORT COUNT           -> {"rtt_us": {"min", "median", "p90"}, "count"}
//
// The client sends COUNT pings one after another (a 2 s timeout on each;
// one lost is resent) after 20 unreported warm-up ones, and prints one JSON
// line.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

[[noreturn]] void die(const char* what) {
  std::perror(what);
  std::exit(1);
}

int serve(uint16_t port) {
  const int fd = socket(AF_INET, SOCK_DGRAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) die("hop_ping: bind");
  char buf[64];
  for (;;) {
    sockaddr_in from{};
    socklen_t len = sizeof from;
    const ssize_t n = recvfrom(fd, buf, sizeof buf, 0, reinterpret_cast<sockaddr*>(&from), &len);
    if (n > 0) sendto(fd, buf, static_cast<std::size_t>(n), 0, reinterpret_cast<sockaddr*>(&from), len);
  }
}

int ping(const char* host, uint16_t port, int count) {
  const int fd = socket(AF_INET, SOCK_DGRAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  if (fd < 0 || inet_pton(AF_INET, host, &addr.sin_addr) != 1) die("hop_ping: address");
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) die("hop_ping: connect");
  const timeval timeout{2, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  std::vector<double> rtt;
  for (int i = -20, lost = 0; i < count;) {
    uint64_t seq = static_cast<uint64_t>(i + 20), back = 0;
    const auto t0 = std::chrono::steady_clock::now();
    if (send(fd, &seq, sizeof seq, 0) != sizeof seq) die("hop_ping: send");
    if (recv(fd, &back, sizeof back, 0) != sizeof back || back != seq) {
      if (++lost > 10) die("hop_ping: no answer");
      continue;
    }
    const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    if (i++ >= 0) rtt.push_back(us);
  }
  std::sort(rtt.begin(), rtt.end());
  std::printf("{\"rtt_us\": {\"min\": %.1f, \"median\": %.1f, \"p90\": %.1f}, \"count\": %d}\n", rtt.front(),
              rtt[rtt.size() / 2], rtt[rtt.size() * 9 / 10], count);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "serve") == 0) return serve(static_cast<uint16_t>(std::atoi(argv[2])));
  if (argc == 4 && std::atoi(argv[3]) > 0) {
    return ping(argv[1], static_cast<uint16_t>(std::atoi(argv[2])), std::atoi(argv[3]));
  }
  std::fprintf(stderr, "usage: %s serve PORT | %s ADDRESS PORT COUNT\n", argv[0], argv[0]);
  return 2;
}
