-- RLQS shares kept in Redis, so that Envoys streaming to different Spillway replicas
-- share one bucket's rate (crates/redis/src/store/quota.rs says how it is called, the
-- server's `rlqs` module what the shares are for). The Lua twin of
-- crates/core/src/fair_share.rs, function for function: `fair` is its `fair`, `grant`
-- its `Shares::grant`, `settle` its `Shares::settle` (the Rust is the readable spec; the twins are tested against each
-- other in crates/redis/tests/it/quota.rs).
--
-- Each KEYS[i]: a bucket's hash, one field per holder (a replica's stream), its value
-- the holder's demand (requests a second), booked share (requests a second), the time
-- the booking lapses (µs) and the share last granted, packed as four doubles. A key lives as long as its
-- last booking.
--
-- ARGV[1] is the operation:
--   grant now ttl floor headroom holder, then for each key: demand rate replaces running
--     One report's buckets (on Cluster, of one slot). For each, records the holder's
--     demand and books its share until now + ttl: the least of its fair share (`fair`
--     over the live holders' demands, `headroom` floors kept for newcomers) and what the
--     others' live bookings leave of `rate`; when the bookings are over the rate (it
--     was lowered), no less than the least of the fair share and what it had. Forgets
--     the holders lapsed by `now`. `replaces` (or '') names a holder whose Envoy this
--     one is (its stream broke and it came back): its live share becomes this
--     holder's. A holder with no live share to which the others leave nothing of a
--     fair share is *withheld*: booked with none and answered nothing. `running` is
--     the share the holder's Envoy runs now: booked no lower. Replies, for each key,
--     { share, assigned (every live booking, added up), holders, withheld (1 or 0) }.
--   settle now holder, then for each key: runs
--     The holder's Envoy took an answer and runs `runs`: each live booking comes down to
--     the larger of that and the share last granted (never up). Replies the key count.
--   view now
--     Replies holder, demand, share, until for each holder of KEYS[1] live at `now`.
--   fair rate floor demand...
--     Replies `fair`'s shares (no key is read: the twins' test).
--
-- `now` is µs, or `server`: Redis's own clock (`TIME`), so that replicas whose clocks
-- differ agree on which shares live.
-- Numbers go back as text: Redis would cut a Lua number to an integer.

-- A share below this (requests a second) is none: a rounding's worth.
local TINY = 1e-9

local function fail(message)
  error({ err = 'ERR spillway quota: ' .. message })
end

local function num(v, what)
  local n = tonumber(v)
  if not n or n ~= n or n == math.huge or n < 0 then
    fail(what .. ' must be a finite number of at least 0')
  end
  return n
end

-- The time `v` says, µs: Redis's own when it is `server`.
local function clock(v)
  if v == 'server' then
    local t = redis.call('TIME')
    return tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  return num(v, 'now')
end

local function text(x)
  return string.format('%.17g', x)
end

-- `limit` shared among `demands`, beside `headroom` more of no demand (room kept for
-- newcomers): `floor` of it split evenly among all, the rest max-min fair on demand (the
-- smallest demand first; ties in the order given), what is left over split evenly among
-- those of `demands`. Their shares; with the headroom's floors they add up to `limit`.
local function fair(limit, floor, demands, headroom)
  local n, out = #demands, {}
  if n == 0 then return out end
  if limit <= 0 then
    for i = 1, n do out[i] = 0 end
    return out
  end
  local each = limit * floor / (n + headroom)
  for i = 1, n do out[i] = each end
  local left = limit - each * (n + headroom)
  local order = {}
  for i = 1, n do order[i] = i end
  table.sort(order, function(a, b)
    if demands[a] ~= demands[b] then return demands[a] < demands[b] end
    return a < b
  end)
  for k, i in ipairs(order) do
    local even = left / (n - k + 1)
    local more = math.min(math.max(demands[i] - each, 0), even)
    out[i] = out[i] + more
    left = left - more
  end
  for i = 1, n do out[i] = out[i] + left / n end
  return out
end

