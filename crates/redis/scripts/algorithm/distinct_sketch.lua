-- The Lua twin of crates/core/src/algorithm/distinct.rs (its sketch mode), with hll.rs and bloom.rs: read the two side by side.
-- Part of the decision library; scripts/prelude.lua says how the parts are joined.

-- === distinct_sketch: per sub-window a HyperLogLog and a Bloom filter, in rings =====
-- Redis's own HLLs (PFCOUNT of several keys merges them) count, with the registers and
-- estimator the memory store copies (crates/core/src/algorithm/hll.rs); a Bloom filter
-- per sub-window (a hash of 64-byte blocks) tells a counted member from a new one
-- (crates/core/src/algorithm/bloom.rs). Rust computes the member's 7 bit positions (Lua
-- 5.1 cannot do the 64-bit hashes) and sends them before the member: 7 × u32 LE, then
-- the member's bytes. The filter is blocked: a member's 7 bits are in one block of 512
-- bits, and a filter key is a hash of the blocks set so far (field: the block's
-- number; value: its 64 bytes), so a group that sees one member holds one block, not
-- the whole filter. KEYS: the state key, P HLL keys, P filter keys. The state key
-- holds the newest sub-window charged and, per ring slot, the sub-window its keys hold
-- (+1; 0 = none): 8 + 8P bytes. Slot i holds sub-windows ≡ i (mod P), so at sub-window
-- j the live ones (j−P+1 ..= j) are in different slots, and j's slot holds either j or
-- a dead one, cleared before use.
--
-- A check only reads, but for a batch that touches the key twice: members the round
-- has charged but not yet written wait in `pending` (written by flush, before the state
-- is saved), and a check then counts with them added to the current HLL and puts it
-- back as it was.

