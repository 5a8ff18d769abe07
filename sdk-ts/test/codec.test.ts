import { test } from "node:test";
import assert from "node:assert/strict";
import { AESGCM, CodecError, acceptClear } from "../src/index.js";

const secret = Uint8Array.from({ length: 32 }, (_, i) => i + 1);
const text = (b: Uint8Array) => Buffer.from(b).toString();

test("AES-256-GCM decodes what Go's codec.NewAESGCM wrote", () => {
  // Written by Go: codec.NewAESGCM(codec.Key{ID: "k1", Secret: 1…32}).Encode(`{"a":1,"s":"é"}`).
  const fromGo = '{"ax_codec":"aes256gcm","key":"k1","data":"FosfrlYlcPxVRBvg9QaeDcE2HZwQYXC3ddQdWrbqRoE5gtXIhIg5R6p/e14="}';
  assert.equal(text(new AESGCM({ id: "k1", secret }).decode(Buffer.from(fromGo))), '{"a":1,"s":"é"}');
});

test("AES-256-GCM round-trips, rotates keys and refuses what it must", () => {
  const old = new AESGCM({ id: "k1", secret });
  const enc = old.encode(Buffer.from('{"x":[1,2]}'));
  const env = JSON.parse(text(enc)) as { ax_codec: string; key: string; data: string };
  assert.deepEqual([env.ax_codec, env.key], ["aes256gcm", "k1"]);
  const rotated = new AESGCM({ id: "k2", secret: new Uint8Array(32).fill(9) }, { id: "k1", secret });
  assert.equal(text(rotated.decode(enc)), '{"x":[1,2]}');
  assert.equal(JSON.parse(text(rotated.encode(Buffer.from("1")))).key, "k2");
  const tampered = Buffer.from(JSON.stringify({ ...env, key: "k2" }));
  assert.throws(() => rotated.decode(tampered), (e: unknown) => e instanceof CodecError && /does not decrypt/.test(e.message));
  assert.throws(() => new AESGCM({ id: "k3", secret }).decode(enc), /unknown key/);
  assert.throws(() => old.decode(Buffer.from('{"a":1}')), /not encoded/);
  assert.equal(text(acceptClear(old).decode(Buffer.from('{"a":1}'))), '{"a":1}');
  assert.equal(text(AESGCM.fromKeyFile(`# keys\nk1 ${Buffer.from(secret).toString("base64")}\n`).decode(enc)), '{"x":[1,2]}');
  assert.throws(() => new AESGCM({ id: "bad id", secret }), CodecError);
});
