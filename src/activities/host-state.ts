/**
 * What this worker host knows of itself: the sessions whose runtime instances it runs (so that a shutdown can drain
 * them) and whether it is draining (so that it takes no new sessions meanwhile).
 */
export class HostState {
  private readonly hosted = new Map<string, string>();
  private inFlight = 0;
  private drainingSince: number | undefined;

  /** An instance of `sessionId` now runs here. */
  hosting(instanceId: string, sessionId: string): void {
    this.hosted.set(instanceId, sessionId);
  }

  /** The instance is gone from this host (disposed, or never made). */
  released(instanceId: string): void {
    this.hosted.delete(instanceId);
  }

  /** Sessions with an instance on this host, each once. */
  sessions(): string[] {
    return [...new Set(this.hosted.values())];
  }

  /** Runs `make` (a start or restore of an instance here), counted until it settles. */
  async making<T>(make: () => Promise<T>): Promise<T> {
    this.inFlight++;
    try {
      return await make();
    } finally {
      this.inFlight--;
    }
  }

  /** Starts and restores under way on this host. */
  get makingCount(): number {
    return this.inFlight;
  }

  startDraining(): void {
    this.drainingSince ??= Date.now();
  }

  get draining(): boolean {
    return this.drainingSince !== undefined;
  }
}
