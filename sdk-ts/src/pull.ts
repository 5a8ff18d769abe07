import { type Msg, type NatsConnection } from "@nats-io/transport-node";
import { inbox as newInbox } from "./conn.js";
import { jsonBytes, utf8 } from "./util.js";

/** Delivery metadata parsed from a JetStream message's ack subject. */
export interface DeliveryInfo {
  stream: string;
  consumer: string;
  /** How often this message was delivered (1 on the first delivery). */
  delivered: number;
  /** The message's stream sequence: a dispatch's revision. */
  streamSeq: number;
}

/** Parses `$JS.ACK.[<domain>.<hash>.]<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>[.<token>]`. */
export function parseAck(reply: string): DeliveryInfo | undefined {
  const t = reply.split(".");
  if (t[0] !== "$JS" || t[1] !== "ACK") return undefined;
  if (t.length === 9) t.splice(2, 0, "_", "");
  if (t.length < 11) return undefined;
  return { stream: t[4] as string, consumer: t[5] as string, delivered: Number(t[6]), streamSeq: Number(t[7]) };
}

const ACK = utf8("+ACK");
const NAK = utf8("-NAK");
const WPI = utf8("+WPI");
const TERM = utf8("+TERM");

/** A message delivered by a pull consumer, acknowledged by replying on its ack subject. */
export class Delivery {
  readonly info: DeliveryInfo;
  private done = false;
  constructor(
    readonly msg: Msg,
    info: DeliveryInfo,
  ) {
    this.info = info;
  }
  get subject(): string {
    return this.msg.subject;
  }
  get data(): Uint8Array {
    return this.msg.data;
  }
  header(k: string): string {
    return this.msg.headers?.get(k) ?? "";
  }
  private send(p: Uint8Array, final = true): void {
    if (this.done) return;
    if (final) this.done = true;
    try {
      this.msg.respond(p);
    } catch {
      // The connection is closed: the message is redelivered after the ack wait.
    }
  }
  /** Acknowledges the message (done). */
  ack(): void {
    this.send(ACK);
  }
  /** Hands it back for redelivery, after delayMs when given. */
  nak(delayMs?: number): void {
    this.send(delayMs && delayMs > 0 ? utf8(`-NAK ${JSON.stringify({ delay: Math.round(delayMs * 1e6) })}`) : NAK);
  }
  /** Extends its ack wait (in progress). */
  working(): void {
    this.send(WPI, false);
  }
  /** Never delivers it again. */
  term(): void {
    this.send(TERM);
  }
}

/** A pull that failed because its consumer does not exist (no responders, or 409 consumer deleted). */
export class ConsumerGoneError extends Error {
  constructor(consumer: string, why: string) {
    super(`consumer ${consumer}: ${why}`);
    this.name = "ConsumerGoneError";
  }
}

/**
 * Pulls up to `batch` messages from a durable pull consumer with one
 * `$JS.API.CONSUMER.MSG.NEXT` request: with waitMs 0 it takes only what
 * is there (no_wait), else it waits up to waitMs for the batch.
 */
export async function fetch(
  nc: NatsConnection,
  stream: string,
  durable: string,
  batch: number,
  waitMs: number,
): Promise<Delivery[]> {
  const inbox = newInbox(nc);
  const out: Delivery[] = [];
  const sub = nc.subscribe(inbox);
  // The server ends the request with a status (404, 408); the local
  // timer only guards against a lost one.
  const guard = setTimeout(() => sub.unsubscribe(), Math.max(waitMs, 0) + 2000);
  const body: Record<string, unknown> = { batch };
  if (waitMs > 0) body.expires = Math.round(waitMs * 1e6);
  else body.no_wait = true;
  nc.publish(`$JS.API.CONSUMER.MSG.NEXT.${stream}.${durable}`, jsonBytes(body), { reply: inbox });
  try {
    for await (const m of sub) {
      const code = m.headers?.code ?? 0;
      if (m.data.length === 0 && code !== 0) {
        if (code === 503) throw new ConsumerGoneError(durable, "no responders");
        if (code === 409 && /deleted|not found/i.test(m.headers?.description ?? "")) {
          throw new ConsumerGoneError(durable, m.headers?.description ?? "409");
        }
        if (code === 100) continue; // heartbeat
        break; // 404 no messages, 408 request timeout, 409 other
      }
      const info = m.reply ? parseAck(m.reply) : undefined;
      if (!info) continue;
      out.push(new Delivery(m, info));
      if (out.length >= batch) break;
    }
  } finally {
    clearTimeout(guard);
    sub.unsubscribe();
  }
  return out;
}
