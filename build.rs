//! Stamps the build with where it came from: `NLC_GIT_VERSION` if the builder set it (the
//! Dockerfile's build argument, since the image build has no `.git`), else `git describe` of the
//! checkout, else nothing. Shown by `--version` and `nlc_build_info{git_version}`.

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=NLC_GIT_VERSION");
    // A new commit moves the ref HEAD points at, a checkout moves HEAD: git is asked again then
    // (not on every `git add`, which would rebuild the crate for nothing).
    let git = |args: &[&str]| {
        let out = Command::new("git").args(args).output().ok()?;
        let text = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        (out.status.success() && !text.is_empty()).then_some(text)
    };
    if let Some(head) = git(&["rev-parse", "--git-path", "HEAD"]) {
        println!("cargo:rerun-if-changed={head}");
        let branch = git(&["symbolic-ref", "-q", "HEAD"]);
        // A packed ref has no file of its own; packed-refs then holds it.
        let reference = branch.and_then(|b| git(&["rev-parse", "--git-path", &b]));
        match reference.filter(|r| std::path::Path::new(r).exists()) {
            Some(r) => println!("cargo:rerun-if-changed={r}"),
            None => {
                if let Some(packed) = git(&["rev-parse", "--git-path", "packed-refs"])
                    && std::path::Path::new(&packed).exists()
                {
                    println!("cargo:rerun-if-changed={packed}");
                }
            }
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
