// Package audit answers operators' questions from the MySQL audit mirror
// (see internal/mirror): a task's full timeline, why a task is still
// waiting, which failures happened, which tasks are stuck, how often each
// task type retries or dead-letters, and how the shards of a sharded task
// went. It only reads; the mirror may lag JetStream by a little, so answers
// are as of the last mirrored event.
package audit
