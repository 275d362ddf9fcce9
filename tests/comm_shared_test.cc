// Shared buffers and the direct allreduce under real mpirun (every rank on
// this host): every op x dtype x size against the same independent
// reference as comm_allreduce_test, at an odd offset inside the buffer with
// guard bytes around it; 64 MB (many blocks); shared and private buffers and
// MPI's algorithm interleaved; a mismatched offset or size reported on every
// rank. Callers' own shared files (AllreduceOptions::shared_fd, memfds here):
// mapped by the peers once, as /proc/self/maps shows, dropped on
// forget_shared_file and mapped again after, and the ring whenever a rank
// offers no file or another offset. Run with --transport=mpi the peers do not map the memory and the
// same checks go through the ring. Also run without mpirun, over a file store.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <string>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <vector>

#include "comm_mpi_main.h"
#include "comm_reference.h"
#include "runtime/comm/communicator.h"

namespace muster::runtime::comm {
namespace {

using testing::world;
using namespace testing::reference;

// Peers map shared buffers unless the ring was forced onto MPI links.
bool expect_direct() { return world()->options().ring_transport != RingTransport::kMpi; }

TEST(SharedBuffer, IsZeroedAlignedAndMappedByThePeers) {
  auto buf = world()->allocate_shared(1000);
  EXPECT_EQ(buf->bytes(), 1000u);
  EXPECT_EQ(buf->direct(), expect_direct());
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(buf->data()) % 64, 0u);
  const char* p = static_cast<const char*>(buf->data());
  for (std::size_t i = 0; i < 1000; ++i) ASSERT_EQ(p[i], 0) << i;
}

using Case = std::tuple<ReduceOp, DataType, std::size_t>;
class SharedAllreduceTest : public ::testing::TestWithParam<Case> {};

TEST_P(SharedAllreduceTest, MatchesReferenceAtAnOffset) {
  const auto [op, dtype, bytes_hint] = GetParam();
  const std::size_t count = bytes_hint < 1024 ? bytes_hint : bytes_hint / dtype_size(dtype) + 3;
  const std::size_t esize = dtype_size(dtype), offset = 24;  // not block- or line-aligned
  Communicator& comm = *world();
  auto buf = comm.allocate_shared(offset + count * esize + 8);
  char* base = static_cast<char*>(buf->data());
  std::memset(base, 'A', offset);
  std::memset(base + offset + count * esize, 'Z', 8);
  const std::vector<char> in = make_input(count, dtype, comm.rank());
  std::memcpy(base + offset, in.data(), count * esize);
  comm.allreduce(base + offset, count, dtype, {op, Algorithm::kAuto});
  std::vector<char> out(base + offset, base + offset + count * esize + 1);
  EXPECT_EQ(check_result(out, count, dtype, op, comm.size()), 0u);
  for (std::size_t i = 0; i < offset; ++i) ASSERT_EQ(base[i], 'A') << "wrote before the buffer at " << i;
  for (std::size_t i = 0; i < 8; ++i) ASSERT_EQ(base[offset + count * esize + i], 'Z') << "wrote past the buffer";
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const auto [op, dtype, bytes_hint] = info.param;
  return std::string(reduce_op_name(op)) + "_" + dtype_name(dtype) + "_" +
         (bytes_hint < 1024 ? std::to_string(bytes_hint) : std::string("1MBplus3"));
}

INSTANTIATE_TEST_SUITE_P(
    AllOpsDtypesSizes, SharedAllreduceTest,
    ::testing::Combine(::testing::Values(ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax),
                       ::testing::Values(DataType::kFloat32, DataType::kFloat64, DataType::kFloat16,
                                         DataType::kBFloat16, DataType::kInt32, DataType::kInt64),
                       ::testing::Values(std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1} << 20)),
    case_name);

TEST(SharedAllreduce, SixtyFourMegabytesAverageRepeated) {
  const std::size_t count = (64u << 20) / 4;
  Communicator& comm = *world();
  auto buf = comm.allocate_shared(count * 4);
  for (int round = 0; round < 2; ++round) {  // the second op on the same buffer, after the first
    const std::vector<char> in = make_input(count, DataType::kFloat32, comm.rank());
    std::memcpy(buf->data(), in.data(), count * 4);
    comm.allreduce(buf->data(), count, DataType::kFloat32, {ReduceOp::kAverage});
    std::vector<char> out(static_cast<char*>(buf->data()), static_cast<char*>(buf->data()) + count * 4);
    EXPECT_EQ(check_result(out, count, DataType::kFloat32, ReduceOp::kAverage, comm.size()), 0u) << round;
  }
}

