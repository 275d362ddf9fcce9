// The ring's view of a transport: one directed, in-order pipe of segments to
// the right neighbour (SendLink) and one from the left neighbour (RecvLink).
//
// Both ends cut the buffer the same way, so segments carry no headers: the
// receiver announces each segment's size with expect() in the same order
// the sender sends them. All calls are non-blocking and made by the
// progress thread only; the ring polls them and feeds a Watchdog.
//
// Implementations: shm/ (a single-producer single-consumer ring of slots in
// POSIX shared memory, ranks on one host) and mpi/ (MPI_Isend/MPI_Irecv).
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
  // The oldest unreleased expected segment if it has arrived, else nullptr.
  // The memory stays valid until release().
  virtual const void* try_recv() = 0;
  // Returns that segment's memory to the transport.
  virtual void release() = 0;
  virtual int peer() const = 0;
};

}  // namespace muster::runtime::comm
