/**
 * What this worker host knows of itself: the sessions whose runtime instances it runs (so that a shutdown can drain
 * them) and whether it is draining (so that it takes no new sessions meanwhile).
 */
export class HostState {
  private readonly hosted = new Map<string, string>();
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

  startDraining(): void {
    this.drainingSince ??= Date.now();
  }

  get draining(): boolean {
    return this.drainingSince !== undefined;
  }
}
