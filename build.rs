//! Stamps the build with where it came from: `NLC_GIT_VERSION` if the builder set it (the
//! Dockerfile's build argument, since the image build has no `.git`), else `git describe` of the
//! checkout, else nothing. Shown by `--version` and `nlc_build_info{git_version}`.

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=NLC_GIT_VERSION");
    // A new commit or checkout moves HEAD (or the ref it points at); git is asked again then.
    if let Ok(out) = Command::new("git").args(["rev-parse", "--git-dir"]).output() {
        let dir = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        if out.status.success() && !dir.is_empty() {
            println!("cargo:rerun-if-changed={dir}/HEAD");
            println!("cargo:rerun-if-changed={dir}/index");
        }
    }
    let from_env = std::env::var("NLC_GIT_VERSION").ok().filter(|v| !v.trim().is_empty());
    let version = from_env.or_else(|| {
        let out = Command::new("git").args(["describe", "--tags", "--always", "--dirty"]).output().ok()?;
        out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
    });
    let version: String = version
        .unwrap_or_default()
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || "-._+".contains(*c))
        .take(64)
        .collect();
    println!("cargo:rustc-env=NLC_GIT_VERSION={}", if version.is_empty() { "unknown" } else { &version });
}
