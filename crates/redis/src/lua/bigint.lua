-- Fixed-width unsigned integers for Redis Lua.
--
-- Redis runs Lua 5.1, whose only numbers are doubles: integers are exact below 2^53, while
-- times in nanoseconds since the epoch are near 2^61 and bucket ticks are 128 bits wide. A
-- value here is a table of 6 limbs of 24 bits, least significant first: 144 bits, enough for
-- any u128 plus the carry of one addition. Limb products stay below 2^48 and every column
-- sum below 2^53, so each step is exact in doubles.
--
-- No function changes its arguments (a result may be one of them, or a shared constant such
-- as ZERO: values are never changed in place). Everything is local and reached through the
-- table `BN` (Redis scripts may not create globals, and a Lua 5.1 function may not capture
-- more than 60 upvalues).
--
-- Speed: loops over limbs are unrolled, and values below 2^52 (most costs, limits, windows
-- and delays) take fast paths in doubles. For 0 <= t < 2^52 and 0 < d < 2^52, floor(t / d)
-- is exact in doubles (the rounded quotient cannot reach the next integer), and so is
-- t - floor(t / d) * d.

local BN = {}

local BASE = 16777216 -- 2^24
local LIMBS = 6
local floor = math.floor

-- n, an integer 0 <= n < 2^53.
local function from_int(n)
  if n < BASE then return {n, 0, 0, 0, 0, 0} end
  local q1 = floor(n / BASE)
  if q1 < BASE then return {n - q1 * BASE, q1, 0, 0, 0, 0} end
  local q2 = floor(q1 / BASE)
  return {n - q1 * BASE, q1 - q2 * BASE, q2, 0, 0, 0}
end
BN.from_int = from_int

local ZERO = from_int(0)
local ONE = from_int(1)
BN.ZERO = ZERO
BN.ONE = ONE

local function is_zero(a)
  return a[1] == 0 and a[2] == 0 and a[3] == 0 and a[4] == 0 and a[5] == 0 and a[6] == 0
end
BN.is_zero = is_zero

-- -1, 0 or 1 as a is below, equal to or above b.
local function cmp(a, b)
  local x, y = a[6], b[6]
  if x == y then
    x, y = a[5], b[5]
    if x == y then
      x, y = a[4], b[4]
      if x == y then
        x, y = a[3], b[3]
        if x == y then
          x, y = a[2], b[2]
          if x == y then
            x, y = a[1], b[1]
            if x == y then return 0 end
          end
        end
      end
    end
  end
  if x < y then return -1 end
  return 1
end
BN.cmp = cmp
function BN.lt(a, b) return cmp(a, b) < 0 end
function BN.le(a, b) return cmp(a, b) <= 0 end
function BN.eq(a, b) return cmp(a, b) == 0 end
function BN.min(a, b) if cmp(a, b) <= 0 then return a end return b end
function BN.max(a, b) if cmp(a, b) >= 0 then return a end return b end

-- a + b, modulo 2^144 (callers keep sums of values below 2^143, so nothing is lost).
local function add(a, b)
  local c = 0
  local t1 = a[1] + b[1]
  if t1 >= BASE then t1, c = t1 - BASE, 1 end
  local t2 = a[2] + b[2] + c
  if t2 >= BASE then t2, c = t2 - BASE, 1 else c = 0 end
  local t3 = a[3] + b[3] + c
  if t3 >= BASE then t3, c = t3 - BASE, 1 else c = 0 end
  local t4 = a[4] + b[4] + c
  if t4 >= BASE then t4, c = t4 - BASE, 1 else c = 0 end
  local t5 = a[5] + b[5] + c
  if t5 >= BASE then t5, c = t5 - BASE, 1 else c = 0 end
  local t6 = a[6] + b[6] + c
  if t6 >= BASE then t6 = t6 - BASE end
  return {t1, t2, t3, t4, t5, t6}
end
BN.add = add

