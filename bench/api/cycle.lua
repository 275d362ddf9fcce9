-- wrk script: a launch+stop cycle. Each wrk thread launches one worker
-- (POST /api/v1/workers), and stops every id a launch returned (POST
-- /api/v1/workers/stop) before launching again, so live workers stay few.
-- The token comes from the environment (MUSTER_TOKEN).
local token = os.getenv("MUSTER_TOKEN")
local ids = {}
local launching = 0
local launch_body = '{"n":1,"cpu":0.01,"memory":0.01,"script":"sleep.py"}'

function request()
  local headers = {["Authorization"] = "Bearer " .. token, ["Content-Type"] = "application/json"}
  if #ids > 0 then
    local id = table.remove(ids)
    return wrk.format("POST", "/api/v1/workers/stop", headers, '{"ids":["' .. id .. '"]}')
  end
  launching = launching + 1
  return wrk.format("POST", "/api/v1/workers", headers, launch_body)
end

function response(status, headers, body)
  if status == 201 then
    for id in string.gmatch(body, '"id":"([^"]+)"') do
      table.insert(ids, id)
    end
  end
end
