//! `ferry top`: a terminal view of a running daemon's routes, refreshed
//! every second from its admin server (`GET /routes`, `GET /about`): one
//! row per route with its state, messages in and acknowledged a second,
//! deliveries in flight, retries, dead letters, drops, outbox depth and the
//! age of its oldest record, whether its receiver and senders are
//! connected, and generation. Keys
//! sort the rows, move the selection, pause or resume the selected route,
//! and open a tap of it (`ferry tap`, in the same terminal).

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use ratatui::Frame;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Cell, Paragraph, Row, Table, TableState};

use crate::api::{About, ControlReply, RouteState, RouteStatus};
use crate::cli::Failure;
use crate::cli::ctl::call;
use crate::cli::dlq::Admin;

/// What `ferry top` watches.
#[derive(Debug, Clone, clap::Args)]
pub struct TopArgs {
    #[arg(short, long)]
    pub config: std::path::PathBuf,
    /// How often to read the daemon, in milliseconds.
    #[arg(long, default_value_t = 1000)]
    pub interval_ms: u64,
}

/// The column the rows are sorted by (`s` moves to the next).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sort {
    Route,
    Rate,
    InFlight,
    DeadLetters,
    Outbox,
}

impl Sort {
    fn next(self) -> Self {
        match self {
            Sort::Route => Sort::Rate,
            Sort::Rate => Sort::InFlight,
            Sort::InFlight => Sort::DeadLetters,
            Sort::DeadLetters => Sort::Outbox,
            Sort::Outbox => Sort::Route,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Sort::Route => "route",
            Sort::Rate => "in/s",
            Sort::InFlight => "in flight",
            Sort::DeadLetters => "dead letters",
            Sort::Outbox => "outbox",
        }
    }
}

/// What the screen shows.
pub struct View {
    pub about: Option<About>,
    pub routes: Vec<RouteStatus>,
    /// Per route: messages received and acknowledged a second, from the
    /// last two readings.
    pub rates: BTreeMap<String, (f64, f64)>,
    last: BTreeMap<String, (u64, u64, Instant)>,
    pub sort: Sort,
    pub selected: usize,
    /// The last thing done or gone wrong, on the bottom line.
    pub message: String,
}

impl Default for View {
    fn default() -> Self {
        Self {
            about: None,
            routes: Vec::new(),
            rates: BTreeMap::new(),
            last: BTreeMap::new(),
            sort: Sort::Route,
            selected: 0,
            message: String::new(),
        }
    }
}

impl View {
    /// Takes a reading of the routes taken at `now`.
    pub fn update(&mut self, routes: Vec<RouteStatus>, now: Instant) {
        for r in &routes {
            if let Some((received, acked, at)) = self.last.get(&r.id) {
                let secs = now.duration_since(*at).as_secs_f64().max(0.001);
                let per_sec = |now: u64, then: u64| now.saturating_sub(then) as f64 / secs;
                self.rates
                    .insert(r.id.clone(), (per_sec(r.counts.received, *received), per_sec(r.counts.acked, *acked)));
            }
            self.last.insert(r.id.clone(), (r.counts.received, r.counts.acked, now));
        }
        let selected = self.selected_route().map(str::to_owned);
        self.routes = routes;
        self.sort_rows();
        // The selection follows its route when the rows move.
        if let Some(id) = selected {
            self.selected = self.routes.iter().position(|r| r.id == id).unwrap_or(0);
        }
        self.selected = self.selected.min(self.routes.len().saturating_sub(1));
    }

    fn rate(&self, id: &str) -> (f64, f64) {
        self.rates.get(id).copied().unwrap_or_default()
    }

    fn sort_rows(&mut self) {
        let rates = self.rates.clone();
        let rate = |id: &str| rates.get(id).map_or(0.0, |r| r.0);
        match self.sort {
            Sort::Route => self.routes.sort_by(|a, b| a.id.cmp(&b.id)),
            Sort::Rate => self.routes.sort_by(|a, b| rate(&b.id).total_cmp(&rate(&a.id)).then(a.id.cmp(&b.id))),
            Sort::InFlight => self.routes.sort_by(|a, b| b.in_flight.cmp(&a.in_flight).then(a.id.cmp(&b.id))),
            Sort::DeadLetters => {
                self.routes.sort_by(|a, b| b.counts.dead_lettered.cmp(&a.counts.dead_lettered).then(a.id.cmp(&b.id)))
            }
            Sort::Outbox => self.routes.sort_by(|a, b| b.outbox_depth.cmp(&a.outbox_depth).then(a.id.cmp(&b.id))),
        }
    }

