# The launch benchmark's worker: does nothing until it is stopped.
import time

time.sleep(600)
