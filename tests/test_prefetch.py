"""realnets.prefetch.Prefetcher: order, errors, shutdown."""

import threading

import pytest

from realnets.prefetch import Prefetcher


def test_items_come_in_the_order_they_were_made():
    counter = iter(range(1000))
    with Prefetcher(lambda: next(counter), depth=3) as items:
        got = [items.next() for _ in range(100)]
    assert got == list(range(100))


def test_an_error_in_the_producer_reaches_the_consumer_in_its_place():
    state = {"n": 0}

    def produce():
        state["n"] += 1
        if state["n"] == 4:
            raise RuntimeError("bad batch 4")
        return state["n"]

    with Prefetcher(produce) as items:
        assert [items.next() for _ in range(3)] == [1, 2, 3]
        with pytest.raises(RuntimeError, match="bad batch 4"):
            items.next()


def test_close_stops_and_joins_the_thread():
    before = threading.active_count()
    items = Prefetcher(lambda: 0, depth=2)
    items.next()
    items.close()
    assert threading.active_count() == before
    with pytest.raises(ValueError, match="depth must be >= 1"):
        Prefetcher(lambda: 0, depth=0)
