/**
 * Durable steps, durable sleeps, event tasks and signals against a real
 * nats-server and orchestrator (subjects.md, "Durable steps and sleeps",
 * `ax.event.<subject>.<match>`).
 */
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import {
  Client,
  Executor,
  STEP_INLINE_LIMIT,
  MAX_STEPS,
  stepObjectName,
  type TaskRecord,
} from "../src/index.js";
import { startAX, type AX } from "./ax.js";
import { orderIDs, pay, register, submitOrder, Warehouse } from "../examples/orderworkflow.js";

let ax: AX;
const warehouse = new Warehouse(new Map([["book", 10]]));
let client: Client;
let ex: Executor;
const runs = new Map<string, number>();
const count = (k: string) => runs.set(k, (runs.get(k) ?? 0) + 1);
const big = "x".repeat(STEP_INLINE_LIMIT + 100);
const CAP = "ts-steps";
const gates = new Map<string, () => void>();
const notStored: string[] = [];
const lostErrors = new Map<string, string>();

before(async () => {
  ax = await startAX();
  client = await Client.connect({ servers: ax.url });
  ex = await Executor.connect(
    { servers: ax.url },
    {
      capabilities: [CAP],
      capacity: 8,
      ackWaitMs: 3000,
      log: (_level, msg, f) => {
        if (msg === "step not stored yet; asking again") notStored.push(String(f?.task_id));
      },
    },
  );
  // Fails after its first step in attempt 1 and after its second in
  // attempt 2: each step's fn must run once, later attempts get the
  // stored results (inline, and one over the inline limit from the
  // object store).
  ex.handle("steps.retry", async (job) => {
    const a = await job.step<number>("charge", () => {
      count(`${job.id}/charge`);
      return 40 + job.attempt; // differs per attempt: a rerun would show
    });
    if (job.attempt === 1) throw new Error("crash after charge");
    const b = await job.step("render", async () => {
      count(`${job.id}/render`);
      return big + String(job.attempt);
    });
    if (job.attempt === 2) throw new Error("crash after render");
    const c = await job.step<{ sent: number }>("send", () => {
      count(`${job.id}/send`);
      return { sent: job.attempt };
    });
    return { a, b: b.length, last: b.slice(-1), c, known: job.steps().map((s) => s.name) };
  });
  ex.handle("steps.nap", async (job) => {
    count(`${job.id}/handler`);
    await job.step("before", () => (count(`${job.id}/before`), "b"));
    await job.sleep(300);
    await job.step("after", () => (count(`${job.id}/after`), "a"));
    await job.sleep("300ms");
    return "woke twice";
  });
  ex.handle("steps.badname", (job) => job.step("ax:mine", () => 1));
  ex.handle("steps.many", async (job) => {
    for (let i = 0; i <= MAX_STEPS; i++) await job.step(`s${i}`, () => i);
  });
  ex.handle("steps.fnerr", (job) =>
    job.step("flaky", () => {
      count(`${job.id}/flaky`);
      if ((runs.get(`${job.id}/flaky`) ?? 0) === 1) throw new Error("not yet");
      return "done";
    }),
  );
  // Stores a step, waits for the test (which cancels the task), then tries
  // another: the orchestrator refuses it lost (the attempt ended).
  ex.handle("steps.zombie", async (job) => {
    await job.step("one", () => 1);
    await new Promise<void>((r) => gates.set(job.id, r));
    try {
      await job.step("two", () => 2);
      lostErrors.set(job.id, "stored");
    } catch (e) {
      lostErrors.set(job.id, `${(e as Error).name}: ${(e as Error).message}`);
      throw e;
    }
  });
  ex.handle("steps.gated", (job) =>
    job.step("slow", async () => {
      count(`${job.id}/slow`);
      await new Promise<void>((r) => gates.set(job.id, r));
      return "stored late";
    }),
  );
  ex.handle("evt.ship", async (job) => ({ shipped: await job.upstreamResult<{ paid: number }>(job.dependsOn[0] as string) }));
  register(ex, warehouse);
  await ex.start(AbortSignal.timeout(30_000));
});

