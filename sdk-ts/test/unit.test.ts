import { test } from "node:test";
import assert from "node:assert/strict";
import {
  CancelError,
  InvalidSpecError,
  PermanentError,
  RetryAfterError,
  SleepError,
  SnoozeError,
  stepObjectName,
  validateStepName,
  validEventSubject,
  formatDuration,
  msgID,
  newID,
  parseDuration,
  setOutcome,
  toWire,
  type Report,
} from "../src/index.js";
import { Picker } from "../src/executor.js";
import { nodeToken, parseDispatch } from "../src/subjects.js";
import { parseAck } from "../src/pull.js";
import { after, fnv1a64, utf8 } from "../src/util.js";
import { goDurationString } from "../src/steps.js";

test("Go durations parse and format", () => {
  assert.equal(parseDuration("10m0s"), 600_000);
  assert.equal(parseDuration("1h2m3.5s"), 3_723_500);
  assert.equal(parseDuration("250ms"), 250);
  assert.equal(parseDuration("1.5µs"), 0.0015);
  assert.equal(parseDuration("0s"), 0);
  assert.equal(parseDuration("-2s"), -2000);
  assert.throws(() => parseDuration("soon"));
  assert.throws(() => parseDuration("5"));
  assert.equal(formatDuration(1500), "1500ms");
  assert.equal(formatDuration(0), "0s");
  assert.equal(parseDuration(formatDuration(0.25)), 0.25);
});

test("ids are ULIDs, sortable by time", () => {
  const a = newID(1_700_000_000_000);
  const b = newID(1_700_000_000_001);
  assert.match(a, /^[0-9A-HJKMNP-TV-Z]{26}$/);
  assert.ok(a < b);
});

test("toWire fills the id, converts durations and times, leaves defaults out", () => {
  const w = toWire({ type: "email.send", payload: { to: "a" }, timeout: 30_000, delay: "1s", deadline: new Date(0) });
  assert.match(w.id, /^[0-9A-Z]{26}$/);
  assert.deepEqual(
    { ...w, id: "x" },
    { id: "x", type: "email.send", payload: { to: "a" }, timeout: "30000ms", delay: "1s", deadline: "1970-01-01T00:00:00.000Z" },
  );
});

test("toWire refuses what the orchestrator refuses, naming the field", () => {
  const bad: [Parameters<typeof toWire>[0], string][] = [
    [{ id: ".x", type: "t" }, "id"],
    [{ id: "a/shard/1", type: "t" }, "id"],
    [{ type: "bad type" }, "type"],
    [{ type: "t", priority: 6 }, "priority"],
    [{ type: "t", capability: "a.b" }, "capability"],
    [{ type: "t", max_retries: 101 }, "max_retries"],
    [{ type: "t", timeout: 0 }, "timeout"],
    [{ type: "t", estimated_cost: 0 }, "estimated_cost"],
    [{ type: "t", delay: "1s", run_at: new Date() }, "run_at"],
    [{ type: "t", ttl: "1s", deadline: new Date() }, "deadline"],
    [{ type: "t", trigger_rule: "any_failed" }, "trigger_rule"],
    [{ id: "a", type: "t", depends_on: ["a"] }, "depends_on"],
    [{ type: "t", unique_key: "k" }, "unique_window"],
    [{ type: "t", unique_key: "k", unique_window: "500ms" }, "unique_window"],
    [{ type: "t", max_parallel_shards: 2 }, "max_parallel_shards"],
    [{ type: "t", fairness_key: "a b" }, "fairness_key"],
    [{ type: "t", payload: "x".repeat(300_000) }, "payload"],
  ];
  for (const [spec, field] of bad) {
    assert.throws(() => toWire(spec), (e: unknown) => e instanceof InvalidSpecError && e.field === field, JSON.stringify(spec).slice(0, 80));
  }
});

