-- decide.lua: decision rounds of Spillway, for every algorithm, in one atomic call.
--
-- The Rust algorithms in crates/core/src/algorithm/ are the specification: every
-- function below mirrors the Rust function of the same name, decision for decision
-- (the conformance tables and a differential property test hold the two together).
-- A round mirrors crates/core/src/store/round.rs: check every request, then charge
-- all of them or none (count_rejected limits are charged either way, or, rejected 2,
-- when they denied themselves).
--
-- One call carries one or more independent batches (decisions that arrived while
-- another call was in flight, coalesced by store.rs). Each batch is its own round,
-- in order, so a later batch sees an earlier one's charges exactly as if it had come
-- in a call of its own; a batch that fails (a key holding another program's value, a
-- bad number) fails alone and writes nothing.
--
-- This file defines `decide(keys, argv)`; Rust sends it two ways (script.rs): as a
-- function library (`FUNCTION LOAD` once, then `FCALL`), whose body runs once, so
-- the algorithms are defined and the limits parsed once for many calls; or as a
-- script (`EVALSHA`) ending in `return decide(KEYS, ARGV)`, whose body runs every
-- call. Nothing here may assume either: per-call state is reset by `decide`.
--
-- Cost: a `redis.call` costs more than the arithmetic of any algorithm, and a Lua
-- function call about as much as a table; the hot path (a batch of one request) makes
-- one GET's worth of MGET and one SET, and writes the arithmetic of gcra out.
--
-- KEYS     every batch's keys, batch after batch, request after request. A request's
--          first key holds its state: <prefix>{identity}:<algorithm>:<window>. The key
--          names the limit's shape, so two requests with the same key share a state.
--          A sketched distinct limit (7) has 2P more: per sub-window slot a HyperLogLog
--          (<state key>:0 … :P−1), then a Bloom filter (:b0 … :bP−1), all in the
--          state key's slot.
-- ARGV[1]  B, the number of batches; then per batch either the short form, for the
--          most common batch (one request on one key, Redis TIME, cost 1, no member):
--            s      the letter s
--            limit  its limit (below)
--          or the full form:
--            n      its number of requests
--            k      its number of keys (the next k of KEYS)
--            now    µs since the epoch, or "server" to read Redis TIME (one clock
--                   for every app server; read once per call)
--            then per request three arguments:
--            limit  eight unsigned integers, space-separated: one string, parsed once
--                   per call however many requests share the limit
--                     alg     1 fixed_window, 2 sliding_log, 3 sliding_window,
--                             4 token_bucket, 5 gcra, 6 distinct (exact),
--                             7 distinct (sketched)
--                     rejected  1 = count_rejected (charge denied requests too),
--                               2 = charge the requests it denied itself, not those
--                               another limit of the batch denied
--                     cap     the capacity reported as `limit` (burst for
--                             token_bucket and gcra)
--                     window  W in µs
--                     p1..p4  per algorithm: sliding_window (precision, edge
--                             0 interpolate / 1 strict / 2 lenient); distinct
--                             (precision); token_bucket
--                             (rate, unit); gcra (rate, unit, e(1), tau), where rate
--                             and unit are Limit::scaled_rate and e(1), tau
--                             Limit::gcra_times, computed once in Rust.
--            cost   units to charge (0 = peek)
--            member what a distinct limit counts (empty for the others); for a
--                   sketched one, after its 7 filter bit positions (u32 LE each)
--
-- Returns one flat array (no table per batch), per batch in order: either denied_by
-- (0 = admitted, else the 1-based request), then per request outcome (0 allowed,
-- 1 denied, 2 cost exceeds capacity), remaining, reset_after µs, retry_after µs; or,
-- for a batch that failed, one string saying why (a string, not an error reply:
-- clients turn an error nested in an array into an error for the whole call). A
-- malformed ARGV header is an error reply for the whole call.
--
-- Numbers: Lua numbers are doubles, exact for integers up to 2^53. Rust guarantees
-- every product the algorithms take (cost × unit, burst × unit) stays below 2^53;
-- divisions and remainders go through idiv/imod, which are exact where Lua's `/` and
-- `%` would round.

local FIELDS = 3 -- ARGV per request: limit, cost, member

-- The call being decided: its KEYS and ARGV (set by `decide`, for every function
-- below; a function library has no KEYS and ARGV globals).
local Keys, Argv

-- Values read ahead for batches of one request on one key, by KEYS index: one MGET
-- for the call rather than a GET per batch (a `redis.call` costs more than the
-- algorithm). MGET reads another type's key as nil, like a missing one: `false` here,
-- which `save` writes with NX so that such a key is refused, never replaced (a peek,
-- which writes nothing, answers for it as for a missing key).
local ahead = {}

-- Raises a plain error reply ("ERR spillway: ..."), without Lua's location prefix.
local function fail(msg) error({ err = 'ERR spillway: ' .. msg }) end

-- Reads digits as an integer in 0..=2^53. Compared as text: 2^53 + 1 would round to
-- 2^53 as a number. `i` names ARGV[i] in the error.
local function digits(s, i)
  if #s > 16 or (#s == 16 and s > '9007199254740992') then
    fail('ARGV[' .. i .. '] is larger than 2^53: ' .. s)
  end
  return tonumber(s)
end

-- Reads ARGV[i] as an integer in 0..=2^53. tonumber alone accepts "nan", "inf", "0x1f",
-- " 1e3": a NaN compares false and would be admitted, so only plain digits pass. "1"
-- (a unit cost, a batch of one request) is by far the most common: read without a
-- pattern.
local function arg(i)
  local s = Argv[i]
  if s == '1' then return 1 end
  if s == nil or not string.find(s, '^%d+$') then
    fail('ARGV[' .. i .. '] is not an integer in 0..=2^53: ' .. tostring(s))
  end
  return digits(s, i)
end

-- Exact floor(a / b) and a mod b for non-negative integers: fmod is exact in IEEE
-- arithmetic, so a − r is an exact multiple of b and the division is exact too.
local function imod(a, b) return math.fmod(a, b) end
local function idiv(a, b) return (a - math.fmod(a, b)) / b end
local function cdiv(a, b)
  local r = math.fmod(a, b)
  return (a - r) / b + (r > 0 and 1 or 0)
