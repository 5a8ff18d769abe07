/**
 * A runnable example: an executor that prices orders and a producer that
 * submits one and waits for its result, against any AX deployment.
 *
 *   ax dev &                                   # or: nats-server -js & ax orchestrator &
 *   npm run build && node dist/examples/quickstart.js nats://127.0.0.1:4222
 */
import { Client, Executor, PermanentError, RetryAfterError } from "../src/index.js";

interface Order {
  sku: string;
  qty: number;
}

interface Price {
  total: number;
}

const url = process.argv[2] ?? process.env.NATS_URL ?? "nats://127.0.0.1:4222";

const executor = await Executor.connect({ servers: url }, { capabilities: ["shop"], capacity: 8 });
executor.handle<Order, Price>("order.price", async (job) => {
  if (job.payload.qty <= 0) throw new PermanentError(`quantity ${job.payload.qty} is not positive`);
  if (job.signal.aborted) throw job.signal.reason; // cancelled, timed out or stopping
  if (job.payload.sku === "busy") throw new RetryAfterError(1000, "pricing service busy");
  return { total: job.payload.qty * 4.5 };
});
await executor.start(AbortSignal.timeout(30_000));

const ax = await Client.connect({ servers: url });
const id = await ax.submit<Order>({
  type: "order.price",
  capability: "shop",
  payload: { sku: "tea", qty: 3 },
  priority: 1,
  timeout: "30s",
  max_retries: 3,
});
const done = await ax.wait<Price>(id, { timeoutMs: 60_000 });
console.log(`task ${id} ${done.state}:`, done.result);

await ax.close();
await executor.stop({ timeoutMs: 10_000 }); // drains: running handlers finish and report
