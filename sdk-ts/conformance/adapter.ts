/**
 * The TypeScript adapter of AX's conformance suite (conformance/ in the
 * repository): an executor process and a producer process built on this
 * SDK, driven by the suite's Go test as a process of any language would
 * be. The protocol is described in conformance/README.md.
 *
 *   node dist/conformance/adapter.js executor   # run the handlers until SIGTERM
 *   node dist/conformance/adapter.js producer   # answer JSON requests on stdin, one per line
 */
import { createInterface } from "node:readline";
import {
  AESGCM,
  AttemptLostError,
  CancelError,
  acceptClear,
  Client,
  CommandRefusedError,
  Executor,
  PermanentError,
  RetryAfterError,
  SnoozeError,
  dial,
  type Job,
  type TaskSpec,
} from "../src/index.js";

interface Step {
  do: string;
  error?: string;
  result?: unknown;
  delay_ms?: number;
  ms?: number;
  bytes?: number;
  /** How many attempts a "flaky" step fails. */
  attempts?: number;
  /** A "durable" step's durable steps, in order (conformance/README.md). */
  names?: string[];
  fail_after?: string[];
  block_after?: string;
  sleep_after?: string;
  big_step?: string;
  pause_after?: string;
}

/** What a "durable" step's fn returns (pad: big_step's bytes). */
interface StepValue {
  step: string;
  attempt: number;
  pad?: string;
}

interface Behaviour {
  steps: Step[];
}

function conn() {
  return dial({
    servers: process.env.AX_NATS_URL ?? "nats://127.0.0.1:4222",
    ...(process.env.AX_CREDS ? { credsFile: process.env.AX_CREDS } : {}),
    ...(process.env.AX_USER ? { user: process.env.AX_USER, pass: process.env.AX_PASSWORD ?? "" } : {}),
    ...(process.env.AX_INBOX_PREFIX ? { inboxPrefix: process.env.AX_INBOX_PREFIX } : {}),
  });
}

/** The AES-256-GCM codec of the keys in AX_CODEC_KEYS ("<key id> <base64 secret>" lines), undefined without. */
function codecFromEnv(): AESGCM | undefined {
  const keys = process.env.AX_CODEC_KEYS;
  return keys ? AESGCM.fromKeyFile(keys) : undefined;
}

