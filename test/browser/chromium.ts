// The browser tests' one way to open a page: Debian Chromium, headless, through playwright-core.
import { chromium, type Browser, type Page } from 'playwright-core';

export const CHROMIUM = '/usr/bin/chromium';

/**
 * Launches Chromium, opens `url` and waits until the page sets `window.ready`. Page errors and
 * console errors are collected into `errors`, for the tests to expect none.
 */
export async function openPage(url: string, errors: string[]): Promise<{ browser: Browser; page: Page }> {
  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run'],
    // A hang guard, not a speed check: on a loaded 2-core machine Chromium took over 10 s to start.
    timeout: 60_000,
  });
  const page = await browser.newPage();
  page.on('pageerror', (error) => errors.push(error.message));
  page.on('console', (message) => {
    if (message.type() === 'error') errors.push(message.text());
  });
  await page.goto(url);
  await page.waitForFunction(() => 'ready' in window, undefined, { timeout: 5_000 });
  return { browser, page };
}
