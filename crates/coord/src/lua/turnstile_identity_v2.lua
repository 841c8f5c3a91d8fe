#!lua name=turnstile_identity_v2
-- turnstile's shared identity (crates/coord/src/identity.rs, docs/replicas.md): the API keys
-- (hashes only), their revocations, the profile registrations and the audit records of a
-- deployment, as one ordered change feed every replica follows into its local SQLite mirror.
-- A second library beside turnstile_v5 (the limits): it is loaded and versioned on its own.
--
-- v2 (after turnstile_identity_v1): every write carries a DEADLINE in Redis server time (ms)
-- and is refused ({'late', now}) when TIME is past it, so a write whose caller gave up (its
-- call timed out while Redis hung, and the command sat in Redis's socket buffer) never applies
-- when Redis resumes. The caller derives the deadline from a TIME Redis answered
-- (crates/coord/src/identity/deadline.rs). ts_id_since_v2 answers TIME too (the readings).
-- Same keys and data model as v1: v1 and v2 replicas share the feed during a rolling deploy.
--
-- Every write is one function call, atomic across replicas: it checks, updates the small
-- index it needs to check the next write, and appends one event to the feed. Events are opaque
-- here (JSON written by the replicas). Key names carry no tenant ID: key hashes are sha256 of
-- 256-bit secrets, workspaces appear as truncated sha256 (W) in index values only.
--
-- Keys (one hash tag {ts-id}, so every call touches one cluster slot):
--   ts:{ts-id}:epoch  string  the feed's epoch, set once when the feed is seeded; every write
--                             names the epoch it read, so a write never lands in a feed that
--                             Redis lost and someone re-seeded (answer 'epoch')
--   ts:{ts-id}:seq    string  the number of the last event
--   ts:{ts-id}:feed   stream  event n has the ID 0-n, field e = the event
--   ts:{ts-id}:keys   hash    live key hash -> tag ('admin' or 'principal:W')
--   ts:{ts-id}:regs   hash    W -> how many registrations the workspace has had
-- KEYS of every function: epoch, seq, feed, keys, regs (in that order).
-- ARGV of every write: the deadline (server ms) first, then the v1 arguments. The deadline is
-- checked before anything else is read: a late write reads and writes nothing but TIME.

-- Redis's clock in ms.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- nil while the deadline (ms, a string) has not passed, else the answer to give. A deadline
-- that does not parse is treated as passed: nothing is written.
local function late(deadline)
  local now = now_ms()
  local limit = tonumber(deadline)
  if limit and now <= limit then
    return nil
  end
  return {'late', now}
end

-- ARGV without its first element (the deadline); a copy, not unpack(): a seed may pass more
-- arguments than Lua's stack holds.
local function shifted(argv)
  local args = {}
  for i = 2, #argv do
    args[i - 1] = argv[i]
  end
  return args
end

local function append(keys, event)
  local seq = redis.call('INCR', keys[2])
  redis.call('XADD', keys[3], '0-' .. seq, 'e', event)
  return seq
end

-- nil when the epoch matches, else the answer to give.
local function wrong_epoch(keys, epoch)
  local current = redis.call('GET', keys[1])
  if current and current == epoch then
    return nil
  end
  return {'epoch', current or ''}
end

-- A write under its deadline: ARGV[1] is the deadline, checked before anything is read; the
-- write itself gets the rest of ARGV (the v1 arguments).
local function by_deadline(write)
  return function(keys, argv)
    local too_late = late(argv[1])
    if too_late then return too_late end
    return write(keys, shifted(argv))
  end
end

-- A write of the epoch its writer follows (its first argument), under its deadline.
local function in_epoch(write)
  return by_deadline(function(keys, args)
    local wrong = wrong_epoch(keys, args[1])
    if wrong then return wrong end
    return write(keys, args)
  end)
end

-- ts_id_seed_v2: ARGV deadline, epoch, then groups of 4: op ('k' key, 'r' registration,
-- 'e' event), a, b, event. 'k': keys[a] = b; 'r': regs[a] += 1. Every group appends its event.
-- Only into a deployment without a feed: {'seeded', epoch, seq} or {'exists', epoch, seq};
-- past the deadline {'late', now}.
local function seed(keys, args)
  local current = redis.call('GET', keys[1])
  if current then
    return {'exists', current, tonumber(redis.call('GET', keys[2]) or '0')}
  end
  redis.call('DEL', keys[2], keys[3], keys[4], keys[5])
  redis.call('SET', keys[1], args[1])
  local seq = 0
  for i = 2, #args, 4 do
    local op, a, b, event = args[i], args[i + 1], args[i + 2], args[i + 3]
    if op == 'k' then
      redis.call('HSET', keys[4], a, b)
    elseif op == 'r' then
      redis.call('HINCRBY', keys[5], a, 1)
    end
    seq = append(keys, event)
  end
  return {'seeded', args[1], seq}
end

-- ts_id_key_v2: ARGV deadline, epoch, key hash, tag, event. {'ok', seq} | {'duplicate'} | epoch
-- | late.
local function create_key(keys, args)
  if redis.call('HEXISTS', keys[4], args[2]) == 1 then
    return {'duplicate'}
  end
  redis.call('HSET', keys[4], args[2], args[3])
  return {'ok', append(keys, args[4])}
end

-- ts_id_revoke_v2: ARGV deadline, epoch, key hash, expected tag, event. Only a live key with that tag
-- (a principal key of that workspace): {'ok', seq} | {'unknown'} | epoch | late.
local function revoke_key(keys, args)
  if redis.call('HGET', keys[4], args[2]) ~= args[3] then
    return {'unknown'}
  end
  redis.call('HDEL', keys[4], args[2])
  return {'ok', append(keys, args[4])}
end

-- ts_id_register_v2: ARGV deadline, epoch, W, expected registrations, event. Compare-and-set on the
-- workspace's registration count: the writer validated the registration against exactly
-- `expected` earlier ones, so two replicas registering at once cannot both be number n.
-- {'ok', seq, n} | {'stale', current count} | epoch | late.
local function register(keys, args)
  local count = tonumber(redis.call('HGET', keys[5], args[2]) or '0')
  if count ~= tonumber(args[3]) then
    return {'stale', count}
  end
  local n = redis.call('HINCRBY', keys[5], args[2], 1)
  return {'ok', append(keys, args[4]), n}
end

-- ts_id_append_v2: ARGV deadline, epoch, event (an audit record). {'ok', seq} | epoch |
-- late.
local function append_event(keys, args)
  return {'ok', append(keys, args[2])}
end

-- ts_id_since_v2 (read-only): ARGV after, count. {epoch or '', last seq, now (server ms),
-- n1, e1, n2, e2, ...} with the events numbered above `after`, at most `count`, oldest first.
-- `now` is the clock reading the replica dates its next writes from.
local function since(keys, args)
  local epoch = redis.call('GET', keys[1]) or ''
  local head = tonumber(redis.call('GET', keys[2]) or '0')
  local out = {epoch, head, now_ms()}
  if head > tonumber(args[1]) then
    local entries = redis.call('XRANGE', keys[3], '(0-' .. args[1], '+', 'COUNT', args[2])
    for _, entry in ipairs(entries) do
      out[#out + 1] = tonumber(string.sub(entry[1], 3))
      local fields = entry[2]
      for j = 1, #fields, 2 do
        if fields[j] == 'e' then out[#out + 1] = fields[j + 1] end
      end
    end
  end
  return out
end

redis.register_function('ts_id_seed_v2', by_deadline(seed))
redis.register_function('ts_id_key_v2', in_epoch(create_key))
redis.register_function('ts_id_revoke_v2', in_epoch(revoke_key))
redis.register_function('ts_id_register_v2', in_epoch(register))
redis.register_function('ts_id_append_v2', in_epoch(append_event))
redis.register_function{function_name = 'ts_id_since_v2', callback = since, flags = {'no-writes'}}
