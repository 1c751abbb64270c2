-- The one-check call: the store's decide or peek of one check, in as few Lua operations as the
-- decision needs. Loaded after fast.lua and before store.lua, whose `run` reads it first.
--
-- ARGV[1] is "<d|p> <cost> <kind> <parameters...>" (d: decide, p: peek; the parameters as in
-- the general form), ARGV[2] the caller's now (absent: Redis's TIME). Each distinct ARGV[1]
-- is compiled once into a closure holding its numbers (at most 4,096 kept, then all
-- forgotten and learnt again), so a call looks up one string and runs one closure: no
-- argument is parsed again, no table is made.
--
-- The reply is "+" when the check admits (and, deciding, was written) or "-", then Redis's
-- TIME seconds and microseconds (both empty with the caller's time) and the key's value as
-- read (empty for no key), separated by spaces. The client runs the core's transition on
-- that state at that now for the decision's numbers (limit, remaining, reset, retry), so the
-- script formats none of them: only the admission, which the client checks against its own.
--
-- Covered: fixed-window (windows of whole seconds or whole divisions of one), gcra,
-- leaky-queue, token-bucket and leaky-bucket, while every number is below 2^52 as in
-- fast.lua (whose arithmetic this repeats, specialised). Anything else declines (nil, before
-- anything is written): another kind, a number out of range, a value that is not this
-- kind's state. store.lua then decides the same check by mode decide1, whose reply is the
-- decision's five values.
--
-- What it saves over decide1: three arguments fewer (each a Lua string Redis makes), the
-- spec's look-up and the decision's formatting, and for the fixed window the key's TTL: a
-- state of the current window was written with a TTL reaching the window's end by whichever
-- writer wrote it (every version sets at least the state's fresh time), so a write within
-- that window keeps it (SET ... KEEPTTL), sparing Redis the expiry's removal and insertion.

local ONE_CHECK = {}
do
  local find, sub, match, fmt = string.find, string.sub, string.match, string.format
  local tonumber, floor, type = tonumber, math.floor, type
  local call, pcall_r = redis.call, redis.pcall
  local LIM = 4503599627370496 -- 2^52
  local E9 = 1000000000
  local E6 = 1000000
  -- |h1 - h2| up to this keeps (h1 - h2) * 10^9 + (l1 - l2) below 2^53.
  local HSPAN = 4503600
  -- floor(2^52 / 10^9): l * k < 2^52 for l < 10^9 and k up to this.
  local KMAX = 4503599
  local U64_MAX_DEC = "18446744073709551615"
  -- With the caller's time, keys live an hour longer on Redis's clock (see store.lua).
  local CALLER_SLACK_MS = 3600000

  -- floor(t / d) and the remainder, exact for 0 <= t < 2^53, 0 < d < 2^52.
  local function qr(t, d)
    local q = floor(t / d)
    local r = t - q * d
    if r < 0 then
      q, r = q - 1, r + d
    elseif r >= d then
      q, r = q + 1, r - d
    end
    return q, r
  end
  local function ceil_div(t, d)
    local q, r = qr(t, d)
    if r > 0 then return q + 1 end
    return q
  end

  -- Decimal strings of numbers below 4,096 (counts, milliseconds), each formatted once.
  local DEC = {}
  local function dec(n)
    local d = DEC[n]
    if d == nil then
      d = fmt("%d", n)
      if n < 4096 then DEC[n] = d end
    end
    return d
  end
  -- A decimal of at most 15 digits (below 2^52) as a number, or nil. Remembered (at most
  -- 4,096): counts, parameters and the seconds of times repeat from call to call, and a
  -- look-up of an interned string costs far less than the pattern and the conversion.
  local NUM, nums = {}, 0
  local function num(s)
    local v = NUM[s]
    if v ~= nil then return v end
    if #s > 15 or find(s, "^%d+$") == nil then return nil end
    v = tonumber(s)
    if nums >= 4096 then NUM, nums = {}, 0 end
    NUM[s], nums = v, nums + 1
    return v
  end

  -- TIME's seconds as a number, converted once a second.
  local last_s, last_sec = nil, 0
  -- TIME's microseconds, and as nanoseconds.
  local last_us, last_ns = nil, 0
  -- The caller's now (a decimal u64) as seconds and nanoseconds, or nil.
  local function caller_now(given)
    local n = #given
    if n > 20 or find(given, "^%d+$") == nil then return nil end
    if n == 20 and given > U64_MAX_DEC then return nil end
    if n <= 9 then return 0, tonumber(given) end
    return tonumber(sub(given, 1, n - 9)), tonumber(sub(given, n - 8))
  end
  -- The key's TTL in ms for a state fresh in `fresh` ns, as store.lua writes it.
  local function ttl(fresh, given)
    local ms = ceil_div(fresh, E6) + 1
    if given then ms = ms + CALLER_SLACK_MS end
    return dec(ms)
  end
  -- A time of at most 24 digits from v[from..] as wide h * 10^9 + l (h below 2^52), or nil.
  local function wide_at(v, from)
    local n = #v
    local digits = n - from + 1
    if digits > 24 then return nil end
    if digits <= 9 then return 0, tonumber(sub(v, from)) end
    local h = num(sub(v, from, n - 9))
    if h == nil then return nil end
    return h, tonumber(sub(v, n - 8))
  end

  -- The fixed window (fixed_window.rs): state "fixed-window:<index>,<count>".
  local function fixed_window(write, cost, limit, w)
    if limit == 0 or w == 0 then return nil end
    local k, per
    if w % E9 == 0 then
      k = w / E9
    elseif E9 % w == 0 then
      per = E9 / w
    else
      return nil
    end
    local admits = cost <= limit
    -- The prefix of a state of the window last seen, made once a window; and for windows
    -- of whole seconds, the TIME seconds it was found for.
    local c_index, prefix, plen, c_s, c_sec = nil, nil, 0, nil, 0
    return function(key, given)
      local sec, nl, s, us, index, into
      if given then
        sec, nl = caller_now(given)
        if sec == nil then return nil end
        s, us = "", ""
      else
        local t = TIME.read()
        s, us = t[1], t[2]
        if k and s == c_s then
          sec, index = c_sec, c_index
        else
          sec = tonumber(s)
          if k then c_s, c_sec = s, sec end
        end
      end
      if index == nil then
        if k then
          index = qr(sec, k)
        else
          if nl == nil then nl = tonumber(us) * 1000 end
          local base = sec * per
          if base >= LIM then return nil end
          local q
          q, into = qr(nl, w)
          index = base + q
        end
        if index ~= c_index then
          c_index, prefix = index, fmt("fixed-window:%d,", index)
          plen = #prefix
          -- The window found for TIME's seconds holds only while it is the one remembered.
          if given then c_s = nil end
        end
      end
      local v = pcall_r("GET", key)
      local count, same = 0, false
      if v then
        if type(v) ~= "string" then return nil end
        if sub(v, 1, plen) == prefix then
          local c = sub(v, plen + 1)
          count = NUM[c] or num(c)
          if count == nil then return nil end
          same = true
        else
          -- Another window's state counts nothing now, if it is one.
          local a, b = match(v, "^fixed%-window:(%d+),(%d+)$")
          if a == nil or #a > 15 or #b > 15 or tonumber(a) == index then return nil end
        end
      else
        v = ""
      end
      local after = count + cost
      local ok = admits and after <= limit
      if ok and write then
        if after == 0 then
          -- A count of zero is a fresh state: no key, as store.lua leaves it.
          call("DEL", key)
        elseif same then
          call("SET", key, prefix .. (DEC[after] or dec(after)), "KEEPTTL")
        else
          if into == nil then
            if nl == nil then nl = tonumber(us) * 1000 end
            into = (sec - index * k) * E9 + nl
          end
          call("SET", key, prefix .. dec(after), "PX", ttl(w - into, given))
        end
      end
      if ok then return "+" .. s .. " " .. us .. " " .. v end
      return "-" .. s .. " " .. us .. " " .. v
    end
  end

  -- Now as wide seconds and nanoseconds, and the reply's strings for it.
  local function now_of(given)
    if given then
      local nh, nl = caller_now(given)
      return nh, nl, "", ""
    end
    local t = TIME.read()
    local s, us = t[1], t[2]
    if s ~= last_s then last_s, last_sec = s, tonumber(s) end
    -- The nanoseconds converted once per reading (a batch's entries share one).
    if us ~= last_us then last_us, last_ns = us, tonumber(us) * 1000 end
    return last_sec, last_ns, s, us
  end

  -- Virtual scheduling (schedule.rs), of gcra and leaky-queue: state "<kind>:<tat ticks>".
  local function schedule(kind)
    local P = kind .. ":"
    local plen = #P
    local from = plen + 1
    return function(write, cost, tpn, tpc, cap)
      if tpn == 0 or tpc == 0 or cap == 0 or tpn > KMAX then return nil end
      local allowance = cap * tpc
      if allowance >= LIM then return nil end
      local admits = cost <= cap
      local room, charge = 0, 0
      if admits then
        charge = cost * tpc
        room = allowance - charge
      end
      return function(key, given)
        local sh, sl, s, us = now_of(given)
        if sh == nil then return nil end
        if tpn ~= 1 then
          -- now in ticks: (sh, sl) * tpn, sl * tpn below 2^52.
          local c
          c, sl = qr(sl * tpn, E9)
          sh = sh * tpn
          if sh >= LIM then return nil end
          sh = sh + c
          if sh >= LIM then return nil end
        end
        local v = pcall_r("GET", key)
        local before = 0
        if v then
          if type(v) ~= "string" or sub(v, 1, plen) ~= P or find(v, "^%d+$", from) == nil then
            return nil
          end
          local th, tl = wide_at(v, from)
          if th == nil then return nil end
          local dh = th - sh
          -- A backlog of 2^52 ticks or more declines, as in fast.lua; a tat long past is none.
          if dh > HSPAN then return nil end
          if dh >= -HSPAN then
            local b = dh * E9 + (tl - sl)
            if b >= LIM then return nil end
            if b > 0 then before = b end
          end
        else
          v = ""
        end
        local ok = admits and before <= room
        if ok and write then
          local after = before + charge
          -- The new tat, now's ticks plus the backlog, wide.
          local xh, xl = qr(after, E9)
          local h, l = sh + xh, sl + xl
          if l >= E9 then h, l = h + 1, l - E9 end
          if h >= LIM then return nil end
          if after == 0 then
            call("DEL", key)
          elseif h == 0 then
            call("SET", key, P .. dec(l), "PX", ttl(ceil_div(after, tpn), given))
          else
            call("SET", key, fmt("%s%d%09d", P, h, l), "PX", ttl(ceil_div(after, tpn), given))
          end
        end
        if ok then return "+" .. s .. " " .. us .. " " .. v end
        return "-" .. s .. " " .. us .. " " .. v
      end
    end
  end

  -- The token bucket (token_bucket.rs), and the leaky bucket that is the same bucket: state
  -- "<kind>:<spent ticks>,<last ns>".
  local function bucket(kind)
    local P = kind .. ":"
    local plen = #P
    local from = plen + 1
    return function(write, cost, tpn, tpc, burst)
      if tpn == 0 or tpc == 0 or burst == 0 then return nil end
      local capacity = burst * tpc
      if capacity >= LIM then return nil end
      local admits = cost <= burst
      local charge = 0
      if admits then charge = cost * tpc end
      return function(key, given)
        local nh, nl, s, us = now_of(given)
        if nh == nil then return nil end
        local v = pcall_r("GET", key)
        local sp, lh, ll, moved = 0, 0, 0, true
        if v then
          if type(v) ~= "string" or sub(v, 1, plen) ~= P then return nil end
          local comma = find(v, ",", from, true)
          if comma == nil or comma - from > 15 or find(v, "^%d+,%d+$", from) == nil then
            return nil
          end
          sp = tonumber(sub(v, from, comma - 1))
          local last = sub(v, comma + 1)
          local n = #last
          if n > 20 or n == 20 and last > U64_MAX_DEC then return nil end
          lh, ll = wide_at(last, 1)
          if lh == nil then return nil end
          -- Refilled by (now - last) * ticks_per_ns, saturating at zero.
          local dh = nh - lh
          if dh > HSPAN then
            sp = 0
          elseif dh < -HSPAN then
            moved = false
          else
            local e = dh * E9 + (nl - ll)
            if e >= LIM then
              sp = 0
            elseif e > 0 then
              -- At 2^53 or more the product is still at least sp (below 2^52): rounding is
              -- monotonic, so the comparison stays exact.
              local refill = e * tpn
              if refill >= sp then sp = 0 else sp = sp - refill end
            else
              moved = false
            end
          end
        else
          v = ""
        end
        local after = sp + charge
        local ok = admits and after <= capacity
        if ok and write then
          local mh, ml = lh, ll
          if moved then mh, ml = nh, nl end
          if after == 0 then
            call("DEL", key)
          elseif mh == 0 then
            call("SET", key, fmt("%s%d,%d", P, after, ml), "PX", ttl(ceil_div(after, tpn), given))
          else
            call("SET", key, fmt("%s%d,%d%09d", P, after, mh, ml), "PX", ttl(ceil_div(after, tpn), given))
          end
        end
        if ok then return "+" .. s .. " " .. us .. " " .. v end
        return "-" .. s .. " " .. us .. " " .. v
      end
    end
  end

  -- By algorithm: the maker of a check's closure, and its number of parameters.
  local KINDS = {
    ["fixed-window"] = {fixed_window, 2},
    ["gcra"] = {schedule("gcra"), 3},
    ["leaky-queue"] = {schedule("leaky-queue"), 3},
    ["token-bucket"] = {bucket("token-bucket"), 3},
    ["leaky-bucket"] = {bucket("leaky-bucket"), 3},
  }
  local MODE1 = {d = "decide1", p = "peek1"}

  -- A one-check call's first argument as {closure or false, decide1 or peek1, cost, the check's
  -- spec}, or false when it is not a one-check call (the general form, or decide1 and peek1).
  local function compile(spec)
    local m, cost_s, rest = match(spec, "^([dp]) (%d+) (.*)$")
    if m == nil then return false end
    local closure = false
    local words = {}
    for word in string.gmatch(rest, "[^ ]+") do words[#words + 1] = word end
    local kind = KINDS[words[1]]
    local cost = num(cost_s)
    if kind and cost and #words == kind[2] + 1 then
      local p, all = {}, true
      for i = 2, #words do
        p[i - 1] = num(words[i])
        if p[i - 1] == nil then all = false end
      end
      if all then closure = kind[1](m == "d", cost, p[1], p[2], p[3]) or false end
    end
    return {closure, MODE1[m], cost_s, rest}
  end
  ONE_CHECK.specs, ONE_CHECK.kept = {}, 0
  -- The compiled form of ARGV[1] (see compile), remembered.
  function ONE_CHECK.of(spec)
    local got = compile(spec)
    if ONE_CHECK.kept >= 4096 then ONE_CHECK.specs, ONE_CHECK.kept = {}, 0 end
    ONE_CHECK.specs[spec], ONE_CHECK.kept = got, ONE_CHECK.kept + 1
    return got
  end
end
