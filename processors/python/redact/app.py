"""redact: a ferry processor written in Python (componentize-py).

Replaces the values of the named JSON payload fields with a mask and
records how many it changed in the `redacted` header.

Config (the route's `config` table):

    [[routes.processors]]
    plugin = "redact"
    config = { fields = ["card", "customer.email"], mask = "***" }

- `fields`: dotted paths into the JSON payload (required, at least one).
- `mask`: the replacement text (default "***").

A payload that is not JSON fails permanently. Build with `just plugins`
(componentize-py from PyPI, against ../../../wit, world `processor`).
"""

import json

import wit_world
from componentize_py_types import Err
from wit_world.imports import host, types

_fields: list[list[str]] = []
_mask: str = "***"


def _redact(doc, path: list[str]) -> int:
    *parents, last = path
    node = doc
    for key in parents:
        if not isinstance(node, dict) or key not in node:
            return 0
        node = node[key]
    if isinstance(node, dict) and last in node:
        node[last] = _mask
        return 1
    return 0


class WitWorld(wit_world.WitWorld):
    def init(self, config: str) -> None:
        global _fields, _mask
        try:
            settings = json.loads(config)
        except ValueError as e:
            raise Err(f"config is not valid JSON: {e}")
        fields = settings.get("fields")
        if not isinstance(fields, list) or not fields or not all(isinstance(f, str) and f for f in fields):
            raise Err("redact config: `fields` must list at least one dotted path")
        mask = settings.get("mask", "***")
        if not isinstance(mask, str):
            raise Err("redact config: `mask` must be text")
        unknown = set(settings) - {"fields", "mask"}
        if unknown:
            raise Err(f"redact config: unknown keys {sorted(unknown)}")
        _fields = [f.split(".") for f in fields]
        _mask = mask

    def process(self, msg: types.Message) -> types.Verdict:
        try:
            doc = json.loads(msg.payload())
        except ValueError as e:
            raise Err(types.Failure_Reject(f"redact: payload is not JSON: {e}"))
        count = sum(_redact(doc, path) for path in _fields)
        if count:
            msg.set_payload(json.dumps(doc, separators=(",", ":")).encode())
        msg.set_header("redacted", types.HeaderValue_Text(str(count)))
        host.log(host.Level.DEBUG, f"redacted {count} field(s)")
        return types.Verdict_Pass()
