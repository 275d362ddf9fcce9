#!/bin/sh
# The launch benchmark's scaling worker: a process that does nothing until
# it is stopped, as light as one can be (1,024 of them run at once).
exec sleep 600
