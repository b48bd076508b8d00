"""The lab's offline check, here with no GPU (.ci/run runs it): every command prints its
--help with plain python3 (no pynvml, torch or CuPy needed), and the pure helpers of
`gpulab.lib` do what the measurements rely on.

    cd scripts && python3 -m unittest gpulab.tests
"""
import contextlib
import io
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import unittest

from . import lib
from .cli import COMMANDS, main

SAMPLE = """\
# HELP gpufill_state Whether the GPU's worker is in this state (1) or not (0).
# TYPE gpufill_state gauge
gpufill_state{gpu="0",uuid="GPU-a",state="filling"} 1
gpufill_state{gpu="0",uuid="GPU-a",state="yielding"} 0
gpufill_state{gpu="1",uuid="GPU-b",state="filling"} 0
gpufill_state{gpu="1",uuid="GPU-b",state="yielding"} 1
gpufill_duty_ratio{gpu="0",uuid="GPU-a"} 0.42
gpufill_duty_ratio{gpu="1",uuid="GPU-b"} 0
gpufill_mps{state="client"} 0
gpufill_mps{state="none"} 1
gpufill_build_info{version="1.2.3"} 1
gpufill_scrapes_total 17
process_cpu_seconds_total 3.5
gpufill_odd{gpu="0"} NaN-ish
"""


