-- Ratewarden's shared store: every algorithm's transition, run atomically inside Redis with
-- exactly the integer results of `ratewarden-core`. Loaded after bigint.lua (which defines BN)
-- and fast.lua (FAST, the same transitions in doubles for the common case, tried first)
-- as one Redis Function library (store.rs builds it: FUNCTION LOAD once per server, then
-- FCALL <function> <numkeys> KEYS... ARGV...). Nothing here may touch Redis's Lua globals
-- (math, string, table, redis) while the library loads: Redis 7 hides them then, so the
-- whole text runs on the first call instead.
--
-- KEYS: one key per check (all in one hash slot).
-- ARGV[1]  mode: decide | peek | settle | acquire | release
-- ARGV[2]  now in nanoseconds (decimal), or "" to take Redis TIME
-- ARGV[3]  N, the number of checks (= #KEYS), then per check, in order:
--            [id]   (modes acquire and release only: the permit id, a decimal u64)
--            kind   (fixed-window, sliding-log, sliding-window, token-bucket, leaky-bucket,
--                    leaky-queue, gcra, quota, concurrency)
--            cost   (decimal u64; for settle a signed decimal i64 delta; ignored by release)
--            P      (how many parameters follow)
--            P parameters (decimal):
--              fixed-window, sliding-window, sliding-log:  limit, window_ns
--              sliding-window of N > 1 sub-windows:  limit, window_ns, N
--              token-bucket, leaky-bucket:  ticks_per_ns, ticks_per_cell, burst
--              gcra:         ticks_per_ns, ticks_per_cell, burst
--              leaky-queue:  ticks_per_ns, ticks_per_cell, capacity (= burst + 1)
--                (ticks_per_ns = count / gcd(count, period_ns),
--                 ticks_per_cell = period_ns / gcd(count, period_ns))
--              quota:        limit, then pairs start_ns, end_ns of calendar periods [start, end)
--                            (the state's period is kept while it holds `now`; otherwise the
--                            first pair holding `now` starts a new period; none is an error.
--                            The caller sends the period holding its own clock first, then
--                            the one before and the one after)
--              concurrency:  max, lease_ns
--
-- Modes:
--   decide   all or nothing: every check is peeked; only if every one is allowed is every
--            transition applied (in order, so two checks of one key see each other) and
--            written. The reply holds the peeks if any was rejected, else the decisions.
--   peek     the decisions, nothing written.
--   settle   each check's signed delta is applied; the reply has outcome "allowed" and the
--            numbers of a cost-0 peek at the settled state.
--   acquire  as decide, but a concurrency check takes a permit under its id (any other
--            algorithm decides as in decide).
--   release  each concurrency check gives back the permit with its id (after dropping the
--            permits whose lease ran out at `now`); the reply is `now` then "1" or "0" per
--            check (0 when the permit is not held, or the algorithm is not concurrency).
--   take     one check: up to `cost` units, as many as fit now (none when none does), charged
--            at once (a prefetched allowance's partial grant). The reply is now, then the
--            decision of charging what was granted (or, when nothing was, the refusal of a
--            cost-1 request, with its retry-after), then the units granted.
--   share    a member's leased share of a budget (lease.lua, which says its arguments).
--   batch    many calls in one (the store coalesces the calls that arrive while one is in
--            flight): KEYS are the entries' keys in order; ARGV[2] the shape, each entry's
--            number of keys and of arguments ("1 1 1 2 3 9"), then the entries' arguments in
--            order, each exactly its own call's. Each entry runs in order as its own call
--            would, all on one reading of TIME; the reply is the array of the entries'
--            replies, an entry that failed as a status reply of its error (it wrote nothing).
--   decide:limbs, peek:limbs, decide:fast, peek:fast  (for tests) decide or peek by the limb
--            path only, or by the fast path only (an error when it declines).
--   "d <cost> <kind> <parameters...>", "p ..."  the one-check call (one_check.lua): its
--            own reply, or when it declines mode decide1's or peek1's.
--   decide1, peek1  decide or peek of one check in a compact form, for the algorithms of the
--            fast path: ARGV is the mode, now (or ""), the cost, and the check as one
--            string, its kind and parameters separated by spaces ("gcra 1 1 100"); the reply
--            is one string, the decision's five values separated by spaces, without now
--            ("allowed 0 100 99 10"). Redis makes a Lua string of every argument and the
--            script reads each: five fewer a call; and one string back is cheaper to write
--            and to parse than an array. When the fast path declines, the limb path decides
--            the same check in the general form.
--
-- Modes decide and peek are tried first by the fast path in doubles (fast.lua), which answers
-- exactly as the code below whenever every number is small enough.
--
-- Reply: now (a decimal string), then per check: outcome (allowed, delayed, limited,
-- cost_too_high), value_ns (the delay, or the retry-after, else 0), limit, remaining,
-- reset_after_ns: decimal strings, or integers from the fast path.
--
-- Each key holds "<kind>:<state>" (a state of another kind is a key never seen), written with
-- SET ... PX ceil(fresh_in_ns / 1e6) + 1 (plus an hour when the caller gives the time: its
-- clock need not keep pace with Redis's), or deleted when the state is fresh. States:
--   fixed-window   window,count          sliding-window  window,previous,current
--   sliding-window of N > 1 sub-windows  slot;count,first,last;... (N + 1 slots, the oldest first)
--   sliding-log    total;base;offset/cost,...  (an entry's time is base + offset)
--   token-bucket, leaky-bucket  spent_ticks,last_ns
--   gcra, leaky-queue  tat_ticks         quota  start,end,used
--   concurrency    id/cost/expires,...   (in the order the core keeps them)

local ZERO, ONE = BN.ZERO, BN.ONE
local cmp, add, sub, ssub, mul, mul1 = BN.cmp, BN.add, BN.sub, BN.ssub, BN.mul, BN.mul1
local sadd64, sadd128, sat64, smul64 = BN.sadd64, BN.sadd128, BN.sat64, BN.smul64
local div, div_ceil, divmod, is_zero = BN.div, BN.div_ceil, BN.divmod, BN.is_zero
local bmin, bmax, dec = BN.min, BN.max, BN.to_dec
local U64_MAX, U128_MAX = BN.U64_MAX, BN.U128_MAX
local TWO = BN.from_int(2)

-- Errors are strings starting "ratewarden: " (Redis 7 turns error tables into strings), raised
-- at level 0 so Lua adds no position; anything else reaching the top is an internal error.
local PREFIX = "ratewarden: "
local function fail(msg)
  error(PREFIX .. msg, 0)
end
local function ours(e)
  return type(e) == "string" and string.sub(e, 1, #PREFIX) == PREFIX
end

-- Arguments ---------------------------------------------------------------------------------

-- `what .. more` names the argument in an error (joined only then: strings cost time).
local function parse_u(s, max, what, more)
  local v = BN.from_dec(s)
  if v == nil or cmp(v, max) > 0 then
    fail(what .. (more or "") .. " must be a decimal integer from 0 to " .. dec(max) .. ", got '" .. tostring(s) .. "'")
  end
  return v
end
local function u64(s, what, more) return parse_u(s, U64_MAX, what, more) end
local function nonzero64(s, what, more)
  local v = u64(s, what, more)
  if is_zero(v) then fail(what .. (more or "") .. " must not be zero") end
  return v
end

local I64_MAX = {16777215, 16777215, 32767, 0, 0, 0} -- 2^63 - 1
local I64_MIN_MAG = {0, 0, 32768, 0, 0, 0} -- 2^63
-- A signed 64-bit delta: its magnitude and whether it is negative.
local function i64(s, what, more)
  if type(s) == "string" and string.sub(s, 1, 1) == "-" then
    return parse_u(string.sub(s, 2), I64_MIN_MAG, what, more .. " (a negative i64)"), true
  end
  return parse_u(s, I64_MAX, what, more .. " (an i64)"), false
end

local function small(s, what, more)
  if type(s) ~= "string" or string.find(s, "^%d+$") == nil or #s > 6 then
    fail(what .. (more or "") .. " must be a small decimal count, got '" .. tostring(s) .. "'")
  end
  return tonumber(s)
end

-- Saturating `u64::saturating_add_signed`.
local function add_signed64(x, mag, neg)
  if neg then return ssub(x, mag) end
  return sadd64(x, mag)
end

-- Decisions ---------------------------------------------------------------------------------

-- Decision::new: a zero delay is allowed, and remaining is capped at the limit.
local function decision(outcome, value, limit, remaining, reset)
  if outcome == "delayed" and is_zero(value) then outcome = "allowed" end
  if outcome == "allowed" or outcome == "cost_too_high" then value = ZERO end
  return {o = outcome, v = value, limit = limit, rem = bmin(remaining, limit), reset = reset}
end
local function allowed(d) return d.o == "allowed" or d.o == "delayed" end

-- State strings ---------------------------------------------------------------------------------

local function split(s, sep)
  local out = {}
  if s == "" then return out end
  local start = 1
  while true do
    local i = string.find(s, sep, start, true)
    if i == nil then
      out[#out + 1] = string.sub(s, start)
      return out
    end
    out[#out + 1] = string.sub(s, start, i - 1)
    start = i + 1
  end
end

local function corrupt(what)
  fail("a key holds an unreadable " .. what .. " state")
end
local function state_u(s, max, what)
  local v = BN.from_dec(s)
  if v == nil or cmp(v, max) > 0 then corrupt(what) end
  return v
end
local function fields(s, n, maxes, what)
  local f = split(s, ",")
  if #f ~= n then corrupt(what) end
  local out = {}
  for i = 1, n do out[i] = state_u(f[i], maxes[i], what) end
  return out
end

-- The algorithms ------------------------------------------------------------------------------

local ALGO = {}

-- Virtual scheduling (schedule.rs), shared by gcra and leaky-queue.
local function schedule(queue, name)
  local A = {}
  function A.params(a)
    if #a ~= 3 then fail(name .. " takes 3 parameters (ticks_per_ns, ticks_per_cell, capacity), got " .. #a) end
    local p = {
      tpn = nonzero64(a[1], name, " ticks_per_ns"),
      tpc = nonzero64(a[2], name, " ticks_per_cell"),
      cap = nonzero64(a[3], name, " capacity"),
    }
    p.allowance = mul(p.cap, p.tpc)
    return p
  end
  function A.default() return {tat = ZERO} end
  function A.decode(s) return {tat = state_u(s, U128_MAX, name)} end
  function A.encode(st) return dec(st.tat) end
  local function ns_ceil(p, x) return sat64(div_ceil(x, p.tpn)) end
  function A.decide(p, st, now, cost)
    local nows = mul(now, p.tpn)
    local before = ssub(st.tat, nows)
    local backlog = before
    local outcome, value, news = nil, ZERO, nil
    if cmp(cost, p.cap) > 0 then
      outcome = "cost_too_high"
    else
      local after = sadd128(before, mul(cost, p.tpc))
      if cmp(after, p.allowance) <= 0 then
        news = {tat = sadd128(nows, after)}
        backlog = after
        if queue then
          outcome, value = "delayed", ns_ceil(p, before)
        else
          outcome = "allowed"
        end
      else
        outcome, value = "limited", ns_ceil(p, sub(after, p.allowance))
      end
    end
    local remaining = sat64(div(ssub(p.allowance, backlog), p.tpc))
    return decision(outcome, value, p.cap, remaining, ns_ceil(p, backlog)), news
  end
  function A.settle(p, st, now, mag, neg)
    local nows = mul(now, p.tpn)
    local base = bmax(st.tat, nows)
    local cells = mul(mag, p.tpc)
    if not neg then return {tat = sadd128(base, cells)} end
    return {tat = bmax(ssub(base, cells), nows)}
  end
  function A.fresh_in(p, st, now)
    return ns_ceil(p, ssub(st.tat, mul(now, p.tpn)))
  end
  return A
end
ALGO["gcra"] = schedule(false, "gcra")
ALGO["leaky-queue"] = schedule(true, "leaky-queue")

-- The token bucket (token_bucket.rs), and the leaky bucket that is the same bucket.
local function bucket(name)
  local A = {}
  function A.params(a)
    if #a ~= 3 then fail(name .. " takes 3 parameters (ticks_per_ns, ticks_per_cell, burst), got " .. #a) end
    local p = {
      tpn = nonzero64(a[1], name, " ticks_per_ns"),
      tpc = nonzero64(a[2], name, " ticks_per_cell"),
      burst = nonzero64(a[3], name, " burst"),
    }
    p.capacity = mul(p.burst, p.tpc)
    return p
  end
  function A.default() return {spent = ZERO, last = ZERO} end
  function A.decode(s)
    local f = fields(s, 2, {U128_MAX, U64_MAX}, name)
    return {spent = f[1], last = f[2]}
  end
  function A.encode(st) return dec(st.spent) .. "," .. dec(st.last) end
  local function spent(p, st, now)
    local refill = mul(ssub(now, st.last), p.tpn)
    return ssub(st.spent, refill)
  end
  local function report(p, outcome, value, sp)
    local held = ssub(p.capacity, sp)
    local remaining = sat64(div(held, p.tpc))
    local reset = sat64(div_ceil(sp, p.tpn))
    return decision(outcome, value, p.burst, remaining, reset)
  end
  function A.decide(p, st, now, cost)
    local sp = spent(p, st, now)
    if cmp(cost, p.burst) > 0 then return report(p, "cost_too_high", ZERO, sp), nil end
    local after = sadd128(sp, mul(cost, p.tpc))
    if cmp(after, p.capacity) <= 0 then
      return report(p, "allowed", ZERO, after), {spent = after, last = bmax(st.last, now)}
    end
    local wait = sat64(div_ceil(sub(after, p.capacity), p.tpn))
    return report(p, "limited", wait, sp), nil
  end
  function A.settle(p, st, now, mag, neg)
    local sp = spent(p, st, now)
    local amount = mul(mag, p.tpc)
    if neg then sp = ssub(sp, amount) else sp = sadd128(sp, amount) end
    return {spent = sp, last = bmax(st.last, now)}
  end
  function A.fresh_in(p, st, now)
    return sat64(div_ceil(spent(p, st, now), p.tpn))
  end
  return A
end
ALGO["token-bucket"] = bucket("token-bucket")
ALGO["leaky-bucket"] = bucket("leaky-bucket")

-- Limit and window, for the window algorithms.
local function window_params(name)
  return function(a)
    if #a ~= 2 then fail(name .. " takes 2 parameters (limit, window_ns), got " .. #a) end
    return {limit = nonzero64(a[1], name, " limit"), w = nonzero64(a[2], name, " window_ns")}
  end
end

-- The fixed window (fixed_window.rs).
do
  local A = {}
  A.params = window_params("fixed-window")
  function A.default() return {window = ZERO, count = ZERO} end
  function A.decode(s)
    local f = fields(s, 2, {U64_MAX, U64_MAX}, "fixed-window")
    return {window = f[1], count = f[2]}
  end
  function A.encode(st) return dec(st.window) .. "," .. dec(st.count) end
  -- The window holding now, its count, and nanoseconds until it ends.
  local function current(p, st, now)
    local index, into = divmod(now, p.w)
    local count = ZERO
    if cmp(st.window, index) == 0 then count = st.count end
    return index, count, sub(p.w, into)
  end
  function A.decide(p, st, now, cost)
    local limit = p.limit
    local index, count, ends_in = current(p, st, now)
    local outcome, value, news = nil, ZERO, nil
    if cmp(cost, limit) > 0 then
      outcome = "cost_too_high"
    elseif cmp(sadd64(count, cost), limit) <= 0 then
      count = sadd64(count, cost)
      news = {window = index, count = count}
      outcome = "allowed"
    else
      outcome, value = "limited", ends_in
    end
    local reset = ends_in
    if is_zero(count) then reset = ZERO end
    return decision(outcome, value, limit, ssub(limit, count), reset), news
  end
  function A.settle(p, st, now, mag, neg)
    local index, count = current(p, st, now)
    return {window = index, count = add_signed64(count, mag, neg)}
  end
  function A.fresh_in(p, st, now)
    local _, count, ends_in = current(p, st, now)
    if is_zero(count) then return ZERO end
    return ends_in
  end
  ALGO["fixed-window"] = A
end

-- The sliding window counter (sliding_window.rs): with one sub-window (two parameters) the
-- two-window counter A here, with N > 1 (a third parameter) the slots S below. A state of
-- the other shape is a key never seen, as in the core.
do
  local A = {}
  function A.default() return {window = ZERO, previous = ZERO, current = ZERO} end
  local function rolled(p, st, now)
    local index = div(now, p.w)
    local previous, current
    local c = cmp(index, st.window)
    if c < 0 then
      previous, current = st.previous, st.current -- the clock went back
    else
      local gap = sub(index, st.window)
      if is_zero(gap) then
        previous, current = st.previous, st.current
      elseif cmp(gap, ONE) == 0 then
        previous, current = st.current, ZERO
      else
        previous, current = ZERO, ZERO
      end
    end
    return {window = bmax(index, st.window), previous = previous, current = current}
  end
  local function elapsed_of(p, r, now)
    return bmin(ssub(now, smul64(r.window, p.w)), p.w)
  end
  -- Nanoseconds from `elapsed` until previous * (W - e) <= room * W, or nil past the window.
  local function wait_within(p, previous, room, elapsed)
    if is_zero(previous) then return ZERO end
    local slack = bmin(div(mul(room, p.w), previous), p.w)
    local e = sub(p.w, slack)
    if cmp(e, p.w) < 0 then return ssub(e, elapsed) end
    return nil
  end
  local function evaluate(p, r, now, cost)
    local limit, w = p.limit, p.w
    if cmp(cost, limit) > 0 then return "cost_too_high", ZERO end
    local elapsed = elapsed_of(p, r, now)
    local cur_cost = sadd64(r.current, cost)
    local estimate = BN.sadd128(mul(r.previous, sub(w, elapsed)), mul(cur_cost, w))
    if cmp(estimate, mul(limit, w)) <= 0 then return "allowed", ZERO end
    local wait = nil
    if cmp(cur_cost, limit) <= 0 then
      wait = wait_within(p, r.previous, sub(limit, cur_cost), elapsed)
    end
    if wait == nil then
      local nxt = wait_within(p, r.current, sub(limit, cost), ZERO)
      if nxt == nil then nxt = w end
      wait = sadd64(sub(w, elapsed), nxt)
    end
    return "limited", wait
  end
  local function report(p, outcome, value, r, now)
    local limit, w = p.limit, p.w
    local elapsed = elapsed_of(p, r, now)
    local used = BN.sadd128(mul(r.previous, sub(w, elapsed)), mul(r.current, w))
    local room = div(ssub(mul(limit, w), used), w)
    local reset = ZERO
    if not is_zero(r.current) then
      reset = ssub(smul64(w, TWO), elapsed)
    elseif not is_zero(r.previous) then
      reset = sub(w, elapsed)
    end
    return decision(outcome, value, limit, room, reset)
  end
  function A.decide(p, st, now, cost)
    local r = rolled(p, st, now)
    local outcome, value = evaluate(p, r, now, cost)
    local news = nil
    if outcome == "allowed" then
      r.current = sadd64(r.current, cost)
      news = r
    end
    return report(p, outcome, value, r, now), news
  end
  function A.settle(p, st, now, mag, neg)
    local r = rolled(p, st, now)
    r.current = add_signed64(r.current, mag, neg)
    return r
  end
  function A.fresh_in(p, st, now)
    local r = rolled(p, st, now)
    local last
    if not is_zero(r.current) then
      last = r.window
    elseif not is_zero(r.previous) then
      last = sub(r.window, ONE)
    else
      return ZERO
    end
    -- Fresh from the start of the second window after the last one counted in.
    return sat64(ssub(mul(add(last, TWO), p.w), now))
  end

  -- N slots of window / N each, time scaled by N (slot = floor(now * N / W)): the state is
  -- {slot, counts}, counts[1] the oldest slot's (slot - N) and counts[N + 1] the current's,
  -- each {c = units, f = first, l = last charge's time into the slot, in 1/N ns}.
  local S = {}
  local function slot_zero() return {c = ZERO, f = ZERO, l = ZERO} end
  local function slots_default(p)
    local counts = {}
    for i = 1, p.n + 1 do counts[i] = slot_zero() end
    return counts
  end
  local function copy(sl) return {c = sl.c, f = sl.f, l = sl.l} end
  -- SlotCount::charge, ::settle, ::fits, ::ceil and ::first_fit.
  local function charge(sl, units, at)
    if is_zero(units) then return end
    if is_zero(sl.c) then
      sl.f, sl.l = at, at
    else
      sl.f, sl.l = bmin(sl.f, at), bmax(sl.l, at)
    end
    sl.c = sadd64(sl.c, units)
  end
  local function settle_slot(sl, mag, neg, at)
    if not neg and not is_zero(mag) then return charge(sl, mag, at) end
    sl.c = add_signed64(sl.c, mag, neg)
    if is_zero(sl.c) then sl.f, sl.l = ZERO, ZERO end
  end
  local function fits(sl, e, room)
    if cmp(sl.c, room) <= 0 or cmp(e, sl.l) >= 0 then return true end
    if cmp(e, sl.f) < 0 or is_zero(room) then return false end
    return cmp(mul(ssub(sl.c, TWO), sub(sl.l, e)), mul(sub(room, ONE), sub(sl.l, sl.f))) <= 0
  end
  local function ceil_at(sl, e)
    if is_zero(sl.c) or cmp(e, sl.l) >= 0 then return ZERO end
    if cmp(e, sl.f) < 0 then return sl.c end
    return add(bmin(sl.c, ONE), div_ceil(mul(ssub(sl.c, TWO), sub(sl.l, e)), sub(sl.l, sl.f)))
  end
  local function first_fit(sl, room)
    if cmp(sl.c, room) <= 0 then return ZERO end
    if is_zero(room) then return sl.l end
    local span = ssub(sl.l, sl.f)
    local between = ssub(sl.c, TWO)
    local reach = span
    if not is_zero(between) then reach = bmin(div(mul(sub(room, ONE), span), between), span) end
    return sub(sl.l, reach)
  end
  -- The state rolled to now: slot, counts, elapsed (in 1/N ns) and at (now, or the slot's
  -- start when the clock went back).
  local function roll(p, st, now)
    local scaled = mul(now, p.nb)
    local index, into = divmod(scaled, p.w)
    local r = {slot = index, counts = slots_default(p), elapsed = into, at = now}
    if st.counts == nil or #st.counts ~= p.n + 1 then return r end
    local c = cmp(st.slot, index)
    if c > 0 then
      r.slot, r.elapsed = st.slot, ZERO
      for i = 1, p.n + 1 do r.counts[i] = copy(st.counts[i]) end
      r.at = sat64(div_ceil(mul(st.slot, p.w), p.nb))
    else
      local gap = sub(index, st.slot)
      if cmp(gap, p.nb) <= 0 then
        local g = gap[1] -- at most 60: one limb
        for i = 1, p.n + 1 - g do r.counts[i] = copy(st.counts[i + g]) end
      end
    end
    return r
  end
  -- The counts of the slots wholly in the window, j slots on.
  local function whole(p, r, j)
    local sum = ZERO
    for i = j + 2, p.n + 1 do sum = sadd64(sum, r.counts[i].c) end
    return sum
  end
  local function slots_wait(p, r, cost)
    local w = p.w
    for j = 0, p.n + 1 do
      local oldest = slot_zero()
      if j <= p.n then oldest = r.counts[j + 1] end
      local s = sadd64(whole(p, r, j), cost)
      if cmp(s, p.limit) <= 0 then
        local first = first_fit(oldest, sub(p.limit, s))
        local from = ZERO
        if j == 0 then from = r.elapsed end
        if cmp(first, w) < 0 then
          local at = add(mul(add(r.slot, BN.from_int(j)), w), bmax(first, from))
          return sat64(ssub(div_ceil(at, p.nb), r.at))
        end
      end
    end
    return U64_MAX
  end
  local function slots_report(p, outcome, value, r)
    local room = ssub(ssub(p.limit, whole(p, r, 0)), ceil_at(r.counts[1], r.elapsed))
    local reset = ZERO
    for i = p.n + 1, 1, -1 do
      if not is_zero(r.counts[i].c) then
        local fresh = mul(add(r.slot, BN.from_int(i)), p.w)
        reset = sat64(ssub(div_ceil(fresh, p.nb), r.at))
        break
      end
    end
    return decision(outcome, value, p.limit, room, reset)
  end
  function S.decide(p, st, now, cost)
    local r = roll(p, st, now)
    local outcome, value = "allowed", ZERO
    local s = sadd64(whole(p, r, 0), cost)
    if cmp(cost, p.limit) > 0 then
      outcome = "cost_too_high"
    elseif cmp(s, p.limit) > 0 or not fits(r.counts[1], r.elapsed, sub(p.limit, s)) then
      outcome, value = "limited", slots_wait(p, r, cost)
    end
    local news = nil
    if outcome == "allowed" then
      charge(r.counts[p.n + 1], cost, r.elapsed)
      news = {slot = r.slot, counts = r.counts}
    end
    return slots_report(p, outcome, value, r), news
  end
  function S.settle(p, st, now, mag, neg)
    local r = roll(p, st, now)
    settle_slot(r.counts[p.n + 1], mag, neg, r.elapsed)
    return {slot = r.slot, counts = r.counts}
  end
  function S.fresh_in(p, st, now)
    local r = roll(p, st, now)
    for i = p.n + 1, 1, -1 do
      if not is_zero(r.counts[i].c) then
        return sat64(ssub(div_ceil(mul(add(r.slot, BN.from_int(i)), p.w), p.nb), now))
      end
    end
    return ZERO
  end

  -- One entry for both: the parameters say which, and a state of the other shape is fresh.
  local SW = {}
  function SW.params(a)
    if #a ~= 2 and #a ~= 3 then
      fail("sliding-window takes 2 or 3 parameters (limit, window_ns[, sub_windows]), got " .. #a)
    end
    local p = {limit = nonzero64(a[1], "sliding-window", " limit"), w = nonzero64(a[2], "sliding-window", " window_ns"), n = 1}
    if #a == 3 then
      p.n = small(a[3], "sliding-window", " sub_windows")
      if p.n < 2 or p.n > 60 then fail("sliding-window sub_windows must be from 2 to 60, got " .. a[3]) end
      p.nb = BN.from_int(p.n)
      if cmp(p.w, p.nb) < 0 then fail("sliding-window window_ns must be at least sub_windows") end
    end
    return p
  end
  function SW.default() return A.default() end
  function SW.decode(s)
    local slots = split(s, ";")
    if #slots == 1 then
      local f = split(s, ",")
      if #f < 3 then corrupt("sliding-window") end
      -- Slots of counts alone, without their charges' times: a key never seen, as a state
      -- of another shape is.
      if #f > 3 then return A.default() end
      local v = {}
      for i = 1, 3 do v[i] = state_u(f[i], U64_MAX, "sliding-window") end
      return {window = v[1], previous = v[2], current = v[3]}
    end
    local counts = {}
    for i = 2, #slots do
      local v = fields(slots[i], 3, {U64_MAX, U64_MAX, U64_MAX}, "sliding-window")
      counts[i - 1] = {c = v[1], f = v[2], l = v[3]}
    end
    return {slot = state_u(slots[1], U64_MAX, "sliding-window"), counts = counts}
  end
  function SW.encode(st)
    if st.counts == nil then
      return dec(st.window) .. "," .. dec(st.previous) .. "," .. dec(st.current)
    end
    local parts = {dec(st.slot)}
    for i, sl in ipairs(st.counts) do
      parts[i + 1] = dec(sl.c) .. "," .. dec(sl.f) .. "," .. dec(sl.l)
    end
    return table.concat(parts, ";")
  end
  -- The two-window state of st (a slots state is a key never seen).
  local function two(st)
    if st.counts ~= nil then return A.default() end
    return st
  end
  function SW.decide(p, st, now, cost)
    if p.n > 1 then return S.decide(p, st, now, cost) end
    return A.decide(p, two(st), now, cost)
  end
  function SW.settle(p, st, now, mag, neg)
    if p.n > 1 then return S.settle(p, st, now, mag, neg) end
    return A.settle(p, two(st), now, mag, neg)
  end
  function SW.fresh_in(p, st, now)
    if p.n > 1 then return S.fresh_in(p, st, now) end
    return A.fresh_in(p, two(st), now)
  end
  ALGO["sliding-window"] = SW
end

-- The sliding log (sliding_log.rs). State: {total, entries = {{at, cost}, ...}} oldest first.
do
  local A = {}
  A.params = window_params("sliding-log")
  function A.default() return {total = ZERO, entries = {}} end
  -- "total;base;offset/cost,...": each entry's time is base + offset (base is the oldest
  -- entry's time), so the numbers stored per entry stay short.
  function A.decode(s)
    local parts = split(s, ";")
    if #parts ~= 3 then corrupt("sliding-log") end
    local st = {total = state_u(parts[1], U64_MAX, "sliding-log"), entries = {}}
    local base = state_u(parts[2], U64_MAX, "sliding-log")
    for _, e in ipairs(split(parts[3], ",")) do
      local f = split(e, "/")
      if #f ~= 2 then corrupt("sliding-log") end
      local at = add(base, state_u(f[1], U64_MAX, "sliding-log"))
      if cmp(at, U64_MAX) > 0 then corrupt("sliding-log") end
      st.entries[#st.entries + 1] = {at = at, cost = state_u(f[2], U64_MAX, "sliding-log")}
    end
    return st
  end
  function A.encode(st)
    local parts = {}
    local base = ZERO
    if st.entries[1] ~= nil then base = st.entries[1].at end
    for i, e in ipairs(st.entries) do parts[i] = dec(sub(e.at, base)) .. "/" .. dec(e.cost) end
    return dec(st.total) .. ";" .. dec(base) .. ";" .. table.concat(parts, ",")
  end
  local function live(p, e, now) return cmp(sadd64(e.at, p.w), now) > 0 end
  local function evaluate(p, st, now, cost)
    local limit = p.limit
    local expired, expired_cost = 0, ZERO
    for _, e in ipairs(st.entries) do
      if live(p, e, now) then break end
      expired = expired + 1
      expired_cost = sadd64(expired_cost, e.cost)
    end
    local total = ssub(st.total, expired_cost)
    if cmp(cost, limit) > 0 then return "cost_too_high", ZERO, total end
    if cmp(sadd64(total, cost), limit) <= 0 then return "allowed", ZERO, total end
    local left = total
    for i = expired + 1, #st.entries do
      local e = st.entries[i]
      left = ssub(left, e.cost)
      if cmp(sadd64(left, cost), limit) <= 0 then
        return "limited", sub(sadd64(e.at, p.w), now), total
      end
    end
    error("ratewarden: internal: sliding-log found no retry time")
  end
  local function report(p, outcome, value, st, now, total)
    local reset = ZERO
    local last = st.entries[#st.entries]
    if last ~= nil and live(p, last, now) then reset = sub(sadd64(last.at, p.w), now) end
    return decision(outcome, value, p.limit, ssub(p.limit, total), reset)
  end
  -- A new state: st with what has aged out dropped and cost logged at now. (Entries are
  -- shared with st, never changed in place: one that changes is replaced.)
  local function record(p, st, now, cost)
    local out = {total = st.total, entries = {}}
    local first = 1
    while st.entries[first] ~= nil and not live(p, st.entries[first], now) do
      out.total = ssub(out.total, st.entries[first].cost)
      first = first + 1
    end
    for i = first, #st.entries do
      out.entries[#out.entries + 1] = st.entries[i]
    end
    if is_zero(cost) then return out end
    out.total = sadd64(out.total, cost)
    local n = #out.entries
    local last = out.entries[n]
    if last ~= nil and cmp(last.at, now) >= 0 then
      out.entries[n] = {at = last.at, cost = sadd64(last.cost, cost)}
    else
      out.entries[#out.entries + 1] = {at = now, cost = cost}
    end
    return out
  end
  function A.decide(p, st, now, cost)
    local outcome, value, total = evaluate(p, st, now, cost)
    if outcome == "allowed" then
      local news = record(p, st, now, cost)
      return report(p, outcome, value, news, now, sadd64(total, cost)), news
    end
    return report(p, outcome, value, st, now, total), nil
  end
  function A.peek(p, st, now, cost)
    local outcome, value, total = evaluate(p, st, now, cost)
    if outcome == "allowed" then total = sadd64(total, cost) end
    local d = report(p, outcome, value, st, now, total)
    if outcome == "allowed" and not is_zero(cost) then d.reset = p.w end
    return d
  end
  function A.settle(p, st, now, mag, neg)
    if not neg then return record(p, st, now, mag) end
    local out = record(p, st, now, ZERO)
    local refund = mag
    while not is_zero(refund) do
      local last = out.entries[#out.entries]
      if last == nil then break end
      last = {at = last.at, cost = last.cost}
      out.entries[#out.entries] = last
      local take = bmin(refund, last.cost)
      last.cost = sub(last.cost, take)
      refund = sub(refund, take)
      out.total = ssub(out.total, take)
      if is_zero(last.cost) then out.entries[#out.entries] = nil end
    end
    return out
  end
  function A.fresh_in(p, st, now)
    local last = st.entries[#st.entries]
    if last == nil or not live(p, last, now) then return ZERO end
    return sub(sadd64(last.at, p.w), now)
  end
  ALGO["sliding-log"] = A
end

-- Calendar quotas (quota.rs), with the periods computed by the caller.
do
  local A = {}
  function A.params(a)
    if #a < 3 or #a % 2 ~= 1 then
      fail("quota takes a limit and then pairs of period boundaries (start_ns, end_ns), got " .. #a .. " parameters")
    end
    local p = {limit = nonzero64(a[1], "quota limit"), periods = {}}
    for i = 2, #a, 2 do
      local s = u64(a[i], "quota period start")
      local e = u64(a[i + 1], "quota period end")
      if cmp(s, e) > 0 then fail("quota period " .. a[i] .. ".." .. a[i + 1] .. " ends before it starts") end
      p.periods[#p.periods + 1] = {s, e}
    end
    return p
  end
  function A.default() return {start = ZERO, ["end"] = ZERO, used = ZERO} end
  function A.decode(s)
    local f = fields(s, 3, {U64_MAX, U64_MAX, U64_MAX}, "quota")
    return {start = f[1], ["end"] = f[2], used = f[3]}
  end
  function A.encode(st) return dec(st.start) .. "," .. dec(st["end"]) .. "," .. dec(st.used) end
  local function current(p, st, now)
    if cmp(st.start, now) <= 0 and cmp(now, st["end"]) < 0 then
      return {start = st.start, ["end"] = st["end"], used = st.used}
    end
    for _, pr in ipairs(p.periods) do
      local inside = cmp(pr[1], now) <= 0 and cmp(now, pr[2]) < 0
      -- At now = u64::MAX the core's period is the empty (now, now): accept exactly that.
      local at_the_end = cmp(pr[1], now) == 0 and cmp(pr[2], now) == 0
      if inside or at_the_end then
        return {start = pr[1], ["end"] = pr[2], used = ZERO}
      end
    end
    fail("quota: now (" .. dec(now) .. " ns) is outside every calendar period the caller sent")
  end
  function A.decide(p, st, now, cost)
    local limit = p.limit
    local cur = current(p, st, now)
    local ends_in = sub(cur["end"], now)
    local outcome, value, news = nil, ZERO, nil
    local used = cur.used
    if cmp(cost, limit) > 0 then
      outcome = "cost_too_high"
    elseif cmp(sadd64(cur.used, cost), limit) <= 0 then
      used = sadd64(cur.used, cost)
      news = {start = cur.start, ["end"] = cur["end"], used = used}
      outcome = "allowed"
    else
      outcome, value = "limited", ends_in
    end
    local reset = ends_in
    if is_zero(used) then reset = ZERO end
    return decision(outcome, value, limit, ssub(limit, used), reset), news
  end
  function A.settle(p, st, now, mag, neg)
    local cur = current(p, st, now)
    cur.used = add_signed64(cur.used, mag, neg)
    return cur
  end
  function A.fresh_in(p, st, now)
    local cur = current(p, st, now)
    if is_zero(cur.used) then return ZERO end
    return sub(cur["end"], now)
  end
  ALGO["quota"] = A
end

-- Concurrency permits (concurrency.rs). State: {held = {{id, cost, expires}, ...}}.
do
  local A = {}
  function A.params(a)
    if #a ~= 2 then fail("concurrency takes 2 parameters (max, lease_ns), got " .. #a) end
    return {max = nonzero64(a[1], "concurrency max"), lease = nonzero64(a[2], "concurrency lease_ns")}
  end
  function A.default() return {held = {}} end
  function A.decode(s)
    local st = {held = {}}
    for _, h in ipairs(split(s, ",")) do
      local f = split(h, "/")
      if #f ~= 3 then corrupt("concurrency") end
      st.held[#st.held + 1] = {
        id = state_u(f[1], U64_MAX, "concurrency"),
        cost = state_u(f[2], U64_MAX, "concurrency"),
        expires = state_u(f[3], U64_MAX, "concurrency"),
      }
    end
    return st
  end
  function A.encode(st)
    local parts = {}
    for i, h in ipairs(st.held) do
      parts[i] = dec(h.id) .. "/" .. dec(h.cost) .. "/" .. dec(h.expires)
    end
    return table.concat(parts, ",")
  end
  -- The permits still held at now (a copy).
  local function pruned(st, now)
    local out = {held = {}}
    for _, h in ipairs(st.held) do
      if cmp(h.expires, now) > 0 then
        out.held[#out.held + 1] = {id = h.id, cost = h.cost, expires = h.expires}
      end
    end
    return out
  end
  local function in_flight(st)
    local n = ZERO
    for _, h in ipairs(st.held) do n = sadd64(n, h.cost) end
    return n
  end
  local function report(p, outcome, value, st, now)
    local reset = ZERO
    for _, h in ipairs(st.held) do reset = bmax(reset, ssub(h.expires, now)) end
    return decision(outcome, value, p.max, ssub(p.max, in_flight(st)), reset)
  end
  -- Concurrency::acquire: the decision and the state after it (pruned even when rejected).
  function A.acquire(p, st, now, cost, id)
    local s = pruned(st, now)
    local flight = in_flight(s)
    local max = p.max
    if cmp(cost, max) > 0 then return report(p, "cost_too_high", ZERO, s, now), s end
    if cmp(sadd64(flight, cost), max) <= 0 then
      if not is_zero(cost) then
        s.held[#s.held + 1] = {id = id, cost = cost, expires = sadd64(now, p.lease)}
      end
      return report(p, "allowed", ZERO, s, now), s
    end
    -- Without releases, the earliest time enough leases have run out.
    local by_expiry = {}
    for i, h in ipairs(s.held) do by_expiry[i] = h end
    table.sort(by_expiry, function(x, y) return cmp(x.expires, y.expires) < 0 end)
    local left = flight
    local at = p.lease
    for _, h in ipairs(by_expiry) do
      -- `left.saturating_sub(h.cost)`, as the core does.
      left = ssub(left, h.cost)
      if cmp(sadd64(left, cost), max) <= 0 then
        at = sub(h.expires, now)
        break
      end
    end
    return report(p, "limited", at, s, now), s
  end
  function A.decide(p, st, now, cost)
    local d, s = A.acquire(p, st, now, cost, ZERO)
    if allowed(d) then return d, s end
    return d, nil
  end
  function A.settle(p, st, now, mag, neg)
    local s = pruned(st, now)
    if not neg and not is_zero(mag) then
      s.held[#s.held + 1] = {id = ZERO, cost = mag, expires = sadd64(now, p.lease)}
      return s
    end
    local refund = mag
    while not is_zero(refund) do
      local i = nil
      for k = #s.held, 1, -1 do
        if is_zero(s.held[k].id) then
          i = k
          break
        end
      end
      if i == nil then break end
      local take = bmin(refund, s.held[i].cost)
      s.held[i].cost = sub(s.held[i].cost, take)
      refund = sub(refund, take)
      if is_zero(s.held[i].cost) then table.remove(s.held, i) end
    end
    return s
  end
  -- Drops lapsed permits, then gives back permit id (Vec::swap_remove, as the core does).
  function A.release(p, st, now, id)
    local s = pruned(st, now)
    for i, h in ipairs(s.held) do
      if cmp(h.id, id) == 0 then
        local n = #s.held
        s.held[i] = s.held[n]
        s.held[n] = nil
        return true, s
      end
    end
    return false, s
  end
  function A.fresh_in(p, st, now)
    local reset = ZERO
    for _, h in ipairs(st.held) do reset = bmax(reset, ssub(h.expires, now)) end
    return reset
  end
  ALGO["concurrency"] = A
end

-- Peeking is deciding without keeping the new state, unless an algorithm says otherwise
-- (every transition here returns a new state and leaves its argument alone).
local function peek(c, st, now, cost)
  if c.algo.peek then return c.algo.peek(c.p, st, now, cost) end
  local d = c.algo.decide(c.p, st, now, cost)
  return d
end

-- The script ---------------------------------------------------------------------------------

local MODES = {decide = true, peek = true, settle = true, acquire = true, release = true, take = true}
-- "check i: ", made once.
local WHERE = {}
for i = 1, 16 do WHERE[i] = "check " .. i .. ": " end
local MILLION = BN.from_int(1000000)
-- With the caller's time, a key's TTL runs on Redis's clock but its reset on the caller's,
-- which need not keep pace (a test's manual clock stands still while Redis's runs): a TTL
-- of exactly the reset let Redis drop a live state after a few real milliseconds, and the
-- next call decided it as fresh (the conformance suite's 1-in-7 flake). So such keys live
-- an hour longer on Redis's clock: exact while the caller's clock lags Redis's by less.
local CALLER_SLACK_MS = BN.from_int(3600000)

-- For tests: "decide:limbs" and "peek:limbs" never take the fast path (fast.lua);
-- "decide:fast" and "peek:fast" take it or fail saying it declined.
local FORCED = {
  ["decide:limbs"] = {"decide", "limbs"}, ["peek:limbs"] = {"peek", "limbs"},
  ["decide:fast"] = {"decide", "fast"}, ["peek:fast"] = {"peek", "fast"},
}

-- The number of checks as the caller writes it, for up to 16 (more take the limb path).
local COUNT = {}
for i = 1, 16 do COUNT[i] = tostring(i) end

-- The fast path's reply to a decide (`write`) or a peek, or nil when it declines.
local function fast(KEYS, ARGV, write)
  local n = #KEYS
  if ARGV[3] ~= COUNT[n] then return nil end
  if n == 1 then return FAST.one(KEYS[1], ARGV, write) end
  return FAST.many(KEYS, ARGV, write)
end

-- The compact form of one check's decide or peek (see the header), and the mode its limb
-- path runs in.
local COMPACT = {decide1 = "decide:limbs", peek1 = "peek:limbs"}

-- The error of a call (or of one entry of a batch) that raised `result`.
local function failure(result)
  if ours(result) then return result end
  if type(result) == "table" and result.err then result = result.err end
  return PREFIX .. "internal error: " .. tostring(result)
end

local run

-- A batch's shape (ARGV[2]: each entry's number of keys and of arguments, all separated by
-- spaces) as a flat list of numbers, remembered (at most 256): under a steady load the same
-- shapes come again and again.
local SHAPES, shapes = {}, 0
local function shape_of(s)
  local got = SHAPES[s]
  if got then return got end
  got = {}
  if type(s) ~= "string" or #s > 65536 then fail("mode batch: a shape of decimal counts, separated by spaces") end
  for n in string.gmatch(s, "[^ ]+") do
    if string.find(n, "^%d+$") == nil or #n > 6 then
      fail("mode batch: the shape holds '" .. n .. "', not a count")
    end
    got[#got + 1] = tonumber(n)
  end
  if #got == 0 or #got % 2 ~= 0 then fail("mode batch: the shape must hold two counts per entry") end
  if shapes >= 256 then SHAPES, shapes = {}, 0 end
  SHAPES[s], shapes = got, shapes + 1
  return got
end

-- Mode batch: many calls in one. KEYS are the entries' keys, one entry after the other;
-- ARGV[2] the shape (see shape_of), then the entries' arguments, one entry after the other,
-- each exactly what the entry would send as a call of its own. Each entry runs in order as
-- that call would (atomic and all or nothing as it is; an entry sees what earlier ones
-- wrote), on one reading of TIME; the reply holds each entry's own reply in order, an
-- entry that failed as a status reply of its error (having written nothing), the others
-- unaffected.
local function batch(KEYS, ARGV)
  local shape = shape_of(ARGV[2])
  local nk, na = 0, 0
  for i = 1, #shape, 2 do
    if shape[i] == 0 or shape[i + 1] == 0 then fail("mode batch: an entry without keys or arguments") end
    nk, na = nk + shape[i], na + shape[i + 1]
  end
  if nk ~= #KEYS or na ~= #ARGV - 2 then
    fail("mode batch: the shape names " .. nk .. " keys and " .. na .. " arguments, the call has "
      .. #KEYS .. " and " .. (#ARGV - 2))
  end
  local replies = {}
  local k, a = 0, 2
  TIME.batch, TIME.held = true, nil
  for i = 1, #shape, 2 do
    local nk, na = shape[i], shape[i + 1]
    local first = ARGV[a + 1]
    local ok, reply, answered = false, nil, false
    -- The one-check call whose closure is made (the common entry): run as `run` runs it,
    -- without the tables of the entry's keys and arguments; declined (nil, nothing
    -- written), it goes the general way below, as in `run`.
    local one_check = nk == 1 and na <= 2 and ONE_CHECK.specs[first]
    if one_check and one_check[1] then
      local now = nil
      if na == 2 then now = ARGV[a + 2] end
      ok, reply = pcall(one_check[1], KEYS[k + 1], now)
      answered = not ok or reply ~= nil
    end
    if not answered then
      local keys, args = {}, {}
      for j = 1, nk do keys[j] = KEYS[k + j] end
      for j = 1, na do args[j] = ARGV[a + j] end
      if first == "batch" then
        ok, reply = false, PREFIX .. "mode batch: an entry may not be a batch"
      else
        ok, reply = pcall(run, keys, args)
      end
    end
    k, a = k + nk, a + na
    if not ok then
      -- A status reply, which no entry answers otherwise: an error within an array makes
      -- clients fail the whole reply.
      reply = redis.status_reply(failure(reply))
    elseif reply == nil then
      reply = false
    end
    replies[#replies + 1] = reply
  end
  TIME.batch, TIME.held = false, nil
  return replies
end

function run(KEYS, ARGV)
  local mode = ARGV[1]
  if mode == "batch" then return batch(KEYS, ARGV) end
  -- The one-check call first (one_check.lua): the store's common call, looked up before
  -- anything else.
  local one_check = ONE_CHECK.specs[mode]
  if one_check == nil and type(mode) == "string" then one_check = ONE_CHECK.of(mode) end
  if one_check then
    if #KEYS ~= 1 or #ARGV > 2 then
      fail("a one-check call takes one key and at most two arguments (the check, now)")
    end
    if one_check[1] then
      local reply = one_check[1](KEYS[1], ARGV[2])
      if reply then return reply end
    end
    -- Declined: the same check by mode decide1 or peek1.
    return run(KEYS, {one_check[2], ARGV[2] or "", one_check[3], one_check[4]})
  end
  local compact = COMPACT[mode]
  if compact then
    if #KEYS ~= 1 or #ARGV ~= 4 then
      fail("mode " .. mode .. " takes one key and three arguments (now, cost, the check's spec)")
    end
    local reply = FAST.compact(KEYS[1], ARGV, mode == "decide1")
    if reply then return reply end
    -- Declined: the limb path, on the general form; its reply without now.
    local words = split(ARGV[4], " ")
    if words[1] == nil then fail("mode " .. mode .. ": the check's spec is empty") end
    local general = {compact, ARGV[2], "1", words[1], ARGV[3], tostring(#words - 1)}
    for i = 2, #words do general[#general + 1] = words[i] end
    reply = run(KEYS, general)
    return table.concat(reply, " ", 2)
  end
  if mode == "share" then return LEASES.lease(KEYS, ARGV) end
  -- The fast path first: decided in doubles when every number is small enough.
  if mode == "decide" or mode == "peek" then
    local reply = fast(KEYS, ARGV, mode == "decide")
    if reply then return reply end
  elseif FORCED[mode] then
    local forced = FORCED[mode]
    mode = forced[1]
    if forced[2] == "fast" then
      local reply = fast(KEYS, ARGV, mode == "decide")
      if not reply then fail("the fast path declined") end
      return reply
    end
  end
  if not MODES[mode] then
    fail("unknown mode '" .. tostring(mode) .. "' (decide, peek, settle, acquire or release)")
  end
  local now
  local callers_time = ARGV[2] ~= ""
  if not callers_time then
    -- seconds * 10^9 + microseconds * 10^3, as (seconds * 10^3) * 10^6 + microseconds * 10^3.
    local t = TIME.read()
    now = add(mul1(BN.from_int(tonumber(t[1]) * 1000), 1000000), BN.from_int(tonumber(t[2]) * 1000))
  else
    now = u64(ARGV[2], "now")
  end
  local n = small(ARGV[3], "the number of checks")
  if n ~= #KEYS then fail("the number of checks (" .. n .. ") differs from the number of keys (" .. #KEYS .. ")") end

  -- Read and check every argument before anything else.
  local checks = {}
  local pos = 4
  local with_id = mode == "acquire" or mode == "release"
  for i = 1, n do
    local c = {key = KEYS[i]}
    local where = WHERE[i] or ("check " .. i .. ": ")
    if with_id then
      c.id = u64(ARGV[pos], where, "permit id")
      pos = pos + 1
    end
    c.kind = ARGV[pos]
    c.algo = ALGO[c.kind]
    if c.algo == nil then fail(where .. "unknown algorithm '" .. tostring(c.kind) .. "'") end
    if mode == "settle" then
      c.mag, c.neg = i64(ARGV[pos + 1], where, "delta")
    else
      c.cost = u64(ARGV[pos + 1], where, "cost")
    end
    local np = small(ARGV[pos + 2], where, "the number of parameters")
    local a = {}
    for k = 1, np do
      local v = ARGV[pos + 2 + k]
      if v == nil then fail(where .. "missing parameters") end
      a[k] = v
    end
    local ok, p = pcall(c.algo.params, a)
    if not ok then
      if ours(p) then fail(where .. string.sub(p, #PREFIX + 1)) end
      error(p, 0)
    end
    c.p = p
    pos = pos + 3 + np
    checks[i] = c
  end
  if pos ~= #ARGV + 1 then fail("unexpected arguments after the last check") end

  -- Every key's state, read once: cache[key] = {kind, st} (kind nil for a missing key).
  local cache, order = {}, {}
  for _, c in ipairs(checks) do
    if cache[c.key] == nil then
      local ok, v = pcall(redis.call, "GET", c.key)
      if not ok then fail("cannot read key '" .. c.key .. "': " .. tostring(type(v) == "table" and v.err or v)) end
      local entry = {}
      if v then
        local kind, body = string.match(v, "^([%a%-]+):(.*)$")
        if kind == nil or ALGO[kind] == nil then
          fail("key '" .. c.key .. "' holds a value that is not a ratewarden state")
        end
        entry.kind, entry.body = kind, body
      end
      cache[c.key] = entry
      order[#order + 1] = c.key
    end
  end
  -- The state a check sees: its own kind's state, else a key never seen.
  local function state_of(c)
    local e = cache[c.key]
    if e.kind ~= c.kind then return c.algo.default() end
    if e.st == nil then e.st = c.algo.decode(e.body) end
    return e.st
  end
  local function keep(c, st)
    cache[c.key] = {kind = c.kind, st = st, dirty = true, algo = c.algo, p = c.p}
  end

  local reply = {dec(now)}
  local function push(d)
    reply[#reply + 1] = d.o
    reply[#reply + 1] = dec(d.v)
    reply[#reply + 1] = dec(d.limit)
    reply[#reply + 1] = dec(d.rem)
    reply[#reply + 1] = dec(d.reset)
  end

  if mode == "peek" then
    for _, c in ipairs(checks) do push(peek(c, state_of(c), now, c.cost)) end
    return reply
  end

  if mode == "release" then
    for _, c in ipairs(checks) do
      local released = false
      if c.kind == "concurrency" and cache[c.key].kind == "concurrency" then
        local s
        released, s = c.algo.release(c.p, state_of(c), now, c.id)
        keep(c, s)
      end
      reply[#reply + 1] = released and "1" or "0"
    end
  elseif mode == "take" then
    if n ~= 1 then fail("mode take takes one check") end
    local c = checks[1]
    local st = state_of(c)
    -- A cost-0 peek's remaining is how many units fit now: a cost fits exactly when it is
    -- at most that, for every algorithm a prefetch may take from.
    local room = peek(c, st, now, ZERO)
    local granted = ZERO
    if allowed(room) then granted = bmin(c.cost, room.rem) end
    if is_zero(granted) then
      push(peek(c, st, now, ONE))
    else
      local d, s = c.algo.decide(c.p, st, now, granted)
      keep(c, s)
      push(d)
    end
    reply[#reply + 1] = dec(granted)
  elseif mode == "settle" then
    for _, c in ipairs(checks) do
      local s = c.algo.settle(c.p, state_of(c), now, c.mag, c.neg)
      keep(c, s)
      local d = peek(c, s, now, ZERO)
      d.o, d.v = "allowed", ZERO
      push(d)
    end
  else
    -- decide and acquire: all or nothing. The first pass runs each transition (keeping
    -- nothing); if all are allowed, a check whose key no earlier check has changed keeps
    -- the transition it already ran (the same function of the same state), and the others
    -- run again on the state the earlier checks left.
    local acquiring = mode == "acquire"
    local decisions, states, all = {}, {}, true
    for i, c in ipairs(checks) do
      local d, s
      if acquiring and c.kind == "concurrency" then
        d, s = c.algo.acquire(c.p, state_of(c), now, c.cost, c.id)
      elseif c.algo.peek then
        d, s = c.algo.peek(c.p, state_of(c), now, c.cost), false
      else
        d, s = c.algo.decide(c.p, state_of(c), now, c.cost)
      end
      decisions[i], states[i] = d, s
      if not allowed(d) then all = false end
    end
    if all then
      local changed = {}
      for i, c in ipairs(checks) do
        local d, s = decisions[i], states[i]
        if s == false or changed[c.key] then
          if acquiring and c.kind == "concurrency" then
            -- Limit::acquire keeps the pruned state even when it refuses.
            d, s = c.algo.acquire(c.p, state_of(c), now, c.cost, c.id)
          else
            d, s = c.algo.decide(c.p, state_of(c), now, c.cost)
          end
        end
        if s then
          keep(c, s)
          changed[c.key] = true
        end
        decisions[i] = d
      end
    end
    for _, d in ipairs(decisions) do push(d) end
  end

  -- Compute every write first (nothing below may fail once Redis has been written to).
  local writes = {}
  for _, key in ipairs(order) do
    local e = cache[key]
    if e.dirty then
      local fresh_in = e.algo.fresh_in(e.p, e.st, now)
      if is_zero(fresh_in) then
        writes[#writes + 1] = {key}
      else
        local ms = add(div_ceil(fresh_in, MILLION), ONE)
        if callers_time then ms = add(ms, CALLER_SLACK_MS) end
        writes[#writes + 1] = {key, e.kind .. ":" .. e.algo.encode(e.st), dec(ms)}
      end
    end
  end
  for _, w in ipairs(writes) do
    if w[2] == nil then
      redis.call("DEL", w[1])
    else
      redis.call("SET", w[1], w[2], "PX", w[3])
    end
  end
  return reply
end

-- The entry point: FCALL's keys and arguments in, the reply out. The library (built in
-- store.rs) wraps bigint.lua and this file in a function run once per server, on the first
-- call after FUNCTION LOAD, and registers a function calling what it returns.
return function(keys, argv)
  local ok, result = pcall(run, keys, argv)
  -- A batch that failed as a whole leaves no reading of TIME held for the next call.
  TIME.batch, TIME.held = false, nil
  if ok then return result end
  return redis.error_reply(failure(result))
end
