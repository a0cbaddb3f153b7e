# ferry's single entry point. `just --list` shows every recipe.

set shell := ["bash", "-euo", "pipefail", "-c"]

root := justfile_directory()
# One target directory for every build, host and guest: CARGO_TARGET_DIR
# when set, else /var/tmp/ferry-target, the same default as .ci/run's, so a
# clean clone on a machine that built before rebuilds only what changed.
# The checkout's target/ is a link to it (`_target`), so target/debug/ferry
# and a plain `cargo test -p CRATE` find the same build.
host_target := env_var_or_default("CARGO_TARGET_DIR", "/var/tmp/ferry-target")
guest_target := host_target
export CARGO_TARGET_DIR := host_target
guest_out := guest_target / "wasm32-wasip2" / "release"
# Where scripts/provision puts Python tools the machine's Python lacks.
venv := env_var_or_default("FERRY_VENV", env_var_or_default("XDG_CACHE_HOME", env_var_or_default("HOME", "/root") / ".cache") / "ferry" / "venv")

# The SQS tests run against moto_server, which accepts any credentials.
export AWS_ACCESS_KEY_ID := env_var_or_default("AWS_ACCESS_KEY_ID", "test")
export AWS_SECRET_ACCESS_KEY := env_var_or_default("AWS_SECRET_ACCESS_KEY", "test")
export AWS_REGION := env_var_or_default("AWS_REGION", "us-east-1")

# Show the recipes.
default:
    @just --list

# Build every plugin into plugins/: the Rust built-ins and the Python, JavaScript and C examples.
plugins: plugins-rust plugin-python plugin-js plugin-c

# Build the Rust built-in processors into plugins/ (what examples/ferry.toml uses), and the SimpleMQ transport component.
plugins-rust: _target
    @scripts/provision toolchain
    @echo "just: building the Rust built-in plugins (filter, transform, tenant, circuitbreaker, header-map) and the SimpleMQ transport component"
    cd processors && cargo build --release --target wasm32-wasip2 -p filter -p transform -p tenant -p circuitbreaker -p header-map -p simplemq
    for p in filter transform tenant circuitbreaker simplemq; do cp {{guest_out}}/$p.wasm plugins/$p.wasm; done
    cp {{guest_out}}/header_map.wasm plugins/header-map.wasm

# The Python example (processors/python/redact) with componentize-py from PyPI.
plugin-python:
    @scripts/provision python-plugins
    cd processors/python/redact && PATH="$PATH:{{venv}}/bin" componentize-py -d ../../../wit -w processor componentize app -o ../../../plugins/redact.wasm

# The JavaScript examples with componentize-js from npm: the enrich processor (processors/js/enrich) and the http-queue transport (processors/js/http-queue), whose own tests run first.
plugin-js:
    @scripts/provision node
    cd processors/js/enrich && { [ -d node_modules ] || npm ci --no-audit --no-fund --silent; } && npm run --silent build
    cp processors/js/enrich/enrich.wasm plugins/enrich.wasm
    cd processors/js/http-queue && { [ -d node_modules ] || npm ci --no-audit --no-fund --silent; } && npm test --silent && npm run --silent build
    cp processors/js/http-queue/http-queue.wasm plugins/http-queue.wasm

# The C example (processors/c/size-guard): clang for wasm32 with wasi-libc
# and lld, installed when missing, and the Rust toolchain's
# wasm-component-ld. Where they cannot be, it is skipped with the reason in
# plugins/size-guard.skipped.
plugin-c:
    #!/usr/bin/env bash
    set -euo pipefail
    rm -f plugins/size-guard.skipped
    if ! scripts/provision c-plugins; then
        echo "just: skipped the C example: its tools (clang for wasm32, wasi-libc, lld) could not be installed here" | tee plugins/size-guard.skipped
        exit 0
    fi
    processors/c/size-guard/build plugins/size-guard.wasm

# Build the test-only components into tests/plugins/.
test-plugins: _target
    @scripts/provision toolchain
    cd processors && cargo build --release --target wasm32-wasip2 -p hostile -p hostile-transport -p drop-all
    mkdir -p tests/plugins
    cp {{guest_out}}/hostile.wasm tests/plugins/hostile.wasm
    cp {{guest_out}}/hostile_transport.wasm tests/plugins/hostile-transport.wasm
    cp {{guest_out}}/drop_all.wasm tests/plugins/drop-all.wasm
    # The filter built against the previous minor contract (wit/previous),
    # in a target directory of its own so the current build is not redone.
    cd processors && cargo build --release --target wasm32-wasip2 -p filter --features ferry-plugin-sdk/previous-contract --target-dir {{guest_target}}/previous-contract
    cp {{guest_target}}/previous-contract/wasm32-wasip2/release/filter.wasm tests/plugins/filter-previous.wasm