-- a - b for a >= b (modulo 2^144 otherwise).
local function sub(a, b)
  local c = 0
  local t1 = a[1] - b[1]
  if t1 < 0 then t1, c = t1 + BASE, 1 end
  local t2 = a[2] - b[2] - c
  if t2 < 0 then t2, c = t2 + BASE, 1 else c = 0 end
  local t3 = a[3] - b[3] - c
  if t3 < 0 then t3, c = t3 + BASE, 1 else c = 0 end
  local t4 = a[4] - b[4] - c
  if t4 < 0 then t4, c = t4 + BASE, 1 else c = 0 end
  local t5 = a[5] - b[5] - c
  if t5 < 0 then t5, c = t5 + BASE, 1 else c = 0 end
  local t6 = a[6] - b[6] - c
  if t6 < 0 then t6 = t6 + BASE end
  return {t1, t2, t3, t4, t5, t6}
end
BN.sub = sub

-- max(a - b, 0): Rust's `saturating_sub` on unsigned integers.
function BN.ssub(a, b)
  if cmp(a, b) <= 0 then return ZERO end
  return sub(a, b)
end

-- a * k for one limb 0 <= k < 2^24 (each a[i] * k + carry < 2^49); an error if the product
-- does not fit in 144 bits.
local function mul1(a, k)
  if k == 1 then return a end
  local t = a[1] * k
  local c = floor(t / BASE)
  local r1 = t - c * BASE
  t = a[2] * k + c
  c = floor(t / BASE)
  local r2 = t - c * BASE
  t = a[3] * k + c
  c = floor(t / BASE)
  local r3 = t - c * BASE
  t = a[4] * k + c
  c = floor(t / BASE)
  local r4 = t - c * BASE
  t = a[5] * k + c
  c = floor(t / BASE)
  local r5 = t - c * BASE
  t = a[6] * k + c
  c = floor(t / BASE)
  if c ~= 0 then error("ratewarden: internal: bigint product overflows 144 bits") end
  return {r1, r2, r3, r4, r5, t - c * BASE}
end

-- a * b; an error if the product does not fit in 144 bits (never, for the u64 x u64
-- products the algorithms take).
local function mul(a, b)
  if b[2] == 0 and b[3] == 0 and b[4] == 0 and b[5] == 0 and b[6] == 0 then return mul1(a, b[1]) end
  if a[2] == 0 and a[3] == 0 and a[4] == 0 and a[5] == 0 and a[6] == 0 then return mul1(b, a[1]) end
  local col = {0, 0, 0, 0, 0, 0}
  for i = 1, LIMBS do
    local x = a[i]
    if x ~= 0 then
      for j = 1, LIMBS do
        local y = b[j]
        if y ~= 0 then
          local k = i + j - 1
          if k > LIMBS then error("ratewarden: internal: bigint product overflows 144 bits") end
          col[k] = col[k] + x * y
        end
      end
    end
  end
  local r = {}
  local carry = 0
  for i = 1, LIMBS do
    local t = col[i] + carry
    carry = floor(t / BASE)
    r[i] = t - carry * BASE
  end
  if carry ~= 0 then error("ratewarden: internal: bigint product overflows 144 bits") end
  return r
end
BN.mul = mul
BN.mul1 = mul1

-- Number of significant limbs (0 for zero).
local function len(a)
  for i = LIMBS, 1, -1 do
    if a[i] ~= 0 then return i end
  end
  return 0
end

-- floor(t / d) and t % d for integers 0 <= t < 2^53, 0 < d < 2^53, corrected in case the
-- rounded float quotient lands on the wrong side of an integer.
local function qr(t, d)
  local q = floor(t / d)
  local r = t - q * d
  if r < 0 then
    q = q - 1
    r = r + d
  elseif r >= d then
    q = q + 1
    r = r - d
  end
  return q, r
end

