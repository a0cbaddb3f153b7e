//! A reading of the daemon's own `/metrics` text (OpenMetrics, as
//! prometheus-client writes it, with the `process_*` families added):
//! families with their type, help and unit, and their samples with labels
//! and values. The admin API's per-route counts and the OTLP metrics
//! export both start from it, so each shows exactly what a scrape shows.

/// The text `/metrics` serves: every registered series and the
/// `process_*` families. Synchronous work (encoding, reading `/proc`): run
/// it on a blocking thread.
pub fn render(metrics: &ferry_core::metrics::Metrics) -> String {
    crate::process::with_process_metrics(metrics.render())
}

/// What a family's `# TYPE` line says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
    Info,
    /// Any other type (stateset, summary, gaugehistogram, unknown): read as
    /// gauges, one per sample.
    Other,
}

/// One sample line: `name{labels} value`.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// The sample's own name (`ferry_messages_acked_total`,
    /// `…_bucket`, `…_sum`).
    pub name: String,
    pub labels: Vec<(String, String)>,
    pub value: f64,
    /// The value as written, when it is a whole number (counters and most
    /// gauges are).
    pub integer: Option<i64>,
}

impl Sample {
    /// The value of label `name`.
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }
}

/// A family: its metadata and its samples, in the order written.
#[derive(Debug, Clone, PartialEq)]
pub struct Family {
    /// The family name of its `# TYPE` line (for a counter, without
    /// `_total`).
    pub name: String,
    pub kind: Kind,
    pub help: String,
    pub unit: String,
    pub samples: Vec<Sample>,
}

/// Reads every family of `text`. A line that is not what the format allows
/// is skipped (the text is the daemon's own; a reader must not fail the
/// scrape or the export over one line).
pub fn parse(text: &str) -> Vec<Family> {
    let mut families: Vec<Family> = Vec::new();
    for line in text.lines() {
        if let Some(meta) = line.strip_prefix("# ") {
            let mut parts = meta.splitn(3, ' ');
            let (Some(keyword), Some(name)) = (parts.next(), parts.next()) else { continue };
            let rest = parts.next().unwrap_or("");
            let family = match families.last_mut() {
                Some(f) if f.name == name => f,
                _ => {
                    families.push(Family {
                        name: name.to_owned(),
                        kind: Kind::Other,
                        help: String::new(),
                        unit: String::new(),
                        samples: Vec::new(),
                    });
                    families.last_mut().expect("just pushed")
                }
            };
            match keyword {
                "TYPE" => family.kind = kind(rest),
                "HELP" => family.help = unescape(rest),
                "UNIT" => family.unit = rest.to_owned(),
                _ => {}
            }
            continue;
        }
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some(sample) = sample(line) else { continue };
        match families.last_mut() {
            Some(f) if belongs(&f.name, &sample.name) => f.samples.push(sample),
            _ => families.push(Family {
                name: sample.name.clone(),
                kind: Kind::Other,
                help: String::new(),
                unit: String::new(),
                samples: vec![sample],
            }),
        }
    }
    families
}

fn kind(word: &str) -> Kind {
    match word.trim() {
        "counter" => Kind::Counter,
        "gauge" => Kind::Gauge,
        "histogram" => Kind::Histogram,
        "info" => Kind::Info,
        _ => Kind::Other,
    }
}

/// Whether a sample named `sample` is one of family `family`'s: the name
/// itself or the name with one of the suffixes the format gives samples.
fn belongs(family: &str, sample: &str) -> bool {
    const SUFFIXES: [&str; 7] = ["", "_total", "_created", "_bucket", "_sum", "_count", "_info"];
    sample.strip_prefix(family).is_some_and(|rest| SUFFIXES.contains(&rest))
}