async function runExecutor(): Promise<void> {
  const nc = await conn();
  const capability = process.env.AX_CAPABILITY ?? "default";
  const id = process.env.AX_EXECUTOR_ID ?? "";
  const ex = new Executor(nc, {
    id,
    capabilities: [capability],
    capacity: Number(process.env.AX_CAPACITY ?? 4),
    ackWaitMs: Number(process.env.AX_ACK_WAIT_MS ?? 30000),
    ...(codecFromEnv() ? { codec: acceptClear(codecFromEnv() as AESGCM) } : {}),
    log: (level, msg, fields) => {
      if (level !== "debug") process.stderr.write(`${new Date().toISOString()} ${level} ${msg} ${JSON.stringify(fields ?? {})}\n`);
    },
  });
  const runs = new Map<string, number>();
  const emit = (ev: Record<string, unknown>) => nc.publish(`conformance.events.${capability}`, JSON.stringify(ev));
  const behave = async (job: Job<Behaviour>): Promise<unknown> => {
    const at_ms = performance.timeOrigin + performance.now();
    const run = (runs.get(job.id) ?? 0) + 1;
    runs.set(job.id, run);
    const ev = { id: job.id, attempt: job.attempt, execution_id: job.executionID, executor: id, priority: job.priority, run };
    emit({ event: "started", ...ev, at_ms });
    const steps = job.payload?.steps;
    if (!Array.isArray(steps) || steps.length === 0) throw new PermanentError("payload is no behaviour");
    const s = steps[Math.min(run, steps.length) - 1] as Step;
    const aborted = () => {
      const reason = job.signal.reason as Error;
      emit({ event: "aborted", ...ev, reason: String(reason?.message ?? reason) });
      return reason;
    };
    switch (s.do) {
      case "succeed":
        return s.result;
      case "fail":
        throw new Error(s.error);
      case "flaky": // by the task's attempt, whichever process runs it
        if (job.attempt <= (s.attempts ?? 0)) throw new Error(s.error);
        return s.result;
      case "permanent":
        throw new PermanentError(s.error);
      case "retry_after":
        throw new RetryAfterError(s.delay_ms ?? 0, s.error);
      case "snooze":
        throw new SnoozeError(s.delay_ms ?? 0);
      case "cancel":
        throw new CancelError(s.error);
      case "block":
        await new Promise<void>((resolve) => {
          if (job.signal.aborted) return resolve();
          job.signal.addEventListener("abort", () => resolve(), { once: true });
        });
        throw aborted();
      case "sleep":
        await new Promise<void>((resolve, reject) => {
          const t = setTimeout(resolve, s.ms ?? 0);
          job.signal.addEventListener("abort", () => {
            clearTimeout(t);
            reject(aborted());
          }, { once: true });
        });
        emit({ event: "finished", ...ev });
        return s.result;
      case "inputs": {
        const inputs = await job.inputs();
        return inputs.map((u) => ({ id: u.id, state: u.state, result: u.result }));
      }
      case "big":
        return "x".repeat(s.bytes ?? 0);
      case "durable": {
        // Durable steps: each fn emits step_ran; after a step whose fn ran
        // in this run, fail (fail_after) or block until aborted
        // (block_after, emitting blocked); after sleep_after, a durable
        // sleep of ms. The result lists each step's value as step()
        // returned it (a stored one in later runs).
        const out: { step: string; attempt: number; pad_bytes: number }[] = [];
        for (const name of s.names ?? []) {
          let ran = false;
          let v: StepValue;
          try {
            v = await job.step<StepValue>(name, () => {
              ran = true;
              emit({ event: "step_ran", ...ev, step: name });
              return { step: name, attempt: job.attempt, ...(name === s.big_step ? { pad: "x".repeat(s.bytes ?? 0) } : {}) };
            });
          } catch (e) {
            if (e instanceof AttemptLostError) {
              emit({ event: "lost", ...ev, step: name, reason: job.signal.aborted ? "handler aborted" : "handler not aborted" });
            }
            throw e;
          }
          out.push({ step: v.step, attempt: v.attempt, pad_bytes: v.pad?.length ?? 0 });
          if (ran && (s.fail_after ?? []).includes(name)) throw new Error(`crash after ${name}`);
          if (ran && name === s.block_after) {
            emit({ event: "blocked", ...ev, step: name });
            await new Promise<void>((resolve) => {
              if (job.signal.aborted) return resolve();
              job.signal.addEventListener("abort", () => resolve(), { once: true });
            });
            throw aborted();
          }
          if (ran && name === s.pause_after) {
            // Paused (not aborted) until the suite's release.
            const sub = nc.subscribe(`conformance.release.${job.id}`, { max: 1 });
            emit({ event: "blocked", ...ev, step: name });
            const released = (async () => {
              for await (const _ of sub) return true;
              return false;
            })();
            const abort = new Promise<boolean>((resolve) => {
              if (job.signal.aborted) return resolve(false);
              job.signal.addEventListener("abort", () => resolve(false), { once: true });
            });
            const ok = await Promise.race([released, abort]);
            sub.unsubscribe();
            if (!ok) throw aborted();
          }
          if (name === s.sleep_after) await job.sleep(s.ms ?? 0);
        }
        return out;
      }
      case "upstream_sizes": {
        const sizes: number[] = [];
        for (const up of job.dependsOn) sizes.push(JSON.stringify(await job.upstreamResult(up)).length);
        return sizes;
      }
    }
    throw new PermanentError(`unknown step ${JSON.stringify(s.do)}`);
  };
  ex.handle<Behaviour, unknown>("conf.behave", behave);
  // A shardable type: the planner's shards are the payload's "shards"
  // (each a behaviour, run by behave); the aggregator returns how many
  // succeeded and the byte length of each shard's result (JSON; 0 for one
  // that did not succeed), read through the SDK (object store included).
  const plan = (job: Job<{ shards: Behaviour[] }>) => job.payload.shards.map((b) => ({ payload: b }));
  ex.handleShards<{ shards: Behaviour[] }, Behaviour, unknown, unknown>("conf.sharded", {
    plan,
    shard: behave,
    aggregate: async (_job, shards) => {
      const sizes: number[] = [];
      for (let i = 0; i < shards.shards.length; i++) {
        sizes.push(shards.shards[i]?.state === "succeeded" ? (JSON.stringify(await shards.result(i)) ?? "").length : 0);
      }
      return { succeeded: shards.succeeded, sizes };
    },
  });
  ex.handleShards<{ shards: Behaviour[] }, Behaviour>("conf.sharded_plain", { plan, shard: behave });
  await ex.start(AbortSignal.timeout(60_000));
  process.stdout.write("ready\n");
  await new Promise<void>((resolve) => {
    process.once("SIGTERM", resolve);
    process.once("SIGINT", resolve);
  });
  await ex.stop({ timeoutMs: 20_000 });
  await nc.close();
}

