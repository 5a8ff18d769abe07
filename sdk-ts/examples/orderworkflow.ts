/**
 * A runnable example: an order workflow — reserve the stock, wait for the
 * payment or a timeout, then ship or release — as one graph per order
 * (the TypeScript twin of the repository's examples/orderworkflow):
 *
 *   reserve ──▶ payment (wait_for payment.<order id>) ──▶ ship     (all_succeeded: paid)
 *                                                     └──▶ release  (any_failed: expired)
 *
 * reserve is a handler of durable steps (a retry never reserves twice);
 * payment is an event task that succeeds with the data of the event
 * `client.signal("payment.<order id>", data)` publishes; ship reads that
 * data as its input; release gives the stock back when the payment
 * expired. Against any AX deployment:
 *
 *   ax dev &                                   # or: nats-server -js & ax orchestrator &
 *   npm run build && node dist/examples/orderworkflow.js nats://127.0.0.1:4222
 */
import { pathToFileURL } from "node:url";
import { Client, Executor, type DurationInput } from "../src/index.js";

export interface Order {
  /** The payment event's match: one token of [A-Za-z0-9_-]. */
  id: string;
  sku: string;
  qty: number;
}

export interface Payment {
  amount: number;
  ref: string;
}

/** The ids of an order's four tasks. */
export function orderIDs(order: string) {
  return { reserve: `${order}-reserve`, payment: `${order}-payment`, ship: `${order}-ship`, release: `${order}-release` };
}

/** An in-memory stand-in for the stock service; its calls are idempotent by order id. */
export class Warehouse {
  readonly calls = { reserve: 0, ship: 0, release: 0 };
  private readonly held = new Map<string, { sku: string; qty: number }>();
  constructor(readonly stock: Map<string, number>) {}
  reserve(o: Order): string {
    this.calls.reserve++;
    if (!this.held.has(o.id)) {
      const left = this.stock.get(o.sku) ?? 0;
      if (left < o.qty) throw new Error(`reserve ${o.qty} of ${o.sku}: out of stock`);
      this.stock.set(o.sku, left - o.qty);
      this.held.set(o.id, { sku: o.sku, qty: o.qty });
    }
    return `hold-${o.id}`;
  }
  ship(order: string): string {
    this.calls.ship++;
    this.held.delete(order);
    return `track-${order}`;
  }
  release(order: string): number {
    this.calls.release++;
    const h = this.held.get(order);
    if (!h) return 0;
    this.held.delete(order);
    this.stock.set(h.sku, (this.stock.get(h.sku) ?? 0) + h.qty);
    return h.qty;
  }
}

/** Registers the workflow's handlers (order.reserve, order.ship, order.release) on ex. */
export function register(ex: Executor, w: Warehouse): void {
  ex.handle<Order>("order.reserve", async (job) => {
    const hold = await job.step("reserve", () => w.reserve(job.payload));
    const total = await job.step("price", () => job.payload.qty * 12);
    return { hold, total };
  });
  ex.handle<Order>("order.ship", async (job) => {
    const paid = await job.upstreamResult<Payment>(orderIDs(job.payload.id).payment);
    const tracking = await job.step("ship", () => w.ship(job.payload.id));
    return { tracking, paid };
  });
  ex.handle<Order>("order.release", async (job) => {
    const [payment] = await job.inputs();
    return job.step("release", () => `released ${w.release(job.payload.id)} of ${job.payload.sku}: payment ${payment?.state}`);
  });
}

/** Submits an order's workflow as one graph. */
export async function submitOrder(c: Client, o: Order, paymentTimeout: DurationInput, capability = "default"): Promise<void> {
  const ids = orderIDs(o.id);
  await c.submitGraph([
    { id: ids.reserve, type: "order.reserve", capability, payload: o },
    {
      id: ids.payment,
      type: "order.payment",
      capability,
      payload: o,
      depends_on: [ids.reserve],
      wait_for: { subject: "payment", match: o.id, timeout: paymentTimeout },
    },
    { id: ids.ship, type: "order.ship", capability, payload: o, depends_on: [ids.payment] },
    { id: ids.release, type: "order.release", capability, payload: o, depends_on: [ids.payment], trigger_rule: "any_failed" },
  ]);
}

/** Pays an order: its payment task succeeds with p, whether it waits already or later. */
export function pay(c: Client, order: string, p: Payment): Promise<number> {
  return c.signal(`payment.${order}`, p);
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const url = process.argv[2] ?? process.env.NATS_URL ?? "nats://127.0.0.1:4222";
  const w = new Warehouse(new Map([["book", 10]]));
  const ex = await Executor.connect({ servers: url }, { capacity: 8 });
  register(ex, w);
  await ex.start(AbortSignal.timeout(30_000));
  const ax = await Client.connect({ servers: url });
  const n = Date.now().toString(36);
  const paid: Order = { id: `order-paid-${n}`, sku: "book", qty: 2 };
  const unpaid: Order = { id: `order-unpaid-${n}`, sku: "book", qty: 3 };
  await submitOrder(ax, paid, "1m");
  await submitOrder(ax, unpaid, "3s");
  await pay(ax, paid.id, { amount: 24, ref: `pay-${paid.id}` }); // published early: not lost
  for (const o of [paid, unpaid]) {
    for (const id of Object.values(orderIDs(o.id))) {
      const t = await ax.wait(id, { timeoutMs: 60_000 });
      console.log(id.padEnd(36), t.state.padEnd(9), t.state === "succeeded" ? JSON.stringify(t.result) : t.reason);
    }
  }
  console.log(`stock of book: ${w.stock.get("book")} (10 - 2 shipped)`);
  await ex.stop();
  await ax.close();
}
