-- RLQS shares kept in Redis, so that Envoys streaming to different Spillway replicas
-- share one bucket's limit (crates/redis/src/quota.rs says how it is called, and
-- crates/server/src/rlqs/quotas.rs what the shares are for). `fair` is the Lua twin of
-- crates/server/src/rlqs/shares.rs's `shares`: read the two side by side.
--
-- KEYS[1]: a bucket's hash, one field per holder (a replica's stream), its value the
-- holder's demand (requests a second), share (requests a second) and the time its
-- share lapses (µs), packed as three doubles. The key lives as long as its last share.
--
-- ARGV[1] is the operation:
--   grant holder demand rate now ttl floor headroom replaces
--     Records the holder's demand and grants it, until now + ttl, the least of its
--     fair share (`fair` over the live holders' demands, and `headroom` more holders
--     of no demand: room kept for an Envoy that comes to another replica) and what the
--     other holders' live shares leave of `rate`: the live shares never add up to more
--     than `rate`, whatever the replicas do at once. Forgets the holders lapsed by
--     `now`. `replaces` (or '') names a holder whose Envoy this one is (its stream
--     broke and it came back): its live share becomes this holder's. A holder with no
--     live share to which the others' live shares leave nothing of a fair share is
--     *withheld*: booked with no share (its demand counted, so the others make room
--     at their next grants) and answered nothing, so its Envoy keeps what it runs
--     rather than a denial. Replies { share, assigned (every live share, added up), holders,
--     withheld (1 or 0) }.
--   view now
--     Replies holder, demand, share, until for each holder live at `now`.
--
-- `now` is µs, or `server`: Redis's own clock (`TIME`), so that replicas whose clocks
-- differ agree on which shares live.
--   fair rate floor demand...
--     Replies `fair`'s shares (no key is read: the twins' test).
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

-- `limit` shared among `demands`: `floor` of it split evenly, the rest max-min fair on
-- demand (the smallest demand first; ties in the order given), what is left over split
-- evenly. Adds up to `limit`.
local function fair(limit, floor, demands)
  local n, out = #demands, {}
  if n == 0 then return out end
  if limit <= 0 then
    for i = 1, n do out[i] = 0 end
    return out
  end
  local each = limit * floor / n
  for i = 1, n do out[i] = each end
  local left = limit - each * n
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

-- The live holders at `now`: { name, demand, share, until } each; the lapsed ones are
-- deleted (`forget`).
local function holders(key, now, forget)
  local flat = redis.call('HGETALL', key)
  local live, gone = {}, {}
  for i = 1, #flat, 2 do
    local demand, share, untl = struct.unpack('<ddd', flat[i + 1])
    if untl > now then
      live[#live + 1] = { flat[i], demand, share, untl }
    else
      gone[#gone + 1] = flat[i]
    end
  end
  if forget and #gone > 0 then redis.call('HDEL', key, unpack(gone)) end
  return live
end

local op = ARGV[1]

if op == 'fair' then
  local rate, floor = num(ARGV[2], 'rate'), num(ARGV[3], 'floor')
  local demands = {}
  for i = 4, #ARGV do demands[#demands + 1] = num(ARGV[i], 'a demand') end
  local out = {}
  for i, s in ipairs(fair(rate, floor, demands)) do out[i] = text(s) end
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

if op ~= 'grant' then fail('unknown operation') end

local holder, replaces = ARGV[2], ARGV[9] or ''
local args = {}
for i, what in ipairs({ 'demand', 'rate', 'now', 'ttl', 'floor', 'headroom' }) do
  if what ~= 'now' then args[what] = num(ARGV[i + 2], what) end
end
local now, rate = clock(ARGV[5]), args.rate
if holder == '' or args.ttl < 1 then fail('a grant needs a holder and a TTL') end

local live = holders(KEYS[1], now, true)
local demands, others, last, had = {}, 0, now + args.ttl, 0
for _, h in ipairs(live) do
  if h[1] == holder then
    had = h[3]
  elseif h[1] == replaces then
    -- Its Envoy is this holder's: what it runs is this holder's share.
    had = math.max(had, h[3])
    redis.call('HDEL', KEYS[1], replaces)
  else
    demands[#demands + 1] = h[2]
    others = others + h[3]
    last = math.max(last, h[4])
  end
end
demands[#demands + 1] = args.demand
local mine = #demands
for _ = 1, args.headroom do demands[#demands + 1] = 0 end
local fairly = fair(rate, args.floor, demands)[mine]
-- Never past what the others hold (they shrink at their own reports).
local share = math.max(0, math.min(fairly, rate - others))
if share < TINY then share = 0 end
local withheld = 0
if share == 0 and fairly >= TINY and had < TINY then
  withheld, share = 1, 0
end

redis.call('HSET', KEYS[1], holder, struct.pack('<ddd', args.demand, share, now + args.ttl))
-- Until the last share lapses, and a second for clocks that differ a little.
local ms = math.ceil((last - now) / 1000) + 1000
redis.call('PEXPIRE', KEYS[1], string.format('%d', ms))
return { text(share), text(others + share), mine, withheld }
