"""Which collectives may run now: the table every rank of a process set keeps alike.

Horovod matches collectives across ranks by name, not by the order each
rank issued them in: rank 0 may start allreduce 'a' and then a barrier while
rank 1 starts the barrier first; both barriers run, and 'a' runs once rank 1
asks for it. muster.torch does the same. Each rank's engine thread
(engine.py) takes part in rounds; in each round every rank contributes one
message (the ops it started since its last message, whether it joined,
whether it is shutting down) and receives everyone's. Every rank feeds the
same messages, in rank order, to its own Negotiation, so every rank reaches
the same decisions without a coordinator: there is no leader to fail.

A round, step by step (Negotiation.round):
  a) Record each rank's new ops under their key ("allreduce.<name>"),
     with the op's descriptor (kind, dtypes, shapes, op, root, ...), the round
     and rank 0's clock when the key was first seen, and its place in the
     sender's message (the order key).
  b) Record ranks that joined (hvd.join) and ranks shutting down.
  c) An op is ready when every rank that has not joined has started it.
     Ready ops are ordered by (first round seen, first rank, place): the same
     order on every rank, which is the order every rank then runs them in.
  d) Each ready op's descriptors are compared (kind-specific fields: an
     allreduce needs the same dtype, shape, op and scale factors; an
     allgather the same dtype and trailing dimensions; a broadcast the same
     dtype, shape and root, ...). A difference makes the op an error on every
     rank, naming the ranks and what differs; no data moves, so the world
     stays usable. An allgather, broadcast, alltoall or reducescatter while a
     rank has joined is an error the same way (a joined rank has no tensor).
  e) Once every rank has joined, the join is over: its result is the rank
     that joined last (the highest rank of the last round that saw a join).
  f) An op some ranks started but others have not, for longer than the
     stall timeout by rank 0's clock, fails on the ranks that started it,
     naming the ranks that did not (Horovod's stall inspector only warns;
     muster never waits forever). The table remembers which ranks owe it
     (a tombstone): when one of them starts it later, it fails at once, so
     ranks that fell out of step (one failed a test the others passed) get
     back in step after one failure instead of stalling on every later op.

Descriptors are plain JSON values (lists, numbers, strings): messages travel
as JSON, never as pickles, so a peer's bytes are only ever data.
"""
import json


class Ready:
    """An op every needed rank has started: run it (error None) or fail it with `error` on every rank."""

    __slots__ = ("key", "descs", "error", "joined")

    def __init__(self, key, descs, error, joined):
        self.key = key            # "allreduce.grad0"
        self.descs = descs        # {rank: descriptor} of the ranks that started it
        self.error = error        # None, or why it fails on every rank
        self.joined = joined      # ranks standing in for it (they joined): sorted list

    def desc(self):
        """The descriptor of the lowest rank that started it (what joined ranks stand in for)."""
        return self.descs[min(self.descs)]

    def __repr__(self):
        return "Ready(%r, ranks=%s, joined=%s, error=%r)" % (self.key, sorted(self.descs), self.joined, self.error)


class Decision:
    """What one round decided, the same on every rank."""

    def __init__(self):
        self.ready = []          # [Ready], in the order every rank runs them
        self.stalled = []        # [(key, {rank: desc}, message)]
        self.join_done = None    # the rank that joined last, once every rank has joined
        self.shutdown = []       # ranks that announced shutdown this round
        self.new_ops = 0         # ops announced this round (any rank)


