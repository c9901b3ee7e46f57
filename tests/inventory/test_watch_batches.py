"""How a watch stream cuts its events into batches (`WatchStream.next_batch`). The bytes come from a response
stand-in fed by the test, so the timing is the test's: the watch over real HTTP is covered in test_sync.py."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator

import orjson

from inventory.k8s.client import WatchStream


class FedResponse:
    """What `WatchStream` reads from a urllib3 response: chunks, here handed over by the test as it goes."""

    def __init__(self) -> None:
        self.chunks: queue.Queue[bytes | None] = queue.Queue()

    def feed(self, *names: str) -> None:
        for name in names:
            event = {"type": "MODIFIED", "object": {"metadata": {"name": name, "resourceVersion": "1"}}}
            self.chunks.put(orjson.dumps(event) + b"\n")

    def end(self) -> None:
        self.chunks.put(None)

    def stream(self, amount: int, decode_content: bool = True) -> Iterator[bytes]:
        while (chunk := self.chunks.get()) is not None:
            yield chunk

    def close(self) -> None:
        self.chunks.put(None)

    def release_conn(self) -> None:
        pass


def names(events) -> list[str]:
    return [e.object["metadata"]["name"] for e in events]


def settle(stream: WatchStream, count: int) -> None:
    """Until the reader thread has queued `count` events."""
    deadline = time.monotonic() + 5
    while stream._queue.qsize() < count:  # the reader thread has queued them
        assert time.monotonic() < deadline
        time.sleep(0.005)


def test_without_a_wait_a_batch_is_what_was_queued_and_does_not_wait_for_more() -> None:
    response = FedResponse()
    stream = WatchStream(response, "pods")
    try:
        response.feed("a", "b", "c")
        settle(stream, 3)
        started = time.monotonic()
        events, ended = stream.next_batch(max_items=500, max_wait=0.0, deadline=time.monotonic() + 10)
        assert (names(events), ended) == (["a", "b", "c"], False)
        assert time.monotonic() - started < 0.1
        response.feed("d")
        events, ended = stream.next_batch(max_items=500, max_wait=0.0, deadline=time.monotonic() + 10)
        assert names(events) == ["d"]  # the first event of a batch is still waited for
    finally:
        stream.close()


def test_a_wait_takes_what_arrives_within_it_and_the_cap_holds() -> None:
    response = FedResponse()
    stream = WatchStream(response, "pods")
    try:
        response.feed("a")
        settle(stream, 1)
        started = time.monotonic()
        late = threading.Timer(0.05, response.feed, args=("b",))
        late.start()
        events, _ = stream.next_batch(max_items=500, max_wait=0.3, deadline=time.monotonic() + 10)
        assert names(events) == ["a", "b"]
        assert time.monotonic() - started >= 0.25  # it waited out its company time
        response.feed(*"cdefg")
        settle(stream, 5)
        events, _ = stream.next_batch(max_items=3, max_wait=0.0, deadline=time.monotonic() + 10)
        assert names(events) == ["c", "d", "e"]
        events, _ = stream.next_batch(max_items=3, max_wait=0.0, deadline=time.monotonic() + 10)
        assert names(events) == ["f", "g"]
    finally:
        stream.close()


def test_the_end_of_the_stream_ends_a_batch_without_a_wait() -> None:
    response = FedResponse()
    stream = WatchStream(response, "pods")
    try:
        response.feed("a", "b")
        response.end()
        settle(stream, 3)
        events, ended = stream.next_batch(max_items=500, max_wait=0.0, deadline=time.monotonic() + 10)
        assert (names(events), ended) == (["a", "b"], True)
    finally:
        stream.close()
