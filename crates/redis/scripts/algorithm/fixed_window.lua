-- The Lua twin of crates/core/src/algorithm/fixed_window.rs: read the two side by side.
-- Part of the decision library; scripts/prelude.lua says how the parts are joined.

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
