"""The one exception the SDK raises: MusterError, carrying the server's error.

Every failed call raises MusterError (or its subclass ClusterFailed). The
daemon answers errors as {"error": {"code", "message", "field"}}; those three
are kept on the exception, with the HTTP status, so a notebook can branch on
`err.code` ("invalid_argument", "not_found", ...) and show `err.field`.
Errors that never reached the daemon use the codes "unconfigured" (no URL or
token found), "unavailable" (connection refused, reset, DNS) and
"deadline_exceeded" (a client-side wait ran out).
"""


from typing import Optional


class MusterWarning(UserWarning):
    """A note from musterd or the SDK that did not stop the call (warnings.warn category).

    Examples: the daemon ran `script` and ignored `code` given with it; a CML
    cloud argument (resource_profile_id, ...) that has no meaning here.
    Silence them with warnings.simplefilter("ignore", muster.MusterWarning).
    """


class MusterError(Exception):
    """An error from musterd or from reaching it.

    Example::

        try:
            muster.launch_workers(n=0, cpu=1, memory=1, script="train.py")
        except muster.MusterError as err:
            print(err.code, err.field, err.message)   # invalid_argument n ...
    """

    def __init__(self, message: str, code: str = "unknown", field: Optional[str] = None,
                 http_status: Optional[int] = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.field = field or None
        self.http_status = http_status
        # code "unavailable" without an HTTP status: what the connection
        # said ("[Errno 111] Connection refused").
        self.detail = ""
        # Set by run_cluster/horovodrun/await_cluster once a cluster exists, so
        # a caller can still stop or inspect it after the error.
        self.cluster_id: Optional[str] = None

    def __str__(self):
        where = " (field %s)" % self.field if self.field else ""
        status = " [HTTP %d]" % self.http_status if self.http_status else ""
        return "%s: %s%s%s" % (self.code, self.message, where, status)

    def __repr__(self):
        return "MusterError(code=%r, message=%r, field=%r, http_status=%r)" % (
            self.code, self.message, self.field, self.http_status)


class MusterInterrupted(KeyboardInterrupt):
    """Ctrl-C (or a notebook's Interrupt) during a muster call, once the call has dealt with its work.

    A KeyboardInterrupt, so `except KeyboardInterrupt` still catches it; its
    text is the one line that says what happened ("muster: interrupted;
    stopped cluster c-1a2b"), and that line is all that is shown: a notebook
    renders it instead of a traceback (IPython's _render_traceback_), and a
    script that does not catch it prints it instead of a traceback (a
    sys.excepthook that muster.progress chains in front of the one it finds,
    for this class only). `cluster_id` is set when a cluster was involved.

    Example::

        try:
            muster.horovodrun(2, "train.py", wait_for_completion=True)
        except KeyboardInterrupt as err:
            print(err, getattr(err, "cluster_id", None))
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.cluster_id: Optional[str] = None

    def _render_traceback_(self):
        return [str(self)]


class ClusterFailed(MusterError):
    """A cluster ended in `failed` while a call waited on it (await_cluster, run_cluster, horovodrun or
    torchrun with wait_for_completion=True; those three raise it for a cluster stopped meanwhile too).

    `cluster` is the cluster object as the daemon last reported it; `task`
    names the failing task as "type:index" ("worker:1") when it is known.

    Example::

        try:
            muster.run_cluster(n_workers=2, n_ps=1, cpu=1, memory=1,
                               worker_script="train.py")
        except muster.ClusterFailed as err:
            print(err.task, err.message)
    """

    def __init__(self, message: str, cluster: dict, task: Optional[str] = None) -> None:
        super().__init__(message, code="cluster_failed")
        self.cluster = cluster
        self.task = task
        self.cluster_id = cluster.get("id") if isinstance(cluster, dict) else None
