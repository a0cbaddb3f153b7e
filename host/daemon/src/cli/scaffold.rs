//! `ferry plugins new NAME --lang rust|python|js [--kind
//! processor|transport]`: a plugin project that builds to a component with
//! one command and has a first test; and `ferry plugins wit`: the
//! contract, for toolchains that generate their own bindings.
//!
//! A transport project (Rust or JavaScript) is a receiver and a sender for
//! an HTTP polling queue, to change into the user's protocol; the
//! JavaScript one is the `processors/js/http-queue` example itself, renamed.

use crate::cli::Failure;
use std::path::{Path, PathBuf};

/// The plugin contract this ferry was built with (`wit/plugin.wit`).
pub const WIT: &str = include_str!("../../../../wit/plugin.wit");

/// The SDK directory of the checkout this binary was built from.
const BUILT_SDK: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../processors/sdk");

/// A plugin language `ferry plugins new` can scaffold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Lang {
    Rust,
    Python,
    Js,
}

/// What `ferry plugins new` scaffolds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Kind {
    /// A processor (world `processor`).
    Processor,
    /// A transport component: receiver and sender (world `transport`).
    Transport,
}

struct Template {
    path: &'static str,
    text: &'static str,
    executable: bool,
}

const fn file(path: &'static str, text: &'static str) -> Template {
    Template { path, text, executable: false }
}

const fn script(path: &'static str, text: &'static str) -> Template {
    Template { path, text, executable: true }
}

const RUST: &[Template] = &[
    file("Cargo.toml", include_str!("../../templates/rust/Cargo.toml")),
    file("src/lib.rs", include_str!("../../templates/rust/src/lib.rs")),
    script("build", include_str!("../../templates/rust/build")),
    file(".gitignore", include_str!("../../templates/rust/gitignore")),
];

const RUST_TRANSPORT: &[Template] = &[
    file("Cargo.toml", include_str!("../../templates/rust-transport/Cargo.toml")),
    file("src/lib.rs", include_str!("../../templates/rust-transport/src/lib.rs")),
    script("build", include_str!("../../templates/rust/build")),
    file(".gitignore", include_str!("../../templates/rust/gitignore")),
];

/// The JavaScript transport example, its name made the project's.
const EXAMPLE_TRANSPORT: &str = "http-queue";

const JS_TRANSPORT: &[Template] = &[
    file("package.json", include_str!("../../templates/js-transport/package.json")),
    file("{{name}}.js", include_str!("../../../../processors/js/http-queue/http-queue.js")),
    file("queue.js", include_str!("../../../../processors/js/http-queue/queue.js")),
    file("queue.test.js", include_str!("../../../../processors/js/http-queue/queue.test.js")),
    file("wit/plugin.wit", WIT),
    file(".gitignore", include_str!("../../templates/js/gitignore")),
];

const PYTHON: &[Template] = &[
    file("app.py", include_str!("../../templates/python/app.py")),
    file("test_app.py", include_str!("../../templates/python/test_app.py")),
    script("build", include_str!("../../templates/python/build")),
    script("test", include_str!("../../templates/python/test")),
    file("wit/plugin.wit", WIT),
    file(".gitignore", include_str!("../../templates/python/gitignore")),
];

const JS: &[Template] = &[
    file("package.json", include_str!("../../templates/js/package.json")),
    file("plugin.js", include_str!("../../templates/js/plugin.js")),
    file("logic.js", include_str!("../../templates/js/logic.js")),
    file("logic.test.js", include_str!("../../templates/js/logic.test.js")),
    file("wit/plugin.wit", WIT),
    file(".gitignore", include_str!("../../templates/js/gitignore")),
];

/// Whether `name` can be a plugin name: the file `<name>.wasm`, a crate and
/// a package name. Lower-case letters, digits and `-`, starting with a
/// letter.
fn valid_name(name: &str) -> bool {
    name.starts_with(|c: char| c.is_ascii_lowercase())
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.ends_with('-')
}

/// The templates of a `kind` project in `lang`.
fn templates(lang: Lang, kind: Kind) -> Result<&'static [Template], String> {
    match (kind, lang) {
        (Kind::Processor, Lang::Rust) => Ok(RUST),
        (Kind::Processor, Lang::Python) => Ok(PYTHON),
        (Kind::Processor, Lang::Js) => Ok(JS),
        (Kind::Transport, Lang::Rust) => Ok(RUST_TRANSPORT),
        (Kind::Transport, Lang::Js) => Ok(JS_TRANSPORT),
        (Kind::Transport, Lang::Python) => {
            Err("no transport template in Python yet: use --lang rust or --lang js".to_owned())
        }
    }
}

/// The files of a `lang` project of `kind` for plugin `name`: paths and
/// texts, and whether each is a script.
fn render(lang: Lang, kind: Kind, name: &str, sdk: &Path) -> Result<Vec<(String, String, bool)>, String> {
    let sdk = sdk.display().to_string();
    let fill = |text: &str| {
        let text = if kind == Kind::Transport { text.replace(EXAMPLE_TRANSPORT, name) } else { text.to_owned() };
        text.replace("{{name}}", name).replace("{{crate}}", &name.replace('-', "_")).replace("{{sdk}}", &sdk)
    };
    Ok(templates(lang, kind)?.iter().map(|t| (fill(t.path), fill(t.text), t.executable)).collect())
}

