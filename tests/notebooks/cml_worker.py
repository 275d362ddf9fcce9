# A worker script as CML users write them: it reads cdsw's variables.
import os

print("cml worker", os.environ["CDSW_ENGINE_ID"], "on", os.environ["CDSW_IP_ADDRESS"],
      "master", os.environ["CDSW_MASTER_IP"], flush=True)
