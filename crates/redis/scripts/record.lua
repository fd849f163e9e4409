-- The Lua twin of crates/core/src/store/records.rs (`OpenRecords`, `check_keeping_here`):
-- read the two side by side.
-- Part of the decision library; scripts/prelude.lua says how the parts are joined.

-- === record: a record kept with its batch (a reservation's) ==========================
-- Not a limit: the last request of a batch, whose member is the record and whose
-- window is its time to live (`8 0 1 <ttl µs> 0 0 0 0`, script.rs `Section::keep`).
-- It always admits, and is written only when the round charges its batch (pass 2
-- commits it only then): the batch's charges and the record land in one call, or
-- neither does. A key already there is refused, never overwritten: ids are random,
-- so it would be another's record.

local function define_record()
  local record = {}
  function record.decode(_, v)
    if v then return nil end
    return { bytes = false }
  end
  function record.copy(s) return { bytes = s.bytes } end
  function record.check(r) return allow(r, 0, 0) end
  function record.commit(_, s, _, _, _, member) s.bytes = member end
  function record.write(r, key, s)
    if not s.bytes then return end
    redis.call('SET', key, s.bytes, 'PX', string.format('%d', cdiv(r.window, 1000)))
  end
  return record
end
