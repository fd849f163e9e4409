-- The Lua twin of crates/core/src/algorithm/concurrency.rs: read the two side by side.
-- Part of the decision library; scripts/prelude.lua says how the parts are joined.

-- === concurrency: state newest + (lapse, cost, id) per hold, 8 + 20 + len each =====
-- At most cap holds live at once. The state is one string: the newest time a charge
-- saw (a double), then per hold its lapse (a double), its cost (a double), its id's
-- length (4 bytes) and its id. The member is the hold's id; the window is the lease.

local function define_concurrency()
  local concurrency = {}

  function concurrency.decode(_, v)
    if not v then return { newest = 0, holds = {} } end
    if #v < 8 then return nil end
    local s = { newest = struct.unpack('<d', v), holds = {} }
    local p = 9
    while p <= #v do
      if p + 19 > #v then return nil end
      local lapse, cost, len = struct.unpack('<ddI4', v, p)
      if p + 19 + len > #v then return nil end
      s.holds[#s.holds + 1] = { string.sub(v, p + 20, p + 19 + len), cost, lapse }
      p = p + 20 + len
    end
    return s
  end
  function concurrency.encode(s)
    local parts = { struct.pack('<d', s.newest) }
    for _, h in ipairs(s.holds) do
      parts[#parts + 1] = struct.pack('<ddI4', h[3], h[2], #h[1]) .. h[1]
    end
    return table.concat(parts)
  end
  function concurrency.copy(s)
    local holds = {}
    for i, h in ipairs(s.holds) do holds[i] = { h[1], h[2], h[3] } end
    return { newest = s.newest, holds = holds }
  end

  local function last_lapse(s)
    local last = 0
    for _, h in ipairs(s.holds) do last = max(last, h[3]) end
    return last
  end

  function concurrency.check(r, s, now, cost, id)
    if id == '' then fail('a concurrency hold needs an id') end
    now = max(now, s.newest)
    local used, held = 0, false
    for _, h in ipairs(s.holds) do
      if h[3] > now then
        used = used + h[2]
        if h[1] == id then held = true end
      end
    end
    local last = last_lapse(s)
    if cost == 0 then return allow(r, sub0(r.cap, used), sub0(last, now)) end
    if cost > r.cap then return 2, sub0(r.cap, used), sub0(last, now), 0 end
    local reset = max(last, now + r.window) - now
    if held then return allow(r, sub0(r.cap, used), reset) end
    if used + cost <= r.cap then return allow(r, r.cap - used - cost, reset) end
    -- When enough live holds lapse, soonest first, for the cost to fit.
    local live = {}
    for _, h in ipairs(s.holds) do
      if h[3] > now then live[#live + 1] = h end
    end
    table.sort(live, function(a, b)
      if a[3] ~= b[3] then return a[3] < b[3] end
      return a[2] < b[2]
    end)
    local left, at = used, 0
    for _, h in ipairs(live) do
      left = left - h[2]
      if left + cost <= r.cap then
        at = h[3]
        break
      end
    end
    return deny(r, cost, at - now, sub0(r.cap, used), sub0(last, now))
  end

  function concurrency.commit(r, s, now, cost, _, id)
    if cost == 0 then return end
    now = max(now, s.newest)
    local lapse, kept, found = now + r.window, {}, false
    for _, h in ipairs(s.holds) do
      if h[3] > now then
        if h[1] == id then
          h[3] = max(h[3], lapse)
          found = true
        end
        kept[#kept + 1] = h
      end
    end
    if not found then kept[#kept + 1] = { id, cost, lapse } end
    s.holds, s.newest = kept, now
  end

  -- A release: the hold named `id` given back.
  function concurrency.refund(_, s, now, _, id)
    if id == '' then fail('a concurrency hold needs an id') end
    now = max(now, s.newest)
    local kept = {}
    for _, h in ipairs(s.holds) do
      if h[3] > now and h[1] ~= id then kept[#kept + 1] = h end
    end
    s.holds, s.newest = kept, now
  end

  -- A minute (concurrency.rs's LAPSED_KEPT, whatever the lease) after the last hold
  -- lapses: kept that long for its lapsed holds to be counted.
  function concurrency.idle_at(_, s)
    local last = last_lapse(s)
    if last == 0 then return 0 end
    return last + 60000000
  end

  -- Holds lapsed by `now` and still kept: the next charge clears them. None once the
  -- state is idle.
  function concurrency.lapsed(r, s, now)
    now = max(now, s.newest)
    if concurrency.idle_at(r, s) <= now then return 0 end
    local n = 0
    for _, h in ipairs(s.holds) do
      if h[3] <= now then n = n + 1 end
    end
    return n
  end

  return concurrency
end
