"""The runtime operations an engine runs its rounds and ops on (a seam over one Communicator).

Collectives wraps one _muster_runtime Communicator (a process set's) and
offers what engine.py needs, on contiguous CPU tensors: the round exchange
(every rank's bytes to every rank), allreduce (sum, min, max), broadcast and
a byte allgather with per-rank lengths. Every data method returns a Pending
whose wait() finishes it; several may be in flight, and the runtime runs
them in the order they were started, on every rank the same.

Alltoall and reducescatter use the runtime's own (point-to-point channels;
the ring's reduce-scatter). `split()` forms a process set's communicator.
"""
import numpy as np
import torch

# Tensor dtype -> the runtime's name, for the dtypes it reduces.
NATIVE = {torch.float32: "float32", torch.float64: "float64", torch.float16: "float16",
          torch.bfloat16: "bfloat16", torch.int32: "int32", torch.int64: "int64"}

# The exchange's fixed slot: one allgather of this many bytes per rank carries
# a round's messages when they fit (almost always); else a second, sized one.
SLOT_BYTES = 2048


class Pending:
    """An op in flight: wait() blocks until it is done (raising its error) and runs `finish` once."""

    __slots__ = ("_native", "_finish", "_keep", "_done")

    def __init__(self, native=None, finish=None, keep=None):
        self._native = native
        self._finish = finish
        self._keep = keep  # buffers the runtime reads or writes until done
        self._done = False

    def done(self):
        return self._done or self._native is None or self._native.done()

    def wait(self):
        if self._done:
            return
        try:
            if self._native is not None:
                self._native.wait()
            if self._finish is not None:
                self._finish()
        finally:
            self._done = True
            self._native = None
            self._keep = None


def _raw(nbytes):
    """(runtime dtype, count) moving `nbytes` bytes unreduced, or None when nbytes is odd."""
    for name, width in (("int64", 8), ("int32", 4), ("float16", 2)):
        if nbytes % width == 0:
            return name, nbytes // width
    return None


def as_bytes(t):
    """A contiguous tensor's memory as a flat uint8 tensor (same storage)."""
    if t.numel() == 0:
        return torch.empty(0, dtype=torch.uint8)
    return t.reshape(-1).view(torch.uint8)


