"""Delta streams in the same state share the work of answering them (``_memos.SharedWork``).

Identical streams must get identical answers computed once (the same response tuples, the
same holdings after their ACKs); a stream whose state differs must get its own answer, and
every answer must be what a stream alone would get.
"""

from __future__ import annotations

import gc

from xdscore import LinearCache
from xdscore._memos import DELTA_ANSWERS, SharedWork
from xdscore.builders import load_assignment
from xdscore.protocol import DeltaServer
from xdscore.wire._typeurls import ENDPOINT

from ._delta import ack, nack, sent, sent_versions, start, stream


def _cache(port: int, names: int = 50) -> LinearCache:
    return LinearCache(
        ENDPOINT, [load_assignment(f"e{i}", [("10.0.0.1", port + i)]) for i in range(names)]
    )


def _fleet(size: int, cache: LinearCache, names: list[str]) -> list[DeltaServer]:
    machines = [stream(ENDPOINT) for _ in range(size)]
    for machine in machines:
        start(machine, ENDPOINT, names)
    return machines


def test_identical_streams_share_answers_and_holdings() -> None:
    cache = _cache(8000)
    names = [f"e{i}" for i in range(50)]
    fleet = _fleet(3, cache, names)
    hits = DELTA_ANSWERS.hits
    first = [machine.poll(cache.view(None))[0] for machine in fleet]
    assert DELTA_ANSWERS.hits - hits == 2  # computed once, for the first stream
    assert first[0].resources is first[1].resources is first[2].resources
    assert first[0] is not first[1]  # the response itself (its nonce) is the stream's own
    for machine, response in zip(fleet, first, strict=True):
        ack(machine, response)
    held = [machine.type_states()[ENDPOINT].held_versions for machine in fleet]
    assert held[0] is held[1] is held[2]
    assert dict(held[0]) == sent_versions(first[0])

    cache.update(put=[load_assignment("e3", [("10.0.0.9", 9000)])])
    pushed = [machine.poll(cache.view(None))[0] for machine in fleet]
    assert sent(pushed[0]) == ["e3"]
    assert pushed[0].resources is pushed[1].resources is pushed[2].resources


def test_a_stream_in_another_state_gets_its_own_answer() -> None:
    cache = _cache(8100)
    names = [f"e{i}" for i in range(50)]
    same, other = _fleet(2, cache, names)
    fewer = stream(ENDPOINT)
    start(fewer, ENDPOINT, names[:10])
    view = cache.view(None)
    a, b, c = same.poll(view)[0], other.poll(view)[0], fewer.poll(view)[0]
    assert sent(c) == names[:10]
    assert sent(a) == sorted(names)
    # One stream NACKs: from then on its state is its own, and so is its answer.
    ack(same, a)
    nack(other, b)
    cache.update(put=[load_assignment("e3", [("10.0.0.9", 9000)])])
    view = cache.view(None)
    after_ack, after_nack = same.poll(view)[0], other.poll(view)[0]
    assert after_ack.resources is not after_nack.resources
    assert sent(after_ack) == ["e3"]
    # The rejected versions are not sent again; the changed one is, with what it held
    # unknown: the same names as a stream alone would get.
    alone = stream(ENDPOINT)
    start(alone, ENDPOINT, names)
    nack(alone, alone.poll(_cache(8100).view(None))[0])
    assert sent(alone.poll(view)[0]) == sent(after_nack)


class _Weak(dict[str, str]):
    __slots__ = ("__weakref__",)


def _work(limit: int, max_bytes: int = 1 << 20) -> SharedWork[object]:
    return SharedWork("test", limit=limit, max_bytes=max_bytes, doc="")


def test_an_entry_goes_when_an_object_of_its_key_goes() -> None:
    work = _work(4)
    held, kept = _Weak(a="1"), ("not", "weak")
    work.put((held, kept), "t", "answer")
    assert work.get((held, kept), "t") == "answer"
    assert work.get((held, kept), "other") is None
    assert work.bytes > 0
    del held
    gc.collect()
    assert len(work) == 0  # nothing of an earlier generation is kept alive by the memo
    assert work.bytes == 0


def test_the_oldest_entries_go_past_the_limit() -> None:
    work = _work(2)
    keys = [(_Weak(n=str(n)),) for n in range(3)]
    for n, key in enumerate(keys):
        work.put(key, None, n)
    assert len(work) == 2
    assert work.get(keys[0], None) is None
    assert work.get(keys[2], None) == 2


def test_an_entry_is_charged_what_it_holds_and_the_bytes_are_bounded() -> None:
    work = _work(100, max_bytes=20_000)
    strong = tuple(f"name-{n}" for n in range(100))  # (a tuple takes no weak reference)
    key = _Weak(a="1")
    work.put((key, strong), None, "x" * 1000)
    # The answer and the key object the entry holds strongly, not the weakly held one.
    assert 1000 + sum(map(len, strong)) < work.bytes < 1000 + 100 * 120
    keys = [_Weak(n=str(n)) for n in range(30)]
    for each in keys:
        work.put((each,), None, "y" * 2000)
        assert work.bytes <= 20_000
    assert len(work) < 10
    work.put((keys[0],), None, "z" * 30_000)  # larger than the whole bound: not kept
    assert work.get((keys[0],), None) is None
