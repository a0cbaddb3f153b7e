//! What every route row reports: the rate, latency percentiles, and the
//! CPU and memory the processes under test used, read from `/proc`; each
//! row is run several times and its median printed.

use std::sync::OnceLock;
use std::time::Instant;

use hdrhistogram::Histogram;

/// How often each route row runs (`FERRY_BENCH_REPEAT`, default 3); the
/// median of the runs is printed.
pub fn repeats() -> usize {
    ferry_tests::env_or("FERRY_BENCH_REPEAT", 3usize).max(1)
}

/// One run of a route row.
#[derive(Debug, Clone, Copy, Default)]
pub struct Run {
    /// Messages per second end to end.
    pub rate: f64,
    /// End-to-end latency percentiles in milliseconds, where the row can
    /// time each message (published during the run, not pre-filled).
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    /// ferry's CPU time per message, in microseconds.
    pub cpu_us: Option<f64>,
    /// ferry's peak resident set, in MiB.
    pub rss_mib: Option<f64>,
    /// The broker's (or the peer's) CPU time per message, in microseconds.
    pub broker_cpu_us: Option<f64>,
}

/// Runs `row` [`repeats`] times and returns the median of each figure.
pub async fn median_of<F, Fut>(label: &str, mut row: F) -> Run
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Run>,
{
    let mut runs = Vec::new();
    for i in 0..repeats() {
        let run = row().await;
        eprintln!("  {label}, run {}: {run:?}", i + 1);
        runs.push(run);
    }
    median(&runs)
}

/// The median of each figure over `runs` (figures a run lacks are left out).
pub fn median(runs: &[Run]) -> Run {
    fn mid(mut values: Vec<f64>) -> Option<f64> {
        if values.is_empty() {
            return None;
        }
        values.sort_by(f64::total_cmp);
        let n = values.len();
        Some(if n % 2 == 1 { values[n / 2] } else { (values[n / 2 - 1] + values[n / 2]) / 2.0 })
    }
    let of = |f: fn(&Run) -> Option<f64>| mid(runs.iter().filter_map(f).collect());
    Run {
        rate: of(|r| Some(r.rate)).unwrap_or(0.0),
        p50_ms: of(|r| r.p50_ms),
        p99_ms: of(|r| r.p99_ms),
        cpu_us: of(|r| r.cpu_us),
        rss_mib: of(|r| r.rss_mib),
        broker_cpu_us: of(|r| r.broker_cpu_us),
    }
}

/// The header of a table of [`row`]s.
pub fn header(broker: &str) {
    println!(
        "  {:<40} {:>9} {:>8} {:>8} {:>9} {:>8} {:>11}",
        "", "msgs/s", "p50 ms", "p99 ms", "CPU µs", "RSS MiB", broker
    );
}

/// One printed row: every figure the run has, `-` for the others.
pub fn row(label: &str, run: &Run) {
    let cell = |v: Option<f64>, width: usize, digits: usize| match v {
        Some(v) => format!("{v:>width$.digits$}"),
        None => format!("{:>width$}", "-"),
    };
    println!(
        "  {:<40} {:>9.0} {} {} {} {} {}",
        label,
        run.rate,
        cell(run.p50_ms, 8, 2),
        cell(run.p99_ms, 8, 2),
        cell(run.cpu_us, 9, 1),
        cell(run.rss_mib, 8, 1),
        cell(run.broker_cpu_us, 11, 1),
    );
}

/// A ratio line under a table.
pub fn ratio(label: &str, value: f64) {
    println!("  {label:<40} {value:>9.2}");
}

/// CPU time a process uses over a window.
pub struct CpuWindow {
    pid: Option<u32>,
    before: Option<f64>,
}

impl CpuWindow {
    pub fn start(pid: Option<u32>) -> Self {
        Self { pid, before: pid.and_then(process_cpu_seconds) }
    }

    /// Microseconds of CPU per message since [`CpuWindow::start`].
    pub fn per_message(&self, messages: usize) -> Option<f64> {
        let after = self.pid.and_then(process_cpu_seconds)?;
        let spent = after - self.before?;
        (messages > 0).then(|| spent * 1e6 / messages as f64)
    }
}

/// The daemon under test over a window: its CPU per message and peak RSS.
pub struct DaemonWindow {
    pid: Option<u32>,
    cpu: CpuWindow,
}

impl DaemonWindow {
    pub fn start(daemon: &ferry_tests::daemon::Daemon) -> Self {
        let pid = daemon.pid();
        Self { pid, cpu: CpuWindow::start(pid) }
    }

    /// A run at `rate` over `messages`, with the daemon's figures.
    pub fn run(&self, rate: f64, messages: usize) -> Run {
        Run { rate, cpu_us: self.cpu.per_message(messages), rss_mib: self.pid.and_then(peak_rss_mib), ..Run::default() }
    }
}

/// User plus system CPU time a process has used, from `/proc/PID/stat`.
pub fn process_cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces) start at 3.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some(ticks / clock_ticks_per_second())
}

fn clock_ticks_per_second() -> f64 {
    static TICKS: OnceLock<f64> = OnceLock::new();
    *TICKS.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// A process's peak resident set (VmHWM) in MiB.
pub fn peak_rss_mib(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// The process id of the first process whose command name is `name`
/// (RabbitMQ's `beam.smp`), for its CPU readings.
pub fn pid_of(name: &str) -> Option<u32> {
    std::fs::read_dir("/proc").ok()?.filter_map(Result::ok).find_map(|entry| {
        let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
        let comm = std::fs::read_to_string(entry.path().join("comm")).ok()?;
        (comm.trim() == name).then_some(pid)
    })
}

/// Send times travel in the first eight bytes of each payload, as
/// microseconds since the bench started.
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// Writes the send time into `payload` (at least eight bytes).
pub fn stamp(payload: &mut [u8]) {
    let micros = epoch().elapsed().as_micros() as u64;
    payload[..8].copy_from_slice(&micros.to_be_bytes());
}

/// End-to-end latencies of stamped payloads.
pub struct Latency(Histogram<u64>);

impl Latency {
    pub fn new() -> Self {
        // 1 µs to 10 min, 3 significant figures.
        Self(Histogram::new_with_bounds(1, 600_000_000, 3).expect("histogram bounds"))
    }

    /// Records the time since `payload` was stamped.
    pub fn record(&mut self, payload: &[u8]) {
        let Some(bytes) = payload.get(..8).and_then(|b| <[u8; 8]>::try_from(b).ok()) else {
            return;
        };
        let sent = u64::from_be_bytes(bytes);
        let now = epoch().elapsed().as_micros() as u64;
        let _ = self.0.record(now.saturating_sub(sent).max(1));
    }

    /// (p50, p99) in milliseconds, if anything was recorded.
    pub fn percentiles(&self) -> (Option<f64>, Option<f64>) {
        if self.0.is_empty() {
            return (None, None);
        }
        let ms = |q: f64| Some(self.0.value_at_quantile(q) as f64 / 1000.0);
        (ms(0.50), ms(0.99))
    }
}
