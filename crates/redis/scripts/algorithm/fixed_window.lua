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

  -- `at`: the caller's now, read from the member by check and commit; `stop`: the
  -- window's end, given after it for a calendar's period (Rust computes those), else 0.
  -- `mark`: the budget alerts the window's use has reached, kept in a key of its own
  -- (`marks`, read by `with_marks` for a limit with alerts; `marked`, as read), so that
  -- the count stays a plain integer that `INCRBY` can charge.
  function fixed_window.decode(_, v)
    if not v then
      return { count = 0, at = 0, stop = 0, new = true, mark = 0, marks = false, marked = 0 }
    end
    if #v > 16 or not string.find(v, '^%d+$') then return nil end
    return { count = tonumber(v), at = 0, stop = 0, new = false, mark = 0, marks = false,
             marked = 0 }
  end
  function fixed_window.copy(s)
    return { count = s.count, at = s.at, stop = s.stop, new = s.new, mark = s.mark,
             marks = s.marks, marked = s.marked }
  end

  -- Reads the budget alerts state s of `key` has reached in its window, from the key
  -- beside it (`key` and `:alerts`: the same hash tag, so the same Cluster slot).
  function fixed_window.with_marks(s, key)
    if s.marks then return end
    s.marks = key .. ':alerts'
    local v = redis.call('GET', s.marks)
    if v then
      if not string.find(v, '^%d$') then
        fail('key ' .. s.marks .. ' holds a value that is not a count of budget alerts')
      end
      s.mark = tonumber(v)
    end
    s.marked = s.mark
  end

  -- Raises s's mark past every alert its count has reached (round.rs's twin:
  -- fixed_window.rs `raise`).
  local function raise(r, s)
    local at = r.alerts
    if not at then return end
    while s.mark < #at and s.count >= at[s.mark + 1] do s.mark = s.mark + 1 end
  end

  -- The caller's now, which names the key's window, and the window's end.
  local function caller_now(r, s, member)
    local now, stop = string.match(member, '^(%d+) (%d+)$')
    if now then
      s.at, s.stop = digits(now, 0), digits(stop, 0)
      if s.stop <= s.at then fail('a calendar period must end after the caller\'s now') end
      return s.at, s.stop
    end
    if not string.find(member, '^%d+$') then fail('a fixed window needs the caller\'s now') end
    s.at = digits(member, 0)
    s.stop = s.at - imod(s.at, r.window) + r.window
    return s.at, s.stop
  end

  function fixed_window.check(r, s, _, cost, member)
    local now, stop = caller_now(r, s, member)
    local used = s.count
    if cost <= r.cap and used + cost <= r.cap then
      return allow(r, r.cap - used - cost, stop - now)
    end
    return deny(r, cost, stop - now, sub0(r.cap, used), stop - now)
  end

  function fixed_window.commit(r, s, _, cost, _, member)
    caller_now(r, s, member)
    s.count = s.count + cost
    raise(r, s)
  end

  -- Off this window's count (Rust sends a refund here only in the window it was
  -- charged in: a window that has ended gave its budget back with it).
  function fixed_window.refund(r, s, _, cost, member)
    caller_now(r, s, member)
    s.count = sub0(s.count, cost)
  end

  -- Writes the count: a new key with a TTL to a second after its window ends (on
  -- the caller's clock), an existing one keeping its TTL. Never a TTL of its own
  -- making: the key's window decides when it is over, not the clock of the batch.
  function fixed_window.write(r, key, s)
    if s.marks and s.mark ~= s.marked then
      -- Until the window's end, as the count; even a count given back to nothing
      -- keeps the alerts it reached.
      local ms = cdiv(s.stop - s.at, 1000) + 1000
      redis.call('SET', s.marks, string.format('%d', s.mark), 'PX', string.format('%d', ms))
    end
    if s.count == 0 and s.new then return end
    local count = string.format('%d', s.count)
    if not s.new then
      redis.call('SET', key, count, 'KEEPTTL')
      return
    end
    local ms = cdiv(s.stop - s.at, 1000) + 1000
    if not redis.call('SET', key, count, 'PX', string.format('%d', ms), 'NX') then
      fail('key ' .. key .. ' holds a value that is not state of its algorithm')
    end
  end
  return fixed_window
end
