#!/usr/bin/env python3
"""`make test`'s runner: `cargo test --workspace`, its test targets run side by side.

Most of the suite waits on real API servers and grace periods, each test target on a control
plane of its own, so `cargo test` running the targets one after another left the machine idle
most of the time. This builds everything once (`cargo test --no-run`), then runs the unit tests
and each integration test target as its own `cargo test` (the same environment cargo gives
them), NLC_TEST_JOBS at a time (default 3), longest first by the durations the last run
recorded ($NLC_CACHE_DIR/test-durations.json). Targets named in NLC_TEST_ALONE (default
`hostile` and `webhook_flood`, whose floods time our listeners under load) run with nothing beside them. Each
target's output is printed whole when it ends; the exit status fails when any target failed
(every target runs, as with --no-fail-fast).

    scripts/test.py [--skip NAME]...     (passed to every target's test harness)
"""

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CARGO = os.environ.get("CARGO", "cargo")
JOBS = max(1, int(os.environ.get("NLC_TEST_JOBS", "3")))
ALONE = set(os.environ.get("NLC_TEST_ALONE", "hostile webhook_flood").split())
CACHE = Path(
    os.environ.get("NLC_CACHE_DIR")
    or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "node-lifecycle-controller"
)
DURATIONS = CACHE / "test-durations.json"
UNKNOWN_S = 60.0


def targets():
    """(name, cargo arguments) of every job: the workspace's unit tests, its doc tests, and each
    integration test target."""
    meta = json.loads(
        subprocess.run(
            [CARGO, "metadata", "--no-deps", "--format-version", "1", "--locked"],
            cwd=ROOT,
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )
    jobs = [("unit", ["--workspace", "--lib", "--bins"]), ("doc", ["--workspace", "--doc"])]
    for pkg in meta["packages"]:
        for t in pkg["targets"]:
            # As `cargo test --workspace`: a target that needs a feature (e2e, kind) is left out.
            if "test" in t["kind"] and not t.get("required-features"):
                # --workspace: the features the build step unified, so nothing is rebuilt.
                jobs.append((t["name"], ["--workspace", "--test", t["name"]]))
    return jobs


def main(argv):
    harness = []
    args = list(argv)
    while args:
        a = args.pop(0)
        if a == "--skip" and args:
            harness += ["--skip", args.pop(0)]
        else:
            sys.exit(f"test.py: unknown argument {a!r} (only --skip NAME)")
    build = subprocess.run([CARGO, "test", "--workspace", "--locked", "--no-run"], cwd=ROOT)
    if build.returncode != 0:
        sys.exit(build.returncode)
    try:
        known = json.loads(DURATIONS.read_text())
    except (OSError, ValueError):
        known = {}
    jobs = sorted(targets(), key=lambda j: -float(known.get(j[0], UNKNOWN_S)))
    alone = [j for j in jobs if j[0] in ALONE]
    shared = [j for j in jobs if j[0] not in ALONE]

    lock = threading.Lock()
    results = {}  # name -> (returncode, seconds)

    def run(job):
        name, cargo_args = job
        with lock:
            print(f"----- {name}: started", flush=True)
        start = time.monotonic()
        cmd = [CARGO, "test", "--locked", *cargo_args]
        if harness and name != "doc":
            cmd += ["--", *harness]
        p = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        took = time.monotonic() - start
        with lock:
            results[name] = (p.returncode, took)
            out = p.stdout.decode("utf-8", "replace")
            sys.stdout.write(f"\n----- {name}: {'ok' if p.returncode == 0 else 'FAILED'} in {took:.1f} s\n{out}")
            sys.stdout.flush()

    def pool(queue, width):
        queue = list(queue)

        def worker():
            while True:
                with lock:
                    if not queue:
                        return
                    job = queue.pop(0)
                run(job)

        threads = [threading.Thread(target=worker) for _ in range(min(width, len(queue)))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    began = time.monotonic()
    pool(alone, 1)
    pool(shared, JOBS)
    wall = time.monotonic() - began

    CACHE.mkdir(parents=True, exist_ok=True)
    known.update({name: round(took, 1) for name, (_, took) in results.items()})
    tmp = DURATIONS.with_suffix(".tmp")
    tmp.write_text(json.dumps(known, indent=1, sort_keys=True))
    tmp.replace(DURATIONS)

    failed = sorted(name for name, (code, _) in results.items() if code != 0)
    serial = sum(took for _, took in results.values())
    print(
        f"\n===== {len(results)} test targets in {wall:.0f} s ({serial:.0f} s one after another), "
        f"{JOBS} at a time beside {', '.join(sorted(ALONE)) or 'nothing'} alone"
    )
    if failed:
        print(f"error: {len(failed)} targets failed:\n" + "".join(f"    `{f}`\n" for f in failed))
        return 101
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
