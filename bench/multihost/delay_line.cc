// A fixed one-way delay on a network namespace's incoming packets, for
// kernels built without sch_netem (this machine's: CONFIG_NET_SCH_NETEM is
// not set, and there are no modules to load).
//
//   delay_line QUEUE DELAY_US        (inside the namespace, as root)
//   iptables -t raw -A PREROUTING -i DEV -j NFQUEUE --queue-num QUEUE --queue-bypass
//
// The iptables rule hands every packet arriving on DEV to netfilter queue
// QUEUE; this program holds each one DELAY_US microseconds from when it
// arrived (the kernel's receive stamp), then accepts it, in arrival order. The packet itself never
// leaves the kernel: the queue is bound in metadata-only copy mode (only
// the packet id comes up), with NFQA_CFG_F_GSO so that TCP's 64 KB
// GSO packets stay whole, and one batch verdict accepts every packet whose
// time has come. Waits are ppoll with a 1 ns timer slack, asked for early by
// the wake-up lateness measured so far, so that the delay is DELAY_US on
// average; its spread is this machine's wake-up jitter: measure the hop it
// gives (hop_ping) rather than assume it. SIGTERM/SIGINT: accept what is held
// and exit; --queue-bypass lets packets through once nobody is bound.
//
// Steps:
//   a) bind the queue (NFQNL_CFG_CMD_BIND), set COPY_META, a long queue,
//      GSO and fail-open flags (a full queue accepts instead of dropping);
//   b) loop: drain every queued-packet message (recvmmsg), giving each id
//      a due time: its kernel receive stamp + the delay;
//   c) accept, with one NFQNL_MSG_VERDICT_BATCH, the newest id whose
//      stamp + delay has passed (ids rise in arrival order, and a batch
//      verdict accepts every held id up to it);
//   d) ppoll the socket until the oldest held packet is due, less the
//      typical lateness of a timed wake-up (an average of the last ones).
// glibc's network headers before the kernel's, so linux/in.h defers to them.
#include <arpa/inet.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_queue.h>
#include <linux/netlink.h>
#include <endian.h>
#include <poll.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <string>
#include <vector>

namespace {

volatile std::sig_atomic_t g_stop = 0;

int64_t now_ns() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return int64_t{t.tv_sec} * 1000000000 + t.tv_nsec;
}

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "delay_line: %s: %s\n", what.c_str(), std::strerror(errno));
  std::exit(1);
}

// One nfnetlink request: nlmsghdr + nfgenmsg + attributes, built in place.
class Request {
 public:
  Request(uint16_t type, uint16_t queue) {
    buf_.resize(NLMSG_ALIGN(sizeof(nlmsghdr)) + NLMSG_ALIGN(sizeof(nfgenmsg)));
    auto* h = reinterpret_cast<nlmsghdr*>(buf_.data());
    h->nlmsg_type = static_cast<uint16_t>((NFNL_SUBSYS_QUEUE << 8) | type);
    h->nlmsg_flags = NLM_F_REQUEST;
    auto* g = reinterpret_cast<nfgenmsg*>(buf_.data() + NLMSG_ALIGN(sizeof(nlmsghdr)));
    g->nfgen_family = AF_UNSPEC;
    g->version = NFNETLINK_V0;
    g->res_id = htons(queue);
  }
  template <typename T>
  Request& attr(uint16_t type, const T& value) {
    const std::size_t at = buf_.size();
    buf_.resize(at + NLA_ALIGN(NLA_HDRLEN + sizeof(T)));
    auto* a = reinterpret_cast<nlattr*>(buf_.data() + at);
    a->nla_type = type;
    a->nla_len = static_cast<uint16_t>(NLA_HDRLEN + sizeof(T));
    std::memcpy(buf_.data() + at + NLA_HDRLEN, &value, sizeof(T));
    return *this;
  }
  void send(int fd) {
    reinterpret_cast<nlmsghdr*>(buf_.data())->nlmsg_len = static_cast<uint32_t>(buf_.size());
    sockaddr_nl kernel{};
    kernel.nl_family = AF_NETLINK;
    if (sendto(fd, buf_.data(), buf_.size(), 0, reinterpret_cast<sockaddr*>(&kernel), sizeof kernel) < 0) {
      die("sendto(netlink)");
    }
  }

 private:
  std::vector<char> buf_;
};

