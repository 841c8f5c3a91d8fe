#!lua name=turnstile_v5
-- turnstile's shared limits (crates/coord, docs/replicas.md). Library and function names carry
-- a version: a changed contract gets new names, so replicas of two releases never call each
-- other's functions during a rolling deploy (v2: the compact acquire / release protocol, which
-- passes only the keys and values a lane's scopes use; v3: a scope's buckets in one hash, and
-- expiries refreshed only when they would run out, not on every write; v4: ts_batch_v4, several
-- acquires and releases of one workspace in one call, same keys and values as v3; v5: the
-- workspace's books epoch, ts:{W}:ep, checked by every acquire and renewal, so that books Redis
-- lost (FLUSHALL, a restart without persistence, eviction) are rebuilt by the replicas holding
-- leases before anyone is granted into them: docs/replicas.md, "Redis loses the books").
--
-- Every function call reads the server clock (TIME) at most once (a batch: once for all its
-- operations); no replica's clock is ever used.
-- Numbers are Lua doubles: every integer stays below 2^53 (the client refuses limits that could
-- not), and every number written to Redis goes through fmt() (%.0f), never Lua's %.14g.
--
-- Cost (docs/performance.md, "Redis time per pair"): each key and argument passed (Redis copies
-- them into Lua tables), each redis.call, each tonumber() of a string, string.format and table
-- constructor costs about as much as a cheap command on the measured host. So the hot paths
-- (acquire and release of a concurrency-only lane) make only the calls the decision needs; an
-- acquire passes what stays the same between admissions of a lane (limits, liveness, window,
-- breaker) as one "shape" string, decoded once and remembered (lane_of; per-call scratch such
-- as the counts read is kept in the remembered lane: Redis runs one function at a time, and
-- every field read is written first in the same call), and builds no table on its way to a
-- grant. Instruction counts (callgrind, docs/performance.md session 8): a redis.call 3,000-8,000
-- instructions, tonumber(s) ~2,000 (it converts twice: lua_isnumber, then lua_tonumber), the
-- coercion s + 0 ~900 (once), string.format ~2,000, any C function call ~500, a table ~1,000,
-- plain arithmetic ~50: so the hot paths read numbers with `+ 0`, compare instead of calling
-- math.min / math.max, and skip tonumber for the '-1' (none) arguments.
--
-- Keys (all under one hash tag {W}, W = truncated sha256 of the workspace ID):
--   ts:{W}:lease:<scope>      zset  member = lease, score = liveness expiry (server ms)
--   ts:{W}:bkt:<scope>        hash  the scope's buckets: rl / rt request bucket level (units x
--                                   period_ms) / refilled at (ms), tl / tt token bucket; x = the
--                                   key's expiry (server ms) as last set
--   ts:{W}:pause:<provider>   string paused-until (server ms), PX = remaining pause
--   ts:{W}:bud:<budget>       hash  <scope>:a attempts, <scope>:m micro-dollars, <scope>:t tokens;
--                                   x = the key's expiry (server ms) as last set
--   ts:{W}:wait:<scope>       zset  member = principal scope (u<h>), score = last seen waiting (ms)
--   ts:{W}:brk:<provider>     hash  s = c|o|h (closed, open, half-open), f = failures, o = opened at
--   ts:{W}:probe:<provider>   zset  member = lease, score = liveness expiry: half-open probe leases
--   ts:{W}:ep                 string the books' epoch: the server ms at which the workspace's
--                                   books became trustworthy (written when found missing: now +
--                                   RECONCILE_MS); no expiry

