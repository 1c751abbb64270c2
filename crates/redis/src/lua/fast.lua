-- The fast path: decide or peek, of one check or of layered ones, in plain Lua numbers
-- (doubles), with exactly the results of the limb path (bigint.lua) whenever it answers.
-- Loaded after bigint.lua and before store.lua, whose `run` tries it first and takes the limb
-- path when it declines (returns nil): another mode, over 16 checks, an algorithm without a
-- fast path here (the sliding log and concurrency, whose states are lists), a number out of
-- range, a window that is neither whole seconds nor a whole division of one, a state of
-- another kind or unreadable (whose error the limb path reports). Covered: gcra,
-- leaky-queue, token-bucket, leaky-bucket, fixed-window, sliding-window and quota.
--
-- Replies carry numbers as integers (the store reads them as it reads the limb path's decimal
-- strings), and the TTL a key is written with is the limb path's.
--
-- Why it is exact: every number here is an integer below 2^52 (LIM), or the sum or difference
-- of two such, so below 2^53 where doubles hold every integer, and floor(a / b) of two of them
-- is exact after qr's correction. Each quantity is checked against LIM where it is made (a
-- product computed in doubles is at least 2^52 when the true product is, since rounding is
-- monotonic and 2^52 is a double, so the check is sound). Times in nanoseconds since the epoch
-- (near 2^61) and ticks (times scaled by ticks_per_ns) do not fit: they are kept "wide", as two
-- numbers h * 10^9 + l with 0 <= l < 10^9 and h < 2^52 (Redis TIME gives them so, in seconds
-- and microseconds), and only their differences, when small, become plain numbers.
--
-- State strings are the limb path's, byte for byte (decimal numbers, the same layout), so old
-- and new servers sharing one Redis read each other's keys during a rolling deploy.