int64_t realtime_ns() {
  timespec t{};
  clock_gettime(CLOCK_REALTIME, &t);
  return int64_t{t.tv_sec} * 1000000000 + t.tv_nsec;
}

struct Packet {
  uint32_t id = 0;        // 0: not a queued packet
  int64_t arrived_ns = 0;  // the kernel's receive stamp (CLOCK_REALTIME), 0 if none
};

// The id and receive stamp of one NFQNL_MSG_PACKET message.
Packet parse_packet(const nlmsghdr* h) {
  Packet out;
  if ((h->nlmsg_type & 0xff) != NFQNL_MSG_PACKET) return out;
  const char* p = reinterpret_cast<const char*>(NLMSG_DATA(h)) + NLMSG_ALIGN(sizeof(nfgenmsg));
  const char* end = reinterpret_cast<const char*>(h) + h->nlmsg_len;
  while (p + NLA_HDRLEN <= end) {
    const auto* a = reinterpret_cast<const nlattr*>(p);
    if (a->nla_len < NLA_HDRLEN) break;
    if ((a->nla_type & NLA_TYPE_MASK) == NFQA_PACKET_HDR) {
      nfqnl_msg_packet_hdr ph{};
      std::memcpy(&ph, p + NLA_HDRLEN, sizeof ph);
      out.id = ntohl(ph.packet_id);
    } else if ((a->nla_type & NLA_TYPE_MASK) == NFQA_TIMESTAMP) {
      nfqnl_msg_packet_timestamp ts{};
      std::memcpy(&ts, p + NLA_HDRLEN, sizeof ts);
      out.arrived_ns = static_cast<int64_t>(be64toh(ts.sec)) * 1000000000 +
                       static_cast<int64_t>(be64toh(ts.usec)) * 1000;
    }
    p += NLA_ALIGN(a->nla_len);
  }
  return out;
}

