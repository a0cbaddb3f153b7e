//! The plugin host against real components: the built-in filter, the
//! hostile fixture and the filter built against the previous minor contract
//! (`just plugins test-plugins` builds them), and a component of a future
//! contract version made from `tests/plugins/future-version.wat`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferry_core::metrics::Metrics;
use ferry_core::ports::{ProcessError, Verdict};
use ferry_envelope::{Envelope, HeaderValue};
use ferry_wasm::registry::load_file;
use ferry_wasm::{PluginEngine, PluginError, PluginLimits, PluginRegistry, WasmProcessor};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn wasm(path: &str) -> PathBuf {
    let p = repo().join(path);
    assert!(p.exists(), "{} is missing: run `just plugins test-plugins` first", p.display());
    p
}

fn engine() -> PluginEngine {
    PluginEngine::new(PluginLimits { call_timeout: Duration::from_millis(300), memory_limit_bytes: 32 << 20 })
        .expect("engine")
}

fn processor(engine: &PluginEngine, file: &str, config: serde_json::Value) -> Result<WasmProcessor, PluginError> {
    let plugin = Arc::new(load_file(engine, &wasm(file))?);
    WasmProcessor::new(engine, plugin, "r1", config.to_string(), Metrics::new())
}

fn msg(headers: &[(&str, &str)]) -> Envelope {
    let mut e = Envelope::new("m1", &br#"{"reading":{"value":30}}"#[..]);
    for (k, v) in headers {
        e.set_header(*k, *v);
    }
    e
}

#[test]
fn filter_passes_drops_and_routes() {
    let engine = engine();
    let f = processor(
        &engine,
        "plugins/filter.wasm",
        serde_json::json!({"when": [{"header": "kind", "op": "eq", "value": "temp"}]}),
    )
    .expect("filter loads");
    assert_eq!(f.process_blocking(msg(&[("kind", "temp")])).1, Ok(Verdict::Pass));
    assert_eq!(f.process_blocking(msg(&[("kind", "rh")])).1, Ok(Verdict::Drop("filtered".into())));

    let r = processor(
        &engine,
        "plugins/filter.wasm",
        serde_json::json!({"when": [{"field": "reading.value", "op": "gt", "value": 25}], "action": "route", "route": ["alerts/hot"]}),
    )
    .expect("filter loads");
    assert_eq!(r.process_blocking(msg(&[])).1, Ok(Verdict::Route(vec!["alerts/hot".into()])));
}

#[test]
fn instances_are_reused_not_created_per_message() {
    let engine = engine();
    let f = processor(&engine, "plugins/filter.wasm", serde_json::json!({})).expect("loads");
    for _ in 0..50 {
        assert_eq!(f.process_blocking(msg(&[])).1, Ok(Verdict::Pass));
    }
    assert_eq!(f.idle_instances(), 1);
}

#[test]
fn a_bad_filter_config_is_refused_at_init_with_the_plugin_reason() {
    let engine = engine();
    let err = processor(
        &engine,
        "plugins/filter.wasm",
        serde_json::json!({"when": [{"header": "a", "op": "like", "value": 1}]}),
    )
    .err()
    .expect("refused");
    assert!(matches!(err, PluginError::Init { .. }), "{err}");
    assert!(err.to_string().contains("when[0].op: unknown variant `like`"), "{err}");
}

#[test]
fn plugin_changes_headers_and_subject_but_never_reserved_headers() {
    let engine = engine();
    let p = processor(&engine, "tests/plugins/hostile.wasm", serde_json::json!({})).expect("loads");
    let mut e = msg(&[("hostile", "mutate")]);
    e.set_header("x-bridge.route-id", "r1");
    let (out, verdict) = p.process_blocking(e);
    assert_eq!(verdict, Ok(Verdict::Pass));
    assert_eq!(out.text_header("x-bridge.route-id"), Some("r1"));
    assert_eq!(out.text_header("touched"), Some("payload=24"));
    assert!(!out.headers.contains_key("hostile"));
    assert_eq!(out.subject.as_deref(), Some("mutated.subject"));
}

fn assert_fails_then_recovers(kind: &str, code: &str) {
    let engine = engine();
    let p = processor(&engine, "tests/plugins/hostile.wasm", serde_json::json!({})).expect("loads");
    let started = Instant::now();
    let (out, result) = p.process_blocking(msg(&[("hostile", kind)]));
    let Err(ProcessError::Reject(reason)) = result else {
        panic!("{kind}: expected a rejection, got {result:?}");
    };
    assert_eq!(reason.reason.as_str(), code, "{kind}: {reason}");
    assert!(started.elapsed() < Duration::from_secs(20), "{kind} was not stopped");
    assert_eq!(out.id, "m1", "the message survives the trap");
    // The broken instance was replaced: the next message is served.
    assert_eq!(p.process_blocking(msg(&[("kind", "ok")])).1, Ok(Verdict::Pass));
}

#[test]
fn a_trap_fails_only_its_message() {
    assert_fails_then_recovers("trap", "plugin_trap");
}

#[test]
fn an_endless_loop_hits_the_deadline() {
    assert_fails_then_recovers("loop", "plugin_deadline");
}

#[test]
fn a_memory_bomb_hits_the_memory_cap() {
    assert_fails_then_recovers("grow", "plugin_trap");
}

#[test]
fn deep_recursion_traps_on_the_stack_limit() {
    assert_fails_then_recovers("recurse", "plugin_trap");
}

#[test]
fn plugin_reject_and_retry_map_to_process_errors() {
    let engine = engine();
    let p = processor(&engine, "tests/plugins/hostile.wasm", serde_json::json!({})).expect("loads");
    let (_, r) = p.process_blocking(msg(&[("hostile", "reject")]));
    assert!(
        matches!(r, Err(ProcessError::Reject(ref f)) if f.reason == ferry_core::FailureReason::PluginRejected),
        "{r:?}"
    );
    let (_, r) = p.process_blocking(msg(&[("hostile", "retry")]));
    assert!(matches!(r, Err(ProcessError::Retry { after, .. }) if after == Duration::from_millis(50)), "{r:?}");
}

#[test]
fn a_trap_in_init_is_a_start_error() {
    let engine = engine();
    let err = processor(&engine, "tests/plugins/hostile.wasm", serde_json::json!({"trap_in_init": true}))
        .err()
        .expect("refused");
    assert!(matches!(err, PluginError::Instantiate { .. }), "{err}");
    assert!(err.to_string().contains("init trapped"), "{err}");
}

#[test]
fn a_component_for_another_contract_version_is_refused_clearly() {
    let engine = engine();
    let file = std::env::temp_dir().join(format!("future-version-{}.wasm", std::process::id()));
    std::fs::write(&file, wat::parse_file(repo().join("tests/plugins/future-version.wat")).expect("wat"))
        .expect("write");
    let err = load_file(&engine, &file).err().expect("refused");
    let _ = std::fs::remove_file(&file);
    let text = err.to_string();
    assert!(text.contains("built against ferry:plugin@2.0.0"), "{text}");
    assert!(text.contains("provides ferry:plugin@1.3.0 and loads components built against 1.3 and 1.2"), "{text}");
}

#[test]
fn a_component_for_the_previous_minor_loads_and_runs() {
    let engine = engine();
    let plugin = load_file(&engine, &wasm("tests/plugins/filter-previous.wasm")).expect("loads");
    assert_eq!(plugin.contract, "1.2.0");
    let current = load_file(&engine, &wasm("plugins/filter.wasm")).expect("loads");
    assert_eq!(current.contract, ferry_wasm::registry::PLUGIN_VERSION);
    let f = processor(
        &engine,
        "tests/plugins/filter-previous.wasm",
        serde_json::json!({"when": [{"header": "kind", "op": "eq", "value": "temp"}]}),
    )
    .expect("starts");
    assert_eq!(f.process_blocking(msg(&[("kind", "temp")])).1, Ok(Verdict::Pass));
    assert_eq!(f.process_blocking(msg(&[("kind", "rh")])).1, Ok(Verdict::Drop("filtered".into())));
}

#[test]
fn the_registry_keeps_good_plugins_and_explains_bad_and_missing_ones() {
    let dir = std::env::temp_dir().join(format!("ferry-plugins-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::copy(wasm("plugins/filter.wasm"), dir.join("filter.wasm")).expect("copy");
    std::fs::write(dir.join("corrupt.wasm"), b"\0asm not really").expect("write");
    std::fs::write(dir.join("core.wasm"), b"\0asm\x01\0\0\0").expect("write");
    std::fs::write(dir.join("notes.txt"), b"ignored").expect("write");
    let engine = engine();
    let registry = PluginRegistry::load_dir(&engine, &dir).expect("dir loads");
    assert_eq!(registry.names().collect::<Vec<_>>(), ["filter"]);
    assert!(registry.get("filter").is_ok());
    let corrupt = registry.get("corrupt").err().expect("refused").to_string();
    assert!(corrupt.contains("not a valid WebAssembly component"), "{corrupt}");
    assert!(registry.get("core").is_err());
    let missing = registry.get("nope").err().expect("missing").to_string();
    assert!(missing.contains("no plugin named \"nope\"") && missing.contains("found: filter"), "{missing}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A directory of its own under the system temp dir, emptied first.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ferry-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    dir
}

#[test]
fn a_child_compiler_that_fails_or_compiles_nothing_leaves_the_compiling_to_this_process() {
    let plugins = scratch("child-compile-plugins");
    std::fs::copy(wasm("plugins/filter.wasm"), plugins.join("filter.wasm")).expect("copy");
    let limits = PluginLimits::default();
    // `false` fails; `true` exits 0 without compiling anything. Either way
    // the plugin is compiled here, works, and lands in the cache.
    for program in ["false", "true"] {
        let cache = scratch(&format!("child-compile-cache-{program}"));
        let engine = PluginEngine::with_cache(limits, &cache).expect("engine").compile_in_child(program.into());
        let registry = PluginRegistry::load_dir(&engine, &plugins).expect("dir loads");
        let plugin = registry.get("filter").expect("filter loads");
        assert!(!plugin.from_cache, "{program}: nothing was compiled into the cache before");
        let p = WasmProcessor::new(
            &engine,
            plugin,
            "r1",
            r#"{"when":[{"header":"k","op":"exists"}]}"#.into(),
            Metrics::new(),
        )
        .expect("init");
        assert_eq!(p.process_blocking(msg(&[("k", "v")])).1, Ok(Verdict::Pass), "{program}");
        assert!(cache.read_dir().expect("cache").next().is_some(), "{program}: compiled here and cached");
        let _ = std::fs::remove_dir_all(&cache);
    }
    // Without a cache there is nothing to hand a child's work back through.
    let engine = engine().compile_in_child("false".into());
    assert_eq!(engine.precompile(&[plugins.join("filter.wasm")]), Ok(false));
    let _ = std::fs::remove_dir_all(&plugins);
}

#[test]
fn header_values_of_every_kind_reach_the_plugin() {
    let engine = engine();
    let f = processor(
        &engine,
        "plugins/filter.wasm",
        serde_json::json!({"when": [
            {"header": "n", "op": "gt", "value": 2},
            {"header": "b", "op": "eq", "value": true},
            {"header": "f", "op": "lt", "value": 1.0}
        ]}),
    )
    .expect("loads");
    let mut e = msg(&[]);
    e.set_header("n", HeaderValue::Integer(3));
    e.set_header("b", HeaderValue::Boolean(true));
    e.set_header("f", HeaderValue::Float(0.5));
    assert_eq!(f.process_blocking(e).1, Ok(Verdict::Pass));
}

/// Where calls run: a plugin that can only compute runs on the async worker
/// of a multi-threaded runtime (no hand-off per message); one that can wait
/// (it imports the clock, files or sockets, or is granted the network or a
/// directory), or any call outside such a runtime, goes to the blocking
/// pool. Either way a call through the async port works.
#[test]
fn compute_only_plugins_run_on_the_worker_and_io_plugins_on_the_blocking_pool() {
    use ferry_core::ports::Processor as _;
    let engine = engine();
    let config = serde_json::json!({"when": [{"header": "kind", "op": "eq", "value": "temp"}]});
    let plugin = Arc::new(load_file(&engine, &wasm("plugins/filter.wasm")).expect("loads"));
    let plain = WasmProcessor::new(&engine, plugin.clone(), "r1", config.to_string(), Metrics::new()).expect("plain");
    let grants = ferry_wasm::Grants { network: true, ..Default::default() };
    let networked =
        WasmProcessor::with_grants(&engine, plugin, "r1", config.to_string(), grants, Metrics::new()).expect("net");

    let multi = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("rt");
    multi.block_on(async {
        assert!(plain.runs_on_worker());
        assert!(!networked.runs_on_worker());
        assert_eq!(plain.process(msg(&[("kind", "temp")])).await.1, Ok(Verdict::Pass));
        assert_eq!(networked.process(msg(&[("kind", "rh")])).await.1, Ok(Verdict::Drop("filtered".into())));
    });
    // A plugin that can sleep (it imports the monotonic clock) never runs on
    // the worker: WASI's blocking calls cannot.
    let hostile = processor(&engine, "tests/plugins/hostile.wasm", serde_json::json!({})).expect("hostile");
    multi.block_on(async {
        assert!(!hostile.runs_on_worker());
        let slow = msg(&[("hostile", "slow"), ("sleep-ms", "20")]);
        assert_eq!(hostile.process(slow).await.1, Ok(Verdict::Pass), "a sleeping plugin works");
    });
    let single = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("rt");
    single.block_on(async {
        assert!(!plain.runs_on_worker(), "a current-thread runtime has no other worker");
        assert_eq!(plain.process(msg(&[("kind", "temp")])).await.1, Ok(Verdict::Pass));
    });
    assert!(!plain.runs_on_worker(), "outside a runtime");
}

/// A compute-only plugin that panics on the worker: its guest panic writes
/// to stderr, a WASI call that blocks, which cannot run on an async worker.
/// The message fails as `plugin_trap` (and keeps its envelope), and the
/// plugin's later calls run on the blocking pool, where they work.
#[test]
fn a_plugin_that_panics_on_the_worker_fails_its_message_and_moves_to_the_blocking_pool() {
    use ferry_core::ports::Processor as _;
    let engine = engine();
    let p = processor(&engine, "tests/plugins/drop-all.wasm", serde_json::json!({})).expect("drop-all");
    let multi = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("rt");
    multi.block_on(async {
        assert!(p.runs_on_worker(), "compute-only");
        let (out, result) = p.process(msg(&[("panic", "1")])).await;
        assert!(
            matches!(result, Err(ProcessError::Reject(ref f)) if f.reason == ferry_core::FailureReason::PluginTrap),
            "{result:?}"
        );
        assert_eq!(out.id, "m1", "the message survives");
        assert!(!p.runs_on_worker(), "later calls go to the blocking pool");
        assert_eq!(p.process(msg(&[])).await.1, Ok(Verdict::Drop("drop-all fixture".into())));
    });
}
