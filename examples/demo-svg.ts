// Draws the demo's timeline: one lane per algorithm, a dot per request (filled when allowed,
// hollow when refused), dotted lines at the window boundaries.
import type { Decision, Rule } from '../src/index';

export interface Request {
  readonly at: number;
  readonly permits: number;
  readonly phase: string;
}

export interface Lane {
  readonly name: string;
  readonly decisions: readonly Decision[];
}

const left = 215;
const laneHeight = 56;
const top = 70;
const plotWidth = 860;

export function drawTimeline(rule: Rule, requests: readonly Request[], lanes: readonly Lane[]): string {
  const end = Math.ceil((Math.max(...requests.map((r) => r.at)) + 300) / rule.windowMs) * rule.windowMs;
  const x = (t: number) => left + (t / end) * plotWidth;
  const height = top + lanes.length * laneHeight + 50;
  const parts: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 ${left + plotWidth + 30} ${height}" font-family="system-ui, sans-serif" font-size="13">`,
    `<rect width="100%" height="100%" fill="white"/>`,
    `<text x="20" y="28" font-size="17" font-weight="600">Same traffic, five algorithms: ${rule.limit} per ${rule.windowMs / 1000} s</text>`,
    `<circle cx="${left + 470}" cy="23" r="5" fill="#2e7d32"/><text x="${left + 480}" y="28">allowed</text>`,
    `<circle cx="${left + 560}" cy="23" r="5" fill="none" stroke="#c62828" stroke-width="1.5"/><text x="${left + 570}" y="28">refused</text>`,
    `<text x="${left + 640}" y="28">larger dot = 2 permits</text>`,
  ];
  for (let t = 0; t <= end; t += rule.windowMs) {
    parts.push(`<line x1="${x(t)}" y1="${top - 18}" x2="${x(t)}" y2="${height - 40}" stroke="#bbb" stroke-dasharray="3 4"/>`);
    parts.push(`<text x="${x(t)}" y="${height - 22}" text-anchor="middle" fill="#555">${t / 1000} s</text>`);
  }
  lanes.forEach((lane, row) => {
    const y = top + row * laneHeight + laneHeight / 2;
    const allowed = lane.decisions.filter((d) => d.allowed).length;
    parts.push(`<text x="20" y="${y - 4}" font-weight="600">${lane.name}</text>`);
    parts.push(`<text x="20" y="${y + 13}" fill="#555">${allowed} of ${requests.length} allowed</text>`);
    parts.push(`<line x1="${left}" y1="${y}" x2="${left + plotWidth}" y2="${y}" stroke="#eee"/>`);
    requests.forEach((request, i) => {
      const r = request.permits > 1 ? 7 : 4.5;
      const paint = lane.decisions[i]?.allowed ? 'fill="#2e7d32"' : 'fill="none" stroke="#c62828" stroke-width="1.5"';
      parts.push(`<circle cx="${x(request.at).toFixed(1)}" cy="${y}" r="${r}" ${paint} opacity="0.85"/>`);
    });
  });
  parts.push('</svg>');
  return `${parts.join('\n')}\n`;
}