// Every rank must end with the same bits, or replicas drift apart step by
// step. Float sums depend on their order, and the inputs here (magnitudes
// from 1e-3 to 1e6) make every order give different bits: the direct path
// reduces each chunk once, on its owner, and copies that result to all.
TEST(SharedAllreduce, EveryRankEndsWithTheSameBits) {
  Communicator& comm = *world();
  const std::size_t count = (3u << 20) / 4 + 5;  // several blocks and pieces, and a ragged end
  auto buf = comm.allocate_shared(count * 4);
  float* data = static_cast<float*>(buf->data());
  for (std::size_t i = 0; i < count; ++i) {
    const double big = (i + static_cast<std::size_t>(comm.rank())) % 3 == 0 ? 1e6 : 1.0;
    data[i] = static_cast<float>(big * std::sin(0.001 * static_cast<double>(i) + comm.rank()) + 1e-3 * comm.rank());
  }
  for (const ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
    comm.allreduce(data, count, DataType::kFloat32, {op});
    uint64_t hash = 1469598103934665603ull;  // FNV-1a over the result's bytes
    const auto* bytes = reinterpret_cast<const unsigned char*>(data);
    for (std::size_t i = 0; i < count * 4; ++i) hash = (hash ^ bytes[i]) * 1099511628211ull;
    std::vector<uint64_t> all(static_cast<std::size_t>(comm.size()));
    comm.allgather(&hash, 1, DataType::kInt64, all.data());
    for (int r = 0; r < comm.size(); ++r) EXPECT_EQ(all[static_cast<std::size_t>(r)], hash) << "rank " << r;
  }
}

// Shared buffers, private buffers and MPI's algorithm on a shared buffer, in
// flight together: each op must take the same path on every rank.
TEST(SharedAllreduce, MixesWithPrivateBuffersAndMpi) {
  Communicator& comm = *world();
  const std::size_t count = 300001;
  auto a = comm.allocate_shared(count * 4), b = comm.allocate_shared(count * 4);
  std::vector<char> heap = make_input(count, DataType::kFloat32, comm.rank());
  for (auto* s : {a.get(), b.get()}) {
    const std::vector<char> in = make_input(count, DataType::kFloat32, comm.rank());
    std::memcpy(s->data(), in.data(), count * 4);
  }
  std::vector<Handle> hs;
  hs.push_back(comm.allreduce_async(a->data(), count, DataType::kFloat32, {ReduceOp::kSum}));
  hs.push_back(comm.allreduce_async(heap.data(), count, DataType::kFloat32, {ReduceOp::kSum}));
  // MPI's own allreduce where the world is MPI's (the opt-in), else the ring asked for.
  const Algorithm other = comm.bootstrap_kind() == "mpi" ? Algorithm::kMpi : Algorithm::kRing;
  hs.push_back(comm.allreduce_async(b->data(), count, DataType::kFloat32, {ReduceOp::kSum, other}));
  for (auto& h : hs) h.wait();
  for (auto* s : {a.get(), b.get()}) {
    std::vector<char> out(static_cast<char*>(s->data()), static_cast<char*>(s->data()) + count * 4);
    EXPECT_EQ(check_result(out, count, DataType::kFloat32, ReduceOp::kSum, comm.size()), 0u);
  }
  EXPECT_EQ(check_result(heap, count, DataType::kFloat32, ReduceOp::kSum, comm.size()), 0u);
}

