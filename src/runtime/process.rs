//! The process metrics every Prometheus client library exports (`process_*`), read from
//! `/proc/self` at each scrape, as client_golang's process collector reads them: CPU seconds,
//! resident and virtual memory, open and maximum file descriptors, start time. Where `/proc` is
//! not there (not Linux), the metrics are left out.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// `/proc` reports times in USER_HZ ticks, 100 a second on every Linux architecture's ABI.
const USER_HZ: f64 = 100.0;

#[derive(Debug, Default, PartialEq)]
pub(crate) struct Sample {
    pub(crate) cpu_seconds: f64,
    pub(crate) resident_bytes: f64,
    pub(crate) virtual_bytes: f64,
    pub(crate) open_fds: f64,
    pub(crate) max_fds: f64,
    pub(crate) start_time_seconds: f64,
}

/// Parses `/proc/self/stat` (after the command name, which may hold spaces and parentheses),
/// `/proc/self/status`, `/proc/self/limits` and the boot time of `/proc/stat`.
pub(crate) fn parse(stat: &str, status: &str, limits: &str, proc_stat: &str, open_fds: usize) -> Option<Sample> {
    let after_comm = &stat[stat.rfind(')')? + 1..];
    // Fields from the state (field 3) on: utime is field 14, stime 15, starttime 22, vsize 23.
    let fields: Vec<&str> = after_comm.split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<f64>().ok());
    let kb = |key: &str| {
        status.lines().find_map(|l| l.strip_prefix(key)).and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
    };
    let boot = proc_stat.lines().find_map(|l| l.strip_prefix("btime ")).and_then(|v| v.trim().parse::<f64>().ok())?;
    let max_fds = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3))
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(0.0);
    Some(Sample {
        cpu_seconds: (field(14)? + field(15)?) / USER_HZ,
        resident_bytes: kb("VmRSS:")? * 1024.0,
        virtual_bytes: field(23)?,
        open_fds: open_fds as f64,
        max_fds,
        start_time_seconds: boot + field(22)? / USER_HZ,
    })
}

fn read() -> Option<Sample> {
    let text = |p: &str| std::fs::read_to_string(p).ok();
    let open_fds = std::fs::read_dir("/proc/self/fd").ok()?.count();
    parse(
        &text("/proc/self/stat")?,
        &text("/proc/self/status")?,
        &text("/proc/self/limits")?,
        &text("/proc/stat")?,
        open_fds,
    )
}

#[derive(Debug)]
pub(crate) struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(s) = read() else { return Ok(()) };
        let cpu = ConstCounter::new(s.cpu_seconds);
        cpu.encode(encoder.encode_descriptor(
            "process_cpu_seconds",
            "Total user and system CPU time spent in seconds",
            None,
            cpu.metric_type(),
        )?)?;
        for (name, help, value) in [
            ("process_resident_memory_bytes", "Resident memory size in bytes", s.resident_bytes),
            ("process_virtual_memory_bytes", "Virtual memory size in bytes", s.virtual_bytes),
            ("process_open_fds", "Number of open file descriptors", s.open_fds),
            ("process_max_fds", "Maximum number of open file descriptors", s.max_fds),
            (
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds",
                s.start_time_seconds,
            ),
        ] {
            let g = ConstGauge::new(value);
            g.encode(encoder.encode_descriptor(name, help, None, g.metric_type())?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_name_with_spaces_and_parentheses_does_not_shift_the_fields() {
        let stat = "4242 (node (x) y) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 50 0 0 20 0 8 0 12345 104857600 2000 18446744073709551615";
        let status = "Name:\tx\nVmRSS:\t   20480 kB\nThreads:\t8\n";
        let limits = "Limit                     Soft Limit           Hard Limit           Units\nMax open files            1048576              1048576              files\n";
        let s = parse(stat, status, limits, "cpu 1 2 3\nbtime 1700000000\n", 12).expect("parsed");
        assert_eq!(s.cpu_seconds, 3.0);
        assert_eq!(s.resident_bytes, 20_971_520.0);
        assert_eq!(s.virtual_bytes, 104_857_600.0);
        assert_eq!(s.open_fds, 12.0);
        assert_eq!(s.max_fds, 1_048_576.0);
        assert!((s.start_time_seconds - 1_700_000_123.45).abs() < 1e-3, "{}", s.start_time_seconds);
    }

    #[test]
    fn this_process_can_be_read() {
        let s = read().expect("/proc/self");
        assert!(s.resident_bytes > 0.0 && s.open_fds > 0.0 && s.start_time_seconds > 1.6e9, "{s:?}");
    }
}