/// The SDK a Rust project depends on: `--sdk`, else the checkout ferry was
/// built from.
fn sdk_dir(given: Option<&Path>) -> Result<PathBuf, String> {
    let dir = given.map_or_else(|| PathBuf::from(BUILT_SDK), Path::to_path_buf);
    std::fs::canonicalize(&dir).ok().filter(|d| d.join("Cargo.toml").is_file()).ok_or_else(|| {
        format!("no Rust SDK at {}: pass --sdk PATH, the processors/sdk directory of a ferry checkout", dir.display())
    })
}

fn write(dir: &Path, files: &[(String, String, bool)]) -> std::io::Result<()> {
    for (path, text, executable) in files {
        let path = dir.join(path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&path, text)?;
        if *executable {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
        }
    }
    Ok(())
}

/// `ferry plugins new`. Exit 0, or 2 with the reason.
pub fn new(name: &str, lang: Lang, kind: Kind, dir: Option<&Path>, sdk: Option<&Path>) -> Result<(), Failure> {
    let text = create(name, lang, kind, dir, sdk).map_err(|e| Failure::input(format!("ferry plugins new: {e}")))?;
    print!("{text}");
    Ok(())
}

fn create(name: &str, lang: Lang, kind: Kind, dir: Option<&Path>, sdk: Option<&Path>) -> Result<String, String> {
    if !valid_name(name) {
        return Err(format!(
            "{name:?} cannot be a plugin name: use lower-case letters, digits and `-`, starting with a letter"
        ));
    }
    let dir = dir.map_or_else(|| PathBuf::from(name), Path::to_path_buf);
    if std::fs::read_dir(&dir).is_ok_and(|mut d| d.next().is_some()) {
        return Err(format!("{} exists and is not empty", dir.display()));
    }
    let sdk = if lang == Lang::Rust { sdk_dir(sdk)? } else { PathBuf::new() };
    let files = render(lang, kind, name, &sdk)?;
    write(&dir, &files).map_err(|e| format!("cannot write {}: {e}", dir.display()))?;
    let (test, build, needs) = match lang {
        Lang::Rust => ("cargo test", "./build", "the wasm32-wasip2 target (./build adds it with rustup)"),
        Lang::Python => ("./test", "./build", "componentize-py (pip install componentize-py)"),
        Lang::Js => ("npm install && npm test", "npm run build", "Node.js 20 or later"),
    };
    let listed: Vec<&str> = files.iter().map(|(p, _, _)| p.as_str()).collect();
    let d = dir.display();
    let use_it = match kind {
        Kind::Processor => format!(
            "and name it in a route:\n\
             \x20      [[routes.processors]]\n\
             \x20      plugin = \"{name}\"\n\
             \x20      config = {{ header = \"processed-by\" }}\n"
        ),
        Kind::Transport => format!(
            "and name it as a receiver or a sender:\n\
             \x20      [receivers.queue]\n\
             \x20      type = \"component\"\n\
             \x20      component = \"{name}\"\n\
             \x20      allow_hosts = [\"queue.internal:443\"]\n\
             \x20      config = {{ url = \"https://queue.internal/v1/queues/orders/messages\" }}\n"
        ),
    };
    Ok(format!(
        "wrote {d}: {}\n\
         needs {needs}\n\
         test:  cd {d} && {test}\n\
         build: cd {d} && {build}   (writes {name}.wasm)\n\
         use:   ferry plugins check {d}/{name}.wasm, copy it into plugins.dir, {use_it}",
        listed.join(", ")
    ))
}

/// `ferry plugins wit`: the contract on stdout.
pub fn wit() {
    print!("{WIT}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for good in ["stamp", "my-filter", "v2"] {
            assert!(valid_name(good), "{good}");
        }
        for bad in ["", "Stamp", "2fast", "a_b", "a-", "../x", "a b"] {
            assert!(!valid_name(bad), "{bad}");
        }
    }

    #[test]
    fn every_placeholder_is_filled() {
        for lang in [Lang::Rust, Lang::Python, Lang::Js] {
            for kind in [Kind::Processor, Kind::Transport] {
                let Ok(files) = render(lang, kind, "my-stamp", Path::new("/sdk")) else { continue };
                for (path, text, _) in files {
                    assert!(
                        !text.contains("{{") && !path.contains("{{"),
                        "{lang:?} {kind:?} {path} keeps a placeholder"
                    );
                    assert!(!text.contains(EXAMPLE_TRANSPORT), "{lang:?} {kind:?} {path} keeps the example's name");
                }
            }
        }
        let js = render(Lang::Js, Kind::Transport, "my-queue", Path::new("/sdk")).expect("js transport");
        assert!(js.iter().any(|(p, _, _)| p == "my-queue.js"), "the entry point is named after the plugin");
        assert!(render(Lang::Python, Kind::Transport, "q", Path::new("/sdk")).expect_err("none").contains("Python"));
        let rust = render(Lang::Rust, Kind::Processor, "my-stamp", Path::new("/sdk")).expect("rust");
        let build = &rust.iter().find(|(p, _, _)| *p == "build").expect("build").1;
        assert!(build.contains("release/my_stamp.wasm"), "{build}");
    }

    #[test]
    fn refuses_a_bad_name_and_a_full_directory() {
        let dir = std::env::temp_dir().join(format!("ferry-scaffold-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        std::fs::write(dir.join("keep"), "x").expect("file");
        assert!(
            create("Bad", Lang::Js, Kind::Processor, Some(&dir), None).expect_err("refused").contains("plugin name")
        );
        assert!(create("ok", Lang::Js, Kind::Processor, Some(&dir), None).expect_err("refused").contains("not empty"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
