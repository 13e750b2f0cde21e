/**
 * A token bucket per API key: `perSecond` requests a second, bursts up to `burst`. A key over its rate is told when
 * to come back (`Retry-After`) instead of being queued: the gateway holds nothing for a caller that floods it.
 */
export class RateLimiter {
  private readonly buckets = new Map<string, { tokens: number; at: number }>();

  constructor(
    private readonly perSecond: number,
    private readonly burst: number = Math.max(1, Math.ceil(2 * perSecond)),
    private readonly now: () => number = () => performance.now(),
  ) {}

  /** 0 when `key` has a token left (none is taken), else the seconds until it has. */
  waitOf(key: string): number {
    const bucket = this.buckets.get(key);
    if (!bucket) return 0;
    const tokens = Math.min(this.burst, bucket.tokens + ((this.now() - bucket.at) / 1000) * this.perSecond);
    if (tokens >= 1) {
      // A full bucket is the same as none: forgetting it keeps the map as small as the addresses that fail now.
      if (tokens >= this.burst) this.buckets.delete(key);
      return 0;
    }
    return Math.max(1, Math.ceil((1 - tokens) / this.perSecond));
  }

  /** 0 when `key` may go on (a token is taken), else the seconds until it may. */
  take(key: string): number {
    const now = this.now();
    const bucket = this.buckets.get(key) ?? { tokens: this.burst, at: now };
    bucket.tokens = Math.min(this.burst, bucket.tokens + ((now - bucket.at) / 1000) * this.perSecond);
    bucket.at = now;
    this.buckets.set(key, bucket);
    if (bucket.tokens >= 1) {
      bucket.tokens -= 1;
      return 0;
    }
    return Math.max(1, Math.ceil((1 - bucket.tokens) / this.perSecond));
  }
}
