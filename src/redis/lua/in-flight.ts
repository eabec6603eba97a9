import { FOREIGN } from './prelude';
import type { StringCodec } from './shell';

/**
 * The codec of an in-flight limit alone: a body-less state (the key holds its header, the block
 * and the leases), under the rule `(limit, leaseMs)` the store layer gives it. It grants whatever
 * the leases allow: its own answers never bind (the leased shell decides as `Concurrency` alone).
 * No previous version wrote such keys, so one found under the legacy name is foreign.
 */
export const IN_FLIGHT_ALONE: StringCodec = {
  body: [],
  folds: false,
  valid: 'true',
  decide: `
local function prepare(limit, window)
  return { limit = limit, window = window, slack = math.min(math.floor(window / 4), SLACK_CAP) }
end

local function decide(r, now, permits)
  return true, ${2 ** 53}, 0, 0
end
`,
  rest: `
function fresh(r)
end

function charge(r, now, permits)
  return 0, 0, false
end

function used(r, now)
  return 0
end

function legacy(r, state)
  ${FOREIGN}
end

function mark(r)
  return 0
end
`,
};
