"""Following a worker's or a cluster's log while it is written (worker_logs(..., follow=True)).

The daemon's `GET .../logs?follow=true&offset=N` answers text/plain in
chunks as the log grows and ends the answer when the worker (cluster) has
ended; its `X-Log-Offset` header is the byte offset of the first byte sent.
follow_log() reads that stream with http.client and yields complete lines:

  1. connect with offset=N (the first time: tail=K, or offset=0);
  2. yield every complete line as its bytes arrive (a partial line waits);
  3. the answer ended cleanly: if the worker has ended, yield the last partial
     line and stop; if it still runs (the daemon bounds how long one answer
     lasts), reconnect from the offset reached;
  4. the connection dropped or went quiet for read_timeout: reconnect from the
     offset reached (bytes are never yielded twice nor skipped); give up with
     MusterError("unavailable") after `retries` failed connections in a row.

A daemon without streaming (no X-Log-Offset in its answer, or a 503/429
answer: no streaming, or no follower slot free) is followed by polling its
whole log every poll_seconds instead, with the same output.
"""
import http.client
import socket
import time
import urllib.parse
from typing import Callable, Iterator, Optional

from .errors import MusterError

WORKER_TERMINAL = ("succeeded", "failed", "timedout", "stopped", "lost")
CLUSTER_TERMINAL = ("succeeded", "failed", "stopped")


def _tail_start(body: bytes, k: int) -> int:
    """Index in body where its last k lines begin (a final newline ends a line, it does not start one)."""
    if k <= 0:
        return len(body)
    end = len(body) - 1 if body.endswith(b"\n") else len(body)
    pos = end
    for _ in range(k):
        pos = body.rfind(b"\n", 0, pos)
        if pos < 0:
            return 0
    return pos + 1


def follow_log(transport, path: str, is_done: Callable[[], bool], tail: Optional[int] = None,
               offset: Optional[int] = None, poll_seconds: float = 0.25, read_timeout: float = 30.0,
               retries: int = 20) -> Iterator[str]:
    """Yields the lines (without their newline) of the log at `path` as they are written.

    transport: a muster._http.Transport; is_done(): True once the owner has ended.
    tail=K starts with the last K lines; offset=N at byte N; neither: the start.
    """
    buf = b""
    failures = 0
    first = True
    streaming = True
    if offset is None and tail is None:
        offset = 0
    while True:
        done_before = False if streaming else is_done()
        query = {"follow": "true"}
        if offset is not None:
            query["offset"] = int(offset)
        elif tail is not None:
            query["tail"] = int(tail)
        try:
            conn, resp = transport.open_stream(path, query if streaming else None, timeout=read_timeout)
        except MusterError as err:
            if streaming and err.http_status in (429, 503):
                streaming = False  # the daemon does not stream, or has no follower slot free: poll
                continue
            if err.code not in ("unavailable", "deadline_exceeded") or failures >= retries:
                raise
            failures += 1
            time.sleep(min(0.1 * failures, 1.0))
            continue
        clean = False
        try:
            header = resp.getheader("X-Log-Offset")
            if streaming and header is None and first:
                streaming = False  # an older daemon: the whole log (or its tail) without offsets
            if not streaming:
                body = b"" if (first and tail is not None and offset is None) else resp.read()
                if first and tail is not None and offset is None:
                    conn.close()
                    conn, resp = transport.open_stream(path, None, timeout=read_timeout)
                    body = resp.read()
                    offset = _tail_start(body, int(tail))
                start = offset if offset is not None and offset <= len(body) else 0
                buf += body[start:]
                offset = len(body)
                clean = True
            else:
                start = int(header)
                if offset is None or start != offset:
                    buf = b"" if offset is not None and start < offset else buf
                    offset = start
                while True:
                    chunk = resp.read1(65536)
                    if not chunk:
                        clean = True
                        break
                    offset += len(chunk)
                    buf += chunk
                    failures = 0
                    if b"\n" in buf:
                        *lines, buf = buf.split(b"\n")
                        for line in lines:
                            yield line.decode("utf-8", "replace")
        except (http.client.HTTPException, socket.timeout, TimeoutError, ConnectionError, OSError, ValueError):
            failures += 1
            if failures > retries:
                raise MusterError("lost the log stream of %s after %d reconnects" % (path, retries),
                                  code="unavailable") from None
        finally:
            conn.close()
        first = False
        if b"\n" in buf:
            *lines, buf = buf.split(b"\n")
            for line in lines:
                yield line.decode("utf-8", "replace")
        if clean and (done_before if not streaming else is_done()):
            if buf:
                yield buf.decode("utf-8", "replace")
            return
        if not streaming:
            time.sleep(poll_seconds)
        else:  # a dropped connection backs off; a clean end while still running retries soon
            time.sleep(min(0.05 * max(failures, 1), 1.0))


def log_path(kind: str, ident: str) -> str:
    """"/api/v1/workers/<id>/logs" (kind "workers") or the clusters' route."""
    return "/api/v1/%s/%s/logs" % (kind, urllib.parse.quote(ident, safe=""))
