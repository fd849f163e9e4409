-- The Lua twin of crates/core/src/algorithm/token_bucket.rs: read the two side by side.
-- Part of the decision library; scripts/prelude.lua says how the parts are joined.

-- === token_bucket: state (level, last) in scaled units, 16 bytes =====================
-- One token is `unit` units; the bucket gains `rate` units per µs and holds `full`.

local function define_token_bucket()
  local token_bucket = {}

  function token_bucket.decode(_, v)
    if not v then return { level = 0, last = 0 } end
    if #v ~= 16 then return nil end
    local level, last = struct.unpack('<dd', v)
    return { level = level, last = last }
  end
  function token_bucket.encode(s) return struct.pack('<dd', s.level, s.last) end
  function token_bucket.copy(s) return { level = s.level, last = s.last } end

  -- (level at now, now), now never before the last refill. A product past 2^53 rounds,
  -- but only ever to more than `full`, where min() cuts it.
  local function tb_refill(r, s, now)
    now = max(now, s.last)
    return min(r.full, s.level + (now - s.last) * r.rate), now
  end

  -- µs until a bucket at level l is full.
  local function until_full(r, l) return cdiv(r.full - l, r.rate) end

  function token_bucket.check(r, s, now, cost)
    local level = tb_refill(r, s, now)
    if cost <= r.cap then
      local need = cost * r.unit
      if level >= need then
        local left = level - need
        return allow(r, idiv(left, r.unit), until_full(r, left))
      end
      return deny(r, cost, cdiv(need - level, r.rate), idiv(level, r.unit), until_full(r, level))
    end
    return deny(r, cost, 0, idiv(level, r.unit), until_full(r, level))
  end

  function token_bucket.commit(r, s, now, cost)
    local level, at = tb_refill(r, s, now)
    -- Admitted: level ≥ need. Rejected (count_rejected): empty the bucket, no debt.
    s.level, s.last = sub0(level, cost * r.unit), at
  end

  function token_bucket.idle_at(r, s)
    return s.last + cdiv(sub0(r.full, s.level), r.rate)
  end
  return token_bucket
end