/// `name{a="x",b="y"} value [timestamp]`, or `name value`.
fn sample(line: &str) -> Option<Sample> {
    let (name, labels, rest) = match line.find(['{', ' ']) {
        Some(at) if line.as_bytes()[at] == b'{' => {
            let (labels, after) = label_set(&line[at + 1..])?;
            (&line[..at], labels, after)
        }
        Some(at) => (&line[..at], Vec::new(), &line[at..]),
        None => return None,
    };
    let value_text = rest.split_whitespace().next()?;
    let value = match value_text {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        "NaN" => f64::NAN,
        v => v.parse().ok()?,
    };
    Some(Sample { name: name.to_owned(), labels, value, integer: value_text.parse().ok() })
}

/// The label pairs after a `{`, and what follows the closing `}`.
fn label_set(mut text: &str) -> Option<(Vec<(String, String)>, &str)> {
    let mut labels = Vec::new();
    loop {
        text = text.trim_start_matches(',');
        if let Some(after) = text.strip_prefix('}') {
            return Some((labels, after));
        }
        let (key, after) = text.split_once("=\"")?;
        // The closing quote is the first one no backslash escapes.
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next()? {
                (i, '"') => break i,
                (_, '\\') => {
                    chars.next()?;
                }
                _ => {}
            }
        };
        labels.push((key.to_owned(), unescape(&after[..end])));
        text = &after[end + 1..];
    }
}

/// A HELP text or a label value with its escapes (`\\`, `\n`, and in
/// values `\"`) read.
fn unescape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some(other) => out.push(other),
            None => out.push('\\'),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"# HELP ferry_messages_acked Messages acknowledged at their source.
# TYPE ferry_messages_acked counter
ferry_messages_acked_total{route="a",reason="ok"} 5
ferry_messages_acked_total{route="b\"q\\x\ny",reason="ok"} 2.5
# HELP ferry_delivery_duration_seconds How long a delivery took.
# TYPE ferry_delivery_duration_seconds histogram
# UNIT ferry_delivery_duration_seconds seconds
ferry_delivery_duration_seconds_sum{route="a"} 0.75
ferry_delivery_duration_seconds_count{route="a"} 3
ferry_delivery_duration_seconds_bucket{le="0.1",route="a"} 1
ferry_delivery_duration_seconds_bucket{le="+Inf",route="a"} 3
# TYPE ferry_build info
ferry_build_info{version="1.0"} 1
# TYPE process_open_fds gauge
# HELP process_open_fds Number of open file descriptors.
process_open_fds 12
# EOF
"#;

    #[test]
    fn families_their_metadata_and_samples_are_read() {
        let families = parse(TEXT);
        let names: Vec<_> = families.iter().map(|f| (f.name.as_str(), f.kind)).collect();
        assert_eq!(
            names,
            [
                ("ferry_messages_acked", Kind::Counter),
                ("ferry_delivery_duration_seconds", Kind::Histogram),
                ("ferry_build", Kind::Info),
                ("process_open_fds", Kind::Gauge)
            ]
        );
        let acked = &families[0];
        assert_eq!(acked.help, "Messages acknowledged at their source.");
        assert_eq!(acked.samples[0].label("route"), Some("a"));
        assert_eq!(acked.samples[0].integer, Some(5));
        assert_eq!(acked.samples[1].label("route"), Some("b\"q\\x\ny"), "escapes are read");
        assert_eq!(acked.samples[1].value, 2.5);
        assert_eq!(acked.samples[1].integer, None);
        let histogram = &families[1];
        assert_eq!(histogram.unit, "seconds");
        assert_eq!(histogram.samples.len(), 4);
        assert_eq!(histogram.samples[3].value, 3.0);
        assert_eq!(histogram.samples[3].label("le"), Some("+Inf"));
        assert_eq!(families[3].samples[0].labels, []);
        assert_eq!(families[3].samples[0].value, 12.0);
    }

    #[test]
    fn lines_that_are_not_samples_are_skipped() {
        let families = parse("garbage\nx{a=\"unterminated 1\n# TYPE y gauge\ny 2\ny{a=\"1\"} notanumber\n");
        assert_eq!(families.len(), 1, "{families:?}");
        assert_eq!(families[0].samples.len(), 1);
    }
}
