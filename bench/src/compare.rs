//! `bench compare`: turns the eviction reports of `make bench-compare` (one JSON per run) into a
//! markdown table and an SVG chart: ours (and its HTTP/2 and JSON variants),
//! kube-controller-manager at its defaults and at our budget, and the API floor(s), per size;
//! medians with their spread (min-max) over the runs.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde_json::Value;

#[derive(Debug, Clone, clap::Args)]
pub struct CompareArgs {
    /// Directory holding the runs' JSON reports (`bench eviction` output).
    #[arg(long, value_name = "DIR")]
    pub runs: PathBuf,
    /// Where to write `compare.md` and `compare.svg`.
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// The command line that produced the runs, written under the table.
    #[arg(long, value_name = "TEXT", default_value = "make bench-compare")]
    pub command: String,
}

/// The configurations. `http2`: ours with `--api-http2`, the floor with `--floor-http2`; `json`:
/// ours with `--kube-api-content-type=application/json`, the floor with `--floor-wire json`
/// (both default to protobuf; a floor report from before those options is JSON over HTTP/1.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Config {
    Ours {
        http2: bool,
        json: bool,
    },
    /// Ours at its defaults with one of the costs the floor does not pay switched.
    OursWithout(Cost),
    KcmBudget,
    KcmDefault,
    Floor {
        http2: bool,
        json: bool,
    },
    /// The floor (protobuf, HTTP/2) with `--floor-watch-pods`: the floor plus the pod watch a
    /// controller keeps. Never the reference.
    FloorWatchingPods,
}

/// A cost of ours that the floor does not pay, and the flag that switches it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Cost {
    /// `--eviction-node-read=cache`: the node read before an immediate eviction from the API
    /// server's watch cache instead of etcd.
    NodeReadFromCache,
    /// `--eviction-node-read=none`.
    NoNodeRead,
    /// `--eviction-events=per-node`.
    EventsPerNode,
    /// `--eviction-events=none`.
    NoEvents,
}

impl Cost {
    const ALL: [Self; 4] = [Self::NodeReadFromCache, Self::NoNodeRead, Self::EventsPerNode, Self::NoEvents];

    /// The flag, as `bench-compare` passes it.
    fn flag(self) -> &'static str {
        match self {
            Self::NodeReadFromCache => "--eviction-node-read=cache",
            Self::NoNodeRead => "--eviction-node-read=none",
            Self::EventsPerNode => "--eviction-events=per-node",
            Self::NoEvents => "--eviction-events=none",
        }
    }
}

impl Config {
    /// Column order. The floor the figures are reported against ("floor +x") is the fastest
    /// one measured ([`fastest_floor`]), wherever its column is.
    const ALL: [Self; 15] = [
        Self::Ours { http2: false, json: false },
        Self::Ours { http2: true, json: false },
        Self::Ours { http2: false, json: true },
        Self::Ours { http2: true, json: true },
        Self::OursWithout(Cost::NodeReadFromCache),
        Self::OursWithout(Cost::NoNodeRead),
        Self::OursWithout(Cost::EventsPerNode),
        Self::OursWithout(Cost::NoEvents),
        Self::KcmBudget,
        Self::KcmDefault,
        Self::Floor { http2: true, json: false },
        Self::Floor { http2: false, json: false },
        Self::Floor { http2: true, json: true },
        Self::Floor { http2: false, json: true },
        Self::FloorWatchingPods,
    ];