end
local function min(a, b) if a < b then return a end return b end
local function max(a, b) if a > b then return a end return b end
local function sub0(a, b) if a > b then return a - b end return 0 end -- saturating_sub

-- Decisions, as four values (no table per decision): outcome, remaining (never above
-- the capacity), reset_after, retry_after.
local function allow(r, remaining, reset)
  return 0, min(remaining, r.cap), reset, 0
end
local function deny(r, cost, retry, remaining, reset)
  if cost > r.cap then
    return 2, min(remaining, r.cap), reset, 0
  end
  return 1, min(remaining, r.cap), reset, retry
end

-- Each algorithm is defined by a function, run on the first request of a call that
-- uses it: a script's body runs on every call, and defining all five there (some
-- sixty closures) cost more than deciding a lone request.

-- === fixed_window: state (start, count), 16 bytes ===================================

local function define_fixed_window()
  local fixed_window = {}

  function fixed_window.decode(_, v)
    if not v then return { start = 0, count = 0 } end
    if #v ~= 16 then return nil end
    local start, count = struct.unpack('<dd', v)
    return { start = start, count = count }
  end
  function fixed_window.encode(s) return struct.pack('<dd', s.start, s.count) end
  function fixed_window.copy(s) return { start = s.start, count = s.count } end

  -- The window start at now, never before the stored one.
  local function fw_start(r, s, now) return max(now - imod(now, r.window), s.start) end

  function fixed_window.check(r, s, now, cost)
    local start = fw_start(r, s, now)
    local stop = start + r.window
    now = max(now, start)
    local used = (s.start == start) and s.count or 0
    if cost <= r.cap and used + cost <= r.cap then
      return allow(r, r.cap - used - cost, stop - now)
    end
    return deny(r, cost, stop - now, sub0(r.cap, used), stop - now)
  end

  function fixed_window.commit(r, s, now, cost)
    local start = fw_start(r, s, now)
    if s.start ~= start then s.start, s.count = start, 0 end
    s.count = s.count + cost
  end

  function fixed_window.idle_at(r, s)
    if s.count == 0 then return 0 end
    return s.start + r.window
  end
  return fixed_window
end

-- === sliding_log: state total + entries (at, cost), 8 + 16 per entry =================
-- The entries stay packed in one string, oldest first; only the expired ones at the
-- head and the newest at the tail are ever unpacked.

local function define_sliding_log()
  local sliding_log = {}
  local ENTRY = 16

  function sliding_log.decode(_, v)
    if not v then return { total = 0, data = '' } end
    if #v < 8 or math.fmod(#v - 8, ENTRY) ~= 0 then return nil end
    return { total = struct.unpack('<d', v), data = string.sub(v, 9) }
  end
  function sliding_log.encode(s) return struct.pack('<d', s.total) .. s.data end
  function sliding_log.copy(s) return { total = s.total, data = s.data } end

  local function entry(s, i) -- the i-th entry (1-based): at, cost
    return struct.unpack('<dd', s.data, (i - 1) * ENTRY + 1)
  end
  local function entries(s) return #s.data / ENTRY end

  -- now, never before the newest entry.
  local function sl_clamp(s, now)
    local n = entries(s)
    if n == 0 then return now end
    return max(now, (entry(s, n)))
  end

  -- How many entries at the head have expired at now, and their cost.
  local function sl_expired(r, s, now)
    local n, gone, i = entries(s), 0, 1
    while i <= n do
      local at, cost = entry(s, i)
      if at + r.window > now then break end
      gone = gone + cost
      i = i + 1
    end
    return i - 1, gone
  end

  function sliding_log.check(r, s, now, cost)
    now = sl_clamp(s, now)
    local w, n = r.window, entries(s)
    local first, gone = sl_expired(r, s, now)
    local used = s.total - gone
    local newest = nil
    if n > 0 then newest = entry(s, n) + w end
    if cost <= r.cap and used + cost <= r.cap then
      local reset = w
      if cost == 0 then reset = newest and sub0(newest, now) or 0 end
      return allow(r, r.cap - used - cost, reset)
    end
    -- The same cost fits once enough of the oldest live entries have left.
    local need = used + cost - r.cap
    local retry_at = now
    if cost <= r.cap then
      for i = first + 1, n do
        local at, c = entry(s, i)
        retry_at = at + w
        need = sub0(need, c)
        if need == 0 then break end
      end
    end
    return deny(r, cost, retry_at - now, sub0(r.cap, used), newest and sub0(newest, now) or 0)
  end

  function sliding_log.commit(r, s, now, cost, admitted)
    now = sl_clamp(s, now)
    local first, gone = sl_expired(r, s, now)
    if first > 0 then
      s.data = string.sub(s.data, first * ENTRY + 1)
      s.total = s.total - gone
    end
    if cost == 0 then return end
    s.total = s.total + cost
    local n = entries(s)
    if n > 0 then
      local at, c = entry(s, n)
      -- Same µs, or a rejected charge: fold into the newest entry, moved to now.
      if at == now or not admitted then
        s.data = string.sub(s.data, 1, (n - 1) * ENTRY) .. struct.pack('<dd', now, c + cost)
        return
      end
    end
    s.data = s.data .. struct.pack('<dd', now, cost)
  end

  function sliding_log.idle_at(r, s)
    local n = entries(s)
    if n == 0 then return 0 end
    return entry(s, n) + r.window
  end
  return sliding_log
end

