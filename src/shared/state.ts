import type { Decision } from '../core/decision';

/**
 * One algorithm's state for every slot of a shared buffer. `now` is whole ms since the buffer's
 * creation, never earlier than a reading any thread has already decided at.
 */
export interface SharedState {
  /**
   * Decides `permits` for the key in `slot`; writes (with a CAS loop) only when `spend` is set and
   * the request is allowed. A refusal writes nothing.
   */
  decide(slot: number, now: number, permits: number, spend: boolean): Decision;
  /** True when forgetting the key in `slot` could not change any later decision. */
  isIdle(slot: number, now: number): boolean;
}
