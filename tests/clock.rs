//! The controller's clock against the API server's, with the controller's process alone under
//! libfaketime (the machine's clock, the API server's and the test's are untouched):
//! - a forward step of its wall clock (an NTP step, a VM resumed) does not make pending
//!   evictions due early: each keeps the monotonic time it had left;
//! - a clock running ahead of the API server's is measured from the `Date` of its answers and
//!   waited out, so that no eviction is early by the server's clock;
//! - but only up to `--max-clock-skew-compensation`: an API server an hour behind (its `Date`
//!   rewritten by the fault proxy) does not hold an eviction back by an hour.
//!
//! libfaketime comes from Debian's `faketime` package (CI installs it); without it these tests
//! fail, naming it.

mod common;

use std::cell::Cell;
use std::time::Duration;

use common::*;
use nlc_testenv::shared;
use serde_json::json;

const KEY: &str = "example.com/clock";
const LIB: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";

/// The environment that puts the controller under libfaketime, its offset read from `file`
/// (in seconds, e.g. `+3600`) at every clock read; its monotonic clock is left alone.
fn faketime(file: &std::path::Path) -> Vec<(&'static str, String)> {
    assert!(
        std::path::Path::new(LIB).exists(),
        "{LIB} is missing: install Debian's faketime package (apt-get install faketime)"
    );
    vec![
        ("LD_PRELOAD", LIB.to_owned()),
        ("FAKETIME_TIMESTAMP_FILE", file.display().to_string()),
        ("FAKETIME_NO_CACHE", "1".to_owned()),
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1".to_owned()),
    ]
}

async fn start_faked(
    env: &nlc_testenv::ControlPlane,
    s: &Scope,
    offset: &str,
    extra: &[&str],
) -> (Controller, std::path::PathBuf) {
    let file = env.dir.join(format!("faketime-{}", s.scope));
    std::fs::write(&file, offset).expect("offset file");
    let vars = faketime(&file);
    let vars: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let c = Controller::start_full(&env.kubeconfig, env, &s.scope, extra, &vars).await;
    (c, file)
}

#[tokio::test]
async fn a_forward_step_of_the_wall_clock_does_not_make_evictions_early() {
    let env = shared();
    let s = Scope::new(env, "clock-step").await;
    let node = s.node("n", json!([])).await;
    s.pod("p", &node, json!([toleration(KEY, Some(20))]), json!({})).await;
    let evictions = Evictions::watch(s.pods()).await;
    let (c, file) = start_faked(env, &s, "+0", &["--leader-elect=false"]).await;
    let added = now_s();
    s.set_taints(&node, json!([no_execute(KEY, added)])).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    // The controller's wall clock jumps an hour ahead: measured on it, the deadline has passed.
    std::fs::write(&file, "+3600").expect("step");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(evictions.at("p").is_none(), "evicted at once after the step:\n{}", c.logs());
    let at = evictions.wait("p", Duration::from_secs(30)).await.unwrap_or_else(|| panic!("{}", c.logs()));
    let late = secs_between(added + Duration::from_secs(20), at);
    eprintln!("evicted {late:.3}s after the deadline, across a +1h step of the controller's clock");
    assert!(late.abs() <= 1.5, "evicted {late:.3}s after the deadline:\n{}", c.logs());
    assert!(metric(&c.metrics().await, "nlc_clock_steps_total").unwrap_or(0.0) >= 1.0);
}

