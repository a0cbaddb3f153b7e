//! `ferry tap ROUTE`: live messages of a running route, read from its admin
//! server's `/tap/{route}` stream (see [`ferry_core::tap`]), printed as text
//! or JSON lines until `--count` events arrived or the stream ends.

use std::io::Write as _;
use std::process::ExitCode;

use ferry_core::tap::TapEvent;

use crate::cli::Failure;
use crate::cli::dlq::Admin;

/// How `ferry tap` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// One line per message: time, point, identity, addresses, headers and
    /// the payload preview.
    Text,
    /// The events as the admin server sends them, one JSON object per line.
    Json,
}

/// What to tap.
#[derive(Debug, Clone, clap::Args)]
pub struct TapArgs {
    /// The route's id.
    pub route: String,
    #[arg(short, long)]
    pub config: std::path::PathBuf,
    /// Where on the route: ingress (after the header rules),
    /// after-processors (with the planned addresses) or egress (each
    /// binding's copy after its header mapper).
    #[arg(long, default_value = "ingress", value_parser = ["ingress", "after-processors", "egress"])]
    pub point: String,
    /// At egress, only this binding's copies.
    #[arg(long)]
    pub binding: Option<String>,
    /// Every n-th message.
    #[arg(long, default_value_t = 1)]
    pub sample: u64,
    /// Messages a second at most (the daemon caps it at 1000); what is left
    /// out is counted in the next message's `skipped`.
    #[arg(long, default_value_t = 10)]
    pub rate: u32,
    /// Payload bytes shown at most.
    #[arg(long, default_value_t = 256)]
    pub payload_bytes: usize,
    /// Stop after this many messages.
    #[arg(long)]
    pub count: Option<u64>,
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
}

/// Runs the tap; exit 0 when the stream ended or `--count` was reached, 2
/// when the daemon could not be reached or refused the tap.
pub async fn run(args: &TapArgs) -> ExitCode {
    match open(args).await {
        Ok(response) => read_events(response, args).await,
        Err(failure) => super::exit(Err(failure)),
    }
}

/// The tap's event stream, or why the daemon cannot give it.
async fn open(args: &TapArgs) -> Result<reqwest::Response, Failure> {
    let admin = Admin::of_file(&args.config).map_err(Failure::input)?;
    let mut query = url::form_urlencoded::Serializer::new(String::new());
    query
        .append_pair("point", &args.point)
        .append_pair("sample", &args.sample.to_string())
        .append_pair("rate", &args.rate.to_string())
        .append_pair("payload_bytes", &args.payload_bytes.to_string());
    if let Some(b) = &args.binding {
        query.append_pair("binding", b);
    }
    let path = format!("/tap/{}?{}", encode(&args.route), query.finish());
    let client = reqwest::Client::new();
    let response = admin
        .request(&client, reqwest::Method::GET, &path)
        .send()
        .await
        .map_err(|e| Failure::input(format!("cannot reach the daemon's admin server: {e}")))?;
    if !response.status().is_success() {
        let status = response.status();
        let body = response.text().await.unwrap_or_default();
        let why = serde_json::from_str::<crate::api::ErrorReply>(&body).map_or(body, |reply| reply.error);
        return Err(Failure::input(format!("the daemon refused the tap ({status}): {why}")));
    }
    Ok(response)
}

/// The data of server-sent events, read from a stream's bytes as the event
/// stream format says: lines end with CRLF, LF or CR; a blank line ends an
/// event; `data` fields join with `\n`; a line starting with `:` is a
/// comment. Bytes wait in one buffer until their line is whole, so a
/// character split across network chunks is decoded whole.
#[derive(Default)]
struct EventStream {
    pending: Vec<u8>,
    data: Vec<String>,
}

impl EventStream {
    /// Takes the next bytes of the stream; the data of each event they
    /// complete.
    fn feed(&mut self, chunk: &[u8]) -> Vec<String> {
        self.pending.extend_from_slice(chunk);
        let mut events = Vec::new();
        while let Some(end) = self.pending.iter().position(|b| *b == b'\n' || *b == b'\r') {
            let terminator = match (self.pending[end], self.pending.get(end + 1)) {
                (b'\r', Some(b'\n')) => 2,
                // A CR last in the buffer may be the first half of a CRLF.
                (b'\r', None) => break,
                _ => 1,
            };
            let line: Vec<u8> = self.pending.drain(..end + terminator).take(end).collect();
            let line = String::from_utf8_lossy(&line);
            if line.is_empty() {
                if !self.data.is_empty() {
                    events.push(std::mem::take(&mut self.data).join("\n"));
                }
                continue;
            }
            let (field, value) = line.split_once(':').unwrap_or((&line, ""));
            if field == "data" {
                self.data.push(value.strip_prefix(' ').unwrap_or(value).to_owned());
            }
        }
        events
    }
}

