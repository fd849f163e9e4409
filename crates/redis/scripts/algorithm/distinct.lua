-- The Lua twin of crates/core/src/algorithm/distinct.rs (its exact mode): read the two side by side.
-- Part of the decision library; scripts/prelude.lua says how the parts are joined.

-- === distinct: state newest + (sub-window, member) per member, 8 + 12 + len each ====
-- The exact mode (limit ≤ 100, crates/core/src/algorithm/distinct.rs; the sketch mode
-- is distinct_sketch.lua). The state is one string: the newest sub-window charged (a
-- double), then per member its last sub-window (a double), its length (4 bytes) and
-- its bytes.

local function define_distinct()
  local distinct = {}

  function distinct.decode(_, v)
    if not v then return { newest = 0, members = {} } end
    if #v < 8 then return nil end
    local s = { newest = struct.unpack('<d', v), members = {} }
    local p = 9
    while p <= #v do
      if p + 11 > #v then return nil end
      local b, len = struct.unpack('<dI4', v, p)
      if p + 11 + len > #v then return nil end
      s.members[#s.members + 1] = { string.sub(v, p + 12, p + 11 + len), b }
      p = p + 12 + len
    end
    return s
  end
  function distinct.encode(s)
    local parts = { struct.pack('<d', s.newest) }
    for _, m in ipairs(s.members) do
      parts[#parts + 1] = struct.pack('<dI4', m[2], #m[1]) .. m[1]
    end
    return table.concat(parts)
  end
  function distinct.copy(s)
    local members = {}
    for i, m in ipairs(s.members) do members[i] = { m[1], m[2] } end
    return { newest = s.newest, members = members }
  end

  local function oldest(r, j) return sub0(j + 1, r.precision) end
  local function finish(r, newest) return (newest + r.precision) * r.width end

  function distinct.check(r, s, now, cost, member)
    local j = max(idiv(now, r.width), s.newest)
    now = max(now, j * r.width)
    local lo = oldest(r, j)
    local count, known = 0, false
    for _, m in ipairs(s.members) do
      if m[2] >= lo then
        count = count + 1
        if m[1] == member then known = true end
      end
    end
    local after = known and count or count + 1
    local function reset(newest)
      if #s.members == 0 and cost == 0 then return 0 end
      return sub0(finish(r, newest), now)
    end
    if cost > 1 then return 2, sub0(r.cap, count), reset(s.newest), 0 end
    local charged = (cost == 1) and j or s.newest
    if known then return allow(r, sub0(r.cap, count), reset(charged)) end
    if after <= r.cap then
      return allow(r, sub0(r.cap, (cost == 1) and after or count), reset(charged))
    end
    -- The cap-th most recent sub-window among the live members: once it leaves,
    -- fewer than cap remain.
    local live = {}
    for _, m in ipairs(s.members) do
      if m[2] >= lo then live[#live + 1] = m[2] end
    end
    table.sort(live, function(a, b) return a > b end)
    return deny(r, cost, finish(r, live[r.cap]) - now, sub0(r.cap, count), reset(s.newest))
  end

  function distinct.commit(r, s, now, cost, _, member)
    if cost == 0 then return end
    local j = max(idiv(now, r.width), s.newest)
    local lo = oldest(r, j)
    local kept, found = {}, false
    for _, m in ipairs(s.members) do
      if m[2] >= lo then
        if m[1] == member then
          m[2] = j
          found = true
        end
        kept[#kept + 1] = m
      end
    end
    if not found then kept[#kept + 1] = { member, j } end
    s.members, s.newest = kept, j
  end

  function distinct.idle_at(r, s)
    if #s.members == 0 then return 0 end
    return finish(r, s.newest)
  end

  return distinct
end
