// Filled in by the Redis work (issue 4).
export {};
