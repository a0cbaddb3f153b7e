// The first test of {{name}}: its logic on a stand-in message, no host.
import assert from "node:assert/strict";
import { test } from "node:test";

import { configure, decide } from "./logic.js";

function message(headers) {
  return {
    headers: { ...headers },
    header(name) {
      return this.headers[name];
    },
    setHeader(name, value) {
      this.headers[name] = value;
    },
  };
}

test("stamps and drops", () => {
  const settings = configure('{"drop_kind": "noise"}');
  const msg = message({ kind: { tag: "text", val: "reading" } });
  assert.deepEqual(decide(settings, msg), { tag: "pass" });
  assert.deepEqual(msg.headers["processed-by"], { tag: "text", val: "{{name}}" });
  assert.equal(decide(settings, message({ kind: { tag: "text", val: "noise" } })).tag, "drop");
});

test("a bad config names the key", () => {
  assert.throws(() => configure('{"header": 3}'), /^header:/);
});