-- === doubles in bulk ====================================================================
-- Lua 5.1 passes and returns at most about 8,000 values at once (its C stack: `unpack`
-- and `struct.unpack` of a precision-10,000 window failed with "too many results to
-- unpack"), so runs of doubles are read and written in chunks of DOUBLES_AT_ONCE.

local DOUBLES_AT_ONCE = 1000

-- `n` doubles from `v`, starting at byte `pos`, as a table.
local function unpack_doubles(v, pos, n)
  local out, done = {}, 0
  while done < n do
    local k = math.min(DOUBLES_AT_ONCE, n - done)
    local got = { struct.unpack('<' .. string.rep('d', k), v, pos) }
    for j = 1, k do out[done + j] = got[j] end
    pos = got[k + 1] -- struct.unpack returns the next position after the values
    done = done + k
  end
  return out
end

-- The doubles of table `t`, packed.
local function pack_doubles(t)
  local n = #t
  if n <= DOUBLES_AT_ONCE then return struct.pack('<' .. string.rep('d', n), unpack(t)) end
  local parts, done = {}, 0
  while done < n do
    local k = math.min(DOUBLES_AT_ONCE, n - done)
    parts[#parts + 1] = struct.pack('<' .. string.rep('d', k), unpack(t, done + 1, done + k))
    done = done + k
  end
  return table.concat(parts)
end

-- === sliding_window: state (newest, total, counts[P+1]), 16 + 8(P+1) bytes ===========
-- counts is a ring indexed by bucket mod (P+1) (plus 1: Lua tables count from 1),
-- empty until the first charge.

local function define_sliding_window()
  local sliding_window = {}

  function sliding_window.decode(r, v)
    if not v then return { newest = 0, total = 0, counts = nil } end
    local n = r.precision + 1
    if #v ~= 16 + 8 * n then return nil end
    local newest, total = struct.unpack('<dd', v)
    return { newest = newest, total = total, counts = unpack_doubles(v, 17, n) }
  end
  function sliding_window.encode(s)
    return struct.pack('<dd', s.newest, s.total) .. pack_doubles(s.counts)
  end
  function sliding_window.copy(s)
    local counts = nil
    if s.counts then
      counts = {}
      for i, c in ipairs(s.counts) do counts[i] = c end
    end
    return { newest = s.newest, total = s.total, counts = counts }
  end

  local INTERPOLATE, STRICT, LENIENT = 0, 1, 2

  local function sw_count(s, bucket)
    if not s.counts then return 0 end
    local n = #s.counts
    if bucket > s.newest or s.newest - bucket >= n then return 0 end
    return s.counts[imod(bucket, n) + 1]
  end

  -- Sum of buckets lo ..= hi still in the ring.
  local function sw_sum(s, lo, hi)
    if not s.counts then return 0 end
    local n = #s.counts
    lo = max(lo, sub0(s.newest, n - 1))
    hi = min(hi, s.newest)
    local total = 0
    for m = lo, hi do total = total + s.counts[imod(m, n) + 1] end
    return total
  end

  local function sw_estimate(r, full, prev, off)
    return full + prev * ((r.width - off) / r.width)
  end

  local function sw_fits(r, full, prev, off, cost)
    if r.edge == STRICT then return full + prev + cost <= r.cap end
    if r.edge == LENIENT then return full + cost <= r.cap end
    return sw_estimate(r, full, prev, off) + cost <= r.cap
  end

  local function sw_remaining(r, full, prev, off)
    if r.edge == STRICT then return sub0(r.cap, full + prev) end
    if r.edge == LENIENT then return sub0(r.cap, full) end
    return max(math.floor(r.cap - sw_estimate(r, full, prev, off)), 0)
  end

  -- (full, prev) for bucket j ≥ newest: the sum of j−P+1 ..= j, and bucket j−P.
  local function sw_window(r, s, j)
    if j < r.precision then return s.total, 0 end
    local oldest = j - r.precision
    local gone
    if oldest >= s.newest then gone = s.total else gone = sw_sum(s, 0, oldest) end
    return sub0(s.total, gone), sw_count(s, oldest)
  end

  local function sw_idle_at(r, newest) return (newest + r.precision + 1) * r.width end

  local function sw_clamp(r, s, now)
    if not s.counts then return now end
    return max(now, s.newest * r.width)
  end

  -- The first time at or after bucket j + off when cost fits (see retry_at in Rust).
  local function sw_retry_at(r, s, j, off, full, prev, cost)
    while true do
      if sw_fits(r, full, prev, off, cost) then return j * r.width + off end
      if r.edge == INTERPOLATE and sw_fits(r, full, prev, r.width - 1, cost) then
        local no, yes = off, r.width - 1
        while yes - no > 1 do
          local mid = no + idiv(yes - no, 2)
          if sw_fits(r, full, prev, mid, cost) then yes = mid else no = mid end
        end
        return j * r.width + yes
      end
      j = j + 1
      off = 0
      prev = (j >= r.precision) and sw_count(s, j - r.precision) or 0
      full = sub0(full, prev) + sw_count(s, j)
    end
  end

  function sliding_window.check(r, s, now, cost)
    now = sw_clamp(r, s, now)
    local j, off = idiv(now, r.width), imod(now, r.width)
    local full, prev = sw_window(r, s, j)
    local charged = s.counts ~= nil and (full > 0 or prev > 0)
    if cost <= r.cap and sw_fits(r, full, prev, off, cost) then
      local reset = 0
      if cost > 0 then
        reset = sw_idle_at(r, j) - now
      elseif charged then
        reset = sw_idle_at(r, s.newest) - now
      end
      return allow(r, sw_remaining(r, full + cost, prev, off), reset)
    end
    local reset = charged and (sw_idle_at(r, s.newest) - now) or 0
    local retry = 0
    if cost <= r.cap then retry = sw_retry_at(r, s, j, off, full, prev, cost) - now end
    return deny(r, cost, retry, sw_remaining(r, full, prev, off), reset)
  end

  function sliding_window.commit(r, s, now, cost)
    if cost == 0 then return end
    now = sw_clamp(r, s, now)
    local j = idiv(now, r.width)
    local n = r.precision + 1
    if not s.counts then
      s.counts = {}
      for i = 1, n do s.counts[i] = 0 end
      s.newest = j
    end
    if j > s.newest then
      -- Buckets newest+1 ..= j reuse the slots of buckets that have left the ring.
      if j - s.newest >= n then
        for i = 1, n do s.counts[i] = 0 end
        s.total = 0
      else
        for m = s.newest + 1, j do
          local slot = imod(m, n) + 1
          s.total = sub0(s.total, s.counts[slot])
          s.counts[slot] = 0
        end
      end
      s.newest = j
    end
    local slot = imod(j, n) + 1
    s.counts[slot] = s.counts[slot] + cost
    s.total = s.total + cost
  end

  function sliding_window.idle_at(r, s)
    if s.total == 0 then return 0 end
    return sw_idle_at(r, s.newest)
  end
  return sliding_window
end

-- === token_bucket: state (level, last) in scaled units, 16 bytes =====================
-- One token is `unit` units; the bucket gains `rate` units per µs and holds `full`.

local function define_token_bucket()
  local token_bucket = {}

  function token_bucket.decode(_, v)
    if not v then return { level = 0, last = 0 } end
    if #v ~= 16 then return nil end
    local level, last = struct.unpack('<dd', v)
    return { level = level, last = last }
  end
  function token_bucket.encode(s) return struct.pack('<dd', s.level, s.last) end
  function token_bucket.copy(s) return { level = s.level, last = s.last } end

  -- (level at now, now), now never before the last refill. A product past 2^53 rounds,
  -- but only ever to more than `full`, where min() cuts it.
  local function tb_refill(r, s, now)
    now = max(now, s.last)
    return min(r.full, s.level + (now - s.last) * r.rate), now
  end

  -- µs until a bucket at level l is full.
  local function until_full(r, l) return cdiv(r.full - l, r.rate) end

  function token_bucket.check(r, s, now, cost)
    local level = tb_refill(r, s, now)
    if cost <= r.cap then
      local need = cost * r.unit
      if level >= need then
        local left = level - need
        return allow(r, idiv(left, r.unit), until_full(r, left))
      end
      return deny(r, cost, cdiv(need - level, r.rate), idiv(level, r.unit), until_full(r, level))
    end
    return deny(r, cost, 0, idiv(level, r.unit), until_full(r, level))
  end

  function token_bucket.commit(r, s, now, cost)
    local level, at = tb_refill(r, s, now)
    -- Admitted: level ≥ need. Rejected (count_rejected): empty the bucket, no debt.
    s.level, s.last = sub0(level, cost * r.unit), at
  end

  function token_bucket.idle_at(r, s)
    return s.last + cdiv(sub0(r.full, s.level), r.rate)
  end
  return token_bucket
end

-- === gcra: state the TAT, stored as a plain integer (Redis keeps it in the object) ====

local function define_gcra()
  local gcra = {}

  -- tonumber and a range check rather than a pattern: "1e3" or " 7" (only ever a hand
  -- edit) read as numbers, while NaN, negatives and fractions are refused.
  function gcra.decode(_, v)
    if not v then return { tat = 0 } end
    local tat = tonumber(v)
    if not tat or not (tat >= 0 and tat <= 9007199254740992) or tat ~= math.floor(tat) then
      return nil
    end
    return { tat = tat }
  end
  function gcra.encode(s) return string.format('%d', s.tat) end
  function gcra.copy(s) return { tat = s.tat } end

  -- e(cost): µs of emission time. Past the burst (only count_rejected charges those)
  -- the product may round, but only to more than tau, where commit clamps it.
  local function gcra_emission(r, cost)
    if cost == 1 then return r.e1 end
    return cdiv(cost * r.unit, r.rate)
  end

  -- Unit-cost requests still admitted at now if the TAT were t.
  local function slack(r, now, t) return idiv(sub0(now + r.tau, t), r.e1) end

  -- The admitted branch is the hot path of every deployment: max, slack and allow
  -- written out (a Lua call costs more than the arithmetic it wraps).
  function gcra.check(r, s, now, cost)
    local base = s.tat
    if base < now then base = now end
    if cost <= r.cap then
      local tat = base + ((cost == 1) and r.e1 or gcra_emission(r, cost))
      local late = tat - now
      if late <= r.tau then
        -- slack(r, now, tat): late ≤ tau, so now + tau − tat ≥ 0.
        local left = r.tau - late
        left = (left - math.fmod(left, r.e1)) / r.e1
        if left > r.cap then left = r.cap end
        return 0, left, late, 0
      end
      return deny(r, cost, tat - now - r.tau, slack(r, now, base), base - now)
    end
    return deny(r, cost, 0, slack(r, now, base), base - now)
  end

  function gcra.commit(r, s, now, cost, admitted)
    local tat = s.tat
    if tat < now then tat = now end
    tat = tat + ((cost == 1) and r.e1 or gcra_emission(r, cost))
    if admitted then
      s.tat = tat
    else
      -- count_rejected: empty the bucket (TAT at now + tau) but never beyond.
      s.tat = max(min(tat, now + r.tau), s.tat)
    end
  end

  function gcra.idle_at(r, s) return s.tat end
  return gcra
end

-- === distinct: state newest + (sub-window, member) per member, 8 + 12 + len each ====
-- The exact mode (limit ≤ 100, crates/core/src/algorithm/distinct.rs; the sketch mode
-- is distinct_sketch below). The state is one string: the newest sub-window charged (a
-- double), then per member its last sub-window (a double), its length (4 bytes) and
-- its bytes.

local function define_distinct()
  local distinct = {}

  function distinct.decode(_, v)
    if not v then return { newest = 0, members = {} } end
    if #v < 8 then return nil end
    local s = { newest = struct.unpack('<d', v), members = {} }
    local p = 9
    while p <= #v do
      if p + 11 > #v then return nil end
      local b, len = struct.unpack('<dI4', v, p)
      if p + 11 + len > #v then return nil end
      s.members[#s.members + 1] = { string.sub(v, p + 12, p + 11 + len), b }
      p = p + 12 + len
    end
    return s
  end
  function distinct.encode(s)
    local parts = { struct.pack('<d', s.newest) }
    for _, m in ipairs(s.members) do
      parts[#parts + 1] = struct.pack('<dI4', m[2], #m[1]) .. m[1]
    end
    return table.concat(parts)
  end
  function distinct.copy(s)
    local members = {}
    for i, m in ipairs(s.members) do members[i] = { m[1], m[2] } end
    return { newest = s.newest, members = members }
  end

  local function oldest(r, j) return sub0(j + 1, r.precision) end
  local function finish(r, newest) return (newest + r.precision) * r.width end

  function distinct.check(r, s, now, cost, member)
    local j = max(idiv(now, r.width), s.newest)
    now = max(now, j * r.width)
    local lo = oldest(r, j)
    local count, known = 0, false
    for _, m in ipairs(s.members) do
      if m[2] >= lo then
        count = count + 1
        if m[1] == member then known = true end
      end
    end
    local after = known and count or count + 1
    local function reset(newest)
      if #s.members == 0 and cost == 0 then return 0 end
      return sub0(finish(r, newest), now)
    end
    if cost > 1 then return 2, sub0(r.cap, count), reset(s.newest), 0 end
    local charged = (cost == 1) and j or s.newest
    if known then return allow(r, sub0(r.cap, count), reset(charged)) end
    if after <= r.cap then
      return allow(r, sub0(r.cap, (cost == 1) and after or count), reset(charged))
    end
    -- The cap-th most recent sub-window among the live members: once it leaves,
    -- fewer than cap remain.
    local live = {}
    for _, m in ipairs(s.members) do
      if m[2] >= lo then live[#live + 1] = m[2] end
    end
    table.sort(live, function(a, b) return a > b end)
    return deny(r, cost, finish(r, live[r.cap]) - now, sub0(r.cap, count), reset(s.newest))
  end

  function distinct.commit(r, s, now, cost, _, member)
    if cost == 0 then return end
    local j = max(idiv(now, r.width), s.newest)
    local lo = oldest(r, j)
    local kept, found = {}, false
    for _, m in ipairs(s.members) do
      if m[2] >= lo then
        if m[1] == member then
          m[2] = j
          found = true
        end
        kept[#kept + 1] = m
      end
    end
    if not found then kept[#kept + 1] = { member, j } end
    s.members, s.newest = kept, j
  end

  function distinct.idle_at(r, s)
    if #s.members == 0 then return 0 end
    return finish(r, s.newest)
  end

  return distinct
end

-- === distinct_sketch: per sub-window a HyperLogLog and a Bloom filter, in rings =====
-- Redis's own HLLs (PFCOUNT of several keys merges them) count, with the registers and
-- estimator the memory store copies (crates/core/src/algorithm/hll.rs); a Bloom filter
-- per sub-window (a hash of 64-byte blocks) tells a counted member from a new one
-- (crates/core/src/algorithm/bloom.rs). Rust computes the member's 7 bit positions (Lua
-- 5.1 cannot do the 64-bit hashes) and sends them before the member: 7 × u32 LE, then
-- the member's bytes. The filter is blocked: a member's 7 bits are in one block of 512
-- bits, and a filter key is a hash of the blocks set so far (field: the block's
-- number; value: its 64 bytes), so a group that sees one member holds one block, not
-- the whole filter. KEYS: the state key, P HLL keys, P filter keys. The state key
-- holds the newest sub-window charged and, per ring slot, the sub-window its keys hold
-- (+1; 0 = none): 8 + 8P bytes. Slot i holds sub-windows ≡ i (mod P), so at sub-window
-- j the live ones (j−P+1 ..= j) are in different slots, and j's slot holds either j or
-- a dead one, cleared before use.
--
-- A check only reads, but for a batch that touches the key twice: members the round
-- has charged but not yet written wait in `pending` (written by flush, before the state
-- is saved), and a check then counts with them added to the current HLL and puts it
-- back as it was.

local function define_distinct_sketch()
  local sketch = {}
  local HASHES = 7

  function sketch.decode(r, v, ring)
    local s = { newest = 0, held = {}, pending = {}, ring = ring, empty = true }
    if not v then
      for i = 1, r.precision do s.held[i] = 0 end
      return s
    end
    if #v ~= 8 + 8 * r.precision then return nil end
    local fields = { struct.unpack('<d' .. string.rep('d', r.precision), v) }
    s.newest, s.empty = fields[1], false
    for i = 1, r.precision do s.held[i] = fields[i + 1] end
    return s
  end
  function sketch.encode(s)
    return struct.pack('<d' .. string.rep('d', #s.held), s.newest, unpack(s.held))
  end
  function sketch.copy(s)
    local held, pending = {}, {}
    for i, h in ipairs(s.held) do held[i] = h end
    for i, m in ipairs(s.pending) do pending[i] = m end
    return { newest = s.newest, held = held, pending = pending, ring = s.ring, empty = s.empty }
  end

  local function oldest(r, j) return sub0(j + 1, r.precision) end
  local function finish(r, newest) return (newest + r.precision) * r.width end
  local function slot(r, j) return imod(j, r.precision) + 1 end
  local function filter(r, i) return r.precision + i end -- the ring index of slot i's filter

  -- A member argument: its bit positions and its bytes.
  local function parse(arg)
    if #arg < 4 * HASHES then fail('a sketched distinct member comes after its positions') end
    local at = { struct.unpack('<' .. string.rep('I4', HASHES), arg) }
    at[HASHES + 1] = nil
    return at, string.sub(arg, 4 * HASHES + 1)
  end

  -- A position's block (the hash field), byte (1-based) and bit value in that byte.
  local BLOCK = 512
  local function block_of(p) return tostring((p - imod(p, BLOCK)) / BLOCK) end
  local function byte_bit(p)
    local o = imod(p, BLOCK)
    local b = imod(o, 8)
    return (o - b) / 8 + 1, 2 ^ b
  end

  -- The bits of filter key `key` at positions `at` (one block), 0 or 1 each.
  local function bits_at(key, at)
    local block = redis.call('HGET', key, block_of(at[1]))
    local out = {}
    for k, p in ipairs(at) do
      local i, v = byte_bit(p)
      out[k] = (block and bit.band(string.byte(block, i), v) ~= 0) and 1 or 0
    end
    return out
  end

  -- The HLL keys of the slots live from sub-window `from` on, the current slot's when
  -- `with_current`.
  local function live(r, s, from, with_current, j)
    local keys, cur = {}, slot(r, j)
    for i = 1, r.precision do
      if (i == cur and with_current) or (i ~= cur and s.held[i] - 1 >= from) then
        keys[#keys + 1] = s.ring[i]
      end
    end
    return keys
  end

  local function count(keys)
    if #keys == 0 then return 0 end
    return redis.call('PFCOUNT', unpack(keys))
  end

  function sketch.check(r, s, now, cost, member_arg)
    local at = parse(member_arg)
    local j = max(idiv(now, r.width), s.newest)
    now = max(now, j * r.width)
    local lo, cur = oldest(r, j), slot(r, j)
    local current = s.held[cur] == j + 1
    local pending = #s.pending > 0
    -- Counting first checks every live key is an HLL before anything is touched, and
    -- a dead current one too, which a charge would clear.
    local before = count(live(r, s, lo, current, j))
    if not current then redis.call('PFCOUNT', s.ring[cur]) end

    -- Counted: every bit set in one live sub-window's filter. The current one's bits
    -- are its key's (when it holds j) and those of members charged earlier this round.
    local set = {}
    for _, p in ipairs(s.pending) do
      for _, pos in ipairs(p[1]) do set[pos] = true end
    end
    local known = false
    for i = 1, r.precision do
      if i == cur and (current or pending) then
        local stored = current and bits_at(s.ring[filter(r, i)], at) or {}
        local all = true
        for h = 1, HASHES do
          if stored[h] ~= 1 and not set[at[h]] then all = false break end
        end
        known = known or all
      elseif i ~= cur and s.held[i] - 1 >= lo and not known then
        local all = true
        for _, bit in ipairs(bits_at(s.ring[filter(r, i)], at)) do
          if bit == 0 then all = false break end
        end
        known = all
      end
    end

    -- Members charged earlier this round count too: added to the current HLL while this
    -- check counts, then taken out.
    local restore = nil
    if pending then
      local key = s.ring[cur]
      local saved, ttl = nil, 0
      if current then
        saved, ttl = redis.call('GET', key), redis.call('PTTL', key)
      else
        redis.call('DEL', key)
      end
      local members = {}
      for k, p in ipairs(s.pending) do members[k] = p[2] end
      redis.call('PFADD', key, unpack(members))
      current = true
      before = count(live(r, s, lo, true, j))
      restore = function()
        if saved then
          if ttl > 0 then redis.call('SET', key, saved, 'PX', ttl) else redis.call('SET', key, saved) end
        else
          redis.call('DEL', key)
        end
      end
    end

    local function reset(newest)
      if s.empty and cost == 0 then return 0 end
      return sub0(finish(r, newest), now)
    end
    local after = known and before or before + 1
    local charged = (cost == 1) and j or s.newest
    local o, rem, rs, rt
    if cost > 1 then
      o, rem, rs, rt = 2, sub0(r.cap, before), reset(s.newest), 0
    elseif known then
      o, rem, rs, rt = allow(r, sub0(r.cap, before), reset(charged))
    elseif after <= r.cap then
      o, rem, rs, rt = allow(r, sub0(r.cap, (cost == 1) and after or before), reset(charged))
    else
      -- The first sub-window edge at which the sub-windows still live count below the
      -- limit.
      local retry = (j + r.precision) * r.width
      for k = 1, r.precision - 1 do
        if count(live(r, s, oldest(r, j + k), current, j)) < r.cap then
          retry = (j + k) * r.width
          break
        end
      end
      o, rem, rs, rt = deny(r, cost, retry - now, sub0(r.cap, before), reset(s.newest))
    end
    if restore then restore() end
    return o, rem, rs, rt
  end

  function sketch.commit(r, s, now, cost, _, member_arg)
    if cost == 0 then return end
    local at, member = parse(member_arg)
    s.newest = max(idiv(now, r.width), s.newest)
    s.pending[#s.pending + 1] = { at, member }
    s.empty = false
  end

  -- Writes the pending members to the current slot's HLL and filter, with the TTL of
  -- its sub-window.
  function sketch.flush(r, s, now, margin)
    if #s.pending == 0 then return end
    local j = s.newest
    local i = slot(r, j)
    local hll, bloom = s.ring[i], s.ring[filter(r, i)]
    if s.held[i] ~= j + 1 then
      -- A sub-window's filter starts empty: blocks are added as members set bits.
      redis.call('DEL', hll, bloom)
      s.held[i] = j + 1
    end
    -- Each block touched, read once, its bits set, written once.
    local members, blocks, order = {}, {}, {}
    for k, p in ipairs(s.pending) do
      members[k] = p[2]
      local field = block_of(p[1][1])
      local bytes = blocks[field]
      if not bytes then
        local stored = redis.call('HGET', bloom, field)
        bytes = stored and { string.byte(stored, 1, BLOCK / 8) } or {}
        if not stored then for b = 1, BLOCK / 8 do bytes[b] = 0 end end
        blocks[field], order[#order + 1] = bytes, field
      end
      for _, pos in ipairs(p[1]) do
        local b, v = byte_bit(pos)
        bytes[b] = bit.bor(bytes[b], v)
      end
    end
    local fields = {}
    for _, field in ipairs(order) do
      fields[#fields + 1], fields[#fields + 2] = field, string.char(unpack(blocks[field]))
    end
    redis.call('PFADD', hll, unpack(members))
    redis.call('HSET', bloom, unpack(fields))
    local ttl = cdiv(sub0(finish(r, j), now), 1000) + margin
    redis.call('PEXPIRE', hll, ttl)
    redis.call('PEXPIRE', bloom, ttl)
    s.pending = {}
  end

  function sketch.idle_at(r, s)
    if s.empty then return 0 end
    return finish(r, s.newest)
  end

  return sketch
end

-- === the round ======================================================================

local DEFINE = { define_fixed_window, define_sliding_log, define_sliding_window,
                 define_token_bucket, define_gcra, define_distinct, define_distinct_sketch }
local defined = {}

-- Algorithm `code` (1 fixed_window … 7 distinct_sketch), or nil.
local function algorithm(code)
  local a = defined[code]
  if a == nil and DEFINE[code] then
    a = DEFINE[code]()
    defined[code] = a
  end
  return a
end

-- Redis TIME, read at most once per call: every batch on the server's clock decides
-- at the same instant.
local server_now = nil
local function server_time()
  if not server_now then
    local t = redis.call('TIME')
    server_now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  return server_now
end
local function read_now(at)
  if Argv[at] ~= 'server' then return arg(at) end
  return server_time()
end

-- The limits seen, by their ARGV text: parsed and checked once each. A library keeps
-- them from call to call (a script, for one call); past LIMITS_KEPT different texts
-- (policies reloaded many times) they are forgotten and parsed again.
local LIMITS_KEPT = 4096
local limits, limits_kept = {}, 0
local LIMIT = '^(%d+) (%d+) (%d+) (%d+) (%d+) (%d+) (%d+) (%d+)$'

-- The limit ARGV[i] names: the parameters every algorithm function takes as `r`.
local function limit(i)
  local text = Argv[i]
  local r = limits[text]
  if r then return r end
  local f = { string.match(text, LIMIT) }
  if #f ~= 8 then fail('ARGV[' .. i .. '] is not a limit (eight integers): ' .. text) end
  for k = 1, 8 do f[k] = digits(f[k], i) end
  local alg, cap, window, p1, p2, p3, p4 = f[1], f[3], f[4], f[5], f[6], f[7], f[8]
  -- Every field at once: one table of its final size.
  r = { alg = alg, algorithm = algorithm(alg), rejected = f[2], cap = cap,
        window = window, precision = 0, edge = 0, width = 0, ring = 0,
        rate = 0, unit = 0, e1 = 0, tau = 0, full = 0 }
  if not r.algorithm then fail('unknown algorithm ' .. alg) end
  if cap < 1 or window < 1 then fail('limit and window must be positive') end
  if r.rejected > 2 then fail('rejected must be 0, 1 or 2') end
  if alg == 3 then
    r.precision, r.edge = p1, p2
    if p1 < 1 or p2 > 2 or imod(window, p1) ~= 0 then
      fail('bad sliding_window precision or edge')
    end
    r.width = window / p1
  elseif alg == 6 or alg == 7 then
    r.precision = p1
    if p1 < 1 or p1 > 60 or imod(window, p1) ~= 0 then fail('bad distinct precision') end
    r.width = window / p1
    if alg == 7 then r.ring = 2 * p1 end
  elseif alg == 4 or alg == 5 then
    r.rate, r.unit, r.e1, r.tau = p1, p2, p3, p4
    if p1 < 1 or p2 < 1 or (alg == 5 and p3 < 1) then
      fail('bad rate parameters')
    end
    r.full = cap * p2
  end
  if limits_kept == LIMITS_KEPT then limits, limits_kept = {}, 0 end
  limits[text], limits_kept = r, limits_kept + 1
  return r
end

-- The stored state of `key` under limit r (`ring`: a sketch's ring keys). A value this
-- limit cannot read (another program's key, a hand edit) is an error, never silently
-- reset.
local function load(r, key, ring, value)
  if value == nil then value = redis.call('GET', key) end
  local s = r.algorithm.decode(r, value or nil, ring)
  if s == nil then fail('key ' .. key .. ' holds a value that is not state of its algorithm') end
  return s
end

-- Writes state s of `key`, with a TTL that ends when the state is the same as no
-- state (rounded up to a whole ms). A state already idle is deleted: a TTL of 0 or
-- less must never reach PEXPIRE. With the caller's clock, the TTL runs on Redis's
-- clock while the state ages on the callers': `margin` (a second) keeps a key from
-- expiring early when the two differ a little (a state kept past its idle time
-- decides the same as none). `absent`: MGET found no string at `key` (see `decide`),
-- so the write must not replace a value of another type (SET NX), and a state with
-- nothing to keep has nothing to delete.
local function save(r, key, s, now, margin, absent)
  local a = r.algorithm
  if a.flush then a.flush(r, s, now, margin) end
  local ttl = a.idle_at(r, s) - now
  if ttl > 0 then
    local rest = math.fmod(ttl, 1000) -- cdiv(ttl, 1000), written out
    ttl = (ttl - rest) / 1000 + ((rest > 0) and 1 or 0)
  end
  if ttl > 0 then
    -- Formatted as an integer: a number passed as it is goes through '%.14g', a
    -- floating-point conversion that cost a third of a SET.
    local px = string.format('%d', ttl + margin)
    if not absent then
      redis.call('SET', key, a.encode(s), 'PX', px)
    elseif not redis.call('SET', key, a.encode(s), 'PX', px, 'NX') then
      fail('key ' .. key .. ' holds a value that is not state of its algorithm')
    end
  elseif not absent then
    redis.call('DEL', key)
  end
end

-- A batch of one request (the common case): the round below without its bookkeeping
-- for several. Appends its reply to `out`.
-- `value`: the key's value read ahead by MGET (false: none), or nil to GET it.
local function single(out, key, ring, now, r, cost, member, margin, value)
  local a = r.algorithm
  local s = load(r, key, ring, value)
  local absent = value == false
  local o, remaining, reset, retry = a.check(r, s, now, cost, member)
  local denied = 0
  if o == 0 then
    if cost > 0 then
      a.commit(r, s, now, cost, true, member)
      save(r, key, s, now, margin, absent)
    end
  else
    denied = 1
    if r.rejected ~= 0 then
      a.commit(r, s, now, cost, false, member)
      save(r, key, s, now, margin, absent)
      o, remaining, reset, retry = a.check(r, s, now, cost, member)
    end
  end
  local n = #out
  out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5] =
    denied, o, remaining, reset, retry
end

-- The ring keys of a request whose state key is KEYS[k]: nil but for sketches (no
-- table for every other request).
local function ring_of(r, k)
  if r.ring == 0 then return nil end
  local ring = {}
  for i = 1, r.ring do ring[i] = Keys[k + i] end
  return ring
end

local function keys_mismatch(k, need)
  fail('the batch has ' .. k .. ' keys, its limits take ' .. need)
end

-- One batch: n requests whose k keys start after KEYS[k0], whose `now` is ARGV[at]
-- and whose limits and costs follow it (or, ARGV[at] 's', the short form: its limit
-- follows). Appends the batch's reply to `out`; raises before writing anything (to
-- Redis or to `out`).
local function round(out, k0, at, n, k)
  if Argv[at] == 's' then
    local r = limits[Argv[at + 1]] or limit(at + 1)
    if r.ring ~= 0 then keys_mismatch(1, r.ring + 1) end
    return single(out, Keys[k0 + 1], nil, server_time(), r, 1, '', 0, ahead[k0 + 1])
  end
  local now, margin = server_now, 0
  if not (now and Argv[at] == 'server') then
    now = read_now(at)
    if Argv[at] ~= 'server' then margin = 1000 end
  end

  if n == 1 then
    local r = limits[Argv[at + 1]] or limit(at + 1)
    if r.ring + 1 ~= k then keys_mismatch(k, r.ring + 1) end
    local ring = (r.ring ~= 0) and ring_of(r, k0 + 1) or nil
    return single(out, Keys[k0 + 1], ring, now, r, arg(at + 2), Argv[at + 3], margin,
                  ahead[k0 + 1])
  end

  -- Parse and validate every request before touching any key.
  local keys, rings, rs, costs, members = {}, {}, {}, {}, {}
  local next_key = k0 + 1
  for i = 1, n do
    local b = at + FIELDS * (i - 1)
    rs[i], costs[i], members[i] = limit(b + 1), arg(b + 2), Argv[b + 3]
    keys[i], rings[i] = Keys[next_key], ring_of(rs[i], next_key)
    next_key = next_key + 1 + rs[i].ring
  end
  if next_key ~= k0 + k + 1 then keys_mismatch(k, next_key - k0 - 1) end

  -- The stored state of each distinct key, read once. Requests sharing a key are
  -- checked in order against a scratch copy that carries the earlier ones' charges
  -- (round.rs: two requests for 6 against 10 are not both admitted).
  local stored, shared = {}, false
  for i = 1, n do
    local key = keys[i]
    if stored[key] == nil then
      stored[key] = load(rs[i], key, rings[i])
    else
      shared = true
    end
  end

  -- Pass 1: check.
  local decisions, scratch, denied_by = {}, {}, 0
  for i = 1, n do
    local r, key, cost, member = rs[i], keys[i], costs[i], members[i]
    local a, d = r.algorithm, nil
    if not shared then
      d = { a.check(r, stored[key], now, cost, member) }
    else
      local s = scratch[key]
      if not s then
        s = a.copy(stored[key])
        scratch[key] = s
      end
      d = { a.check(r, s, now, cost, member) }
      if d[1] == 0 then a.commit(r, s, now, cost, true, member) end
    end
    decisions[i] = d
    if d[1] ~= 0 and denied_by == 0 then denied_by = i end
  end

  -- Pass 2: charge all, or (denied) only the limits that charge rejected requests:
  -- all of them (rejected 1), or those they denied themselves (rejected 2).
  local dirty = {}
  for i = 1, n do
    local r, key, cost, member = rs[i], keys[i], costs[i], members[i]
    local a = r.algorithm
    if denied_by == 0 then
      if not shared then
        if cost > 0 then
          a.commit(r, stored[key], now, cost, true, member)
          dirty[key] = r
        end
      elseif scratch[key] then
        stored[key] = scratch[key]
        scratch[key] = nil -- only the first request of a key carries it over
        dirty[key] = r
      end
    elseif r.rejected == 1 or (r.rejected == 2 and decisions[i][1] ~= 0) then
      local s = stored[key]
      if decisions[i][1] == 0 then
        a.commit(r, s, now, cost, true, member)
        local d = { a.check(r, s, now, 0, member) }
        d[1] = 0
        decisions[i] = d
      else
        a.commit(r, s, now, cost, false, member)
        decisions[i] = { a.check(r, s, now, cost, member) }
      end
      dirty[key] = r
    elseif decisions[i][1] == 0 then
      -- Had room but was not charged: report the state as it is.
      local d = { a.check(r, stored[key], now, 0, member) }
      d[1] = 0
      decisions[i] = d
    end
  end

  for key, r in pairs(dirty) do save(r, key, stored[key], now, margin) end

  out[#out + 1] = denied_by
  for _, d in ipairs(decisions) do
    local m = #out
    out[m + 1], out[m + 2], out[m + 3], out[m + 4] = d[1], d[2], d[3], d[4]
  end
end

-- One call: reads the header whole, then decides each batch in order, each in a
-- protected call so that its failure is its own reply.
local function decide(keys, argv)
  Keys, Argv, server_now, ahead = keys, argv, nil, {}

  -- The header: B, then each batch's n, k, its `now` and 3n fields. Read whole before
  -- any batch runs: a header that does not add up is the caller's bug, and no batch of
  -- it can be trusted.
  -- A key is read ahead only for the first batch that names it: a later one must see
  -- what the earlier ones wrote.
  local batches, nargv, nk = arg(1), #argv, #keys
  local starts, at, nkeys = {}, 2, 0
  local seen, read, reading = {}, {}, 0
  for b = 1, batches do
    local m, n, k, first, width = 4 * (b - 1), 1, 1, at, 2
    if argv[at] ~= 's' or at + 1 > nargv then
      n, k = arg(at), arg(at + 1)
      first, width = at + 2, 3 + FIELDS * n
      if n < 1 or k < n or at + 2 + FIELDS * n > nargv then
        fail('batch ' .. b .. ' of ' .. batches .. ' does not fit in ' .. nargv .. ' arguments')
      end
    end
    starts[m + 1], starts[m + 2], starts[m + 3], starts[m + 4] = nkeys, first, n, k
    -- Bounded by KEYS: a header claiming more keys than the call has fails below.
    for i = nkeys + 1, math.min(nkeys + k, nk) do
      local key = keys[i]
      if key and not seen[key] then
        seen[key] = true
        if k == 1 then reading = reading + 1; read[reading] = i end
      end
    end
    nkeys = nkeys + k
    at = at + width
  end
  if batches < 1 or nkeys ~= nk or at ~= nargv + 1 then
    fail('expected ' .. nkeys .. ' keys and ' .. (at - 1) .. ' arguments for ' .. batches ..
         ' batches, got ' .. nk .. ' and ' .. nargv)
  end
  if reading > 1 then
    local names = {}
    for j = 1, reading do names[j] = keys[read[j]] end
    local values = redis.call('MGET', unpack(names))
    for j = 1, reading do ahead[read[j]] = values[j] end
  end

  local out = {}
  for b = 1, batches do
    local m, mark = 4 * (b - 1), #out
    local ok, why = pcall(round, out, starts[m + 1], starts[m + 2], starts[m + 3], starts[m + 4])
    if not ok then
      -- Whatever the batch appended before it failed goes: its reply is the reason.
      for i = #out, mark + 1, -1 do out[i] = nil end
      if type(why) == 'table' and why.err then
        out[mark + 1] = string.gsub(why.err, '^ERR ', '')
      else
        out[mark + 1] = 'spillway: ' .. tostring(why)
      end
    end
  end
  Keys, Argv = nil, nil
  return out
end
