//! A service's requests one by one: when they come, how long each takes alone and beside
//! our kernels ([`super::kernels::serve`]), and the report of their latencies
//! ([`RequestReport`]).
//!
//! A request's latency is the time from its arrival to its answer: alone, its length
//! (and, for isolated requests, any wait behind its own previous request); beside us,
//! that plus what our kernels made it wait. "Slowed by" compares the medians, as the
//! runs of issue 21 did
//! (docs/benchmarks.md#live-services-labpy-live).

use std::collections::BTreeMap;
use std::time::Duration;

use super::kernels::Served;
use super::rng::Rng;
use gpufill_core::time::Time;

/// How a service's requests come.
#[derive(Clone, Debug, PartialEq)]
pub enum Requests {
    /// Back to back inside each of the job's `windows` (a burst of requests: a client
    /// sends the next once the previous is answered), each [`ForeignJob::request`](super::ForeignJob::request) long
    /// alone, the last of a burst what is left of it.
    InBursts,
    /// Isolated requests from `from` until the job leaves, the first at `from`, then
    /// `per_s` a second on average, each [`ForeignJob::request`](super::ForeignJob::request) long alone. The job runs
    /// kernels only while it serves one.
    Rate {
        /// Requests a second.
        per_s: f64,
        /// When the first comes (a holder is dormant until then).
        from: Time,
        /// How they are spaced.
        spacing: Spacing,
    },
    /// A training job's steps ([`ForeignJob::training`](super::ForeignJob::training)),
    /// or a decode service's requests when they come at a rate (`per_s`,
    /// [`ForeignJob::decode_requests`](super::ForeignJob::decode_requests)):
    /// each [`ForeignJob::request`](super::ForeignJob::request) of GPU work alone, in
    /// `pieces` pieces with a host-side gap between two (its host launching and
    /// computing, the GPU idle), the next step `wait` after the previous one ended (on
    /// its input), from its first kernel until it leaves, so whatever delays a step
    /// delays all later ones. Inside a piece its kernels, `kernel` long each, follow one
    /// another with `launch_gap` idle between them. The host gaps are drawn from a
    /// generator seeded with the job's PID: exponential with mean `host_gap`, between
    /// 100 us and 3 ms (`HOST_GAP_MIN`, `HOST_GAP_MAX`), the same draws alone and beside us.
    Steps {
        /// How long it waits on its input after each step.
        wait: Duration,
        /// `None`: a trainer, the next step `wait` after the previous one ended. Some
        /// rate: a service whose requests are steps in pieces (a decode request: a
        /// forward a token, with host work between), coming that many a second as a
        /// Poisson process from the same generator, each served once the previous has
        /// ended (its latency counted from when it starts, as the GPU lab's services
        /// count theirs).
        per_s: Option<f64>,
        /// The length of each of its kernels.
        kernel: Duration,
        /// The idle gap between two of its kernels inside a piece.
        launch_gap: Duration,
        /// The pieces of a step (1: no host gap).
        pieces: u32,
        /// The mean host-side gap between two pieces.
        host_gap: Duration,
        /// The generator's seed.
        seed: u64,
    },
}

/// The shortest host-side gap inside a training step ([`Requests::Steps`]).
pub const HOST_GAP_MIN: Duration = Duration::from_micros(100);

/// The longest host-side gap inside a training step: the longest measured inside a
/// ResNet-18 step was 2.7 ms (docs/data/gap-trace-h200.txt).
pub const HOST_GAP_MAX: Duration = Duration::from_micros(3000);

/// How isolated requests are spaced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Spacing {
    /// Evenly, `1 / per_s` apart (a poller, a health check).
    Even,
    /// As a Poisson process (independent clients), from a seeded generator.
    Poisson {
        /// The generator's seed.
        seed: u64,
    },
}

