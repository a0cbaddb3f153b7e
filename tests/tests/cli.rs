//! The command line's own pages: shell completions and man pages come from
//! the clap definitions, so they name every subcommand the parser knows.

use ferry_tests::daemon::Workspace;

#[test]
fn completions_name_every_subcommand() {
    let ws = Workspace::with_plugins(&[]);
    for shell in ["bash", "zsh", "fish"] {
        let out = ws.ferry(&["completions", shell]);
        assert!(out.status.success(), "{shell}: {}", String::from_utf8_lossy(&out.stderr));
        let script = String::from_utf8_lossy(&out.stdout);
        for sub in ["run", "validate", "dlq", "replay", "outbox", "plugins"] {
            assert!(script.contains(sub), "{shell} completion lacks {sub}");
        }
    }
    assert!(!ws.ferry(&["completions", "tcsh"]).status.success(), "an unknown shell is refused");
}

#[test]
fn man_pages_cover_the_subcommands() {
    let ws = Workspace::with_plugins(&[]);
    let page = ws.ferry(&["man"]);
    assert!(page.status.success());
    let text = String::from_utf8_lossy(&page.stdout);
    assert!(text.starts_with(".ie") || text.contains(".TH ferry"), "{text}");
    assert!(text.contains("dlq"), "{text}");

    let out = ws.ferry(&["man", "--dir", "man"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for name in ["ferry.1", "ferry-run.1", "ferry-dlq.1", "ferry-dlq-replay.1", "ferry-outbox-stats.1"] {
        let page = std::fs::read_to_string(ws.path().join("man").join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(page.contains(".TH"), "{name}: {page}");
    }
    let replay = std::fs::read_to_string(ws.path().join("man/ferry-dlq-replay.1")).expect("page");
    assert!(replay.contains("dry") && replay.contains("route"), "the options are documented: {replay}");
}
