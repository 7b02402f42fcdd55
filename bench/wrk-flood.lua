-- Every request a URL never asked before: $BENCH_FLOOD_PATH followed by a counter and
-- $BENCH_FLOOD_PAD bytes of junk, as a cache-busting attacker sends.
local prefix, pad, n = "", "", 0

init = function(args)
  prefix = os.getenv("BENCH_FLOOD_PATH")
  pad = string.rep("y", tonumber(os.getenv("BENCH_FLOOD_PAD") or "7000"))
  n = math.random(1000000000)
end

request = function()
  n = n + 1
  return wrk.format("GET", prefix .. n .. pad)
end
