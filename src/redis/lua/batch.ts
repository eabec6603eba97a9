import { OPERATION_PRELUDE, PRELUDE } from './prelude';

/**
 * The script one algorithm runs: its `decide(key, now, permits, server_now)` applied to every key
 * of the call in order, so a call of one key and a batch of many are the same script; or, when
 * ARGV after the rule's numbers names one of its `OPERATIONS` (peek, reserve, charge, refund,
 * block, and reset, which is the same for all), that operation on the one key of the call, with
 * the caller's reading ('' for the server's clock) and the operation's arguments after the name.
 * An operation replies as a decision does (below), or 'OK', or for a reservation an array of the
 * decision and, when granted, its receipt's numbers. A batch is
 * one script, so Redis runs it atomically and each decision sees the state every earlier one left:
 * exactly what the same calls sent one by one, in that order, would give.
 *
 * `algorithm` reads the rule's `ruleArgs` numbers from ARGV[1..ruleArgs] and defines `decide`,
 * which returns whether it granted, then remaining, retryAfterMs and resetAfterMs. Then come the
 * permits, one per key, and, when the caller's clock decides, its readings in ms, one per key.
 * Without readings, permits that are all 1 (the usual case) are left out: a third fewer arguments
 * to send and parse, and less CPU a decision (bench/HISTORY.md).
 *
 * Without readings the server's own clock decides: read once per script (decisions batched
 * together were asked for in the same instant) and floored to whole ms as `systemClock` is, so
 * servers with skewed clocks still share one timeline. That reading is also passed to `decide` as
 * `server_now`, with readings or without: key expiries run on it.
 *
 * Replies one string per key, so that each decision says what it is and no field stands for
 * another: `A remaining resetAfterMs` (allowed), `R remaining retryAfterMs resetAfterMs`
 * (refused), or `E message` when that key's decision failed (a key holding a value of another
 * type or shape): `decide` runs under `pcall`, so one bad key fails only its own decision, and the
 * others decide normally. Numbers go as text, plain decimal digits, which both clients read back
 * exactly (their integer decoders round numbers near 2^53). Every number of a decision is a whole
 * number below 2^53 (counts, and times rounded up to whole ms), so '%d' writes it as '%.17g' would,
 * at less than half the cost, where formatting was the largest part of a batched decision's cost
 * (bench/HISTORY.md).
 */
export function batchScript(algorithm: string, operations: string, ruleArgs: number): string {
  return `${PRELUDE}${algorithm}
local count = #KEYS
local time = redis.call('TIME')
local server_now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local operation = ARGV[${ruleArgs} + 1]
-- An operation's name starts with a letter, the permits of a decision with a digit.
if operation and string.byte(operation) > 57 then
  local OPERATIONS = {}
  -- An algorithm's operations may set it: the third number of a receipt, from the key as the grant
  -- left it and the one decide gave, for what a receipt needs that decide does not read.
  local receipt_third
  ${OPERATION_PRELUDE}
  -- A charge the limit has room for is spent exactly as tryAcquire's grant would be (a block aside):
  -- its decision, or nil when it goes into debt.
  local function charged_as_granted(key, now, permits, server_now)
    if permits > limit then return nil end
    local granted, remaining, _, reset = decide(key, now, permits, server_now, 'charge')
    if granted then return decision(true, remaining, 0, reset) end
  end
  ${operations}
  function OPERATIONS.peek(key, now, server_now, permits)
    return decision(decide(key, now, tonumber(permits), server_now, 'peek'))
  end
  -- A grant returns the three numbers its receipt needs and the stamp of the key's receipts; a key
  -- not yet stamped (or voided since) gets the caller's.
  function OPERATIONS.reserve(key, now, server_now, permits, nonce)
    local granted, remaining, retry, reset, a, b, c, stamp = decide(key, now, tonumber(permits), server_now, 'reserve')
    if not granted then return { decision(false, remaining, retry, reset) } end
    if stamp == 0 then stamp = stamped(key, tonumber(nonce)) end
    if receipt_third then c = receipt_third(key, c) end
    return { decision(true, remaining, 0, reset), string.format('%.17g %.17g %.17g %.17g', a, b, c, stamp) }
  end
  function OPERATIONS.reset(key)
    redis.call('DEL', key)
    return 'OK'
  end
  if not OPERATIONS[operation] then return 'E unknown operation ' .. operation end
  local now = server_now
  if ARGV[${ruleArgs} + 2] ~= '' then now = tonumber(ARGV[${ruleArgs} + 2]) end
  local ok, reply = pcall(OPERATIONS[operation], KEYS[1], now, server_now, unpack(ARGV, ${ruleArgs} + 3))
  if not ok then return 'E ' .. tostring(type(reply) == 'table' and reply.err or reply) end
  return reply
end
local readings = #ARGV > ${ruleArgs} + count
local permits_left_out = #ARGV == ${ruleArgs}
local reply = {}
for i = 1, count do
  local now, permits = server_now, 1
  if readings then now = tonumber(ARGV[${ruleArgs} + count + i]) end
  if not permits_left_out then permits = tonumber(ARGV[${ruleArgs} + i]) end
  local ok, granted, remaining, retry, reset = pcall(decide, KEYS[i], now, permits, server_now)
  if not ok then
    reply[i] = 'E ' .. tostring(type(granted) == 'table' and granted.err or granted)
  elseif granted then
    reply[i] = string.format('A %d %d', remaining, reset)
  else
    reply[i] = string.format('R %d %d %d', remaining, retry, reset)
  end
end
return reply
`;
}
