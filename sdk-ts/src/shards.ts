import type { Handler, Job } from "./executor.js";
import type { TaskState } from "./wire.js";

/** A shard a planner returns: its payload and optional overrides of the parent's routing. */
export interface Shard<S = unknown> {
  /** The shard's own payload (any JSON). */
  payload?: S;
  /** Overrides the parent's priority. */
  priority?: number;
  /** Overrides the parent's capability. */
  capability?: string;
  /** The shard's weight against an executor's capacity (default 1). */
  estimated_cost?: number;
}

/** How one shard ended (its fan-in marker, `ax.fanin.<parent>.<index>.<state>`). */
export interface ShardOutcome<R = unknown> {
  index: number;
  id: string;
  state: TaskState;
  result?: R;
  result_object?: string;
  error?: string;
  result_bucket?: string;
  result_digest?: string;
}

/** Every shard's outcome, sorted by index, for an aggregator. */
export interface ShardOutcomes<R = unknown> {
  readonly shards: ShardOutcome<R>[];
  /** How many succeeded. */
  readonly succeeded: number;
  /** The shards that did not succeed. */
  failed(): ShardOutcome<R>[];
  /** Shard i's result, read from the object store when it was over 16 KiB (digest checked). */
  result(i: number): Promise<R | undefined>;
}

/**
 * The three steps of a shardable task type (a spec with `shardable: true`):
 * `plan` runs first and returns the shards; each shard runs as a child
 * task `<id>/shard/<n>` with `shard`; the optional `aggregate` runs over
 * their outcomes once they ended (without it the parent succeeds with a
 * summary `{"shards", "succeeded", "not_succeeded"}`).
 */
export interface Sharded<P = unknown, S = unknown, R = unknown, A = unknown> {
  plan: (job: Job<P>) => Shard<S>[] | Promise<Shard<S>[]>;
  shard: Handler<S, R>;
  aggregate?: (job: Job<P>, shards: ShardOutcomes<R>) => A | Promise<A>;
}

/** The most shards one plan may hold (task.MaxShards). */
export const MAX_SHARDS = 100_000;