    fn label(self) -> &'static str {
        match self {
            Self::Ours { http2: false, json: false } => "ours",
            Self::Ours { http2: true, json: false } => "ours, HTTP/2",
            Self::Ours { http2: false, json: true } => "ours, JSON",
            Self::Ours { http2: true, json: true } => "ours, JSON, HTTP/2",
            Self::OursWithout(Cost::NodeReadFromCache) => "ours, node read from the watch cache",
            Self::OursWithout(Cost::NoNodeRead) => "ours, no node read",
            Self::OursWithout(Cost::EventsPerNode) => "ours, events per node",
            Self::OursWithout(Cost::NoEvents) => "ours, no eviction events",
            Self::KcmBudget => "kcm, our budget",
            Self::KcmDefault => "kcm, defaults",
            Self::Floor { http2: true, json: false } => "API floor (protobuf, HTTP/2)",
            Self::Floor { http2: false, json: false } => "API floor (protobuf, HTTP/1.1)",
            Self::Floor { http2: true, json: true } => "API floor (JSON, HTTP/2)",
            Self::Floor { http2: false, json: true } => "API floor (JSON, HTTP/1.1)",
            Self::FloorWatchingPods => "API floor + a pod watch (protobuf, HTTP/2)",
        }
    }

    fn color(self) -> &'static str {
        match self {
            Self::Ours { http2: false, json: false } => "#1f77b4",
            Self::Ours { http2: true, json: false } => "#6baed6",
            Self::Ours { http2: false, json: true } => "#9467bd",
            Self::Ours { http2: true, json: true } => "#c5b0d5",
            Self::OursWithout(Cost::NodeReadFromCache) => "#2ca02c",
            Self::OursWithout(Cost::NoNodeRead) => "#98df8a",
            Self::OursWithout(Cost::EventsPerNode) => "#17becf",
            Self::OursWithout(Cost::NoEvents) => "#9edae5",
            Self::KcmBudget => "#ff7f0e",
            Self::KcmDefault => "#f5c08a",
            Self::Floor { http2: true, json: false } => "#4d4d4d",
            Self::Floor { http2: false, json: false } => "#7f7f7f",
            Self::Floor { http2: true, json: true } => "#a6a6a6",
            Self::Floor { http2: false, json: true } => "#c7c7c7",
            Self::FloorWatchingPods => "#d62728",
        }
    }

    fn is_floor(self) -> bool {
        matches!(self, Self::Floor { .. })
    }

    /// Which configuration a report is, from what it says about itself.
    fn of(report: &Value) -> Self {
        if report["floor_watch_pods"].as_bool() == Some(true) {
            return Self::FloorWatchingPods;
        }
        if report["floor"].as_bool() == Some(true) {
            return Self::Floor {
                http2: report["floor_http2"].as_bool() == Some(true),
                json: report["floor_wire"].as_str().is_none_or(|w| w == "json"),
            };
        }
        let upstream = report["upstream"]
            .as_bool()
            .unwrap_or_else(|| report["controller"].as_str().is_some_and(|c| c.starts_with("kube-controller-manager")));
        let flags: Vec<&str> = report["controller_flags"]
            .as_array()
            .map(|f| f.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let budget = flags.iter().any(|a| a.starts_with("--kube-api-qps"));
        let http2 = flags.iter().any(|a| *a == "--api-http2" || *a == "--api-http2=true");
        // `--kube-api-content-type=application/json` or `--kube-api-content-type application/json`.
        let json = flags.contains(&"--kube-api-content-type=application/json")
            || flags.windows(2).any(|w| w == ["--kube-api-content-type", "application/json"]);
        let without = Cost::ALL.into_iter().find(|c| flags.contains(&c.flag()));
        match (upstream, budget, without) {
            (true, true, _) => Self::KcmBudget,
            (true, false, _) => Self::KcmDefault,
            (false, _, Some(cost)) => Self::OursWithout(cost),
            (false, _, None) => Self::Ours { http2, json },
        }
    }
}

/// One figure of the table: its label, where it is in a report, and its unit.
struct Figure {
    label: &'static str,
    path: &'static [&'static str],
    unit: &'static str,
    /// Reported as "floor + x" too.
    vs_floor: bool,
}

const FIGURES: &[Figure] = &[
    Figure {
        label: "Lease renewals per second in the storm (workload)",
        path: &["lease_renewals_per_s"],
        unit: "/s",
        vs_floor: false,
    },
    Figure {
        label: "ready (start → /readyz; floor: a raw streaming list of the pods and nodes)",
        path: &["controller_ready_s"],
        unit: "s",
        vs_floor: true,
    },
    Figure {
        label: "untolerated: taint → deletion p50",
        path: &["immediate_after_taint_s", "p50"],
        unit: "s",
        vs_floor: true,
    },
    Figure {
        label: "untolerated: taint → deletion p99",
        path: &["immediate_after_taint_s", "p99"],
        unit: "s",
        vs_floor: true,
    },
    Figure {
        label: "untolerated evictions per second",
        path: &["immediate_evictions_per_s"],
        unit: "/s",
        vs_floor: false,
    },
    Figure { label: "timed lateness p50", path: &["timed_lateness_s", "p50"], unit: "s", vs_floor: true },
    Figure { label: "timed lateness p99", path: &["timed_lateness_s", "p99"], unit: "s", vs_floor: true },
    Figure { label: "timed lateness max", path: &["timed_lateness_s", "max"], unit: "s", vs_floor: true },
    Figure { label: "RSS before the storm", path: &["controller_rss_idle_mb"], unit: "MB", vs_floor: false },
    Figure { label: "peak RSS", path: &["controller_peak_rss_mb"], unit: "MB", vs_floor: false },
    Figure { label: "CPU in the storm", path: &["controller_cpu_s_during_storm"], unit: "s", vs_floor: false },
    Figure {
        label: "CPU, taint → last untolerated deletion: kube-apiserver",
        path: &["cpu_s_untolerated", "kube-apiserver"],
        unit: "s",
        vs_floor: true,
    },
    Figure { label: "… etcd", path: &["cpu_s_untolerated", "etcd"], unit: "s", vs_floor: true },
    Figure {
        label: "… the bench (its watch; the floor's writes)",
        path: &["cpu_s_untolerated", "bench"],
        unit: "s",
        vs_floor: true,
    },
    Figure { label: "… the controller", path: &["cpu_s_untolerated", "controller"], unit: "s", vs_floor: false },
    Figure { label: "… all of them", path: &["cpu_s_untolerated", "total"], unit: "s", vs_floor: true },
    Figure { label: "wrong evictions (all runs)", path: &["evicted_wrongly"], unit: "", vs_floor: false },
    Figure { label: "missing evictions (all runs)", path: &["missing"], unit: "", vs_floor: false },
];

