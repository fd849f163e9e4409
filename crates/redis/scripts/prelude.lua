-- Spillway's decision library: decision rounds for every algorithm, in one atomic call.
--
-- The library is several files joined at build time, in this order, into the one
-- source Redis loads (`script.rs`, `decide_lua!`):
--   prelude.lua                   this header, argument readers, integer arithmetic
--   algorithm/<name>.lua          one per algorithm, named after its Rust twin in
--                                 crates/core/src/algorithm/<name>.rs
--   record.lua                    a record kept with its batch (a reservation's),
--                                 twin of crates/core/src/store/records.rs
--   round.lua                     a round (crates/core/src/store/round.rs) and `decide`
-- They share one Lua chunk: a `local` defined in an earlier file is seen by the later.
--
-- The Rust algorithms in crates/core/src/algorithm/ are the specification: every
-- function mirrors the Rust function of the same name, decision for decision (the
-- conformance tables and a differential property test hold the two together).
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
-- The library defines `decide(keys, argv)`; Rust sends it two ways (script.rs): as a
-- function library (`FUNCTION LOAD` once, then `FCALL`), whose body runs once, so
-- the algorithms are defined and the limits parsed once for many calls; or as a
-- script (`EVALSHA`) ending in `return decide(KEYS, ARGV)`, whose body runs every
-- call. Nothing here may assume either: per-call state is reset by `decide`.
--
-- A cost prefixed `r` on a concurrency limit is a release: the hold its member names
-- is given back.
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
--                             7 distinct (sketched), 8 a record kept when
--                             the batch is charged (record.lua: its window is
--                             the record's TTL, its member the record),
--                             9 concurrency (its window is the lease),
--                             10 shares (the parent's numbers as gcra's;
--                             its member carries the child's terms:
--                             algorithm/shares.lua)
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
--                     wait    (a ninth, optional) token_bucket, gcra, shares: the
--                             longest wait in µs a request may be admitted
--                             after (Limit::max_wait); 0 when absent
--            cost   units to charge (0 = peek)
--            member what a distinct limit counts, the id of a concurrency hold,
--                   a shares request's terms and child (shares.lua);
--                   for a sketched distinct limit, after its 7
--                   filter bit positions (u32 LE each); for a fixed window, the
--                   caller's now in µs (digits), whose window its key names; empty
--                   for the others
--
-- Returns one flat array (no table per batch), per batch in order: either denied_by
-- (0 = admitted, else the 1-based request), then per request outcome (0 allowed,
-- 1 denied, 2 cost exceeds capacity), remaining, reset_after µs, retry_after µs (for an
-- admission, its wait: 0 unless admitted after one); or,
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

-- Reads ARGV[i] as a request's cost: an integer as `arg` reads it, or, prefixed `u`,
-- usage already spent (charged in full, into debt: round.rs's pass 3), or, prefixed
-- `r`, units given back (a reservation's unused estimate: pass 3 too). Returns the
-- cost, whether it is usage and whether it is a refund.
local function cost_arg(i)
  local s = Argv[i]
  local b = s ~= nil and string.byte(s, 1)
  if b == 117 or b == 114 then -- 'u', 'r'
    local n = string.sub(s, 2)
    if not string.find(n, '^%d+$') then
      fail('ARGV[' .. i .. '] is not a usage: ' .. s)
    end
    return digits(n, i), true, b == 114
  end
  return arg(i), false, false
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
-- Admitted after `wait` µs, its slot reserved then: nothing remains now.
local function waited(wait, reset)
  return 0, 0, reset, wait
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
