-- wrk script: GET the path given as wrk's URL with the bearer token from
-- MUSTER_TOKEN.
local token = os.getenv("MUSTER_TOKEN")
wrk.headers["Authorization"] = "Bearer " .. token