after(async () => {
  await ex?.stop({ timeoutMs: 10_000 });
  await client?.close();
  await ax?.stop();
});

test("a step runs once across retries; later attempts get its stored result (inline and from the object store)", async () => {
  const id = await client.submit({ type: "steps.retry", capability: CAP, max_retries: 2 });
  const t = await client.wait<{ a: number; b: number; last: string; c: { sent: number }; known: string[] }>(id, { timeoutMs: 60_000 });
  assert.equal(t.state, "succeeded", t.reason);
  assert.equal(t.attempt, 3);
  assert.deepEqual(t.result, { a: 41, b: big.length + 1, last: "2", c: { sent: 3 }, known: ["charge", "render", "send"] });
  for (const s of ["charge", "render", "send"]) assert.equal(runs.get(`${id}/${s}`), 1, `step ${s} ran ${runs.get(`${id}/${s}`)} times`);
  const steps = t.steps ?? [];
  assert.deepEqual(
    steps.map((s) => s.name),
    ["charge", "render", "send"],
  );
  assert.equal(steps[0]?.result, 41);
  assert.equal(steps[1]?.result, undefined);
  assert.equal(steps[1]?.result_object, stepObjectName(id, steps[1]?.execution_id as string, "render"));
  assert.equal(steps[1]?.result_bucket, `AX_OBJECTS_${CAP}`);
  assert.match(steps[1]?.result_digest ?? "", /^SHA-256=/);
  assert.equal(steps[2]?.attempt, 3);
  const h = await client.history(id);
  const stored = h.filter((e) => e.kind === "step");
  assert.equal(stored.length, 3);
  for (const e of stored) {
    assert.equal(e.from, e.to);
    assert.match(e.reason ?? "", /stored by/);
  }
});

test("a sleep ends the run without spending an attempt; the handler resumes after it", async () => {
  const id = await client.submit({ type: "steps.nap", capability: CAP, max_retries: 0 });
  const t = await client.wait(id, { timeoutMs: 60_000 });
  assert.equal(t.state, "succeeded", t.reason);
  assert.equal(t.attempt, 1);
  assert.equal(t.errors?.length ?? 0, 0);
  assert.equal(t.result, "woke twice");
  assert.equal(runs.get(`${id}/handler`), 3);
  assert.equal(runs.get(`${id}/before`), 1);
  assert.equal(runs.get(`${id}/after`), 1);
  const steps = t.steps ?? [];
  assert.deepEqual(
    steps.map((s) => s.name),
    ["before", "ax:sleep:1", "after", "ax:sleep:2"],
  );
  assert.ok(steps[1]?.sleep_until, "a sleep is listed with its end");
  const h = await client.history(id);
  const slept = h.filter((e) => e.to === "retrying" && /sleeping for 300ms/.test(e.reason ?? "") && /no attempt spent/.test(e.reason ?? ""));
  const woke = h.filter((e) => e.from === "retrying" && e.to === "ready" && /over; attempt 1 runs again/.test(e.reason ?? ""));
  assert.equal(slept.length, 2);
  assert.equal(woke.length, 2);
  for (const e of slept) {
    // The wake is no earlier than the sleep's end (times of the record, not of this test).
    assert.ok(Date.parse(e.task.retry_at as string) - Date.parse(e.at) >= 300, `retry_at ${e.task.retry_at} at ${e.at}`);
  }
});

test("step limits: a reserved name and too many steps fail permanently; a fn's error stores nothing", async () => {
  const [bad, many, fnerr] = await client.submitMany([
    { type: "steps.badname", capability: CAP },
    { type: "steps.many", capability: CAP },
    { type: "steps.fnerr", capability: CAP },
  ]);
  const b = await client.wait(bad as string, { timeoutMs: 60_000 });
  assert.equal(b.state, "failed");
  assert.equal(b.attempt, 1);
  assert.match(b.reason ?? "", /starts with "ax:", which AX reserves/);
  const m = await client.wait(many as string, { timeoutMs: 60_000 });
  assert.equal(m.state, "failed");
  assert.equal(m.steps?.length, MAX_STEPS);
  assert.match(m.reason ?? "", /the limit is 100/);
  const f = await client.wait(fnerr as string, { timeoutMs: 60_000 });
  assert.equal(f.state, "succeeded");
  assert.equal(f.attempt, 2);
  assert.equal(f.result, "done");
  assert.equal(runs.get(`${fnerr}/flaky`), 2);
  assert.equal(f.steps?.length, 1);
});

