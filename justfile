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
    cd processors && cargo build --release --target wasm32-wasip2 -p filter -p transform -p tenant -p circuitbreaker -p header-map
    for p in filter transform tenant circuitbreaker; do cp {{guest_out}}/$p.wasm plugins/$p.wasm; done
    cp {{guest_out}}/header_map.wasm plugins/header-map.wasm
    just plugin-python plugin-js

# The Python example (processors/python/redact) with componentize-py from PyPI.
plugin-python:
    command -v componentize-py >/dev/null || pip install --quiet 'componentize-py==0.25.1'
    cd processors/python/redact && componentize-py -d ../../../wit -w processor componentize app -o ../../../plugins/redact.wasm

# The JavaScript example (processors/js/enrich) with componentize-js from npm.
plugin-js:
    cd processors/js/enrich && { [ -d node_modules ] || npm ci --no-audit --no-fund --silent; } && npm run --silent build
    cp processors/js/enrich/enrich.wasm plugins/enrich.wasm

# Build the test-only components into tests/plugins/.
test-plugins:
    rustup target list --installed | grep -qx wasm32-wasip2 || rustup target add wasm32-wasip2
    cd processors && cargo build --release --target wasm32-wasip2 -p hostile -p future-version -p drop-all
    mkdir -p tests/plugins
    cp {{guest_out}}/hostile.wasm tests/plugins/hostile.wasm
    cp {{guest_out}}/future_version.wasm tests/plugins/future-version.wasm
    cp {{guest_out}}/drop_all.wasm tests/plugins/drop-all.wasm

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

# Make sure RabbitMQ runs on 127.0.0.1:5672 with the AMQP 1.0 and shovel plugins (starts it when installed but stopped).
rabbitmq:
    #!/usr/bin/env bash
    set -euo pipefail
    export PATH="$PATH:/usr/sbin"
    command -v rabbitmq-plugins >/dev/null || { echo "RabbitMQ is not installed (apt-get install rabbitmq-server)"; exit 1; }
    if (exec 3<>/dev/tcp/127.0.0.1/5672) 2>/dev/null; then
        rabbitmq-plugins enable rabbitmq_amqp1_0 rabbitmq_shovel >/dev/null
        echo "RabbitMQ already on 127.0.0.1:5672 (rabbitmq_amqp1_0, rabbitmq_shovel enabled)"; exit 0
    fi
    rabbitmq-plugins --offline enable rabbitmq_amqp1_0 rabbitmq_shovel >/dev/null
    rabbitmq-server -detached
    for _ in $(seq 60); do
        rabbitmqctl -q await_startup --timeout 5 >/dev/null 2>&1 && (exec 3<>/dev/tcp/127.0.0.1/5672) 2>/dev/null && break
        sleep 2
    done
    (exec 3<>/dev/tcp/127.0.0.1/5672) 2>/dev/null || { echo "RabbitMQ did not start"; exit 1; }
    echo "started RabbitMQ on 127.0.0.1:5672"

# Run the daemon on examples/ferry.toml (starts Mosquitto when needed).
run: plugins build mosquitto
    @echo "ferry: sensors/# -> filter (kind=temp) -> bridged/<topic>. In another shell:"
    @echo "  mosquitto_sub -V mqttv5 -t 'bridged/#' -v"
    @echo "  mosquitto_pub -V mqttv5 -q 1 -t sensors/kitchen -m '{\"c\":21.5}' -D publish user-property kind temp"
    {{host_target}}/debug/ferry run -c examples/ferry.toml

# Everything CI runs: formatting, lints, unit tests, real-broker tests.
test: plugins test-plugins mosquitto moto rabbitmq
    cargo fmt --all -- --check
    cd processors && cargo fmt --all -- --check
    cargo clippy --workspace --all-targets -- -D warnings
    cargo build -p ferry-daemon
    {{host_target}}/debug/ferry test examples/tests/*.toml
    cargo test --workspace --no-fail-fast
    cd processors && cargo test -p filter -p transform -p tenant -p circuitbreaker -p header-map

# Benchmarks (release): processor call cost; MQTT->MQTT against Mosquitto's bridge, SQS and AMQP 0-9-1 routes against the broker's raw rate and RabbitMQ's shovel (medians of 3).
# The full crash and load tests (CI runs reduced forms in `just test`):
# the outbox stress test with 200,000 messages, fan-out to two bindings,
# 256 in flight (fails if nothing moves for 10 s or anything is missing),
# then 20,000 messages through a shared_outbox route on the release daemon
# while it is SIGKILLed 100 times, a kill per 200 messages as in issue 13's
# measurement (0 lost; duplicates per kill reported).
chaos: mosquitto rabbitmq
    FERRY_STRESS_MESSAGES=200000 cargo test -p ferry-store --test stress -- --nocapture
    cargo build --release -p ferry-daemon
    FERRY_CHAOS_MESSAGES=20000 FERRY_CHAOS_KILLS=100 cargo test --release -p ferry-tests --test chaos -- --nocapture

bench: plugins mosquitto moto rabbitmq
    cargo build --release -p ferry-daemon -p ferry-bench
    {{host_target}}/release/ferry-bench
