-- The Lua twin of crates/core/src/store/round.rs, and the call that carries the rounds: read the two side by side.
-- Part of the decision library; scripts/prelude.lua says how the parts are joined.

-- === the round ======================================================================

local DEFINE = { define_fixed_window, define_sliding_log, define_sliding_window,
                 define_token_bucket, define_gcra, define_distinct, define_distinct_sketch,
                 define_record, define_concurrency, define_shares }
local defined = {}

-- Algorithm `code` (1 fixed_window … 7 distinct_sketch, 8 a record: record.lua,
-- 9 concurrency, 10 shares), or nil.
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
local LIMIT_WAITING = '^(%d+) (%d+) (%d+) (%d+) (%d+) (%d+) (%d+) (%d+) (%d+)$'

-- The limit ARGV[i] names: the parameters every algorithm function takes as `r`.
local function limit(i)
  local text = Argv[i]
  local r = limits[text]
  if r then return r end
  -- Budget alerts: ` a` and the units of use at which each is reached.
  local numbers, marks = string.match(text, '^(.-) a([%d,]+)$')
  local f = { string.match(numbers or text, LIMIT) }
  if #f ~= 8 and not numbers then f = { string.match(text, LIMIT_WAITING) } end
  if #f ~= 8 and #f ~= 9 then
    fail('ARGV[' .. i .. '] is not a limit (eight or nine integers): ' .. text)
  end
  for k = 1, #f do f[k] = digits(f[k], i) end
  local alg, cap, window, p1, p2, p3, p4 = f[1], f[3], f[4], f[5], f[6], f[7], f[8]
  -- Every field at once: one table of its final size.
  r = { alg = alg, algorithm = algorithm(alg), rejected = f[2], cap = cap,
        window = window, precision = 0, edge = 0, width = 0, ring = 0,
        rate = 0, unit = 0, e1 = 0, tau = 0, full = 0, wait = f[9] or 0, alerts = false }
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
  elseif alg == 4 or alg == 5 or alg == 10 then
    r.rate, r.unit, r.e1, r.tau = p1, p2, p3, p4
    if p1 < 1 or p2 < 1 or (alg ~= 4 and p3 < 1) then
      fail('bad rate parameters')
    end
    r.full = cap * p2
  elseif r.wait > 0 and alg ~= 9 then
    fail('a wait applies to token_bucket, gcra, shares and concurrency only')
  end
  if marks then
    if alg ~= 1 or r.rejected ~= 0 then
      fail('budget alerts apply to a fixed window that counts what it admits')
    end
    local at = {}
    for units in string.gmatch(marks, '[^,]+') do
      at[#at + 1] = digits(units, i)
      if at[#at] < 1 or (#at > 1 and at[#at] < at[#at - 1]) or #at > 8 then
        fail('budget alerts must be at most 8 units of use, none below the one before: ' ..
             marks)
      end
    end
    r.alerts = at
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
-- nothing to keep has nothing to delete. An algorithm with `patch` (sliding_window)
-- may write a state read from `key` in place instead; it says whether the idle time,
-- and so the TTL, moved.
local function save(r, key, s, now, margin, absent)
  local a = r.algorithm
  if a.write then return a.write(r, key, s) end
  if a.flush then a.flush(r, s, now, margin) end
  local ttl = a.idle_at(r, s) - now
  if ttl > 0 then
    local rest = math.fmod(ttl, 1000) -- cdiv(ttl, 1000), written out
    ttl = (ttl - rest) / 1000 + ((rest > 0) and 1 or 0)
  end
  if ttl > 0 then
    local patched = nil
    if a.patch and not absent then patched = a.patch(r, key, s) end
    if patched == false then return end -- in place, the TTL still right
    -- Formatted as an integer: a number passed as it is goes through '%.14g', a
    -- floating-point conversion that cost a third of a SET.
    local px = string.format('%d', ttl + margin)
    if patched then
      redis.call('PEXPIRE', key, px)
    elseif not absent then
      redis.call('SET', key, a.encode(s), 'PX', px)
    elseif not redis.call('SET', key, a.encode(s), 'PX', px, 'NX') then
      fail('key ' .. key .. ' holds a value that is not state of its algorithm')
    end
  elseif not absent then
    redis.call('DEL', key)
  end
end

-- Usage of `cost` charged to s in full, or (`refund`) given back.
local function charge_usage(a, r, s, now, cost, member, refund)
  if not refund then return a.commit(r, s, now, cost, true, member) end
  if not a.refund then fail('a refund on a limit that cannot give units back') end
  a.refund(r, s, now, cost, member)
end

-- The outcome a decision replies: 0 admitted, 1 denied, 2 a cost past the capacity,
-- 3 admitted by borrowing (`check`'s fifth number 1, shares.lua's), 4 denied and
-- queued (its fifth number 2, concurrency.lua's).
local function outcome(o, mark)
  if o == 0 and mark == 1 then return 3 end
  if o == 1 and mark == 2 then return 4 end
  return o
end

-- The budget alerts a round reached on state s: those reached before it (`from`),
-- after it, and the use after it (reply.rs `reply_len`).
local function reached(out, from, s)
  local n = #out
  out[n + 1], out[n + 2], out[n + 3] = from, s.mark, s.count
end

-- A batch of one request (the common case): the round below without its bookkeeping
-- for several. Appends its reply to `out`.
-- `value`: the key's value read ahead by MGET (false: none), or nil to GET it.
-- `usage`: charged in full, whatever the state holds (`refund`: given back); its
-- decision is a look after it.
local function single(out, key, ring, now, r, cost, member, margin, value, usage, refund)
  local a = r.algorithm
  local s = load(r, key, ring, value)
  local absent = value == false
  local stale = a.lapsed and a.lapsed(r, s, now)
  local from = false
  if r.alerts then
    a.with_marks(s, key)
    from = s.mark
  end
  if usage then
    local n, o, remaining, reset, retry = #out, nil, nil, nil, nil
    if cost > 0 and a.renew and not refund then
      o, remaining, reset, retry = a.renew(r, s, now, cost, member)
      save(r, key, s, now, margin, absent)
    else
      if cost > 0 then
        charge_usage(a, r, s, now, cost, member, refund)
        save(r, key, s, now, margin, absent)
      end
      o, remaining, reset, retry = a.check(r, s, now, 0, member)
    end
    out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5] = 0, o, remaining, reset, retry
    if stale then out[n + 6] = sub0(stale, a.lapsed(r, s, now)) end
    if from then reached(out, from, s) end
    return
  end
  local o, remaining, reset, retry, borrowed = a.check(r, s, now, cost, member)
  local denied = 0
  if o == 0 then
    if cost > 0 then
      a.commit(r, s, now, cost, true, member)
      save(r, key, s, now, margin, absent)
    end
  else
    denied = 1
    if a.marks and cost > 0 and a.marks(r, s, now, member) then
      -- A denied take of a held id leaves a mark its release gives back.
      a.commit(r, s, now, cost, false, member)
      save(r, key, s, now, margin, absent)
    elseif r.rejected ~= 0 then
      -- Charged anyway: the decision after the charge, with what remained when the
      -- request came (a denial's remaining: how far it was from fitting).
      a.commit(r, s, now, cost, false, member)
      save(r, key, s, now, margin, absent)
      local _
      o, _, reset, retry = a.check(r, s, now, cost, member)
    end
  end
  local n = #out
  out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5] =
    denied, outcome(o, borrowed), remaining, reset, retry
  if stale then out[n + 6] = sub0(stale, a.lapsed(r, s, now)) end
  if from then reached(out, from, s) end
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
    local cost, usage, refund = cost_arg(at + 2)
    return single(out, Keys[k0 + 1], ring, now, r, cost, Argv[at + 3], margin,
                  ahead[k0 + 1], usage, refund)
  end

  -- Parse and validate every request before touching any key.
  local keys, rings, rs, costs, members, usage, refund = {}, {}, {}, {}, {}, {}, {}
  local next_key = k0 + 1
  for i = 1, n do
    local b = at + FIELDS * (i - 1)
    rs[i], members[i] = limit(b + 1), Argv[b + 3]
    costs[i], usage[i], refund[i] = cost_arg(b + 2)
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
  -- The budget alerts a state has reached, read for the requests with alerts, on the
  -- first request of their key with them (round.rs).
  local marked = {}
  for i = 1, n do
    local key = keys[i]
    if rs[i].alerts and not marked[key] then
      rs[i].algorithm.with_marks(stored[key], key)
      marked[key] = { i, stored[key].mark }
    end
  end

  -- Pass 1: check (usage is pass 3's: charged whatever the others decide).
  local decisions, scratch, denied_by = {}, {}, 0
  for i = 1, n do
    local r, key, cost, member = rs[i], keys[i], costs[i], members[i]
    local a, d = r.algorithm, nil
    if usage[i] then
      d = { 0 }
    elseif not shared then
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

  -- Holds lapsed in the states as stored: those a charge below clears are counted,
  -- on the first request of their key (round.rs).
  local stale = {}
  for i = 1, n do
    local a, key = rs[i].algorithm, keys[i]
    if a.lapsed and not stale[key] then stale[key] = { i, a.lapsed(rs[i], stored[key], now) } end
  end

  -- Pass 2: charge all, or (denied) only the limits that charge rejected requests:
  -- all of them (rejected 1), or those they denied themselves (rejected 2).
  local dirty = {}
  for i = 1, n do
    local r, key, cost, member = rs[i], keys[i], costs[i], members[i]
    local a = r.algorithm
    if usage[i] then
      -- Pass 3's.
    elseif denied_by == 0 then
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
    elseif a.marks and cost > 0 and a.marks(r, stored[key], now, member) then
      -- A denied take of a held id leaves a mark its release gives back
      -- (concurrency.lua); one that had room reports the state as it is.
      a.commit(r, stored[key], now, cost, false, member)
      if decisions[i][1] == 0 then
        local d = { a.check(r, stored[key], now, 0, member) }
        d[1], d[4] = 0, 0 -- admitted: the fourth number is a wait, none here
        decisions[i] = d
      end
      dirty[key] = r
    elseif r.rejected == 1 or (r.rejected == 2 and decisions[i][1] ~= 0) then
      local s = stored[key]
      if decisions[i][1] == 0 then
        a.commit(r, s, now, cost, true, member)
        local d = { a.check(r, s, now, 0, member) }
        d[1], d[4] = 0, 0 -- admitted: the fourth number is a wait, none here
        decisions[i] = d
      else
        -- As `single`: after the charge, with what remained when the request came.
        local left = decisions[i][2]
        a.commit(r, s, now, cost, false, member)
        local d = { a.check(r, s, now, cost, member) }
        d[2] = left
        decisions[i] = d
      end
      dirty[key] = r
    elseif decisions[i][1] == 0 then
      -- Had room but was not charged: report the state as it is.
      local d = { a.check(r, stored[key], now, 0, member) }
      d[1], d[4] = 0, 0
      decisions[i] = d
    end
  end

  -- Pass 3: usage, in full, on the states as the round left them; refunds.
  for i = 1, n do
    if usage[i] then
      local r, key, member = rs[i], keys[i], members[i]
      local a = r.algorithm
      if costs[i] > 0 and a.renew and not refund[i] then
        decisions[i] = { a.renew(r, stored[key], now, costs[i], member) }
        dirty[key] = r
      else
        if costs[i] > 0 then
          charge_usage(a, r, stored[key], now, costs[i], member, refund[i])
          dirty[key] = r
        end
        decisions[i] = { a.check(r, stored[key], now, 0, member) }
      end
    end
  end

  for key, r in pairs(dirty) do save(r, key, stored[key], now, margin) end

  out[#out + 1] = denied_by
  for _, d in ipairs(decisions) do
    local m = #out
    out[m + 1], out[m + 2], out[m + 3], out[m + 4] = outcome(d[1], d[5]), d[2], d[3], d[4]
  end
  -- Then one number per hold request (`concurrency`): the lapsed holds it cleared.
  for i = 1, n do
    local a, at = rs[i].algorithm, stale[keys[i]]
    if a.lapsed then
      out[#out + 1] = (at[1] == i) and sub0(at[2], a.lapsed(rs[i], stored[keys[i]], now)) or 0
    end
  end
  -- Then three per request with budget alerts (`reached`; zeros where an earlier
  -- request of its key reports them).
  for i = 1, n do
    if rs[i].alerts then
      local at = marked[keys[i]]
      if at[1] == i then
        reached(out, at[2], stored[keys[i]])
      else
        reached(out, 0, { mark = 0, count = 0 })
      end
    end
  end
end

-- A batch that failed: whatever it appended to `out` after `mark` goes, and its reply
-- is the reason.
local function failed(out, mark, why)
  for i = #out, mark + 1, -1 do out[i] = nil end
  if type(why) == 'table' and why.err then
    out[mark + 1] = string.gsub(why.err, '^ERR ', '')
  else
    out[mark + 1] = 'spillway: ' .. tostring(why)
  end
end

local NOTHING_AHEAD = {}

-- One call: reads the header whole, then decides each batch in order, each in a
-- protected call so that its failure is its own reply.
local function decide(keys, argv)
  Keys, Argv, server_now, ahead = keys, argv, nil, NOTHING_AHEAD

  -- The most common call, one batch in the short form (one request on one key): the
  -- header below would find exactly that, and nothing to read ahead.
  if argv[2] == 's' and #argv == 3 and #keys == 1 and argv[1] == '1' then
    local out = {}
    local ok, why = pcall(round, out, 0, 2, 1, 1)
    if not ok then failed(out, 0, why) end
    Keys, Argv = nil, nil
    return out
  end

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
    ahead = {}
    local names = {}
    for j = 1, reading do names[j] = keys[read[j]] end
    local values = redis.call('MGET', unpack(names))
    for j = 1, reading do ahead[read[j]] = values[j] end
  end

  local out = {}
  for b = 1, batches do
    local m, mark = 4 * (b - 1), #out
    local ok, why = pcall(round, out, starts[m + 1], starts[m + 2], starts[m + 3], starts[m + 4])
    if not ok then failed(out, mark, why) end
  end
  Keys, Argv = nil, nil
  return out
end