/// The lifecycle table's figures (`bench lifecycle`: steady heartbeats, then 10% of the nodes
/// silent).
const LIFECYCLE_FIGURES: &[Figure] = &[
    Figure {
        label: "Lease renewals per second (workload)",
        path: &["lease_renewals_per_s"],
        unit: "/s",
        vs_floor: false,
    },
    Figure {
        label: "Lease renewals skipped (the node's last one still unanswered)",
        path: &["lease_renewals_skipped"],
        unit: "",
        vs_floor: false,
    },
    Figure {
        label: "every node's registration taint removed, after the start (before the window)",
        path: &["registration_taints_settled_s"],
        unit: "s",
        vs_floor: false,
    },
    Figure { label: "steady state measured", path: &["steady_seconds"], unit: "s", vs_floor: false },
    Figure { label: "CPU in the steady state", path: &["steady_cpu_s"], unit: "s", vs_floor: false },
    Figure { label: "RSS in steady state (max sample)", path: &["rss_mb_max_sample"], unit: "MB", vs_floor: false },
    Figure { label: "peak RSS", path: &["peak_rss_mb"], unit: "MB", vs_floor: false },
    Figure { label: "silent nodes", path: &["stopped"], unit: "", vs_floor: false },
    Figure { label: "silent nodes marked Unknown", path: &["detected"], unit: "", vs_floor: false },
    Figure {
        label: "detection delay after grace p50",
        path: &["detection_delay_after_grace_s", "p50"],
        unit: "s",
        vs_floor: false,
    },
    Figure {
        label: "detection delay after grace p99",
        path: &["detection_delay_after_grace_s", "p99"],
        unit: "s",
        vs_floor: false,
    },
    Figure {
        label: "detection delay after grace max",
        path: &["detection_delay_after_grace_s", "max"],
        unit: "s",
        vs_floor: false,
    },
    Figure {
        label: "unreachable NoExecute taints per second",
        path: &["noexecute_taints_per_s"],
        unit: "/s",
        vs_floor: false,
    },
];

fn get(report: &Value, path: &[&str]) -> Option<f64> {
    let v = path.iter().try_fold(report, |v, k| v.get(k))?;
    v.as_f64().filter(|x| x.is_finite())
}

/// Median and spread of some runs' values.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stat {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub n: usize,
    pub sum: f64,
}

pub fn stat(values: &[f64]) -> Option<Stat> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let median = if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 };
    Some(Stat { median, min: v[0], max: v[n - 1], n, sum: v.iter().sum() })
}

fn fmt_num(x: f64) -> String {
    let a = x.abs();
    if a >= 100.0 {
        format!("{x:.0}")
    } else if a >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

/// Runs grouped by size (`nodes × pods-per-node × lease period`, the period 0 when no Lease was
/// renewed; for lifecycle runs `nodes × lease period × 0`) and configuration.
type Groups = BTreeMap<(u64, u64, u64), BTreeMap<Config, Vec<Value>>>;

/// The eviction runs and the lifecycle runs of a directory.
#[derive(Default)]
pub struct Reports {
    pub eviction: Groups,
    pub lifecycle: Groups,
}

fn load(dir: &Path) -> Result<Reports> {
    let mut reports = Reports::default();
    let entries = std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))?;
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    for path in paths.iter().filter(|p| p.extension().is_some_and(|e| e == "json")) {
        let text = std::fs::read_to_string(path)?;
        let report: Value = serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))?;
        let nodes = report["nodes"].as_u64().unwrap_or(0);
        let (groups, key) = match report["benchmark"].as_str() {
            Some("eviction") => {
                let pods = report["pods"].as_u64().unwrap_or(0);
                let period = report["lease_period_s"].as_u64().unwrap_or(0);
                (&mut reports.eviction, (nodes, pods.checked_div(nodes).unwrap_or(0), period))
            }
            Some("lifecycle") => (&mut reports.lifecycle, (nodes, report["lease_period_s"].as_u64().unwrap_or(0), 0)),
            _ => continue,
        };
        groups.entry(key).or_default().entry(Config::of(&report)).or_default().push(report);
    }
    if reports.eviction.is_empty() && reports.lifecycle.is_empty() {
        bail!("no eviction or lifecycle reports in {}", dir.display());
    }
    Ok(reports)
}

