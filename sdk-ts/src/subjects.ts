/** Subject, stream and header names of the wire contract (subjects.md). */
import { fnv1a64, utf8 } from "./util.js";

export const STREAM_TASKS = "AX_TASKS";
export const STREAM_SUBMIT = "AX_SUBMIT";
export const BUCKET_REVOKED = "AX_REVOKED";
export const HEADER_TOKEN = "Ax-Token";
export const HEADER_REPLY_TO = "Ax-Reply-To";
export const HEADER_MSG_ID = "Nats-Msg-Id";
export const HEADER_TTL = "Nats-TTL";

/** Number of priority levels (p0 … p5). */
export const LEVELS = 6;

export const submitLane = (priority: number, type: string) => `task.submit-p${priority}.${type}`;
export const submitUnlaned = (type: string) => `task.submit.${type}`;
export const GRAPH_SUBMIT = "task.graph.submit";
export const completed = (type: string) => `task.completed.${type}`;
export const direct = (subj: string) => `ax.direct.${subj}`;
export const directBatch = (subj: string) => `ax.direct.batch.${subj}`;
export const directTo = (node: string, d: string) => `ax.direct-to.${node}.${d}`;
export const state = (id: string, type: string) => `ax.state.${id}.${type}`;
export const command = (kind: string, id: string) => `ax.cmd.${kind}.${id}`;
export const commandAs = (caller: string, kind: string, id: string) => `ax.cmd.as.${caller}.${kind}.${id}`;
export const taskHistory = (id: string) => `ax.task.${id}.>`;
export const readyConsumer = (capability: string, p: number) => `ax-ready-${capability}-p${p}`;
export const dispatchFilter = (capability: string, p: number) => `ax.task.*.d.${capability}.p${p}.>`;
export const claim = (capability: string) => `ax.claim.${capability}`;
export const inputs = (capability: string) => `ax.inputs.${capability}`;
export const lease = (capability: string, id: string) => `ax.lease.${capability}.${id}`;
export const bell = (capability: string, p: number) => `ax.bell.${capability}.p${p}`;
export const bellCapability = (capability: string) => `ax.bell.${capability}.*`;
export const revokedCapability = (capability: string) => `${capability}.>`;
export const objectBucket = (capability: string) => `AX_OBJECTS_${capability}`;
export const event = (eventSubject: string) => `ax.event.${eventSubject}`;
export const resultObjectName = (id: string, executionID: string) => `results/${id}/${executionID}`;

/** The level a doorbell subject names, or -1. */
export function bellLevel(subj: string): number {
  const i = subj.lastIndexOf(".p");
  if (i < 0) return -1;
  const n = Number(subj.slice(i + 2));
  return Number.isInteger(n) && n >= 0 && n < LEVELS ? n : -1;
}

/** The parts of a dispatch subject `ax.task.<id>.d.<capability>.p<N>.<type>`, or undefined. */
export function parseDispatch(
  subj: string,
): { id: string; capability: string; priority: number; type: string } | undefined {
  if (!subj.startsWith("ax.task.")) return undefined;
  const rest = subj.slice("ax.task.".length);
  const d = rest.indexOf(".d.");
  if (d <= 0) return undefined;
  const id = rest.slice(0, d);
  const parts = rest.slice(d + 3).split(".");
  if (parts.length < 3) return undefined;
  const capability = parts[0] as string;
  const p = parts[1] as string;
  if (!/^p[0-5]$/.test(p)) return undefined;
  return { id, capability, priority: Number(p.slice(1)), type: parts.slice(2).join(".") };
}

/**
 * The subject token naming an orchestrator node (`ax.direct-to.<node>.…`):
 * the node id itself when it is a plain token of at most 64 bytes, else
 * `n` and the 16 hex digits of its FNV-1a 64 hash.
 */
export function nodeToken(node: string): string {
  if (node.length > 0 && node.length <= 64 && /^[A-Za-z0-9_-]+$/.test(node)) return node;
  return "n" + fnv1a64(utf8(node)).toString(16).padStart(16, "0");
}