class Negotiation:
    """The per-process-set table of started ops (see the module's steps a) to f)).

    Not thread-safe: one engine thread owns it. `size` is the number of ranks.
    """

    def __init__(self, size):
        self.size = size
        self.round_no = 0
        self.pending = {}   # key -> {"descs": {rank: desc}, "order": tuple, "clock": float}
        self.joined = {}    # rank -> round it joined in (the current join only)
        self.owed = {}      # key -> {rank: why}: ranks that had not started a stalled op (step f)

    def round(self, messages):
        """Feeds one round's messages (decoded, rank order) and returns the Decision."""
        if len(messages) != self.size:
            raise ValueError("a round needs %d messages, got %d" % (self.size, len(messages)))
        self.round_no += 1
        d = Decision()
        clock = float(messages[0].get("clock", 0.0))
        stall_s = float(messages[0].get("stall", 0.0))
        # a) new ops
        late = []
        for r, msg in enumerate(messages):
            for place, (key, desc) in enumerate(msg.get("ops", ())):
                d.new_ops += 1
                owed = self.owed.get(key)
                if owed is not None and r in owed:
                    late.append(Ready(key, {r: desc}, owed.pop(r), []))
                    if not owed:
                        del self.owed[key]
                    continue
                entry = self.pending.get(key)
                if entry is None:
                    entry = self.pending[key] = {"descs": {}, "order": (self.round_no, r, place), "clock": clock}
                if r in entry["descs"]:
                    # The engine refuses a key already in flight, so this is a protocol fault.
                    raise ValueError("rank %d announced %r twice" % (r, key))
                entry["descs"][r] = desc
        # b) joins and shutdowns
        for r, msg in enumerate(messages):
            if msg.get("join") and r not in self.joined:
                self.joined[r] = self.round_no
            if msg.get("bye"):
                d.shutdown.append(r)
        # c) + d) ready ops, in one order
        needed = [r for r in range(self.size) if r not in self.joined]
        ready_keys = [k for k, e in self.pending.items() if all(r in e["descs"] for r in needed)]
        ready_keys.sort(key=lambda k: self.pending[k]["order"])
        joined = sorted(self.joined)
        d.ready.extend(late)
        for key in ready_keys:
            entry = self.pending.pop(key)
            descs = entry["descs"]
            d.ready.append(Ready(key, descs, check(key, descs, joined), joined))
        # e) join
        if len(self.joined) == self.size:
            last_round = max(self.joined.values())
            d.join_done = max(r for r, n in self.joined.items() if n == last_round)
            self.joined = {}
        # f) stalls
        if stall_s > 0:
            for key in [k for k, e in self.pending.items() if clock - e["clock"] > stall_s]:
                entry = self.pending.pop(key)
                have = sorted(entry["descs"])
                missing = [r for r in range(self.size) if r not in entry["descs"] and r not in self.joined]
                message = stall_message(key, have, missing, stall_s, self.pending)
                d.stalled.append((key, entry["descs"], message))
                if len(self.owed) >= _MAX_OWED:
                    self.owed.pop(next(iter(self.owed)))
                self.owed[key] = {r: "%s: the other ranks gave up waiting for this rank to start it (%s)"
                                  % (key, message) for r in missing}
        return d


_MAX_OWED = 4096  # tombstones kept (oldest dropped first)


def encode(msg):
    return json.dumps(msg, separators=(",", ":")).encode()


def decode(raw):
    return json.loads(raw.decode()) if raw else {}


# --- descriptor checks -------------------------------------------------------

def ranks_text(ranks):
    ranks = sorted(ranks)
    return ("rank %d" % ranks[0]) if len(ranks) == 1 else "ranks " + ", ".join(str(r) for r in ranks)


def _differ(field, values):
    """None when every rank gave the same value, else 'field: rank 1 has X, ranks 0, 2 have Y'."""
    groups = {}
    for r, v in values.items():
        groups.setdefault(json.dumps(v, sort_keys=True), []).append(r)
    if len(groups) < 2:
        return None
    parts = []
    for text, ranks in sorted(groups.items(), key=lambda g: (len(g[1]), min(g[1]))):
        parts.append("%s %s %s" % (ranks_text(ranks), "has" if len(ranks) == 1 else "have", text))
    return "%s: %s" % (field, ", ".join(parts))


def _one(values):
    """A single tensor's value as itself, a group's as the list."""
    return values[0] if len(values) == 1 else values


def _trailing(shapes):
    return _one([list(s[1:]) for s in shapes])


def _ndims(shapes):
    return _one([len(s) for s in shapes])


