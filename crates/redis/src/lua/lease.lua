-- Shares of one budget leased to the members of a fleet: the same steps as
-- `ratewarden_core::lease::Leases::lease`, on a hash. Loaded before store.lua, whose `run`
-- calls LEASES.lease for mode "share" (the name the mode had when the store op was `share`;
-- kept on the wire, and in the budgets' `share:` keys, so a fleet upgraded one process at a
-- time keeps its leases).
--
-- KEYS[1]  the budget's hash: one field per member, "want weight held expires_ms".
-- ARGV     "share", now in nanoseconds (or "" for Redis's TIME), the member, its want, its
--          weight, the capacity, the lease's time to live in milliseconds. The caller bounds
--          the numbers (wants and capacity below 2^40, weights below 2^12), so every product
--          below stays under 2^53 and the doubles count exactly.
--
-- The reply is the units granted: the member's max-min target among the members whose
-- leases have not lapsed when that is no more than it holds; otherwise what it holds plus
-- as much of its target as the others leave free. A want of 0 gives back what it holds.

local LEASES = {}

do
  local function num(s)
    local n = tonumber(s)
    if n == nil or n < 0 or n ~= math.floor(n) then
      error("share: `" .. tostring(s) .. "` is not a whole number")
    end
    return n
  end

  -- max_min_weighted of core's lease.rs: `wants` is a list of {want, weight}, sorted by
  -- want per unit of weight, then by weight (equal pairs are granted alike, so the
  -- grants do not depend on the list's order).
  local function max_min(capacity, wants)
    local grants, open = {}, {}
    for i = 1, #wants do
      grants[i] = 0
      if wants[i][2] > 0 then open[#open + 1] = i end
    end
    table.sort(open, function(a, b)
      local x, y = wants[a][1] * wants[b][2], wants[b][1] * wants[a][2]
      if x ~= y then return x < y end
      return wants[a][2] < wants[b][2]
    end)
    local left, from = capacity, 1
    while from <= #open do
      local weights = 0
      for k = from, #open do weights = weights + wants[open[k]][2] end
      local want, weight = wants[open[from]][1], wants[open[from]][2]
      if want <= math.floor(left * weight / weights) then
        grants[open[from]] = want
        left = left - want
        from = from + 1
      else
        for k = from, #open do
          local i = open[k]
          grants[i] = math.min(math.floor(left * wants[i][2] / weights), wants[i][1])
        end
        break
      end
    end
    return grants
  end

  function LEASES.lease(KEYS, ARGV)
    if #KEYS ~= 1 or #ARGV ~= 7 then
      error("mode share takes one key and six arguments "
        .. "(now, member, want, weight, capacity, ttl_ms)")
    end
    local key, member = KEYS[1], ARGV[3]
    local want, weight, capacity, ttl = num(ARGV[4]), num(ARGV[5]), num(ARGV[6]), num(ARGV[7])
    local now
    if ARGV[2] == "" then
      local t = TIME.read()
      now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    else
      -- Nanoseconds as a decimal: their milliseconds, without passing through a double.
      local s = ARGV[2]
      now = #s > 6 and num(string.sub(s, 1, #s - 6)) or 0
    end
    local flat = redis.call("HGETALL", key)
    local names, leases = {}, {}
    local held = 0
    for i = 1, #flat, 2 do
      local w, k, h, e = string.match(flat[i + 1], "^(%d+) (%d+) (%d+) (%d+)$")
      e = tonumber(e)
      if e == nil or e <= now then
        -- Lapsed (or unreadable): that member's grant no longer holds.
        redis.call("HDEL", key, flat[i])
      elseif flat[i] == member then
        held = tonumber(h)
      else
        names[#names + 1] = flat[i]
        leases[flat[i]] = {tonumber(w), tonumber(k), tonumber(h)}
      end
    end
    if want == 0 then
      redis.call("HDEL", key, member)
      return 0
    end
    names[#names + 1] = member
    leases[member] = {want, weight, held}
    local wants, mine, others = {}, 0, 0
    for i, name in ipairs(names) do
      local l = leases[name]
      wants[i] = {l[1], l[2]}
      if name == member then mine = i else others = others + l[3] end
    end
    local target = max_min(capacity, wants)[mine]
    local granted = target
    if target > held then
      local free = math.max(capacity - others - held, 0)
      granted = held + math.min(target - held, free)
    end
    redis.call("HSET", key, member,
      string.format("%d %d %d %d", want, weight, granted, now + ttl))
    -- The hash lives as long as its longest lease could: each ask pushes it past its own.
    if redis.call("PTTL", key) < ttl then redis.call("PEXPIRE", key, ttl) end
    return granted
  end
end
