import { createHash } from "node:crypto";
import type { JetStreamClient } from "@nats-io/jetstream";
import { Objm, type ObjectStore } from "@nats-io/obj";
import { sleep } from "./util.js";

/** The legacy object store, read for references that name no store. */
export const LEGACY_OBJECTS = "AX_OBJECTS";

/** An object's digest as the contract writes it: `SHA-256=` and the padded base64url of its SHA-256. */
export function digest(data: Uint8Array): string {
  return "SHA-256=" + createHash("sha256").update(data).digest("base64url") + "=";
}

/** A large result's bytes did not match the digest its executor reported. */
export class DigestMismatchError extends Error {
  constructor(name: string, bucket: string, want: string, got: string) {
    super(`object ${name} in ${bucket}: digest mismatch: recorded ${want}, read ${got}`);
    this.name = "DigestMismatchError";
  }
}

/** The object stores of plans and large results, each bound when first used. */
export class Objects {
  private readonly stores = new Map<string, Promise<ObjectStore>>();
  private readonly objm: Objm;
  constructor(js: JetStreamClient) {
    this.objm = new Objm(js);
  }

  private bind(bucket: string): Promise<ObjectStore> {
    let p = this.stores.get(bucket);
    if (!p) {
      p = this.objm.open(bucket);
      p.catch(() => this.stores.delete(bucket));
      this.stores.set(bucket, p);
    }
    return p;
  }

  /**
   * Stores an object and returns its digest, riding out a NATS outage for
   * up to patienceMs (an infrastructure error is not the handler's failure).
   */
  async put(bucket: string, name: string, data: Uint8Array, patienceMs = 30_000): Promise<string> {
    const until = Date.now() + patienceMs;
    let wait = 100;
    for (;;) {
      try {
        const os = await this.bind(bucket);
        await os.putBlob({ name }, data);
        return digest(data);
      } catch (e) {
        if (Date.now() + wait > until) throw new Error(`put object ${name} in ${bucket}: ${String(e)}`, { cause: e });
        await sleep(wait);
        wait = Math.min(wait * 2, 2000);
      }
    }
  }

  /** Reads an object (an empty bucket: the legacy store) and checks it against its digest (when one was recorded). */
  async get(bucket: string | undefined, name: string, want: string | undefined): Promise<Uint8Array> {
    const b = bucket || LEGACY_OBJECTS;
    const os = await this.bind(b);
    const data = await os.getBlob(name);
    if (!data) throw new Error(`object ${name} in ${b}: not found`);
    if (want) {
      const got = digest(data);
      if (got !== want) throw new DigestMismatchError(name, b, want, got);
    }
    return data;
  }
}