/// One table: a row per figure, a column per configuration present.
fn table(md: &mut String, runs: &BTreeMap<Config, Vec<Value>>, figures: &[Figure]) {
    let configs: Vec<Config> = Config::ALL.into_iter().filter(|c| runs.contains_key(c)).collect();
    let _ = write!(md, "| figure |");
    for c in &configs {
        let n = runs[c].len();
        let _ = write!(md, " {} ({n} run{}) |", c.label(), if n == 1 { "" } else { "s" });
    }
    let _ = write!(md, "\n|---|");
    for _ in &configs {
        let _ = write!(md, "---|");
    }
    md.push('\n');
    let reference = fastest_floor(&configs, runs);
    for f in figures {
        let floor = reference
            .and_then(|c| runs.get(&c))
            .and_then(|r| stat(&r.iter().filter_map(|v| get(v, f.path)).collect::<Vec<_>>()));
        let mut cells = Vec::new();
        let mut any = false;
        for c in &configs {
            let values: Vec<f64> = runs[c].iter().filter_map(|v| get(v, f.path)).collect();
            let cell = match stat(&values) {
                None => "–".to_owned(),
                Some(s) if f.unit.is_empty() => {
                    any = true;
                    format!("{:.0}", s.sum)
                }
                Some(s) => {
                    any = true;
                    let mut cell = format!("{} {}", fmt_num(s.median), f.unit);
                    if s.n > 1 {
                        let _ = write!(cell, " ({}–{})", fmt_num(s.min), fmt_num(s.max));
                    }
                    if let (true, Some(fl), false) = (f.vs_floor, floor, Some(*c) == reference) {
                        let d = s.median - fl.median;
                        let _ = if d.abs() < 10.0 {
                            write!(cell, "<br>floor {:+.0} ms", d * 1000.0)
                        } else {
                            write!(cell, "<br>floor {d:+.0} s")
                        };
                    }
                    cell
                }
            };
            cells.push(cell);
        }
        if any {
            let _ = writeln!(md, "| {} | {} |", f.label, cells.join(" | "));
        }
    }
    md.push('\n');
}

/// The floor the figures are reported against: of the floors measured, the one with the lowest
/// median untolerated p50, since the floor is the fastest any client went. Which wire and HTTP
/// version that is depends on the machine (on two shared cores, protobuf over HTTP/1.1 beat
/// HTTP/2: the API server spends more CPU on HTTP/2). Column order breaks a tie, and stands in
/// where no floor has the figure (the lifecycle runs).
fn fastest_floor(configs: &[Config], runs: &BTreeMap<Config, Vec<Value>>) -> Option<Config> {
    let p50 = |c: &Config| {
        let values: Vec<f64> = runs[c].iter().filter_map(|v| get(v, &["immediate_after_taint_s", "p50"])).collect();
        stat(&values).map(|s| s.median)
    };
    configs.iter().copied().filter(|c| c.is_floor()).min_by(|a, b| match (p50(a), p50(b)) {
        (Some(x), Some(y)) => x.total_cmp(&y),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => std::cmp::Ordering::Equal,
    })
}

/// The markdown tables: one per size of the eviction storm, then one per lifecycle size.
pub fn markdown(reports: &Reports, command: &str) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "<!-- Written by `bench compare`; rerun `{command}` to refresh. -->\n");
    for ((nodes, per_node, period), runs) in &reports.eviction {
        let leases = if *period > 0 { format!(", every Lease renewed every {period} s") } else { String::new() };
        let _ = writeln!(md, "### Taint eviction storm: {nodes} nodes × {per_node} pods{leases}\n");
        table(&mut md, runs, FIGURES);
    }
    for ((nodes, period, _), runs) in &reports.lifecycle {
        let _ =
            writeln!(md, "### Node lifecycle: {nodes} nodes heartbeating (Lease every {period} s), then 10% silent\n");
        table(&mut md, runs, LIFECYCLE_FIGURES);
    }
    let _ = writeln!(
        md,
        "Medians over the runs, (min–max) their spread; \"floor +x ms\" is the median minus the API \
         floor's: of the floors measured, the fastest (the lowest median untolerated p50); counts are sums over \
         the runs. Produced by `{command}`."
    );
    md
}

