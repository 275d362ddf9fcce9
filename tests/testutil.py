"""Small helpers the Python tests share (standard library only).

wait_for(predicate, timeout, interval, what): polls predicate() until it
returns something truthy and returns that; after `timeout` seconds an
AssertionError names `what` and the last value seen.

free_ports(n) / free_port(): loopback TCP ports the kernel has just handed
out (the n sockets are bound together, so the ports are distinct, then
closed; another process can still take one before the test binds it, which
these tests accept).
"""
import socket
import time


def wait_for(predicate, timeout=20, interval=0.1, what="condition"):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError("timed out after %s s waiting for %s (last: %r)" % (timeout, what, last))


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def free_port():
    return free_ports(1)[0]
