import { LEGACY_KEY } from './prelude';

/**
 * The script that decides an admission's reservations on several keys at once, all or none
 * (API.md, "Admission across keys"): each limiter's own script, whole, becomes a Lua function of
 * KEYS and ARGV (its top-level locals become the function's), so each part is decided by exactly
 * the code its `reserve` runs, and the per-algorithm scripts stay as they are.
 *
 * KEYS are the parts' keys, in order. ARGV holds per part the index of its script in `sources`,
 * the count of its reservation's arguments, then those arguments (an operation of
 * src/redis/protocol.ts: 'reserve', reading, split, limit, windowMs, permits, receipt id; on a
 * cluster's second try, what was read of the previous key before the permits, see src/redis/joint.ts).
 *
 * Each part is reserved in turn, its key's value kept first (DUMP and PTTL; for a key not stored
 * yet, the previous version's key it may adopt, see stringScript). After the first refusal the
 * parts are answered by their `peek`, which writes nothing, and then every part granted before it
 * is restored as it was (as the in-order path peeks, then cancels): the reply is each part's
 * answer (granted ones included: they say what `reserve` answered before the undo).
 * A part whose script fails ('E ...') undoes the same way and is the whole reply, a failure of the
 * admission. The refusing part's own writes stand, as its `reserve` alone would leave them (a rule
 * change carried over).
 */
export function admitScript(sources: readonly string[]): string {
  const scripts = sources.map((source) => `function(KEYS, ARGV)\n${source}\nend`).join(',\n');
  return `local scripts = {
${scripts}
}
${LEGACY_KEY}
local function kept(key)
  local value = redis.call('DUMP', key)
  if value then return { key, value, redis.call('PTTL', key) } end
  return { key }
end

local function restore(was)
  if was[2] then redis.call('RESTORE', was[1], math.max(was[3], 0), was[2], 'REPLACE')
  else redis.call('DEL', was[1]) end
end

-- Newest first: a key in two parts ends as it was before both.
local function give_back(undo)
  for k = #undo, 1, -1 do
    for _, one in ipairs(undo[k]) do restore(one) end
  end
end

local reply, undo, refused, at = {}, {}, false, 1
for i = 1, #KEYS do
  local script, count, key = scripts[tonumber(ARGV[at])], tonumber(ARGV[at + 1]), KEYS[i]
  local args = { unpack(ARGV, at + 2, at + 1 + count) }
  at = at + 2 + count
  if refused then
    -- A peek takes the reservation's arguments up to its permits, and no receipt (the last).
    args[1], args[#args] = 'peek', nil
    reply[i] = script({ key }, args)
  else
    local was = { kept(key) }
    local split = tonumber(args[3])
    if not was[1][2] and split > 0 then was[2] = kept(legacy_key(key, { limit = tonumber(args[4]), window = tonumber(args[5]) }, split)) end
    local answer = script({ key }, args)
    reply[i] = answer
    if string.sub(answer, 1, 1) == 'A' then
      undo[#undo + 1] = was
    elseif string.sub(answer, 1, 1) == 'R' then
      refused = true
    else
      give_back(undo)
      return answer
    end
  end
end
if refused then give_back(undo) end
return reply
`;
}