/// The chart's layout: a panel's width and height, the space above the panels and left of them.
const PANEL_W: f64 = 300.0;
const PANEL_H: f64 = 220.0;
const TOP: f64 = 91.0;
/// The legend's entries per row, and their spacing.
const LEGEND_PER_ROW: usize = 4;
const LEGEND_W: f64 = 230.0;
const LEFT: f64 = 50.0;

/// A panel's vertical scale: linear from 0, or logarithmic from 0.1.
struct Scale {
    log: bool,
    max: f64,
}

impl Scale {
    /// For the largest value a panel shows (0 when it shows none).
    fn new(log: bool, largest: f64) -> Self {
        Self { log, max: if largest <= 0.0 { 1.0 } else { largest * 1.1 } }
    }

    /// Height of a value, 0..=PANEL_H.
    fn height(&self, v: f64) -> f64 {
        let (lo, hi) = (0.1_f64.log10(), (self.max * 3.0).max(1.0).log10());
        if self.log {
            PANEL_H * ((v.max(0.1).log10() - lo) / (hi - lo)).clamp(0.0, 1.0)
        } else {
            PANEL_H * v / self.max
        }
    }

    fn ticks(&self) -> Vec<f64> {
        if self.log {
            [0.1, 1.0, 10.0, 100.0, 1000.0].into_iter().filter(|t| *t <= self.max.max(1.0)).collect()
        } else {
            (0..=4).map(|k| self.max * f64::from(k) / 4.0).collect()
        }
    }
}