-- The live holders at `now`, in name order: { name, demand, share, until } each; the
-- lapsed ones are deleted (`forget`).
local function holders(key, now, forget)
  local flat = redis.call('HGETALL', key)
  local live, gone = {}, {}
  for i = 1, #flat, 2 do
    local demand, share, untl = struct.unpack('<dddd', flat[i + 1])
    if untl > now then
      live[#live + 1] = { flat[i], demand, share, untl }
    else
      gone[#gone + 1] = flat[i]
    end
  end
  if forget and #gone > 0 then redis.call('HDEL', key, unpack(gone)) end
  table.sort(live, function(a, b) return a[1] < b[1] end)
  return live
end

local op = ARGV[1]

if op == 'fair' then
  local rate, floor = num(ARGV[2], 'rate'), num(ARGV[3], 'floor')
  local demands = {}
  for i = 4, #ARGV do demands[#demands + 1] = num(ARGV[i], 'a demand') end
  local out = {}
  for i, s in ipairs(fair(rate, floor, demands, 0)) do out[i] = text(s) end
  return out
end

if op == 'view' then
  local now = clock(ARGV[2])
  local out = {}
  for _, h in ipairs(holders(KEYS[1], now, false)) do
    out[#out + 1] = h[1]
    out[#out + 1] = text(h[2])
    out[#out + 1] = text(h[3])
    out[#out + 1] = text(h[4])
  end
  return out
end

if op == 'settle' then
  -- `Shares::settle`: the holder's Envoy took an answer and runs `runs`; its live
  -- booking comes down to the larger of that and what it was last granted.
  local now, holder = clock(ARGV[2]), ARGV[3]
  if #ARGV ~= 3 + #KEYS then fail('a settle takes one argument a key') end
  for i, key in ipairs(KEYS) do
    local runs = num(ARGV[3 + i], 'runs')
    local packed = redis.call('HGET', key, holder)
    if packed then
      local demand, share, untl, granted = struct.unpack('<dddd', packed)
      if untl > now then
        local settled = math.min(share, math.max(granted, runs))
        redis.call('HSET', key, holder, struct.pack('<dddd', demand, settled, untl, granted))
      end
    end
  end
  return #KEYS
end

if op ~= 'grant' then fail('unknown operation') end

-- One bucket's grant (`Shares::grant`).
local function grant(key, holder, now, ttl, floor, headroom, demand, rate, replaces, running)
  local had = 0
  local live = holders(key, now, true)
  for _, h in ipairs(live) do
    if h[1] == holder then had = math.max(had, h[3]) end
  end
  local others, demands, booked, last = {}, {}, 0, now + ttl
  for _, h in ipairs(live) do
    if h[1] == replaces and replaces ~= holder then
      -- Its Envoy is this holder's: what it runs is this holder's share.
      had = math.max(had, h[3])
      redis.call('HDEL', key, replaces)
    elseif h[1] ~= holder then
      others[#others + 1] = h
    end
  end
  for _, h in ipairs(others) do
    demands[#demands + 1] = h[2]
    booked = booked + h[3]
    last = math.max(last, h[4])
  end
  demands[#demands + 1] = demand
  local mine = #demands
  local fairly = fair(rate, floor, demands, headroom)[mine]
  local share = math.max(math.min(fairly, rate - booked), 0)
  if booked + had > rate + TINY then share = math.max(share, math.min(fairly, had)) end
  if share < TINY then share = 0 end
  local withheld = 0
  if share == 0 and fairly >= TINY and had < TINY then withheld = 1 end
  local keep = math.max(share, running)
  redis.call('HSET', key, holder, struct.pack('<dddd', demand, keep, now + ttl, share))
  -- Until the last booking lapses, and a second for clocks that differ a little.
  redis.call('PEXPIRE', key, string.format('%d', math.ceil((last - now) / 1000) + 1000))
  return { text(share), text(booked + keep), mine, withheld }
end

local now = clock(ARGV[2])
local ttl, floor, headroom = num(ARGV[3], 'ttl'), num(ARGV[4], 'floor'), num(ARGV[5], 'headroom')
local holder = ARGV[6]
if holder == '' or ttl < 1 then fail('a grant needs a holder and a TTL') end
if #ARGV ~= 6 + 4 * #KEYS then fail('a grant takes four arguments a key') end
local out = {}
for i, key in ipairs(KEYS) do
  local at = 6 + 4 * (i - 1)
  local reply = grant(key, holder, now, ttl, floor, headroom, num(ARGV[at + 1], 'demand'),
    num(ARGV[at + 2], 'rate'), ARGV[at + 3], num(ARGV[at + 4], 'running'))
  for _, v in ipairs(reply) do out[#out + 1] = v end
end
return out