    pub fn next_sort(&mut self) {
        self.sort = self.sort.next();
        let selected = self.selected_route().map(str::to_owned);
        self.sort_rows();
        if let Some(id) = selected {
            self.selected = self.routes.iter().position(|r| r.id == id).unwrap_or(0);
        }
    }

    pub fn selected_route(&self) -> Option<&str> {
        self.routes.get(self.selected).map(|r| r.id.as_str())
    }

    pub fn move_selection(&mut self, down: bool) {
        if down {
            self.selected = (self.selected + 1).min(self.routes.len().saturating_sub(1));
        } else {
            self.selected = self.selected.saturating_sub(1);
        }
    }
}

fn state_name(state: RouteState) -> &'static str {
    match state {
        RouteState::Running => "running",
        RouteState::Paused => "paused",
        RouteState::Stopped => "stopped",
    }
}

/// Whether the route's receiver and senders are connected and its targets
/// take messages: `up`, or what is down.
fn links(r: &RouteStatus) -> Cell<'static> {
    let receiver_down = !r.receiver.connected && r.state != RouteState::Stopped;
    let senders_down = r.bindings.iter().filter(|b| !b.sender.connected).count();
    let outages = r.bindings.iter().filter(|b| !b.available).count();
    if !receiver_down && senders_down == 0 && outages == 0 {
        return Cell::from("up").style(Style::new().fg(Color::Green));
    }
    let mut down = Vec::new();
    if receiver_down {
        down.push("rx".to_owned());
    }
    if senders_down > 0 {
        down.push(format!("tx{senders_down}"));
    }
    if outages > 0 {
        down.push(format!("held{outages}"));
    }
    Cell::from(down.join(" ")).style(Style::new().fg(Color::Red))
}

/// Draws the view: a title line, the table, the keys and the last message.
pub fn render(frame: &mut Frame, view: &View) {
    let [title, table, keys] =
        Layout::vertical([Constraint::Length(1), Constraint::Min(3), Constraint::Length(2)]).areas(frame.area());
    let about = view.about.as_ref().map_or_else(
        || "ferry (not reached yet)".to_owned(),
        |a| format!("ferry {} (commit {}){}", a.version, a.commit, if a.read_only { " read-only" } else { "" }),
    );
    frame.render_widget(
        Paragraph::new(format!("{about}  routes: {}  sorted by {}", view.routes.len(), view.sort.name())),
        title,
    );
    // Fits an 80-column terminal.
    let header =
        Row::new(["ROUTE", "STATE", "IN/S", "ACK/S", "INFLIGHT", "RETRY", "DLQ", "DROP", "OUTBOX", "LINKS", "GEN"])
            .style(Style::new().add_modifier(Modifier::BOLD));
    let rows = view.routes.iter().map(|r| {
        let (rate_in, rate_acked) = view.rate(&r.id);
        let color = match r.state {
            RouteState::Running => Color::Green,
            RouteState::Paused => Color::Yellow,
            RouteState::Stopped => Color::Red,
        };
        let outbox = match r.outbox_oldest_age_s {
            Some(age) => format!("{} {age:.0}s", r.outbox_depth),
            None => r.outbox_depth.to_string(),
        };
        Row::new([
            Cell::from(r.id.clone()),
            Cell::from(state_name(r.state)).style(Style::new().fg(color)),
            Cell::from(format!("{rate_in:.1}")),
            Cell::from(format!("{rate_acked:.1}")),
            Cell::from(r.in_flight.to_string()),
            Cell::from(r.counts.retried.to_string()),
            Cell::from(r.counts.dead_lettered.to_string()),
            Cell::from(r.counts.dropped.to_string()),
            Cell::from(outbox),
            links(r),
            Cell::from(r.generation.to_string()),
        ])
    });
    let widths = [
        Constraint::Min(8),
        Constraint::Length(7),
        Constraint::Length(6),
        Constraint::Length(6),
        Constraint::Length(8),
        Constraint::Length(5),
        Constraint::Length(5),
        Constraint::Length(5),
        Constraint::Length(9),
        Constraint::Length(8),
        Constraint::Length(3),
    ];
    let mut state = TableState::default().with_selected((!view.routes.is_empty()).then_some(view.selected));
    frame.render_stateful_widget(
        Table::new(rows, widths).header(header).row_highlight_style(Style::new().add_modifier(Modifier::REVERSED)),
        table,
        &mut state,
    );
    frame.render_widget(
        Paragraph::new(vec![
            Line::from("q quit  s sort  up/down select  p pause/resume  t tap the route"),
            Line::from(view.message.clone()),
        ]),
        keys,
    );
}