local FAST = {}
do
  local floor, find, sub, byte = math.floor, string.find, string.sub, string.byte
  local fmt, tonumber, tostring, gmatch = string.format, tonumber, tostring, string.gmatch
  local LIM = 4503599627370496 -- 2^52
  local E9 = 1000000000
  -- |h1 - h2| up to this keeps (h1 - h2) * 10^9 + (l1 - l2) below 2^53.
  local HSPAN = 4503600
  -- floor(2^52 / 10^9): l * k < 2^52 for l < 10^9 and k up to this.
  local KMAX = 4503599
  local U64_MAX_DEC = "18446744073709551615"
  local PAD = {"00000", "0000", "000", "00", "0", ""}

  -- floor(t / d) and t - floor(t / d) * d for 0 <= t < 2^53, 0 < d < 2^52.
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

  -- A decimal below 2^52, or nil. (A 16-digit one may round as it is read, but never below
  -- 2^52 when it is not: rounding is monotonic.)
  local function read(s)
    if type(s) ~= "string" or #s > 16 or find(s, "^%d+$") == nil then return nil end
    local v = tonumber(s)
    if v >= LIM then return nil end
    return v
  end
  -- `read` of an argument, remembered (false: not one): a server sees the same few costs and
  -- parameters over and over, and a table look-up of an interned string is cheaper than the
  -- pattern match. At most 4,096 are kept.
  local NUMS, kept = {}, 0
  local function num(s)
    local v = NUMS[s]
    if v == nil then
      v = read(s) or false
      if kept < 4096 and type(s) == "string" then
        NUMS[s], kept = v, kept + 1
      end
    end
    return v or nil
  end
  -- A decimal u64 (the limb path's bound for times) as wide h, l, or nil.
  local function wide(s)
    local n = #s
    if n > 20 or find(s, "^%d+$") == nil then return nil end
    if n == 20 and s > U64_MAX_DEC then return nil end
    if n <= 9 then return 0, tonumber(s) end
    return tonumber(sub(s, 1, n - 9)), tonumber(sub(s, n - 8))
  end
  -- `wide` of a quota's period bound, remembered as `num` remembers: the same six strings in
  -- the arguments of every call of a rule for a whole period, and two of them in its state,
  -- each otherwise matched against a pattern, cut in two and read twice. At most 4,096 are kept, then forgotten at once and
  -- learnt again, since the bounds move on with the periods.
  local WIDES, wides = {}, 0
  local function wide_arg(s)
    local v = WIDES[s]
    if v == nil then
      local h, l = wide(s)
      v = h ~= nil and {h, l} or false
      if wides >= 4096 then WIDES, wides = {}, 0 end
      WIDES[s], wides = v, wides + 1
    end
    if v then return v[1], v[2] end
    return nil
  end
  -- The decimal digits of a wide value, as bigint's to_dec writes them.
  -- %d, not %.0f: Lua 5.1 formats it as a C long (64 bits here, exact below 2^53), where
  -- glibc's %f runs multi-precision arithmetic (a profile of Redis showed it among the top
  -- costs of a decision).
  local function dec_wide(h, l)
    if h == 0 then return fmt("%d", l) end
    return fmt("%d%09d", h, l)
  end
  local function dec(x) return fmt("%d", x) end
  -- (h1, l1) - (h2, l2) as a plain number when it is below 2^52 in magnitude, else nil and
  -- the sign of the difference (1 or -1).
  local function diff(h1, l1, h2, l2)
    local dh = h1 - h2
    if dh > HSPAN then return nil, 1 end
    if dh < -HSPAN then return nil, -1 end
    local v = dh * E9 + (l1 - l2)
    if v >= LIM then return nil, 1 end
    if v <= -LIM then return nil, -1 end
    return v
  end
  -- (h, l) + x for 0 <= x < 2^52, or nil past 2^52 * 10^9.
  local function add_wide(h, l, x)
    local xh, xl = qr(x, E9)
    l = l + xl
    if l >= E9 then l, xh = l - E9, xh + 1 end
    h = h + xh
    if h >= LIM then return nil end
    return h, l
  end
  -- (h, l) * k for 0 < k <= KMAX (so l * k < 2^52), or nil past 2^52 * 10^9.
  local function mul_wide(h, l, k)
    if k == 1 then return h, l end
    local c, r = qr(l * k, E9)
    h = h * k
    if h >= LIM then return nil end
    h = h + c
    if h >= LIM then return nil end
    return h, r
  end

  -- Virtual scheduling (schedule.rs), shared by gcra and leaky-queue: the state is the
  -- theoretical arrival time in ticks.
  local function schedule(queue)
    return function(a, o, np, cost, nh, nl, body)
      local tpn, tpc, cap = num(a[o]), num(a[o + 1]), num(a[o + 2])
      if not (tpn and tpc and cap) or tpn == 0 or tpc == 0 or cap == 0 or tpn > KMAX then return nil end
      local allowance = cap * tpc
      if allowance >= LIM then return nil end
      local th, tl = 0, 0
      if body then
        if #body > 24 or find(body, "^%d+$") == nil then return nil end
        local n = #body
        if n <= 9 then
          tl = tonumber(body)
        else
          th, tl = tonumber(sub(body, 1, n - 9)), tonumber(sub(body, n - 8))
        end
      end
      local sh, sl = mul_wide(nh, nl, tpn)
      if sh == nil then return nil end
      local before, sign = diff(th, tl, sh, sl)
      if before == nil then
        if sign > 0 then return nil end -- a backlog of 2^52 ticks or more
        before = 0
      elseif before < 0 then
        before = 0
      end
      local outcome, value, backlog, news, fresh = nil, 0, before, nil, 0
      if cost > cap then
        outcome = "cost_too_high"
      else
        local room = allowance - cost * tpc
        if before <= room then
          backlog = before + cost * tpc
          local h, l = add_wide(sh, sl, backlog)
          if h == nil then return nil end
          news = dec_wide(h, l)
          fresh = nil -- the reset below: ns_ceil of the backlog
          if queue then
            outcome, value = "delayed", ceil_div(before, tpn)
          else
            outcome = "allowed"
          end
        else
          outcome, value = "limited", ceil_div(before - room, tpn)
        end
      end
      local remaining = floor((allowance - backlog) / tpc)
      if backlog > allowance then remaining = 0 end
      local reset = ceil_div(backlog, tpn)
      return outcome, value, cap, remaining, reset, news, fresh or reset
    end
  end

  -- The token bucket (token_bucket.rs), and the leaky bucket that is the same bucket: the
  -- state is the ticks spent and the time they were counted at.
  local function bucket(a, o, np, cost, nh, nl, body)
    local tpn, tpc, burst = num(a[o]), num(a[o + 1]), num(a[o + 2])
    if not (tpn and tpc and burst) or tpn == 0 or tpc == 0 or burst == 0 then return nil end
    local capacity = burst * tpc
    if capacity >= LIM then return nil end
    local spent, lh, ll = 0, 0, 0
    if body then
      local comma = find(body, ",", 1, true)
      if comma == nil then return nil end
      spent = read(sub(body, 1, comma - 1))
      if spent == nil or spent >= LIM then return nil end
      lh, ll = wide(sub(body, comma + 1))
      if lh == nil then return nil end
    end
    -- The ticks spent at now: refilled by (now - last) * ticks_per_ns, saturating at zero.
    local sp = spent
    local elapsed, sign = diff(nh, nl, lh, ll)
    if elapsed == nil then
      if sign > 0 then sp = 0 end -- 2^52 ns or more of refill, at least one tick a ns
    elseif elapsed > 0 then
      local refill = elapsed * tpn
      if refill >= sp then sp = 0 else sp = sp - refill end
    end
    local outcome, value, news, fresh = nil, 0, nil, 0
    local held = sp
    if cost > burst then
      outcome = "cost_too_high"
    else
      local after = sp + cost * tpc
      if after <= capacity then
        outcome, held = "allowed", after
        local mh, ml = lh, ll
        if elapsed == nil and sign > 0 or elapsed and elapsed > 0 then mh, ml = nh, nl end
        news = dec(after) .. "," .. dec_wide(mh, ml)
        fresh = ceil_div(after, tpn)
      else
        outcome, value = "limited", ceil_div(after - capacity, tpn)
      end
    end
    local remaining = 0
    if held < capacity then remaining = floor((capacity - held) / tpc) end
    return outcome, value, burst, remaining, ceil_div(held, tpn), news, fresh
  end

  -- The window holding now: its index and how far into it now is, for windows of whole
  -- seconds or whole divisions of a second; nil for other windows.
  local function window_of(nh, nl, w)
    if w % E9 == 0 then
      local index, into = qr(nh, w / E9)
      return index, into * E9 + nl
    end
    if E9 % w == 0 then
      local per = E9 / w
      local base = nh * per
      if base >= LIM then return nil end
      local q, into = qr(nl, w)
      return base + q, into
    end
    return nil
  end

  -- The fixed window (fixed_window.rs): the state is the window's index and its count.
  local function fixed_window(a, o, np, cost, nh, nl, body)
    local limit, w = num(a[o]), num(a[o + 1])
    if not (limit and w) or limit == 0 or w == 0 or w >= LIM then return nil end
    local index, into = window_of(nh, nl, w)
    if index == nil then return nil end
    local count = 0
    if body then
      local comma = find(body, ",", 1, true)
      if comma == nil then return nil end
      local sw, sc = read(sub(body, 1, comma - 1)), read(sub(body, comma + 1))
      if sw == nil or sc == nil then return nil end
      if sw == index then
        if sc >= LIM then return nil end
        count = sc
      end
    end
    local ends_in = w - into
    local outcome, value, news, fresh = nil, 0, nil, 0
    if cost > limit then
      outcome = "cost_too_high"
    elseif count + cost <= limit then
      count = count + cost
      outcome = "allowed"
      -- A count of zero is a fresh state: the key is deleted (fresh_in 0), as the limb path does.
      news = dec(index) .. "," .. dec(count)
      if count > 0 then fresh = ends_in end
    else
      outcome, value = "limited", ends_in
    end
    local reset = ends_in
    if count == 0 then reset = 0 end
    local remaining = 0
    if count < limit then remaining = limit - count end
    return outcome, value, limit, remaining, reset, news, fresh
  end

  -- Where window i starts, i * w wide, for the windows window_of knows; nil past 2^52 s.
  local function window_start(i, w)
    if w % E9 == 0 then
      local h = i * (w / E9)
      if h >= LIM then return nil end
      return h, 0
    end
    local q, r = qr(i, E9 / w)
    return q, r * w
  end

  -- Nanoseconds from `e0` until prev * (w - e) <= room * w, or nil past the window (room * w
  -- is below 2^52: room is at most the limit).
  local function wait_within(w, prev, room, e0)
    if prev == 0 then return 0 end
    local slack = floor(room * w / prev)
    if slack > w then slack = w end
    local e = w - slack
    if e < w then
      if e > e0 then return e - e0 end
      return 0
    end
    return nil
  end

  -- The sliding window counter (sliding_window.rs): the state is the current window's index
  -- and the counts of the window before it and of it.
  local function sliding_window(a, o, np, cost, nh, nl, body)
    local limit, w = num(a[o]), num(a[o + 1])
    if not (limit and w) or limit == 0 or w == 0 then return nil end
    local lw = limit * w
    if lw >= LIM then return nil end
    local index, into = window_of(nh, nl, w)
    if index == nil then return nil end
    -- Rolled to now (the clock going back keeps the later window).
    local window, previous, current = index, 0, 0
    if body then
      local c1 = find(body, ",", 1, true)
      local c2 = c1 and find(body, ",", c1 + 1, true)
      if c2 == nil then return nil end
      local sw, sp, sc = read(sub(body, 1, c1 - 1)), read(sub(body, c1 + 1, c2 - 1)), read(sub(body, c2 + 1))
      if not (sw and sp and sc) then return nil end
      if sw >= index then
        window, previous, current = sw, sp, sc
      elseif sw + 1 == index then
        previous = sc
      end
    end
    -- Into the window (zero when the window is later than now's).
    local elapsed = 0
    if window == index then elapsed = into end
    local left = w - elapsed
    local outcome, value = nil, 0
    local weighted = previous * left
    if weighted >= LIM or current * w >= LIM then return nil end
    if cost > limit then
      outcome = "cost_too_high"
    else
      -- At 2^52 or more, cur_cost * w is above limit * w, so cur_cost is above the limit.
      local cur_cost = current + cost
      local whole = cur_cost * w
      if whole < LIM and weighted + whole <= lw then
        outcome = "allowed"
      else
        local wait = nil
        if cur_cost <= limit then wait = wait_within(w, previous, limit - cur_cost, elapsed) end
        if wait == nil then
          local nxt = wait_within(w, current, limit - cost, 0)
          if nxt == nil then nxt = w end
          wait = left + nxt
        end
        outcome, value = "limited", wait
      end
    end
    local news, fresh = nil, 0
    if outcome == "allowed" then
      current = current + cost
      news = dec(window) .. "," .. dec(previous) .. "," .. dec(current)
      -- Fresh from the start of the second window after the last one counted in.
      local last = nil
      if current > 0 then
        last = window
      elseif previous > 0 then
        last = window - 1
      end
      if last then
        local h, l = window_start(last + 2, w)
        if h == nil then return nil end
        fresh = diff(h, l, nh, nl)
        if fresh == nil then return nil end
        if fresh < 0 then fresh = 0 end
      end
    end
    local used = weighted + current * w
    local remaining = 0
    if used < lw then remaining = floor((lw - used) / w) end
    local reset = 0
    if current > 0 then
      reset = 2 * w - elapsed
    elseif previous > 0 then
      reset = left
    end
    return outcome, value, limit, remaining, reset, news, fresh
  end

  -- (h1, l1) <= (h2, l2) and (h1, l1) < (h2, l2), of wide values.
  local function le(h1, l1, h2, l2) return h1 < h2 or (h1 == h2 and l1 <= l2) end
  local function lt(h1, l1, h2, l2) return h1 < h2 or (h1 == h2 and l1 < l2) end

  -- Calendar quotas (quota.rs): the state is the period [start, end) and the units used in
  -- it; the caller sends the limit and the periods around its clock.
  local function quota(a, o, np, cost, nh, nl, body)
    local limit = num(a[o])
    if limit == nil or limit == 0 then return nil end
    local sh, sl, eh, el, used
    if body then
      local c1 = find(body, ",", 1, true)
      local c2 = c1 and find(body, ",", c1 + 1, true)
      if c2 == nil then return nil end
      sh, sl = wide_arg(sub(body, 1, c1 - 1))
      eh, el = wide_arg(sub(body, c1 + 1, c2 - 1))
      used = read(sub(body, c2 + 1))
      if sh == nil or eh == nil or used == nil then return nil end
      -- The state's period is kept while it holds now.
      if not (le(sh, sl, nh, nl) and lt(nh, nl, eh, el)) then sh = nil end
    end
    -- Every period must be readable and ordered (the limb path refuses the call otherwise);
    -- the first holding now starts a new period.
    local found = false
    for i = o + 1, o + np - 1, 2 do
      local ph, pl = wide_arg(a[i])
      local qh, ql = wide_arg(a[i + 1])
      if ph == nil or qh == nil or lt(qh, ql, ph, pl) then return nil end
      if sh == nil and not found then
        local inside = le(ph, pl, nh, nl) and lt(nh, nl, qh, ql)
        -- At now = u64::MAX the core's period is the empty (now, now).
        local at_the_end = ph == nh and pl == nl and qh == nh and ql == nl
        if inside or at_the_end then
          found, sh, sl, eh, el, used = true, ph, pl, qh, ql, 0
        end
      end
    end
    if sh == nil then return nil end -- now outside every period: the limb path's error
    local ends_in = diff(eh, el, nh, nl)
    if ends_in == nil then return nil end -- 2^52 ns or more (a yearly quota)
    local outcome, value, news, fresh = nil, 0, nil, 0
    if cost > limit then
      outcome = "cost_too_high"
    elseif used + cost <= limit then
      used = used + cost
      outcome = "allowed"
      news = dec_wide(sh, sl) .. "," .. dec_wide(eh, el) .. "," .. dec(used)
      if used > 0 then fresh = ends_in end
    else
      outcome, value = "limited", ends_in
    end
    local reset = ends_in
    if used == 0 then reset = 0 end
    local remaining = 0
    if used < limit then remaining = limit - used end
    return outcome, value, limit, remaining, reset, news, fresh
  end

  -- By algorithm: the transition (of FCALL's arguments `a`, whose `np` parameters start at
  -- a[o]), the numbers of parameters it takes (as sent, and as numbers), and its state's
  -- prefix.
  local ALGOS = {
    ["gcra"] = {schedule(false), {["3"] = 3}},
    ["leaky-queue"] = {schedule(true), {["3"] = 3}},
    ["token-bucket"] = {bucket, {["3"] = 3}},
    ["leaky-bucket"] = {bucket, {["3"] = 3}},
    ["fixed-window"] = {fixed_window, {["2"] = 2}},
    ["sliding-window"] = {sliding_window, {["2"] = 2}},
    ["quota"] = {quota, {["3"] = 3, ["5"] = 5, ["7"] = 7}},
  }
  for kind, f in pairs(ALGOS) do f[4] = kind .. ":" end

  -- With the caller's time, keys live an hour longer on Redis's clock (see store.lua).
  local CALLER_SLACK_MS = 3600000

  -- now as wide h, l, whether the caller gave it, and (when `digits`) now as the reply's
  -- decimal digits; nil when the caller's is not a decimal u64.
  local function clock(given, digits)
    if given ~= "" then
      local nh, nl = wide(given)
      if nh == nil then return nil end
      -- Leading zeros: the limb path replies without them.
      if digits and byte(given, 1) == 48 and #given > 1 then given = dec_wide(nh, nl) end
      return nh, nl, true, given
    end
    local t = TIME.read()
    local s, us = t[1], t[2]
    if not digits then return tonumber(s), tonumber(us) * 1000, false end
    -- Seconds, then the microseconds in 6 digits, then 000 (Redis TIME: 0 <= us < 10^6).
    return tonumber(s), tonumber(us) * 1000, false, s .. PAD[#us] .. us .. "000"
  end

  -- The state body of `key` for algorithm `f`: nil for no key, false for a value the fast path
  -- leaves to the limb path (another kind's state, or not a string).
  local function body_of(key, f)
    local v = redis.pcall("GET", key)
    if not v then return nil end
    if type(v) ~= "string" then return false end
    -- A plain find at the start: no substring made to compare.
    local prefix = f[4]
    if find(v, prefix, 1, true) ~= 1 then return false end
    return sub(v, #prefix + 1)
  end

  -- Writes the state `news` of `key` under `f`, fresh in `fresh` ns (0: deleted).
  local function store(key, f, news, fresh, callers_time)
    if fresh == 0 then
      redis.call("DEL", key)
      return
    end
    local ms = ceil_div(fresh, 1000000) + 1
    if callers_time then ms = ms + CALLER_SLACK_MS end
    -- Written here: Redis would write a Lua number with %.17g.
    redis.call("SET", key, f[4] .. news, "PX", dec(ms))
  end

  -- Appends a decision to the reply, as Decision::new makes it: a zero delay is allowed, and
  -- remaining is capped at the limit. Numbers (all below 2^52) go back as integer replies,
  -- which the store reads as it reads decimal strings: no formatting here.
  local function push(reply, outcome, value, limit, remaining, reset)
    if outcome == "delayed" and value == 0 then outcome = "allowed" end
    if outcome == "allowed" or outcome == "cost_too_high" then value = 0 end
    if remaining > limit then remaining = limit end
    local n = #reply
    reply[n + 1], reply[n + 2], reply[n + 3], reply[n + 4], reply[n + 5] =
      outcome, value, limit, remaining, reset
  end

  -- The decision of one check: algorithm `f` with its `np` parameters at a[o], `cost` (a
  -- number) at `given` (the caller's time, or "" for Redis's), written if `write`. Returns
  -- the decision's five values and (when `digits`) now's decimal digits, or nil to take the
  -- limb path.
  local function decide_one(key, f, a, o, np, cost, given, write, digits)
    local nh, nl, callers_time, now = clock(given, digits)
    if nh == nil then return nil end
    local body = body_of(key, f)
    if body == false then return nil end
    local outcome, value, limit, remaining, reset, news, fresh = f[1](a, o, np, cost, nh, nl, body)
    if outcome == nil then return nil end
    if write and news then store(key, f, news, fresh, callers_time) end
    -- As push does, for the one decision.
    if outcome == "delayed" and value == 0 then outcome = "allowed" end
    if outcome == "allowed" or outcome == "cost_too_high" then value = 0 end
    if remaining > limit then remaining = limit end
    return outcome, value, limit, remaining, reset, now
  end

  -- The reply to a call of one check in mode decide (`write`) or peek, or nil to take the
  -- limb path. Writes only once the decision is made.
  function FAST.one(key, argv, write)
    local f = ALGOS[argv[4]]
    if f == nil then return nil end
    local np = f[2][argv[6]]
    if np == nil or #argv ~= 6 + np then return nil end
    local cost = num(argv[5])
    if cost == nil then return nil end
    local outcome, value, limit, remaining, reset, now = decide_one(key, f, argv, 7, np, cost, argv[2], write, true)
    if outcome == nil then return nil end
    return {now, outcome, value, limit, remaining, reset}
  end

  -- A check's spec, "<kind> <p1> <p2> ...", as {f, {p1, p2, ...}, np} (the parameters as
  -- sent, strings), or false when the fast path has no such algorithm or parameter count.
  -- Remembered: a server sees the same few limits over and over. At most 4,096 are kept,
  -- then they are forgotten at once and learnt again (a quota's periods move on daily).
  local SPECS, specs = {}, 0
  local function spec_of(s)
    local got = SPECS[s]
    if got ~= nil then return got end
    got = false
    local words = {}
    for w in gmatch(s, "[^ ]+") do words[#words + 1] = w end
    local f = ALGOS[words[1]]
    if f ~= nil then
      local np = #words - 1
      if f[2][tostring(np)] == np then
        local a = {}
        for i = 1, np do a[i] = words[i + 1] end
        got = {f, a, np}
      end
    end
    if specs >= 4096 then SPECS, specs = {}, 0 end
    SPECS[s], specs = got, specs + 1
    return got
  end
  FAST.spec_of = spec_of

  -- The compact call of one check (store.lua's modes decide1 and peek1): ARGV is the mode,
  -- now (or ""), the cost and the check's spec; the reply is one string, the decision's five
  -- values separated by spaces, without now. Nil to take the limb path. Five arguments fewer
  -- than the general form, each of which Redis would make a Lua string of and the script
  -- would look up; and one string back instead of an array of five, cheaper for Redis to
  -- write and for the client to parse.
  function FAST.compact(key, argv, write)
    local spec = spec_of(argv[4])
    if not spec then return nil end
    local cost = num(argv[3])
    if cost == nil then return nil end
    local outcome, value, limit, remaining, reset = decide_one(key, spec[1], spec[2], 1, spec[3], cost, argv[2], write, false)
    if outcome == nil then return nil end
    return fmt("%s %d %d %d %d", outcome, value, limit, remaining, reset)
  end

  -- allowed(d) of store.lua: the outcomes that admit.
  local ADMITS = {allowed = true, delayed = true}

  -- The reply to a call of several checks (layered rules) in mode decide or peek, all or
  -- nothing as store.lua's decide: every check decided on the states as read; only if every
  -- one admits are they applied in order, a check whose key an earlier check changed decided
  -- again on that state. Nil to take the limb path, before anything is written.
  function FAST.many(keys, argv, write)
    local n = #keys
    -- Each check: its algorithm, cost, where its parameters start, and how many there are.
    local checks = {}
    local pos = 4
    for i = 1, n do
      local f = ALGOS[argv[pos]]
      if f == nil then return nil end
      local np = f[2][argv[pos + 2]]
      local cost = num(argv[pos + 1])
      if np == nil or cost == nil then return nil end
      checks[i] = {f, cost, pos + 3, np}
      pos = pos + 3 + np
    end
    if pos ~= #argv + 1 then return nil end
    local nh, nl, callers_time, now = clock(argv[2], true)
    if nh == nil then return nil end
    -- Every key read once; the checks of one key must share its algorithm.
    local algo, bodies, order = {}, {}, {}
    for i = 1, n do
      local key, f = keys[i], checks[i][1]
      local seen = algo[key]
      if seen == nil then
        local body = body_of(key, f)
        if body == false then return nil end
        algo[key], bodies[key] = f, body or false
        order[#order + 1] = key
      elseif seen ~= f then
        return nil
      end
    end
    local results, all = {}, true
    for i = 1, n do
      local c = checks[i]
      local r = {c[1][1](argv, c[3], c[4], c[2], nh, nl, bodies[keys[i]] or nil)}
      if r[1] == nil then return nil end
      results[i] = r
      if not ADMITS[r[1]] then all = false end
    end
    if all and write then
      -- Applied in order: the state each key is left in, and how long it stays fresh.
      local kept = {}
      for i = 1, n do
        local key, c = keys[i], checks[i]
        local r = results[i]
        local k = kept[key]
        if k then
          r = {c[1][1](argv, c[3], c[4], c[2], nh, nl, k[1])}
          if r[1] == nil then return nil end
          results[i] = r
        end
        if r[6] then kept[key] = {r[6], r[7]} end
      end
      for _, key in ipairs(order) do
        local k = kept[key]
        if k then store(key, algo[key], k[1], k[2], callers_time) end
      end
    end
    local reply = {now}
    for i = 1, n do
      local r = results[i]
      push(reply, r[1], r[2], r[3], r[4], r[5])
    end
    return reply
  end
end
