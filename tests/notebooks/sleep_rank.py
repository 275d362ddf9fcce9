# A rank that runs until it is stopped (the Jupyter interrupt test stops it).
import os
import time

os.write(1, b"rank sleeping\n")
time.sleep(600)
