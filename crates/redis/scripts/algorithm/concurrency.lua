-- The Lua twin of crates/core/src/algorithm/concurrency.rs: read the two side by side.
-- Part of the decision library; scripts/prelude.lua says how the parts are joined.

-- === concurrency: state newest + (lapse, cost, id) per hold, 8 + 20 + len each =====
-- At most cap holds live at once. The state is one string: the newest time a charge
-- saw (a double), then per hold its lapse (a double), its cost (a double), its id's
-- length (4 bytes) and its id; then per waiter the same, its cost negated and its id
-- its nonce. The member is the hold's id, or with a wait a ticket (its kind, the
-- nonce, the id: concurrency.rs's Ticket); the window is the lease.
-- A hold of cost 0 is a mark: a denied take, its release still to come (it takes no
-- slot; the release gives it back instead of another request's hold of that id).
-- Only a denied take of an id that is held leaves a mark (`marks`: round.lua then
-- charges it, commit with admitted false); unique ids never cost one. A queued take
-- is charged the same way: commit with admitted false keeps its place.

local function define_concurrency()
  local concurrency = {}

  function concurrency.decode(_, v)
    if not v then return { newest = 0, holds = {}, waiters = {} } end
    if #v < 8 then return nil end
    local s = { newest = struct.unpack('<d', v), holds = {}, waiters = {} }
    local p = 9
    while p <= #v do
      if p + 19 > #v then return nil end
      local lapse, cost, len = struct.unpack('<ddI4', v, p)
      if p + 19 + len > #v then return nil end
      local id = string.sub(v, p + 20, p + 19 + len)
      if cost < 0 then
        s.waiters[#s.waiters + 1] = { id, -cost, lapse }
      else
        s.holds[#s.holds + 1] = { id, cost, lapse }
      end
      p = p + 20 + len
    end
    return s
  end
  function concurrency.encode(s)
    local parts = { struct.pack('<d', s.newest) }
    for _, h in ipairs(s.holds) do
      parts[#parts + 1] = struct.pack('<ddI4', h[3], h[2], #h[1]) .. h[1]
    end
    for _, w in ipairs(s.waiters) do
      parts[#parts + 1] = struct.pack('<ddI4', w[3], -w[2], #w[1]) .. w[1]
    end
    return table.concat(parts)
  end
  function concurrency.copy(s)
    local holds, waiters = {}, {}
    for i, h in ipairs(s.holds) do holds[i] = { h[1], h[2], h[3] } end
    for i, w in ipairs(s.waiters) do waiters[i] = { w[1], w[2], w[3] } end
    return { newest = s.newest, holds = holds, waiters = waiters }
  end

  local MAX_MARKS = 64 -- concurrency.rs's MAX_MARKS
  local MAX_WAITERS = 64 -- concurrency.rs's MAX_WAITERS
  local WAITER_GRACE = 2000000 -- concurrency.rs's WAITER_GRACE, µs
  local KINDS = { p = true, q = true, e = true, l = true, g = true } -- TicketKind's bytes

  -- `member` as limit r reads it: a ticket's kind, nonce and id with a wait, the id
  -- alone (a plain take) without; a member that is no ticket (too short, no NUL
  -- first, no kind) is an id.
  local function ticket(r, member)
    if r.wait == 0 or #member < 18 or string.byte(member, 1) ~= 0 then
      return 'p', '', member
    end
    local kind = string.sub(member, 2, 2)
    if not KINDS[kind] then return 'p', '', member end
    return kind, string.sub(member, 3, 18), string.sub(member, 19)
  end

  -- When a waiter asking at `now` lapses unless it asks again.
  local function waiter_lapse(r, now)
    return now + min(r.wait, WAITER_GRACE)
  end

  -- The place of the waiter `nonce` among those live at `now`, 0 the head, or nil;
  -- and how many are live.
  local function place(s, now, nonce)
    local live, at = 0, nil
    for _, w in ipairs(s.waiters) do
      if w[3] > now then
        if not at and nonce ~= '' and w[1] == nonce then at = live end
        live = live + 1
      end
    end
    return at, live
  end

  -- The waiter `nonce` leaves the queue; whether it was in it.
  local function leave(s, nonce)
    for i, w in ipairs(s.waiters) do
      if w[1] == nonce then
        table.remove(s.waiters, i)
        return true
      end
    end
    return false
  end

  -- Whether `id` is held at `now`.
  local function held(s, now, id)
    for _, h in ipairs(s.holds) do
      if h[3] > now and h[2] > 0 and h[1] == id then return true end
    end
    return false
  end

  -- Whether a take has (or may take) a place in the queue: queues, or tries a last time.
  local function waits(kind) return kind == 'q' or kind == 'e' end

  -- Whether a denied take leaves a mark (its id is held), or waits its turn.
  function concurrency.marks(r, s, now, member)
    local kind, _, id = ticket(r, member)
    return waits(kind) or held(s, max(now, s.newest), id)
  end

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
    for _, w in ipairs(s.waiters) do last = max(last, w[3]) end
    return last
  end

  -- The entries of `list` live at `now`, in their order.
  local function kept(list, now)
    local out = {}
    for _, h in ipairs(list) do
      if h[3] > now then out[#out + 1] = h end
    end
    return out
  end

  -- Drops what has lapsed by `now`.
  local function clear_lapsed(s, now)
    s.holds, s.waiters = kept(s.holds, now), kept(s.waiters, now)
  end

  -- The decision, and a fifth number: 2 when denied and queued (round.lua's outcome 4).
  function concurrency.check(r, s, now, cost, member)
    if member == '' then fail('a concurrency hold needs an id') end
    now = max(now, s.newest)
    local used = 0
    for _, h in ipairs(s.holds) do
      if h[3] > now then used = used + h[2] end
    end
    local last = last_lapse(s)
    if cost == 0 then return allow(r, sub0(r.cap, used), sub0(last, now)) end
    if cost > r.cap then return 2, sub0(r.cap, used), sub0(last, now), 0 end
    local reset = max(last, now + r.window) - now
    -- Waiters ahead: its own place, or the whole queue for a newcomer.
    local kind, nonce = ticket(r, member)
    if not waits(kind) then nonce = '' end
    local at, live_waiters = place(s, now, nonce)
    local ahead = at or live_waiters
    if ahead == 0 and used + cost <= r.cap then return allow(r, r.cap - used - cost, reset) end
    -- When enough holds lapse, or the waiters ahead would have, nobody asking.
    local lapse_ahead, seen = 0, 0
    for _, w in ipairs(s.waiters) do
      if seen == ahead then break end
      if w[3] > now then
        lapse_ahead, seen = max(lapse_ahead, w[3]), seen + 1
      end
    end
    local fits = now
    if used + cost > r.cap then
      -- When enough live holds lapse, soonest first, for the cost to fit.
      local live = {}
      for _, h in ipairs(s.holds) do
        if h[3] > now then live[#live + 1] = h end
      end
      table.sort(live, function(a, b)
        if a[3] ~= b[3] then return a[3] < b[3] end
        return a[2] < b[2]
      end)
      local left = used
      fits = 0
      for _, h in ipairs(live) do
        left = left - h[2]
        if left + cost <= r.cap then
          fits = h[3]
          break
        end
      end
    end
    local queued = kind == 'q' and (at ~= nil or ahead < MAX_WAITERS)
    local o, remaining, reset_after, retry =
      deny(r, cost, max(fits, lapse_ahead) - now, sub0(r.cap, used), sub0(last, now))
    return o, remaining, reset_after, retry, queued and 2 or 0
  end

  -- A take: admitted, one more hold of its id, and its waiter out of the queue;
  -- denied, a mark of the id (cost 0) its release gives back while the id is held,
  -- and with a queue ticket its place: joined or kept when this limit denied it, left
  -- when another did. Past MAX_MARKS marks, the soonest to lapse goes.
  function concurrency.commit(r, s, now, cost, admitted, member)
    if cost == 0 then return end
    now = max(now, s.newest)
    clear_lapsed(s, now)
    local kind, nonce, id = ticket(r, member)
    s.newest = now
    if admitted then
      if waits(kind) then leave(s, nonce) end
      s.holds[#s.holds + 1] = { id, cost, now + r.window }
      return
    end
    if waits(kind) then
      local o, _, _, _, queued = concurrency.check(r, s, now, cost, member)
      local at = place(s, now, nonce)
      if at and (o == 0 or kind == 'e') then
        -- Another limit denied it, or its last try is over: it leaves no trace here.
        leave(s, nonce)
      elseif at then
        s.waiters[at + 1][3] = waiter_lapse(r, now)
      elseif queued == 2 then
        s.waiters[#s.waiters + 1] = { nonce, cost, waiter_lapse(r, now) }
      end
      -- A take asking again left its mark, if any, when it joined.
      if at then return end
    end
    if not held(s, now, id) then return end
    local marks, soonest = 0, nil
    for i, h in ipairs(s.holds) do
      if h[2] == 0 then
        marks = marks + 1
        if not soonest or h[3] < s.holds[soonest][3] then soonest = i end
      end
    end
    if marks >= MAX_MARKS then table.remove(s.holds, soonest) end
    s.holds[#s.holds + 1] = { id, 0, now + r.window }
  end

  -- A release: what one take of its id left, a mark first (the soonest to lapse), else
  -- the hold of the id soonest to lapse. A leave takes its waiter out of the queue
  -- instead, and a give-back its waiter if it still waits, else its hold.
  function concurrency.refund(r, s, now, _, member)
    if member == '' then fail('a concurrency hold needs an id') end
    now = max(now, s.newest)
    clear_lapsed(s, now)
    s.newest = now
    local kind, nonce, id = ticket(r, member)
    if kind == 'l' then
      leave(s, nonce)
      return
    end
    if kind == 'g' and leave(s, nonce) then return end
    local holds, at = s.holds, nil
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
  end

  -- A renewal of the hold `id` names: its lease starts again (the soonest to lapse of
  -- that id) whatever the others hold; lapsed, it is taken again if it fits. Returns
  -- the decision as check does.
  function concurrency.renew(r, s, now, cost, member)
    if member == '' then fail('a concurrency hold needs an id') end
    local _, _, id = ticket(r, member)
    now = max(now, s.newest)
    clear_lapsed(s, now)
    s.newest = now
    local renewed = nil
    for _, h in ipairs(s.holds) do
      if h[2] > 0 and h[1] == id and (not renewed or h[3] < renewed[3]) then renewed = h end
    end
    if renewed then
      renewed[3] = max(renewed[3], now + r.window)
      return concurrency.check(r, s, now, 0, member)
    end
    local o, remaining, reset, retry = concurrency.check(r, s, now, cost, member)
    if o == 0 and cost > 0 then concurrency.commit(r, s, now, cost, true, member) end
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
