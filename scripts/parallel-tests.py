#!/usr/bin/env python3
"""Runs a test bundle's tests in parallel, one process per test (docs/testing.md).

What `swift test --parallel` does, without its two costs on the integration tier: the package
graph loaded again before the first test (about 10 s of CPU), and the bundle's own order, which
starts the longest tests whenever their names come up, so the tier ends waiting on one of them.
Here the tests named in the durations file (scripts/test-durations.txt: the last full run's
slowest, seconds first) start first, longest first, and the rest fill in around them.

    parallel-tests.py BUNDLE --workers N [--tests FILE] [--only REGEX] [--skip REGEX]... [--durations FILE]
                      [--record FILE] [--timeout SECONDS]

Prints one line a test as it ends, the whole output of every failed test, and exits non-zero when
any test failed, crashed or ran past --timeout (its process group is killed).
"""
import argparse
import collections
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time


# One test's end: its name, wall seconds, whether it passed, its output, and its process's CPU seconds.
Result = collections.namedtuple("Result", "name seconds passed output cpu")


def log(message):
    print(f"[stratus] {message}", file=sys.stderr, flush=True)


def listed_tests(bundle, listing_file):
    if listing_file and os.path.exists(listing_file) and os.path.getsize(listing_file) > 0:
        with open(listing_file) as file:
            listing = file.read()
    else:
        listing = subprocess.run([bundle, "--list-tests"], stdin=subprocess.DEVNULL, capture_output=True, text=True, check=True).stdout
    # XCTest's listing: `Module.Class/testName`, one a line.
    return [line.strip() for line in listing.splitlines() if re.fullmatch(r"[\w.]+/\w+", line.strip())]


def known_durations(path):
    durations = {}
    if path and os.path.exists(path):
        with open(path) as file:
            for line in file:
                fields = line.split()
                if len(fields) == 2 and not line.startswith("#"):
                    try:
                        durations[fields[1]] = float(fields[0])
                    except ValueError:
                        pass
    return durations


class Run:
    def __init__(self, tests, arguments):
        self.pending = list(tests)
        self.arguments = arguments
        self.lock = threading.Lock()
        self.results = []  # Result
        self.total = len(tests)

    def next_test(self):
        with self.lock:
            return self.pending.pop(0) if self.pending else None

    def run_one(self, name):
        started = time.monotonic()
        with tempfile.TemporaryFile(mode="w+") as output:
            process = subprocess.Popen(
                [self.arguments.bundle, name], stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT, start_new_session=True)
            timed_out = threading.Event()

            def kill():
                timed_out.set()
                try:
                    os.killpg(process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

            timer = threading.Timer(self.arguments.timeout, kill)
            timer.start()
            # wait4, not wait: the test process's own CPU time comes with its status.
            _, wait_status, usage = os.wait4(process.pid, 0)
            timer.cancel()
            process.returncode = status = os.waitstatus_to_exitcode(wait_status)
            cpu = usage.ru_utime + usage.ru_stime
            output.seek(0)
            text = output.read()
        seconds = time.monotonic() - started
        # A test that passes says so; a crash (a signal), a failure or a hang does not.
        passed = status == 0 and not timed_out.is_set() and re.search(r"Executed [1-9]\d* tests?", text) is not None
        if timed_out.is_set():
            text += f"\n[stratus] killed after {self.arguments.timeout} s\n"
        elif status < 0:
            text += f"\n[stratus] ended by signal {-status}\n"
        with self.lock:
            self.results.append(Result(name, seconds, passed, text, cpu))
            done = len(self.results)
            log(f"[{done}/{self.total}] {'passed' if passed else 'FAILED'} {name} ({seconds:.1f} s, {cpu:.1f} s of CPU)")
            if not passed:
                sys.stderr.write(text[-60_000:])
                sys.stderr.flush()

    def worker(self):
        while (name := self.next_test()) is not None:
            self.run_one(name)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("bundle")
    parser.add_argument("--tests", default=None, help="the bundle's list of tests (`BUNDLE --list-tests`), if made already")
    parser.add_argument("--workers", type=int, default=6)
    parser.add_argument("--only", default=None, help="run only the tests that match")
    parser.add_argument("--skip", action="append", default=[], help="leave out the tests that match")
    parser.add_argument("--durations", default=None, help="seconds and name a line: these start first, longest first")
    parser.add_argument("--record", default=None, help="write this run's durations here, slowest first")
    parser.add_argument("--timeout", type=float, default=900)
    arguments = parser.parse_args()

    tests = [name for name in listed_tests(arguments.bundle, arguments.tests)
             if (arguments.only is None or re.search(arguments.only, name)) and not any(re.search(skip, name) for skip in arguments.skip)]
    if not tests:
        log("no test matched")
        return 1
    durations = known_durations(arguments.durations)
    # Longest first among the known ones; the others keep the bundle's order after them.
    tests.sort(key=lambda name: -durations.get(name, 0))
    log(f"{len(tests)} tests, {arguments.workers} at once ({sum(1 for name in tests if name in durations)} of known duration first)")
    run = Run(tests, arguments)
    threads = [threading.Thread(target=run.worker, daemon=True) for _ in range(max(1, arguments.workers))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # What to look at when the tier grows: the slowest, and the ones whose own process computes most.
    slowest = sorted(run.results, key=lambda result: -result.seconds)
    log(f"{len(slowest)} tests, {sum(result.seconds for result in slowest):.0f} s in all; the slowest:")
    for result in slowest[:10]:
        log(f"  {result.seconds:6.1f} s  {result.name}")
    if arguments.record:
        with open(arguments.record, "w") as file:
            for result in slowest:
                file.write(f"{result.seconds:.1f} {result.name}\n")
    heaviest = sorted(run.results, key=lambda result: -result.cpu)
    log(f"the test processes used {sum(result.cpu for result in run.results):.0f} s of CPU; the heaviest:")
    for result in heaviest[:10]:
        log(f"  {result.cpu:6.1f} s  {result.name}")
    failed = [result.name for result in run.results if not result.passed]
    for name in failed:
        log(f"failed: {name}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
