-- Redis's TIME as every transition reads it: at once, or within a batch (store.lua, mode
-- `batch`) the batch's one reading, taken at its first use and held until the batch ends, so
-- that each entry decides as a call of its own at that instant would.
local TIME = {batch = false, held = nil}
function TIME.read()
  local t = TIME.held
  if t then return t end
  t = redis.call("TIME")
  if TIME.batch then TIME.held = t end
  return t
end