-- (a / d, a % d), rounded down; d must not be zero.
local function divmod(a, d)
  if a[4] == 0 and a[5] == 0 and a[6] == 0 and a[3] < 16 then
    -- a < 2^52: in doubles.
    if d[4] ~= 0 or d[5] ~= 0 or d[6] ~= 0 or d[3] >= 16 then return ZERO, a end
    local dv = (d[3] * BASE + d[2]) * BASE + d[1]
    if dv == 0 then error("ratewarden: internal: bigint division by zero") end
    local av = (a[3] * BASE + a[2]) * BASE + a[1]
    if av < dv then return ZERO, a end
    local q, r = qr(av, dv)
    return from_int(q), from_int(r)
  end
  local n = len(d)
  if n == 0 then error("ratewarden: internal: bigint division by zero") end
  if cmp(a, d) < 0 then return ZERO, a end
  if n == 1 then
    local dv = d[1]
    if dv == 1 then return a, ZERO end
    -- Short division: r * 2^24 + limb < 2^48.
    local q = {0, 0, 0, 0, 0, 0}
    local r = 0
    for i = len(a), 1, -1 do
      q[i], r = qr(r * BASE + a[i], dv)
    end
    return q, from_int(r)
  end
  -- Knuth's algorithm D (as in Hacker's Delight's divmnu), 0-based arrays.
  local m = len(a)
  -- Normalise: shift both left by s bits so the divisor's top limb has its high bit set.
  local s = 0
  local top = d[n]
  while top < 8388608 do -- 2^23
    top = top * 2
    s = s + 1
  end
  local scale = 2 ^ s
  local vn, un = {}, {}
  local carry = 0
  for i = 0, n - 1 do
    local t = d[i + 1] * scale + carry
    carry = floor(t / BASE)
    vn[i] = t - carry * BASE
  end
  carry = 0
  for i = 0, m - 1 do
    local t = a[i + 1] * scale + carry
    carry = floor(t / BASE)
    un[i] = t - carry * BASE
  end
  un[m] = carry
  local q = {0, 0, 0, 0, 0, 0}
  local vtop, vnext = vn[n - 1], vn[n - 2]
  for j = m - n, 0, -1 do
    local qhat, rhat = qr(un[j + n] * BASE + un[j + n - 1], vtop)
    while qhat >= BASE or qhat * vnext > rhat * BASE + un[j + n - 2] do
      qhat = qhat - 1
      rhat = rhat + vtop
      if rhat >= BASE then break end
    end
    -- un[j .. j+n] -= qhat * vn
    local borrow = 0
    carry = 0
    for i = 0, n - 1 do
      local p = qhat * vn[i] + carry
      carry = floor(p / BASE)
      local t = un[i + j] - (p - carry * BASE) - borrow
      if t < 0 then
        un[i + j] = t + BASE
        borrow = 1
      else
        un[i + j] = t
        borrow = 0
      end
    end
    local t = un[j + n] - carry - borrow
    if t < 0 then
      -- qhat was one too many: add the divisor back.
      un[j + n] = t + BASE
      qhat = qhat - 1
      carry = 0
      for i = 0, n - 1 do
        local u = un[i + j] + vn[i] + carry
        if u >= BASE then
          un[i + j] = u - BASE
          carry = 1
        else
          un[i + j] = u
          carry = 0
        end
      end
      un[j + n] = (un[j + n] + carry) % BASE
    else
      un[j + n] = t
    end
    q[j + 1] = qhat
  end
  -- The remainder is un[0 .. n-1], shifted back right by s bits.
  local r = {0, 0, 0, 0, 0, 0}
  local up = 2 ^ (24 - s)
  for i = 0, n - 1 do
    local hi = 0
    if i + 1 <= n - 1 then hi = un[i + 1] end
    local lo = floor(un[i] / scale)
    r[i + 1] = lo + (hi % scale) * up
  end
  return q, r
end
BN.divmod = divmod

-- a / d rounded down.
function BN.div(a, d)
  local q = divmod(a, d)
  return q
end

-- a / d rounded up.
function BN.div_ceil(a, d)
  local q, r = divmod(a, d)
  if is_zero(r) then return q end
  return add(q, ONE)
end

