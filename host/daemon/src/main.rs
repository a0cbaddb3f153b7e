//! `ferry`: the message bridge daemon's command line.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};
use ferry_daemon::cli;
use ferry_daemon::logging::{self, LogFormat};
use ferry_daemon::telemetry::{Settings, Telemetry};

/// jemalloc instead of the system allocator (see Cargo.toml).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// `ferry --version`: the version, the git commit it was built from and
/// the plugin contract it hosts (what a component must be built against).
fn version_line() -> &'static str {
    static LINE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    LINE.get_or_init(|| {
        format!(
            "{} (commit {}, plugin contract ferry:plugin@{})",
            env!("CARGO_PKG_VERSION"),
            env!("FERRY_COMMIT"),
            ferry_wasm::registry::PLUGIN_VERSION
        )
    })
}

#[derive(Parser)]
#[command(
    name = "ferry",
    version = version_line(),
    about = "Moves messages between MQTT 5, SQS, AMQP, NATS, Redis Streams, Kafka, HTTP, server-sent events and SimpleMQ through WebAssembly processors"
)]
struct Cli {
    /// Log line format.
    #[arg(long, global = true, value_enum, default_value = "text")]
    log_format: LogFormat,
    /// Log level or filter (overridden by the FERRY_LOG environment
    /// variable); `info` by default, `error` for `ferry test`, whose report
    /// already says what its routes would log as warnings.
    #[arg(long, global = true)]
    log_level: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the bridge until SIGTERM or SIGINT; SIGHUP reloads plugins.
    Run {
        /// Config file: ferry's TOML, or an mqbridge config (`.jsonnet`,
        /// `.json`) read as ferry routes (`ferry render` shows them).
        #[arg(short, long)]
        config: PathBuf,
        /// Also reload the config file on SIGHUP: routes whose settings
        /// changed are drained and restarted, the others keep running.
        #[arg(long)]
        watch: bool,
        /// Serve the admin server on this address instead of `[admin]
        /// listen` (checked the same way); port 0 picks a free port, which
        /// is announced on stdout as every listener's is.
        #[arg(long, value_name = "ADDR")]
        admin_listen: Option<String>,
    },
    /// Check a config file and the plugins it uses; exit 0 when valid.
    Validate {
        #[arg(short, long)]
        config: PathBuf,
        /// Also connect to every receiver's and sender's broker or queue
        /// (under probe client ids) and report each one.
        #[arg(long)]
        connect: bool,
        /// Also print, per route and binding, what of a message crosses to
        /// the target transport, where it lands and what is lost (the
        /// fidelity report).
        #[arg(long)]
        explain: bool,
        /// With --explain: exit 1 when something is lost.
        #[arg(long, requires = "explain")]
        strict: bool,
    },
    /// Run test files: fixture messages through a config's routes (ingress
    /// mapping, header rules, processors, header mappers, egress mapping)
    /// with no broker, compared with what each case expects. Exit 0 when
    /// every case passes, else 1.
    Test {
        #[arg(required = true)]
        files: Vec<PathBuf>,
        #[arg(long, value_enum, default_value = "text")]
        format: ferry_daemon::cli::test::Format,
    },
    /// Watch live messages of a running route through its admin server
    /// (sampled and rate limited; delivery is not affected).
    Tap(ferry_daemon::cli::tap::TapArgs),
    /// A terminal view of a running daemon's routes, refreshed every
    /// second: state, rates, in flight, retries, dead letters; keys sort,
    /// pause or resume a route, or open a tap of it.
    Top(ferry_daemon::cli::top::TopArgs),
    /// Print the resolved config as JSON (secrets masked).
    Render {
        #[arg(short, long)]
        config: PathBuf,
    },
    /// Inspect plugin components.
    #[command(subcommand)]
    Plugins(PluginsCommand),
    /// Dead letters in the store (a running daemon's through its admin server).
    #[command(subcommand)]
    Dlq(DlqCommand),
    /// Control a running daemon through its admin server: its routes'
    /// state, pause, resume or drain a route, reload the config and plugins.
    #[command(subcommand)]
    Ctl(CtlCommand),
    /// The shared_outbox store (a running daemon's through its admin server).
    #[command(subcommand)]
    Outbox(OutboxCommand),
    /// Print the JSON Schema of the config file (what `#:schema` lines and
    /// editors validate against).
    Schema,
    /// Print a shell completion script: `ferry completions bash >
    /// /etc/bash_completion.d/ferry` (also zsh, fish, elvish, powershell).
    Completions { shell: clap_complete::Shell },
    /// Print the man page ferry(1); with --dir, write it and one page per
    /// subcommand (ferry-run.1, ferry-dlq-list.1, …) into DIR.
    Man {
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Write the book's generated reference pages into DIR: config.md
    /// (every config key, from the config types), cli.md (every command
    /// and option, from this parser) and metrics.md (every metric, from
    /// the registry); then copy each key table into the book pages (under
    /// DIR's parent) that mark its place with `<!-- reference: ID … -->`.
    Reference {
        #[arg(long, default_value = "docs/src/reference")]
        dir: PathBuf,
    },
}

#[derive(Subcommand)]
enum CtlCommand {
    /// Each route's state (running, paused, stopped), deliveries in flight
    /// and generation.
    Routes {
        #[arg(short, long)]
        config: PathBuf,
    },
    /// Stop a route taking messages; what it holds finishes, the rest waits
    /// at its source. Kept across reloads until `resume`.
    Pause {
        #[arg(short, long)]
        config: PathBuf,
        route: String,
    },
    /// Let a paused route take messages again.
    Resume {
        #[arg(short, long)]
        config: PathBuf,
        route: String,
    },
    /// Pause a route and wait until it holds no message; exit 1 when some
    /// are still held after --timeout-s (the route stays paused).
    Drain {
        #[arg(short, long)]
        config: PathBuf,
        route: String,
        #[arg(long, default_value_t = 60)]
        timeout_s: u64,
    },
    /// Reload the daemon's config file and plugins (as SIGHUP does with
    /// --watch); prints each route's generation, or why nothing changed
    /// (exit 1).
    Reload {
        #[arg(short, long)]
        config: PathBuf,
    },
}

#[derive(Subcommand)]
enum DlqCommand {
    /// Dead letters, oldest first.
    List {
        #[arg(short, long)]
        config: PathBuf,
        /// Only this route's.
        #[arg(long)]
        route: Option<String>,
        #[arg(long, default_value_t = 100)]
        limit: usize,
        /// One JSON object per line instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// One dead letter: headers, reason, attempts and a payload preview.
    Show {
        #[arg(short, long)]
        config: PathBuf,
        id: u64,
    },
    /// Send dead letters again through their route's bindings (fresh id,
    /// x-bridge.causation-id naming the original), removing each one sent.
    Replay {
        #[arg(short, long)]
        config: PathBuf,
        ids: Vec<u64>,
        /// Every dead letter of this route.
        #[arg(long)]
        route: Option<String>,
        /// Say what would be sent; send and remove nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Remove dead letters for good.
    Purge {
        #[arg(short, long)]
        config: PathBuf,
        ids: Vec<u64>,
        /// Every dead letter of this route.
        #[arg(long)]
        route: Option<String>,
    },
}

#[derive(Subcommand)]
enum OutboxCommand {
    /// Pending records and the oldest one's age per partition.
    Stats {
        #[arg(short, long)]
        config: PathBuf,
    },
}

/// A command's outcome as its exit code: 0, or its failure's.
fn done(outcome: Result<(), cli::Failure>) -> ExitCode {
    cli::exit(outcome.map(|()| ExitCode::SUCCESS))
}

fn block_on(f: impl std::future::Future<Output = ExitCode>) -> ExitCode {
    match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt.block_on(f),
        Err(e) => {
            eprintln!("cannot start the runtime: {e}");
            ExitCode::FAILURE
        }
    }
}

#[derive(Subcommand)]
enum PluginsCommand {
    /// Each component in DIR (default `plugins`): name, world, size, and
    /// whether it loads.
    List {
        #[arg(default_value = "plugins")]
        dir: PathBuf,
    },
    /// Whether FILE would load, and why not.
    Check { file: PathBuf },
    /// Write a new plugin project NAME (in ./NAME, or --dir) for LANG that
    /// builds to a component with one command and has a first test.
    New {
        name: String,
        #[arg(long, value_enum)]
        lang: ferry_daemon::cli::scaffold::Lang,
        /// A processor, or a transport component (receiver and sender).
        #[arg(long, value_enum, default_value = "processor")]
        kind: ferry_daemon::cli::scaffold::Kind,
        /// Where to write it (default: ./NAME); must be empty or absent.
        #[arg(long)]
        dir: Option<PathBuf>,
        /// The Rust SDK (processors/sdk of a ferry checkout); default: the
        /// checkout this ferry was built from.
        #[arg(long)]
        sdk: Option<PathBuf>,
    },
    /// Print the plugin contract (wit/plugin.wit) for other toolchains.
    Wit,
    /// Compile FILEs into the compile cache DIR (`plugins.cache_dir`), so
    /// that the daemon reads them back instead of compiling them.
    Compile {
        #[arg(long)]
        cache_dir: PathBuf,
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
}

/// The generated pages of the book's reference, by file name.
fn reference_pages() -> [(&'static str, String); 3] {
    [
        ("config.md", ferry_config::reference::config_markdown(&ferry_daemon::transports::json_schema())),
        ("cli.md", cli_markdown(&Cli::command())),
        ("metrics.md", ferry_core::metrics::reference_markdown() + &ferry_daemon::process::reference_rows()),
    ]
}

/// `ferry reference`: writes [`reference_pages`] into `dir`, then the key
/// tables into the book pages around it ([`fill_page`]).
fn reference(dir: &std::path::Path) -> ExitCode {
    let pages = reference_pages();
    let written = std::fs::create_dir_all(dir)
        .and_then(|()| pages.iter().try_for_each(|(name, text)| std::fs::write(dir.join(name), text)));
    if let Err(e) = written {
        eprintln!("cannot write the reference pages into {}: {e}", dir.display());
        return ExitCode::FAILURE;
    }
    let tables = anchored_tables(&pages[0].1);
    let book = dir.parent().unwrap_or(std::path::Path::new("."));
    for page in book_pages(book, dir) {
        let Ok(text) = std::fs::read_to_string(&page) else { continue };
        match fill_page(&text, &tables) {
            Ok(filled) if filled != text => {
                if let Err(e) = std::fs::write(&page, filled) {
                    eprintln!("cannot write {}: {e}", page.display());
                    return ExitCode::FAILURE;
                }
            }
            Ok(_) => {}
            Err(e) => {
                eprintln!("{}: {e}", page.display());
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}

/// The Markdown pages under `book`, but those in `skip` (the reference's
/// own), in name order.
fn book_pages(book: &std::path::Path, skip: &std::path::Path) -> Vec<PathBuf> {
    let mut pages = Vec::new();
    let mut dirs = vec![book.to_path_buf()];
    while let Some(d) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                if path.canonicalize().ok() != skip.canonicalize().ok() {
                    dirs.push(path);
                }
            } else if path.extension().is_some_and(|e| e == "md") {
                pages.push(path);
            }
        }
    }
    pages.sort();
    pages
}

/// The tables of the config reference by anchor (`<!-- ANCHOR: ID -->` …
/// `<!-- ANCHOR_END: ID -->`), each with its lines' newlines.
fn anchored_tables(config: &str) -> std::collections::BTreeMap<String, String> {
    let mut tables = std::collections::BTreeMap::new();
    let mut open: Option<(String, String)> = None;
    for line in config.lines() {
        if let Some(id) = line.strip_prefix("<!-- ANCHOR: ").and_then(|l| l.strip_suffix(" -->")) {
            open = Some((id.to_owned(), String::new()));
        } else if line.starts_with("<!-- ANCHOR_END: ") {
            if let Some((id, table)) = open.take() {
                tables.insert(id, table);
            }
        } else if let Some((_, table)) = open.as_mut() {
            table.push_str(line);
            table.push('\n');
        }
    }
    tables
}

/// How a page marks where a key table of the reference goes; the table
/// follows, up to [`TABLE_END`]. Pages carry the table itself (not an
/// mdBook include), so they read whole in a repository browser too.
const TABLE_START: &str = "<!-- reference: ";
const TABLE_END: &str = "<!-- /reference -->";

/// `page` with the table `ID` of `tables` in each `<!-- reference: ID … -->`
/// block (and in place of each `{{#include ../reference/config.md:ID}}`,
/// the form pages had before); an ID the reference lacks is an error.
fn fill_page(page: &str, tables: &std::collections::BTreeMap<String, String>) -> Result<String, String> {
    let mut out = String::with_capacity(page.len());
    let mut lines = page.lines();
    let table = |id: &str| tables.get(id).ok_or_else(|| format!("the reference has no table {id}"));
    while let Some(line) = lines.next() {
        let id = if let Some(rest) = line.strip_prefix(TABLE_START) {
            let id = rest.split(' ').next().unwrap_or_default();
            // Skip the old table, up to its end marker.
            if !lines.by_ref().any(|l| l == TABLE_END) {
                return Err(format!("the table {id} has no end marker ({TABLE_END})"));
            }
            id.to_owned()
        } else if let Some(id) =
            line.strip_prefix("{{#include ../reference/config.md:").and_then(|l| l.strip_suffix("}}"))
        {
            id.to_owned()
        } else {
            out.push_str(line);
            out.push('\n');
            continue;
        };
        out.push_str(&format!(
            "{TABLE_START}{id} (written by `ferry reference` from reference/config.md; do not edit) -->\n"
        ));
        out.push_str(table(&id)?);
        out.push_str(TABLE_END);
        out.push('\n');
    }
    Ok(out)
}

/// The CLI reference page: every command, its options and their help, as
/// the parser defines them.
fn cli_markdown(root: &clap::Command) -> String {
    let mut out = String::from(
        "# Command line\n\n\
         <!-- Generated by `ferry reference --dir docs/src/reference` from the parser; do not edit. -->\n\n\
         Every command of `ferry`, from the definitions its parser uses (so `ferry COMMAND --help`\n\
         says the same). [The CLI](../operating/cli.md) says what each is for.\n",
    );
    let globals: Vec<&clap::Arg> = root.get_arguments().filter(|a| a.is_global_set()).collect();
    if !globals.is_empty() {
        out.push_str("\n## Global options\n\n");
        options_table(&mut out, &globals);
    }
    for sub in root.get_subcommands().filter(|s| s.get_name() != "help") {
        command_section(&mut out, sub, "ferry");
    }
    // One blank line between blocks, one newline at the end.
    while out.contains("\n\n\n") {
        out = out.replace("\n\n\n", "\n\n");
    }
    format!("{}\n", out.trim_end())
}

fn command_section(out: &mut String, command: &clap::Command, parent: &str) {
    use std::fmt::Write as _;
    let path = format!("{parent} {}", command.get_name());
    let subcommands: Vec<&clap::Command> = command.get_subcommands().filter(|s| s.get_name() != "help").collect();
    let _ = write!(out, "\n## `{path}`\n\n");
    if let Some(about) = command.get_long_about().or_else(|| command.get_about()) {
        let about = one_paragraph(&about.to_string());
        let stop = if about.ends_with('.') { "" } else { "." };
        let _ = write!(out, "{about}{stop}\n\n");
    }
    let positionals: Vec<&clap::Arg> = command.get_positionals().collect();
    let options: Vec<&clap::Arg> = command
        .get_arguments()
        .filter(|a| !a.is_positional() && !a.is_global_set() && !["help", "version"].contains(&a.get_id().as_str()))
        .collect();
    let mut usage = path.clone();
    if !options.is_empty() {
        usage.push_str(" [OPTIONS]");
    }
    for arg in &positionals {
        let name = arg
            .get_value_names()
            .and_then(|v| v.first())
            .map_or_else(|| arg.get_id().to_string().to_uppercase(), |v| v.to_string());
        let many = matches!(arg.get_num_args(), Some(n) if n.max_values() > 1);
        let name = if many { format!("{name}…") } else { name };
        usage.push(' ');
        usage.push_str(&if arg.is_required_set() { name } else { format!("[{name}]") });
    }
    if !subcommands.is_empty() {
        usage.push_str(" COMMAND");
    }
    let _ = write!(out, "```text\n{usage}\n```\n\n");
    let args: Vec<&clap::Arg> = positionals.into_iter().chain(options).collect();
    if !args.is_empty() {
        options_table(out, &args);
    }
    for sub in subcommands {
        command_section(out, sub, &path);
    }
}

fn options_table(out: &mut String, args: &[&clap::Arg]) {
    use std::fmt::Write as _;
    out.push_str("| option | meaning |\n| --- | --- |\n");
    for arg in args {
        let value = arg.get_value_names().and_then(|v| v.first()).map(ToString::to_string);
        let takes_value = arg.get_action().takes_values();
        let mut name = match (arg.get_short(), arg.get_long()) {
            (Some(s), Some(l)) => format!("`-{s}`, `--{l}`"),
            (None, Some(l)) => format!("`--{l}`"),
            (Some(s), None) => format!("`-{s}`"),
            (None, None) => format!("`{}`", value.clone().unwrap_or_else(|| arg.get_id().to_string().to_uppercase())),
        };
        if takes_value && !arg.is_positional() {
            let v = value.unwrap_or_else(|| arg.get_id().to_string().to_uppercase());
            name.push_str(&format!(" `{v}`"));
        }
        let mut help =
            arg.get_long_help().or_else(|| arg.get_help()).map(|h| one_paragraph(&h.to_string())).unwrap_or_default();
        if !help.is_empty() && !help.ends_with('.') {
            help.push('.');
        }
        // A flag's true and false are not choices worth listing.
        let choices: Vec<String> = if takes_value {
            arg.get_possible_values()
                .iter()
                .filter(|p| !p.is_hide_set())
                .map(|p| format!("`{}`", p.get_name()))
                .collect()
        } else {
            Vec::new()
        };
        if !choices.is_empty() {
            help.push_str(&format!(" One of {}.", choices.join(", ")));
        }
        let defaults: Vec<String> =
            arg.get_default_values().iter().map(|d| format!("`{}`", d.to_string_lossy())).collect();
        if !defaults.is_empty() {
            help.push_str(&format!(" Default {}.", defaults.join(", ")));
        }
        if arg.is_required_set() && !arg.is_positional() {
            help.push_str(" Required.");
        }
        let _ = writeln!(out, "| {name} | {} |", help.trim().replace('|', "\\|"));
    }
    out.push('\n');
}

/// Help text as one paragraph.
fn one_paragraph(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `ferry man`: ferry(1) on stdout, or every page into `dir`.
fn man(dir: Option<PathBuf>) -> ExitCode {
    let command = Cli::command();
    let result = match dir {
        None => clap_mangen::Man::new(command).render(&mut std::io::stdout()),
        Some(dir) => std::fs::create_dir_all(&dir).and_then(|()| write_pages(&dir, command, "")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cannot write the man page: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Writes `<prefix><name>.1` for `command` and its subcommands.
fn write_pages(dir: &std::path::Path, command: clap::Command, prefix: &str) -> std::io::Result<()> {
    let name = format!("{prefix}{}", command.get_name());
    let command = command.name(name.clone());
    let mut page = Vec::new();
    clap_mangen::Man::new(command.clone()).render(&mut page)?;
    std::fs::write(dir.join(format!("{name}.1")), page)?;
    for sub in command.get_subcommands().filter(|s| s.get_name() != "help") {
        write_pages(dir, sub.clone(), &format!("{name}-"))?;
    }
    Ok(())
}

fn main() -> ExitCode {
    // One TLS provider for every client in the process (MQTT, AMQP, HTTP,
    // SQS, NATS, the components' wasi:http), chosen here rather than left
    // to rustls' crate features: a dependency that also enables ring would
    // otherwise leave it unable to choose, and every TLS client would panic.
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    // `-c bridges.jsonnet` (or `.json`): an mqbridge config, read as routes.
    ferry_config::read_foreign_with(ferry_daemon::mqbridge::read);
    let cli = Cli::parse();
    let default_level = if matches!(cli.command, Command::Test { .. }) { "error" } else { "info" };
    logging::init(cli.log_format, cli.log_level.as_deref().unwrap_or(default_level));
    match cli.command {
        Command::Completions { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "ferry", &mut std::io::stdout());
            ExitCode::SUCCESS
        }
        Command::Man { dir } => man(dir),
        Command::Reference { dir } => reference(&dir),
        Command::Schema => match serde_json::to_string_pretty(&ferry_daemon::transports::json_schema()) {
            Ok(text) => {
                println!("{text}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("cannot print the schema: {e}");
                ExitCode::FAILURE
            }
        },
        Command::Validate { config, connect, explain, strict } => {
            use ferry_daemon::cli::validate;
            let checks = validate::validate(&config)
                .and_then(|()| if explain { validate::explain(&config, strict) } else { Ok(()) })
                .map(|()| ExitCode::SUCCESS);
            match checks {
                Ok(_) if connect => block_on(async { done(validate::probe(&config).await) }),
                other => cli::exit(other),
            }
        }
        Command::Test { files, format } => block_on(ferry_daemon::cli::test::run(&files, format)),
        Command::Tap(args) => block_on(ferry_daemon::cli::tap::run(&args)),
        Command::Top(args) => block_on(ferry_daemon::cli::top::run(&args)),
        Command::Render { config } => done(cli::render::render(&config)),
        Command::Plugins(PluginsCommand::List { dir }) => done(cli::plugins::list(&dir)),
        Command::Plugins(PluginsCommand::Check { file }) => done(cli::plugins::check(&file)),
        Command::Plugins(PluginsCommand::New { name, lang, kind, dir, sdk }) => {
            done(cli::scaffold::new(&name, lang, kind, dir.as_deref(), sdk.as_deref()))
        }
        Command::Plugins(PluginsCommand::Wit) => {
            cli::scaffold::wit();
            ExitCode::SUCCESS
        }
        Command::Plugins(PluginsCommand::Compile { cache_dir, files }) => {
            done(cli::plugins::compile(&cache_dir, &files))
        }
        Command::Dlq(DlqCommand::List { config, route, limit, json }) => {
            block_on(async { done(cli::dlq::list(&config, route.as_deref(), limit, json).await) })
        }
        Command::Ctl(command) => {
            use ferry_daemon::cli::ctl::Ctl;
            let (config, ctl) = match command {
                CtlCommand::Routes { config } => (config, Ctl::Routes),
                CtlCommand::Pause { config, route } => (config, Ctl::Pause(route)),
                CtlCommand::Resume { config, route } => (config, Ctl::Resume(route)),
                CtlCommand::Drain { config, route, timeout_s } => (config, Ctl::Drain { route, timeout_s }),
                CtlCommand::Reload { config } => (config, Ctl::Reload),
            };
            block_on(ferry_daemon::cli::ctl::run(&config, ctl))
        }
        Command::Dlq(DlqCommand::Show { config, id }) => block_on(async { done(cli::dlq::show(&config, id).await) }),
        Command::Dlq(DlqCommand::Replay { config, ids, route, dry_run }) => {
            block_on(async { done(cli::dlq::replay(&config, &ids, route.as_deref(), dry_run).await) })
        }
        Command::Dlq(DlqCommand::Purge { config, ids, route }) => {
            block_on(async { done(cli::dlq::purge(&config, &ids, route.as_deref()).await) })
        }
        Command::Outbox(OutboxCommand::Stats { config }) => {
            block_on(async { done(cli::dlq::outbox_stats(&config).await) })
        }
        Command::Run { config, watch, admin_listen } => {
            // Plugins are compiled by a child `ferry plugins compile`, which
            // keeps the compiler's memory out of the daemon.
            if let Ok(program) = std::env::current_exe() {
                ferry_daemon::wiring::compile_in_child(program);
            }
            // The environment's export settings are checked before anything
            // starts; the exporters start inside the runtime (a gRPC
            // channel's tasks run there).
            let settings = match Settings::from_env() {
                Ok(s) => s,
                Err(e) => return cli::exit(Err(cli::Failure::input(e))),
            };
            let rt = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("cannot start the runtime: {e}");
                    return ExitCode::FAILURE;
                }
            };
            let telemetry = match rt.block_on(async { Telemetry::start(&settings) }) {
                Ok(t) => t,
                Err(e) => return cli::exit(Err(cli::Failure::input(e))),
            };
            let code = cli::exit(rt.block_on(cli::run::run(&config, watch, admin_listen.as_deref(), settings.metrics)));
            telemetry.shutdown();
            code
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The committed reference pages are what `ferry reference` writes now.
    #[test]
    fn the_book_reference_is_current() {
        let dir = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/src/reference"));
        for (name, text) in reference_pages() {
            let committed = std::fs::read_to_string(dir.join(name)).unwrap_or_default();
            assert!(
                committed == text,
                "docs/src/reference/{name} is stale: run `ferry reference --dir docs/src/reference`"
            );
        }
    }

    #[test]
    fn the_book_pages_carry_the_current_key_tables() {
        let book = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/src"));
        let tables = anchored_tables(&reference_pages()[0].1);
        let pages = book_pages(book, &book.join("reference"));
        assert!(pages.len() > 20, "{} pages", pages.len());
        for page in pages {
            let text = std::fs::read_to_string(&page).expect("page");
            assert!(
                fill_page(&text, &tables).as_deref() == Ok(text.as_str()),
                "{} has a stale key table: run `ferry reference --dir docs/src/reference`",
                page.display()
            );
        }
    }

    #[test]
    fn a_page_gets_the_table_between_its_markers() {
        let tables: std::collections::BTreeMap<String, String> =
            [("receiver-x".to_owned(), "| key |\n| --- |\n| `a` |\n".to_owned())].into();
        let old = "# X\n\n{{#include ../reference/config.md:receiver-x}}\n\nAfter.\n";
        let filled = fill_page(old, &tables).expect("filled");
        assert!(filled.contains("<!-- reference: receiver-x (written by"), "{filled}");
        assert!(filled.contains("| `a` |\n<!-- /reference -->\n\nAfter."), "{filled}");
        assert_eq!(fill_page(&filled, &tables).as_deref(), Ok(filled.as_str()), "stable");
        let newer: std::collections::BTreeMap<String, String> =
            [("receiver-x".to_owned(), "| key |\n| --- |\n| `b` |\n".to_owned())].into();
        let again = fill_page(&filled, &newer).expect("filled");
        assert!(again.contains("| `b` |") && !again.contains("| `a` |"), "{again}");
        assert!(fill_page("{{#include ../reference/config.md:nope}}\n", &tables).is_err());
        assert!(fill_page("<!-- reference: receiver-x -->\n| old |\n", &tables).is_err(), "no end marker");
    }

    #[test]
    fn every_command_and_option_is_on_the_cli_page() {
        let page = cli_markdown(&Cli::command());
        for heading in ["## `ferry run`", "## `ferry dlq replay`", "## `ferry plugins new`", "## `ferry reference`"] {
            assert!(page.contains(heading), "{heading} missing:\n{page}");
        }
        for option in
            ["`--admin-listen` `ADDR`", "`-c`, `--config` `CONFIG`", "`--log-format` `LOG_FORMAT`", "`--strict`"]
        {
            assert!(page.contains(option), "{option} missing:\n{page}");
        }
        assert!(page.contains("One of `text`, `json`."), "choices are listed");
    }
}