local function define_distinct_sketch()
  local sketch = {}
  local HASHES = 7

  function sketch.decode(r, v, ring)
    local s = { newest = 0, held = {}, pending = {}, ring = ring, empty = true }
    if not v then
      for i = 1, r.precision do s.held[i] = 0 end
      return s
    end
    if #v ~= 8 + 8 * r.precision then return nil end
    local fields = { struct.unpack('<d' .. string.rep('d', r.precision), v) }
    s.newest, s.empty = fields[1], false
    for i = 1, r.precision do s.held[i] = fields[i + 1] end
    return s
  end
  function sketch.encode(s)
    return struct.pack('<d' .. string.rep('d', #s.held), s.newest, unpack(s.held))
  end
  function sketch.copy(s)
    local held, pending = {}, {}
    for i, h in ipairs(s.held) do held[i] = h end
    for i, m in ipairs(s.pending) do pending[i] = m end
    return { newest = s.newest, held = held, pending = pending, ring = s.ring, empty = s.empty }
  end

  local function oldest(r, j) return sub0(j + 1, r.precision) end
  local function finish(r, newest) return (newest + r.precision) * r.width end
  local function slot(r, j) return imod(j, r.precision) + 1 end
  local function filter(r, i) return r.precision + i end -- the ring index of slot i's filter

  -- A member argument: its bit positions and its bytes.
  local function parse(arg)
    if #arg < 4 * HASHES then fail('a sketched distinct member comes after its positions') end
    local at = { struct.unpack('<' .. string.rep('I4', HASHES), arg) }
    at[HASHES + 1] = nil
    return at, string.sub(arg, 4 * HASHES + 1)
  end

  -- A position's block (the hash field), byte (1-based) and bit value in that byte.
  local BLOCK = 512
  local function block_of(p) return tostring((p - imod(p, BLOCK)) / BLOCK) end
  local function byte_bit(p)
    local o = imod(p, BLOCK)
    local b = imod(o, 8)
    return (o - b) / 8 + 1, 2 ^ b
  end

  -- The bits of filter key `key` at positions `at` (one block), 0 or 1 each.
  local function bits_at(key, at)
    local block = redis.call('HGET', key, block_of(at[1]))
    local out = {}
    for k, p in ipairs(at) do
      local i, v = byte_bit(p)
      out[k] = (block and bit.band(string.byte(block, i), v) ~= 0) and 1 or 0
    end
    return out
  end

  -- The HLL keys of the slots live from sub-window `from` on, the current slot's when
  -- `with_current`.
  local function live(r, s, from, with_current, j)
    local keys, cur = {}, slot(r, j)
    for i = 1, r.precision do
      if (i == cur and with_current) or (i ~= cur and s.held[i] - 1 >= from) then
        keys[#keys + 1] = s.ring[i]
      end
    end
    return keys
  end

  local function count(keys)
    if #keys == 0 then return 0 end
    return redis.call('PFCOUNT', unpack(keys))
  end

  function sketch.check(r, s, now, cost, member_arg)
    local at = parse(member_arg)
    local j = max(idiv(now, r.width), s.newest)
    now = max(now, j * r.width)
    local lo, cur = oldest(r, j), slot(r, j)
    local current = s.held[cur] == j + 1
    local pending = #s.pending > 0
    -- Counting first checks every live key is an HLL before anything is touched, and
    -- a dead current one too, which a charge would clear.
    local before = count(live(r, s, lo, current, j))
    if not current then redis.call('PFCOUNT', s.ring[cur]) end

    -- Counted: every bit set in one live sub-window's filter. The current one's bits
    -- are its key's (when it holds j) and those of members charged earlier this round.
    local set = {}
    for _, p in ipairs(s.pending) do
      for _, pos in ipairs(p[1]) do set[pos] = true end
    end
    local known = false
    for i = 1, r.precision do
      if i == cur and (current or pending) then
        local stored = current and bits_at(s.ring[filter(r, i)], at) or {}
        local all = true
        for h = 1, HASHES do
          if stored[h] ~= 1 and not set[at[h]] then all = false break end
        end
        known = known or all
      elseif i ~= cur and s.held[i] - 1 >= lo and not known then
        local all = true
        for _, bit in ipairs(bits_at(s.ring[filter(r, i)], at)) do
          if bit == 0 then all = false break end
        end
        known = all
      end
    end

    -- Members charged earlier this round count too: added to the current HLL while this
    -- check counts, then taken out.
    local restore = nil
    if pending then
      local key = s.ring[cur]
      local saved, ttl = nil, 0
      if current then
        saved, ttl = redis.call('GET', key), redis.call('PTTL', key)
      else
        redis.call('DEL', key)
      end
      local members = {}
      for k, p in ipairs(s.pending) do members[k] = p[2] end
      redis.call('PFADD', key, unpack(members))
      current = true
      before = count(live(r, s, lo, true, j))
      restore = function()
        if saved then
          if ttl > 0 then redis.call('SET', key, saved, 'PX', ttl) else redis.call('SET', key, saved) end
        else
          redis.call('DEL', key)
        end
      end
    end

    local function reset(newest)
      if s.empty and cost == 0 then return 0 end
      return sub0(finish(r, newest), now)
    end
    local after = known and before or before + 1
    local charged = (cost == 1) and j or s.newest
    local o, rem, rs, rt
    if cost > 1 then
      o, rem, rs, rt = 2, sub0(r.cap, before), reset(s.newest), 0
    elseif known then
      o, rem, rs, rt = allow(r, sub0(r.cap, before), reset(charged))
    elseif after <= r.cap then
      o, rem, rs, rt = allow(r, sub0(r.cap, (cost == 1) and after or before), reset(charged))
    else
      -- The first sub-window edge at which the sub-windows still live count below the
      -- limit.
      local retry = (j + r.precision) * r.width
      for k = 1, r.precision - 1 do
        if count(live(r, s, oldest(r, j + k), current, j)) < r.cap then
          retry = (j + k) * r.width
          break
        end
      end
      o, rem, rs, rt = deny(r, cost, retry - now, sub0(r.cap, before), reset(s.newest))
    end
    if restore then restore() end
    return o, rem, rs, rt
  end

  function sketch.commit(r, s, now, cost, _, member_arg)
    if cost == 0 then return end
    local at, member = parse(member_arg)
    s.newest = max(idiv(now, r.width), s.newest)
    s.pending[#s.pending + 1] = { at, member }
    s.empty = false
  end

  -- Writes the pending members to the current slot's HLL and filter, with the TTL of
  -- its sub-window.
  function sketch.flush(r, s, now, margin)
    if #s.pending == 0 then return end
    local j = s.newest
    local i = slot(r, j)
    local hll, bloom = s.ring[i], s.ring[filter(r, i)]
    if s.held[i] ~= j + 1 then
      -- A sub-window's filter starts empty: blocks are added as members set bits.
      redis.call('DEL', hll, bloom)
      s.held[i] = j + 1
    end
    -- Each block touched, read once, its bits set, written once.
    local members, blocks, order = {}, {}, {}
    for k, p in ipairs(s.pending) do
      members[k] = p[2]
      local field = block_of(p[1][1])
      local bytes = blocks[field]
      if not bytes then
        local stored = redis.call('HGET', bloom, field)
        bytes = stored and { string.byte(stored, 1, BLOCK / 8) } or {}
        if not stored then for b = 1, BLOCK / 8 do bytes[b] = 0 end end
        blocks[field], order[#order + 1] = bytes, field
      end
      for _, pos in ipairs(p[1]) do
        local b, v = byte_bit(pos)
        bytes[b] = bit.bor(bytes[b], v)
      end
    end
    local fields = {}
    for _, field in ipairs(order) do
      fields[#fields + 1], fields[#fields + 2] = field, string.char(unpack(blocks[field]))
    end
    redis.call('PFADD', hll, unpack(members))
    redis.call('HSET', bloom, unpack(fields))
    local ttl = cdiv(sub0(finish(r, j), now), 1000) + margin
    redis.call('PEXPIRE', hll, ttl)
    redis.call('PEXPIRE', bloom, ttl)
    s.pending = {}
  end

  function sketch.idle_at(r, s)
    if s.empty then return 0 end
    return finish(r, s.newest)
  end

  return sketch
end
