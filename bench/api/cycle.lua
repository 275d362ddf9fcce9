-- wrk script: a launch+stop cycle. A connection ready to send stops a worker
-- an earlier launch returned (POST /api/v1/workers/stop) if there is one,
-- else launches one (POST /api/v1/workers), so live workers stay at most
-- one per connection. The token comes from the environment (MUSTER_TOKEN).
local token = os.getenv("MUSTER_TOKEN")
local ids = {}
local launch_body = '{"n":1,"cpu":0.01,"memory":0.01,"script":"sleep.py"}'

function request()
  local headers = {["Authorization"] = "Bearer " .. token, ["Content-Type"] = "application/json"}
  if #ids > 0 then
    local id = table.remove(ids)
    return wrk.format("POST", "/api/v1/workers/stop", headers, '{"ids":["' .. id .. '"]}')
  end
  return wrk.format("POST", "/api/v1/workers", headers, launch_body)
end

function response(status, headers, body)
  if status == 201 then
    for id in string.gmatch(body, '"id":"([^"]+)"') do
      table.insert(ids, id)
    end
  end
end
