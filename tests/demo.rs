//! The README's run command with no cluster is a demo: the controller over simulated nodes, one
//! of which stops; `status -w` shows it go Unknown, the countdowns and the evictions; an
//! interrupt stops everything and leaves nothing running.

mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::BIN;
use tokio::io::AsyncReadExt;

/// The processes whose command line mentions `needle`.
fn processes_mentioning(needle: &str) -> Vec<String> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return vec![] };
    dir.filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().chars().all(|c| c.is_ascii_digit()))
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains(needle))
        .collect()
}

#[tokio::test]
async fn the_demo_shows_a_node_stop_and_its_evictions_and_an_interrupt_stops_everything() {
    let bin_dir = std::path::Path::new(BIN).parent().expect("target dir");
    let controlplane = bin_dir.join("controlplane");
    assert!(
        controlplane.is_file(),
        "{} not built: `make test` builds it (cargo build -p nlc-testenv --bin controlplane)",
        controlplane.display()
    );
    let err_log = std::env::temp_dir().join(format!("nlc-demo-{}.err", std::process::id()));
    let mut demo = tokio::process::Command::new(&controlplane)
        .args(["demo", "--controller", BIN, "--stop-kubelet-after", "2"])
        .stdout(Stdio::piped())
        .stderr(Stdio::from(std::fs::File::create(&err_log).expect("log")))
        .kill_on_drop(true)
        .spawn()
        .expect("spawn demo");
    let mut stdout = demo.stdout.take().expect("stdout");
    let mut screen = String::new();
    let mut buf = vec![0u8; 65536];
    let deadline = Instant::now() + Duration::from_secs(120);
    // The last frame of `status -w` that shows both evictions done and one still counting down.
    let mut wanted = None;
    while wanted.is_none() && Instant::now() < deadline {
        match tokio::time::timeout(Duration::from_secs(1), stdout.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => screen.push_str(&String::from_utf8_lossy(&buf[..n])),
            Err(_) => {}
        }
        let frames: Vec<&str> = screen.split("\x1b[H\x1b[2J").collect();
        // The last complete frame.
        let Some(frame) = frames.len().checked_sub(2).map(|i| frames[i]) else { continue };
        let evicted = frame.split("EVICTED, STILL TERMINATING").nth(1).unwrap_or("");
        if frame.contains("demo-node-3               Unknown")
            && frame.contains("node.kubernetes.io/unreachable:NoExecute")
            && evicted.contains("demo/evicted-at-once")
            && evicted.contains("demo/tolerates-20s")
            && frame.contains("demo/tolerates-45s")
        {
            wanted = Some(frame.to_owned());
        }
    }
    let stderr = || std::fs::read_to_string(&err_log).unwrap_or_default();
    let frame = wanted.unwrap_or_else(|| panic!("the demo never showed the evictions:\n{screen}\n{}", stderr()));
    assert!(!frame.contains("demo/web-"), "a healthy node's pod is listed:\n{frame}");

    // An interrupt sent to the demo alone (not its process group): it stops its children itself.
    let pid = demo.id().expect("pid").to_string();
    std::process::Command::new("kill").args(["-INT", &pid]).status().expect("kill");
    let exit = tokio::time::timeout(Duration::from_secs(30), demo.wait()).await;
    let exit = exit.unwrap_or_else(|_| panic!("the demo did not stop:\n{}", stderr())).expect("wait");
    assert!(exit.success(), "{exit}:\n{}", stderr());
    let log = stderr();
    let dir = log
        .split("KUBECONFIG=")
        .nth(1)
        .and_then(|rest| rest.lines().next())
        .and_then(|k| k.strip_suffix("/kubeconfig"))
        .unwrap_or_else(|| panic!("no control plane directory in:\n{log}"))
        .to_owned();
    let left = processes_mentioning(&dir);
    assert!(left.is_empty(), "still running after the demo stopped: {left:#?}");
    let _ = std::fs::remove_file(&err_log);
}
