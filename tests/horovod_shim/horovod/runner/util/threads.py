"""in_thread: what Horovod's test utilities import from horovod.runner.util.threads."""
import threading


def in_thread(target, args=(), name=None, daemon=True, silent=False):
    """Starts `target(*args)` on a new thread (a daemon by default) and returns the thread.

    silent=True swallows an exception the target raises instead of letting
    the thread print it.
    """
    def run():
        try:
            target(*args)
        except Exception:  # noqa: BLE001 - reported unless silent, as the caller asked
            if not silent:
                raise

    thread = threading.Thread(target=run if silent else target, args=() if silent else args, name=name,
                              daemon=daemon)
    thread.start()
    return thread
