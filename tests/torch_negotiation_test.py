"""muster.torch's negotiation table (negotiation.py) without any process: rounds fed by hand.

Every rank feeds the same messages to its own table, so what is checked here
is what every rank decides: which ops run, in which order, which fail and
why, when a join ends and whom it names.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "sdk", "python"))

import pytest  # noqa: E402

from muster.torch.negotiation import Negotiation, check, decode, encode  # noqa: E402


def allreduce(dtype="float32", shape=(3,), op="sum", pre=1.0, post=1.0):
    return {"kind": "allreduce", "dtypes": [dtype], "shapes": [list(shape)], "op": op, "pre": pre, "post": post}


def msg(*ops, join=False, clock=0.0, stall=0.0):
    m = {"ops": [list(o) for o in ops], "clock": clock, "stall": stall}
    if join:
        m["join"] = 1
    return m


def test_an_op_runs_once_every_rank_started_it_whatever_the_order():
    t = Negotiation(2)
    barrier = {"kind": "barrier"}
    # rank 0: allreduce 'a' then barrier; rank 1: barrier first, 'a' a round later
    d = t.round([msg(("allreduce.a", allreduce()), ("barrier.noname.0", barrier)), msg(("barrier.noname.0", barrier))])
    assert [r.key for r in d.ready] == ["barrier.noname.0"]
    d = t.round([msg(), msg(("allreduce.a", allreduce()))])
    assert [r.key for r in d.ready] == ["allreduce.a"] and d.ready[0].error is None
    assert sorted(d.ready[0].descs) == [0, 1]
    assert t.pending == {}


def test_ready_ops_come_out_in_one_order_first_round_then_first_rank_then_place():
    t = Negotiation(3)
    d = t.round([msg(("k.b", allreduce()), ("k.a", allreduce())), msg(("k.c", allreduce())), msg()])
    assert d.ready == []
    d = t.round([msg(("k.c", allreduce())), msg(("k.a", allreduce()), ("k.b", allreduce())),
                 msg(("k.a", allreduce()), ("k.b", allreduce()), ("k.c", allreduce()))])
    assert [r.key for r in d.ready] == ["k.b", "k.a", "k.c"]


def test_mismatched_descriptors_fail_on_every_rank_naming_ranks_and_fields():
    t = Negotiation(3)
    d = t.round([msg(("allreduce.x", allreduce("float32", (3,)))), msg(("allreduce.x", allreduce("int32", (3,)))),
                 msg(("allreduce.x", allreduce("float32", (4,))))])
    (r,) = d.ready
    assert "dtype: rank 1 has \"int32\", ranks 0, 2 have \"float32\"" in r.error
    assert "shape: rank 2 has [4], ranks 0, 1 have [3]" in r.error
    assert t.pending == {}


@pytest.mark.parametrize("field,a,b", [("op", "sum", "average"), ("pre", 1.0, 2.0), ("post", 1.0, 0.5)])
def test_allreduce_compares_op_and_scale_factors(field, a, b):
    base = allreduce()
    other = dict(base, **{field: b})
    base[field] = a
    d = Negotiation(2).round([msg(("allreduce.x", base)), msg(("allreduce.x", other))])
    assert d.ready[0].error and "rank 1" in d.ready[0].error


def test_allgather_compares_trailing_dimensions_not_the_first():
    ag = lambda shape: {"kind": "allgather", "dtypes": ["float32"], "shapes": [list(shape)]}  # noqa: E731
    d = Negotiation(2).round([msg(("allgather.x", ag((2, 5)))), msg(("allgather.x", ag((7, 5))))])
    assert d.ready[0].error is None
    d = Negotiation(2).round([msg(("allgather.x", ag((2, 5)))), msg(("allgather.x", ag((2, 6))))])
    assert "shape after the first dimension" in d.ready[0].error


def test_broadcast_compares_the_root():
    bc = lambda root: {"kind": "broadcast", "dtypes": ["float32"], "shapes": [[3]], "root": root}  # noqa: E731
    d = Negotiation(2).round([msg(("broadcast.x", bc(0))), msg(("broadcast.x", bc(1)))])
    assert "root_rank: " in d.ready[0].error


def test_different_kinds_under_one_key_fail():
    assert "different collectives" in check("x", {0: {"kind": "allreduce"}, 1: {"kind": "barrier"}}, [])


def test_joined_ranks_stand_in_for_allreduce_and_the_join_ends_with_the_last_rank():
    t = Negotiation(3)
    d = t.round([msg(join=True), msg(("allreduce.a", allreduce())), msg()])
    assert d.ready == [] and d.join_done is None
    d = t.round([msg(), msg(), msg(("allreduce.a", allreduce()))])
    (r,) = d.ready
    assert r.error is None and r.joined == [0] and sorted(r.descs) == [1, 2]
    d = t.round([msg(), msg(join=True), msg(join=True)])
    assert d.join_done == 2   # the highest rank of the last round that saw a join
    d = t.round([msg(join=True), msg(), msg()])
    assert d.join_done is None and t.joined == {0: 4}


def test_allgather_while_a_rank_has_joined_is_an_error():
    ag = {"kind": "allgather", "dtypes": ["float32"], "shapes": [[2]]}
    t = Negotiation(2)
    t.round([msg(join=True), msg()])
    d = t.round([msg(), msg(("allgather.x", ag))])
    assert "rank 0 has joined" in d.ready[0].error


def test_an_op_only_some_ranks_start_fails_after_the_stall_time_naming_the_others():
    t = Negotiation(3)
    d = t.round([msg(("allreduce.a", allreduce()), clock=10.0, stall=5.0), msg(("allreduce.a", allreduce())),
                 msg(("allreduce.b", allreduce()))])
    assert d.stalled == []
    d = t.round([msg(clock=16.0, stall=5.0), msg(), msg()])
    keys = {key: message for key, _, message in d.stalled}
    assert set(keys) == {"allreduce.a", "allreduce.b"}
    assert "started by ranks 0, 1 but not by rank 2" in keys["allreduce.a"]
    assert "rank 2 started allreduce.b" in keys["allreduce.a"]
    assert t.pending == {}


def test_shutdown_and_messages_round_trip_as_json():
    t = Negotiation(2)
    d = t.round([decode(encode(msg())), decode(encode(dict(msg(), bye=1)))])
    assert d.shutdown == [1]
    assert decode(b"") == {}


def test_a_rank_announcing_a_key_twice_is_a_protocol_fault():
    t = Negotiation(2)
    t.round([msg(("allreduce.a", allreduce())), msg()])
    with pytest.raises(ValueError, match="twice"):
        t.round([msg(("allreduce.a", allreduce())), msg()])


def test_a_rank_that_starts_a_stalled_op_late_fails_at_once_and_only_once():
    t = Negotiation(2)
    t.round([msg(("allreduce.loss", allreduce()), clock=0.0, stall=5.0), msg()])
    d = t.round([msg(clock=6.0, stall=5.0), msg()])
    assert [k for k, _, _ in d.stalled] == ["allreduce.loss"]
    # rank 1 starts it late: it fails at once, while rank 0's next 'loss' waits as usual
    d = t.round([msg(("allreduce.loss", allreduce()), clock=7.0, stall=5.0), msg(("allreduce.loss", allreduce()))])
    (late,) = d.ready
    assert sorted(late.descs) == [1] and "gave up waiting" in late.error and late.joined == []
    assert list(t.pending) == ["allreduce.loss"] and t.owed == {}
    d = t.round([msg(clock=8.0, stall=5.0), msg(("allreduce.loss", allreduce()))])
    assert [(r.key, r.error) for r in d.ready] == [("allreduce.loss", None)]