// Rank 0 reduces from another offset than the others: that is each rank's
// own data, so it is a valid allreduce; the direct path needs the same place
// on every rank, so the ranks agree (through their descriptors) to run the
// ring instead, and the result is right. Then the same offset runs direct.
TEST(SharedAllreduce, DifferentOffsetsRunTheRingAndAreRight) {
  Communicator& comm = *world();
  auto buf = comm.allocate_shared(4096);
  float* f = static_cast<float*>(buf->data());
  const std::size_t offset = comm.rank() == 0 ? 0 : 16;
  std::fill(f, f + 200, 1.0f);
  comm.allreduce(f + offset, 100, DataType::kFloat32, {ReduceOp::kSum, Algorithm::kRing});
  for (int i = 0; i < 100; ++i) ASSERT_EQ(f[offset + static_cast<std::size_t>(i)], static_cast<float>(comm.size())) << i;
  std::fill(f, f + 100, 1.0f);
  comm.allreduce(f, 100, DataType::kFloat32, {ReduceOp::kSum, Algorithm::kRing});
  for (int i = 0; i < 100; ++i) ASSERT_EQ(f[i], static_cast<float>(comm.size())) << i;
}

TEST(SharedBuffer, MismatchedSizeIsReportedOnEveryRank) {
  Communicator& comm = *world();
  EXPECT_THROW(comm.allocate_shared(comm.rank() == 0 ? 4096 : 8192), MismatchError);
  auto ok = comm.allocate_shared(64);  // still usable
  EXPECT_EQ(ok->direct(), expect_direct());
}

