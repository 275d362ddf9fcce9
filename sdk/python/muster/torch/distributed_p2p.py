"""Point to point and monitored_barrier for the "muster" backend (muster.torch.distributed).

    import muster.torch.distributed
    dist.init_process_group("muster")
    req = dist.isend(t, dst=1, tag=3)             # returns at once; req.wait() raises what failed
    src = dist.recv(buf)                          # from any rank: returns the sender
    reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, t, 1), dist.P2POp(dist.irecv, buf, 1)])
    dist.monitored_barrier(timeout=timedelta(seconds=5), wait_all_ranks=True)   # names the ranks that did not come

Messages travel on the runtime's point-to-point links (runtime/comm/point_to_point.h:
a byte ring each way in shared memory on one host, a TCP stream of their own
between hosts), outside the order of the group's collectives, at any size,
matched by (sender, tag). Each op's Work is a P2pWork: unlike the
collectives' Works (made from futures, which torch 1.13 does not let carry
an error) its wait() raises the op's failure, and _source_rank() names the
sender of a recv.
"""
import threading
import time

import torch
import torch.distributed as dist

from ..runtime_errors import InvalidArgument, PeerTimeoutError, RuntimeFailure

# Tags this module keeps for itself, beyond torch's (a C int): monitored_barrier's.
_MONITORED_TAG = 1 << 40
_REPLY_BYTES = 512  # monitored_barrier's reply: a status byte, then rank 0's message
_PASSED = 1


class P2pWork(dist._Work):
    """The Work of one send or recv: wait() raises its failure, _source_rank() names the sender."""

    def __init__(self, handle, tensors, finish, orphans, as_error):
        super().__init__()
        self._handle = handle
        self._tensors = tensors  # the caller's: result(), and alive until the op is done
        self._finish = finish    # after success, on the waiting thread: copies into place
        self._orphans = orphans
        self._as_error = as_error
        self._lock = threading.Lock()
        self._done = False
        self._error = None
        self._source = -1

    def _complete(self):
        with self._lock:
            if self._done:
                return
            try:
                source = self._handle.wait()
                self._source = source if isinstance(source, int) else -1
                if self._finish is not None:
                    self._finish()
            except RuntimeFailure as err:
                self._error = self._as_error(err)
            self._done = True
            self._finish = None

    def wait(self, timeout=None):
        if timeout is not None and timeout.total_seconds() > 0 and not self._done:
            deadline = time.monotonic() + timeout.total_seconds()
            while not self._handle.done():
                if time.monotonic() >= deadline:
                    raise RuntimeError("muster backend: Timed out after %.0f ms waiting for a point-to-point op"
                                       % (timeout.total_seconds() * 1000))
                time.sleep(0.001)
        self._complete()
        if self._error is not None:
            raise self._error
        return True

    def is_completed(self):
        if not self._done and self._handle.done():
            self._complete()
        return self._done

    def is_success(self):
        return self.is_completed() and self._error is None

    def exception(self):
        return self._error if self.is_completed() else None

    def result(self):
        self.wait()
        return self._tensors

    def _source_rank(self):
        self.wait()
        return self._source

    source_rank = _source_rank

    def get_future(self):
        future = torch.futures.Future()

        def complete():
            try:
                self.wait()
                future.set_result(self._tensors)
            except Exception as err:  # noqa: BLE001 - the future carries it
                future.set_exception(err)
        threading.Thread(target=complete, name="muster-p2p-future", daemon=True).start()
        return future

    def __del__(self):
        # Dropped before its op was done: the runtime still reads or writes the
        # tensors, so they stay alive with the group until it is.
        try:
            if not self._done and not self._handle.done():
                self._orphans.keep(self._handle, (self._tensors, self._finish))
        except Exception:  # noqa: BLE001 - interpreter teardown
            pass


