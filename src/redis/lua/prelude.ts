// Pieces every script holds. Lua numbers in Redis are IEEE doubles, as in JavaScript, so a script
// that performs the in-memory algorithm's operations in the same order gets the same bits.

/**
 * Helpers defined once per script run, not once per decision. `ms` writes a whole number of ms for
 * PX and PEXPIRE; `unpacked` reads a packed state, checking its size.
 *
 * State kept in a string is packed with `struct` as little-endian doubles: exact, as text written
 * with '%.17g' would be (Lua's `tostring` keeps only 14 digits), at a fraction of the cost, and
 * the script's cost is what bounds a busy Redis.
 */
export const PRELUDE = `
local function ms(x)
  return string.format('%d', x)
end

-- The doubles a script packed into a key; anything else under the key (another script's state,
-- a value someone else wrote) fails this key's decision alone.
local function unpacked(state, format, bytes)
  if #state ~= bytes then error('ratekeeper: the key holds ' .. #state .. ' bytes, not a state of this algorithm') end
  return struct.unpack(format, state)
end
`;

/** The error of a key holding what no state of ours holds: inline, so a decision defines no function for it. */
export const FOREIGN = "error('ratekeeper: the key holds a value that is not a state of this algorithm')";

/**
 * Lua reading the tail of a string state into the locals `block` and `stamp`: a state kept in a
 * string is `bytes` of packed doubles, followed once the key is blocked or reserved by a tail of two
 * more, when the block ends (-inf for none) and the stamp its receipts carry (0 for none). The tail
 * is apart from the counts, so no spend, charge or refund touches it. A stamp is a whole number
 * below 2^52 and a block end no NaN: what decodes otherwise is not ours. Inline (and so in a
 * decision's branch for keys with a tail only), so a decision defines no function for it.
 *
 * Where `credits` (Lua) is true, the tail may hold a third double once a refund gave something
 * back: the units the key's refunds have given back (see the token bucket's refund), from 0 to
 * 2^53 - 1, read by `tail_of` only.
 */
export function readTail(state: string, bytes: number | string, credits?: string): string {
  const size = credits === undefined ? `#${state} ~= ${bytes} + 16` : `#${state} ~= ${bytes} + 16 and not (${credits} and #${state} == ${bytes} + 24)`;
  return `if ${size} then error('ratekeeper: the key holds ' .. #${state} .. ' bytes, not a state of this algorithm') end
    block, stamp = struct.unpack('<dd', ${state}, ${bytes} + 1)
    if not (stamp >= 0 and stamp <= 4503599627370496 and stamp % 1 == 0 and block == block and block < math.huge) then ${FOREIGN} end${
      credits === undefined
        ? ''
        : `
    if #${state} == ${bytes} + 24 and not (struct.unpack('<d', ${state}, ${bytes} + 17) >= 0 and struct.unpack('<d', ${state}, ${bytes} + 17) <= 9007199254740991) then ${FOREIGN} end`
    }`;
}

/**
 * Lua returning the refusal of a blocked key (src/limiter/keyed-rate-limiter.ts #blocked), the
 * local `block` ending after `now`: nothing available, and a retry once both the block and the
 * algorithm allow (its allowance only grows while nothing is granted).
 *
 * A decide's `mode`: nil (tryAcquire) and 'reserve' spend and heed a block; 'peek' heeds it and
 * spends nothing; 'own' (the algorithm alone, as a settle answers) neither; 'charge' spends and
 * ignores it (no charge is refused, and none lifts a block).
 */
export function blockedAnswer(now: string, retry: string, reset: string): string {
  return `return false, 0, math.max(math.ceil(block - (${now})), ${retry}), math.max(math.ceil(block - (${now})), ${reset})`;
}

/** `floorDiv` from src/core/exact.ts, operation for operation. */
export const FLOOR_DIV = `
local function floor_div(n, d)
  local q = math.floor(n / d)
  if q * d > n then return q - 1 end
  if (q + 1) * d <= n then return q + 1 end
  return q
end
`;

/** `ceilDiv` from src/core/exact.ts, operation for operation. */
export const CEIL_DIV = `
local function ceil_div(n, d)
  local q = math.ceil(n / d)
  if q * d < n then return q + 1 end
  if (q - 1) * d >= n then return q - 1 end
  return q
end
`;

/**
 * `mulDivMod`, `mulDivFloor` and `mulDivCeil` from src/core/exact.ts, operation for operation: the
 * exact `a × b + c` over `d` that rules past 2^53 need. Needs {@link FLOOR_DIV} and {@link CEIL_DIV}.
 */
export const MUL_DIV = `
local LIMB = 16777216
local function limbs(x)
  return x % LIMB, math.floor(x / LIMB) % LIMB, math.floor(x / (LIMB * LIMB))
