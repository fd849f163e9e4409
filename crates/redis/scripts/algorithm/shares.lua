-- The Lua twin of crates/core/src/algorithm/shares.rs: read the two side by side.
-- Part of the decision library; scripts/prelude.lua says how the parts are joined.

-- === shares: state the parent's TAT + per child (weight, g, c, f, asked, name) =======
-- One string: the parent's TAT (a double), then per child its weight, its three TATs
-- (guarantee, ceiling, fair share) and when it last asked to borrow (doubles), its
-- name's length (4 bytes) and its name. The limit (alg 10) carries the parent's GCRA
-- as gcra's does (rate, unit, e1, tau) and its wait; the member carries the child's
-- terms at the request's priority, computed in Rust (Limit::share_terms):
--   fair excess g_rate g_unit g_tol c_rate c_unit c_tol weight burst p_rate p_unit p_tol name
-- (bands in µs; g_rate 0: no guarantee; p_rate 0: no pool, every borrow is excess).

local function define_shares()
  local shares = {}
  local ACTIVE, MARK_EVERY = 1000000, 100000 -- shares.rs's
  local TERMS = '^(%d+) (%d+) (%d+) (%d+) (%d+) (%d+) (%d+) (%d+) (%d+) (%d+) (%d+) (%d+) (%d+) (.+)$'
  local TERMS_KEPT = 4096
  local terms, terms_kept = {}, 0

  -- The terms a member names, parsed once per text.
  local function terms_of(member)
    local t = terms[member]
    if t then return t end
    local f = { string.match(member, TERMS) }
    if #f ~= 14 then fail('a shares member is its terms and its child: ' .. member) end
    for k = 1, 13 do f[k] = digits(f[k], 0) end
    t = { bands = { f[1], f[2] }, g_rate = f[3], g_unit = f[4], g_tol = f[5],
          c_rate = f[6], c_unit = f[7], c_tol = f[8], weight = f[9], burst = f[10],
          p_rate = f[11], p_unit = f[12], p_tol = f[13], name = f[14] }
    if t.c_rate < 1 or t.weight < 1 or t.burst < 1 then fail('bad shares terms: ' .. member) end
    if terms_kept == TERMS_KEPT then terms, terms_kept = {}, 0 end
    terms[member], terms_kept = t, terms_kept + 1
    return t
  end

  function shares.decode(_, v)
    if not v then return { parent = 0, children = {} } end
    if #v < 8 then return nil end
    local s = { parent = struct.unpack('<d', v), children = {} }
    local p = 9
    while p <= #v do
      if p + 43 > #v then return nil end
      local w, g, c, f, asked, len = struct.unpack('<dddddI4', v, p)
      if p + 43 + len > #v then return nil end
      s.children[#s.children + 1] = { name = string.sub(v, p + 44, p + 43 + len), weight = w,
                                      g = g, c = c, f = f, asked = asked }
      p = p + 44 + len
    end
    return s
  end
  function shares.encode(s)
    local parts = { struct.pack('<d', s.parent) }
    for _, e in ipairs(s.children) do
      parts[#parts + 1] = struct.pack('<dddddI4', e.weight, e.g, e.c, e.f, e.asked, #e.name) .. e.name
    end
    return table.concat(parts)
  end
  function shares.copy(s)
    local children = {}
    for i, e in ipairs(s.children) do
      children[i] = { name = e.name, weight = e.weight, g = e.g, c = e.c, f = e.f, asked = e.asked }
    end
    return { parent = s.parent, children = children }
  end

  local function find(s, name)
    for i, e in ipairs(s.children) do
      if e.name == name then return e, i end
    end
    return nil
  end

  local function emission(cost, rate, unit) return cdiv(cost * unit, rate) end

  -- shares.rs's fair_emission: the same double operations in the same order.
  local function fair_emission(cost, t, active)
    local x = math.ceil((cost * t.p_unit) * active / (t.p_rate * t.weight))
    if x >= 9007199254740992 then return 9007199254740992 end
    return x
  end

  local function late(tat, now, tolerance) return sub0(tat - now, tolerance) end

  -- Params::plan: the path (1 guaranteed, 2 borrowed, 3 denied), its wait or retry,
  -- whether fair, and the new TATs g, c, f, p.
  local function plan(r, s, now, cost, t)
    local me = find(s, t.name)
    local g0, c0, f0 = 0, 0, 0
    if me then g0, c0, f0 = me.g, me.c, me.f end
    local ep = min(emission(cost, r.rate, r.unit), 9007199254740992)
    local ec = emission(cost, t.c_rate, t.c_unit)
    local p = max(s.parent, now) + ep
    local g, g_late = g0, nil
    if t.g_rate > 0 then
      g = max(g0, now) + emission(cost, t.g_rate, t.g_unit)
      g_late = late(g, now, t.g_tol)
    end
    local c = max(c0, now) + ec
    local ef, fair = 0, false
    if t.p_rate > 0 then
      local active = t.weight
      for _, e in ipairs(s.children) do
        if e.name ~= t.name and e.asked + ACTIVE > now then active = active + e.weight end
      end
      ef = fair_emission(cost, t, active)
      fair = max(f0, now) + ef - now <= t.p_tol
    end
    local band = fair and t.bands[1] or t.bands[2]
    local borrow_late = max(late(c, now, t.c_tol), late(p, now, band))
    if g_late == 0 and late(p, now, r.tau) == 0 then
      return 1, 0, fair, g, c, f0, p
    end
    if cost > 0 and borrow_late <= r.wait then
      -- Every TAT it moves, moved as if it came when it goes ahead.
      local go, f = now + borrow_late, f0
      if t.p_rate > 0 then f = max(f0, go) + ef end
      return 2, borrow_late, fair, g, max(c0, go) + ec, f, max(s.parent, go) + ep
    end
    local borrow = borrow_late
    if cost > 0 then borrow = borrow_late - r.wait end
    if g_late then borrow = min(g_late, borrow) end
    return 3, borrow, fair, g, c, f0, p
  end

  local function slack(now, tolerance, tat, per_unit)
    return idiv(sub0(now + tolerance, tat), max(per_unit, 1))
  end

  function shares.check(r, s, now, cost, member)
    local t = terms_of(member)
    if cost > t.burst then return 2, 0, sub0(s.parent, now), 0 end
    local path, n, _, g, c, _, p = plan(r, s, now, cost, t)
    if path == 3 then
      local me = find(s, t.name)
      local g0, c0 = 0, 0
      if me then g0, c0 = me.g, me.c end
      g, c, p = max(g0, now), max(c0, now), max(s.parent, now)
    end
    local guaranteed = 0
    if t.g_rate > 0 then
      guaranteed = slack(now, t.g_tol, g, emission(1, t.g_rate, t.g_unit))
    end
    local borrowable = min(slack(now, t.c_tol, c, emission(1, t.c_rate, t.c_unit)),
                           slack(now, t.bands[1], p, emission(1, r.rate, r.unit)))
    local remaining = min(max(guaranteed, borrowable), t.burst)
    local reset = p - now
    -- A fifth number, 1, says a borrower was admitted (round.lua's outcome 3).
    if path == 1 then return 0, remaining, reset, 0 end
    if path == 2 and n == 0 then return 0, remaining, reset, 0, 1 end
    if path == 2 then return 0, 0, reset, n, 1 end
    return 1, remaining, reset, n
  end

  -- Charges an admitted request on the path check chose; a denied one (a mark) only
  -- marks its child active.
  function shares.commit(r, s, now, cost, admitted, member)
    local t = terms_of(member)
    local path, g, c, f, p = 3, 0, 0, 0, 0
    if admitted then
      local _
      path, _, _, g, c, f, p = plan(r, s, now, cost, t)
    end
    local kept = {}
    for _, e in ipairs(s.children) do
      if e.name == t.name or max(e.g, max(e.c, e.f)) > now or e.asked + ACTIVE > now then
        kept[#kept + 1] = e
      end
    end
    s.children = kept
    local e = find(s, t.name)
    if not e then
      e = { name = t.name, weight = 0, g = 0, c = 0, f = 0, asked = 0 }
      kept[#kept + 1] = e
    end
    e.weight = t.weight
    if path == 1 then
      e.g, e.c, s.parent = g, c, p
    elseif path == 2 then
      e.c, e.f, e.asked, s.parent = c, f, now, p
    else
      e.asked = now
    end
  end

  -- A denied request marks its child active at most every MARK_EVERY.
  function shares.marks(_, s, now, member)
    local e = find(s, terms_of(member).name)
    return e == nil or e.asked + MARK_EVERY <= now
  end

  function shares.idle_at(_, s)
    local at = s.parent
    for _, e in ipairs(s.children) do
      at = max(at, max(max(e.g, e.c), max(e.f, e.asked + ACTIVE)))
    end
    return at
  end
  return shares
end
