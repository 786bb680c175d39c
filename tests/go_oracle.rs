//! Go as the judge of what the controller reimplements from Go: random inputs, structured to
//! reach the corners (Go's field-name folding, duplicate keys, `null`s, number forms; RFC 3339
//! strings near every boundary; bytes that are not UTF-8), are given to a small Go program
//! (`tests/oracle/main.go`, the standard library only, built here) and to the Rust code, and the
//! answers must be equal:
//!
//! - `admission::go_json::tolerations` against `json.Unmarshal` into `[]v1.Toleration`'s shape;
//! - `time::parse_go_time` against `time.Parse(time.RFC3339, ...)` (what `metav1.Time` reads);
//! - `wire::proto::go_lossy` (how a protobuf string with bad UTF-8 reads) against what
//!   `json.Marshal` writes of the same bytes.
//!
//! `NLC_ORACLE_CASES` cases of each (default 3,000; `make fuzz` runs 200,000), seeded by
//! `NLC_ORACLE_SEED` (default 1). Needs Go (CI has it): without it the test fails, saying so.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use common::rng::Rng;
use jiff::Timestamp;
use serde_json::{Value, json};

struct Oracle {
    _child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Oracle {
    /// Builds and starts the Go program (cached by Go's build cache).
    fn start() -> Self {
        let dir = std::env::temp_dir().join(format!("nlc-go-oracle-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let bin = dir.join("oracle");
        let src = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/oracle/main.go");
        let built = Command::new("go")
            .args(["build", "-o"])
            .arg(&bin)
            .arg(src)
            .env("GOTOOLCHAIN", "local")
            .env("GOFLAGS", "-mod=mod")
            .output()
            .unwrap_or_else(|e| panic!("the Go oracle needs Go on PATH (CI installs it): {e}"));
        assert!(built.status.success(), "building the Go oracle failed:\n{}", String::from_utf8_lossy(&built.stderr));
        let mut child =
            Command::new(&bin).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().expect("start the Go oracle");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        Self { _child: child, stdin, stdout }
    }

    fn ask(&mut self, request: &Value) -> Value {
        let mut line = serde_json::to_vec(request).expect("request");
        line.push(b'\n');
        self.stdin.write_all(&line).expect("write to the oracle");
        self.stdin.flush().expect("flush");
        let mut answer = String::new();
        self.stdout.read_line(&mut answer).expect("read the oracle's answer");
        serde_json::from_str(&answer).unwrap_or_else(|e| panic!("the oracle answered {answer:?}: {e}"))
    }
}

fn cases() -> usize {
    std::env::var("NLC_ORACLE_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(3000)
}

fn seed() -> u64 {
    std::env::var("NLC_ORACLE_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(1).max(1)
}

// ---- tolerations ----

/// Keys that name a field in Go, and ones that only look as if they might.
const KEYS: &[&str] = &[
    "key",
    "Key",
    "KEY",
    "kEy",
    "\u{212A}ey",
    "keẙ",
    "operator",
    "OPERATOR",
    "Operator",
    "value",
    "VALUE",
    "vaLue",
    "effect",
    "EFFECT",
    "e\u{FB00}fect",
    "tolerationSeconds",
    "TolerationSeconds",
    "tolerationseconds",
    "toleration\u{017F}econds",
    "toleratıonSeconds",
    "tolerationßeconds",
    "unknown",
    "",
    "k\u{0301}ey",
];

fn random_string(rng: &mut Rng) -> String {
    let pool = ["", "a", "Exists", "Equal", "NoExecute", "NoSchedule", "x\u{FFFD}y", "é", "\u{212A}", "\\", "\"q\""];
    let mut s = String::new();
    for _ in 0..rng.below(3) {
        let piece: &&str = rng.pick(&pool);
        s.push_str(piece);
    }
    s
}

fn random_number(rng: &mut Rng) -> String {
    match rng.below(12) {
        0 => "0".into(),
        1 => "-0".into(),
        2 => format!("{}", rng.next() as i64),
        3 => "9223372036854775807".into(),
        4 => "9223372036854775808".into(),
        5 => "-9223372036854775808".into(),
        6 => "-9223372036854775809".into(),
        7 => "300.0".into(),
        8 => "3e2".into(),
        9 => "1E0".into(),
        10 => "0.5".into(),
        _ => format!("{}", rng.below(1000)),
    }
}

fn random_value(rng: &mut Rng, depth: u32) -> String {
    match rng.below(if depth > 1 { 5 } else { 7 }) {
        0 | 1 => serde_json::to_string(&random_string(rng)).unwrap_or_default(),
        2 => random_number(rng),
        3 => "null".into(),
        4 => (*rng.pick(&["true", "false"])).into(),
        5 => format!("[{}]", random_value(rng, depth + 1)),
        _ => format!("{{\"x\": {}}}", random_value(rng, depth + 1)),
    }
}

fn random_tolerations(rng: &mut Rng) -> String {
    if rng.chance(5) {
        return (*rng.pick(&["null", "", "{}", "[", "[] []", "[1]", "\"x\"", " [ ] "])).into();
    }
    let mut items = Vec::new();
    for _ in 0..rng.below(4) {
        if rng.chance(8) {
            items.push("null".to_owned());
            continue;
        }
        let mut fields = Vec::new();
        for _ in 0..rng.below(6) {
            let key = serde_json::to_string(rng.pick(KEYS)).unwrap_or_default();
            fields.push(format!("{key}: {}", random_value(rng, 0)));
        }
        items.push(format!("{{{}}}", fields.join(", ")));
    }
    format!("[{}]", items.join(", "))
}

/// A toleration as both sides compare it: absent and empty strings alike (Go's zero value).
fn normal(t: &k8s_openapi::api::core::v1::Toleration) -> Value {
    let s = |o: &Option<String>| o.clone().unwrap_or_default();
    json!([s(&t.key), s(&t.operator), s(&t.value), s(&t.effect), t.toleration_seconds])
}

fn normal_go(t: &Value) -> Value {
    let s = |k: &str| t.get(k).and_then(Value::as_str).unwrap_or_default().to_owned();
    json!([s("key"), s("operator"), s("value"), s("effect"), t.get("tolerationSeconds").and_then(Value::as_i64)])
}

// ---- times ----

fn two(rng: &mut Rng, max: u64) -> String {
    format!("{:02}", rng.below(max))
}

fn random_time(rng: &mut Rng) -> String {
    let year = match rng.below(6) {
        0 => "0000".to_owned(),
        1 => "9999".to_owned(),
        2 => "1970".to_owned(),
        3 => format!("{:04}", rng.below(10000)),
        4 => format!("{}", rng.below(100)),
        _ => format!("{:04}", 1900 + rng.below(200)),
    };
    let month = if rng.chance(90) { format!("{:02}", 1 + rng.below(12)) } else { two(rng, 100) };
    let day = if rng.chance(80) { format!("{:02}", 1 + rng.below(28)) } else { two(rng, 33) };
    let hour = if rng.chance(90) { two(rng, 24) } else { two(rng, 100) };
    let minute = if rng.chance(90) { two(rng, 60) } else { two(rng, 100) };
    let second = if rng.chance(90) { two(rng, 60) } else { two(rng, 100) };
    let fraction = match rng.below(6) {
        0 => String::new(),
        1 => ".".to_owned(),
        2 => format!(".{}", rng.below(1_000_000_000)),
        3 => format!(".{:012}", rng.next() % 1_000_000_000_000),
        4 => format!(",{}", rng.below(1000)),
        _ => format!(".{:06}", rng.below(1_000_000)),
    };
    let zone = match rng.below(8) {
        0 | 1 => "Z".to_owned(),
        2 => "z".to_owned(),
        3 => format!("+{}:{}", two(rng, 24), two(rng, 60)),
        4 => format!("-{}:{}", two(rng, 30), two(rng, 70)),
        5 => "-00:00".to_owned(),
        6 => format!("+{}{}", two(rng, 24), two(rng, 60)),
        _ => String::new(),
    };
    let sep = if rng.chance(95) { "T" } else { *rng.pick(&["t", " ", "_"]) };
    let mut s = format!("{year}-{month}-{day}{sep}{hour}:{minute}:{second}{fraction}{zone}");
    if rng.chance(5) && !s.is_empty() {
        // One byte changed.
        let mut b = s.into_bytes();
        let i = rng.below(b.len() as u64) as usize;
        b[i] = *rng.pick(b"0Z:-+.T a9");
        s = String::from_utf8_lossy(&b).into_owned();
    }
    s
}

// ---- strings ----

fn random_bytes(rng: &mut Rng) -> Vec<u8> {
    let pieces: &[&[u8]] = &[
        b"a",
        b"ok",
        "é".as_bytes(),
        "€".as_bytes(),
        "😀".as_bytes(),
        &[0xff],
        &[0xc3],
        &[0xe2, 0x82],
        &[0xed, 0xa0, 0x80],
        &[0xf0, 0x9f, 0x98],
        &[0xf4, 0x90, 0x80, 0x80],
        &[0xc0, 0xaf],
        &[0x80],
        &[0],
        b"<&>",
        "\u{2028}".as_bytes(),
    ];
    let mut out = Vec::new();
    for _ in 0..rng.below(8) {
        if rng.chance(10) {
            out.push(rng.next() as u8);
        } else {
            let piece: &&[u8] = rng.pick(pieces);
            out.extend_from_slice(piece);
        }
    }
    out
}

#[test]
fn what_we_reimplement_from_go_answers_as_go_does() {
    use base64::Engine as _;
    let mut go = Oracle::start();
    let mut rng = Rng(seed().wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let n = cases();
    let mut differences = Vec::new();
    for _ in 0..n {
        // Tolerations.
        let text = random_tolerations(&mut rng);
        let ours = nlc_core::admission::go_json::tolerations(&text);
        let theirs = go.ask(&json!({"op": "tolerations", "text": text}));
        let agree = match (&ours, theirs.get("ok")) {
            (Ok(list), Some(Value::Array(go_list))) => {
                list.iter().map(normal).collect::<Vec<_>>() == go_list.iter().map(normal_go).collect::<Vec<_>>()
            }
            (Err(_), None) => theirs.get("err").is_some(),
            _ => false,
        };
        if !agree {
            differences.push(format!("tolerations {text:?}: ours {ours:?}, Go {theirs}"));
        }
        // Times.
        let s = random_time(&mut rng);
        let ours = nlc_core::time::parse_go_time(&s);
        let theirs = go.ask(&json!({"op": "time", "text": s}));
        let want = match (theirs.get("unix").and_then(Value::as_i64), theirs.get("nanos").and_then(Value::as_i64)) {
            (Some(unix), Some(nanos)) => Some(Timestamp::new(unix, nanos as i32).unwrap_or(if unix < 0 {
                Timestamp::MIN
            } else {
                Timestamp::MAX
            })),
            _ => None,
        };
        if ours != want {
            differences.push(format!("time {s:?}: ours {ours:?}, Go {theirs}"));
        }
        // Strings that are not UTF-8.
        let bytes = random_bytes(&mut rng);
        let b64 = base64::engine::general_purpose::STANDARD.encode(&bytes);
        let theirs = go.ask(&json!({"op": "string", "bytes": b64}));
        let go_string: Option<String> =
            theirs.get("json").and_then(Value::as_str).and_then(|j| serde_json::from_str(j).ok());
        let ours = nlc_core::wire::proto::go_lossy(&bytes);
        if go_string.as_deref() != Some(ours.as_str()) {
            differences.push(format!("bytes {bytes:?}: ours {ours:?}, Go {theirs}"));
        }
    }
    eprintln!("{n} cases of each (seed {}): {} differences", seed(), differences.len());
    assert!(
        differences.is_empty(),
        "{} differences, the first ones:\n{}",
        differences.len(),
        differences[..differences.len().min(20)].join("\n")
    );
}
