import { readFileSync } from "node:fs";
import { connect, createInbox, credsAuthenticator, type NatsConnection, type NodeConnectionOptions } from "@nats-io/transport-node";

/** How to reach NATS: a server URL (or several) and optionally a credentials file. */
export interface ConnectOptions {
  /** Server URL(s), e.g. "nats://127.0.0.1:4222". */
  servers: string | string[];
  /** A `.creds` file (user JWT and seed). */
  credsFile?: string;
  /** A user and password (the users of `ax nats-accounts`). */
  user?: string;
  pass?: string;
  /**
   * The prefix of reply inboxes instead of `_INBOX`: `_INBOX.<user>` for a
   * user of `ax nats-accounts`, who may subscribe only to its own.
   */
  inboxPrefix?: string;
  /** A name for the connection, shown by the server. */
  name?: string;
  /** Other options passed to @nats-io/transport-node's connect. */
  nats?: Partial<NodeConnectionOptions>;
}

/** Opens a NATS connection that reconnects forever. */
export async function dial(o: ConnectOptions): Promise<NatsConnection> {
  const opts: NodeConnectionOptions = {
    servers: o.servers,
    maxReconnectAttempts: -1,
    reconnectTimeWait: 250,
    ...(o.name ? { name: o.name } : {}),
    ...(o.user ? { user: o.user, pass: o.pass ?? "" } : {}),
    ...(o.inboxPrefix ? { inboxPrefix: o.inboxPrefix } : {}),
    ...o.nats,
  };
  if (o.credsFile) opts.authenticator = credsAuthenticator(readFileSync(o.credsFile));
  return connect(opts);
}

/** A new reply inbox under the connection's inbox prefix. */
export function inbox(nc: NatsConnection): string {
  return createInbox((nc as NatsConnection & { options?: { inboxPrefix?: string } }).options?.inboxPrefix);
}