# Per kind: (field name, how to read it from a descriptor), compared across ranks.
_COMPARED = {
    "allreduce": [("number of tensors", lambda d: len(d["dtypes"])), ("dtype", lambda d: _one(d["dtypes"])),
                  ("shape", lambda d: _one(d["shapes"])), ("op", lambda d: d["op"]),
                  ("prescale_factor", lambda d: d["pre"]), ("postscale_factor", lambda d: d["post"])],
    "reducescatter": [("number of tensors", lambda d: len(d["dtypes"])), ("dtype", lambda d: _one(d["dtypes"])),
                      ("shape", lambda d: _one(d["shapes"])), ("op", lambda d: d["op"]),
                      ("prescale_factor", lambda d: d["pre"]), ("postscale_factor", lambda d: d["post"])],
    "allgather": [("number of tensors", lambda d: len(d["dtypes"])), ("dtype", lambda d: _one(d["dtypes"])),
                  ("number of dimensions", lambda d: _ndims(d["shapes"])),
                  ("shape after the first dimension", lambda d: _trailing(d["shapes"]))],
    "broadcast": [("dtype", lambda d: _one(d["dtypes"])), ("shape", lambda d: _one(d["shapes"])),
                  ("root_rank", lambda d: d["root"])],
    "alltoall": [("dtype", lambda d: _one(d["dtypes"])), ("number of dimensions", lambda d: _ndims(d["shapes"])),
                 ("shape after the first dimension", lambda d: _trailing(d["shapes"])),
                 ("number of splits", lambda d: len(d["splits"]))],
    "barrier": [],
    "optimizer": [("DistributedOptimizer", lambda d: d["id"])],
    "process_set": [("ranks", lambda d: d["ranks"]), ("action", lambda d: d["action"])],
}

# Kinds whose descriptors, when identical on every rank, need no further check.
_SAME_IS_FINE = ("allreduce", "reducescatter", "broadcast", "barrier", "process_set", "optimizer", "allgather")

# Kinds a joined rank cannot stand in for (it has no tensor to send).
_NOT_WITH_JOIN = ("allgather", "broadcast", "alltoall", "reducescatter", "process_set")


def check(key, descs, joined):
    """None when the ranks' descriptors of `key` agree, else the error every rank raises."""
    values = list(descs.values())
    if not joined and all(d == values[0] for d in values) and values[0].get("kind") in _SAME_IS_FINE:
        return None  # the common case: identical descriptors
    kinds = {r: d.get("kind") for r, d in descs.items()}
    problem = _differ("kind", kinds)
    if problem:
        return "%s: ranks started different collectives under one name (%s)" % (key, problem)
    kind = next(iter(kinds.values()))
    if kind not in _COMPARED:
        return "%s: unknown collective kind %r" % (key, kind)
    problems = []
    for field, read in _COMPARED[kind]:
        try:
            values = {r: read(d) for r, d in descs.items()}
        except (KeyError, TypeError):
            return "%s: a rank sent a malformed descriptor" % key
        p = _differ(field, values)
        if p:
            problems.append(p)
            if field in ("number of tensors", "number of dimensions"):
                break  # the fields after it would only repeat the difference
    if problems:
        return "%s: ranks disagree about %s. Every rank must pass matching tensors to a collective." % (
            key, "; ".join(problems))
    if joined and kind in _NOT_WITH_JOIN:
        return ("%s: %s joined (hvd.join) and cannot take part in a %s; only allreduce and barrier run "
                "while ranks have joined" % (key, ranks_text(joined) + (" has" if len(joined) == 1 else " have"),
                                             kind))
    if kind == "alltoall":
        n = len(descs)
        for r, d in descs.items():
            if len(d["splits"]) != n + len(joined):
                return "%s: rank %d gave %d splits for %d ranks" % (key, r, len(d["splits"]), n)
    return None


def stall_message(key, have, missing, stall_s, pending):
    """Why `key` failed: who started it, who did not, and what those ranks started instead."""
    instead = {}
    for other, entry in pending.items():
        for r in entry["descs"]:
            if r in missing:
                instead.setdefault(r, []).append(other)
    extra = ""
    if instead:
        extra = " Meanwhile " + "; ".join("rank %d started %s" % (r, ", ".join(sorted(ks)[:3]))
                                          for r, ks in sorted(instead.items())) + "."
    return ("%s: started by %s but not by %s within %g s (MUSTER_COMM_TIMEOUT_MS). The ranks issue different "
            "collectives or a rank stopped issuing them.%s" % (key, ranks_text(have), ranks_text(missing),
                                                               stall_s, extra))
