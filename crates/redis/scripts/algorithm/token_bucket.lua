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

  -- The level at now in scaled units: below zero while in debt (or for a clock behind
  -- `last`), at most full. A product past 2^53 rounds, but only ever to more than
  -- `full`, where min() cuts it; a debt is bounded by Limit::max_usage.
  local function tb_level(r, s, now)
    if now >= s.last then return min(r.full, s.level + (now - s.last) * r.rate) end
    return s.level - (s.last - now) * r.rate
  end

  -- Sets s to the bucket holding `level` (below zero: in debt) at now: a debt D is the
  -- bucket holding t·rate − D at now + t, t = ⌈D / rate⌉.
  local function tb_hold(r, s, level, now)
    if level >= 0 then
      s.level, s.last = level, now
      return
    end
    local t = cdiv(-level, r.rate)
    s.level, s.last = t * r.rate + level, now + t
  end

  -- µs until a bucket at level l is full.
  local function until_full(r, l) return cdiv(r.full - l, r.rate) end

  -- Whole tokens of a level that may be below zero.
  local function tokens(r, l) if l <= 0 then return 0 end return idiv(l, r.unit) end

  function token_bucket.check(r, s, now, cost)
    local level = tb_level(r, s, now)
    if cost <= r.cap then
      local need = cost * r.unit
      if level >= need then
        local left = level - need
        return allow(r, tokens(r, left), until_full(r, left))
      end
      local retry = cdiv(need - level, r.rate)
      if cost > 0 then
        if retry <= r.wait then return waited(retry, until_full(r, level - need)) end
        -- Until it is admitted, after its longest wait.
        retry = retry - r.wait
      end
      return deny(r, cost, retry, tokens(r, level), until_full(r, level))
    end
    return deny(r, cost, 0, tokens(r, level), until_full(r, level))
  end

  function token_bucket.commit(r, s, now, cost, admitted)
    local level = tb_level(r, s, now)
    local need = cost * r.unit
    if admitted then
      -- Admitted (level ≥ need), or usage: in full, into debt if need be.
      tb_hold(r, s, level - need, now)
    elseif level >= 0 then
      -- count_rejected: empty the bucket, no debt (already in debt: left as it is).
      tb_hold(r, s, sub0(level, need), now)
    end
  end

  -- Back into the bucket at now, never above full.
  function token_bucket.refund(r, s, now, cost)
    tb_hold(r, s, min(r.full, tb_level(r, s, now) + cost * r.unit), now)
  end

  function token_bucket.idle_at(r, s)
    return s.last + cdiv(sub0(r.full, s.level), r.rate)
  end
  return token_bucket
end