/// One request due to be served.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Request {
    /// When it came.
    pub(super) arrival: Time,
    /// When it starts being served (after its own previous request, beside us).
    pub(super) start: Time,
    /// How long it takes served alone.
    pub(super) len: Duration,
    /// Its latency alone (its length, plus any wait behind its previous one alone).
    pub(super) alone: Duration,
}

/// The most waits [`RequestReport::waits`] keeps.
pub const MAX_WAITS_KEPT: usize = 256;

/// What our kernels cost a service's requests so far.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RequestReport {
    /// Requests served.
    pub count: u64,
    /// Median latency beside our load.
    pub median: Duration,
    /// Median latency alone.
    pub median_alone: Duration,
    /// Mean latency beside our load.
    pub mean: Duration,
    /// Mean latency alone.
    pub mean_alone: Duration,
    /// 99th percentile of the latency beside our load.
    pub p99: Duration,
    /// 99th percentile of the latency alone.
    pub p99_alone: Duration,
    /// Requests a kernel of ours held up (it ran when they arrived).
    pub met_kernel: u64,
    /// Requests that paid only a context switch (our context ran last before them).
    pub switched: u64,
    /// The longest a request waited for us.
    pub max_wait: Duration,
    /// The first request: when it came and how long it waited for us.
    pub first: Option<(Time, Duration)>,
    /// The first [`MAX_WAITS_KEPT`] requests that waited for us: when each came and how
    /// long it waited.
    pub waits: Vec<(Time, Duration)>,
}

impl RequestReport {
    /// How much longer the median request took than alone, as a fraction (0.08: 8 %
    /// longer); 0 with no requests.
    pub fn slowdown(&self) -> f64 {
        ratio(self.median, self.median_alone)
    }

    /// How much longer the mean request took than alone, as a fraction.
    pub fn mean_slowdown(&self) -> f64 {
        ratio(self.mean, self.mean_alone)
    }

    /// For a training job's steps ([`Requests::Steps`]), each followed by `wait` on its
    /// input: how much longer a step and its wait took on average than alone, as a
    /// fraction (0.01: its step rate 1 % slower), from what our kernels charged its
    /// steps, as [`RequestReport::slowdown`] is.
    pub fn rate_slowdown(&self, wait: Duration) -> f64 {
        ratio(self.mean + wait, self.mean_alone + wait)
    }
}

fn ratio(beside: Duration, alone: Duration) -> f64 {
    if alone.is_zero() {
        0.0
    } else {
        beside.as_secs_f64() / alone.as_secs_f64() - 1.0
    }
}

/// Latencies counted by value, in steps of 100 ns: bounded by the spread of the
/// latencies, not by the number of requests (a month at 20 a second is 52 million).
#[derive(Clone, Debug, Default)]
struct Histogram {
    counts: BTreeMap<u64, u64>,
    n: u64,
    sum_s: f64,
}

const STEP_NS: u128 = 100;

impl Histogram {
    fn add(&mut self, d: Duration) {
        let key = u64::try_from(d.as_nanos().div_ceil(STEP_NS)).unwrap_or(u64::MAX);
        *self.counts.entry(key).or_default() += 1;
        self.n += 1;
        self.sum_s += d.as_secs_f64();
    }

    /// The `q` quantile: the least latency that `q` of the requests did not exceed.
    fn quantile(&self, q: f64) -> Duration {
        let rank = ((q * self.n as f64).ceil() as u64).clamp(1, self.n.max(1));
        let mut seen = 0;
        for (&key, &count) in &self.counts {
            seen += count;
            if seen >= rank {
                let ns = u128::from(key) * STEP_NS;
                return Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX));
            }
        }
        Duration::ZERO
    }

    fn mean(&self) -> Duration {
        if self.n == 0 {
            return Duration::ZERO;
        }
        Duration::from_secs_f64(self.sum_s / self.n as f64)
    }
}

