#!lua name=turnstile_v1
-- turnstile's shared limits (crates/coord, docs/replicas.md). Library and function names carry
-- a version: a changed contract gets new names, so replicas of two releases never call each
-- other's functions during a rolling deploy.
--
-- Every function reads the server clock (TIME) once; no replica's clock is ever used. Numbers
-- are Lua doubles: every integer stays below 2^53 (the client refuses limits that could not),
-- and every number written to Redis goes through fmt() (%.0f), never Lua's %.14g.
--
-- Keys (all under one hash tag {W}, W = truncated sha256 of the workspace ID):
--   ts:{W}:lease:<scope>      zset  member = lease, score = liveness expiry (server ms)
--   ts:{W}:bkt:<scope>:rpm|tps hash l = level (units x period_ms), t = refilled at (ms)
--   ts:{W}:pause:<provider>   string paused-until (server ms), PX = remaining pause
--   ts:{W}:bud:<budget>       hash  <scope>:a attempts, <scope>:m micro-dollars, <scope>:t tokens
--   ts:{W}:wait:<scope>       zset  member = principal scope (u<h>), score = last seen waiting (ms)
--   ts:{W}:brk:<provider>     hash  s = c|o|h (closed, open, half-open), f = failures, o = opened at
--   ts:{W}:probe:<provider>   zset  member = lease, score = liveness expiry: half-open probe leases

local function fmt(x)
  return string.format('%.0f', x)
end

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The core's TokenBucket (crates/admission/src/bucket.rs): level scaled by period, lazy
-- refill only when now is later than the last refill, capped at capacity x period. A missing
-- key is a full bucket refilled now (the core's buckets start full).
local function bucket_load(key, rate, cap, period, now)
  local v = redis.call('HMGET', key, 'l', 't')
  local full = cap * period
  local level, at
  if v[1] then
    level = math.min(tonumber(v[1]), full)
    at = tonumber(v[2])
  else
    level = full
    at = now
  end
  if now > at then
    level = math.min(level + (now - at) * rate, full)
    at = now
  end
  return level, at
end

-- Milliseconds until `need` scaled units are there; -1 if never.
local function bucket_wait(level, need, rate, cap, period)
  if need > cap * period or rate == 0 then
    return -1
  end
  local deficit = need - level
  if deficit <= 0 then
    return 0
  end
  return math.ceil(deficit / rate)
end

-- One admission's look at a bucket: the core's refill, then has(units). Answers
-- (admitted, level after taking, refilled at, wait ms if not admitted: -1 never).
local function bucket_try(key, rate, cap, period, units, now)
  local level, at = bucket_load(key, rate, cap, period, now)
  local need = units * period
  if level >= need then
    return true, level - need, at, 0
  end
  return false, level, at, bucket_wait(level, need, rate, cap, period)
end

-- Writes a bucket; it expires when it would be full again (a missing bucket is full).
local function bucket_store(key, level, at, rate, cap, period)
  redis.call('HSET', key, 'l', fmt(level), 't', fmt(at))
  if rate > 0 then
    local ttl = math.ceil((cap * period - level) / rate) + 1000
    redis.call('PEXPIRE', key, fmt(ttl))
  end
end

-- Fair turns across replicas (docs/replicas.md, "Fairness across replicas"). A contended scope
-- (one shared by several principals: workspace, provider) keeps a zset of the principals
-- waiting for it, scored by when each was last seen waiting (server ms); entries older than
-- the window are dropped. A request whose principal holds more live leases than some other
-- waiting principal is refused with `turn`, so the next free slot goes to the principal
-- furthest behind (equal shares: fewest held), whichever replica its waiter polls from. A
-- principal's holding is the live count of its principal-scope lease zset (all its leases in
-- the workspace), read at ts:{W}:lease:<principal>: derived from the wait key's hash tag, so
-- it is in the call's slot.
local function live_count(key, now)
  return redis.call('ZCOUNT', key, '(' .. fmt(now), '+inf')
end

local function fair_prune(wk, window, now)
  redis.call('ZREMRANGEBYSCORE', wk, '-inf', '(' .. fmt(now - window))