# The checkout's target/ links to the shared target directory; a target/
# that is a directory of its own is left alone, with a word.
_target:
    #!/usr/bin/env bash
    set -euo pipefail
    mkdir -p "{{host_target}}"
    if [ ! -e target ] && [ ! -L target ]; then
        ln -s "{{host_target}}" target
    elif [ "$(readlink -f target)" != "$(readlink -f "{{host_target}}")" ]; then
        echo "just: builds go to {{host_target}}; target/ is not a link to it, so target/debug/ferry is not what just builds (remove target/ and just links it)" >&2
    fi

# Build the daemon (debug).
build: _target
    cargo build -p ferry-daemon

# Mosquitto on 127.0.0.1:1883: installed and started when missing.
mosquitto:
    @scripts/provision mosquitto

# moto_server (the tests' SQS endpoint) on 127.0.0.1:4566: installed and started when missing.
moto:
    @scripts/provision moto

# RabbitMQ on 127.0.0.1:5672 with the AMQP 1.0 and shovel plugins: installed and started when missing.
rabbitmq:
    @scripts/provision rabbitmq

# PostgreSQL on 127.0.0.1:5432 with role ferry and database ferry_test (the shared-store tests).
postgres:
    @scripts/provision postgres

# Run the daemon on examples/ferry.toml (builds it and the Rust plugins only; starts Mosquitto when needed).
run: plugins-rust mosquitto
    @scripts/provision openssl
    @echo "just: building the daemon (debug)"
    cargo build -p ferry-daemon
    @echo "ferry: sensors/# -> filter (kind=temp) -> bridged/<topic>. In another shell:"
    @echo "  mosquitto_sub -V mqttv5 -t 'bridged/#' -v"
    @echo "  mosquitto_pub -V mqttv5 -q 1 -t sensors/kitchen -m '{\"c\":21.5}' -D publish user-property kind temp"
    {{host_target}}/debug/ferry run -c examples/ferry.toml --watch

# Install ferry under PREFIX (default /usr/local): the release daemon as
# PREFIX/bin/ferry (cargo install), the Rust built-in plugins in
# PREFIX/lib/ferry/plugins, the README in PREFIX/share/doc/ferry (where
# contrib/ferry.service points).
install PREFIX="/usr/local": plugins-rust
    @scripts/provision openssl
    cargo install --path host/daemon --locked --root "{{PREFIX}}"
    mkdir -p "{{PREFIX}}/lib/ferry/plugins" "{{PREFIX}}/share/doc/ferry"
    for p in filter transform tenant circuitbreaker header-map simplemq; do cp "plugins/$p.wasm" "{{PREFIX}}/lib/ferry/plugins/"; done
    cp README.md "{{PREFIX}}/share/doc/ferry/"
    "{{PREFIX}}/bin/ferry" --version

# The container image ferry:VERSION (podman, offline: an empty base with the
# release daemon, the libraries it links and the Rust plugins; see
# docs/src/operating/container.md).
image: plugins-rust
    @scripts/provision openssl podman
    cargo build --release -p ferry-daemon
    scripts/image {{host_target}}/release/ferry "localhost/ferry:$({{host_target}}/release/ferry --version | awk '{print $2}')" plugins

# The book (docs/) with mdBook into docs/book/; open docs/book/index.html.
# Its links and the generated reference pages are checked by `just test`.
docs:
    @scripts/provision mdbook
    mdbook build docs

# Rewrite the book's generated reference pages (docs/src/reference/) from
# the config types and the CLI parser.
reference:
    cargo run --quiet -p ferry-daemon -- reference --dir docs/src/reference

