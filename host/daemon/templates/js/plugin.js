// {{name}}: a ferry processor written in JavaScript (componentize-js).
//
// Config (the route's `config` table):
//
//   [[routes.processors]]
//   plugin = "{{name}}"
//   config = { header = "processed-by", drop_kind = "noise" }
//
// - `header`: the header it stamps on every message it passes, with the
//   value `{{name}}` (default `processed-by`).
// - `drop_kind`: messages whose `kind` header has this text are dropped.
//
// Build the component with `npm run build` (it writes {{name}}.wasm); run
// the tests with `npm test`.

import { configure, decide } from "./logic.js";

let settings = configure("{}");

export function init(config) {
  settings = configure(config); // a thrown string refuses the config
}

export function process(msg) {
  return decide(settings, msg);
}
