// The ring's view of a transport: one directed, in-order pipe of segments to
// the right neighbour (SendLink) and one from the left neighbour (RecvLink).
//
// Both ends cut the buffer the same way, so segments carry no headers: the
// receiver announces each segment's size with expect() in the same order
// the sender sends them. All calls are non-blocking and made by the
// progress thread only; the ring polls them and feeds a Watchdog.
//
// Implementations: shm/ (a single-producer single-consumer ring of slots in
// POSIX shared memory, ranks on one host), tcp/ (muster's own sockets
// between hosts) and mpi/ (MPI_Isend/MPI_Irecv).
#pragma once

#include <cstddef>

namespace muster::runtime::comm {

class SendLink {
 public:
  virtual ~SendLink() = default;
  // Sends `bytes` from `src` as the next segment, or returns false (nothing
  // done) when the pipe is full. `src` must stay unchanged until flushed().
  virtual bool try_send(const void* src, std::size_t bytes) = 0;
  // True once every segment sent so far has left its source memory.
  virtual bool flushed() = 0;
  virtual int peer() const = 0;
};

class RecvLink {
 public:
  virtual ~RecvLink() = default;
  // Announces the next segment's size (in order); lets MPI pre-post receives.
  virtual void expect(std::size_t bytes) = 0;
  // Like expect(), for a segment that is only to be copied to `dst` (the
  // ring's allgather): a transport that can receive straight into place
  // does so, and try_recv() then returns `dst` itself. `dst` must stay
  // untouched until the segment is released. By default it is staged.
  virtual void expect_into(void* dst, std::size_t bytes) {
    (void)dst;
    expect(bytes);
  }
  // The oldest unreleased expected segment if it has arrived, else nullptr.
  // The memory stays valid until release().
  virtual const void* try_recv() = 0;
  // Returns that segment's memory to the transport.
  virtual void release() = 0;
  virtual int peer() const = 0;
};

}  // namespace muster::runtime::comm
