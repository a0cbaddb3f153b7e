// The logic of http-queue, free of host imports so that `npm test` runs it
// under plain Node (which has fetch, atob and btoa as the component does).

/// The `config` table of a receiver or a sender, checked.
export function configure(json) {
  let given;
  try {
    given = JSON.parse(json);
  } catch (e) {
    throw `config is not valid JSON: ${e}`;
  }
  for (const key of Object.keys(given)) {
    if (!["url", "token"].includes(key)) throw `unknown key ${JSON.stringify(key)}`;
  }
  if (typeof given.url !== "string" || !/^https?:\/\/[^/]+/.test(given.url)) {
    throw `url: ${JSON.stringify(given.url)} is not an http(s) URL`;
  }
  if (given.token !== undefined && typeof given.token !== "string") throw "token: must be text";
  return { url: given.url.replace(/\/+$/, ""), token: given.token ?? null };
}

/// The URL of one message: its id as exactly one path segment. An id that
/// cannot be one (empty, `.`, `..`) names no message: a queue that hands
/// one out cannot make an acknowledgement climb to another URL.
export function messageUrl(settings, id) {
  if (id === "" || id === "." || id === "..") throw `message id ${JSON.stringify(id)} names no message`;
  const segment = encodeURIComponent(id).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
  return `${settings.url}/${segment}`;
}

export function requestHeaders(settings, json) {
  const headers = {};
  if (settings.token !== null) headers.authorization = `Bearer ${settings.token}`;
  if (json) headers["content-type"] = "application/json";
  return headers;
}

export function decodeContent(content) {
  try {
    const binary = atob(content);
    return Uint8Array.from(binary, (c) => c.charCodeAt(0));
  } catch {
    return new TextEncoder().encode(content); // not base64: taken as it is
  }
}

export function encodeContent(bytes) {
  let binary = "";
  for (let i = 0; i < bytes.length; i += 8192) {
    binary += String.fromCharCode(...bytes.subarray(i, i + 8192));
  }
  return btoa(binary);
}

/// A queue message as the envelope a receiver hands the host; `null` for
/// one whose id names no message (left on the queue).
export function toReceived(settings, m) {
  const id = String(m?.id ?? "");
  try {
    messageUrl(settings, id);
  } catch {
    return null;
  }
  const createdAt = Number.isSafeInteger(m.created_at) && m.created_at > 0 ? m.created_at : 0;
  return {
    token: id,
    message: {
      id,
      subject: undefined,
      headers: [["http-queue.message-id", { tag: "text", val: id }]],
      payload: decodeContent(String(m.content ?? "")),
      createdAt: BigInt(createdAt),
      expiresAt: undefined,
    },
    // The queue does not count deliveries: the host holds a failed
    // message and retries it in process.
    redeliveries: undefined,
  };
}

/// Whether an answer's status means "try again later".
export function transient(status) {
  return status === 408 || status === 429 || status >= 500;
}

/// Whether an answer says the queue takes nothing now (not that it
/// refused this message).
export function saysUnavailable(status) {
  return [408, 429, 502, 503, 504].includes(status);
}
