"""{{name}}: a ferry processor written in Python (componentize-py).

Config (the route's `config` table):

    [[routes.processors]]
    plugin = "{{name}}"
    config = { header = "processed-by", drop_kind = "noise" }

- `header`: the header it stamps on every message it passes, with the
  value `{{name}}` (default `processed-by`).
- `drop_kind`: messages whose `kind` header has this text are dropped.

Build the component with `./build` (it writes `{{name}}.wasm`); run the
tests with `./test`.
"""

import json

import wit_world
from componentize_py_types import Err
from wit_world.imports import types

_settings = {"header": "processed-by", "drop_kind": None}


def configure(config: str) -> dict:
    """The settings from the config JSON; raises ValueError naming the key."""
    settings = {"header": "processed-by", "drop_kind": None}
    given = json.loads(config)
    unknown = set(given) - set(settings)
    if unknown:
        raise ValueError(f"unknown keys {sorted(unknown)}")
    settings.update(given)
    header = settings["header"]
    if not isinstance(header, str) or not header or header.startswith("x-bridge."):
        raise ValueError(f"header: {header!r} is empty, not text, or reserved")
    if settings["drop_kind"] is not None and not isinstance(settings["drop_kind"], str):
        raise ValueError("drop_kind: must be text")
    return settings


def decide(settings: dict, msg: types.Message) -> types.Verdict:
    kind = msg.header("kind")
    if settings["drop_kind"] is not None and kind == types.HeaderValue_Text(settings["drop_kind"]):
        return types.Verdict_Drop(f"kind {settings['drop_kind']!r}")
    msg.set_header(settings["header"], types.HeaderValue_Text("{{name}}"))
    return types.Verdict_Pass()


class WitWorld(wit_world.WitWorld):
    def init(self, config: str) -> None:
        global _settings
        try:
            _settings = configure(config)
        except ValueError as e:
            raise Err(str(e))

    def process(self, msg: types.Message) -> types.Verdict:
        return decide(_settings, msg)