-- The decimal digits of a.
local CHUNK = 10000000 -- 10^7: r * 2^24 + limb < 2^48
local fmt = string.format
local E8 = 100000000 -- 10^8
function BN.to_dec(a)
  if a[4] == 0 and a[5] == 0 and a[6] == 0 then
    local a3 = a[3]
    if a3 < 32 then
      -- Below 2^53: a double holds it exactly.
      return fmt("%.0f", (a3 * BASE + a[2]) * BASE + a[1])
    end
    -- Below 2^72 (times in nanoseconds): with 2^48 = 2814749 * 10^8 + 76710656,
    -- a = (a3 * 2814749) * 10^8 + s where s = a3 * 76710656 + a[2] * 2^24 + a[1] < 2^52.
    local q, lo = qr(a3 * 76710656 + a[2] * BASE + a[1], E8)
    return fmt("%.0f%08d", a3 * 2814749 + q, lo)
  end
  local x = {a[1], a[2], a[3], a[4], a[5], a[6]}
  local top = len(x)
  local parts = {}
  while true do
    local r = 0
    local nonzero = false
    for i = top, 1, -1 do
      x[i], r = qr(r * BASE + x[i], CHUNK)
      if x[i] ~= 0 then nonzero = true end
    end
    if nonzero then
      parts[#parts + 1] = string.format("%07d", r)
    else
      parts[#parts + 1] = string.format("%d", r)
      break
    end
  end
  local out = {}
  for i = #parts, 1, -1 do out[#out + 1] = parts[i] end
  return table.concat(out)
end

local POW10 = {10, 100, 1000, 10000, 100000, 1000000, 10000000}

-- The value of a string of decimal digits, or nil if it is not one or does not fit in 144
-- bits (at most 43 digits).
function BN.from_dec(s)
  if type(s) ~= "string" or #s == 0 or #s > 43 or string.find(s, "^%d+$") == nil then
    return nil
  end
  local digits = #s
  -- Up to 15 digits (below 10^15 < 2^53), a double reads it exactly.
  if digits <= 15 then return from_int(tonumber(s)) end
  if digits <= 21 then
    -- hi * 10^8 + lo, hi below 10^13 < 2^44 split into limbs h1 + h2 * 2^24 (h2 < 2^20):
    -- h1 * 10^8 + lo < 2^52, and h2 * 10^8 + carry < 2^48.
    local hi = tonumber(string.sub(s, 1, digits - 8))
    local lo = tonumber(string.sub(s, digits - 7))
    local h2 = floor(hi / BASE)
    local t = (hi - h2 * BASE) * E8 + lo
    local c = floor(t / BASE)
    local r1 = t - c * BASE
    t = h2 * E8 + c
    c = floor(t / BASE)
    return {r1, t - c * BASE, c, 0, 0, 0}
  end
  local r = {0, 0, 0, 0, 0, 0}
  local first = #s % 7
  if first == 0 then first = 7 end
  local pos = 1
  local width = first
  while pos <= #s do
    local chunk = tonumber(string.sub(s, pos, pos + width - 1))
    local mulby = POW10[width]
    local carry = chunk
    for i = 1, LIMBS do
      local t = r[i] * mulby + carry
      carry = floor(t / BASE)
      r[i] = t - carry * BASE
    end
    if carry ~= 0 then return nil end
    pos = pos + width
    width = 7
  end
  return r
end

local F = BASE - 1
BN.U64_MAX = {F, F, 65535, 0, 0, 0} -- 2^64 - 1
BN.U128_MAX = {F, F, F, F, F, 255} -- 2^128 - 1
BN.TWO_64 = {0, 0, 65536, 0, 0, 0} -- 2^64

-- min(a, u64::MAX) and min(a, u128::MAX): Rust's `saturate` and saturating arithmetic.
function BN.sat64(a)
  if cmp(a, BN.U64_MAX) > 0 then return BN.U64_MAX end
  return a
end
function BN.sat128(a)
  if cmp(a, BN.U128_MAX) > 0 then return BN.U128_MAX end
  return a
end

-- Saturating additions of two u64 (or two u128) values.
function BN.sadd64(a, b) return BN.sat64(add(a, b)) end
function BN.sadd128(a, b) return BN.sat128(add(a, b)) end

-- a * b of two u64 values, saturating at u64::MAX (Rust's `u64::saturating_mul`).
function BN.smul64(a, b) return BN.sat64(mul(a, b)) end