/// What a stream needs of its job, apart from `ForeignJob` (which holds the stream).
#[derive(Clone, Copy, Debug)]
pub(super) struct Serving<'a> {
    /// How its requests come.
    pub requests: Option<&'a Requests>,
    /// Its first kernel: no request before it.
    pub first_kernel: Time,
    /// When it leaves: no request from then on.
    pub leaves_at: Time,
    /// One request's length alone.
    pub request: Duration,
    /// Its work windows (bursts of requests).
    pub windows: &'a [(Time, Time)],
}

/// A service's requests as they are served: which comes next, the one being served, and
/// the tally.
#[derive(Clone, Debug, Default)]
pub(super) struct Stream {
    /// The next request, once known.
    next: Option<Request>,
    /// The request being served: `[start, end)` beside us.
    serving: Option<(Time, Time)>,
    /// When the previous isolated request ended alone (the next queues behind it).
    alone_end: Time,
    /// In bursts: the window of the next request, and its index in it.
    window: usize,
    index: u64,
    rng: Option<Rng>,
    /// Steps that come as a Poisson process: when the last came.
    clock: Time,
    beside: Histogram,
    alone: Histogram,
    met: u64,
    switched: u64,
    max_wait: Duration,
    first: Option<(Time, Duration)>,
    waits: Vec<(Time, Duration)>,
    started: bool,
    /// A training step in progress: its next piece's index, when the step came, its
    /// time alone so far (pieces and host gaps), and whether a piece of it met us.
    step: StepTally,
}

/// A training step's pieces as they are served ([`Requests::Steps`]).
#[derive(Clone, Copy, Debug, Default)]
struct StepTally {
    piece: u32,
    arrival: Time,
    alone: Duration,
    met: bool,
    switched: bool,
    wait: Duration,
}

impl Stream {
    /// The request due at or before `now`, if any (computing the first on first use).
    pub(super) fn due(&mut self, job: Serving<'_>, now: Time) -> Option<Request> {
        self.start(job);
        self.next.filter(|r| r.start <= now)
    }

