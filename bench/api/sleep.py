# The benchmark's worker: stays running until stopped.
import time

time.sleep(3600)
