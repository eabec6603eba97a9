// Redis Cluster places a key by CRC16 (XMODEM) of its UTF-8 bytes, modulo 16384; a key with a hash
// tag, a non-empty `{...}` (the first '{' and the first '}' after it), is placed by the tag alone.
// Batches on a cluster hold keys of one slot, so this must agree with the server bit for bit.

const TABLE = new Uint16Array(256);
for (let byte = 0; byte < 256; byte++) {
  let crc = byte << 8;
  for (let bit = 0; bit < 8; bit++) crc = crc & 0x8000 ? (crc << 1) ^ 0x1021 : crc << 1;
  TABLE[byte] = crc & 0xffff;
}

const encoder = new TextEncoder();

/** The hash slot (0 to 16383) Redis Cluster stores `key` in. */
export function hashSlot(key: string): number {
  const open = key.indexOf('{');
  if (open !== -1) {
    const close = key.indexOf('}', open + 1);
    if (close > open + 1) key = key.slice(open + 1, close);
  }
  let crc = 0;
  for (const byte of encoder.encode(key)) crc = ((crc << 8) & 0xffff) ^ TABLE[((crc >> 8) ^ byte) & 0xff]!;
  return crc & 0x3fff;
}
