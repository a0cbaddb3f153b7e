// enrich: a ferry processor written in JavaScript (componentize-js).
//
// Adds headers to every message without reading its payload: fixed ones
// from the config, the time ferry handled it, and the payload's size.
//
// Config (the route's `config` table):
//
//   [[routes.processors]]
//   plugin = "enrich"
//   config = { set = { region = "eu-west" }, received_at = "enriched-at", size = "payload-bytes" }
//
// - `set`: text headers to add (names starting with `x-bridge.` are
//   refused at init: the host would ignore them anyway).
// - `received_at`: header name for the host clock's time (a timestamp
//   header); omit to leave it out.
// - `size`: header name for the payload size in bytes (an integer
//   header); omit to leave it out.
//
// Build with `just plugins` (componentize-js from npm, against
// ../../../wit, world `processor`).

import { log, now } from "ferry:plugin/host@1.3.0";

let settings = { set: {}, received_at: null, size: null };

export function init(config) {
  let parsed;
  try {
    parsed = JSON.parse(config);
  } catch (e) {
    throw `config is not valid JSON: ${e}`;
  }
  const known = new Set(["set", "received_at", "size"]);
  for (const key of Object.keys(parsed)) {
    if (!known.has(key)) throw `enrich config: unknown key ${JSON.stringify(key)}`;
  }
  const set = parsed.set ?? {};
  for (const [name, value] of Object.entries(set)) {
    if (typeof value !== "string") throw `enrich config: set.${name} must be text`;
    if (name.toLowerCase().startsWith("x-bridge.")) throw `enrich config: ${name} is reserved to the host`;
  }
  for (const key of ["received_at", "size"]) {
    if (parsed[key] !== undefined && (typeof parsed[key] !== "string" || parsed[key] === "")) {
      throw `enrich config: ${key} must be a header name`;
    }
  }
  settings = { set, received_at: parsed.received_at ?? null, size: parsed.size ?? null };
}

export function process(msg) {
  for (const [name, value] of Object.entries(settings.set)) {
    msg.setHeader(name, { tag: "text", val: value });
  }
  if (settings.received_at) {
    msg.setHeader(settings.received_at, { tag: "time", val: now() });
  }
  if (settings.size) {
    msg.setHeader(settings.size, { tag: "integer", val: msg.payloadLen() });
  }
  log("debug", `enriched ${msg.id()}`);
  return { tag: "pass" };
}