end

local function fair_note_waiting(wk, principal, window, now)
  redis.call('ZADD', wk, fmt(now), principal)
  redis.call('PEXPIRE', wk, fmt(math.max(window * 4, 1000)))
end

-- Whether `principal` (holding `mine`) must let another waiting principal go first.
local function fair_behind_other(wk, prefix, principal, mine, now)
  local waiting = redis.call('ZRANGE', wk, 0, -1)
  for _, other in ipairs(waiting) do
    if other ~= principal and live_count(prefix .. 'lease:' .. other, now) < mine then
      return true
    end
  end
  return false
end

-- Whether `principal`, refused by a full fair scope, has the next turn (no other waiting
-- principal holds fewer): its waiters poll faster, so the slot freed on another replica is
-- not left idle for a whole poll interval.
local function fair_next(wk, own_leases, prefix, principal, window, now)
  fair_prune(wk, window, now)
  return not fair_behind_other(wk, prefix, principal, live_count(own_leases, now), now)
end

-- A grant in a contended scope (someone is waiting, or this grant fills it) keeps the
-- principal's entry fresh too: a principal whose clients come straight back for the slot they
-- just released is still in the race, so a faster poller holding more cannot take that slot
-- in the gap between its release and its next request.
local function fair_note_granted(fair, keys, args, principal, window, now)
  for i, wk in pairs(fair) do
    local conc = tonumber(args[6 + (i - 1) * 9 + 2])
    if redis.call('EXISTS', wk) == 1 or redis.call('ZCARD', keys[3 + (i - 1) * 3]) >= conc then
      fair_note_waiting(wk, principal, window, now)
    end
  end
end

-- Reads the optional fairness block of ts_acquire_v1's ARGV at `a` (see acquire). Answers
-- {scope index -> wait key}, the principal scope index, the window, the key prefix, and the
-- index after the block.
local function fair_args(keys, args, a, nkeys)
  local fair = {}
  local nfair = tonumber(args[a] or '0') or 0
  if nfair == 0 then return fair, 0, 0, '', a + 1, nkeys end
  for j = 1, nfair do
    fair[tonumber(args[a + j])] = keys[nkeys + j]
  end
  local p = a + nfair + 1
  return fair, tonumber(args[p]), tonumber(args[p + 1]), args[p + 2], p + 3, nkeys + nfair
end

-- The shared breaker of a provider lane, with the core's semantics (crates/admission,
-- breaker.rs): closed counts failures, at the threshold it opens for open_ms; the first look
-- after that moves it to half-open, where at most max_probes probe leases are held (a probe is
-- a lease in the probe zset, with the lease's liveness: a dead holder's probe expires); a
-- success closes it from any state and resets the count; a failure at or past the threshold
-- opens it again. State: hash s (c/o/h), f (failures), o (opened at, server ms).
local BREAKER_TTL_MS = 86400000

-- Answers 'pass' (closed), 'probe' (half-open with a free probe slot), 'open' with the
-- reopening instant, or 'busy' (every probe slot held) with the first probe's expiry.
local function breaker_gate(bk, pk, open_ms, max_probes, now)
  local v = redis.call('HMGET', bk, 's', 'o')
  local state = v[1] or 'c'
  if state == 'o' then
    local reopens = tonumber(v[2] or '0') + open_ms
    if now < reopens then return 'open', reopens end
    redis.call('HSET', bk, 's', 'h')
    state = 'h'
  end
  if state == 'h' then
    redis.call('ZREMRANGEBYSCORE', pk, '-inf', fmt(now))
    if redis.call('ZCARD', pk) >= max_probes then
      local first = redis.call('ZRANGE', pk, 0, 0, 'WITHSCORES')
      return 'busy', tonumber(first[2] or '0')
    end
    return 'probe', 0
  end
  return 'pass', 0
end