test("a step of an attempt that is no longer the executor's is refused lost and not stored", async () => {
  const id = await client.submit({ type: "steps.zombie", capability: CAP });
  for (let i = 0; i < 800 && !gates.has(id); i++) await new Promise((r) => setTimeout(r, 25));
  assert.ok(gates.has(id), "the handler stored its first step");
  const c = await client.cancel(id, "test");
  assert.equal(c.state, "cancelled");
  gates.get(id)?.();
  for (let i = 0; i < 800 && !lostErrors.has(id); i++) await new Promise((r) => setTimeout(r, 25));
  assert.match(lostErrors.get(id) ?? "", /^AttemptLostError: step "two" of .* not stored: .*the attempt is no longer this executor's$/);
  const t = await client.get(id);
  assert.equal(t.state, "cancelled");
  assert.deepEqual(
    (t.steps ?? []).map((s) => s.name),
    ["one"],
  );
});

test("a step asked while no orchestrator answers is asked again until one does: stored once, fn run once", async () => {
  const id = await client.submit({ type: "steps.gated", capability: CAP });
  for (let i = 0; i < 800 && !gates.has(id); i++) await new Promise((r) => setTimeout(r, 25));
  assert.ok(gates.has(id), "the step's fn runs");
  await ax.killOrchestrator();
  try {
    gates.get(id)?.();
    // The executor asks, hears nothing, and says it asks again.
    for (let i = 0; i < 2000 && !notStored.includes(id); i++) await new Promise((r) => setTimeout(r, 25));
    assert.ok(notStored.includes(id), "the step was asked again");
  } finally {
    ax.startOrchestrator();
  }
  const t = await client.wait(id, { timeoutMs: 60_000 });
  assert.equal(t.state, "succeeded", t.reason);
  assert.equal(t.attempt, 1);
  assert.equal(t.result, "stored late");
  assert.equal(runs.get(`${id}/slow`), 1);
  assert.deepEqual(
    (t.steps ?? []).map((s) => [s.name, s.result]),
    [["slow", "stored late"]],
  );
});

test("an event task succeeds with the signal's data, published before or after it waits; its dependent reads it", async () => {
  const early = `o${Date.now()}a`;
  const late = `o${Date.now()}b`;
  // An event published before its task exists is not lost.
  const seq = await client.signal(`payment.${early}`, { paid: 1 });
  assert.ok(seq > 0);
  const ids = await client.submitGraph([
    { id: `pay-${early}`, type: "evt.payment", capability: CAP, wait_for: { subject: "payment", match: early, timeout: "1m" } },
    { id: `ship-${early}`, type: "evt.ship", capability: CAP, depends_on: [`pay-${early}`] },
    { id: `pay-${late}`, type: "evt.payment", capability: CAP, wait_for: { subject: "payment", match: late, timeout: 60_000 } },
    { id: `ship-${late}`, type: "evt.ship", capability: CAP, depends_on: [`pay-${late}`] },
  ]);
  assert.equal(ids.length, 4);
  const e1 = await client.wait(`pay-${early}`, { timeoutMs: 60_000 });
  assert.equal(e1.state, "succeeded", e1.reason);
  assert.deepEqual(e1.result, { paid: 1 });
  assert.equal(e1.event_seq, seq);
  // The late one waits (registered), then receives its event.
  let w: TaskRecord | undefined;
  for (let i = 0; i < 400 && !(w = await client.get(`pay-${late}`)).event_wait_since; i++) await new Promise((r) => setTimeout(r, 25));
  assert.equal(w?.state, "waiting");
  assert.ok(w?.event_wait_since);
  await client.signal(`payment.${late}`, { paid: 2 });
  const e2 = await client.wait(`pay-${late}`, { timeoutMs: 60_000 });
  assert.equal(e2.state, "succeeded");
  assert.deepEqual(e2.result, { paid: 2 });
  assert.match(e2.reason ?? "", new RegExp(`event payment\\.${late} \\(sequence \\d+\\) arrived`));
  for (const [o, paid] of [
    [early, 1],
    [late, 2],
  ] as const) {
    const s = await client.wait(`ship-${o}`, { timeoutMs: 60_000 });
    assert.equal(s.state, "succeeded", s.reason);
    assert.deepEqual(s.result, { shipped: { paid } });
  }
});

test("cancel_on: an event stored after the task's acceptance cancels it; an older one of the subject does not", async () => {
  const m = `c${Date.now()}`;
  // An event of the subject stored before the task exists does not cancel it.
  const old = await client.signal(`order.cancelled.${m}`, { why: "an earlier order" });
  const id = await client.submit({ type: "evt.ship", capability: CAP, delay: "1h", cancel_on: { subject: "order.cancelled", match: m } });
  const fresh = await client.signal(`order.cancelled.${m}`, { why: "customer" });
  assert.ok(fresh > old);
  const t = await client.wait(id, { timeoutMs: 60_000 });
  assert.equal(t.state, "cancelled");
  assert.equal(t.reason, `cancelled by event order.cancelled.${m} (sequence ${fresh})`);
  assert.ok((t.cancel_on_after ?? 0) >= old);
});

test("an event task without its event expires at its timeout", async () => {
  const id = await client.submit({ type: "evt.payment", capability: CAP, wait_for: { subject: "payment", match: `never${Date.now()}`, timeout: 500 } });
  const t = await client.wait(id, { timeoutMs: 60_000 });
  assert.equal(t.state, "expired");
  assert.match(t.reason ?? "", /passed while waiting/);
});

test("signal refuses a bad subject and oversized data", async () => {
  await assert.rejects(client.signal("payment", 1), /not an event subject/);
  await assert.rejects(client.signal("pay ment.x", 1), /not an event subject/);
  await assert.rejects(client.signal("payment.x", "y".repeat(16 << 10)), /bytes of data exceed the limit of 16384/);
});

test("the order workflow example: a paid order ships with its payment, an unpaid one expires and is released", async () => {
  const paid = { id: `ts-paid-${Date.now()}`, sku: "book", qty: 2 };
  const unpaid = { id: `ts-unpaid-${Date.now()}`, sku: "book", qty: 3 };
  await submitOrder(client, paid, "1m", CAP);
  await submitOrder(client, unpaid, 500, CAP);
  await pay(client, paid.id, { amount: 24, ref: "card-1" });
  const ended = async (id: string) => client.wait(id, { timeoutMs: 60_000 });
  let ids = orderIDs(paid.id);
  assert.deepEqual((await ended(ids.reserve)).result, { hold: `hold-${paid.id}`, total: 24 });
  assert.deepEqual((await ended(ids.payment)).result, { amount: 24, ref: "card-1" });
  const ship = await ended(ids.ship);
  assert.equal(ship.state, "succeeded", ship.reason);
  assert.deepEqual(ship.result, { tracking: `track-${paid.id}`, paid: { amount: 24, ref: "card-1" } });
  const rel = await ended(ids.release);
  assert.equal(rel.state, "cancelled");
  assert.match(rel.reason ?? "", /any_failed: no upstream failed/);
  ids = orderIDs(unpaid.id);
  assert.equal((await ended(ids.reserve)).state, "succeeded");
  const p = await ended(ids.payment);
  assert.equal(p.state, "expired");
  assert.ok(p.event_wait_since, "it waited for its event");
  assert.equal((await ended(ids.ship)).state, "cancelled");
  const r = await ended(ids.release);
  assert.equal(r.state, "succeeded", r.reason);
  assert.equal(r.result, "released 3 of book: payment expired");
  assert.deepEqual(warehouse.calls, { reserve: 2, ship: 1, release: 1 });
  assert.equal(warehouse.stock.get("book"), 8);
});
