/** The problem type draft-ietf-httpapi-ratelimit-headers-10 §5.1 registers for a refused request. */
const QUOTA_EXCEEDED = 'https://iana.org/assignments/http-problem-types#quota-exceeded';

/** The media type of an RFC 9457 problem details body. */
export const PROBLEM_JSON = 'application/problem+json';

/** The parts of the default refusal, which each adapter writes in its own way. */
export interface Refusal {
  readonly status: 429;
  readonly headers: Record<string, string>;
  readonly body: string;
}

/**
 * The default refusal: 429, the rate-limit fields, and a small RFC 9457 `application/problem+json`
 * body of the draft's quota-exceeded type that names the violated policy.
 */
export function quotaExceeded(headers: Record<string, string>, policy: string): Refusal {
  const body = JSON.stringify({
    type: QUOTA_EXCEEDED,
    title: 'Request cannot be satisfied as assigned quota has been exceeded',
    status: 429,
    'violated-policies': [policy],
  });
  return { status: 429, headers: { ...headers, 'Content-Type': PROBLEM_JSON }, body };
}
