-- The Lua twin of crates/core/src/algorithm/concurrency.rs: read the two side by side.
-- Part of the decision library; scripts/prelude.lua says how the parts are joined.

-- === concurrency: state newest + (lapse, cost, id) per hold, 8 + 20 + len each =====
-- At most cap holds live at once. The state is one string: the newest time a charge
-- saw (a double), then per hold its lapse (a double), its cost (a double), its id's
-- length (4 bytes) and its id. The member is the hold's id; the window is the lease.
-- A hold of cost 0 is a mark: a denied take, its release still to come (it takes no
-- slot; the release gives it back instead of another request's hold of that id).
-- Only a denied take of an id that is held leaves a mark (`marks`: round.lua then
-- charges it, commit with admitted false); unique ids never cost one.

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

  -- Whether a denied take of `id` leaves a mark: `id` is held.
  function concurrency.marks(_, s, now, id)
    now = max(now, s.newest)
    for _, h in ipairs(s.holds) do
      if h[3] > now and h[2] > 0 and h[1] == id then return true end
    end
    return false
  end
  local MAX_MARKS = 64 -- concurrency.rs's MAX_MARKS

  -- When the last hold lapses (marks are not holds).
  local function last_lapse(s)
    local last = 0
    for _, h in ipairs(s.holds) do
      if h[2] > 0 then last = max(last, h[3]) end
    end
    return last
  end

  -- When the last hold or mark lapses: until then the state matters.
  local function last_entry_lapse(s)
    local last = 0
    for _, h in ipairs(s.holds) do last = max(last, h[3]) end
    return last
  end

  -- The holds and marks live at `now`, in their order.
  local function kept(s, now)
    local out = {}
    for _, h in ipairs(s.holds) do
      if h[3] > now then out[#out + 1] = h end
    end
    return out
  end

  function concurrency.check(r, s, now, cost, id)
    if id == '' then fail('a concurrency hold needs an id') end
    now = max(now, s.newest)
    local used = 0
    for _, h in ipairs(s.holds) do
      if h[3] > now then used = used + h[2] end
    end
    local last = last_lapse(s)
    if cost == 0 then return allow(r, sub0(r.cap, used), sub0(last, now)) end
    if cost > r.cap then return 2, sub0(r.cap, used), sub0(last, now), 0 end
    local reset = max(last, now + r.window) - now
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

  -- A take: admitted, one more hold of `id`; denied, a mark of `id` (cost 0) that
  -- its release gives back. Past MAX_MARKS marks, the soonest to lapse goes.
  function concurrency.commit(r, s, now, cost, admitted, id)
    if cost == 0 then return end
    now = max(now, s.newest)
    local holds = kept(s, now)
    if not admitted then
      cost = 0
      local marks, soonest = 0, nil
      for i, h in ipairs(holds) do
        if h[2] == 0 then
          marks = marks + 1
          if not soonest or h[3] < holds[soonest][3] then soonest = i end
        end
      end
      if marks >= MAX_MARKS then table.remove(holds, soonest) end
    end
    holds[#holds + 1] = { id, cost, now + r.window }
    s.holds, s.newest = holds, now
  end

  -- A release: what one take of `id` left, a mark first (the soonest to lapse), else
  -- the hold of `id` soonest to lapse.
  function concurrency.refund(_, s, now, _, id)
    if id == '' then fail('a concurrency hold needs an id') end
    now = max(now, s.newest)
    local holds, at = kept(s, now), nil
    for i, h in ipairs(holds) do
      if h[1] == id then
        if not at then
          at = i
        else
          local a = holds[at]
          -- (is mark, lapse) smallest: a mark before a hold, then the sooner lapse.
          local ka, kh = (a[2] > 0) and 1 or 0, (h[2] > 0) and 1 or 0
          if kh < ka or (kh == ka and h[3] < a[3]) then at = i end
        end
      end
    end
    if at then table.remove(holds, at) end
    s.holds, s.newest = holds, now
  end

  -- A renewal of the hold `id` names: its lease starts again (the soonest to lapse of
  -- that id) whatever the others hold; lapsed, it is taken again if it fits. Returns
  -- the decision as check does.
  function concurrency.renew(r, s, now, cost, id)
    if id == '' then fail('a concurrency hold needs an id') end
    now = max(now, s.newest)
    s.holds, s.newest = kept(s, now), now
    local held = nil
    for _, h in ipairs(s.holds) do
      if h[2] > 0 and h[1] == id and (not held or h[3] < held[3]) then held = h end
    end
    if held then
      held[3] = max(held[3], now + r.window)
      return concurrency.check(r, s, now, 0, id)
    end
    local o, remaining, reset, retry = concurrency.check(r, s, now, cost, id)
    if o == 0 and cost > 0 then concurrency.commit(r, s, now, cost, true, id) end
    return o, remaining, reset, retry
  end

  -- A minute (concurrency.rs's LAPSED_KEPT, whatever the lease) after the last hold
  -- lapses: kept that long for its lapsed holds to be counted.
  function concurrency.idle_at(_, s)
    local last = last_entry_lapse(s)
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
      if h[3] <= now and h[2] > 0 then n = n + 1 end
    end
    return n
  end

  return concurrency
end
