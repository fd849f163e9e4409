-- The Lua twin of crates/core/src/algorithm/sliding_window.rs: read the two side by side.
-- Part of the decision library; scripts/prelude.lua says how the parts are joined.

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