/// A grouped bar chart: per size, the p99 of untolerated deletions and of timed lateness, and
/// peak RSS, one bar per configuration (median, with a min-max whisker).
pub fn svg(groups: &Groups) -> String {
    // (title, figure, log scale): the latencies span 0.1 s to minutes (kube-controller-manager at
    // 20 qps), so their axes are logarithmic.
    let panels: [(&str, &[&str], bool); 3] = [
        ("untolerated: taint → deletion p99 (s, log)", &["immediate_after_taint_s", "p99"], true),
        ("timed lateness p99 (s, log)", &["timed_lateness_s", "p99"], true),
        ("peak RSS (MB)", &["controller_peak_rss_mb"], false),
    ];
    let (top, left) = (TOP, LEFT);
    let width = left + PANEL_W * panels.len() as f64 + 20.0;
    let height = top + PANEL_H + 70.0;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{left}" y="20" font-size="14" font-weight="bold">Taint eviction storm: ours vs kube-controller-manager vs the API floor (median, min–max)</text>"#
    );
    // The configurations of any size, in column order; each has its place in every group.
    let present: Vec<Config> =
        Config::ALL.into_iter().filter(|c| groups.values().any(|runs| runs.contains_key(c))).collect();
    // Legend: rows of LEGEND_PER_ROW (three rows fit above the panels).
    for (i, c) in present.iter().enumerate() {
        let x = left + (i % LEGEND_PER_ROW) as f64 * LEGEND_W;
        let y = 32.0 + (i / LEGEND_PER_ROW) as f64 * 16.0;
        let _ = writeln!(s, r#"<rect x="{x}" y="{y}" width="12" height="12" fill="{}"/>"#, c.color());
        let _ = writeln!(s, r#"<text x="{}" y="{}">{}</text>"#, x + 16.0, y + 10.0, c.label());
    }
    for (pi, (title, path, log)) in panels.iter().enumerate() {
        panel(&mut s, groups, &present, left + pi as f64 * PANEL_W, title, path, *log);
    }
    s.push_str("</svg>\n");
    s
}

/// One panel of the chart, at `x0`: its title, axes and ticks, then a group of bars per size.
fn panel(s: &mut String, groups: &Groups, present: &[Config], x0: f64, title: &str, path: &[&str], log: bool) {
    let top = TOP;
    let (cw, base) = (PANEL_W - 40.0, TOP + PANEL_H);
    let mut max = 0.0_f64;
    for runs in groups.values().flat_map(BTreeMap::values) {
        for v in runs.iter().filter_map(|r| get(r, path)) {
            max = max.max(v);
        }
    }
    let scale = Scale::new(log, max);
    let _ = writeln!(s, r#"<text x="{}" y="{}" font-weight="bold">{title}</text>"#, x0, top - 4.0);
    let _ = writeln!(s, r#"<line x1="{x0}" y1="{base}" x2="{}" y2="{base}" stroke="black"/>"#, x0 + cw);
    let _ = writeln!(s, r#"<line x1="{x0}" y1="{top}" x2="{x0}" y2="{base}" stroke="black"/>"#);
    for v in scale.ticks() {
        let y = base - scale.height(v);
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" text-anchor="end" font-size="9">{}</text>"#,
            x0 - 3.0,
            y + 3.0,
            fmt_num(v)
        );
        let _ = writeln!(s, r##"<line x1="{x0}" y1="{y}" x2="{}" y2="{y}" stroke="#ddd"/>"##, x0 + cw);
    }
    let group_w = cw / groups.len().max(1) as f64;
    for (si, (size, runs)) in groups.iter().enumerate() {
        let gx = x0 + si as f64 * group_w;
        bars(s, runs, present, gx, group_w, path, &scale);
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{}" text-anchor="middle">{} × {}{}</text>"#,
            gx + group_w / 2.0,
            base + 16.0,
            size.0,
            size.1,
            if size.2 > 0 { format!(", Leases every {} s", size.2) } else { String::new() }
        );
    }
}

/// The bars of one size in a panel, starting at `gx`: a place per configuration of `present`
/// (those of any size), a bar where this size has it.
fn bars(
    s: &mut String,
    runs: &BTreeMap<Config, Vec<Value>>,
    present: &[Config],
    gx: f64,
    group_w: f64,
    path: &[&str],
    scale: &Scale,
) {
    let base = TOP + PANEL_H;
    let bar_w = (group_w - 20.0) / present.len().max(1) as f64;
    for (ci, c) in present.iter().enumerate() {
        let Some(runs) = runs.get(c) else { continue };
        let Some(st) = stat(&runs.iter().filter_map(|r| get(r, path)).collect::<Vec<_>>()) else { continue };
        let bx = gx + 10.0 + ci as f64 * bar_w;
        let h = scale.height(st.median);
        let _ = writeln!(
            s,
            r#"<rect x="{bx:.1}" y="{:.1}" width="{:.1}" height="{h:.1}" fill="{}"><title>{}: {}</title></rect>"#,
            base - h,
            bar_w - 2.0,
            c.color(),
            c.label(),
            fmt_num(st.median)
        );
        let (ylo, yhi) = (base - scale.height(st.min), base - scale.height(st.max));
        let cx = bx + (bar_w - 2.0) / 2.0;
        let _ = writeln!(s, r#"<line x1="{cx:.1}" y1="{ylo:.1}" x2="{cx:.1}" y2="{yhi:.1}" stroke="black"/>"#);
        let _ = writeln!(
            s,
            r#"<text x="{cx:.1}" y="{:.1}" text-anchor="middle" font-size="8">{}</text>"#,
            yhi - 3.0,
            fmt_num(st.median)
        );
    }
}

pub fn run(args: &CompareArgs) -> Result<Value> {
    let reports = load(&args.runs)?;
    std::fs::create_dir_all(&args.out)?;
    let md = markdown(&reports, &args.command);
    std::fs::write(args.out.join("compare.md"), &md)?;
    std::fs::write(args.out.join("compare.svg"), svg(&reports.eviction))?;
    let sizes: Vec<String> = reports
        .eviction
        .keys()
        .map(|(n, p, l)| if *l > 0 { format!("{n}x{p}+leases/{l}s") } else { format!("{n}x{p}") })
        .collect();
    Ok(serde_json::json!({"benchmark": "compare", "sizes": sizes, "written": [
        args.out.join("compare.md"), args.out.join("compare.svg")]}))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn median_and_spread() {
        let s = stat(&[3.0, 1.0, 2.0]).expect("values");
        assert_eq!((s.median, s.min, s.max, s.n), (2.0, 1.0, 3.0, 3));
        assert_eq!(stat(&[1.0, 3.0]).map(|s| s.median), Some(2.0));
        assert!(stat(&[f64::NAN]).is_none());
    }

    const OURS: Config = Config::Ours { http2: false, json: false };
    const FLOOR: Config = Config::Floor { http2: true, json: false };
    const FLOOR_JSON: Config = Config::Floor { http2: false, json: true };

    #[test]
    fn configurations_from_reports() {
        // A floor report from before --floor-wire / --floor-http2: JSON over HTTP/1.1.
        assert_eq!(Config::of(&json!({"floor": true})), FLOOR_JSON);
        assert_eq!(Config::of(&json!({"floor": true, "floor_wire": "json", "floor_http2": false})), FLOOR_JSON);
        assert_eq!(Config::of(&json!({"floor": true, "floor_wire": "protobuf", "floor_http2": true})), FLOOR);
        let watching = json!({"floor": true, "floor_wire": "protobuf", "floor_http2": true, "floor_watch_pods": true});
        assert_eq!(Config::of(&watching), Config::FloorWatchingPods);
        assert!(!Config::FloorWatchingPods.is_floor());
        assert_eq!(
            Config::of(&json!({"floor": true, "floor_wire": "protobuf", "floor_http2": false})),
            Config::Floor { http2: false, json: false }
        );
        assert_eq!(Config::of(&json!({"upstream": true, "controller_flags": []})), Config::KcmDefault);
        assert_eq!(
            Config::of(&json!({"upstream": true, "controller_flags": ["--kube-api-qps=2000"]})),
            Config::KcmBudget
        );
        assert_eq!(Config::of(&json!({"upstream": false, "controller_flags": []})), OURS);
        assert_eq!(
            Config::of(&json!({"upstream": false, "controller_flags": ["--api-http2"]})),
            Config::Ours { http2: true, json: false }
        );
        let json_ours = Config::Ours { http2: false, json: true };
        assert_eq!(
            Config::of(&json!({"upstream": false, "controller_flags": ["--kube-api-content-type=application/json"]})),
            json_ours
        );
        assert_eq!(
            Config::of(
                &json!({"upstream": false, "controller_flags": ["--kube-api-content-type", "application/json"]})
            ),
            json_ours
        );
        assert_eq!(
            Config::of(&json!({"upstream": false,
                               "controller_flags": ["--kube-api-content-type=application/vnd.kubernetes.protobuf"]})),
            OURS
        );
        assert_eq!(
            Config::of(&json!({"upstream": false,
                               "controller_flags": ["--api-http2", "--kube-api-content-type=application/json"]})),
            Config::Ours { http2: true, json: true }
        );
        // Every configuration has its own label and place.
        let labels: std::collections::BTreeSet<&str> = Config::ALL.iter().map(|c| c.label()).collect();
        assert_eq!(labels.len(), Config::ALL.len());
    }

    /// An eviction report of ours at 10 nodes whose untolerated p50 and p99 are both `secs`,
    /// with `extra`'s fields (a floor's) added.
    fn run(extra: Value, secs: f64) -> Value {
        let mut r = json!({"benchmark": "eviction", "nodes": 10, "pods": 300, "upstream": false,
                           "controller_flags": [], "immediate_after_taint_s": {"p50": secs, "p99": secs}});
        if let (Some(r), Some(f)) = (r.as_object_mut(), extra.as_object()) {
            r.extend(f.clone());
        }
        r
    }

    #[test]
    fn columns_in_order_and_figures_against_the_fastest_floor() {
        let mut reports = Reports::default();
        let g = reports.eviction.entry((10, 30, 0)).or_default();
        g.insert(FLOOR_JSON, vec![run(json!({"floor": true}), 0.8)]);
        g.insert(FLOOR, vec![run(json!({"floor": true, "floor_wire": "protobuf", "floor_http2": true}), 0.5)]);
        g.insert(Config::KcmDefault, vec![run(json!({"upstream": true}), 30.0)]);
        g.insert(Config::Ours { http2: false, json: true }, vec![run(json!({}), 1.5)]);
        g.insert(Config::Ours { http2: true, json: false }, vec![run(json!({}), 0.9)]);
        g.insert(OURS, vec![run(json!({}), 1.0)]);
        let md = markdown(&reports, "make bench-compare");
        assert!(
            md.contains(
                "| figure | ours (1 run) | ours, HTTP/2 (1 run) | ours, JSON (1 run) | kcm, defaults (1 run) \
                 | API floor (protobuf, HTTP/2) (1 run) | API floor (JSON, HTTP/1.1) (1 run) |"
            ),
            "{md}"
        );
        // Against the protobuf HTTP/2 floor, the JSON floor included; not the floor itself.
        assert!(
            md.contains(
                "| untolerated: taint → deletion p99 | 1.00 s<br>floor +500 ms | 0.90 s<br>floor +400 ms \
                 | 1.50 s<br>floor +1000 ms | 30.0 s<br>floor +30 s | 0.50 s | 0.80 s<br>floor +300 ms |"
            ),
            "{md}"
        );
        let svg = svg(&reports.eviction);
        assert!(svg.contains(">API floor (protobuf, HTTP/2)</text>") && svg.contains(">ours, JSON</text>"), "{svg}");
        assert!(!svg.contains("kcm, our budget"), "absent configurations have no legend: {svg}");
    }

    #[test]
    fn figures_are_against_the_fastest_floor_measured_not_the_first_column() {
        let h2 = json!({"floor": true, "floor_wire": "protobuf", "floor_http2": true});
        let h1 = json!({"floor": true, "floor_wire": "protobuf", "floor_http2": false});
        let mut reports = Reports::default();
        let g = reports.eviction.entry((10, 30, 0)).or_default();
        g.insert(FLOOR, vec![run(h2.clone(), 2.0), run(h2, 3.0)]);
        g.insert(Config::Floor { http2: false, json: false }, vec![run(h1.clone(), 1.5), run(h1, 1.7)]);
        g.insert(OURS, vec![run(json!({}), 2.0)]);
        let md = markdown(&reports, "make bench-compare");
        // The HTTP/1.1 floor (median 1.60 s) is the reference, though the HTTP/2 one comes first.
        assert!(
            md.contains(
                "| untolerated: taint → deletion p50 | 2.00 s<br>floor +400 ms | 2.50 s (2.00–3.00)<br>floor +900 ms \
                 | 1.60 s (1.50–1.70) |"
            ),
            "{md}"
        );
    }

    #[test]
    fn table_has_medians_and_the_floor_difference() {
        let run = |floor: bool, p99: f64| {
            json!({"benchmark": "eviction", "nodes": 10, "pods": 300, "floor": floor, "upstream": false,
                   "immediate_after_taint_s": {"p50": p99 / 2.0, "p99": p99}, "missing": 0, "evicted_wrongly": 0})
        };
        let mut reports = Reports::default();
        let g = reports.eviction.entry((10, 30, 0)).or_default();
        g.insert(OURS, vec![run(false, 1.0), run(false, 1.2), run(false, 3.0)]);
        g.insert(FLOOR_JSON, vec![run(true, 0.9)]);
        let lc = |upstream: bool, p99: f64| {
            json!({"benchmark": "lifecycle", "nodes": 10, "lease_period_s": 10, "upstream": upstream, "controller_flags": [],
                   "stopped": 1, "detected": 1, "detection_delay_after_grace_s": {"p50": p99, "p99": p99}})
        };
        let l = reports.lifecycle.entry((10, 10, 0)).or_default();
        l.insert(OURS, vec![lc(false, 0.5)]);
        l.insert(Config::KcmDefault, vec![lc(true, 4.0)]);
        let md = markdown(&reports, "make bench-compare");
        assert!(md.contains("### Taint eviction storm: 10 nodes × 30 pods"), "{md}");
        assert!(md.contains("| ours (1 run) | kcm, defaults (1 run) |"), "{md}");
        assert!(md.contains("| detection delay after grace p99 | 0.50 s | 4.00 s |"), "{md}");
        assert!(md.contains("| silent nodes marked Unknown | 1 | 1 |"), "{md}");
        assert!(
            md.contains("| untolerated: taint → deletion p99 | 1.20 s (1.00–3.00)<br>floor +300 ms | 0.90 s |"),
            "{md}"
        );
        assert!(md.contains("| wrong evictions (all runs) | 0 | 0 |"), "{md}");
        assert!(svg(&reports.eviction).starts_with("<svg"));
    }

    #[test]
    fn runs_with_leases_renewed_are_a_group_of_their_own() -> Result<()> {
        let dir = std::env::temp_dir().join(format!("bench-compare-leases-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let run = |period: Option<u64>, renewals: Option<f64>| {
            json!({"benchmark": "eviction", "nodes": 10, "pods": 300, "upstream": false, "controller_flags": [],
                   "lease_period_s": period, "lease_renewals_per_s": renewals,
                   "immediate_after_taint_s": {"p50": 1.0, "p99": 1.0}})
        };
        std::fs::write(dir.join("10-ours-1.json"), run(None, None).to_string())?;
        std::fs::write(dir.join("10-ours-leases-1.json"), run(Some(10), Some(1.0)).to_string())?;
        let reports = load(&dir);
        std::fs::remove_dir_all(&dir)?;
        let md = markdown(&reports?, "make bench-compare");
        assert!(md.contains("### Taint eviction storm: 10 nodes × 30 pods\n"), "{md}");
        assert!(md.contains("### Taint eviction storm: 10 nodes × 30 pods, every Lease renewed every 10 s\n"), "{md}");
        assert_eq!(md.matches("| Lease renewals per second in the storm (workload) | 1.00 /s |").count(), 1, "{md}");
        Ok(())
    }
}