class Collectives:
    """The data path of one process set's engine (see module doc). Methods are called from one thread."""

    def __init__(self, comm):
        self.comm = comm
        self.rank = comm.rank
        self.size = comm.size
        # The exchange's buffers, reused every round (numpy: cheaper per call than torch for these sizes).
        self._slot = np.zeros(SLOT_BYTES // 8, dtype=np.int64)
        self._every = np.zeros(self.size * (SLOT_BYTES // 8), dtype=np.int64)

    def close(self):
        self.comm.close()

    def split(self, ranks, name):
        """A Collectives among `ranks` (ranks of this set) on its members, None on the others. Collective."""
        sub = self.comm.split(list(ranks), name)
        return Collectives(sub) if sub is not None else None

    # -- the round exchange -------------------------------------------------

    def exchange(self, payload):
        """Every rank's `payload` (bytes), in rank order. Collective, blocking."""
        n = len(payload)
        slot, every = self._slot, self._every
        slot[0] = n
        inline = n <= SLOT_BYTES - 8
        if inline and n:
            slot.view(np.uint8)[8:8 + n] = np.frombuffer(payload, dtype=np.uint8)
        self.comm.allgather_async(slot.ctypes.data, slot.size, "int64", every.ctypes.data).wait()
        lengths = every[::SLOT_BYTES // 8].tolist()
        if all(length <= SLOT_BYTES - 8 for length in lengths):
            raw = every.view(np.uint8)
            return [raw[r * SLOT_BYTES + 8: r * SLOT_BYTES + 8 + length].tobytes()
                    for r, length in enumerate(lengths)]
        # Someone's message did not fit: everyone sends its whole message again, sized.
        return self.allgather_bytes([payload], lengths)

    def allgather_bytes(self, payloads, lengths):
        """Blocking byte allgather: `payloads` is this rank's bytes (list, concatenated), `lengths` every rank's."""
        mine = b"".join(payloads)
        send = torch.frombuffer(bytearray(mine), dtype=torch.uint8) if mine else torch.empty(0, dtype=torch.uint8)
        out = torch.empty(sum(lengths), dtype=torch.uint8)
        self.allgather(send, lengths, out).wait()
        offsets = [0]
        for length in lengths:
            offsets.append(offsets[-1] + length)
        return [bytes(out[offsets[r]:offsets[r + 1]].numpy()) for r in range(self.size)]

    # -- data -----------------------------------------------------------------

    def allreduce(self, buf, op):
        """Reduces contiguous `buf` (a dtype in NATIVE) in place; op: "sum", "min", "max"."""
        if buf.numel() == 0 or self.size == 1:
            return Pending()
        native = self.comm.allreduce_async(buf.data_ptr(), buf.numel(), NATIVE[buf.dtype], op)
        return Pending(native, keep=buf)

    def broadcast(self, buf, root):
        """Copies root's contiguous `buf` (any dtype) into every rank's, in place. `root` is a rank of this set."""
        nbytes = buf.numel() * buf.element_size()
        if nbytes == 0 or self.size == 1:
            return Pending()
        raw = _raw(nbytes)
        if raw is not None:
            native = self.comm.broadcast_async(buf.data_ptr(), raw[1], raw[0], int(root))
            return Pending(native, keep=buf)
        padded = torch.zeros(nbytes + 1, dtype=torch.uint8)
        padded[:nbytes] = as_bytes(buf)
        native = self.comm.broadcast_async(padded.data_ptr(), (nbytes + 1) // 2, "float16", int(root))

        def finish():
            as_bytes(buf).copy_(padded[:nbytes])
        return Pending(native, finish=finish, keep=(buf, padded))

    def allgather(self, send, lengths, out):
        """Gathers every rank's bytes into `out` (uint8, sum(lengths)), rank r's at sum(lengths[:r]).

        `send` is this rank's uint8 tensor of lengths[rank] bytes. The runtime's
        allgather moves equal blocks, so each block is padded to the longest
        (rounded up to 8 bytes) and the blocks are packed together afterwards.
        """
        if self.size == 1:
            out.copy_(send)
            return Pending()
        block = (max(lengths) + 7) // 8 * 8 if lengths else 0
        if block == 0:
            return Pending()
        mine = torch.zeros(block, dtype=torch.uint8)
        mine[:send.numel()] = send
        every = torch.empty(block * self.size, dtype=torch.uint8)
        native = self.comm.allgather_async(mine.data_ptr(), block // 8, "int64", every.data_ptr())

        def finish():
            offset = 0
            for r, length in enumerate(lengths):
                out[offset:offset + length] = every[r * block:r * block + length]
                offset += length
        return Pending(native, finish=finish, keep=(mine, every, out))

    def reducescatter(self, send, counts, op, out):
        """Reduces contiguous `send` (a NATIVE dtype, sum(counts) elements) over the ranks into `out`.

        out gets counts[rank] elements: this rank's block of the reduction. op: sum, average, min, max.
        """
        if self.size == 1:
            out.copy_(send.narrow(0, 0, counts[0]))
            return Pending()
        native = self.comm.reducescatter_async(send.data_ptr(), out.data_ptr(), list(counts), NATIVE[send.dtype], op)
        return Pending(native, keep=(send, out))

    @staticmethod
    def alltoall_width(byte_counts):
        """The runtime dtype whose width divides every count (int64, int32, float16), or None."""
        for name, width in (("int64", 8), ("int32", 4), ("float16", 2)):
            if all(c % width == 0 for c in byte_counts):
                return name, width
        return None

    def alltoall(self, send, send_bytes, out, recv_bytes, width):
        """Sends send_bytes[k] bytes of uint8 `send` to rank k, receives recv_bytes[k] from it into uint8 `out`.

        `width` is alltoall_width() of every rank's counts (the same on every rank).
        """
        if self.size == 1:
            out.copy_(send.narrow(0, 0, send_bytes[0]))
            return Pending()
        name, w = width
        native = self.comm.alltoallv_async(send.data_ptr(), [c // w for c in send_bytes], out.data_ptr(),
                                           [c // w for c in recv_bytes], name)
        return Pending(native, keep=(send, out))
