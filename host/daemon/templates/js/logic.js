// The logic of {{name}}, free of host imports so that `npm test` runs it
// under plain Node.

export function configure(config) {
  const settings = { header: "processed-by", drop_kind: null };
  const given = JSON.parse(config);
  for (const key of Object.keys(given)) {
    if (!(key in settings)) throw `unknown key ${key}`;
  }
  Object.assign(settings, given);
  const header = settings.header;
  if (typeof header !== "string" || header === "" || header.startsWith("x-bridge.")) {
    throw `header: ${JSON.stringify(header)} is empty, not text, or reserved`;
  }
  if (settings.drop_kind !== null && typeof settings.drop_kind !== "string") {
    throw "drop_kind: must be text";
  }
  return settings;
}

export function decide(settings, msg) {
  const kind = msg.header("kind");
  if (settings.drop_kind !== null && kind?.tag === "text" && kind.val === settings.drop_kind) {
    return { tag: "drop", val: `kind ${JSON.stringify(settings.drop_kind)}` };
  }
  msg.setHeader(settings.header, { tag: "text", val: "{{name}}" });
  return { tag: "pass" };
}