end

local function mul_div_mod(a, b, c, d)
  local n = a * b + c
  if n <= 9007199254740991 or a % 1 ~= 0 or b % 1 ~= 0 or c % 1 ~= 0 then
    local q = floor_div(n, d)
    return q, n - q * d
  end
  local a0, a1, a2 = limbs(a)
  local b0, b1, b2 = limbs(b)
  local c0, c1, c2 = limbs(c)
  local t = a0 * b0 + c0
  local n0 = t % LIMB
  t = math.floor(t / LIMB) + a0 * b1 + a1 * b0 + c1
  local n1 = t % LIMB
  t = math.floor(t / LIMB) + a0 * b2 + a1 * b1 + a2 * b0 + c2
  local n2 = t % LIMB
  t = math.floor(t / LIMB) + a1 * b2 + a2 * b1
  local n3 = t % LIMB
  local n4 = math.floor(t / LIMB) + a2 * b2
  local q, r = 0, 0
  for _, limb in ipairs({ n4, n3, n2, n1, n0 }) do
    local bit = LIMB / 2
    while bit >= 1 do
      local one = 0
      if limb % (2 * bit) >= bit then one = 1 end
      if r >= d - r - one then
        r = r - (d - r - one)
        q = 2 * q + 1
      else
        r = r + r + one
        q = 2 * q
      end
      bit = bit / 2
    end
  end
  return q, r
end

local function mul_div_floor(a, b, d)
  local n = a * b
  if n <= 9007199254740991 then return floor_div(n, d) end
  local q = mul_div_mod(a, b, 0, d)
  return q
end

local function mul_div_ceil(a, b, d)
  local n = a * b
  if n <= 9007199254740991 then return ceil_div(n, d) end
  local q, r = mul_div_mod(a, b, 0, d)
  if r > 0 then return q + 1 end
  return q
end
`;

/**
 * Helpers only an operation needs (see batchScript): defined only when the call names one, so
 * that a decision's script run defines nothing more than before.
 */
export const OPERATION_PRELUDE = `
-- The tail of a string state (see readTail): block end (nil without a tail), stamp, and where
-- \`credits\` the units the key's refunds have given back (0 until one did).
local function tail_of(state, bytes, credits)
  if #state == bytes then return nil, 0, 0 end
  local block, stamp
  ${readTail('state', 'bytes', 'credits')}
  if #state == bytes + 16 then return block, stamp, 0 end
  return block, stamp, (struct.unpack('<d', state, bytes + 17))
end
-- One decision as a reply entry (see batchScript).
local function decision(granted, remaining, retry, reset)
  if granted then return string.format('A %d %d', remaining, reset) end
  return string.format('R %d %d %d', remaining, retry, reset)
end

-- The expiry an operation gives a key it writes: what the state needs, what its block needs, and
-- never less than the key had (a key's expiry also covers the receipts of its reservations).
local function expiry(key, need, block, now)
  local ttl = need
  if block ~= nil and block - now > ttl then ttl = math.ceil(block - now) end
  local kept = redis.call('PTTL', key)
  if kept > ttl then ttl = kept end
  return ttl
end

-- Blocks a string key until now + duration, unless it already is for longer; the counters (\`fresh\`
-- for a key not yet stored) are kept as they are, and what the tail holds past the stamp (see
-- tail_of): a block spends nothing.
local function block_string(key, now, duration, bytes, fresh, credits)
  local state = redis.call('GET', key)
  local block, stamp, rest = -math.huge, 0, ''
  if state then
    local stored_block, stored_stamp = tail_of(state, bytes, credits)
    if stored_block then block, stamp = stored_block, stored_stamp end
    rest = string.sub(state, bytes + 17)
    state = string.sub(state, 1, bytes)
  else
    state = fresh
  end
  local ends = now + duration
  if block >= ends then return 'OK' end
  redis.call('SET', key, state .. struct.pack('<dd', ends, stamp) .. rest, 'PX', ms(expiry(key, 0, ends, now)))
  return 'OK'
end

-- Stamps the receipts of a string key reserved for the first time (or since a charge voided them):
-- a random number the caller drew, in the tail.
local function stamp_string(key, bytes, stamp)
  if redis.call('STRLEN', key) == bytes then
    redis.call('SETRANGE', key, bytes, struct.pack('<dd', -math.huge, stamp))
  else
    redis.call('SETRANGE', key, bytes + 8, struct.pack('<d', stamp))
  end
  return stamp
end
`;