#[tokio::test]
async fn a_clock_ahead_of_the_api_servers_is_measured_and_waited_out() {
    let env = shared();
    let s = Scope::new(env, "clock-skew").await;
    let node = s.node("n", json!([])).await;
    s.pod("p", &node, json!([toleration(KEY, Some(12))]), json!({})).await;
    let evictions = Evictions::watch(s.pods()).await;
    // Three seconds ahead; leader election's renewals every 500 ms give the estimate samples.
    let election: Vec<&str> =
        ["--leader-elect-resource-name", "clock-skew"].into_iter().chain(FAST_ELECTION.iter().copied()).collect();
    let (c, _file) = start_faked(env, &s, "+3", &election).await;
    let last_seen = Cell::new((0.0, 0.0));
    let skew = eventually_every(Duration::from_secs(20), Duration::from_millis(500), || async {
        let m = c.metrics().await;
        let skew = metric(&m, "nlc_clock_skew_seconds").unwrap_or(0.0);
        let precision = metric(&m, "nlc_clock_skew_precision_seconds").unwrap_or(10.0);
        if precision <= 0.3 {
            return Some(skew);
        }
        last_seen.set((skew, precision));
        None
    })
    .await
    .unwrap_or_else(|| {
        let (skew, precision) = last_seen.get();
        panic!("no precise estimate: {skew} +/- {precision}")
    });
    assert!((skew - 3.0).abs() <= 0.4, "measured {skew:.3}s, the clock is 3 s ahead");
    let added = now_s();
    s.set_taints(&node, json!([no_execute(KEY, added)])).await;
    let at = evictions.wait("p", Duration::from_secs(30)).await.unwrap_or_else(|| panic!("{}", c.logs()));
    let late = secs_between(added + Duration::from_secs(12), at);
    eprintln!("skew measured {skew:.3}s; evicted {late:.3}s after the deadline by the API server's clock");
    assert!((-0.3..=1.5).contains(&late), "evicted {late:.3}s after the deadline (3 s early without the skew)");
}

#[tokio::test]
async fn an_api_server_an_hour_behind_delays_an_eviction_by_the_cap_at_most() {
    use nlc_testenv::fault::{Fault, FaultProxy, Rule};
    let env = shared();
    let s = Scope::new(env, "clock-capped").await;
    let node = s.node("n", json!([])).await;
    s.pod("p", &node, json!([toleration(KEY, Some(12))]), json!({})).await;
    let evictions = Evictions::watch(s.pods()).await;
    let proxy = FaultProxy::start(env).await.expect("proxy");
    proxy.add(Rule::new("", &[], Fault::DateBehind(Duration::from_secs(3600))));
    let kubeconfig = proxy.kubeconfig(env).expect("kubeconfig");
    let flags: Vec<&str> = ["--leader-elect-resource-name", "clock-capped", "--max-clock-skew-compensation", "5s"]
        .into_iter()
        .chain(FAST_ELECTION.iter().copied())
        .collect();
    let c = Controller::start_with_kubeconfig(&kubeconfig, env, &s.scope, &flags).await;
    let last_seen = Cell::new((0.0, 0.0, String::new()));
    let (compensation, m) = eventually_every(Duration::from_secs(30), Duration::from_millis(500), || async {
        let m = c.metrics().await;
        let skew = metric(&m, "nlc_clock_skew_seconds").unwrap_or(0.0);
        let compensation = metric(&m, "nlc_clock_skew_compensation_seconds").unwrap_or(0.0);
        if (skew - 3600.0).abs() < 1.0 && compensation > 0.0 {
            return Some((compensation, m));
        }
        last_seen.set((skew, compensation, m));
        None
    })
    .await
    .unwrap_or_else(|| {
        let (skew, compensation, m) = last_seen.take();
        panic!("never compensated: {skew} s, {compensation} s\n{m}")
    });
    assert_eq!(compensation, 5.0, "capped:\n{m}");
    assert_eq!(metric(&m, "nlc_clock_skew_capped"), Some(1.0), "{m}");
    let added = now_s();
    s.set_taints(&node, json!([no_execute(KEY, added)])).await;
    let at = evictions.wait("p", Duration::from_secs(40)).await.unwrap_or_else(|| panic!("{}", c.logs()));
    let late = secs_between(added + Duration::from_secs(12), at);
    eprintln!("an API server 3600 s behind: evicted {late:.3}s after the deadline (cap 5 s)");
    assert!((4.7..=5.0 + 1.5).contains(&late), "evicted {late:.3}s after the deadline, the cap is 5 s");
}