/// Runs `ferry top` until `q`: 0, or 2 when no daemon can be reached.
pub async fn run(args: &TopArgs) -> ExitCode {
    match start(args).await {
        Ok((admin, about, terminal)) => watch(args, admin, about, terminal).await,
        Err(failure) => super::exit(Err(failure)),
    }
}

/// Reaches the daemon once before taking over the terminal, so a wrong
/// address or token is a plain error message.
async fn start(args: &TopArgs) -> Result<(Admin, About, ratatui::DefaultTerminal), Failure> {
    let admin = Admin::of_file(&args.config).map_err(Failure::input)?;
    let (_, about) = call(&admin, reqwest::Method::GET, "/about", &[200]).await.map_err(Failure::input)?;
    let terminal = ratatui::try_init().map_err(|e| Failure::input(format!("ferry top needs a terminal: {e}")))?;
    Ok((admin, about, terminal))
}

/// The screen, until `q`.
async fn watch(args: &TopArgs, admin: Admin, about: About, mut terminal: ratatui::DefaultTerminal) -> ExitCode {
    let mut view = View { about: Some(about), ..View::default() };
    let interval = Duration::from_millis(args.interval_ms.max(100));
    let mut next_read = Instant::now();
    let mut tap = None;
    let result: std::io::Result<()> = async {
        loop {
            if Instant::now() >= next_read {
                match call::<Vec<RouteStatus>>(&admin, reqwest::Method::GET, "/routes", &[200]).await {
                    Ok((_, routes)) => view.update(routes, Instant::now()),
                    Err(e) => view.message = e,
                }
                next_read = Instant::now() + interval;
            }
            terminal.draw(|frame| render(frame, &view))?;
            let wait = next_read.saturating_duration_since(Instant::now());
            if !tokio::task::block_in_place(|| event::poll(wait))? {
                continue;
            }
            let Event::Key(key) = tokio::task::block_in_place(event::read)? else { continue };
            if key.kind != KeyEventKind::Press {
                continue;
            }
            match key.code {
                KeyCode::Char('q') | KeyCode::Esc => return Ok(()),
                KeyCode::Char('c') if key.modifiers.contains(KeyModifiers::CONTROL) => return Ok(()),
                KeyCode::Char('s') => view.next_sort(),
                KeyCode::Up | KeyCode::Char('k') => view.move_selection(false),
                KeyCode::Down | KeyCode::Char('j') => view.move_selection(true),
                KeyCode::Char('p') => {
                    if let Some(route) = view.selected_route().map(str::to_owned) {
                        let paused = view.routes.iter().any(|r| r.id == route && r.state == RouteState::Paused);
                        let verb = if paused { "resume" } else { "pause" };
                        let path = format!(
                            "/routes/{}/{verb}",
                            url::form_urlencoded::byte_serialize(route.as_bytes()).collect::<String>()
                        );
                        view.message = match call::<ControlReply>(&admin, reqwest::Method::POST, &path, &[200]).await {
                            Ok((_, reply)) => format!("{}: {}", reply.route, state_name(reply.state)),
                            Err(e) => e,
                        };
                        next_read = Instant::now();
                    }
                }
                KeyCode::Char('t') => {
                    if let Some(route) = view.selected_route() {
                        tap = Some(route.to_owned());
                        return Ok(());
                    }
                }
                _ => {}
            }
        }
    }
    .await;
    ratatui::restore();
    if let Err(e) = result {
        eprintln!("ferry top: {e}");
        return ExitCode::FAILURE;
    }
    match tap {
        Some(route) => {
            println!("tap of route {route} (Ctrl-C ends it)");
            let args = crate::cli::tap::TapArgs {
                route,
                config: args.config.clone(),
                point: "ingress".into(),
                binding: None,
                sample: 1,
                rate: 10,
                payload_bytes: 256,
                count: None,
                format: crate::cli::tap::Format::Text,
            };
            crate::cli::tap::run(&args).await
        }
        None => ExitCode::SUCCESS,
    }
}

