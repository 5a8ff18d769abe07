import { readFileSync } from "node:fs";
import { connect, credsAuthenticator, type NatsConnection, type NodeConnectionOptions } from "@nats-io/transport-node";

/** How to reach NATS: a server URL (or several) and optionally a credentials file. */
export interface ConnectOptions {
  /** Server URL(s), e.g. "nats://127.0.0.1:4222". */
  servers: string | string[];
  /** A `.creds` file (user JWT and seed), as `ax nats-accounts` writes. */
  credsFile?: string;
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
    ...o.nats,
  };
  if (o.credsFile) opts.authenticator = credsAuthenticator(readFileSync(o.credsFile));
  return connect(opts);
}
