// size-guard: a ferry processor written in C (wit-bindgen c, wasi-libc).
//
// Drops messages whose payload is larger than a limit, and records the
// payload size of the others in a header. It reads only the payload's
// length, never the payload.
//
// Config (the route's `config` table):
//
//   [[routes.processors]]
//   plugin = "size-guard"
//   config = { max_bytes = 65536, header = "payload-bytes" }
//
// - `max_bytes`: the largest payload passed (default 1048576); larger ones
//   are dropped with the reason `size-guard: payload of N bytes is over
//   max_bytes M` (acknowledged and counted, not dead-lettered).
// - `header`: the integer header that gets the size (default
//   `payload-bytes`); names starting with `x-bridge.` are refused.
//
// Build with ./build (or `just plugin-c`): the bindings are generated from
// ../../../wit at build time.

#include <stdlib.h>
#include <string.h>

#include "processor.h"

static uint64_t max_bytes = 1048576;
static char header[256] = "payload-bytes";

static void fail(processor_string_t *err, const char *why) {
  processor_string_dup(err, why);
}

// Appends text to buf (size n, NUL-terminated). No stdio: it would pull
// WASI file imports into the component for nothing.
static void append(char *buf, size_t n, const char *text) {
  size_t len = strlen(buf);
  while (*text && len + 1 < n) buf[len++] = *text++;
  buf[len] = 0;
}

static void append_u64(char *buf, size_t n, uint64_t v) {
  char digits[21];
  int i = 20;
  digits[i] = 0;
  do {
    digits[--i] = (char)('0' + v % 10);
    v /= 10;
  } while (v);
  append(buf, n, digits + i);
}

// The config is the JSON object the host makes from the route's table
// (no nesting for this plugin): "key": value pairs, read one at a time.
static const char *skip_space(const char *p) {
  while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r') p++;
  return p;
}

// Reads a JSON string without escapes into out (size n); returns the
// position after it, or NULL.
static const char *read_string(const char *p, char *out, size_t n) {
  if (*p != '"') return NULL;
  p++;
  size_t len = 0;
  while (*p && *p != '"') {
    if (*p == '\\' || len + 1 >= n) return NULL;
    out[len++] = *p++;
  }
  if (*p != '"') return NULL;
  out[len] = 0;
  return p + 1;
}

static bool configure(const char *json, processor_string_t *err) {
  const char *p = skip_space(json);
  if (*p != '{') return fail(err, "config is not a JSON object"), false;
  p = skip_space(p + 1);
  while (*p && *p != '}') {
    char key[64];
    p = read_string(p, key, sizeof key);
    if (!p) return fail(err, "config: a key is not plain text"), false;
    p = skip_space(p);
    if (*p != ':') return fail(err, "config is not valid JSON"), false;
    p = skip_space(p + 1);
    if (strcmp(key, "max_bytes") == 0) {
      char *end;
      unsigned long long v = strtoull(p, &end, 10);
      if (end == p || *p == '-') return fail(err, "max_bytes: must be a whole number of bytes"), false;
      max_bytes = v;
      p = end;
    } else if (strcmp(key, "header") == 0) {
      p = read_string(p, header, sizeof header);
      if (!p || header[0] == 0) return fail(err, "header: must be a non-empty name without escapes"), false;
      if (strncmp(header, "x-bridge.", 9) == 0) return fail(err, "header: x-bridge.* names are reserved"), false;
    } else {
      char why[128] = "unknown key `";
      append(why, sizeof why, key);
      append(why, sizeof why, "` (max_bytes, header)");
      return fail(err, why), false;
    }
    p = skip_space(p);
    if (*p == ',') p = skip_space(p + 1);
  }
  return true;
}

bool exports_processor_init(processor_string_t *config, processor_string_t *err) {
  char *json = malloc(config->len + 1);
  if (!json) return fail(err, "out of memory"), false;
  memcpy(json, config->ptr, config->len);
  json[config->len] = 0;
  processor_string_free(config);
  bool ok = configure(json, err);
  free(json);
  return ok;
}

static void decide(processor_borrow_message_t msg, processor_verdict_t *ret) {
  uint64_t len = ferry_plugin_types_method_message_payload_len(msg);
  if (len > max_bytes) {
    char why[128] = "size-guard: payload of ";
    append_u64(why, sizeof why, len);
    append(why, sizeof why, " bytes is over max_bytes ");
    append_u64(why, sizeof why, max_bytes);
    ret->tag = FERRY_PLUGIN_TYPES_VERDICT_DROP;
    processor_string_dup(&ret->val.drop, why);
    return;
  }
  processor_string_t name;
  processor_string_set(&name, header);
  ferry_plugin_types_header_value_t value = {.tag = FERRY_PLUGIN_TYPES_HEADER_VALUE_INTEGER, .val.integer = (int64_t)len};
  ferry_plugin_types_method_message_set_header(msg, &name, &value);
  ret->tag = FERRY_PLUGIN_TYPES_VERDICT_PASS;
}

bool exports_processor_process(processor_borrow_message_t msg, processor_verdict_t *ret, processor_failure_t *err) {
  (void)err;
  decide(msg, ret);
  // A borrowed handle must be given back before returning: the host traps
  // a call that leaves one behind.
  ferry_plugin_types_message_drop_borrow(msg);
  return true;
}