async fn read_events(mut response: reqwest::Response, args: &TapArgs) -> ExitCode {
    let mut stream = EventStream::default();
    let mut seen = 0u64;
    let mut out = std::io::stdout().lock();
    loop {
        let chunk = match response.chunk().await {
            Ok(Some(chunk)) => chunk,
            Ok(None) => return ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("the tap stream broke: {e}");
                return ExitCode::from(2);
            }
        };
        for text in stream.feed(&chunk) {
            let line = match args.format {
                Format::Json => text,
                Format::Text => match serde_json::from_str::<TapEvent>(&text) {
                    Ok(event) => text_line(&event),
                    Err(_) => text,
                },
            };
            if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
                return ExitCode::SUCCESS; // the reader went away (a closed pipe)
            }
            seen += 1;
            if args.count.is_some_and(|n| seen >= n) {
                return ExitCode::SUCCESS;
            }
        }
    }
}

/// `12:00:01.250 egress out id=m-1 -> bridged/a {kind=temp, …} (12 B) payload`
fn text_line(e: &TapEvent) -> String {
    let (secs, ms) = (e.at_ms.div_euclid(1000), e.at_ms.rem_euclid(1000));
    let clock = format!("{:02}:{:02}:{:02}.{ms:03}", secs / 3600 % 24, secs / 60 % 60, secs % 60);
    let mut line = format!("{clock} {}", e.point);
    if let Some(b) = &e.binding {
        line.push_str(&format!(" {b}"));
    }
    line.push_str(&format!(" id={}", e.id));
    if let Some(s) = &e.subject {
        line.push_str(&format!(" subject={s}"));
    }
    if !e.addresses.is_empty() {
        line.push_str(&format!(" -> {}", e.addresses.join(", ")));
    }
    let h: Vec<String> = e
        .headers
        .iter()
        .map(|(k, v)| match v.as_str() {
            Some(s) => format!("{k}={s}"),
            None => format!("{k}={v}"),
        })
        .collect();
    line.push_str(&format!(" {{{}}}", h.join(", ")));
    line.push_str(&format!(" ({} B)", e.payload_size));
    match (&e.payload, &e.payload_base64) {
        (Some(p), _) => line.push_str(&format!(" {p:?}")),
        (None, Some(b)) => line.push_str(&format!(" base64:{b}")),
        _ => {}
    }
    if e.truncated {
        line.push('…');
    }
    if e.skipped > 0 {
        line.push_str(&format!(" [{} skipped]", e.skipped));
    }
    line
}

/// A route id as a URL path segment.
fn encode(segment: &str) -> String {
    segment
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::EventStream;

    #[test]
    fn a_character_split_across_chunks_arrives_whole() {
        let event = "data: {\"subject\":\"Malmö ✓\"}\n\n".as_bytes();
        let split = event.iter().position(|b| *b == 0xC3).expect("the ö") + 1;
        let mut stream = EventStream::default();
        assert!(stream.feed(&event[..split]).is_empty());
        assert_eq!(stream.feed(&event[split..]), vec!["{\"subject\":\"Malmö ✓\"}".to_owned()]);
    }

    #[test]
    fn crlf_cr_comments_and_several_data_lines_are_read_as_the_format_says() {
        let mut stream = EventStream::default();
        let got = stream.feed(b": keep-alive\r\n\r\ndata: one\r\ndata:two\r\n\r\ndata: three\r");
        assert_eq!(got, vec!["one\ntwo".to_owned()], "a comment is no event");
        // The CR may be half of a CRLF: the event ends with the next line.
        assert_eq!(stream.feed(b"\n\r\n"), vec!["three".to_owned()]);
        assert_eq!(stream.feed(b"data: four\r\rdata: five\n\n"), vec!["four".to_owned(), "five".to_owned()]);
    }
}
