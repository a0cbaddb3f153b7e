"""The first test of {{name}}: its logic on a stand-in message, no host."""

import unittest

from wit_world.imports import types

import app


class FakeMessage(types.Message):
    def __init__(self, headers):
        self.headers = dict(headers)

    def header(self, name):
        return self.headers.get(name)

    def set_header(self, name, value):
        self.headers[name] = value


class StampTest(unittest.TestCase):
    def test_stamps_and_drops(self):
        settings = app.configure('{"drop_kind": "noise"}')
        msg = FakeMessage({"kind": types.HeaderValue_Text("reading")})
        self.assertEqual(app.decide(settings, msg), types.Verdict_Pass())
        self.assertEqual(msg.headers["processed-by"], types.HeaderValue_Text("{{name}}"))
        noise = FakeMessage({"kind": types.HeaderValue_Text("noise")})
        self.assertIsInstance(app.decide(settings, noise), types.Verdict_Drop)

    def test_a_bad_config_names_the_key(self):
        with self.assertRaisesRegex(ValueError, "^header:"):
            app.configure('{"header": 3}')


if __name__ == "__main__":
    unittest.main()
