/**
 * AX for TypeScript: a producer (Client) and an executor (Executor) that
 * speak AX's wire contract (subjects.md) over NATS JetStream.
 */
export { Client, StateReadError, WaitTimeoutError, msgID, type CallOptions } from "./client.js";
export { AESGCM, CodecError, acceptClear, isEncodedJSON, type Codec, type Key } from "./codec.js";
export { dial, type ConnectOptions } from "./conn.js";
export {
  AttemptLostError,
  CancelError,
  CommandRefusedError,
  InvalidSpecError,
  NoTopologyError,
  NotFoundError,
  PermanentError,
  RejectedError,
  RetryAfterError,
  SleepError,
  SnoozeError,
} from "./errors.js";
export {
  DEFAULT_WEIGHTS,
  Executor,
  INLINE_RESULT_LIMIT,
  setOutcome,
  type AttemptMetrics,
  type ExecutorOptions,
  type Handler,
  type Job,
  type LogLevel,
} from "./executor.js";
export { DigestMismatchError, digest } from "./objects.js";
export { MAX_SHARDS, type Shard, type ShardOutcome, type ShardOutcomes, type Sharded } from "./shards.js";
export {
  MAX_SLEEP_MS,
  MAX_STEP_NAME_BYTES,
  MAX_STEP_RESULT,
  MAX_STEPS,
  STEP_INLINE_LIMIT,
  STEPS_INLINE_TOTAL,
  sleepName,
  stepObjectName,
  validateStepName,
} from "./steps.js";
export { MAX_EVENT_DATA, validEventSubject, toWire, validCapability, validID, validType, type EventCancel, type EventWait, type TaskSpec } from "./spec.js";
export { formatDuration, newID, parseDuration } from "./util.js";
export * from "./wire.js";