    /// When something of it changes after `now`: the next request starts, or the one
    /// being served ends.
    pub(super) fn next_event(&mut self, job: Serving<'_>, now: Time) -> Option<Time> {
        self.start(job);
        let serving_end = self.serving.map(|(_, end)| end).filter(|&e| e > now);
        let next = self.next.map(|r| r.start.max(now));
        match (serving_end, next) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Whether it serves a request at `t` (runs kernels).
    pub(super) fn serving_at(&self, t: Time) -> bool {
        self.serving.is_some_and(|(from, to)| from <= t && t < to)
    }

    /// Records that `req` was served with `served` beside us, and schedules the next.
    /// Returns when it ends.
    pub(super) fn served(&mut self, job: Serving<'_>, req: Request, served: Served) -> Time {
        let end = req.start + served.wait + req.len;
        self.serving = Some((req.start, end));
        if let Some(&Requests::Steps { pieces, .. }) = job.requests {
            // A step is tallied whole, once its last piece is served.
            let t = &mut self.step;
            if t.piece == 0 {
                *t = StepTally {
                    arrival: req.arrival,
                    ..StepTally::default()
                };
            }
            t.piece += 1;
            t.alone += req.alone;
            t.met |= served.met;
            t.switched |= served.switched;
            t.wait += served.wait;
            let t = *t;
            if t.piece >= pieces.max(1) {
                self.tally(
                    t.arrival,
                    end - t.arrival,
                    t.alone,
                    t.met,
                    t.switched,
                    t.wait,
                );
            }
        } else {
            let (met, switched) = (served.met, served.switched);
            self.tally(
                req.arrival,
                end - req.arrival,
                req.alone,
                met,
                switched,
                served.wait,
            );
        }
        self.next = self.following(job, req, end);
        end
    }

    /// Counts one request (or training step) that came at `arrival`, took `latency`
    /// beside us and `alone` alone, and waited `wait` for our kernels.
    fn tally(
        &mut self,
        arrival: Time,
        latency: Duration,
        alone: Duration,
        met: bool,
        switched: bool,
        wait: Duration,
    ) {
        self.beside.add(latency);
        self.alone.add(alone);
        self.met += u64::from(met);
        self.switched += u64::from(switched);
        self.max_wait = self.max_wait.max(wait);
        self.first.get_or_insert((arrival, wait));
        if !wait.is_zero() && self.waits.len() < MAX_WAITS_KEPT {
            self.waits.push((arrival, wait));
        }
    }

    /// The report so far.
    pub(super) fn report(&self) -> RequestReport {
        RequestReport {
            count: self.beside.n,
            median: self.beside.quantile(0.5),
            median_alone: self.alone.quantile(0.5),
            mean: self.beside.mean(),
            mean_alone: self.alone.mean(),
            p99: self.beside.quantile(0.99),
            p99_alone: self.alone.quantile(0.99),
            met_kernel: self.met,
            switched: self.switched,
            max_wait: self.max_wait,
            first: self.first,
            waits: self.waits.clone(),
        }
    }

    fn start(&mut self, job: Serving<'_>) {
        if std::mem::replace(&mut self.started, true) {
            return;
        }
        self.next = match job.requests {
            Some(Requests::Rate { from, spacing, .. }) => {
                if let Spacing::Poisson { seed } = spacing {
                    self.rng = Some(Rng::new(*seed));
                }
                let arrival = (*from).max(job.first_kernel);
                self.isolated(job, arrival, Time::ZERO)
            }
            Some(Requests::InBursts) => self.in_window(job, Time::ZERO),
            Some(Requests::Steps { seed, .. }) => {
                self.rng = Some(Rng::new(*seed));
                self.clock = job.first_kernel;
                self.step(job, job.first_kernel)
            }
            None => None,
        };
    }

    /// The request after `req`, which ended at `end` beside us.
    fn following(&mut self, job: Serving<'_>, req: Request, end: Time) -> Option<Request> {
        match job.requests {
            Some(Requests::Rate { per_s, spacing, .. }) => {
                let mean = 1.0 / per_s.max(1e-9);
                let gap = match (spacing, self.rng.as_mut()) {
                    (Spacing::Poisson { .. }, Some(rng)) => rng.exponential(mean),
                    _ => mean,
                };
                let arrival = req.arrival + Duration::from_secs_f64(gap.min(1e9));
                self.isolated(job, arrival, end)
            }
            Some(Requests::InBursts) => {
                self.index += 1;
                self.in_window(job, end)
            }
            Some(&Requests::Steps {
                wait,
                per_s,
                pieces,
                host_gap,
                ..
            }) => {
                if self.step.piece < pieces.max(1) {
                    // The next piece of the step, after a host gap.
                    let gap = self.host_gap(host_gap);
                    self.step.alone += gap;
                    return self.piece(job, end + gap, pieces);
                }
                self.step.piece = 0;
                let Some(per_s) = per_s else {
                    return self.step(job, end + wait);
                };
                let gap = match self.rng.as_mut() {
                    Some(rng) => rng.exponential(1.0 / per_s.max(1e-9)),
                    None => 1.0 / per_s.max(1e-9),
                };
                self.clock += Duration::from_secs_f64(gap.min(1e9));
                self.step(job, self.clock.max(end))
            }
            None => None,
        }
    }

    /// A training step that comes at `arrival` (its previous step ended and its input
    /// came): its first piece. Its time alone is its pieces' and host gaps' (the
    /// step's tally), so no `alone_end` is kept for steps.
    fn step(&mut self, job: Serving<'_>, arrival: Time) -> Option<Request> {
        let pieces = match job.requests {
            Some(&Requests::Steps { pieces, .. }) => pieces,
            _ => 1,
        };
        self.piece(job, arrival, pieces)
    }

    /// A piece of a training step of `pieces` that comes at `arrival`.
    fn piece(&mut self, job: Serving<'_>, arrival: Time, pieces: u32) -> Option<Request> {
        if arrival >= job.leaves_at {
            return None;
        }
        let len = job.request / pieces.max(1);
        Some(Request {
            arrival,
            start: arrival,
            len,
            alone: len,
        })
    }

    /// A host gap inside a training step, of mean `mean` ([`Requests::Steps`]).
    fn host_gap(&mut self, mean: Duration) -> Duration {
        let drawn = match self.rng.as_mut() {
            Some(rng) => rng.exponential(mean.as_secs_f64()),
            None => mean.as_secs_f64(),
        };
        Duration::from_secs_f64(drawn.min(1.0)).clamp(HOST_GAP_MIN, HOST_GAP_MAX)
    }

    /// An isolated request arriving at `arrival`, after one that ended at `busy_end`.
    fn isolated(&mut self, job: Serving<'_>, arrival: Time, busy_end: Time) -> Option<Request> {
        if arrival >= job.leaves_at {
            return None;
        }
        let len = job.request;
        let alone_start = arrival.max(self.alone_end);
        self.alone_end = alone_start + len;
        Some(Request {
            arrival,
            start: arrival.max(busy_end),
            len,
            alone: self.alone_end - arrival,
        })
    }

    /// The next request of a burst, the previous having ended at `busy_end`: the next
    /// in the current window, or the first of the next.
    fn in_window(&mut self, job: Serving<'_>, busy_end: Time) -> Option<Request> {
        let step = job.request.max(Duration::from_micros(1));
        loop {
            let &(from, to) = job.windows.get(self.window)?;
            let offset = step.saturating_mul(u32::try_from(self.index).unwrap_or(u32::MAX));
            let alone_start = from + offset;
            if alone_start >= to {
                self.window += 1;
                self.index = 0;
                continue;
            }
            let len = step.min(to - alone_start);
            let start = if self.index == 0 {
                from.max(busy_end)
            } else {
                busy_end
            };
            if start >= job.leaves_at {
                return None;
            }
            return Some(Request {
                arrival: start,
                start,
                len,
                alone: len,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ForeignJob;

    fn served(stream: &mut Stream, job: &ForeignJob, wait_us: u64) -> Request {
        let req = stream.due(job.serving(), Time::MAX).unwrap();
        let served = Served {
            wait: Duration::from_micros(wait_us),
            met: wait_us > 500,
            switched: wait_us > 0 && wait_us <= 500,
        };
        stream.served(job.serving(), req, served);
        req
    }

    fn isolated(per_s: f64, spacing: Spacing) -> ForeignJob {
        ForeignJob::isolated_requests(1.0, 100.0, per_s, Duration::from_micros(800))
            .with_spacing(spacing)
    }

    #[test]
    fn even_requests_come_one_over_the_rate_apart_from_the_first_kernel() {
        let job = isolated(20.0, Spacing::Even);
        let mut s = Stream::default();
        assert_eq!(s.due(job.serving(), Time::from_millis(1084)), None);
        let first = served(&mut s, &job, 0);
        assert_eq!(first.arrival, Time::from_millis(1085));
        assert!(s.serving_at(Time::from_duration(Duration::from_micros(1_085_500))));
        assert!(!s.serving_at(Time::from_duration(Duration::from_micros(1_085_800))));
        let second = served(&mut s, &job, 0);
        assert_eq!(second.arrival, Time::from_millis(1135));
        assert_eq!(
            s.next_event(job.serving(), Time::from_millis(1136)),
            Some(Time::from_millis(1185))
        );
    }

    #[test]
    fn poisson_requests_average_the_rate() {
        let job = isolated(20.0, Spacing::Poisson { seed: 7 });
        let mut s = Stream::default();
        let mut last = Time::ZERO;
        for _ in 0..2000 {
            last = served(&mut s, &job, 0).arrival;
        }
        let per_s = 2000.0 / (last.as_secs_f64() - 1.085);
        assert!((per_s - 20.0).abs() < 1.0, "{per_s}");
    }

    #[test]
    fn the_report_compares_latency_with_alone() {
        let job = isolated(20.0, Spacing::Even);
        let mut s = Stream::default();
        for i in 0..100 {
            // One request in ten waits a switch, one in a hundred a time slice.
            let wait = match i {
                0 => 2130,
                _ if i % 10 == 0 => 130,
                _ => 0,
            };
            served(&mut s, &job, wait);
        }
        let r = s.report();
        assert_eq!(r.count, 100);
        assert_eq!((r.median, r.median_alone), (job.request, job.request));
        assert_eq!(r.slowdown(), 0.0);
        let extra = (2130.0 + 9.0 * 130.0) / 100.0 / 800.0;
        assert!((r.mean_slowdown() - extra).abs() < 1e-6, "{r:?}");
        assert_eq!(r.p99, Duration::from_micros(930));
        assert_eq!(r.max_wait, Duration::from_micros(2130));
        assert_eq!((r.met_kernel, r.switched), (1, 9));
        assert_eq!(r.first, Some((Time::from_millis(1085), r.max_wait)));
        assert_eq!(r.waits.len(), 10);
    }

    #[test]
    fn an_isolated_request_that_comes_while_the_last_is_served_queues_behind_it() {
        // 1 ms requests 1 ms apart: delaying one delays the next, alone they never wait.
        let job = ForeignJob::isolated_requests(0.0, 10.0, 1000.0, Duration::from_millis(1))
            .with_spacing(Spacing::Even);
        let mut s = Stream::default();
        served(&mut s, &job, 500);
        let next = s.due(job.serving(), Time::MAX).unwrap();
        assert_eq!(next.start - next.arrival, Duration::from_micros(500));
        assert_eq!(next.alone, job.request);
    }

    #[test]
    fn requests_in_bursts_follow_each_other_and_fill_each_window() {
        // Windows of 12 ms: 5 ms requests, the third 2 ms.
        let job = ForeignJob {
            request: Duration::from_millis(5),
            ..ForeignJob::service(
                0.0,
                1.0,
                Duration::from_millis(100),
                Duration::from_millis(12),
                0.4,
            )
        };
        let mut s = Stream::default();
        let a = served(&mut s, &job, 1000);
        assert_eq!(a.start, Time::from_millis(85));
        let b = served(&mut s, &job, 0);
        assert_eq!(b.start, Time::from_millis(91));
        let c = served(&mut s, &job, 0);
        assert_eq!(c.len, Duration::from_millis(2));
        let d = served(&mut s, &job, 0);
        assert_eq!(d.start, Time::from_millis(185));
        let r = s.report();
        assert_eq!(r.count, 4);
        assert_eq!(r.max_wait, Duration::from_millis(1));
    }

    #[test]
    fn decode_requests_come_at_their_rate_in_pieces_each_after_the_last_has_ended() {
        // 2 a second, each 10 pieces of 1 ms busy with host gaps of about 5 ms.
        let job = ForeignJob::decode_requests(
            0.0,
            1000.0,
            2.0,
            10,
            Duration::from_millis(10),
            Duration::from_millis(5),
        );
        let mut s = Stream::default();
        let mut starts = Vec::new();
        let mut prev_end = Time::ZERO;
        while s.report().count < 400 {
            let req = served(&mut s, &job, 0);
            // No piece starts before the one before it has ended.
            assert!(req.start >= prev_end, "{req:?} {prev_end:?}");
            prev_end = req.start + req.len;
            if s.step.piece == 1 {
                starts.push(req.start);
            }
        }
        let span = starts[starts.len() - 1].saturating_since(starts[0]);
        let per_s = (starts.len() - 1) as f64 / span.as_secs_f64();
        assert!((per_s - 2.0).abs() < 0.2, "{per_s}");
        // A request is its pieces and the host gaps between them: 9 gaps of 0.1-3 ms.
        let r = s.report();
        assert!(r.median_alone > job.request, "{r:?}");
        assert!(
            r.median_alone < job.request + Duration::from_millis(27),
            "{r:?}"
        );
    }
}