-- A number written to Redis, as '%.0f' writes it. Every number the scripts write is an
-- integer below 2^53, for which '%d' writes the same digits at a third of the cost ('%.0f'
-- goes through glibc's multi-precision arithmetic); anything else still goes through '%.0f'.
local function fmt(x)
  if x % 1 == 0 and x < 9007199254740992 and x > -9007199254740992 then
    return string.format('%d', x)
  end
  return string.format('%.0f', x)
end

local function now_ms()
  local t = redis.call('TIME')
  local us = t[2] + 0
  return t[1] * 1000 + (us - us % 1000) / 1000
end

-- The call's clock: TIME read on first use, then the same instant for the rest of the call
-- (every operation of a batch sees one now). Reset at the start of every function call
-- (call_clock_reset): Redis runs one function at a time, so the cache never outlives a call.
local call_now = false
local function call_clock()
  if not call_now then call_now = now_ms() end
  return call_now
end
local function call_clock_reset()
  call_now = false
end

-- The core's TokenBucket (crates/admission/src/bucket.rs): level scaled by period, lazy
-- refill only when now is later than the last refill, capped at capacity x period. A missing
-- bucket (no fields: the key expired or was never written) is full, refilled now (the core's
-- buckets start full). `lv`, `tv`: the stored level and instant (strings, or false).
local function bucket_refill(lv, tv, rate, cap, period, now)
  local full = cap * period
  local level, at
  if lv then
    level = lv + 0
    if level > full then level = full end
    at = tv + 0
  else
    level = full
    at = now
  end
  if now > at then
    level = level + (now - at) * rate
    if level > full then level = full end
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

-- A scope's buckets (request: r*, token: t*) live in one hash, read with one HMGET and written
-- with one HSET. The hash expires once every bucket in it would be full again (a missing
-- bucket is full, so an expired hash means the same as its last levels); the expiry is set
-- with some slack (twice the longest refill from empty) and remembered in field x, so the
-- PEXPIRE runs only when the levels written would outlast it: at most about once per refill
-- period instead of on every grant. A bucket that never refills (rate 0) keeps the hash from
-- expiring (as in v2: its key never expired).
-- L: the lane (decode_lane); per scope i: bkey (index in KEYS), rrate / rcap / rper, trate /
-- tcap / tper (false: no such bucket), bfields (the HMGET field list), span (the slack, ms,
-- or -1 for never expires). Results are kept in the lane as scratch (rl_, ra_, tl_, ta_, x_):
-- Redis runs one function at a time and each is written before it is read in the same call.

-- Reads and tries scope i's buckets: `ru` request units, `tu` token units. Answers nil when
-- both have room (the levels after taking are in the scratch), or the refused bucket ('r' or
-- 't') and the wait (ms; -1 never).
local function buckets_try(L, keys, i, ru, tu, now)
  local v = redis.call('HMGET', keys[L.bkey[i]], unpack(L.bfields[i]))
  local j = 1
  if L.rrate[i] then
    local rate, cap, period = L.rrate[i], L.rcap[i], L.rper[i]
    local level, at = bucket_refill(v[1], v[2], rate, cap, period, now)
    L.rl_[i], L.ra_[i], j = level, at, 3
    local need = ru * period
    if level < need then return 'r', bucket_wait(level, need, rate, cap, period) end
    L.rl_[i] = level - need
  end
  if L.trate[i] then
    local rate, cap, period = L.trate[i], L.tcap[i], L.tper[i]
    local level, at = bucket_refill(v[j], v[j + 1], rate, cap, period, now)
    L.tl_[i], L.ta_[i], j = level, at, j + 2
    local need = tu * period
    if level < need then return 't', bucket_wait(level, need, rate, cap, period) end
    L.tl_[i] = level - need
  end
  L.x_[i] = (v[j] or 0) + 0
  return nil, 0
end

-- Writes scope i's buckets (the levels buckets_try left), refreshing the expiry when needed.
local function buckets_store(L, keys, i, now)
  local bk = keys[L.bkey[i]]
  local span = L.span[i]
  local x = false
  if span >= 0 then
    -- When the hash must live until (as v2's per-bucket TTL: full again, plus a second).
    -- (An upper bound of the ceil of each refill time is enough here: no math.ceil call.)
    local need = 0
    if L.rrate[i] then need = (L.rcap[i] * L.rper[i] - L.rl_[i]) / L.rrate[i] + 1 end
    if L.trate[i] then
      local t = (L.tcap[i] * L.tper[i] - L.tl_[i]) / L.trate[i] + 1
      if t > need then need = t end
    end
    if now + need + 1000 > L.x_[i] then x = now + span end
  end
  if L.rrate[i] and L.trate[i] then
    if x then
      redis.call('HSET', bk, 'rl', fmt(L.rl_[i]), 'rt', fmt(L.ra_[i]), 'tl', fmt(L.tl_[i]),
        'tt', fmt(L.ta_[i]), 'x', fmt(x))
    else
      redis.call('HSET', bk, 'rl', fmt(L.rl_[i]), 'rt', fmt(L.ra_[i]), 'tl', fmt(L.tl_[i]),
        'tt', fmt(L.ta_[i]))
    end
  elseif L.rrate[i] then
    if x then
      redis.call('HSET', bk, 'rl', fmt(L.rl_[i]), 'rt', fmt(L.ra_[i]), 'x', fmt(x))
    else
      redis.call('HSET', bk, 'rl', fmt(L.rl_[i]), 'rt', fmt(L.ra_[i]))
    end
  else
    if x then
      redis.call('HSET', bk, 'tl', fmt(L.tl_[i]), 'tt', fmt(L.ta_[i]), 'x', fmt(x))
    else
      redis.call('HSET', bk, 'tl', fmt(L.tl_[i]), 'tt', fmt(L.ta_[i]))
    end
  end
  if x then redis.call('PEXPIRE', bk, fmt(span)) end
end

-- The buckets of scope i in a lane: its fields, slack and scratch (decode_lane and the
-- conformance hook).
local function buckets_init(L, i)
  local fields, span = {}, 0
  for _, b in ipairs({{'r', L.rrate[i], L.rcap[i], L.rper[i]}, {'t', L.trate[i], L.tcap[i], L.tper[i]}}) do
    if b[2] then
      fields[#fields + 1] = b[1] .. 'l'
      fields[#fields + 1] = b[1] .. 't'
      if b[2] == 0 or span < 0 then
        span = -1
      else
        span = math.max(span, 2 * math.ceil(b[3] * b[4] / b[2]) + 1000)
      end
    end
  end
  fields[#fields + 1] = 'x'
  L.bfields[i], L.span[i] = fields, span
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

-- ts_acquire_v5
-- ARGV: member, the lane's shape (below), then the principal scope's name when some scope has
--       fair turns, then tokens (-1 none) and micro-dollars (-1 none) when some scope has a
--       bucket or a budget.
-- The shape: what stays the same from one admission of a lane to the next, in one string
-- (decoded once per distinct string, then remembered: lane_of()):
--       liveness_ms;window_ms (- no fair turns);threshold,open_ms,max_probes (- no breaker)
--       then ';' and per scope its flags (the sum of: 1 concurrency, 2 requests-per-minute
--       bucket, 4 tokens-per-second bucket, 8 attempts budget, 16 money budget, 32 token
--       budget, 64 fair turns) followed by ',' and the values the flags announce, in this
--       order: concurrency; rpm rate, rpm capacity; tps rate, tps capacity; the scope's name
--       (any budget flag), max attempts, max micro-dollars, max tokens (each only with its
--       flag). E.g. '10000;50;-;1,4096;65,4096;65,4096'.
-- KEYS: pause, then per scope the keys its flags announce: lease zset (1), the scope's bucket
--       hash (2 or 4: one key for both); then the budget hash when some scope has a budget flag; then one wait zset
--       per fair scope, in scope order; then the breaker hash and probe zset when the lane has
--       a breaker. The principal's lease zset and the other waiting principals' are derived
--       from the key prefix 'ts:{W}:' of the pause key (same hash tag, same slot).
-- Returns now (an integer) for a plain grant; otherwise {verdict, reason, scope index,
-- instant, now}:
--   granted  probe 0 0 now                     (the lease is the half-open probe)
--   defer    concurrency|requests-per-minute|tokens-per-second|circuit-open  i  wake_at (0 unknown)  now
--            (a full fair scope answers -i when this principal has the next turn)
--   turn     concurrency  i 0 now               (another waiting principal is further behind)
--   paused   retry-after 0 paused_until now
--   open     circuit-open 0 reopens_at now
--   reject   attempts|cost|tokens|tokens-per-second  i 0 now
-- Check order as the core's tryAdmit: concurrency (and turns), pause, breaker, budgets,
-- buckets; all or nothing. A member is never sent twice (each acquire of a replica has a fresh
-- member, and neither the client nor redis-rs re-sends an FCALL that may have run), so there is
-- no idempotency check: the member written is always new.
local CONC, RPM, TPS, MAX_A, MAX_M, MAX_T, FAIR = 1, 2, 4, 8, 16, 32, 64
-- A budget hash lives at least BUDGET_IDLE_MS after its last charge, at most BUDGET_TTL_MS.
local BUDGET_IDLE_MS, BUDGET_TTL_MS = 86400000, 90000000

local function has(f, flag)
  return math.floor(f / flag) % 2 == 1
end

-- Decodes a shape (see above) into a lane: per scope its limits and the index in KEYS of each
-- of its keys (false: none).
local function decode_lane(shape)
  local parts = {}
  for part in string.gmatch(shape, '[^;]+') do parts[#parts + 1] = part end
  local lane = {
    liveness = tonumber(parts[1]), window = tonumber(parts[2]) or 0, threshold = -1,
    n = #parts - 3, nfair = 0, budgets = false, buckets = false,
    lease = {}, conc = {}, held = {}, bkey = {}, rrate = {}, rcap = {}, rper = {}, trate = {},
    tcap = {}, tper = {}, bfields = {}, span = {}, rl_ = {}, ra_ = {}, tl_ = {}, ta_ = {},
    x_ = {}, name = {}, maxa = {}, maxm = {}, maxt = {}, wait = {}, bud = false, brk = false,
    plans = {},
  }
  if parts[3] ~= '-' then
    local b = {}
    for v in string.gmatch(parts[3], '[^,]+') do b[#b + 1] = tonumber(v) end
    lane.threshold, lane.open_ms, lane.probes = b[1], b[2], b[3]
  end
  local k = 2
  for i = 1, lane.n do
    local v = {}
    for x in string.gmatch(parts[3 + i], '[^,]+') do v[#v + 1] = x end
    local f, a = tonumber(v[1]), 2
    lane.lease[i], lane.bkey[i], lane.wait[i] = false, false, false
    lane.rrate[i], lane.trate[i] = false, false
    lane.maxa[i], lane.maxm[i], lane.maxt[i] = -1, -1, -1
    if has(f, CONC) then
      lane.lease[i], lane.conc[i], k, a = k, tonumber(v[a]), k + 1, a + 1
    end
    if has(f, RPM) then
      lane.rrate[i], lane.rcap[i], lane.rper[i] = tonumber(v[a]), tonumber(v[a + 1]), 60000
      a = a + 2
    end
    if has(f, TPS) then
      lane.trate[i], lane.tcap[i], lane.tper[i] = tonumber(v[a]), tonumber(v[a + 1]), 1000
      a = a + 2
    end
    if has(f, RPM) or has(f, TPS) then
      lane.bkey[i], k, lane.buckets = k, k + 1, true
      buckets_init(lane, i)
    end
    if has(f, MAX_A) or has(f, MAX_M) or has(f, MAX_T) then
      lane.name[i], a, lane.budgets = v[a], a + 1, true
      if has(f, MAX_A) then lane.maxa[i], a = tonumber(v[a]), a + 1 end
      if has(f, MAX_M) then lane.maxm[i], a = tonumber(v[a]), a + 1 end
      if has(f, MAX_T) then lane.maxt[i], a = tonumber(v[a]), a + 1 end
    end
    if has(f, FAIR) then
      lane.nfair = lane.nfair + 1
      lane.wait[i] = lane.nfair
    end
  end
  if lane.budgets then
    lane.bud, k = k, k + 1
  end
  lane.wait0 = k
  for i = 1, lane.n do
    if lane.wait[i] then lane.wait[i] = k + lane.wait[i] - 1 end
  end
  k = k + lane.nfair
  if lane.threshold >= 0 then lane.brk = k end
  return lane
end

-- Lanes by shape; bounded: starts over past LANES_MAX distinct shapes.
local LANES_MAX = 1024
local lanes, nlanes = {}, 0
local function lane_of(shape)
  local lane = lanes[shape]
  if lane == nil then
    lane = decode_lane(shape)
    if nlanes >= LANES_MAX then
      lanes, nlanes = {}, 0
    end
    lanes[shape] = lane
    nlanes = nlanes + 1
  end
  return lane
end

-- 'ts:{W}:' of a key of the workspace.
local function prefix_of(key)
  return string.sub(key, 1, string.find(key, '}', 1, true) + 1)
end

-- The budget lines a lane reads when the call has an estimate of micro-dollars (micro_on)
-- and of tokens (tokens_on): per line its field, limit, kind and scope index, in the HMGET's
-- order, then 'x'; built once per lane and variant (line_ / value_: per-call scratch).
local function budget_plan(L, micro_on, tokens_on)
  local variant = (micro_on and 2 or 0) + (tokens_on and 1 or 0) + 1
  local plan = L.plans[variant]
  if plan then return plan end
  plan = {fields = {}, max = {}, what = {}, scope = {}, line_ = {}, value_ = {}}
  local function add(field, max, what, i)
    local j = #plan.fields + 1
    plan.fields[j], plan.max[j], plan.what[j], plan.scope[j] = field, max, what, i
  end
  for i = 1, L.n do
    local name = L.name[i]
    if L.maxa[i] >= 0 then add(name .. ':a', L.maxa[i], 'attempts', i) end
    if L.maxm[i] >= 0 and micro_on then add(name .. ':m', L.maxm[i], 'cost', i) end
    if L.maxt[i] >= 0 and tokens_on then add(name .. ':t', L.maxt[i], 'tokens', i) end
  end
  plan.fields[#plan.fields + 1] = 'x'
  L.plans[variant] = plan
  return plan
end

-- The books' epoch (ts:{W}:ep). Redis holds nothing that says its data was lost: a flushed,
-- restarted or evicted workspace looks like a new one. So whoever first finds the epoch
-- missing (an acquire or a renewal) writes a new one, RECONCILE_MS in the future, and until
-- then every acquire of the workspace answers 'reconciling': meanwhile every replica holding
-- leases in it sees the new epoch (each checks it every probe, about 100 ms) and registers
-- its live leases again, so no grant lands in books that miss them. A new workspace pays the
-- same wait once. RECONCILE_MS must exceed the replicas' probe interval plus a call
-- (the client refuses a probe interval over half of it).
local RECONCILE_MS = 1000
-- Epochs already seen settled, per epoch key (so the common case converts no number), and the
-- epoch key of a pause key (so the common case builds no string); both bounded: they start
-- over past SETTLED_MAX workspaces.
local SETTLED_MAX = 4096
local settled, epoch_keys, nsettled = {}, {}, 0

-- The epoch key of the workspace of `key` (any of its keys): its prefix .. 'ep'.
local function epoch_key(key)
  return prefix_of(key) .. 'ep'
end

-- The epoch at `key`: its value (a string) and whether it had to be written now (missing).
local function epoch_of(key, now)
  local ep = redis.call('GET', key)
  if ep then return ep, false end
  ep = fmt(now + RECONCILE_MS)
  redis.call('SET', key, ep)
  return ep, true
end

-- Whether the books of the workspace of `pause_key` (an acquire's first key) are trustworthy
-- at `now`; if not, until when (server ms).
local function books_settled(pause_key, now)
  local key = epoch_keys[pause_key]
  if key == nil then
    if nsettled >= SETTLED_MAX then settled, epoch_keys, nsettled = {}, {}, 0 end
    key = epoch_key(pause_key)
    epoch_keys[pause_key] = key
    nsettled = nsettled + 1
  end
  local ep = epoch_of(key, now)
  if settled[key] == ep then return true, 0 end
  local at = ep + 0
  if at > now then return false, at end
  settled[key] = ep
  return true, 0
end

local function acquire_op(keys, args)
  local member = args[1]
  local L = lane_of(args[2])
  local n = L.n
  local a = 3
  local principal, window, prefix, own = '', L.window, '', ''
  if L.nfair > 0 then
    principal, a = args[3], 4
  end
  local tokens, micro = -1, -1
  if L.budgets or L.buckets then
    -- '-1' (none) is the common value of either: no tonumber for it (each costs a strtod).
    local t, m = args[a], args[a + 1]
    if t ~= '-1' then tokens = t + 0 end
    if m ~= '-1' then micro = m + 0 end
  end
  local now = call_clock()
  -- Concurrency.
  local held_ = L.held
  for i = 1, n do
    local ki = L.lease[i]
    if ki then
      local lk, conc = keys[ki], L.conc[i]
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
        if L.wait[i] then
          local wk = keys[L.wait[i]]
          prefix = prefix_of(keys[1])
          fair_note_waiting(wk, principal, window, now)
          if fair_next(wk, prefix .. 'lease:' .. principal, prefix, principal, window, now) then
            index = -i
          end
        end
        local first = redis.call('ZRANGE', lk, 0, 0, 'WITHSCORES')
        local wake = 0
        if first[2] then wake = tonumber(first[2]) end
        return {'defer', 'concurrency', index, wake, now}
      end
      held_[i] = held
    end
  end
  -- Turns: every scope has room; a contended one goes to the principal furthest behind. Then
  -- the pause. Neither a wait set nor a pause (uncontended, not paused: the common case): one
  -- EXISTS over all of them answers both.
  local alive
  local quiet = L.nfair > 0
    and redis.call('EXISTS', keys[1], unpack(keys, L.wait0, L.wait0 + L.nfair - 1)) == 0
  if L.nfair > 0 and not quiet then
    alive = {}
    prefix = prefix_of(keys[1])
    local mine = -1
    for i = 1, n do
      if L.wait[i] then
        local wk = keys[L.wait[i]]
        if redis.call('ZCARD', wk) > 0 then
          fair_prune(wk, window, now)
          if redis.call('ZCARD', wk) > 0 then
            alive[i] = true
            if mine < 0 then mine = live_count(prefix .. 'lease:' .. principal, now) end
            if fair_behind_other(wk, prefix, principal, mine, now) then
              fair_note_waiting(wk, principal, window, now)
              return {'turn', 'concurrency', i, 0, now}
            end
          end
        end
      end
    end
  end
  if not quiet then
    local paused = redis.call('GET', keys[1])
    if paused then
      paused = tonumber(paused)
      if paused > now then
        return {'paused', 'retry-after', 0, paused, now}
      end
    end
  end
  local probe = false
  local bk_, pk_
  if L.brk then
    bk_, pk_ = keys[L.brk], keys[L.brk + 1]
    local gate, at = breaker_gate(bk_, pk_, L.open_ms, L.probes, now)
    if gate == 'open' then return {'open', 'circuit-open', 0, at, now} end
    -- Probes busy: no instant (a probe's release may come any time; waiters poll).
    if gate == 'busy' then return {'defer', 'circuit-open', 0, 0, now} end
    probe = gate == 'probe'
  end
  -- Budgets: every line the lane reads (and x), in one HMGET; the lines to charge keep their
  -- new value (spent + charge) in the plan's scratch for the commit.
  local plan, charged
  local bud_x = 0
  if L.budgets then
    plan = budget_plan(L, micro >= 0, tokens >= 0)
    local fields = plan.fields
    if #fields > 1 then
      local spent = redis.call('HMGET', keys[L.bud], unpack(fields))
      bud_x = (spent[#fields] or 0) + 0
      charged = 0
      for j = 1, #fields - 1 do
        local what, amount = plan.what[j], 1
        if what == 'cost' then amount = micro elseif what == 'tokens' then amount = tokens end
        local s = (spent[j] or 0) + 0
        if s + amount > plan.max[j] then return {'reject', what, plan.scope[j], 0, now} end
        if amount > 0 or what == 'attempts' then
          charged = charged + 1
          plan.line_[charged], plan.value_[charged] = fields[j], s + amount
        end
      end
    end
  end
  if L.buckets then
    local units = tokens
    if units < 0 then units = 0 end
    for i = 1, n do
      if L.bkey[i] then
        local refused, wait = buckets_try(L, keys, i, 1, units, now)
        if refused == 'r' then
          local wake = 0
          if wait >= 0 then wake = now + wait end
          return {'defer', 'requests-per-minute', i, wake, now}
        elseif refused == 't' then
          if wait < 0 then return {'reject', 'tokens-per-second', i, 0, now} end
          return {'defer', 'tokens-per-second', i, now + wait, now}
        end
      end
    end
  end
  -- Every check passed: the books last (a refusal needs no trusted books; a grant into books
  -- Redis lost, before the replicas holding leases registered them again, could exceed a
  -- limit).
  local trusted, until_ = books_settled(keys[1], now)
  if not trusted then return {'reconciling', 'concurrency', 0, until_, now} end
  -- Commit.
  local score = fmt(now + L.liveness)
  for i = 1, n do
    if L.lease[i] then redis.call('ZADD', keys[L.lease[i]], score, member) end
  end
  -- The budget lines charged (spent + charge, read above in this same call), in one HSET.
  -- The budget expires after 24 h without a charge: set to 25 h and refreshed only once less
  -- than 24 h are left (at most once an hour, not on every charge).
  if charged and charged > 0 then
    local bk = keys[L.bud]
    local refresh = bud_x < now + BUDGET_IDLE_MS
    if charged == 1 and not refresh then
      redis.call('HSET', bk, plan.line_[1], fmt(plan.value_[1]))
    else
      local hset = {}
      for j = 1, charged do
        hset[2 * j - 1], hset[2 * j] = plan.line_[j], fmt(plan.value_[j])
      end
      if refresh then
        hset[#hset + 1] = 'x'
        hset[#hset + 1] = fmt(now + BUDGET_TTL_MS)
      end
      redis.call('HSET', bk, unpack(hset))
      if refresh then redis.call('PEXPIRE', bk, BUDGET_TTL_MS) end
    end
  end
  if L.buckets then
    for i = 1, n do
      if L.bkey[i] then buckets_store(L, keys, i, now) end
    end
  end
  -- A grant in a contended scope (someone is waiting, or this grant fills it: the member is
  -- new, so the set now holds held + 1) keeps the principal's entry fresh too: a principal
  -- whose clients come straight back for the slot they just released is still in the race, so
  -- a faster poller holding more cannot take that slot in the gap between its release and its
  -- next request.
  if L.nfair > 0 then
    for i = 1, n do
      if L.wait[i] and ((alive and alive[i]) or not L.lease[i] or held_[i] + 1 >= L.conc[i]) then
        fair_note_waiting(keys[L.wait[i]], principal, window, now)
      end
    end
  end
  if probe then
    redis.call('ZADD', pk_, score, member)
    redis.call('PEXPIRE', pk_, BREAKER_TTL_MS)
    return {'granted', 'probe', 0, 0, now}
  end
  -- A plain grant answers its instant alone (an integer, not a five-element array).
  return now
end

-- ts_release_v5
-- ARGV: member; nothing else for a plain release (every key is a lease zset). Otherwise:
--       nleases, pause_ms (0 none), breaker outcome ('-' the lane has no shared breaker;
--       success|failure|none), then the breaker threshold (only with a breaker); then, when
--       budget lines are to be corrected: charged_tokens, actual_tokens (-1 none),
--       charged_micro, actual_micro (-1 none), the names of the scopes whose budgets were
--       charged.
-- KEYS: the lease zsets (nleases), then the pause key (only with pause_ms > 0), then the
--       budget hash (only with the correction block), then the breaker hash and probe zset
--       (only with a breaker).
-- Returns 0 for a plain release; otherwise {now (0 when neither a pause nor a failure was
--          given), paused_until (0 none), breaker state after the release ('' none)}.
local function release_op(keys, args)
  local member = args[1]
  if not args[2] then
    for i = 1, #keys do
      redis.call('ZREM', keys[i], member)
    end
    return 0
  end
  local n = tonumber(args[2])
  local pause_ms = 0
  if args[3] ~= '0' then pause_ms = tonumber(args[3]) end
  local outcome, threshold, a = args[4], -1, 5
  if outcome ~= '-' then
    threshold, a = tonumber(args[5]), 6
  end
  local k = n + 1
  local pause_key
  if pause_ms > 0 then
    pause_key, k = keys[k], k + 1
  end
  local bud_key
  if args[a] then
    bud_key, k = keys[k], k + 1
  end
  -- The clock is read only for a pause or a failure (otherwise the release answers now = 0).
  local now = 0
  if pause_ms > 0 or (threshold >= 0 and outcome == 'failure') then now = call_clock() end
  for i = 1, n do
    redis.call('ZREM', keys[i], member)
  end
  local state = ''
  if threshold >= 0 then
    redis.call('ZREM', keys[k + 1], member)
    state = breaker_record(keys[k], keys[k + 1], outcome, threshold, now)
  end
  -- Settle: each existing line of the charged scopes becomes max(line - charged, 0) + actual,
  -- read in one HMGET and written in one HSET.
  if bud_key then
    -- '-1' (no actual figure) needs no tonumber; a figure's charge only with it.
    local at_, am, ct, cm = -1, -1, 0, 0
    if args[a + 1] ~= '-1' then at_, ct = args[a + 1] + 0, args[a] + 0 end
    if args[a + 3] ~= '-1' then am, cm = args[a + 3] + 0, args[a + 2] + 0 end
    local names = a + 4
    if (at_ >= 0 or am >= 0) and #args >= names then
      local fields = {}
      for j = names, #args do
        if at_ >= 0 then fields[#fields + 1] = args[j] .. ':t' end
        if am >= 0 then fields[#fields + 1] = args[j] .. ':m' end
      end
      local cur = redis.call('HMGET', bud_key, unpack(fields))
      local hset, nset = {}, 0
      for j = 1, #fields do
        if cur[j] then
          -- Fields alternate :t / :m when both figures are there (in that order).
          local charged, actual = ct, at_
          if at_ < 0 or (am >= 0 and j % 2 == 0) then charged, actual = cm, am end
          hset[nset + 1] = fields[j]
          local left = cur[j] - charged
          if left < 0 then left = 0 end
          hset[nset + 2] = fmt(left + actual)
          nset = nset + 2
        end
      end
      if nset > 0 then redis.call('HSET', bud_key, unpack(hset)) end
    end
  end
  local until_ = 0
  if pause_ms > 0 then
    until_ = now + pause_ms
    local cur = tonumber(redis.call('GET', pause_key) or '0')
    if cur >= until_ then
      until_ = cur
    else
      redis.call('SET', pause_key, fmt(until_), 'PX', fmt(pause_ms))
    end
  end
  return {now, until_, state}
end

-- ts_acquire_v5 / ts_release_v5: one acquire or one release per call (the v3 contract). The
-- client sends a lone operation (nothing else queued for the workspace: the common case below
-- saturation) this way, not as a ts_batch_v5 of one: same decision and answer, about a fifth
-- fewer instructions per pair (no batch unpacking, no answer array; docs/performance.md,
-- session 10).
local function acquire(keys, args)
  call_clock_reset()
  return acquire_op(keys, args)
end

local function release(keys, args)
  call_clock_reset()
  return release_op(keys, args)
end

-- ts_batch_v5: several acquires and releases of one workspace in one call (the client's natural
-- batching: what queued while the previous call was in flight, docs/replicas.md).
-- KEYS: every operation's keys, concatenated in operation order (all under the workspace's hash
--       tag: one slot).
-- ARGV: per operation, in arrival order: its kind ('a' acquire, 'r' release), its number of
--       keys, its number of arguments, then those arguments; each operation's keys and
--       arguments are exactly what ts_acquire_v5 / ts_release_v5 take for it.
-- Returns one answer per operation, in order, each exactly what the single call would answer.
-- The operations run one after the other, each all or nothing on its own (an acquire refused
-- writes nothing; a later operation sees an earlier one's writes, as consecutive calls would),
-- and all of them read one clock: TIME at most once per batch.
-- Each operation gets its keys and arguments in two scratch tables reused across the batch
-- (filled by a loop, the previous operation's extra entries cleared so that # is right): a
-- table per operation would cost more than the loop (docs/performance.md, session 9).
local op_keys, op_args, op_nk, op_na = {}, {}, 0, 0
local function batch(keys, args)
  call_clock_reset()
  local out = {}
  local k, a, n = 1, 1, #args
  while a <= n do
    local kind, nk, na = args[a], args[a + 1] + 0, args[a + 2] + 0
    for j = 1, nk do op_keys[j] = keys[k + j - 1] end
    for j = nk + 1, op_nk do op_keys[j] = nil end
    for j = 1, na do op_args[j] = args[a + 2 + j] end
    for j = na + 1, op_na do op_args[j] = nil end
    op_nk, op_na = nk, na
    if kind == 'a' then
      out[#out + 1] = acquire_op(op_keys, op_args)
    elseif kind == 'r' then
      out[#out + 1] = release_op(op_keys, op_args)
    else
      return redis.error_reply('ts_batch_v5: unknown operation ' .. tostring(kind))
    end
    k, a = k + nk, a + 3 + na
  end
  return out
end

-- ts_breaker_v5: KEYS breaker hash, probe zset; ARGV threshold, success_seen (0/1), failures.
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

-- ts_pause_v5: KEYS pause; ARGV pause_ms. Monotonic: a shorter pause never shortens a longer
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

-- ts_renew_v5: KEYS the lease zsets (one workspace); ARGV liveness_ms, mode ('xx' renew only
-- what is there, 'add' register again, 'check' write nothing unless the books were lost), the
-- workspace's epoch as this replica last saw it ('-': never), then pairs (key index, member).
-- One call per workspace renews all of this replica's leases in it, and is its check of the
-- books (every probe): a missing epoch (written now, as an acquire would) or one other than the
-- replica's means Redis lost the books: every lease is registered again ('add'), whatever the
-- mode. An 'xx' renewal that finds members missing (a lease zset evicted or deleted, the epoch
-- kept; or a lease released since the renewal was built) answers them. Returns {now, members
-- written, epoch, lost (1: the epoch was missing or changed), {members missing}}.
local function renew(keys, args)
  local liveness = tonumber(args[1])
  local mode = args[2]
  local known = args[3]
  local now = now_ms()
  local ep, created = epoch_of(epoch_key(keys[1]), now)
  local lost = 0
  if created or (known ~= '-' and known ~= ep) or (known == '-' and ep + 0 > now) then
    lost = 1
  end
  if ep ~= known then mode = 'add' end
  local missing = {}
  if mode == 'check' then return {now, 0, ep, lost, missing} end
  local score = fmt(now + liveness)
  local written = 0
  for j = 4, #args, 2 do
    local key = keys[tonumber(args[j])]
    if mode == 'xx' then
      if redis.call('ZADD', key, 'XX', 'CH', score, args[j + 1]) == 1 then
        written = written + 1
      else
        missing[#missing + 1] = args[j + 1]
      end
    else
      redis.call('ZADD', key, score, args[j + 1])
      written = written + 1
    end
  end
  return {now, written, ep, lost, missing}
end

-- ts_bucket_run_v5: the conformance hook of the bucket arithmetic (crates/coord/tests). Runs
-- buckets_try / buckets_store, exactly as ts_acquire_v5 does, on a lane with one scope whose
-- hash holds one request bucket of the given period, over a sequence of (now, units) steps
-- with an injected clock, on KEYS[1], which it deletes afterwards.
-- ARGV: rate, capacity, period, then pairs (now, units). Returns per step {admitted (1/0),
-- wait ms (-1 never; 0 when admitted), level in whole units after the step}.
local function bucket_run(keys, args)
  local rate, cap, period = tonumber(args[1]), tonumber(args[2]), tonumber(args[3])
  local L = {
    bkey = {1}, rrate = {rate}, rcap = {cap}, rper = {period}, trate = {false}, tcap = {},
    tper = {}, bfields = {}, span = {}, rl_ = {}, ra_ = {}, tl_ = {}, ta_ = {}, x_ = {},
  }
  buckets_init(L, 1)
  local out = {}
  for j = 4, #args, 2 do
    local now, units = tonumber(args[j]), tonumber(args[j + 1])
    local refused, wait = buckets_try(L, keys, 1, units, 0, now)
    if not refused then
      buckets_store(L, keys, 1, now)
      out[#out + 1] = 1
      out[#out + 1] = 0
    else
      out[#out + 1] = 0
      out[#out + 1] = wait
    end
    local level = L.rl_[1]
    out[#out + 1] = (level - math.fmod(level, period)) / period
  end
  redis.call('DEL', keys[1])
  return out
end

-- ts_time_v5: the server clock (the replicas' health probe).
local function time(keys, args)
  return now_ms()
end

redis.register_function('ts_acquire_v5', acquire)
redis.register_function('ts_release_v5', release)
redis.register_function('ts_batch_v5', batch)
redis.register_function('ts_pause_v5', pause)
redis.register_function('ts_breaker_v5', breaker_merge)
redis.register_function('ts_renew_v5', renew)
redis.register_function('ts_bucket_run_v5', bucket_run)
redis.register_function{function_name = 'ts_time_v5', callback = time, flags = {'no-writes'}}
