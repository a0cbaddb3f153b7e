//! Stamps the git commit the daemon is built from into `FERRY_COMMIT`
//! (`ferry_build_info{commit}`); `unknown` outside a git checkout.

fn main() {
    let commit = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=FERRY_COMMIT={commit}");
    // A new commit moves HEAD (a checkout) or the branch it points at.
    for path in ["../../.git/HEAD", "../../.git/refs/heads", "../../.git/packed-refs"] {
        println!("cargo:rerun-if-changed={path}");
    }
}
