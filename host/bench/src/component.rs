//! The `component` rows (issue 35): SimpleMQ queue -> queue through the
//! native adapter (`type = "simplemq"`) and through the SimpleMQ transport
//! component (`type = "component"`, processors/simplemq), each on a fake
//! SimpleMQ of its own (the tests' fake, in this process) pre-filled with
//! the same messages, one poller each, the JSON wire format on both, in
//! the same run. The goal is a ratio
//! of component to native rate of at least 0.8.

use std::time::{Duration, Instant};

use ferry_tests::daemon::{Daemon, Workspace};
use ferry_tests::simplemq::FakeSimpleMq;
use ferry_tests::unique;

use crate::measure::{self, DaemonWindow, Run};

/// Which adapter a row runs.
#[derive(Clone, Copy)]
enum Adapter {
    Native,
    Component,
}

fn part(adapter: Adapter, smq: &FakeSimpleMq, queue: &str, receiver: bool) -> String {
    let api = smq.url();
    match adapter {
        Adapter::Native => {
            let polling = if receiver { "polling_interval_ms = 10\n" } else { "" };
            format!("type = \"simplemq\"\nqueue = \"{queue}\"\napi_key = \"key\"\napi_url = \"{api}\"\n{polling}")
        }
        Adapter::Component => format!(
            "type = \"component\"\ncomponent = \"simplemq\"\nwire_format = \"json\"\nallow_hosts = [\"{}\"]\n{}config = {{ queue = \"{queue}\", api_key = \"key\", api_url = \"{api}\" }}\n",
            api.trim_start_matches("http://"),
            if receiver { "wait_ms = 10\n" } else { "" },
        ),
    }
}

async fn run(adapter: Adapter, n: usize) -> Run {
    let smq = FakeSimpleMq::start(Duration::from_secs(60)).await;
    let (from, to) = (unique("bench-from"), unique("bench-to"));
    smq.create_queue(&from, "key");
    smq.create_queue(&to, "key");
    let content = ferry_tests::simplemq::content(&serde_json::json!({ "body": "x".repeat(1024) }));
    for _ in 0..n {
        smq.put(&from, &content);
    }
    let ws = Workspace::with_plugins(match adapter {
        Adapter::Native => &[],
        Adapter::Component => &["simplemq"],
    });
    ws.config(&format!(
        "[receivers.q]\n{}\n[senders.out]\n{}\n[[routes]]\nid = \"bench\"\nreceiver = \"q\"\nmax_in_flight = 256\n[[routes.bindings]]\nsender = \"out\"\n",
        part(adapter, &smq, &from, true),
        part(adapter, &smq, &to, false),
    ));
    let daemon = tokio::task::block_in_place(|| Daemon::start(&ws, 0));
    // Timed from the first receive: the component's compile is not the rate.
    while smq.calls("receive", 200) == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let ferry = DaemonWindow::start(&daemon);
    let started = Instant::now();
    let arrived = || smq.calls("send", 200) as usize;
    while arrived() < n && started.elapsed() < Duration::from_secs(300) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let got = arrived();
    if got < n {
        eprintln!("warning: only {got} of {n} reached the other queue");
    }
    let run = ferry.run(got as f64 / started.elapsed().as_secs_f64(), got);
    let _ = tokio::task::block_in_place(|| daemon.terminate());
    run
}

pub async fn rows(n: usize) {
    let native = measure::median_of("simplemq native", || run(Adapter::Native, n)).await;
    let component = measure::median_of("simplemq component", || run(Adapter::Component, n)).await;
    println!(
        "\nSimpleMQ queue -> queue on a fake SimpleMQ, 1 KiB bodies, one poller, {n} messages (median of {})",
        measure::repeats()
    );
    measure::header("");
    measure::row("native adapter (type = \"simplemq\")", &native);
    measure::row("transport component (processors/simplemq)", &component);
    measure::ratio("ratio component / native (goal >= 0.8)", component.rate / native.rate);
}
