// http-queue's logic under Node: config checks, ids that would climb out
// of their URL, base64 both ways.
import assert from "node:assert/strict";
import { test } from "node:test";

import { configure, decodeContent, encodeContent, messageUrl, saysUnavailable, toReceived, transient } from "./queue.js";

const settings = configure('{"url": "http://q.test/v1/queues/orders/messages/", "token": "k"}');

test("a config is checked and names the key", () => {
  assert.equal(settings.url, "http://q.test/v1/queues/orders/messages");
  assert.throws(() => configure('{"url": "ftp://x"}'), /^url:/);
  assert.throws(() => configure('{"url": "http://x", "extra": 1}'), /unknown key "extra"/);
  assert.throws(() => configure("not json"), /not valid JSON/);
});

test("a message id is one path segment of its own queue", () => {
  assert.equal(messageUrl(settings, "m-1"), "http://q.test/v1/queues/orders/messages/m-1");
  assert.equal(
    messageUrl(settings, "../../other/messages/victim"),
    "http://q.test/v1/queues/orders/messages/..%2F..%2Fother%2Fmessages%2Fvictim",
  );
  for (const id of ["", ".", ".."]) assert.throws(() => messageUrl(settings, id), /names no message/);
  assert.equal(toReceived(settings, { id: "..", content: "" }), null, "left on the queue");
});

test("content is base64 both ways", () => {
  const bytes = new Uint8Array([0, 255, 16, 104, 105]);
  assert.deepEqual(decodeContent(encodeContent(bytes)), bytes);
  assert.deepEqual(decodeContent("not base64!"), new TextEncoder().encode("not base64!"));
  const r = toReceived(settings, { id: "m-2", content: btoa("hi"), created_at: 1700000000000 });
  assert.equal(r.token, "m-2");
  assert.equal(r.message.createdAt, 1700000000000n);
  assert.deepEqual(r.message.payload, new TextEncoder().encode("hi"));
});

test("a queue that takes nothing now is unavailable; one that failed a message is not", () => {
  for (const status of [408, 429, 502, 503, 504]) {
    assert.ok(transient(status) && saysUnavailable(status), `${status}`);
  }
  assert.ok(transient(500) && !saysUnavailable(500));
  assert.ok(!transient(400) && !saysUnavailable(400));
});