# Everything CI runs: formatting, lints, unit tests, real-broker tests.
test: plugins test-plugins mosquitto moto rabbitmq postgres
    @scripts/provision openssl toolchain fuse nats redis kafka nextest podman chromium
    @echo "just: step fmt"
    cargo fmt --all -- --check
    cd processors && cargo fmt --all -- --check
    @echo "just: step clippy"
    cargo clippy --workspace --all-targets -- -D warnings
    cd processors && cargo clippy --all-targets -- -D warnings
    cd processors && cargo clippy --target wasm32-wasip2 -- -D warnings
    # One build of everything, the ferry binary included (host/daemon/tests
    # makes cargo build it with the test binaries' features, so nothing is
    # compiled twice), then the example test files, then the tests.
    @echo "just: step build"
    cargo nextest run --workspace --no-run
    @echo "just: step examples"
    {{host_target}}/debug/ferry test examples/tests/*.toml
    @echo "just: step tests"
    cargo nextest run --workspace
    @echo "just: step doctests"
    cargo test --workspace --doc
    @echo "just: step plugin tests"
    cd processors && cargo test -p ferry-plugin-sdk -p filter -p transform -p tenant -p circuitbreaker -p header-map -p simplemq

# Build what the tests need (the daemon, the Rust and test plugins),
# incrementally, and the example plugins once (when missing), start the
# brokers that are not running (a few seconds when all are), then run only
# the tests whose name contains FILTER (a nextest filter: `just t
# outage::`, `just t route::tests::fan_out`).
t FILTER="": plugins-rust test-plugins plugins-missing services
    @scripts/provision openssl
    cargo nextest run --workspace --no-fail-fast {{FILTER}}

# The Python, JavaScript and C example plugins, each built only when its
# component is missing from plugins/ (`just plugins` rebuilds them all).
plugins-missing:
    @[ -f plugins/redact.wasm ] || just plugin-python
    @[ -f plugins/enrich.wasm ] && [ -f plugins/http-queue.wasm ] || just plugin-js
    @[ -f plugins/size-guard.wasm ] || [ -f plugins/size-guard.skipped ] || just plugin-c

# Every server the tests use, installed and started where missing (those
# running are left alone).
services: mosquitto moto rabbitmq postgres
    @scripts/provision openssl toolchain fuse nats redis kafka nextest podman chromium

# (CI runs reduced forms of these in `just test`.)
# The full crash and load tests: 200,000 messages through the store, 20,000 through a shared_outbox route with 50 power cuts of its disk, then 100 SIGKILLs of the release daemon.
chaos: mosquitto rabbitmq postgres
    @scripts/provision fuse
    FERRY_STRESS_MESSAGES=200000 cargo test -p ferry-store --test suite stress:: -- --nocapture
    FERRY_POWERCUT_MESSAGES=20000 FERRY_POWERCUT_CUTS=50 cargo test -p ferry-tests --test suite power_cut:: -- --nocapture
    cargo build --release -p ferry-daemon
    FERRY_CHAOS_MESSAGES=20000 FERRY_CHAOS_KILLS=100 cargo test --release -p ferry-tests --test suite chaos:: -- --nocapture

# Fuzz every decoder that reads remote bytes with cargo-fuzz (nightly), `secs`
# seconds each; what finds new coverage is added to the committed corpora in
# host/fuzz/corpus/<target>/ (`just test` replays them, on stable, with
# seeded mutations). One target: `just fuzz 300 json_wire`.
fuzz secs="60" target="":
    #!/usr/bin/env bash
    set -euo pipefail
    scripts/provision fuzz
    dir=host/fuzz/cargo-fuzz
    targets="{{target}}"
    [ -n "$targets" ] || targets=$(cargo +nightly fuzz list --fuzz-dir "$dir")
    failed=""
    for t in $targets; do
        mkdir -p "host/fuzz/corpus/$t"
        echo "just: fuzzing $t for {{secs}} s"
        log="${TMPDIR:-/tmp}/ferry-fuzz-$t.log"
        if cargo +nightly fuzz run --fuzz-dir "$dir" "$t" "host/fuzz/corpus/$t" -- -max_total_time={{secs}} -max_len=65536 > "$log" 2>&1; then
            grep -E '^#[0-9]+[[:space:]]+DONE|^Done [0-9]+ runs' "$log" | tail -1
        else
            grep -E 'SUMMARY|panicked at' "$log" | head -2 >&2
            echo "just: $t failed; the input is under $dir/artifacts/$t/ (log: $log)" >&2
            failed="$failed $t"
        fi
    done
    [ -z "$failed" ] || { echo "just: fuzz targets that failed:$failed" >&2; exit 1; }

# Benchmarks (release): processor call cost; MQTT->MQTT against Mosquitto's bridge, SQS and AMQP 0-9-1 routes against the broker's raw rate and RabbitMQ's shovel (medians of 3).
bench: _target plugins mosquitto moto rabbitmq postgres
    cargo build --release -p ferry-daemon -p ferry-bench
    {{host_target}}/release/ferry-bench
