/**
 * A runnable example of a shardable task type: the planner splits a range
 * into shards, each shard sums its part, the aggregator adds the parts.
 *
 *   npm run build && node dist/examples/shards.js nats://127.0.0.1:4222
 */
import { Client, Executor } from "../src/index.js";

interface Range {
  from: number;
  to: number;
}

const url = process.argv[2] ?? process.env.NATS_URL ?? "nats://127.0.0.1:4222";

const ex = await Executor.connect({ servers: url }, { capabilities: ["math"] });
ex.handleShards<Range & { parts: number }, Range, number, number>("range.sum", {
  plan: (job) => {
    const { from, to, parts } = job.payload;
    const step = Math.ceil((to - from) / parts);
    const shards = [];
    for (let a = from; a < to; a += step) shards.push({ payload: { from: a, to: Math.min(a + step, to) } });
    return shards;
  },
  shard: (job) => {
    let sum = 0;
    for (let i = job.payload.from; i < job.payload.to; i++) sum += i;
    return sum;
  },
  aggregate: async (_job, shards) => {
    if (shards.failed().length > 0) throw new Error(`${shards.failed().length} shards failed`);
    let total = 0;
    for (let i = 0; i < shards.shards.length; i++) total += (await shards.result(i)) ?? 0;
    return total;
  },
});
await ex.start(AbortSignal.timeout(30_000));

const ax = await Client.connect({ servers: url });
const id = await ax.submit({ type: "range.sum", capability: "math", shardable: true, payload: { from: 0, to: 1_000_000, parts: 8 } });
const t = await ax.wait<number>(id, { timeoutMs: 60_000 });
console.log(`task ${id} ${t.state}: sum of 0…999999 = ${t.result}`);

await ax.close();
await ex.stop();
