// Filled in by the HTTP work (issue 5).
export {};
