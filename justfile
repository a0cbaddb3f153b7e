# ferry's single entry point. `just --list` shows every recipe.

set shell := ["bash", "-euo", "pipefail", "-c"]

root := justfile_directory()
# Host and guest builds share CARGO_TARGET_DIR when it is set (CI keeps one
# outside the clone); otherwise each workspace has its own target/.
host_target := env_var_or_default("CARGO_TARGET_DIR", root / "target")
guest_target := env_var_or_default("CARGO_TARGET_DIR", root / "processors" / "target")
guest_out := guest_target / "wasm32-wasip2" / "release"

# The SQS tests run against moto_server, which accepts any credentials.
export AWS_ACCESS_KEY_ID := env_var_or_default("AWS_ACCESS_KEY_ID", "test")
export AWS_SECRET_ACCESS_KEY := env_var_or_default("AWS_SECRET_ACCESS_KEY", "test")
export AWS_REGION := env_var_or_default("AWS_REGION", "us-east-1")

# Show the recipes.
default:
    @just --list

# Build the built-in processors into plugins/ (the daemon's default plugin directory).
plugins:
    rustup target list --installed | grep -qx wasm32-wasip2 || rustup target add wasm32-wasip2
    cd processors && cargo build --release --target wasm32-wasip2 -p filter
    cp {{guest_out}}/filter.wasm plugins/filter.wasm

# Build the test-only components into tests/plugins/.
test-plugins:
    rustup target list --installed | grep -qx wasm32-wasip2 || rustup target add wasm32-wasip2
    cd processors && cargo build --release --target wasm32-wasip2 -p hostile -p future-version
    mkdir -p tests/plugins
    cp {{guest_out}}/hostile.wasm tests/plugins/hostile.wasm
    cp {{guest_out}}/future_version.wasm tests/plugins/future-version.wasm

# Build the daemon (debug).
build:
    cargo build -p ferry-daemon

# Start a local Mosquitto if nothing listens on 127.0.0.1:1883.
mosquitto:
    #!/usr/bin/env bash
    set -euo pipefail
    if (exec 3<>/dev/tcp/127.0.0.1/1883) 2>/dev/null; then echo "MQTT broker already on 127.0.0.1:1883"; exit 0; fi
    command -v mosquitto >/dev/null || { echo "mosquitto is not installed (apt-get install mosquitto mosquitto-clients)"; exit 1; }
    conf=$(mktemp -d)/mosquitto.conf
    printf 'listener 1883 127.0.0.1\nallow_anonymous true\n' > "$conf"
    mosquitto -d -c "$conf"
    for _ in $(seq 50); do (exec 3<>/dev/tcp/127.0.0.1/1883) 2>/dev/null && break; sleep 0.1; done
    echo "started mosquitto on 127.0.0.1:1883"

# Start moto_server (the SQS endpoint for tests) if nothing listens on 127.0.0.1:4566.
moto:
    #!/usr/bin/env bash
    set -euo pipefail
    if (exec 3<>/dev/tcp/127.0.0.1/4566) 2>/dev/null; then echo "SQS endpoint already on 127.0.0.1:4566"; exit 0; fi
    python3 -c 'import moto.server' 2>/dev/null || { echo "moto is not installed (pip install 'moto[server]')"; exit 1; }
    nohup python3 -m moto.server -H 127.0.0.1 -p 4566 > "${TMPDIR:-/tmp}/ferry-moto.log" 2>&1 &
    for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/4566) 2>/dev/null && break; sleep 0.1; done
    (exec 3<>/dev/tcp/127.0.0.1/4566) 2>/dev/null || { echo "moto_server did not start"; exit 1; }
    echo "started moto_server on 127.0.0.1:4566"

# Run the daemon on examples/ferry.toml (starts Mosquitto when needed).
run: plugins build mosquitto
    @echo "ferry: sensors/# -> filter (kind=temp) -> bridged/<topic>. In another shell:"
    @echo "  mosquitto_sub -V mqttv5 -t 'bridged/#' -v"
    @echo "  mosquitto_pub -V mqttv5 -q 1 -t sensors/kitchen -m '{\"c\":21.5}' -D publish user-property kind temp"
    {{host_target}}/debug/ferry run -c examples/ferry.toml

# Everything CI runs: formatting, lints, unit tests, real-broker tests.
test: plugins test-plugins mosquitto moto
    cargo fmt --all -- --check
    cd processors && cargo fmt --all -- --check
    cargo clippy --workspace --all-targets -- -D warnings
    cargo build -p ferry-daemon
    cargo test --workspace
    cd processors && cargo test -p filter

# Benchmarks (release): MQTT->MQTT through ferry vs raw Mosquitto, and the cost of one processor call.
bench: plugins mosquitto
    cargo build --release -p ferry-daemon -p ferry-bench
    {{host_target}}/release/ferry-bench