interface Request {
  seq: number;
  op: string;
  spec?: TaskSpec;
  specs?: TaskSpec[];
  type?: string;
  id?: string;
  reason?: string;
  timeout_ms?: number;
  codec?: boolean;
  subject?: string;
  data?: unknown;
}

async function handle(c: Client, req: Request): Promise<Record<string, unknown>> {
  const timeoutMs = Math.max(req.timeout_ms ?? 0, 1000);
  switch (req.op) {
    case "submit":
      return { id: await c.submit(req.spec as TaskSpec) };
    case "submit_many":
      return { ids: await c.submitMany(req.specs ?? []) };
    case "submit_graph":
      return { ids: await c.submitGraph(req.specs ?? []) };
    case "state":
      return { task: await c.state(req.type ?? "", req.id ?? "", { timeoutMs }) };
    case "wait":
      return { task: await c.waitState(req.type ?? "", req.id ?? "", { timeoutMs }) };
    case "result":
      return { result: await c.result(await c.state(req.type ?? "", req.id ?? "", { timeoutMs })) };
    case "signal":
      return { seq: await c.signal(req.subject ?? "", req.data) };
    case "cancel":
      return { task: await c.cancel(req.id ?? "", req.reason ?? "", { timeoutMs }) };
  }
  return { error: `unknown op ${JSON.stringify(req.op)}` };
}

async function runProducer(): Promise<void> {
  const nc = await conn();
  const c = new Client(nc);
  c.caller = process.env.AX_CALLER ?? "";
  // A second client encodes payloads, for requests with "codec": true.
  const encoding = new Client(nc);
  encoding.caller = c.caller;
  const aes = codecFromEnv();
  if (aes) encoding.codec = aes;
  process.stdout.write(JSON.stringify({ ready: true }) + "\n");
  const pending: Promise<void>[] = [];
  for await (const line of createInterface({ input: process.stdin })) {
    if (!line.trim()) continue;
    let req: Request;
    try {
      req = JSON.parse(line) as Request;
    } catch (e) {
      process.stdout.write(JSON.stringify({ error: `bad request: ${String(e)}` }) + "\n");
      continue;
    }
    pending.push(
      handle(req.codec ? encoding : c, req)
        .catch((e: unknown) => {
          const rep: Record<string, unknown> = { error: e instanceof Error ? e.message : String(e) };
          if (e instanceof CommandRefusedError) rep.code = e.code;
          return rep;
        })
        .then((rep) => {
          process.stdout.write(JSON.stringify({ ...rep, seq: req.seq }) + "\n");
        }),
    );
  }
  await Promise.all(pending);
  await c.nc.close();
}

const mode = process.argv[2];
const main = mode === "executor" ? runExecutor : mode === "producer" ? runProducer : undefined;
if (!main) {
  process.stderr.write("usage: adapter.js executor|producer\n");
  process.exit(2);
}
main().catch((e: unknown) => {
  process.stderr.write(`adapter: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
  process.exit(1);
});
