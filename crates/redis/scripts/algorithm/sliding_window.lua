-- The Lua twin of crates/core/src/algorithm/sliding_window.rs: read the two side by side.
-- Part of the decision library; scripts/prelude.lua says how the parts are joined.

-- === sliding_window: state (newest, total, counts[P+1]), 16 + 8(P+1) bytes ===========
-- counts is a ring indexed by bucket mod (P+1) (plus 1: Lua tables count from 1),
-- empty until the first charge. The short form, 16 bytes (newest, total): every count
-- in the newest bucket, so the ring is that count and zeros. A key's first charge, and
-- every later one until a charge lands in another bucket, is written so: a `SET` of 16
-- bytes where the ring of precision 60 was a string of 504 made in Lua (most of a new
-- key's time), and 16 bytes kept for a key whose use fits in one bucket.
--
-- The ring is read where a decision looks, not decoded whole, and written back the
-- same way: a decision reads two or three of its P+1 counts and writes one. Unpacking
-- the 61 doubles of a precision-60 window into a table and packing them back was most
-- of a call's time; so is every byte of a Lua string made (Redis's Lua hashes all of
-- it, about a nanosecond a byte). The state keeps the stored bytes (`v`; false: every
-- count 0), the newest bucket they hold (`was`), the counts written since (`set`,
-- slot → count; a short form's one count is there from the start) and whether the
-- stored value is the short form (`short`). `patch` writes those few counts into the
-- stored value in place; `encode` (a new key, or many counts written) gives the short
-- form when it holds the state, else splices the counts into the stored bytes.
-- `n` is P+1, or 0 before the first charge (the Rust's empty Vec).

-- 16 + 8n zero bytes, per n: the stored bytes of a ring of zeros (0.0 packs as zeros).
local ZEROS = {}
local function sw_zeros(n)
  local z = ZEROS[n]
  if not z then
    z = string.rep('\0', 16 + 8 * n)
    ZEROS[n] = z
  end
  return z
end

-- Count of ring slot `slot` (1-based).
local function sw_get(s, slot)
  local c = s.set[slot]
  if c then return c end
  if not s.v then return 0 end
  return (struct.unpack('<d', s.v, 9 + 8 * slot))
end

-- Written slots at most this many are patched in place, one SETRANGE each; more, and
-- the whole value is written again.
local PATCHED = 3
-- The byte offset of each ring slot, as SETRANGE takes it (formatted once).
local OFFSETS = {}

local function define_sliding_window()
  local sliding_window = {}

  function sliding_window.decode(r, v)
    if not v then
      return { newest = 0, total = 0, n = 0, v = false, was = 0, set = {}, short = false }
    end
    local n = r.precision + 1
    if #v == 16 then
      -- Refused unless both are whole numbers and the count is above 0 (NaN is not).
      local newest, total = struct.unpack('<dd', v)
      if not (newest >= 0 and newest <= 9007199254740992 and newest == math.floor(newest) and
              total > 0 and total <= 9007199254740992 and total == math.floor(total)) then
        return nil
      end
      return { newest = newest, total = total, n = n, v = false, was = newest,
               set = { [imod(newest, n) + 1] = total }, short = true }
    end
    if #v ~= 16 + 8 * n then return nil end
    local newest, total = struct.unpack('<dd', v)
    return { newest = newest, total = total, n = n, v = v, was = newest, set = {}, short = false }
  end
  -- Every count in the newest bucket: the state has a short form.
  local function sw_short(s) return sw_get(s, imod(s.newest, s.n) + 1) == s.total end
  -- Writes the header and the counts written into the stored value at `key` in place,
  -- when there is one (`v`) and few counts were written. Returns nil when it wrote
  -- nothing (save writes the whole value), else whether the state's idle time moved
  -- (it follows the newest bucket, so the key's TTL stays right until that moves).
  function sliding_window.patch(_, key, s)
    if s.short then
      -- Still short, in the same bucket: the header alone, its TTL still right.
      if s.newest ~= s.was or not sw_short(s) then return nil end
      redis.call('SETRANGE', key, '0', struct.pack('<dd', s.newest, s.total))
      return false
    end
    if not s.v then return nil end
    local set, k = s.set, 0
    for _ in pairs(set) do
      k = k + 1
      if k > PATCHED then return nil end
    end
    redis.call('SETRANGE', key, '0', struct.pack('<dd', s.newest, s.total))
    for slot, c in pairs(set) do
      local at = OFFSETS[slot]
      if not at then
        at = string.format('%d', 8 + 8 * slot)
        OFFSETS[slot] = at
      end
      redis.call('SETRANGE', key, at, struct.pack('<d', c))
    end
    return s.newest ~= s.was
  end
  function sliding_window.encode(s)
    local head = struct.pack('<dd', s.newest, s.total)
    if sw_short(s) then return head end
    local base, set = s.v or sw_zeros(s.n), s.set
    -- The written counts in ring order, each spliced between the stored bytes around it.
    local parts, from = { head }, 17
    for slot = 1, s.n do
      local c = set[slot]
      if c then
        local at = 9 + 8 * slot
        parts[#parts + 1] = string.sub(base, from, at - 1)
        parts[#parts + 1] = struct.pack('<d', c)
        from = at + 8
      end
    end
    parts[#parts + 1] = string.sub(base, from)
    return table.concat(parts)
  end
  function sliding_window.copy(s)
    local set = {}
    for slot, c in pairs(s.set) do set[slot] = c end
    return { newest = s.newest, total = s.total, n = s.n, v = s.v, was = s.was, set = set,
             short = s.short }
  end

  local INTERPOLATE, STRICT, LENIENT = 0, 1, 2
  local fmod = math.fmod

  local function sw_count(s, bucket)
    local n = s.n
    if n == 0 or bucket > s.newest or s.newest - bucket >= n then return 0 end
    return sw_get(s, imod(bucket, n) + 1)
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
  -- The Rust's count and sum (of the buckets up to j−P, which have left the full
  -- range) written out: j ≥ newest puts j−P in the ring or past it.
  local function sw_window(r, s, j)
    local p, n, newest = r.precision, s.n, s.newest
    if j < p then return s.total, 0 end
    local oldest = j - p
    if n == 0 or oldest > newest then return 0, 0 end
    local prev = sw_get(s, fmod(oldest, n) + 1)
    if oldest == newest then return 0, prev end
    local gone = prev
    for m = sub0(newest, p), oldest - 1 do gone = gone + sw_get(s, fmod(m, n) + 1) end
    return sub0(s.total, gone), prev
  end

  local function sw_idle_at(r, newest) return (newest + r.precision + 1) * r.width end

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

  -- An admission on the default edge is the hot path of the algorithm: clamp, idiv,
  -- imod, fits, remaining and allow written out for it (a Lua call costs more than the
  -- arithmetic it wraps), in the same floating-point order as sw_estimate.
  function sliding_window.check(r, s, now, cost)
    local width = r.width
    if s.n ~= 0 and now < s.newest * width then now = s.newest * width end -- sw_clamp
    local off = fmod(now, width)
    local j = (now - off) / width
    local full, prev = sw_window(r, s, j)
    if r.edge == INTERPOLATE and cost > 0 and cost <= r.cap then
      local part = prev * ((width - off) / width)
      if full + part + cost <= r.cap then
        local left = math.floor(r.cap - ((full + cost) + part))
        if left < 0 then left = 0 end
        return 0, left, (j + r.precision + 1) * width - now, 0
      end
    end
    local charged = s.n ~= 0 and (full > 0 or prev > 0)
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
    local width = r.width
    if s.n ~= 0 and now < s.newest * width then now = s.newest * width end -- sw_clamp
    local j = (now - fmod(now, width)) / width
    local n = r.precision + 1
    if s.n == 0 then
      s.n, s.v, s.set = n, false, {}
      s.newest = j
    end
    if j > s.newest then
      -- Buckets newest+1 ..= j reuse the slots of buckets that have left the ring.
      if j - s.newest >= n then
        s.v, s.set = false, {}
        s.total = 0
      else
        for m = s.newest + 1, j do
          local slot = imod(m, n) + 1
          local c = sw_get(s, slot)
          if c ~= 0 then -- a count already 0 is not written: fewer to patch
            s.total = sub0(s.total, c)
            s.set[slot] = 0
          end
        end
      end
      s.newest = j
    end
    local slot = fmod(j, n) + 1
    s.set[slot] = sw_get(s, slot) + cost
    s.total = s.total + cost
  end

  function sliding_window.idle_at(r, s)
    if s.total == 0 then return 0 end
    return sw_idle_at(r, s.newest)
  end
  return sliding_window
end
