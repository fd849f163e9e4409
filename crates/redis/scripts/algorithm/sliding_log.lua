-- The Lua twin of crates/core/src/algorithm/sliding_log.rs: read the two side by side.
-- Part of the decision library; scripts/prelude.lua says how the parts are joined.

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
    -- Already over the limit (usage charged into debt): fold as a rejected charge.
    local over = s.total > r.cap
    s.total = s.total + cost
    local n = entries(s)
    if n > 0 then
      local at, c = entry(s, n)
      -- Same µs, a rejected charge, or usage while in debt: fold into the newest entry,
      -- moved to now.
      if at == now or not admitted or over then
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
