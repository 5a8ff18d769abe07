import type { NatsConnection } from "@nats-io/transport-node";
import { parseJSON, utf8 } from "./util.js";
import type { DirectBatchReply } from "./wire.js";

/** How a message sent in a batch direct request fared. */
export type DirectResult = "applied" | "refused" | "none" | "timeout";

interface Waiting {
  body: string;
  done: (r: DirectResult) => void;
}

interface Lane {
  inFlight: number;
  waiting: Waiting[];
}

/** Most messages in one batch request (the Go executor's and SDK's bound). */
const MAX_BATCH = 256;
/** Most batch requests in flight per subject, while a backlog waits. */
const MAX_FLIGHTS = 4;

/**
 * Sends messages of one subject as batch direct requests
 * (`ax.direct…batch.<subject>`, body `{"messages": […]}`): one goes at
 * once; those sent while it is in flight go together in the next; while
 * MAX_BATCH or more wait, more requests go beside it (up to MAX_FLIGHTS)
 * — as the Go executor's report batcher (internal/direct) does.
 */
export class Batcher {
  private readonly lanes = new Map<string, Lane>();
  constructor(
    private readonly nc: NatsConnection,
    private readonly timeoutMs = 5000,
  ) {}

  /** Sends body (JSON text) on the batch subject and resolves with its fate. */
  send(subject: string, body: string): Promise<DirectResult> {
    let lane = this.lanes.get(subject);
    if (!lane) {
      lane = { inFlight: 0, waiting: [] };
      this.lanes.set(subject, lane);
    }
    const l = lane;
    const p = new Promise<DirectResult>((done) => l.waiting.push({ body, done }));
    this.pump(subject, l);
    return p;
  }

  private pump(subject: string, l: Lane): void {
    while (l.waiting.length > 0 && (l.inFlight === 0 || (l.waiting.length >= MAX_BATCH && l.inFlight < MAX_FLIGHTS))) {
      const batch = l.waiting.splice(0, MAX_BATCH);
      l.inFlight++;
      void this.flight(subject, batch).finally(() => {
        l.inFlight--;
        if (l.waiting.length > 0) this.pump(subject, l);
        else if (l.inFlight === 0) this.lanes.delete(subject);
      });
    }
  }

  private async flight(subject: string, batch: Waiting[]): Promise<void> {
    const data = utf8(`{"messages":[${batch.map((w) => w.body).join(",")}]}`);
    let results: DirectResult[];
    try {
      const m = await this.nc.request(subject, data, { timeout: this.timeoutMs });
      const rep = parseJSON<DirectBatchReply>(m.data);
      if (rep.error || !rep.results || rep.results.length !== batch.length) results = batch.map(() => "refused");
      else results = rep.results.map((r) => (r.error ? "refused" : "applied"));
    } catch (e) {
      const err = e as Error;
      const timeout = err?.name === "TimeoutError" || /timeout/i.test(String(err?.message));
      results = batch.map(() => (timeout ? "timeout" : "none"));
    }
    batch.forEach((w, i) => w.done(results[i] as DirectResult));
  }
}
