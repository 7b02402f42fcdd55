-- Rotates through the paths in $BENCH_PATHS (one per line: path, then optionally a tab and an
-- entity tag to send as If-None-Match), in the order given: the order carries the skew. With
-- $BENCH_ORIGIN set, every request carries that Origin header.
local paths, tags, n, i = {}, {}, 0, 0
local origin = os.getenv("BENCH_ORIGIN")

init = function(args)
  local file = assert(io.open(os.getenv("BENCH_PATHS")))
  for line in file:lines() do
    local path, tag = line:match("^([^\t]+)\t?(.*)$")
    n = n + 1
    paths[n], tags[n] = path, tag
  end
  file:close()
  i = math.random(n) - 1
end

request = function()
  i = i % n + 1
  local headers = {}
  if tags[i] ~= "" then
    headers["If-None-Match"] = tags[i]
  end
  if origin ~= nil and origin ~= "" then
    headers["Origin"] = origin
  end
  return wrk.format("GET", paths[i], headers)
end
