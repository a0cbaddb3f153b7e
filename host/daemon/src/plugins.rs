//! `ferry plugins list [DIR]` and `ferry plugins check FILE`: what is in a
//! plugin directory and whether the daemon would load it, without starting
//! anything else.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use ferry_wasm::registry::{PLUGIN_PACKAGE, PLUGIN_VERSION, load_file, plugin_name};
use ferry_wasm::{PluginEngine, PluginLimits};

/// The full name of the world a plugin targets.
fn world(world: ferry_wasm::PluginWorld) -> String {
    format!("{PLUGIN_PACKAGE}/{}@{PLUGIN_VERSION}", world.name())
}

fn engine() -> Result<PluginEngine, ExitCode> {
    PluginEngine::new(PluginLimits::default()).map_err(|e| {
        eprintln!("cannot start the plugin engine: {e}");
        ExitCode::FAILURE
    })
}

/// One line per `*.wasm` file in `dir`: name, world, size and whether it
/// loads (with the reason when it does not). Exit 0 when every file loads,
/// 1 when one does not, 2 when the directory cannot be read.
pub fn list(dir: &Path) -> ExitCode {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("{}: {e}", dir.display());
            return ExitCode::from(2);
        }
    };
    let mut paths: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "wasm") && p.is_file())
        .collect();
    paths.sort();
    let engine = match engine() {
        Ok(e) => e,
        Err(code) => return code,
    };
    println!("{:<24} {:<40} {:>10}  loads", "name", "world", "bytes");
    let mut all_load = true;
    for path in &paths {
        let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
        match load_file(&engine, path) {
            Ok(p) => println!("{:<24} {:<40} {:>10}  yes", plugin_name(path), world(p.world), size),
            Err(e) => {
                all_load = false;
                println!("{:<24} {:<40} {:>10}  no: {e}", plugin_name(path), "-", size);
            }
        }
    }
    if paths.is_empty() {
        println!("(no *.wasm files in {})", dir.display());
    }
    if all_load { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}

/// Whether one component would load, and why not. Exit 0 or 2.
pub fn check(file: &Path) -> ExitCode {
    let engine = match engine() {
        Ok(e) => e,
        Err(code) => return code,
    };
    match load_file(&engine, file) {
        Ok(plugin) => {
            println!(
                "{}: ok: plugin {:?}, world {}, {} bytes",
                file.display(),
                plugin.name,
                world(plugin.world),
                plugin.size
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            println!("{}: refused: {e}", file.display());
            ExitCode::from(2)
        }
    }
}
