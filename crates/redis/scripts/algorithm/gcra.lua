-- The Lua twin of crates/core/src/algorithm/gcra.rs: read the two side by side.
-- Part of the decision library; scripts/prelude.lua says how the parts are joined.

-- === gcra: state the TAT, stored as a plain integer (Redis keeps it in the object) ====

local function define_gcra()
  local gcra = {}

  -- tonumber and a range check rather than a pattern: "1e3" or " 7" (only ever a hand
  -- edit) read as numbers, while NaN, negatives and fractions are refused.
  function gcra.decode(_, v)
    if not v then return { tat = 0 } end
    local tat = tonumber(v)
    if not tat or not (tat >= 0 and tat <= 9007199254740992) or tat ~= math.floor(tat) then
      return nil
    end
    return { tat = tat }
  end
  function gcra.encode(s) return string.format('%d', s.tat) end
  function gcra.copy(s) return { tat = s.tat } end

  -- e(cost): µs of emission time. Past the burst (only count_rejected charges those)
  -- the product may round, but only to more than tau, where commit clamps it.
  local function gcra_emission(r, cost)
    if cost == 1 then return r.e1 end
    return cdiv(cost * r.unit, r.rate)
  end

  -- Unit-cost requests still admitted at now if the TAT were t.
  local function slack(r, now, t) return idiv(sub0(now + r.tau, t), r.e1) end

  -- The admitted branch is the hot path of every deployment: max, slack and allow
  -- written out (a Lua call costs more than the arithmetic it wraps).
  function gcra.check(r, s, now, cost)
    local base = s.tat
    if base < now then base = now end
    if cost <= r.cap then
      local tat = base + ((cost == 1) and r.e1 or gcra_emission(r, cost))
      local late = tat - now
      if late <= r.tau then
        -- slack(r, now, tat): late ≤ tau, so now + tau − tat ≥ 0.
        local left = r.tau - late
        left = (left - math.fmod(left, r.e1)) / r.e1
        if left > r.cap then left = r.cap end
        return 0, left, late, 0
      end
      local over = late - r.tau
      if cost > 0 then
        if over <= r.wait then return waited(over, late) end
        -- Until it is admitted, after its longest wait.
        over = over - r.wait
      end
      return deny(r, cost, over, slack(r, now, base), base - now)
    end
    return deny(r, cost, 0, slack(r, now, base), base - now)
  end

  function gcra.commit(r, s, now, cost, admitted)
    local tat = s.tat
    if tat < now then tat = now end
    tat = tat + ((cost == 1) and r.e1 or gcra_emission(r, cost))
    if admitted then
      s.tat = tat
    else
      -- count_rejected: empty the bucket (TAT at now + tau) but never beyond.
      s.tat = max(min(tat, now + r.tau), s.tat)
    end
  end

  -- The TAT moved back by the units' emission time rounded down, never before now.
  function gcra.refund(r, s, now, cost)
    if s.tat > now then s.tat = max(s.tat - idiv(cost * r.unit, r.rate), now) end
  end

  function gcra.idle_at(r, s) return s.tat end
  return gcra
end