test("node tokens and hashes match the Go implementation", () => {
  assert.equal(nodeToken("orch-1"), "orch-1");
  assert.equal(nodeToken("orchestrator.host.1"), "n9db47726d498e466");
  assert.equal(fnv1a64(utf8("")), 0xcbf29ce484222325n);
  assert.match(msgID("id1", utf8("{}")), /^id1:[0-9a-z]+$/);
});

test("dispatch subjects and ack subjects parse", () => {
  assert.deepEqual(parseDispatch("ax.task.abc.d.pdf.p3.report.render"), { id: "abc", capability: "pdf", priority: 3, type: "report.render" });
  assert.equal(parseDispatch("ax.task.abc.e"), undefined);
  assert.deepEqual(parseAck("$JS.ACK.AX_TASKS.ax-ready-default-p2.3.118.40.1700000000000000000.0"), {
    stream: "AX_TASKS",
    consumer: "ax-ready-default-p2",
    delivered: 3,
    streamSeq: 118,
  });
  assert.equal(parseAck("$JS.ACK._.hash.AX_TASKS.c.4.5.6.7.8.tok")?.streamSeq, 5);
  assert.equal(parseAck("_INBOX.x"), undefined);
});

test("handler errors map to outcomes as the Go executor's", () => {
  const r = (): Report => ({ id: "a", type: "t", execution_id: "e", attempt: 1, status: "succeeded", executor: "x", started_at: "", finished_at: "" });
  let x = r();
  setOutcome(x, new Error("boom"));
  assert.deepEqual([x.status, x.error, x.permanent, x.retry_after], ["failed", "boom", undefined, undefined]);
  x = r();
  setOutcome(x, new Error("wrapped", { cause: new PermanentError("bad") }));
  assert.deepEqual([x.status, x.error, x.permanent], ["failed", "wrapped", true]);
  x = r();
  setOutcome(x, new RetryAfterError(1500, "429"));
  assert.deepEqual([x.status, x.error, x.retry_after], ["failed", "429", "1500ms"]);
  x = r();
  setOutcome(x, new SnoozeError(200));
  assert.deepEqual([x.status, x.error, x.retry_after], ["snoozed", undefined, "200ms"]);
  x = r();
  setOutcome(x, new CancelError("withdrawn"));
  assert.deepEqual([x.status, x.error], ["cancelled", "withdrawn"]);
  x = r();
  setOutcome(x, "a string");
  assert.deepEqual([x.status, x.error], ["failed", "a string"]);
});

test("weighted priority picks follow the weights, smoothly, as internal/swrr's", () => {
  const weights = [40, 25, 15, 10, 6, 4];
  const p = new Picker(weights);
  const counts = weights.map(() => 0);
  for (let i = 0; i < 1000; i++) counts[p.next(() => true)]! += 1;
  assert.deepEqual(counts, weights.map((w) => w * 10));
  const q = new Picker([5, 1, 1]);
  assert.deepEqual([...Array(7)].map(() => q.next(() => true)), [0, 0, 1, 0, 2, 0, 0]);
  const r = new Picker(weights);
  assert.equal(r.next((i) => i === 5), 5);
  assert.equal(r.next(() => false), -1);
});

test("timers longer than setTimeout's limit do not fire at once", async () => {
  let fired = false;
  const cancel = after(30 * 24 * 3600 * 1000, () => (fired = true));
  await new Promise((r) => setTimeout(r, 20));
  cancel();
  assert.equal(fired, false);
  await new Promise<void>((r) => after(5, r));
});

test("cancel_on is checked as the Go side checks it, in its words", () => {
  const spec = (cancel_on: unknown) => ({ id: "a", type: "b", cancel_on }) as Parameters<typeof toWire>[0];
  assert.deepEqual(toWire(spec({ subject: "order.cancelled", match: "o-42" })).cancel_on, { subject: "order.cancelled", match: "o-42" });
  const refused = (c: unknown, msg: string) =>
    assert.throws(
      () => toWire(spec(c)),
      (e: unknown) => e instanceof InvalidSpecError && e.field === "cancel_on" && e.message === `invalid task a: cancel_on: ${msg}`,
    );
  refused({ subject: "pay ment", match: "x" }, `subject "pay ment" is not 1-7 dot-separated tokens of [A-Za-z0-9_-]`);
  refused({ subject: "order", match: "x.y" }, `match "x.y" is not one token of 1-128 of [A-Za-z0-9_-]`);
  refused("order.x", "is not an object {subject, match}");
});

