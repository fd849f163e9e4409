-- The Lua twin of crates/core/src/algorithm/fixed_window.rs: read the two side by side.
-- Part of the decision library; scripts/prelude.lua says how the parts are joined.

-- === fixed_window: the count alone, a plain integer, in a key per window ============
-- The key names its window (`…:fw<window number>:<window>`, built in Rust from the
-- caller's clock: key.rs), so the count is the whole state and `INCRBY` can charge it
-- with no script, as counter.rs does for limits that charge every request. The
-- caller's `now` comes as the request's member (digits: script.rs `member_arg`), and
-- the window is the one it names, whatever clock the batch decides on. The Rust
-- state's `start` is that window's; a key is never read after its window.

local function define_fixed_window()
  local fixed_window = {}

  -- `at`: the caller's now, read from the member by check and commit.
  function fixed_window.decode(_, v)
    if not v then return { count = 0, at = 0, new = true } end
    if #v > 16 or not string.find(v, '^%d+$') then return nil end
    return { count = tonumber(v), at = 0, new = false }
  end
  function fixed_window.copy(s) return { count = s.count, at = s.at, new = s.new } end

  -- The caller's now, which names the key's window.
  local function caller_now(s, member)
    if not string.find(member, '^%d+$') then fail('a fixed window needs the caller\'s now') end
    s.at = digits(member, 0)
    return s.at
  end

  function fixed_window.check(r, s, _, cost, member)
    local now = caller_now(s, member)
    local stop = now - imod(now, r.window) + r.window
    local used = s.count
    if cost <= r.cap and used + cost <= r.cap then
      return allow(r, r.cap - used - cost, stop - now)
    end
    return deny(r, cost, stop - now, sub0(r.cap, used), stop - now)
  end

  function fixed_window.commit(r, s, _, cost, _, member)
    caller_now(s, member)
    s.count = s.count + cost
  end

  -- Writes the count: a new key with a TTL to a second after its window ends (on
  -- the caller's clock), an existing one keeping its TTL. Never a TTL of its own
  -- making: the key's window decides when it is over, not the clock of the batch.
  function fixed_window.write(r, key, s)
    if s.count == 0 then return end
    local count = string.format('%d', s.count)
    if not s.new then
      redis.call('SET', key, count, 'KEEPTTL')
      return
    end
    local ms = cdiv(r.window - imod(s.at, r.window), 1000) + 1000
    if not redis.call('SET', key, count, 'PX', string.format('%d', ms), 'NX') then
      fail('key ' .. key .. ' holds a value that is not state of its algorithm')
    end
  end
  return fixed_window
end
