//! `ferry plugins list [DIR]` and `ferry plugins check FILE`: what is in a
//! plugin directory and whether the daemon would load it, without starting
//! anything else; `ferry plugins compile`: fills the compile cache (what
//! `ferry run` runs in a child process, see
//! [`crate::wiring::compile_in_child`]).

use std::path::{Path, PathBuf};

use ferry_wasm::registry::{load_file, plugin_name};
use ferry_wasm::{PluginEngine, PluginLimits};

use crate::cli::Failure;

fn engine() -> Result<PluginEngine, Failure> {
    PluginEngine::new(PluginLimits::default())
        .map_err(|e| Failure::failed(format!("cannot start the plugin engine: {e}")))
}

/// One line per `*.wasm` file in `dir`: name, world, size and whether it
/// loads (with the reason when it does not). Exit 0 when every file loads,
/// 1 when one does not, 2 when the directory cannot be read.
pub fn list(dir: &Path) -> Result<(), Failure> {
    let entries = std::fs::read_dir(dir).map_err(|e| Failure::input(format!("{}: {e}", dir.display())))?;
    let mut paths: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "wasm") && p.is_file())
        .collect();
    paths.sort();
    let engine = engine()?;
    println!("{:<24} {:<40} {:>10}  loads", "name", "world", "bytes");
    let mut all_load = true;
    for path in &paths {
        let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
        match load_file(&engine, path) {
            Ok(p) => println!("{:<24} {:<40} {:>10}  yes", plugin_name(path), p.world_at_contract(), size),
            Err(e) => {
                all_load = false;
                println!("{:<24} {:<40} {:>10}  no: {e}", plugin_name(path), "-", size);
            }
        }
    }
    if paths.is_empty() {
        println!("(no *.wasm files in {})", dir.display());
    }
    if all_load { Ok(()) } else { Err(Failure::failed("")) }
}

/// Whether one component would load, and why not. Exit 0 or 2.
pub fn check(file: &Path) -> Result<(), Failure> {
    let engine = engine()?;
    match load_file(&engine, file) {
        Ok(plugin) => {
            println!(
                "{}: ok: plugin {:?}, world {}, {} bytes",
                file.display(),
                plugin.name,
                plugin.world_at_contract(),
                plugin.size
            );
            Ok(())
        }
        Err(e) => {
            println!("{}: refused: {e}", file.display());
            Err(Failure::input(""))
        }
    }
}

/// `ferry plugins compile --cache-dir DIR FILE...`: compiles each component
/// into the compile cache the daemon reads (`plugins.cache_dir`), one line
/// per file. Exit 0 when every file compiled (or was cached), 1 when one was
/// refused, 2 when the cache cannot be used.
pub fn compile(cache_dir: &Path, files: &[PathBuf]) -> Result<(), Failure> {
    let engine = PluginEngine::with_cache(PluginLimits::default(), cache_dir)
        .map_err(|e| Failure::input(format!("cannot use the compile cache {}: {e}", cache_dir.display())))?;
    let mut all_compiled = true;
    for file in files {
        match load_file(&engine, file) {
            Ok(plugin) => {
                println!("{}: {}", file.display(), if plugin.from_cache { "cached" } else { "compiled" });
            }
            Err(e) => {
                all_compiled = false;
                println!("{}: refused: {e}", file.display());
            }
        }
    }
    if all_compiled { Ok(()) } else { Err(Failure::failed("")) }
}
