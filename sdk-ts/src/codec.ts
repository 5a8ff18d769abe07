import { createCipheriv, createDecipheriv, randomBytes } from "node:crypto";

/**
 * Encodes task payloads before they are submitted and decodes them before
 * a handler sees them (subjects.md, "Encoded payloads"): the orchestrator,
 * the mirror and the console only ever see the encoded form. Producers and
 * executors of a task type must use the same codec (the same keys).
 */
export interface Codec {
  /** Encodes a payload's JSON bytes into JSON bytes. */
  encode(payload: Uint8Array): Uint8Array;
  /** Decodes what encode wrote; throws a CodecError when it cannot. */
  decode(encoded: Uint8Array): Uint8Array;
}

/** Why a payload could not be decoded. */
export class CodecError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "CodecError";
  }
}

/** An AES-256 key: its id (1–64 of [A-Za-z0-9_.-], not secret) and 32-byte secret. */
export interface Key {
  id: string;
  secret: Uint8Array;
}

const NAME = "aes256gcm";
const NONCE = 12;
const TAG = 16;

/**
 * The AES-256-GCM codec, interoperable with Go's codec.NewAESGCM: it
 * writes `{"ax_codec":"aes256gcm","key":"<id>","data":"<base64 of nonce,
 * ciphertext and tag>"}` with the additional data `aes256gcm:<id>`,
 * encrypts with the current key and decrypts with any key it holds
 * (rotation).
 */
export class AESGCM implements Codec {
  private readonly keys = new Map<string, Uint8Array>();
  private readonly current: string;

  constructor(current: Key, ...previous: Key[]) {
    for (const k of [current, ...previous]) {
      if (!/^[A-Za-z0-9_.-]{1,64}$/.test(k.id)) throw new CodecError(`key id ${JSON.stringify(k.id)}: want 1–64 of letters, digits, '_', '-' and '.'`);
      if (this.keys.has(k.id)) throw new CodecError(`key id ${JSON.stringify(k.id)} given twice`);
      if (k.secret.length !== 32) throw new CodecError(`key ${JSON.stringify(k.id)}: secret is ${k.secret.length} bytes, want 32`);
      this.keys.set(k.id, k.secret);
    }
    this.current = current.id;
  }

  /** Reads keys in the form of Go's codec.ParseKeys: one "<key id> <base64 secret>" per line; the first is current. */
  static fromKeyFile(text: string): AESGCM {
    const keys: Key[] = [];
    for (const raw of text.split("\n")) {
      const line = raw.trim();
      if (!line || line.startsWith("#")) continue;
      const [id, secret, extra] = line.split(/\s+/);
      if (!id || !secret || extra !== undefined) throw new CodecError(`key file line ${JSON.stringify(line)}: want "<key id> <base64 secret>"`);
      keys.push({ id, secret: Buffer.from(secret, "base64") });
    }
    if (keys.length === 0) throw new CodecError("key file holds no key");
    return new AESGCM(keys[0] as Key, ...keys.slice(1));
  }

  encode(payload: Uint8Array): Uint8Array {
    const nonce = randomBytes(NONCE);
    const c = createCipheriv("aes-256-gcm", this.keys.get(this.current) as Uint8Array, nonce);
    c.setAAD(Buffer.from(`${NAME}:${this.current}`));
    const sealed = Buffer.concat([nonce, c.update(payload), c.final(), c.getAuthTag()]);
    return Buffer.from(JSON.stringify({ ax_codec: NAME, key: this.current, data: sealed.toString("base64") }));
  }

  decode(encoded: Uint8Array): Uint8Array {
    let env: { ax_codec?: unknown; key?: unknown; data?: unknown };
    try {
      env = JSON.parse(Buffer.from(encoded).toString()) as typeof env;
    } catch {
      throw new CodecError("payload is not encoded: want a JSON object with \"ax_codec\"");
    }
    if (typeof env !== "object" || env === null || !("ax_codec" in env)) throw new CodecError("payload is not encoded: the object has no \"ax_codec\" member");
    if (env.ax_codec !== NAME) throw new CodecError(`payload is not encoded: encoded by codec ${JSON.stringify(env.ax_codec)}, not ${NAME}`);
    if (typeof env.key !== "string" || env.key === "" || typeof env.data !== "string") throw new CodecError(`${NAME} envelope is malformed`);
    const secret = this.keys.get(env.key);
    if (!secret) throw new CodecError(`payload encrypted with an unknown key: key ${JSON.stringify(env.key)} (this codec holds ${[...this.keys.keys()].sort().join(", ")})`);
    const sealed = Buffer.from(env.data, "base64");
    if (sealed.length < NONCE + TAG) throw new CodecError(`${NAME} data is ${sealed.length} bytes, shorter than a nonce and a tag`);
    try {
      const d = createDecipheriv("aes-256-gcm", secret, sealed.subarray(0, NONCE));
      d.setAAD(Buffer.from(`${NAME}:${env.key}`));
      d.setAuthTag(sealed.subarray(sealed.length - TAG));
      return Buffer.concat([d.update(sealed.subarray(NONCE, sealed.length - TAG)), d.final()]);
    } catch {
      throw new CodecError(`payload does not decrypt with key ${JSON.stringify(env.key)} (a different secret under that id, or an altered payload)`);
    }
  }
}

/** Wraps a codec so payloads submitted in clear (no "ax_codec" member) pass through decode unchanged. */
export function acceptClear(c: Codec): Codec {
  return {
    encode: (p) => c.encode(p),
    decode: (e) => (isEncodedJSON(e) ? c.decode(e) : e),
    acceptsClear: true,
  } as Codec;
}

/** Reports whether a codec passes payloads in clear through decode (acceptClear). */
export function acceptsClear(c: Codec): boolean {
  return (c as Codec & { acceptsClear?: boolean }).acceptsClear === true;
}

/** Reports whether JSON bytes are an object with an "ax_codec" member (an encoded payload). */
export function isEncodedJSON(data: Uint8Array): boolean {
  try {
    const v = JSON.parse(Buffer.from(data).toString()) as unknown;
    return typeof v === "object" && v !== null && !Array.isArray(v) && "ax_codec" in v;
  } catch {
    return false;
  }
}