class Orphans:
    """Buffers of ops nobody waits for any more, kept until their op is done (or the group closes)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._items = []

    def keep(self, handle, buffers):
        with self._lock:
            self._items = [(h, b) for h, b in self._items if not h.done()]
            self._items.append((handle, buffers))

    def clear(self):
        with self._lock:
            self._items = []


class PointToPoint:
    """A group's sends and recvs over its runtime Communicator `comm`."""

    def __init__(self, comm, as_error):
        self._comm = comm
        self._as_error = as_error
        self.orphans = Orphans()
        self._barriers = 0

    @staticmethod
    def _one(tensors, what):
        if len(tensors) != 1:
            raise InvalidArgument("%s: the muster backend takes one tensor per call, got %d" % (what, len(tensors)))
        t = tensors[0]
        if t.device.type != "cpu":
            raise InvalidArgument("%s: the muster backend works on CPU tensors, got one on %s" % (what, t.device))
        if t.is_sparse:
            raise InvalidArgument("%s: the muster backend sends dense tensors; send indices() and values()" % what)
        return t

    def _start(self, start):
        try:
            return start()
        except RuntimeFailure as err:
            raise self._as_error(err) from err

    def send(self, tensors, dst, tag):
        t = self._one(tensors, "send")
        data = t if t.is_contiguous() else t.contiguous()
        handle = self._start(lambda: self._comm.send_async(data.data_ptr(), data.numel() * data.element_size(),
                                                           int(dst), tag=int(tag)))
        return P2pWork(handle, [t, data], None, self.orphans, self._as_error)

    def recv(self, tensors, src, tag):
        t = self._one(tensors, "recv")
        buf = t if t.is_contiguous() else torch.empty_like(t, memory_format=torch.contiguous_format)
        handle = self._start(lambda: self._comm.recv_async(buf.data_ptr(), buf.numel() * buf.element_size(),
                                                           int(src), tag=int(tag)))
        finish = None if buf is t else (lambda: t.copy_(buf))
        return P2pWork(handle, [t, buf], finish, self.orphans, self._as_error)

    def monitored_barrier(self, rank, size, timeout_s, wait_all_ranks):
        """torch's monitored_barrier: rank 0 waits up to `timeout_s` for every rank to check in and raises
        naming those that did not (the first in rank order, or all of them with `wait_all_ranks`); every
        other rank passes when all came, else fails with rank 0's message.

        Protocol (tags _MONITORED_TAG + 2n and + 2n + 1 for this group's n-th call):
          a) every rank but 0 sends a token to rank 0 and waits (the group's timeout) for its reply;
          b) rank 0 posts a recv from every rank, all with one deadline (`timeout_s` from the start: the
             time is not spent rank after rank), and takes them in rank order;
          c) rank 0 replies to every rank not gone: "passed", or its error message; a rank that comes
             later finds the reply waiting and fails at once instead of hanging;
          d) rank 0 raises its message when a rank is missing.
        """
        n = self._barriers
        self._barriers += 1
        tag_in, tag_out = _MONITORED_TAG + 2 * n, _MONITORED_TAG + 2 * n + 1
        if rank != 0:
            token = torch.zeros(1, dtype=torch.uint8)
            reply = torch.zeros(_REPLY_BYTES, dtype=torch.uint8)
            why = None
            try:
                self._comm.send_async(token.data_ptr(), 1, 0, tag=tag_in).wait()
                self._comm.recv_async(reply.data_ptr(), _REPLY_BYTES, 0, tag=tag_out).wait()
                if int(reply[0]) != _PASSED:
                    why = "rank 0 reported: " + bytes(reply[1:].numpy()).rstrip(b"\0").decode("utf-8", "replace")
            except RuntimeFailure as err:
                why = str(err)
            if why is not None:
                raise RuntimeError("muster backend: Rank %d successfully reached monitoredBarrier, but received "
                                   "errors while waiting for send/recv from rank 0: %s" % (rank, why))
            return
        timeout_ms = max(1, int(timeout_s * 1000))
        tokens = torch.zeros(size, dtype=torch.uint8)
        waits = {r: self._comm.recv_async(tokens[r:].data_ptr(), 1, r, tag=tag_in, timeout_ms=timeout_ms)
                 for r in range(1, size)}
        missing = {}
        for r, handle in waits.items():
            if missing and not wait_all_ranks:
                if not handle.done():
                    missing[r] = None  # not waited for: the first missing rank is named already
                continue
            try:
                handle.wait()
            except RuntimeFailure as err:
                missing[r] = err
        for r, handle in waits.items():
            if not handle.done():
                self.orphans.keep(handle, tokens)  # its recv may still land in `tokens`
        message = None
        if missing:
            named = sorted(r for r, err in missing.items() if err is not None)
            late = all(err is None or isinstance(err, PeerTimeoutError) for err in missing.values())
            ms = int(round(timeout_s * 1000))
            if wait_all_ranks:
                message = "[Rank 0]: Ranks %s failed to pass monitoredBarrier in %d ms" % (
                    ", ".join(map(str, named)), ms)
            else:
                message = "[Rank 0]: Rank %d failed to pass monitoredBarrier in %d ms" % (named[0], ms)
            if late:
                message += " (Rank 0 timed out in monitoredBarrier waiting for %s)" % (
                    "them" if len(named) > 1 else "it")
            else:
                message += ": " + "; ".join("rank %d: %s" % (r, missing[r]) for r in named
                                            if not isinstance(missing[r], PeerTimeoutError))
            passed = [r for r in range(1, size) if r not in missing]
            message += "; ranks that passed: %s" % (", ".join(map(str, passed)) or "none")
        gone = {r for r, err in missing.items() if err is not None and not isinstance(err, PeerTimeoutError)}
        self._reply(size, tag_out, message, gone)
        if message is not None:
            raise RuntimeError("muster backend: " + message)

    def _reply(self, size, tag_out, message, gone):
        """Step c): `message` None = passed."""
        reply = torch.zeros(_REPLY_BYTES, dtype=torch.uint8)
        if message is None:
            reply[0] = _PASSED
        else:
            text = message.encode("utf-8")[:_REPLY_BYTES - 1]
            reply[1:1 + len(text)] = torch.frombuffer(bytearray(text), dtype=torch.uint8)
        sends = []
        for r in range(1, size):
            if r not in gone:
                try:
                    sends.append(self._comm.send_async(reply.data_ptr(), _REPLY_BYTES, r, tag=tag_out))
                except RuntimeFailure:
                    pass  # gone meanwhile: nobody to tell
        for handle in sends:
            try:
                handle.wait()
            except RuntimeFailure:
                pass
