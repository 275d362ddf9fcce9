"""Following a worker's or a cluster's log while it is written (worker_logs(..., follow=True)).

The daemon's `GET .../logs?follow=true` answers text/plain in chunks as the
log grows and ends the answer when the worker (cluster) has ended. By default
it starts at the end (the last lines, after a "[muster] ..." line saying how
much came before); `from_start=true` starts at the first byte, `offset=N` at
byte N. Its `X-Log-Offset` header is the offset of the first log byte sent,
and `X-Log-Marker-Bytes` the length of the marker line before it (not part of
the log). Offsets count across the daemon's log rotation. follow_log() reads
that stream with http.client and yields complete lines:

  1. connect (the first time: tail=K, from_start, offset=N, or the daemon's
     default; afterwards: offset=N, the byte reached);
  2. yield every complete line as its bytes arrive (a partial line waits);
  3. the answer ended cleanly: if the worker has ended, yield the last partial
     line and stop; if it still runs (the daemon bounds how long one answer
     lasts), reconnect from the offset reached;
  4. the connection dropped or went quiet for read_timeout: reconnect from the
     offset reached (bytes are never yielded twice nor skipped); give up with
     MusterError("unavailable") after `retries` failed connections in a row.
     A daemon that does not answer at all (refused: restarting) is retried
     for `outage`'s grace instead (muster.outage: one line says so), and the
     follow goes on from the same offset once it answers again.

A daemon that cannot stream (a 503/429 answer: no follower slot free; or an
older daemon without X-Log-Offset) is polled every poll_seconds instead: the
log's last lines, passing on the bytes past the offset reached.
"""
import http.client
import socket
import time
import urllib.parse
from typing import Callable, Iterator, Optional

from .errors import MusterError
from .outage import Outage, is_unreachable

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


POLL_TAIL_LINES = 1000  # what one poll asks for when the daemon cannot stream


def _marker_bytes(resp) -> int:
    try:
        return max(0, int(resp.getheader("X-Log-Marker-Bytes") or 0))
    except ValueError:
        return 0


def follow_log(transport, path: str, is_done: Callable[[], bool], tail: Optional[int] = None,
               offset: Optional[int] = None, poll_seconds: float = 0.25, read_timeout: float = 30.0,
               retries: int = 20, from_start: bool = False, outage: Optional[Outage] = None) -> Iterator[str]:
    """Yields the lines (without their newline) of the log at `path` as they are written.

    transport: a muster._http.Transport; is_done(): True once the owner has ended.
    tail=K starts with the last K lines, offset=N at byte N, from_start=True at the
    first byte; none of them: the daemon's default (its last lines). outage: how
    long an unreachable daemon is retried (None: `retries` tries, as any drop).
    """
    if outage is not None:
        ask_done = is_done
        is_done = lambda: outage.call(ask_done)  # noqa: E731 - the same question, through an outage
    buf = b""
    failures = 0
    first = True
    streaming = True
    old_daemon = False
    while True:
        done_before = False if streaming else is_done()
        query = {"follow": "true"}
        if offset is not None:
            query["offset"] = int(offset)
        elif from_start:
            query["from_start"] = "true"
        elif tail is not None:
            query["tail"] = int(tail)
        try:
            if streaming:
                conn, resp = transport.open_stream(path, query, timeout=read_timeout)
            elif old_daemon:
                conn, resp = transport.open_stream(path, None, timeout=read_timeout)  # its whole log
            else:  # its last lines, with offsets
                lines_back = int(tail) if first and tail is not None else POLL_TAIL_LINES
                conn, resp = transport.open_stream(path, {"tail": lines_back}, timeout=read_timeout)
        except MusterError as err:
            if streaming and err.http_status in (429, 503):
                streaming = False  # the daemon does not stream, or has no follower slot free: poll
                continue
            if outage is not None and is_unreachable(err):
                outage.failed(err)  # pauses, or raises once its grace is spent
                continue
            if err.code not in ("unavailable", "deadline_exceeded") or failures >= retries:
                raise
            failures += 1
            time.sleep(min(0.1 * failures, 1.0))
            continue
        if outage is not None:
            outage.answered()
        clean = False
        try:
            header = resp.getheader("X-Log-Offset")
            if streaming and header is None and first:
                streaming = False  # an older daemon: the whole log (or its tail) without offsets
                old_daemon = True
                conn.close()
                continue
            if not streaming:
                body = resp.read()
                if header is None:  # an older daemon: the whole log
                    if first and offset is None:
                        offset = _tail_start(body, int(tail)) if tail is not None else 0
                    start = offset if offset is not None and offset <= len(body) else 0
                    buf += body[start:]
                    offset = len(body)
                else:  # the log's last lines, after a marker, from byte `at`
                    at, marker = int(header), _marker_bytes(resp)
                    data = body[marker:]
                    if offset is None or offset < at:
                        buf += body  # the first poll, or a gap: the marker says what was left out
                    elif offset < at + len(data):
                        buf += data[offset - at:]
                    offset = at + len(data)
                clean = True
            else:
                start = int(header)
                marker_left = _marker_bytes(resp)
                if offset is None or start != offset:
                    buf = b"" if offset is not None and start < offset else buf
                    offset = start
                while True:
                    chunk = resp.read1(65536)
                    if not chunk:
                        clean = True
                        break
                    skip = min(marker_left, len(chunk))  # the marker is not part of the log
                    marker_left -= skip
                    offset += len(chunk) - skip
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
