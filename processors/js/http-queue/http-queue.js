// http-queue: a ferry transport component written in JavaScript
// (componentize-js, world `transport`): a receiver and a sender for an
// HTTP polling queue, the shape SimpleMQ's API and many in-house queues
// have:
//
// - receive: `GET {url}` answers `{"messages": [{"id", "content"}]}`
//   (content in base64); each message stays invisible for the queue's
//   timeout;
// - acknowledge: `DELETE {url}/{id}`; a release leaves it to come back;
// - send: `POST {url}` with `{"content": "<base64>"}`.
//
// Config (a `type = "component"` receiver's or sender's `config`):
//
//   [receivers.orders]
//   type = "component"
//   component = "http-queue"
//   allow_hosts = ["queue.internal:443"]
//   config = { url = "https://queue.internal/v1/queues/orders/messages", token = "${QUEUE_TOKEN}" }
//
// Build with `npm run build` (writes http-queue.wasm); `npm test` runs the
// logic under Node.

import { targetUnavailable } from "ferry:plugin/host@1.3.0";
import { configure, encodeContent, messageUrl, requestHeaders, saysUnavailable, toReceived, transient } from "./queue.js";

let receiving = null;
let sending = null;

function opened(settings) {
  if (settings === null) throw "called before open";
  return settings;
}

export const receiver = {
  open(config) {
    receiving = configure(config);
    // A token is the message id: any instance can delete it.
    return { extendEveryMs: undefined, settleAnywhere: true };
  },

  async poll(max, _waitMs) {
    const settings = opened(receiving);
    const taken = [];
    while (taken.length < max) {
      let answer;
      try {
        answer = await fetch(settings.url, { headers: requestHeaders(settings, false) });
      } catch (e) {
        if (taken.length > 0) break; // what was taken is handed over
        throw `GET ${settings.url}: ${e}`;
      }
      if (!answer.ok) {
        if (taken.length > 0) break;
        throw `GET ${settings.url} answered ${answer.status}`;
      }
      const doc = await answer.json();
      const messages = Array.isArray(doc?.messages) ? doc.messages : [];
      if (messages.length === 0) break;
      for (const m of messages.slice(0, max - taken.length)) {
        const received = toReceived(settings, m);
        if (received !== null) taken.push(received);
      }
    }
    return taken;
  },

  async settle(token, settlement) {
    const settings = opened(receiving);
    if (settlement.tag === "release") return; // back after the queue's timeout
    const answer = await fetch(messageUrl(settings, token), {
      method: "DELETE",
      headers: requestHeaders(settings, false),
    });
    if (!answer.ok && answer.status !== 404) throw `DELETE answered ${answer.status}`;
  },

  extend(_tokens) {},
};

export const sender = {
  open(config) {
    sending = configure(config);
  },

  async send(batch) {
    const settings = opened(sending);
    const results = [];
    for (const out of batch) {
      const body = JSON.stringify({ content: encodeContent(out.message.payload) });
      try {
        const answer = await fetch(settings.url, {
          method: "POST",
          headers: requestHeaders(settings, true),
          body,
        });
        if (answer.ok) {
          results.push({ tag: "accepted" });
        } else if (transient(answer.status)) {
          const reason = `POST answered ${answer.status}`;
          // The queue takes nothing now: the host holds messages for it
          // and spends no replay budget.
          if (saysUnavailable(answer.status)) targetUnavailable(reason);
          results.push({ tag: "transient", val: { delayMs: 1000n, reason } });
        } else {
          const text = (await answer.text()).slice(0, 200);
          results.push({ tag: "permanent", val: `POST answered ${answer.status}: ${text}` });
        }
      } catch (e) {
        // Nothing reached the queue.
        const reason = `POST ${settings.url}: ${e}`;
        targetUnavailable(reason);
        results.push({ tag: "transient", val: { delayMs: 1000n, reason } });
      }
    }
    return results;
  },
};