#[cfg(test)]
mod tests {
    use ratatui::Terminal;
    use ratatui::backend::TestBackend;

    use super::*;
    use crate::api::{BindingStatus, Connection, RouteCounts, RouteRates};

    fn route(id: &str, state: RouteState, received: u64, dead: u64) -> RouteStatus {
        RouteStatus {
            id: id.into(),
            state,
            in_flight: 0,
            generation: 1,
            counts: RouteCounts { received, acked: received, dead_lettered: dead, ..RouteCounts::default() },
            rates: RouteRates::default(),
            receiver: Connection { name: "in".into(), kind: "mqtt".into(), connected: true },
            bindings: vec![BindingStatus {
                id: "out".into(),
                sender: Connection { name: "out".into(), kind: "sqs".into(), connected: true },
                available: true,
                outbox_depth: dead * 3,
                outbox_oldest_age_s: (dead > 0).then_some(42.4),
            }],
            outbox_depth: dead * 3,
            outbox_oldest_age_s: (dead > 0).then_some(42.4),
            last_progress_s: None,
        }
    }

    fn screen(view: &View) -> String {
        let mut terminal = Terminal::new(TestBackend::new(80, 8)).expect("terminal");
        terminal.draw(|frame| render(frame, view)).expect("draw");
        let buffer = terminal.backend().buffer().clone();
        (0..buffer.area.height)
            .map(|y| (0..buffer.area.width).map(|x| buffer[(x, y)].symbol().to_owned()).collect::<String>())
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[test]
    fn rates_come_from_two_readings_and_the_rows_sort_and_keep_the_selection() {
        let mut view = View::default();
        let t0 = Instant::now();
        view.update(vec![route("b", RouteState::Running, 0, 0), route("a", RouteState::Paused, 0, 5)], t0);
        assert_eq!(view.selected_route(), Some("a"), "sorted by route first");
        view.update(
            vec![route("b", RouteState::Running, 30, 0), route("a", RouteState::Paused, 10, 5)],
            t0 + Duration::from_secs(2),
        );
        assert_eq!(view.rate("b"), (15.0, 15.0));
        view.next_sort();
        assert_eq!(view.sort, Sort::Rate);
        assert_eq!(view.routes[0].id, "b", "the busier route first");
        assert_eq!(view.selected_route(), Some("a"), "the selection follows its route");
        let text = screen(&view);
        assert!(text.contains("sorted by in/s"), "{text}");
        let b = text.lines().find(|l| l.trim_start().starts_with("b ")).expect("a row for b");
        assert!(b.contains("running") && b.contains("15.0"), "{text}");
        let a = text.lines().find(|l| l.trim_start().starts_with("a ")).expect("a row for a");
        assert!(a.contains("paused") && a.contains('5'), "{text}");
        assert!(a.contains("15 42s") && a.contains("up"), "outbox depth and age: {text}");
        view.move_selection(false);
        assert_eq!(view.selected_route(), Some("b"));
        for _ in 0..3 {
            view.next_sort();
        }
        assert_eq!(view.sort, Sort::Outbox);
        assert_eq!(view.routes[0].id, "a", "the deeper outbox first");
    }

    #[test]
    fn a_link_that_is_down_shows_what_is_down() {
        let mut r = route("a", RouteState::Running, 0, 0);
        r.receiver.connected = false;
        r.bindings[0].available = false;
        let mut view = View::default();
        view.update(vec![r], Instant::now());
        let text = screen(&view);
        let a = text.lines().find(|l| l.trim_start().starts_with("a ")).expect("a row for a");
        assert!(a.contains("rx held1"), "{text}");
    }
}