-- Records one outcome ('success' or 'failure'); answers the state after it.
local function breaker_record(bk, pk, outcome, threshold, now)
  if outcome == 'success' then
    local v = redis.call('HMGET', bk, 's', 'f')
    local state = v[1]
    -- Closed with no failure counted (the common case): nothing to write.
    if (not state or state == 'c') and (not v[2] or v[2] == '0') then return 'c' end
    redis.call('HSET', bk, 's', 'c', 'f', '0')
    redis.call('PEXPIRE', bk, BREAKER_TTL_MS)
    if state and state ~= 'c' then redis.call('DEL', pk) end
    return 'c'
  end
  if outcome ~= 'failure' then
    return redis.call('HGET', bk, 's') or 'c'
  end
  local f = redis.call('HINCRBY', bk, 'f', 1)
  local state = redis.call('HGET', bk, 's') or 'c'
  if f >= threshold and state ~= 'o' then
    redis.call('HSET', bk, 's', 'o', 'o', fmt(now))
    state = 'o'
  end
  redis.call('PEXPIRE', bk, BREAKER_TTL_MS)
  return state
end

-- ts_acquire_v1
-- KEYS: pause, budget, then per scope: lease zset, rpm bucket, tps bucket; then (optional)
--       one wait zset per fair scope; then (optional) the breaker hash and probe zset.
-- ARGV: member, liveness_ms, nscopes, tokens (-1 none), micro (-1 none), attempts,
--       then per scope 9 values: name, concurrency (-1 none), rpm_rate, rpm_cap
--       (rate -1 none), tps_rate, tps_cap (rate -1 none), max_attempts, max_micro,
--       max_tokens (-1 none);
--       then (optional, absent = no fairness, no breaker): nfair, the fair scopes' indices,
--       the principal scope's index, window_ms, key prefix 'ts:{W}:'; then breaker
--       threshold (-1 none), open_ms, max_probes.
-- Returns {verdict, reason, scope index, instant, now}:
--   granted  ''|probe 0 0 now                  (probe: the lease is the half-open probe)
--   defer    concurrency|requests-per-minute|tokens-per-second|circuit-open  i  wake_at (0 unknown)  now
--            (a full fair scope answers -i when this principal has the next turn)
--   turn     concurrency  i 0 now               (another waiting principal is further behind)
--   paused   retry-after 0 paused_until now
--   open     circuit-open 0 reopens_at now
--   reject   attempts|cost|tokens|tokens-per-second  i 0 now
-- Check order as the core's tryAdmit: concurrency (and turns), pause, breaker, budgets,
-- buckets; all or nothing. Extra ARGV and KEYS are ignored by older libraries, and a library
-- reads none when the caller sends none, so both directions of a rolling deploy still work.
local function acquire(keys, args)
  local member = args[1]
  local liveness = tonumber(args[2])
  local n = tonumber(args[3])
  local tokens = tonumber(args[4])
  local micro = tonumber(args[5])
  local attempts = tonumber(args[6])
  local now = now_ms()
  local fair, pidx, window, prefix, b, nkeys = fair_args(keys, args, 7 + n * 9, 2 + 3 * n)
  local threshold = tonumber(args[b] or '-1') or -1
  local bk_, pk_ = keys[nkeys + 1], keys[nkeys + 2]
  -- A retried call whose first try did run: granted, charged once.
  if n > 0 and redis.call('ZSCORE', keys[3], member) then
    if threshold >= 0 and redis.call('ZSCORE', pk_, member) then
      return {'granted', 'probe', 0, 0, now}
    end
    return {'granted', '', 0, 0, now}
  end
  local principal = ''
  if pidx > 0 then principal = args[6 + (pidx - 1) * 9 + 1] end
  for i = 1, n do
    local a = 6 + (i - 1) * 9
    local conc = tonumber(args[a + 2])
    if conc >= 0 then
      local lk = keys[3 + (i - 1) * 3]
      -- Expired leases matter only at the limit: drop them then (a set below its limit holds
      -- fewer members than the limit, expired or not), and count again only then.
      local held = redis.call('ZCARD', lk)
      if held >= conc then
        if redis.call('ZREMRANGEBYSCORE', lk, '-inf', now) > 0 then
          held = redis.call('ZCARD', lk)
        end
      end
      if held >= conc then
        local index = i
        if fair[i] then
          fair_note_waiting(fair[i], principal, window, now)
          if fair_next(fair[i], keys[3 + (pidx - 1) * 3], prefix, principal, window, now) then
            index = -i
          end
        end
        local first = redis.call('ZRANGE', lk, 0, 0, 'WITHSCORES')
        local wake = 0
        if first[2] then wake = tonumber(first[2]) end
        return {'defer', 'concurrency', index, wake, now}
      end
    end
  end
  -- Turns: every scope has room; a contended one goes to the principal furthest behind.
  if pidx > 0 then
    local mine = -1
    for i = 1, n do
      local wk = fair[i]
      -- Uncontended (no wait set): one ZCARD of a missing key.
      if wk and redis.call('ZCARD', wk) > 0 then
        fair_prune(wk, window, now)
        if redis.call('ZCARD', wk) > 0 then
          if mine < 0 then mine = live_count(keys[3 + (pidx - 1) * 3], now) end
          if fair_behind_other(wk, prefix, principal, mine, now) then
            fair_note_waiting(wk, principal, window, now)
            return {'turn', 'concurrency', i, 0, now}
          end
        end
      end
    end
  end
  local paused = tonumber(redis.call('GET', keys[1]) or '0')
  if paused > now then
    return {'paused', 'retry-after', 0, paused, now}
  end
  local probe = false
  if threshold >= 0 then
    local gate, at = breaker_gate(bk_, pk_, tonumber(args[b + 1]), tonumber(args[b + 2]), now)
    if gate == 'open' then return {'open', 'circuit-open', 0, at, now} end
    -- Probes busy: no instant (a probe's release may come any time; waiters poll).
    if gate == 'busy' then return {'defer', 'circuit-open', 0, 0, now} end
    probe = gate == 'probe'
  end
  -- Budgets: every line the lane reads, in one HMGET (none when no scope has a budget);
  -- `lines` keeps (field, spent, charge) for the commit.
  local bk = keys[2]
  local fields, checks = {}, {}
  for i = 1, n do
    local a = 6 + (i - 1) * 9
    local name = args[a + 1]
    local max_a = tonumber(args[a + 7])
    local max_m = tonumber(args[a + 8])
    local max_t = tonumber(args[a + 9])
    if max_a >= 0 then
      fields[#fields + 1] = name .. ':a'
      checks[#checks + 1] = {i, max_a, attempts, 'attempts', true}
    end
    if max_m >= 0 and micro >= 0 then
      fields[#fields + 1] = name .. ':m'
      checks[#checks + 1] = {i, max_m, micro, 'cost', micro > 0}
    end
    if max_t >= 0 and tokens >= 0 then
      fields[#fields + 1] = name .. ':t'
      checks[#checks + 1] = {i, max_t, tokens, 'tokens', tokens > 0}
    end
  end
  local lines = {}
  if #fields > 0 then
    local spent = redis.call('HMGET', bk, unpack(fields))
    for j, c in ipairs(checks) do
      local s = tonumber(spent[j] or '0')
      if s + c[3] > c[2] then return {'reject', c[4], c[1], 0, now} end
      if c[5] then lines[#lines + 1] = {fields[j], s + c[3]} end
    end
  end
  local units = math.max(tokens, 0)
  local pending = {}
  for i = 1, n do
    local a = 6 + (i - 1) * 9
    local rk = keys[4 + (i - 1) * 3]
    local tk = keys[5 + (i - 1) * 3]
    local r_rate = tonumber(args[a + 3])
    if r_rate >= 0 then
      local r_cap = tonumber(args[a + 4])
      local ok, level, at, wait = bucket_try(rk, r_rate, r_cap, 60000, 1, now)
      if not ok then
        local wake = 0
        if wait >= 0 then wake = now + wait end
        return {'defer', 'requests-per-minute', i, wake, now}
      end
      pending[#pending + 1] = {rk, level, at, r_rate, r_cap, 60000}
    end
    local t_rate = tonumber(args[a + 5])
    if t_rate >= 0 then
      local t_cap = tonumber(args[a + 6])
      local ok, level, at, wait = bucket_try(tk, t_rate, t_cap, 1000, units, now)
      if not ok then
        if wait < 0 then return {'reject', 'tokens-per-second', i, 0, now} end
        return {'defer', 'tokens-per-second', i, now + wait, now}
      end
      pending[#pending + 1] = {tk, level, at, t_rate, t_cap, 1000}
    end
  end
  -- Commit.
  local score = fmt(now + liveness)
  for i = 1, n do
    local a = 6 + (i - 1) * 9
    if tonumber(args[a + 2]) >= 0 then
      redis.call('ZADD', keys[3 + (i - 1) * 3], score, member)
    end
  end
  -- The budget lines charged (spent + charge, read above in this same call), in one HSET.
  if #lines > 0 then
    local hset = {}
    for _, l in ipairs(lines) do
      hset[#hset + 1] = l[1]
      hset[#hset + 1] = fmt(l[2])
    end
    redis.call('HSET', bk, unpack(hset))
    redis.call('PEXPIRE', bk, 86400000)
  end
  for _, p in ipairs(pending) do
    bucket_store(p[1], p[2], p[3], p[4], p[5], p[6])
  end
  fair_note_granted(fair, keys, args, principal, window, now)
  if probe then
    redis.call('ZADD', pk_, fmt(now + liveness), member)
    redis.call('PEXPIRE', pk_, BREAKER_TTL_MS)
    return {'granted', 'probe', 0, 0, now}
  end
  return {'granted', '', 0, 0, now}
end

-- ts_release_v1
-- KEYS: pause, budget, then the lease zsets of the scopes; then (optional) the breaker hash
--       and probe zset.
-- ARGV: member, nscopes, pause_ms (0 none), charged_tokens, actual_tokens (-1 none),
--       charged_micro, actual_micro (-1 none), then (optional) '@brk', outcome
--       (success|failure|none), threshold, then the names of the scopes whose budgets were
--       charged. ('@brk' is no scope name: an older library reads it as a budget scope with no
--       lines, which changes nothing.)
-- Returns {now (0 when neither a pause nor a failure was given), paused_until (0 none),
--          breaker state after the release ('' none)}.
local function release(keys, args)
  local member = args[1]
  local n = tonumber(args[2])
  local pause_ms = tonumber(args[3])
  local ct, at_, cm, am = tonumber(args[4]), tonumber(args[5]), tonumber(args[6]), tonumber(args[7])
  local names = 8
  local outcome, threshold = 'none', -1
  if args[8] == '@brk' then
    outcome, threshold, names = args[9], tonumber(args[10]), 11
  end
  -- The clock is read only for a pause or a failure (otherwise the release answers now = 0).
  local now = 0
  if pause_ms > 0 or (threshold >= 0 and outcome == 'failure') then now = now_ms() end
  for i = 1, n do
    redis.call('ZREM', keys[2 + i], member)
  end
  local state = ''
  if threshold >= 0 then
    redis.call('ZREM', keys[n + 4], member)
    state = breaker_record(keys[n + 3], keys[n + 4], outcome, threshold, now)
  end
  -- Settle: each existing line of the charged scopes becomes max(line - charged, 0) + actual,
  -- read in one HMGET and written in one HSET.
  local bk = keys[2]
  if (at_ >= 0 or am >= 0) and #args >= names then
    local fields, charged, actual = {}, {}, {}
    for j = names, #args do
      if at_ >= 0 then
        fields[#fields + 1] = args[j] .. ':t'; charged[#fields] = ct; actual[#fields] = at_
      end
      if am >= 0 then
        fields[#fields + 1] = args[j] .. ':m'; charged[#fields] = cm; actual[#fields] = am
      end
    end
    local cur = redis.call('HMGET', bk, unpack(fields))
    local hset = {}
    for j = 1, #fields do
      if cur[j] then
        hset[#hset + 1] = fields[j]
        hset[#hset + 1] = fmt(math.max(tonumber(cur[j]) - charged[j], 0) + actual[j])
      end
    end
    if #hset > 0 then redis.call('HSET', bk, unpack(hset)) end
  end
  local until_ = 0
  if pause_ms > 0 then
    until_ = now + pause_ms
    local cur = tonumber(redis.call('GET', keys[1]) or '0')
    if cur >= until_ then
      until_ = cur
    else
      redis.call('SET', keys[1], fmt(until_), 'PX', fmt(pause_ms))
    end
  end
  return {now, until_, state}
end

-- ts_breaker_v1: KEYS breaker hash, probe zset; ARGV threshold, success_seen (0/1), failures.
-- The merge of the outcomes a degraded replica saw (its local breaker applied meanwhile): a
-- success first (it closes and resets), then the failures after the last success, one by one
-- as releases would have counted them. Returns {now, state}.
local function breaker_merge(keys, args)
  local threshold = tonumber(args[1])
  local now = now_ms()
  local state = redis.call('HGET', keys[1], 's') or 'c'
  if args[2] == '1' then state = breaker_record(keys[1], keys[2], 'success', threshold, now) end
  for _ = 1, tonumber(args[3]) do
    state = breaker_record(keys[1], keys[2], 'failure', threshold, now)
  end
  return {now, state}
end

-- ts_pause_v1: KEYS pause; ARGV pause_ms. Monotonic: a shorter pause never shortens a longer
-- one. Returns {now, paused_until}.
local function pause(keys, args)
  local ms = tonumber(args[1])
  local now = now_ms()
  local until_ = now + ms
  local cur = tonumber(redis.call('GET', keys[1]) or '0')
  if cur >= until_ then
    return {now, cur}
  end
  if ms > 0 then
    redis.call('SET', keys[1], fmt(until_), 'PX', fmt(ms))
  end
  return {now, until_}
end

-- ts_renew_v1: KEYS the lease zsets; ARGV liveness_ms, mode ('xx' renew only what is there,
-- 'add' re-register after a loss), then pairs (key index, member). One call per workspace
-- renews all of this replica's leases in it. Returns {now, members written}.
local function renew(keys, args)
  local liveness = tonumber(args[1])
  local mode = args[2]
  local now = now_ms()
  local score = fmt(now + liveness)
  local written = 0
  for j = 3, #args, 2 do
    local key = keys[tonumber(args[j])]
    if mode == 'xx' then
      written = written + redis.call('ZADD', key, 'XX', 'CH', score, args[j + 1])
    else
      redis.call('ZADD', key, score, args[j + 1])
      written = written + 1
    end
  end
  return {now, written}
end

-- ts_bucket_run_v1: the conformance hook of the bucket arithmetic (crates/coord/tests). Runs
-- bucket_try / bucket_store, exactly as ts_acquire_v1 does, over a sequence of (now, units)
-- steps with an injected clock, on KEYS[1], which it deletes afterwards.
-- ARGV: rate, capacity, period, then pairs (now, units). Returns per step {admitted (1/0),
-- wait ms (-1 never; 0 when admitted), level in whole units after the step}.
local function bucket_run(keys, args)
  local rate, cap, period = tonumber(args[1]), tonumber(args[2]), tonumber(args[3])
  local out = {}
  for j = 4, #args, 2 do
    local now, units = tonumber(args[j]), tonumber(args[j + 1])
    local ok, level, at, wait = bucket_try(keys[1], rate, cap, period, units, now)
    if ok then
      bucket_store(keys[1], level, at, rate, cap, period)
      out[#out + 1] = 1
      out[#out + 1] = 0
    else
      out[#out + 1] = 0
      out[#out + 1] = wait
    end
    out[#out + 1] = (level - math.fmod(level, period)) / period
  end
  redis.call('DEL', keys[1])
  return out
end

-- ts_time_v1: the server clock (the replicas' health probe).
local function time(keys, args)
  return now_ms()
end

redis.register_function('ts_acquire_v1', acquire)
redis.register_function('ts_release_v1', release)
redis.register_function('ts_pause_v1', pause)
redis.register_function('ts_breaker_v1', breaker_merge)
redis.register_function('ts_renew_v1', renew)
redis.register_function('ts_bucket_run_v1', bucket_run)
redis.register_function{function_name = 'ts_time_v1', callback = time, flags = {'no-writes'}}