// A memfd of `bytes` named "shared-file-<tag>-r<rank>", mapped.
struct MemFile {
  MemFile(const std::string& tag, int rank, std::size_t bytes) : bytes(bytes) {
    name = "shared-file-" + tag + "-r" + std::to_string(rank);
    fd = memfd_create(name.c_str(), MFD_CLOEXEC);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(ftruncate(fd, static_cast<off_t>(bytes)), 0);
    base = static_cast<char*>(mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    EXPECT_NE(base, MAP_FAILED);
  }
  ~MemFile() {
    munmap(base, bytes);
    close(fd);
  }
  std::pair<uint64_t, uint64_t> id() const {
    struct stat st{};
    fstat(fd, &st);
    return {st.st_dev, st.st_ino};
  }
  std::string name;
  int fd = -1;
  std::size_t bytes;
  char* base = nullptr;
};

// How many of this process's mappings are of rank `r`'s memfd for `tag`.
int mappings_of(const std::string& tag, int r) {
  std::ifstream maps("/proc/self/maps");
  const std::string needle = "memfd:shared-file-" + tag + "-r" + std::to_string(r) + " ";
  int n = 0;
  for (std::string line; std::getline(maps, line);) n += line.find(needle) != std::string::npos;
  return n;
}

// Every peer's file mapped `expected` times here (ours once more, by the runtime).
void expect_peer_mappings(const std::string& tag, int expected) {
  Communicator& comm = *world();
  for (int r = 0; r < comm.size(); ++r) {
    if (r != comm.rank()) {
      EXPECT_EQ(mappings_of(tag, r), expected) << "rank " << r << "'s file";
    }
  }
}

// kRing: never the small path, which takes sizes up to megabytes where
// ranks outnumber CPUs (auto_small_bytes) and maps nothing.
AllreduceOptions in_file(const MemFile& f, std::size_t offset, ReduceOp op = ReduceOp::kSum) {
  AllreduceOptions o;
  o.op = op;
  o.algorithm = Algorithm::kRing;
  o.shared_fd = f.fd;
  o.shared_offset = offset;
  return o;
}

TEST(SharedFile, PeersMapItOnceReduceInPlaceAndForgetIt) {
  Communicator& comm = *world();
  const std::size_t count = (3u << 20) / 4 + 5, offset = 192;
  MemFile f("once", comm.rank(), offset + count * 4 + 64);
  float* data = reinterpret_cast<float*>(f.base + offset);
  const int direct = expect_direct() ? 1 : 0;
  for (int round = 0; round < 3; ++round) {
    const ReduceOp op = round == 1 ? ReduceOp::kAverage : ReduceOp::kSum;
    const std::vector<char> in = make_input(count, DataType::kFloat32, comm.rank());
    std::memcpy(data, in.data(), count * 4);
    std::memset(f.base + offset + count * 4, 'Z', 64);
    comm.allreduce(data, count, DataType::kFloat32, in_file(f, offset, op));
    std::vector<char> out(f.base + offset, f.base + offset + count * 4);
    EXPECT_EQ(check_result(out, count, DataType::kFloat32, op, comm.size()), 0u) << "round " << round;
    for (std::size_t i = 0; i < 64; ++i) ASSERT_EQ(f.base[offset + count * 4 + i], 'Z') << "wrote past the buffer";
    comm.barrier();
    expect_peer_mappings("once", direct);  // once, however many ops
  }
  // Forgotten here: gone from this rank's mappings at once; the next op maps it again on every rank.
  comm.forget_shared_file(f.id().first, f.id().second);
  expect_peer_mappings("once", 0);
  const std::vector<char> in = make_input(count, DataType::kFloat32, comm.rank());
  std::memcpy(data, in.data(), count * 4);
  comm.allreduce(data, count, DataType::kFloat32, in_file(f, offset));
  std::vector<char> out(f.base + offset, f.base + offset + count * 4);
  EXPECT_EQ(check_result(out, count, DataType::kFloat32, ReduceOp::kSum, comm.size()), 0u);
  comm.barrier();
  expect_peer_mappings("once", direct);
}

// One rank offers no file, or its buffer at another offset: the ranks agree
// on the ring, map nothing, and the result is right; then all offer the same
// place and it runs direct.
TEST(SharedFile, ARankWithoutItOrElsewhereRunsTheRing) {
  Communicator& comm = *world();
  const std::size_t count = 300001;
  MemFile f("ring", comm.rank(), 4096 + count * 4);
  for (int variant = 0; variant < 3; ++variant) {
    const std::size_t offset = variant == 1 && comm.rank() == 0 ? 4096 : 0;
    char* data = f.base + offset;
    const std::vector<char> in = make_input(count, DataType::kFloat32, comm.rank());
    std::memcpy(data, in.data(), count * 4);
    AllreduceOptions o = in_file(f, offset);
    if (variant == 0 && comm.rank() == 0) o.shared_fd = -1;
    comm.allreduce(data, count, DataType::kFloat32, o);
    std::vector<char> out(data, data + count * 4);
    EXPECT_EQ(check_result(out, count, DataType::kFloat32, ReduceOp::kSum, comm.size()), 0u) << variant;
    comm.barrier();
    expect_peer_mappings("ring", variant < 2 || !expect_direct() ? 0 : 1);
  }
}

// A rank that forgot the file while the others still map it: the next op
// maps it again everywhere (the descriptors differ, every rank offered its
// file), and is right.
TEST(SharedFile, ForgottenOnOneRankIsMappedAgainOnAll) {
  Communicator& comm = *world();
  const std::size_t count = 200003;
  MemFile f("again", comm.rank(), count * 4);
  for (int round = 0; round < 2; ++round) {
    if (round == 1 && comm.rank() == comm.size() - 1) comm.forget_shared_file(f.id().first, f.id().second);
    const std::vector<char> in = make_input(count, DataType::kFloat32, comm.rank());
    std::memcpy(f.base, in.data(), count * 4);
    comm.allreduce(f.base, count, DataType::kFloat32, in_file(f, 0, ReduceOp::kMax));
    std::vector<char> out(f.base, f.base + count * 4);
    EXPECT_EQ(check_result(out, count, DataType::kFloat32, ReduceOp::kMax, comm.size()), 0u) << round;
    comm.barrier();
    expect_peer_mappings("again", expect_direct() ? 1 : 0);  // the old mappings are gone
  }
}

// A descriptor that is not a regular file (a pipe) is no shared file: the ring.
TEST(SharedFile, APipeIsNotAFile) {
  Communicator& comm = *world();
  int pipefd[2];
  ASSERT_EQ(pipe(pipefd), 0);
  const std::size_t count = 100000;
  std::vector<char> in = make_input(count, DataType::kFloat32, comm.rank());
  AllreduceOptions o;
  o.algorithm = Algorithm::kRing;
  o.shared_fd = pipefd[0];
  comm.allreduce(in.data(), count, DataType::kFloat32, o);
  EXPECT_EQ(check_result(in, count, DataType::kFloat32, ReduceOp::kSum, comm.size()), 0u);
  close(pipefd[0]);
  close(pipefd[1]);
}

}  // namespace
}  // namespace muster::runtime::comm

int main(int argc, char** argv) { return muster::runtime::comm::testing::run_mpi_tests(argc, argv); }