test("wait_for is checked as the Go side checks it, in its words", () => {
  const spec = (wait_for: unknown) => ({ id: "a", type: "b", wait_for }) as Parameters<typeof toWire>[0];
  assert.deepEqual(toWire(spec({ subject: "payment.received", match: "order-42", timeout: 90_000 })).wait_for, {
    subject: "payment.received",
    match: "order-42",
    timeout: "90000ms",
  });
  assert.deepEqual(toWire(spec({ subject: "payment", match: "o1", timeout: "1h" })).wait_for, { subject: "payment", match: "o1", timeout: "1h" });
  // The messages of task/event.go's validateWaitFor (go test ./task prints the same).
  const refused = (w: unknown, msg: string) =>
    assert.throws(
      () => toWire(spec(w)),
      (e: unknown) => e instanceof InvalidSpecError && e.field === "wait_for" && e.message === `invalid task a: wait_for: ${msg}`,
    );
  refused({ subject: "pay ment", match: "x", timeout: "1s" }, `subject "pay ment" is not 1-7 dot-separated tokens of [A-Za-z0-9_-]`);
  refused({ subject: "a.b.c.d.e.f.g.h", match: "x", timeout: "1s" }, `subject "a.b.c.d.e.f.g.h" is not 1-7 dot-separated tokens of [A-Za-z0-9_-]`);
  refused({ subject: "payment", match: "x.y", timeout: "1s" }, `match "x.y" is not one token of 1-128 of [A-Za-z0-9_-]`);
  refused({ subject: "payment", match: "x", timeout: 0 }, "timeout 0s is out of range (0, 8784h0m0s]");
  refused({ subject: "payment", match: "x", timeout: "8808h" }, "timeout 8808h0m0s is out of range (0, 8784h0m0s]");
  assert.throws(
    () => toWire({ id: "a", type: "b", shardable: true, wait_for: { subject: "p", match: "x", timeout: "1s" } }),
    /wait_for: an event task is not shardable/,
  );
  assert.ok(validEventSubject("payment.o1"));
  assert.ok(!validEventSubject("payment"));
  assert.ok(!validEventSubject("a.b.c.d.e.f.g.h.i"));
});

test("step names, object names and sleeps match the Go side", () => {
  // go: task.StepObjectName("t1", "e1", "render")
  assert.equal(stepObjectName("t1", "e1", "render"), "steps/t1/e1/887270d0cbc560af35f1326d55e9dbdc");
  assert.equal(validateStepName("charge"), undefined);
  assert.equal(validateStepName("ax:mine"), `step name "ax:mine" starts with "ax:", which AX reserves (its sleeps)`);
  assert.equal(validateStepName(""), "a step needs a name");
  assert.match(validateStepName("a\u0001") ?? "", /holds a control character/);
  assert.match(validateStepName("\ud800") ?? "", /is not UTF-8/);
  assert.match(validateStepName("é".repeat(65)) ?? "", /is 130 bytes; the limit is 128/);
  assert.equal(validateStepName("ax:sleep:1", true), undefined);
  assert.equal(goDurationString(300), "300ms");
  assert.equal(goDurationString(90_500), "1m30.5s");
  const r: Report = { id: "a", type: "b", execution_id: "e", attempt: 1, status: "succeeded", executor: "x", started_at: "", finished_at: "" };
  setOutcome(r, new Error("wrapped", { cause: new SleepError("ax:sleep:2", 1500) }));
  assert.equal(r.status, "sleeping");
  assert.equal(r.step, "ax:sleep:2");
  assert.equal(r.retry_after, "1500ms");
  assert.equal(r.error, undefined);
});
