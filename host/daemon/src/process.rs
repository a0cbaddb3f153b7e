//! The `process_*` metrics Prometheus' client libraries export, read from
//! `/proc/self` at each scrape: CPU seconds, resident and virtual memory,
//! open and allowed file descriptors, threads and start time. They are
//! added to `/metrics` under their conventional names (no `ferry_`
//! prefix), so dashboards and alerts written for any process work.
//! Elsewhere than Linux there is no `/proc`, and none is exported.

use std::fmt::Write as _;

/// Linux reports CPU times in clock ticks of `USER_HZ`, which the kernel
/// ABI fixes at 100 on every architecture.
const TICKS_PER_SECOND: f64 = 100.0;

/// The families: name, type and help, as Prometheus' client libraries
/// name and describe them (and the book's metrics reference lists them).
pub const FAMILIES: [(&str, &str, &str); 7] = [
    ("process_cpu_seconds", "counter", "User and system CPU time spent in seconds."),
    ("process_resident_memory_bytes", "gauge", "Resident memory size in bytes."),
    ("process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes."),
    ("process_open_fds", "gauge", "Number of open file descriptors."),
    ("process_max_fds", "gauge", "Maximum number of open file descriptors."),
    ("process_threads", "gauge", "Number of OS threads in the process."),
    ("process_start_time_seconds", "gauge", "Start time of the process since unix epoch in seconds."),
];

/// The rows of [`FAMILIES`] for the metrics reference's table.
pub fn reference_rows() -> String {
    let mut out = String::new();
    for (name, kind, help) in FAMILIES {
        let scraped = if kind == "counter" { format!("{name}_total") } else { name.to_owned() };
        let _ = writeln!(out, "| `{scraped}` | {kind} | — | {help} (Linux, from `/proc/self`) |");
    }
    out
}

/// The `process_*` families in OpenMetrics text, or nothing without `/proc`.
pub fn exposition() -> String {
    let Some(stat) = read("/proc/self/stat") else { return String::new() };
    // Fields after the command name (which may hold spaces) in brackets.
    let fields: Vec<&str> =
        stat.rsplit_once(')').map(|(_, rest)| rest.split_whitespace().collect()).unwrap_or_default();
    let field = |n: usize| fields.get(n - 3).and_then(|v| v.parse::<f64>().ok());
    let status = read("/proc/self/status").unwrap_or_default();
    let status_kib = |key: &str| {
        status.lines().find_map(|l| l.strip_prefix(key)).and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
    };
    let mut out = String::new();
    let mut family = |name: &str, value: Option<f64>| {
        let Some((_, kind, help)) = FAMILIES.iter().find(|(n, _, _)| *n == name) else { return };
        if let Some(v) = value {
            let _ = writeln!(out, "# TYPE {name} {kind}\n# HELP {name} {help}");
            let sample = if *kind == "counter" { format!("{name}_total") } else { name.to_owned() };
            let _ = writeln!(out, "{sample} {v}");
        }
    };
    let cpu = field(14).zip(field(15)).map(|(user, system)| (user + system) / TICKS_PER_SECOND);
    family("process_cpu_seconds", cpu);
    family("process_resident_memory_bytes", status_kib("VmRSS:").map(|k| k * 1024.0));
    family("process_virtual_memory_bytes", status_kib("VmSize:").map(|k| k * 1024.0));
    let open = std::fs::read_dir("/proc/self/fd").ok().map(|d| d.count() as f64);
    family("process_open_fds", open);
    let max = read("/proc/self/limits").and_then(|l| {
        l.lines().find(|l| l.starts_with("Max open files"))?.split_whitespace().nth(3)?.parse::<f64>().ok()
    });
    family("process_max_fds", max);
    family("process_threads", status_kib("Threads:"));
    let boot =
        read("/proc/stat").and_then(|s| s.lines().find_map(|l| l.strip_prefix("btime "))?.trim().parse::<f64>().ok());
    let start = boot.zip(field(22)).map(|(boot, ticks)| boot + ticks / TICKS_PER_SECOND);
    family("process_start_time_seconds", start);
    out
}

fn read(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

/// `text` (an OpenMetrics exposition ending in `# EOF`) with the process
/// families before its end.
pub fn with_process_metrics(text: String) -> String {
    let process = exposition();
    match text.rfind("# EOF") {
        Some(at) => format!("{}{process}{}", &text[..at], &text[at..]),
        None => text + &process,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_process_families_are_read_from_proc() {
        let text = with_process_metrics("ferry_x 1\n# EOF\n".to_owned());
        assert!(text.ends_with("# EOF\n"), "{text}");
        for name in
            ["process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds", "process_max_fds"]
        {
            let line =
                text.lines().find(|l| l.starts_with(&format!("{name} "))).unwrap_or_else(|| panic!("{name}: {text}"));
            let value: f64 = line.rsplit(' ').next().and_then(|v| v.parse().ok()).expect("a number");
            assert!(value >= 0.0, "{line}");
        }
        let rss = text.lines().find_map(|l| l.strip_prefix("process_resident_memory_bytes ")).expect("rss");
        assert!(rss.parse::<f64>().expect("number") > 1_000_000.0, "a test process has more than 1 MB resident");
        let start = text.lines().find_map(|l| l.strip_prefix("process_start_time_seconds ")).expect("start");
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_secs_f64();
        let start: f64 = start.parse().expect("number");
        assert!(start <= now + 1.0 && start > now - 86_400.0, "started within a day: {start} vs {now}");
    }

    #[test]
    fn the_reference_lists_every_family() {
        let rows = reference_rows();
        assert_eq!(rows.lines().count(), FAMILIES.len());
        for name in ["process_cpu_seconds_total", "process_resident_memory_bytes", "process_start_time_seconds"] {
            assert!(rows.contains(&format!("| `{name}` |")), "{name} missing:\n{rows}");
        }
        for line in exposition().lines().filter_map(|l| l.strip_prefix("# TYPE ")) {
            let name = line.split(' ').next().unwrap_or_default();
            assert!(FAMILIES.iter().any(|(n, _, _)| *n == name), "{name} is exported but not in FAMILIES");
        }
    }
}
