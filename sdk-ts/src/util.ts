import { randomBytes } from "node:crypto";
import type { DurationInput, GoDuration } from "./wire.js";

const UNITS: Record<string, number> = {
  ns: 1e-6,
  us: 1e-3,
  "µs": 1e-3,
  "μs": 1e-3,
  ms: 1,
  s: 1000,
  m: 60_000,
  h: 3_600_000,
};

const parsed = new Map<string, number>();

/** Parses a Go duration string ("1m30s", "500ms", "0s") into milliseconds. */
export function parseDuration(s: GoDuration): number {
  let ms = parsed.get(s);
  if (ms === undefined) {
    ms = parseDurationUncached(s);
    if (parsed.size < 1024) parsed.set(s, ms);
  }
  return ms;
}

function parseDurationUncached(s: GoDuration): number {
  if (s === "0") return 0;
  const re = /([0-9]*\.?[0-9]+)(ns|us|µs|μs|ms|s|m|h)/gy;
  let sign = 1;
  let rest = s;
  if (rest.startsWith("-")) {
    sign = -1;
    rest = rest.slice(1);
  } else if (rest.startsWith("+")) {
    rest = rest.slice(1);
  }
  if (rest === "") throw new Error(`invalid duration ${JSON.stringify(s)}`);
  let total = 0;
  let pos = 0;
  re.lastIndex = 0;
  while (pos < rest.length) {
    const m = re.exec(rest);
    if (!m || m.index !== pos) throw new Error(`invalid duration ${JSON.stringify(s)}`);
    total += Number(m[1]) * (UNITS[m[2] as string] as number);
    pos = re.lastIndex;
  }
  return sign * total;
}

/** Formats milliseconds as a Go duration string Go's time.ParseDuration reads. */
export function formatDuration(ms: number): GoDuration {
  if (!Number.isFinite(ms)) throw new Error(`invalid duration ${ms}`);
  if (ms === 0) return "0s";
  if (Number.isInteger(ms)) return `${ms}ms`;
  return `${Math.round(ms * 1e6)}ns`;
}

/** Converts a duration given to the SDK to a Go duration string (validated). */
export function toGoDuration(d: DurationInput): GoDuration {
  if (typeof d === "number") return formatDuration(d);
  parseDuration(d);
  return d;
}

/** Converts a duration given to the SDK to milliseconds. */
export function toMillis(d: DurationInput): number {
  return typeof d === "number" ? d : parseDuration(d);
}

const CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/** Returns a new ULID: a sortable unique id, as the Go SDK generates for empty task ids. */
export function newID(now: number = Date.now()): string {
  let ts = "";
  let t = now;
  for (let i = 0; i < 10; i++) {
    ts = (CROCKFORD[t % 32] as string) + ts;
    t = Math.floor(t / 32);
  }
  const rnd = randomBytes(16);
  let r = "";
  for (let i = 0; i < 16; i++) r += CROCKFORD[(rnd[i] as number) % 32];
  return ts + r;
}

/** The 64-bit FNV-1a hash of bytes, as an unsigned bigint. */
export function fnv1a64(data: Uint8Array): bigint {
  let h = 0xcbf29ce484222325n;
  const prime = 0x100000001b3n;
  for (const b of data) {
    h ^= BigInt(b);
    h = (h * prime) & 0xffffffffffffffffn;
  }
  return h;
}

/** Sleeps ms milliseconds, or until signal aborts (then it resolves early). */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const t = setTimeout(done, ms);
    function done() {
      clearTimeout(t);
      signal?.removeEventListener("abort", done);
      resolve();
    }
    signal?.addEventListener("abort", done, { once: true });
  });
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** Encodes a value as JSON bytes. */
export function jsonBytes(v: unknown): Uint8Array {
  return encoder.encode(JSON.stringify(v));
}

/** Decodes JSON bytes. */
export function parseJSON<T>(data: Uint8Array): T {
  return JSON.parse(decoder.decode(data)) as T;
}

/** UTF-8 bytes of a string. */
export function utf8(s: string): Uint8Array {
  return encoder.encode(s);
}

/** Truncates an error text to at most 4096 bytes, as task.TruncateError does. */
export function truncateError(s: string): string {
  const max = 4096;
  const b = encoder.encode(s);
  if (b.length <= max) return s;
  const suffix = `… (truncated; ${b.length} bytes in all)`;
  let cut = max - encoder.encode(suffix).length;
  // Back up to a UTF-8 rune start.
  while (cut > 0 && ((b[cut] as number) & 0xc0) === 0x80) cut--;
  return decoder.decode(b.subarray(0, cut)) + suffix;
}

/** The longest delay setTimeout takes; a longer one fires at once. */
const MAX_TIMER = 2 ** 31 - 1;

/**
 * Calls fn after ms (any length: a delay beyond setTimeout's 24.8 days is
 * waited in steps); the returned function cancels it.
 */
export function after(ms: number, fn: () => void): () => void {
  let t: NodeJS.Timeout | undefined;
  const arm = (left: number) => {
    t = setTimeout(() => (left > MAX_TIMER ? arm(left - MAX_TIMER) : fn()), Math.max(0, Math.min(left, MAX_TIMER)));
  };
  arm(ms);
  return () => clearTimeout(t);
}