struct Held {
  uint32_t id;
  int64_t due_ns;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s QUEUE DELAY_US\n", argv[0]);
    return 2;
  }
  const auto queue = static_cast<uint16_t>(std::atoi(argv[1]));
  const int64_t delay_ns = int64_t{std::atoi(argv[2])} * 1000;
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
  // A wire delays packets without a CPU; this stands in for one, so it must
  // not wait for a CPU either: the ranks of a busy-polling MPI or gloo take
  // every core of this machine, and at normal priority the release waited
  // for the end of their time slice (8 B MPI_Allreduce, 2 hosts: 3.0 ms per
  // op on a 247 us round trip). Real-time priority preempts them; its work
  // is a verdict per batch of packets.
  sched_param prio{};
  prio.sched_priority = 10;
  if (sched_setscheduler(0, SCHED_FIFO, &prio) != 0) {
    std::fprintf(stderr, "delay_line: no real-time priority (%s): delays wait for a CPU\n", std::strerror(errno));
  }
  std::signal(SIGTERM, [](int) { g_stop = 1; });
  std::signal(SIGINT, [](int) { g_stop = 1; });

  const int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_NETFILTER);
  if (fd < 0) die("socket(NETLINK_NETFILTER)");
  sockaddr_nl self{};
  self.nl_family = AF_NETLINK;
  if (bind(fd, reinterpret_cast<sockaddr*>(&self), sizeof self) != 0) die("bind(netlink)");
  const int rcvbuf = 16 << 20, one = 1;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof rcvbuf);
  setsockopt(fd, SOL_NETLINK, NETLINK_NO_ENOBUFS, &one, sizeof one);
  // The kernel stamps received packets only while some socket asks for
  // stamps: this one does, so that each queued packet carries its arrival
  // time (NFQA_TIMESTAMP) and our own wake-up latency is not added to the delay.
  const int stamp_fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (stamp_fd < 0 || setsockopt(stamp_fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one) != 0) {
    die("SO_TIMESTAMPNS");
  }

  // a) Bind the queue and configure it.
  nfqnl_msg_config_cmd bind_cmd{};
  bind_cmd.command = NFQNL_CFG_CMD_BIND;
  bind_cmd.pf = htons(AF_INET);
  Request(NFQNL_MSG_CONFIG, queue).attr(NFQA_CFG_CMD, bind_cmd).send(fd);
  nfqnl_msg_config_params params{};
  params.copy_range = htonl(0);
  params.copy_mode = NFQNL_COPY_META;
  const uint32_t flags = htonl(NFQA_CFG_F_GSO | NFQA_CFG_F_FAIL_OPEN);
  Request(NFQNL_MSG_CONFIG, queue)
      .attr(NFQA_CFG_PARAMS, params)
      .attr(NFQA_CFG_QUEUE_MAXLEN, htonl(65536))
      .attr(NFQA_CFG_FLAGS, flags)
      .attr(NFQA_CFG_MASK, flags)
      .send(fd);

  auto accept_through = [&](uint32_t id) {
    nfqnl_msg_verdict_hdr v{};
    v.verdict = htonl(NF_ACCEPT);
    v.id = htonl(id);
    Request(NFQNL_MSG_VERDICT_BATCH, queue).attr(NFQA_VERDICT_HDR, v).send(fd);
  };

  constexpr int kBatch = 64;
  constexpr std::size_t kMsgBytes = 512;  // metadata only: headers, no payload
  std::vector<char> bufs(kBatch * kMsgBytes);
  mmsghdr msgs[kBatch];
  iovec iovs[kBatch];
  std::deque<Held> held;
  int64_t lead_ns = 0;
  std::fprintf(stderr, "delay_line: queue %u, %lld us\n", queue, static_cast<long long>(delay_ns / 1000));
  while (!g_stop) {
    // b) Drain what the kernel has queued for us.
    for (;;) {
      for (int i = 0; i < kBatch; ++i) {
        iovs[i] = {bufs.data() + i * kMsgBytes, kMsgBytes};
        msgs[i] = {};
        msgs[i].msg_hdr.msg_iov = &iovs[i];
        msgs[i].msg_hdr.msg_iovlen = 1;
      }
      const int n = recvmmsg(fd, msgs, kBatch, MSG_DONTWAIT, nullptr);
      if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) break;
        if (errno == ENOBUFS) continue;
        die("recvmmsg(netlink)");
      }
      const int64_t t = now_ns(), real = realtime_ns();
      for (int i = 0; i < n; ++i) {
        int len = static_cast<int>(msgs[i].msg_len);
        for (auto* h = reinterpret_cast<nlmsghdr*>(iovs[i].iov_base); NLMSG_OK(h, len); h = NLMSG_NEXT(h, len)) {
          if (h->nlmsg_type == NLMSG_ERROR) {
            const auto* e = reinterpret_cast<const nlmsgerr*>(NLMSG_DATA(h));
            if (e->error != 0) {
              errno = -e->error;
              die("netlink request refused");
            }
            continue;
          }
          const Packet pk = parse_packet(h);
          if (pk.id == 0) continue;
          // Time already spent since the kernel stamped it (our wake-up),
          // when it did: counted against the delay.
          const int64_t spent = pk.arrived_ns ? std::clamp<int64_t>(real - pk.arrived_ns, 0, delay_ns) : 0;
          held.push_back({pk.id, t + delay_ns - spent});
        }
      }
      if (n < kBatch) break;
    }
    // c) Accept everything whose time has come (within the wake-up lead).
    const int64_t t = now_ns();
    uint32_t through = 0;
    while (!held.empty() && held.front().due_ns <= t + lead_ns) {
      through = held.front().id;
      held.pop_front();
    }
    if (through) accept_through(through);
    // d) Sleep until the oldest held packet is due, or a new one arrives.
    // A timed wake-up here comes tens of microseconds late, so it is asked
    // for lead_ns early: the lateness measured, averaged over the last ~8.
    pollfd p{fd, POLLIN, 0};
    if (held.empty()) {
      ppoll(&p, 1, nullptr, nullptr);
    } else {
      const int64_t wake_at = held.front().due_ns - lead_ns;
      const int64_t wait = wake_at - now_ns();
      if (wait > 0) {
        const timespec ts{static_cast<time_t>(wait / 1000000000), static_cast<long>(wait % 1000000000)};
        if (ppoll(&p, 1, &ts, nullptr) == 0) {
          const int64_t late = now_ns() - wake_at;
          lead_ns = std::clamp<int64_t>(lead_ns + (late - lead_ns) / 8, 0, delay_ns / 2);
        }
      }
    }
  }
  if (!held.empty()) accept_through(held.back().id);
  close(fd);
  return 0;
}