class Metrics(unittest.TestCase):
    def test_parse_keeps_sample_lines_with_their_labels(self):
        series = lib.parse_metrics(SAMPLE)
        self.assertEqual(len(series), 11)  # no comments, no value that is not a number
        self.assertIn(("gpufill_duty_ratio", {"gpu": "0", "uuid": "GPU-a"}, 0.42), series)
        self.assertIn(("gpufill_scrapes_total", {}, 17.0), series)

    def test_flat_keys_states_and_keeps_the_first_gpu(self):
        m = lib.flat(lib.parse_metrics(SAMPLE))
        self.assertEqual(m["gpufill_state.filling"], 1)
        self.assertEqual(m["gpufill_state.yielding"], 0)  # GPU 0's, the first
        self.assertEqual(m["gpufill_duty_ratio"], 0.42)
        self.assertEqual(m["gpufill_mps.none"], 1)
        self.assertNotIn("process_cpu_seconds_total", m)
        self.assertEqual(lib.state_of(m), ["filling"])

    def test_flat_of_one_gpu(self):
        m = lib.flat(lib.parse_metrics(SAMPLE), gpu=1)
        self.assertEqual(lib.state_of(m), ["yielding"])
        self.assertEqual(m["gpufill_duty_ratio"], 0)
        self.assertEqual(m["gpufill_mps.none"], 1)  # no gpu label: every GPU's

    def test_by_gpu(self):
        m = lib.by_gpu(lib.parse_metrics(SAMPLE))
        self.assertEqual(m[("gpufill_state", 1, "yielding")], 1)
        self.assertEqual(m[("gpufill_duty_ratio", 0, "")], 0.42)
        self.assertNotIn(("gpufill_mps", 0, "none"), m)

    def test_urls(self):
        self.assertEqual(lib.metrics_url(9411), "http://127.0.0.1:9411/metrics")
        self.assertEqual(lib.metrics_url("9411", "/healthz"), "http://127.0.0.1:9411/healthz")
        self.assertEqual(lib.metrics_url("http://h:1/metrics", "/healthz"), "http://h:1/healthz")
        self.assertEqual(lib.metrics_url("http://h:1"), "http://h:1/metrics")

    def test_scrape_and_sample_of_a_served_page(self):
        import http.server
        import json
        import threading

        class Page(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                ok = self.path == "/metrics"
                self.send_response(200 if ok else 503)
                self.end_headers()
                self.wfile.write(SAMPLE.encode() if ok else b"gpu 0 not ticking")

            def log_message(self, *args):
                pass

        server = http.server.HTTPServer(("127.0.0.1", 0), Page)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self.addCleanup(server.server_close)
        self.addCleanup(server.shutdown)
        port = server.server_address[1]
        self.assertEqual(lib.scrape(port)["gpufill_duty_ratio"], 0.42)
        self.assertEqual(lib.scrape(f"http://127.0.0.1:{port}", gpu=1)["gpufill_duty_ratio"], 0)
        self.assertFalse(lib.healthy(port))
        self.assertEqual(lib.fetch(port, "/healthz")[0], 503)
        with contextlib.redirect_stdout(io.StringIO()) as out:
            self.assertEqual(main(["sample", f"http://127.0.0.1:{port}"]), 0)
        got = json.loads(out.getvalue())
        self.assertEqual({k: got[k] for k in ("up", "mps", "state", "duty")},
                         {"up": True, "mps": "none", "state": "filling", "duty": 0.42})

    def test_scrape_of_nothing_listening_is_empty(self):
        self.assertEqual(lib.scrape("http://127.0.0.1:9/metrics", timeout=0.5), {})
        self.assertFalse(lib.healthy(9, timeout=0.5))


class Statistics(unittest.TestCase):
    def test_pct_is_nearest_rank(self):
        xs = [5, 1, 4, 2, 3]
        self.assertEqual(lib.pct(xs, 50), 3)
        self.assertEqual(lib.pct(xs, 0), 1)
        self.assertEqual(lib.pct(xs, 100), 5)
        self.assertEqual(lib.pct(list(range(101)), 99), 99)
        self.assertEqual(lib.pct([1, 2], 50), 1)  # round half to even: index 0
        self.assertNotEqual(lib.pct([], 50), lib.pct([], 50))  # NaN

    def test_mae_mean_fmt_spread(self):
        self.assertEqual(lib.mae([48, 52, 50], 50), 4 / 3)
        self.assertIsNone(lib.mae([], 50))
        self.assertIsNone(lib.mean([]))
        self.assertEqual(lib.fmt(None), "-")
        self.assertEqual(lib.fmt(1.234, 1), "1.2")
        self.assertEqual(lib.fmt(3), "3")
        self.assertEqual(lib.fmt_spread([1.0, 1.2, 0.9]), "1.0000 [0.9000-1.2000]")
        self.assertEqual(lib.fmt_spread([0.5, -0.25], 2, "+"), "+0.12 [-0.25..+0.50]")


class Interleave(unittest.TestCase):
    def test_alone_with_alone(self):
        self.assertEqual(lib.interleave(2), [None, "with", None, "with", None])
        self.assertEqual(lib.interleave(0), [None])

    def test_variants_take_turns(self):
        self.assertEqual(lib.interleave(2, ["a", "b"]),
                         [None, "a", None, "b", None, "a", None, "b", None])

    def test_each_with_over_the_alone_runs_beside_it(self):
        phases = lib.interleave(2, ["a", "b"])
        values = [10, 11, 12, 18, 12, 13, 8, 20, 12]
        self.assertEqual(lib.neighbour_ratios(values, phases), [1.0, 1.5, 1.3, 2.0])
        self.assertEqual(lib.neighbour_ratios(values, phases, "b"), [1.5, 2.0])
        self.assertEqual(lib.neighbour_diffs(values, phases, "a"), [0.0, 3.0])

    def test_named_exe_takes_a_label_or_the_file_name(self):
        self.assertEqual(lib.named_exe("old=carry/old/gpufill"), ("old", "carry/old/gpufill"))
        self.assertEqual(lib.named_exe("carry/gpufill"), ("gpufill", "carry/gpufill"))

    def test_alternate_turns_the_order(self):
        self.assertEqual(lib.alternate("ab", 0), ["a", "b"])
        self.assertEqual(lib.alternate("ab", 1), ["b", "a"])


class Log(unittest.TestCase):
    def test_log_time_reads_the_leading_stamp(self):
        line = "2026-11-21T10:00:01.250000Z  INFO gpufill_runtime::faultlog: filling target=50"
        self.assertAlmostEqual(lib.log_time(line), 1795255201.25, places=3)
        nine = "2026-11-21T10:00:01.123456789Z  INFO x: y"
        self.assertAlmostEqual(lib.log_time(nine), 1795255201.123456, places=5)
        self.assertIsNone(lib.log_time("==== carry/gpufill run"))
        self.assertIsNone(lib.log_time("Error: no GPU with index 99"))

    def test_gpufill_reads_its_log_and_stops_with_sigterm(self):
        # A stand-in binary: logs two stamped lines, then waits for SIGTERM.
        with tempfile.TemporaryDirectory() as d:
            exe = os.path.join(d, "fake")
            with open(exe, "w") as f:
                f.write("#!/bin/sh\n"
                        "trap 'echo stopping >&2; exit 0' TERM\n"
                        "echo \"$(date -u +%Y-%m-%dT%H:%M:%S.000000Z)  INFO x: $1 $4\" >&2\n"
                        "echo \"$(date -u +%Y-%m-%dT%H:%M:%S.000000Z)  INFO x: filling\" >&2\n"
                        "while :; do sleep 0.05; done\n")
            os.chmod(exe, 0o755)
            log = os.path.join(d, "g.log")
            g = lib.Gpufill(exe, ["--gpus", "0"], config="a = 1\n", log_path=log)
            self.addCleanup(g.proc.kill)
            self.assertTrue(os.path.exists(g.config_path))
            t = g.wait_for("filling", timeout=5)
            self.assertIsNotNone(t)
            self.assertLess(abs(t - time.time()), 5)
            self.assertEqual(g.first("INFO x: run"), g.lines[0][1])
            self.assertIn("--config", g.lines[0][1])
            self.assertEqual(g.count("filling"), 1)
            self.assertEqual(g.count("filling", since=t + 10), 0)
            code, took = g.stop(timeout=5)
            self.assertEqual(code, 0)
            self.assertLess(took, 5)
            self.assertFalse(os.path.exists(g.config_path))
            self.assertEqual(g.lines[-1][1], "stopping")
            # After stop the log is closed: counting what it said still works (churn,
            # jitter and tick-cost count log lines once gpufill has stopped).
            self.assertEqual(g.count("filling"), 1)
            self.assertEqual(g.first("stopping"), "stopping")
            with open(log) as f:
                self.assertTrue(f.readline().startswith(f"==== {exe} run --gpus 0 --config"))


    def test_a_command_stopped_by_sigterm_stops_the_gpufill_it_started(self):
        # As under `timeout`: cli.main turns SIGTERM into an exit, and lib's exit
        # handler stops every Gpufill not yet stopped.
        with tempfile.TemporaryDirectory() as d:
            exe = os.path.join(d, "fake")
            with open(exe, "w") as f:
                f.write("#!/bin/sh\ntrap 'exit 0' TERM\nwhile :; do sleep 0.05; done\n")
            os.chmod(exe, 0o755)
            child = subprocess.Popen(
                [sys.executable, "-c",
                 "import signal, sys, time\n"
                 "from gpulab import lib\n"
                 "signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))\n"
                 f"g = lib.Gpufill({exe!r})\n"
                 "print(g.pid, flush=True)\n"
                 "time.sleep(30)\n"],
                cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                stdout=subprocess.PIPE, text=True)
            self.addCleanup(child.kill)
            pid = int(child.stdout.readline())
            child.send_signal(signal.SIGTERM)
            self.assertEqual(child.wait(timeout=10), 143)
            with self.assertRaises(ProcessLookupError):
                os.kill(pid, 0)  # reaped by the child's stop(), not left running


class Proc(unittest.TestCase):
    def test_parsers_of_proc_files(self):
        self.assertEqual(lib.parse_schedstat("123456 789 42\n"), (123456, 42))
        status = "Name:\tx\nvoluntary_ctxt_switches:\t10\nnonvoluntary_ctxt_switches:\t3\n"
        self.assertEqual(lib.parse_switches(status), (10, 3))

    def test_cpu_states_runs_the_four_states_within_about_200_s_for_two_builds(self):
        from . import cpu
        self.assertEqual(cpu.STATES, ("idle", "holder", "live", "busy"))
        self.assertEqual(set(cpu.OTHERS), {"holder", "live", "busy"})
        # The command docs/benchmarks.md gives: two builds, two interleaved repeats.
        t = cpu.states_seconds(cpu.STATES, 2, 2, hold=5, grace=2, trace=False)
        self.assertTrue(150 <= t <= 200, t)
        self.assertGreater(cpu.states_seconds(cpu.STATES, 2, 2, 5, 2, trace=True), t)

    def test_cpu_between_merges_tids_by_name(self):
        a = ({"gpu0:1": (0, 0), "gpu0:2": (0, 0)}, {"gpu0:1": (0, 0)})
        b = ({"gpu0:1": (10_000_000, 5), "gpu0:2": (30_000_000, 5)}, {"gpu0:1": (8, 1)})
        share, wakes, sleeps = lib.cpu_between(a, b, 2.0)
        self.assertEqual(share, {"gpu0": 2.0})
        self.assertEqual(wakes, {"gpu0": 5.0})
        self.assertEqual(sleeps, {"gpu0": 4.0})
        self.assertEqual(lib.threads_line(share, wakes, sleeps), "gpu0 2.00 (5/s, 4 vol/s)")

    def test_leftover_gpufill_finds_a_process_by_that_name(self):
        import shutil
        with tempfile.TemporaryDirectory() as d:
            exe = os.path.join(d, "gpufill")
            shutil.copy(shutil.which("sleep"), exe)
            p = subprocess.Popen([exe, "30"])
            self.addCleanup(p.wait)
            self.addCleanup(p.kill)
            # Popen may return before the child's exec shows in /proc (it read
            # "python3" here once another test had run): wait for the name, briefly.
            end = time.time() + 5
            while str(p.pid) not in lib.leftover_gpufill() and time.time() < end:
                time.sleep(0.01)
            self.assertIn(str(p.pid), lib.leftover_gpufill())
            p.kill()
            p.wait()
            self.assertNotIn(str(p.pid), lib.leftover_gpufill())

    def test_own_threads(self):
        self.assertGreater(lib.cpu_seconds(os.getpid()), 0)
        self.assertIsNotNone(lib.status_kib(os.getpid(), "VmRSS"))


class Physics(unittest.TestCase):
    """`physics`'s analysis: a job request's wait decomposed against our kernels' stamps."""
    T = 10**18  # globaltimer values are that large

    def ours(self, *spans_us):
        S = [self.T + round(s * 1e3) for s, _ in spans_us]
        E = [self.T + round(e * 1e3) for _, e in spans_us]
        return S, E

    def at(self, us):
        return self.T + round(us * 1e3)

    def test_a_job_that_met_one_kernel_waits_its_remainder_then_the_switch(self):
        from .physics import decompose
        S, E = self.ours((0, 50), (200, 250))
        r = decompose(self.at(20), self.at(180), self.at(181), S, E)
        self.assertEqual(r["kind"], "met")
        self.assertEqual((r["wait_us"], r["rem_us"], r["beyond_us"], r["switch_us"], r["n_more"]),
                         (160, 30, 130, 130, 0))

    def test_behind_a_queue_the_switch_counts_from_the_last_kernel_not_the_one_met(self):
        from .physics import decompose
        S, E = self.ours(*[(10 * i, 10 * (i + 1)) for i in range(200)], (2200, 2210))
        r = decompose(self.at(5), self.at(2130), self.at(2131), S, E)
        self.assertEqual(r["kind"], "met")
        self.assertEqual(r["rem_us"], 5)
        self.assertEqual(r["n_more"], 199)
        self.assertEqual(r["more_us"], 1990)
        self.assertEqual(r["switch_us"], 130)  # not 2120: that is beyond
        self.assertEqual((r["beyond_us"], r["wait_us"]), (2120, 2125))

    def test_free_raced_preempted_and_overlap(self):
        from .physics import decompose
        S, E = self.ours((0, 50), (200, 250))
        r = decompose(self.at(60), self.at(65), self.at(66), S, E)
        self.assertEqual((r["kind"], r["wait_us"], r["since_us"], r["switch_us"]), ("free", 5, 15, None))
        # Ready at 195 us while the GPU was free, yet ours (200-250) ran first.
        r = decompose(self.at(195), self.at(380), self.at(381), S, E)
        self.assertEqual((r["kind"], r["rem_us"], r["switch_us"]), ("raced", None, 130))
        # A kernel of ours that spans the job's was switched out mid-kernel.
        S, E = self.ours((0, 3000))
        r = decompose(self.at(100), self.at(2100), self.at(2100.5), S, E)
        self.assertEqual((r["kind"], r["wait_us"], r["ran_us"], r["switch_us"]), ("preempted", 2000, 2000, None))
        S, E = self.ours((0, 50))
        self.assertEqual(decompose(self.at(30), self.at(40), self.at(60), S, E)["kind"], "overlap")
        self.assertEqual(decompose(self.at(30), self.at(40), self.at(60), [], [])["kind"], "free")

    def test_ready_follows_the_clocks_drift_between_calibrations(self):
        from .physics import analyze, calibration, drift_ppm
        # globaltimer = host + o(t), o drifting 20 ppm; launch-to-start at least 4 us.
        def gt(host):
            return self.T + host + round(host * 20e-6)

        def samples(t0):
            return [(t0 + i * 30_000, t0 + i * 30_000 + 25_000, gt(t0 + i * 30_000) + 4_000 + 997 * (i % 7))
                    for i in range(50)]
        before, after = calibration(samples(0)), calibration(samples(5 * 10**9))
        self.assertAlmostEqual(drift_ppm(before, after), 20, places=1)
        self.assertLessEqual(before["lo"], self.T)  # the true offset lies between lo and hi
        self.assertGreaterEqual(before["hi"], self.T + 4_000)
        # A request at 2.5 s: its true earliest start is gt(ta) + 4 us. One of ours ran from
        # 10 us before that to 40 us after; the job started 130 us after ours ended.
        ta = 25 * 10**8
        ready = gt(ta) + 4_000
        job = {"ta": [ta], "tb": [ta + 200_000], "js": [ready + 170_000], "je": [ready + 171_000]}
        rows = analyze(job, before, after, [(ready - 10_000, ready + 40_000)])
        r = rows[0]
        self.assertEqual(r["lat_us"], 200)
        self.assertAlmostEqual(r["ready"], ready, delta=2)
        self.assertEqual(r["kind"], "met")  # with the first calibration alone: 50 us early, "raced"
        self.assertAlmostEqual(r["rem_us"], 40, delta=0.01)
        self.assertAlmostEqual(r["switch_us"], 130, delta=0.01)

    def test_summaries_pool_kinds_and_subtract_alone(self):
        from .physics import HEAD, answers, ours_stats, summarize, table_line
        alone = summarize([{"lat_us": 20.0 + i % 3, "wait_us": 2.0, "kind": "free"} for i in range(100)])
        self.assertEqual((alone["lat_p50"], alone["share_free"]), (21.0, 1.0))
        rows = ([{"lat_us": 200.0, "wait_us": 180.0, "kind": "met", "rem_us": 50.0, "beyond_us": 130.0,
                  "switch_us": 130.0, "n_more": 0, "more_us": 0.0}] * 3
                + [{"lat_us": 25.0, "wait_us": 6.0, "kind": "free", "since_us": 40.0}])
        s = summarize(rows, alone)
        self.assertEqual((s["share_met"], s["share_free"]), (0.75, 0.25))
        self.assertEqual((s["rem_p50"], s["switch_p50"], s["n_more_max"]), (50.0, 130.0, 0))
        self.assertEqual(s["d_lat_p50"], 200.0 - 21.0)
        self.assertEqual(s["d_free_wait_p50"], 4.0)
        self.assertNotIn("slice_est_us", s)
        # Jobs arriving at random into 2 ms slices of ours wait 136 us + U(0, 2000 us).
        pre = [{"lat_us": 0.0, "wait_us": 136 + 2000 * i / 99, "kind": "preempted", "ran_us": 1.0}
               for i in range(100)]
        self.assertAlmostEqual(summarize(pre)["slice_est_us"], 2000, delta=30)
        st = ours_stats([(0, 50_000), (100_000, 150_000), (200_000, 400_000)], 50)
        self.assertEqual((st["n"], st["stretched"], st["gap_p50_us"]), (3, 1, 50.0))
        self.assertAlmostEqual(st["duty"], 0.75)
        self.assertEqual(len(table_line("gaps 50", s, st)), len(HEAD))
        self.assertEqual(len(table_line("alone", alone)), len(HEAD))
        text = "\n".join(answers({"alone": alone, "gaps 50": s}, "Timeslice: Default"))
        self.assertIn("gaps 50", text)
        self.assertIn("4. compute policy: Timeslice: Default", text)

    def test_plan_alone_around_each_round_the_order_turned(self):
        import argparse
        from .physics import plan
        a = argparse.Namespace(modes=["queued", "gaps"], lengths=[10.0, 50.0], rounds=2)
        cells = plan(a)
        self.assertEqual(cells[0], (0, "alone", 0))
        self.assertEqual([c[1:] for c in cells[1:6]], [("queued", 10.0), ("queued", 50.0),
                                                        ("gaps", 10.0), ("gaps", 50.0), ("alone", 0)])
        self.assertEqual(cells[6][1:], ("gaps", 50.0))
        self.assertEqual(len(cells), 11)


class Clocks(unittest.TestCase):
    def test_clock_poll_reads_until_finished_and_keeps_each_reading_with_its_time(self):
        from .lib import ClockPoll
        readings = iter([1980, 1755, 345] + [345] * 1000)
        t0 = time.time()
        poll = ClockPoll(None, every=0.01, read=lambda: next(readings))
        time.sleep(0.1)
        samples = poll.finish()
        n = len(samples)
        self.assertGreaterEqual(n, 3)
        self.assertEqual([v for _, v in samples[:3]], [1980, 1755, 345])
        self.assertEqual(poll.between(t0), [v for _, v in samples])
        self.assertEqual(poll.between(time.time() + 1), [])
        time.sleep(0.05)
        self.assertEqual(len(poll.samples), n, "nothing read after finish()")


class JitterIdle(unittest.TestCase):
    def test_cpu_is_the_rise_of_gpufill_s_cpu_seconds_from_start(self):
        from .jitter import Run
        r = Run.__new__(Run)
        # 9 s of a core before 10 s (left out), then 0.6 % of a core for 100 s.
        r.cpu = [(0.0, 0.0), (9.0, 9.0), (10.0, 9.0), (60.0, 9.3), (110.0, 9.6)]
        self.assertAlmostEqual(r.cpu_percent(10), 0.6)
        self.assertAlmostEqual(r.cpu_percent(0), 100 * 9.6 / 110)
        self.assertIsNone(r.cpu_percent(100), "one read is no rate")

    def test_the_loop_s_mean_is_of_its_own_samples_from_start(self):
        from .jitter import Run
        r = Run.__new__(Run)
        r.t0_unix = 1000.0
        r.g = type("G", (), {})()
        line = "DEBUG gpu{{gpu=0}}: sample util={} target=50.0 duty=50.0"
        r.g.lines = [(1001.0, line.format("4.0")),  # before 10 s: left out
                     (1010.5, line.format("49.0")), (None, line.format("80.0")),
                     (1010.7, "INFO filling target=50.0"), (1010.9, line.format("51.0")),
                     (1011.1, line.format("50.0"))]
        self.assertEqual(r.loop_util(10), (50.0, 3))
        self.assertEqual(r.loop_util(20)[1], 0)


class Gaps(unittest.TestCase):
    """`gaps`'s pure parts: arguments, the plan's time, each run's statistics, the summary."""

    def test_arguments_and_the_phase_that_fits_the_budget(self):
        from .gaps import estimate, parse
        a = parse(["--gpufill-args", "--beside-live fill-gaps --max-cost 1.5", "--gpu", "1"])
        self.assertEqual(a.gargs, ["--beside-live", "fill-gaps", "--max-cost", "1.5"])
        self.assertEqual((a.workloads, a.pairs, a.port), (["train-input", "sub-ms", "decode"], 5, 9429))
        self.assertEqual((a.grace, a.skip), (2.0, 3.5))
        self.assertEqual(a.phase, 13.0)  # the longest half second that fits 480 s
        self.assertLessEqual(estimate(a.workloads, 5, a.phase), 480)
        self.assertGreater(estimate(a.workloads, 5, a.phase + 0.5), 480)
        self.assertEqual(parse(["--workloads", "train-input,decode"]).phase, 20.0)  # at most 20
        a = parse(["--workloads", "arrive", "--phase", "9", "--grace", "-1", "--gpufill-args=--x"])
        self.assertEqual((a.phase, a.skip, a.gargs), (9.0, 2.0, ["--x"]))
        self.assertEqual(estimate(["arrive"], 5, 0), 5 + 11 * 8)
        for bad in (["--workloads", "train,decode"], ["--pairs", "0"], ["--phase", "4"]):
            with self.subTest(bad), contextlib.redirect_stderr(io.StringIO()):
                with self.assertRaises(SystemExit):
                    parse(bad)
        with contextlib.redirect_stdout(io.StringIO()) as out:
            self.assertEqual(main(["gaps", "--estimate", "--pairs", "6"]), 0)
        self.assertIn("estimated wall time", out.getvalue())
        for heavy in ("pynvml", "torch"):
            self.assertNotIn(heavy, sys.modules)

    def test_toggle_arguments_short_phases_and_the_wait_before_the_plan(self):
        from .gaps import estimate, parse, toggle_lead
        a = parse(["--toggle", "--workloads", "decode", "--pairs", "30"])
        self.assertEqual((a.phase, a.skip), (4.0, 0.5))
        self.assertEqual(toggle_lead(a), 6.0)  # the idle grace (2 s) and 4 s of filling
        self.assertEqual(estimate(a.workloads, 30, a.phase, toggle_lead(a)), 15 + 6 + 61 * 4)
        self.assertEqual(parse(["--toggle", "--phase", "6", "--skip", "1"]).phase, 6.0)
        for bad in (["--toggle", "--workloads", "arrive"], ["--toggle", "--grace", "-1"]):
            with self.subTest(bad), contextlib.redirect_stderr(io.StringIO()):
                with self.assertRaises(SystemExit):
                    parse(bad)

    def test_a_with_runs_results_are_its_window_and_its_gpufills_life(self):
        from .gaps import DUTY, EST, Beside
        b = Beside.__new__(Beside)
        b.scrapes = [{DUTY: 0.4, EST: 0.01}, {DUTY: 0.6, EST: 0.03}]
        b.cpu_pct, b.cpu_split, b.healthy, b.rc, b.stop_s = 2.0, {"loop": 0.5}, True, 0, 0.1234
        b.g = type("G", (), {})()
        b.g.lines = [(None, "INFO gpu{gpu=0}: filling the gaps of live work foreign=[7]"),
                     (None, 'DEBUG pacing thread stopped cycle="gaps" seconds=10 kernels=2000 '
                            "stretched=5 probes=30 queries=2100 sleeps=4000")]
        r = b.result()
        self.assertEqual((r["duty"], r["est_last"], r["scrapes"], r["stop_s"]), (0.5, 0.03, 2, 0.123))
        self.assertAlmostEqual(r["est"], 0.02)
        self.assertEqual(r["pacing"]["kernels"], 200.0)  # a second
        self.assertEqual(sum(r["reasons"].values()), 2)
        # With --toggle the counts span the stops: none.
        self.assertIsNone(b.life(pacing=False)["pacing"])
        self.assertEqual(b.life(pacing=False)["reasons"], r["reasons"])

    def test_toggled_gpufill_is_stopped_through_each_alone_phase_and_watched_in_each_with(self):
        from .gaps import parse, run_toggled
        from .lib import interleave
        a = parse(["--toggle", "--phase", "4"])
        calls = []

        class FakeBeside:
            def pause(self):
                calls.append("stop")

            def resume(self):
                calls.append("cont")

            def watch(self, lo, hi):
                calls.append(("watch", round(hi - lo, 3)))

            def window(self):
                return {"duty": 0.5}

        phases = interleave(2)  # alone, with, alone, with, alone
        side = run_toggled(a, FakeBeside(), phases, time.monotonic() - 100)  # all past: no sleep
        self.assertEqual(side, [{}, {"duty": 0.5}, {}, {"duty": 0.5}, {}])
        watch = ("watch", 4.0 - 0.5 - 0.5)  # the skip and the last 0.5 s left out
        self.assertEqual(calls, ["stop", "cont", watch, "stop", "cont", watch, "stop", "cont"],
                         "stopped from each alone phase's start; continued at the end")

    def test_the_pacing_threads_last_line_gives_its_rates(self):
        from .gaps import pacing_counts
        line = ("2026-11-29T02:00:00.1Z DEBUG gpu{{gpu=0}}: gpufill_cuda::pacing: pacing thread "
                "stopped cycle=\"{}\" seconds=10.0 kernels=8000 stretched=3000 probes=250 "
                "queries=16500 sleeps=17000")
        got = pacing_counts(["other", line.format("one_in_flight"), line.format("gaps")])
        self.assertEqual(got, {"seconds": 10.0, "kernels": 800.0, "stretched": 300.0,
                               "probes": 25.0, "queries": 1650.0, "sleeps": 1700.0})
        self.assertIsNone(pacing_counts([line.format("one_in_flight")]))
        self.assertIsNone(pacing_counts([line.format("gaps").replace("sleeps=17000", "")]))

    def test_flags_the_binary_lacks_and_log_lines_as_reasons(self):
        from .gaps import missing_flags, reasons
        helptext = "      --beside-live <MODE>  ...\n      --max-cost <PCT>\n      --gpus <LIST>"
        self.assertEqual(missing_flags(helptext, ["--beside-live", "fill-gaps", "--max-cost=2"]), [])
        self.assertEqual(missing_flags(helptext, ["--max", "2", "--beside-live"]), ["--max"])
        got = reasons([
            "2026-11-28T10:00:01.250000Z  INFO gpufill_runtime::faultlog: yielding foreign=[4711]",
            "2026-11-28T10:00:03.5Z  INFO gpufill_runtime::faultlog: yielding foreign=[4712]",
            "2026-11-28T10:00:04Z  INFO gpufill_runtime::faultlog: estimated cost 1.25 over",
            "2026-11-28T10:00:00Z  INFO gpufill::x: metrics listening on http://127.0.0.1:9428/metrics",
            ""])
        self.assertEqual(got, {"INFO gpufill_runtime::faultlog: yielding foreign=[N]": 2,
                               "INFO gpufill_runtime::faultlog: estimated cost N over": 1})

    def test_the_cost_bound_lines_say_what_the_estimate_divided_by(self):
        from .gaps import weighing
        head = "2026-11-29T04:00:00.1Z  INFO gpu{gpu=0}: estimated cost to live work "
        lines = [
            head + "over the bound: holding off longer after each meeting estimate_percent=5.08 "
            "hold_ms=7.7 job_percent=2.7 weighed_by=its spells as our kernels saw them "
            "ours_percent=5.0",
            head + "back under the bound: filling more of its gaps estimate_percent=1.7 "
            "hold_ms=39.8 job_percent=100.0 weighed_by=its period (a job on a clock) "
            "ours_percent=12.1",
            head + "back under the bound: filling more of its gaps estimate_percent=1.5 "
            "hold_ms=40 job_percent=1.0 weighed_by=the floor of 1 % ours_percent=0.4",
            # A build before 97b8d0e: no such fields.
            head + "over the bound: holding off longer after each meeting estimate_percent=13.7 "
            "hold_ms=22.7",
        ]
        self.assertEqual(weighing(lines), {
            "by": {"its spells as our kernels saw them": 1, "its period (a job on a clock)": 1,
                   "the floor of 1 %": 1},
            "job_pct": [2.7, 100.0, 1.0]})
        self.assertIsNone(weighing(lines[3:]))

    def test_the_medians_interval_narrows_with_more_pairs_and_resolves_the_verdict(self):
        from .gaps import cost_ci, median_ci, verdict
        lo, hi, cover = median_ci([1.02, 0.98, 1.0, 0.99, 1.01])
        self.assertEqual((lo, hi), (0.98, 1.02))
        self.assertAlmostEqual(cover, 1 - 2 / 32)
        lo, hi, cover = median_ci([1 + i / 100 for i in range(15)])
        self.assertEqual((lo, hi), (1.03, 1.11))  # the 4th from either end
        self.assertAlmostEqual(cover, 1 - 2 * 576 / 2 ** 15)
        # A rate: the cost is 1 - ratio, so the interval turns over.
        lo, hi, _ = cost_ci("rate", [0.995, 0.997, 1.0, 0.998, 0.996])
        self.assertAlmostEqual(lo, 0.0)
        self.assertAlmostEqual(hi, 0.005)
        self.assertEqual(verdict(0.003, 0.04, 0.01, [(lo, hi, 0.94)]), "ok")
        self.assertEqual(verdict(0.003, 0.04, 0.01, [(-0.01, 0.02, 0.94)]), "ok, unresolved")
        self.assertEqual(verdict(0.03, 0.0, 0.02, [(0.021, 0.04, 0.94)]), "over")
        self.assertEqual(verdict(0.003, 0.04, 0.01), "ok, unresolved")  # by the noise

    def test_a_runs_statistics_keep_its_segment_and_window(self):
        from .gaps import phase_stats
        reqs = [(t, t + 0.040, 1) for t in (10.0, 10.04, 10.08, 10.12)] + [(9.0, 9.5, 0), (10.16, 12, 1)]
        s = phase_stats(reqs, 1, 10.0, 10.15)
        self.assertEqual(s["n"], 4)
        self.assertAlmostEqual(s["rate"], 25.0)
        self.assertAlmostEqual(s["p50"], 40.0)
        self.assertAlmostEqual(s["mean"], 40.0)
        self.assertEqual(phase_stats(reqs, 2, 0, 99), {"n": 0})

    def runs(self, key, values, **with_run):
        from .lib import interleave
        phases = interleave(len(values) // 2)
        return phases, [{key: v, "util": 10.0 if p is None else 50.0, **(with_run if p else {})}
                        for v, p in zip(values, phases)]

    def test_summary_of_a_rate_its_cost_noise_and_the_estimates_check(self):
        from .gaps import summarize, table
        # Alone 100 / 102 / 98 ..., with 99 between 100 and 102: ratio 99/101.
        phases, runs = self.runs("rate", [100, 99, 102, 100, 98, 97, 98, 99, 100],
                                 duty=0.4, est=0.012, cpu_pct=2.0, reasons={"filling": 1},
                                 weighing={"by": {"its period (a job on a clock)": 2},
                                           "job_pct": [100.0, 30.0]})
        s = summarize("train-input", phases, runs)
        self.assertEqual(s["weighing"], {"by": {"its period (a job on a clock)": 8}, "job_pct": 65.0})
        m = s["metrics"]["rate"]
        self.assertEqual(m["alone"], 100)
        self.assertAlmostEqual(m["alone_spread"][0], -0.02)
        self.assertAlmostEqual(m["alone_spread"][1], 0.02)
        self.assertAlmostEqual(m["noise"], 0.02)
        self.assertEqual(m["ratios"], [99 / 101, 1.0, 97 / 98, 99 / 99])
        self.assertAlmostEqual(s["cost"], 1 - statistics.median(m["ratios"]))
        self.assertEqual(s["verdict"], "ok, unresolved")  # noise 2 % > the 1 % bound
        self.assertEqual((s["util_alone"], s["util_with"], s["duty"], s["cpu_pct"]), (10.0, 50.0, 0.4, 2.0))
        self.assertEqual(s["est_check"], "holds")
        self.assertEqual(s["reasons"], {"filling": 4})
        self.assertEqual(s["pairs"], 4)
        lines = table({"train-input": s})
        self.assertTrue(any(line.startswith("train-input  rate") and "ok, unresolved" in line for line in lines))
        self.assertIn("train-input: the estimate weighed against, at its bound crossings: its period "
                      "(a job on a clock) 8; the job's share there, median 65.0 %", lines)
        self.assertEqual(lines[-1].split(), ["4", "filling"])

    def test_summary_of_latencies_gates_p50_and_the_p99s_milliseconds(self):
        from .gaps import summarize, table
        phases, runs = self.runs("p50", [1.0, 1.01, 1.0, 1.01, 1.0])
        for r, p99 in zip(runs, [2.0, 2.3, 2.0, 2.05, 2.0]):
            r["p99"] = p99
        s = summarize("sub-ms", phases, runs)
        self.assertAlmostEqual(s["cost"], 0.01)
        self.assertAlmostEqual(s["noise"], 0.0)
        self.assertAlmostEqual(s["p99_diff_ms"], 0.175)
        self.assertEqual(s["verdict"], "over (p99)")
        self.assertEqual(s["est_check"], "missing")
        self.assertIsNone(s["duty"])
        self.assertTrue(any("+0.175ms" in line for line in table({"sub-ms": s})))
        # Decode: the worse of p50 and mean.
        phases, runs = self.runs("p50", [200, 210, 200])
        runs[1]["mean"], runs[0]["mean"], runs[2]["mean"] = 230, 220, 220
        self.assertAlmostEqual(summarize("decode", phases, runs)["cost"], 0.05)

    def test_verdict_and_estimate_bounds(self):
        from .gaps import cost_of, est_check, verdict
        self.assertAlmostEqual(cost_of("rate", 0.98), 0.02)
        self.assertAlmostEqual(cost_of("p50", 1.03), 0.03)
        self.assertEqual(verdict(0.005, 0.002, 0.01), "ok")
        self.assertEqual(verdict(0.03, 0.002, 0.02), "over")
        self.assertEqual(verdict(None, 0, 0.02), "-")
        # At least the cost less the noise, at most 3 x the cost plus a point.
        self.assertEqual(est_check(0.009, 0.02, 0.01), "under")
        self.assertEqual(est_check(0.010, 0.02, 0.01), "holds")
        self.assertEqual(est_check(0.069, 0.02, 0.01), "holds")
        self.assertEqual(est_check(0.071, 0.02, 0.01), "over")
        self.assertEqual(est_check(0.010, -0.01, 0.005), "holds")
        self.assertEqual(est_check(None, 0.02, 0.01), "missing")


class Commands(unittest.TestCase):
    def test_every_command_prints_its_help_without_gpu_modules(self):
        for name in COMMANDS:
            with self.subTest(name), contextlib.redirect_stdout(io.StringIO()) as out:
                with self.assertRaises(SystemExit) as done:
                    main([name, "--help"])
                self.assertEqual(done.exception.code, 0)
                self.assertIn(f"usage: lab.py {name}", out.getvalue())
        # Where they are installed, --help still imports none of them.
        for heavy in ("pynvml", "torch", "cupy"):
            self.assertNotIn(heavy, sys.modules)

    def test_the_list_and_an_unknown_command(self):
        with contextlib.redirect_stdout(io.StringIO()) as out:
            self.assertEqual(main(["--help"]), 0)
        for name in COMMANDS:
            self.assertIn(f"  {name} ", out.getvalue())
        with contextlib.redirect_stderr(io.StringIO()):
            self.assertEqual(main(["nonsense"]), 2)

    def test_lab_py_runs_from_the_repository_root(self):
        r = subprocess.run([sys.executable, os.path.join(lib.SCRIPTS, "lab.py"), "live", "--help"],
                           capture_output=True, text=True, cwd=lib.ROOT, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("--parts", r.stdout)

    def test_the_spin_kernel_the_children_load_is_there(self):
        self.assertTrue(os.path.exists(lib.SPIN_PTX), lib.SPIN_PTX)


if __name__ == "__main__":
    unittest.main()
