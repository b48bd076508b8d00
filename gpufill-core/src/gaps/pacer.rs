//! When the gap filler launches its next kernel: what the job's spells of work and their
//! period are, learned from what our kernels met (the module docs of [`super`]).

use std::time::Duration;

use super::{
    Clock, GAP_KERNEL, GapReport, KernelOutcome, MIN_HOLD, PREDICTED_STRETCH, STRETCH_FOR_SPELLS,
    STRETCH_KERNEL,
};
use crate::time::Time;

/// How much of a new sample the learned spell and period take in.
const LEARN: f64 = 0.25;

/// Periods learned before the pacer predicts the job's next spell.
const PREDICT_AFTER: u32 = 3;

/// The pacer predicts only a job whose period is at least this many times its spell:
/// one whose spells come nearly back to back may be a service's queued requests (GPT-2
/// decode at 2 a second beside our kernels on an H200: spells of 250 ms every 263 ms,
/// docs/data/gap-trace-h200.txt), where a prediction says only "busy again soon" and
/// holds off through spells that, once its queue empties, never come.
const PREDICT_IDLE: f64 = 1.5;

/// Before a predicted spell, no launch this long ahead of it (and a twentieth of the
/// period more): the job's steps jitter, and a kernel of ours still queued when the job's
/// work arrives gets in only in the middle of it (two switches and a kernel).
const GUARD: Duration = Duration::from_micros(600);

/// A sign of the job is exact (it worked at that launch, not somewhere in a long wait
/// before it) when our launcher had been idle at most this long before it.
const EXACT: Duration = Duration::from_millis(1);

/// A launch this much later than when the pacer let it go was put off by something else
/// (a hold the caller passed, a slow wake-up): slack for comparing launches with holds.
const CENSOR_SLACK: Duration = Duration::from_millis(1);

/// A spell ends when our kernels have run clear this long (and a shortest hold after its
/// last sign): one clear kernel may have fallen in a gap inside it (a launch-bound step
/// leaves gaps of 0.5-2.7 ms, a few a step).
const CLEAR_FOR: Duration = Duration::from_micros(3500);

/// A sign this long after the spell's last one, or less, is taken as the same spell's
/// when the hold in force put our look off that long (a trainer's step lasted 10-20 ms on
/// H200s); after a longer hold the job may have begun another spell.
const MAX_MERGE: Duration = Duration::from_millis(10);

/// An exact sign this long after the spell's latest one, or less, is the same spell's
/// when no kernel of ours ran clear between them: nothing showed the job idle. Seen beside a
/// ResNet-18 trainer on an H200 (docs/data/gap-trace-h200.txt): our look after the
/// spell's rest as learned came 9.4 ms after its first sign and found the step still at
/// work; taken as a new spell, it was a 9.4 ms sample of a 37 ms period, which the
/// period's common divisor then kept (37 is about 4 x 9.4).
const UNBROKEN_MERGE: Duration = Duration::from_millis(20);

/// The longest wait between looks at a spell that outlasts its length as learned
/// ([`Spell::look_after`]), unless the hold is longer.
const MAX_LOOK: Duration = Duration::from_millis(40);

/// Before any spell's length is learned, a spell is looked at every shortest hold for
/// this long from its first sign (a trainer's step lasted 10-20 ms on H200s, and is
/// learned to within a look), and less and less often after that ([`Spell::backoff`]):
/// at a look every 5 ms, the first 230 ms decode requests that the pacer met beside
/// GPT-2 on an H200 were met 76 times in a second, and the cost bound's hold grew to
/// 690 ms.
const FIRST_LOOKS: Duration = Duration::from_millis(20);

/// After a predicted spell's end, this much more before the next launch.
const AFTER_SPELL: Duration = Duration::from_micros(300);

/// In how many kernels of [`PREDICTED_STRETCH`] the job must be predicted idle between
/// its spells for our kernels to be stretched that long ([`GapPacer::kernel_for`]).
const LONG_IDLE: u32 = 10;

/// The job's work that our kernels see as one **spell**: from its first sign to its last,
/// through idle gaps shorter than [`MIN_HOLD`] (a training step or a decode request
/// leaves host-side gaps of up to 2.7-3.3 ms inside it, measured with
/// `scripts/gap_trace.py`: launch-bound steps are mostly gaps).
#[derive(Clone, Copy, Debug)]
struct Spell {
    /// Its first sign (or, when it came in a spell the pacer predicted and stayed idle
    /// through, the predicted start).
    anchor: Time,
    /// Its last exact sign: it worked then.
    last: Time,
    /// Kernels of ours launched in it since that sign (they ran in its gaps).
    inside: u32,
    /// Until when the pacer held off for the rest of it as learned.
    until: Option<Time>,
    /// It went on while the pacer held off (a sign that is not exact came after the
    /// hold): its length as seen is a lower bound.
    censored: bool,
    /// Its start is known (seen exactly, or predicted), so its end as learned is too.
    anchored: bool,
    /// Its latest sign, exact or not.
    latest: Time,
    /// Since when our kernels have run clear (since its last sign).
    clear_since: Option<Time>,
    /// It was seen at work (an exact sign): the pacer holds off after that sign. A
    /// spell seen only after the fact (the job worked somewhere in our wait) holds
    /// nothing: the next kernel, judged exactly, says whether it still works.
    working: bool,
    /// Exact signs past the end of the spell as learned, or past [`FIRST_LOOKS`] while no
    /// spell's length is learned yet: each after the first doubles the wait before the
    /// next look ([`Spell::backoff`]).
    outlasted: u32,
    /// The job time already reported for it: from its anchor to its last sign, as its
    /// signs came ([`GapReport::job_time`]); the rest when it closes.
    reported: Duration,
}

impl Spell {
    /// How long after its last sign the pacer looks again, at the hold `hold`: the hold,
    /// or more where the spell outlasts its length as learned ([`Spell::backoff`]). A job
    /// that outlasts what was learned (a decode request longer than most, requests
    /// queued back to back) is looked at less and less often: each look
    /// that finds it at work is a meeting (beside GPT-2 decode on an H200, 10-40 a
    /// request at a look every 5-12 ms).
    fn look_after(&self, hold: Duration) -> Duration {
        hold.max(self.backoff())
    }

    /// The shortest hold doubled for each sign past the spell's end as learned after the
    /// first, up to [`MAX_LOOK`].
    fn backoff(&self) -> Duration {
        let doublings = self.outlasted.saturating_sub(1).min(8);
        MIN_HOLD.saturating_mul(1 << doublings).min(MAX_LOOK)
    }

    /// Whether the first kernel of ours that ran clear after its last sign, launched at
    /// `first_clear`, saw its end: it came as soon as the pacer looks at a spell itself
    /// (within [`MAX_MERGE`] of that sign, or the backoff's wait), or at the end of the
    /// spell as learned. A look put off longer by the cost bound's hold leaves the end
    /// anywhere in that wait, and the spell's length as seen is only a lower bound:
    /// learned from such spells, the length wore down to their first sign alone (beside
    /// GPT-2 decode on an H200 a start-up burst grew the hold to 59-690 ms and a spell of
    /// 0 us was learned; the requests' meetings were then charged against no time at
    /// work, and the hold stayed long). Halfway through the wait is no better: beside
    /// sub-millisecond requests and a hold of seconds it learns a spell of seconds.
    fn end_seen_by(&self, first_clear: Time) -> bool {
        let looks = self.last + MAX_MERGE.max(self.backoff()) + CENSOR_SLACK;
        let learned_end = self.until.map_or(Time::ZERO, |u| u + CENSOR_SLACK);
        first_clear <= looks.max(learned_end)
    }

    /// When it is seen to have ended, our kernels running clear from `clear_from` on
    /// (unless they already ran clear since its last sign): a shortest hold after that
    /// sign and [`CLEAR_FOR`] of clear kernels (a host gap inside the job's work lasts up
    /// to ~3 ms).
    fn over_at(&self, clear_from: Time) -> Time {
        let clear_since = self.clear_since.unwrap_or(clear_from);
        (self.last + MIN_HOLD).max(clear_since + CLEAR_FOR)
    }
}

/// When the gap filler launches its next kernel, and what its kernels charge the job: it
/// learns from what its kernels met how long the job's spells of work last and how often
/// they come, so that it launches only in the job's gaps. Pure: the launcher (the CUDA
/// pacing thread, the simulated GPU) tells it each kernel's end and outcome, adds up what
/// [`GapPacer::kernel_done`] returns, and asks when it may launch the next.
///
/// - A kernel that **met** the job (any outcome but [`KernelOutcome::Clear`]) is a sign of
///   a spell: one in progress when it comes within the shortest hold of the spell's last
///   sign (or right after the pacer held off for the spell's rest), else a new one, whose
///   anchor's distance from the last one's is a sample of the job's period. After each
///   sign the pacer holds off for the hold that keeps the cost under the bound
///   ([`GapCost`](super::GapCost), passed to [`GapPacer::next_launch`]) and for what is
///   left of the spell as learned, then looks again (the CUDA launcher with a probe
///   pair).
/// - A kernel that ran **clear** a shortest hold or more after the spell's last sign ends
///   the spell (the job was idle since our kernel before it): its length, from its
///   anchor to its last sign, is learned where its start was seen and its end too (the
///   look came as soon as the pacer looks by itself, not put off by a longer hold:
///   `Spell::end_seen_by`).
/// - **What it charges**: every sign costs the job about a switch (its work met our
///   context on its way in), and so does every kernel of ours launched inside a spell
///   (the job's next kernel waits for it and for the switch back): a spell's sign counts
///   the kernels of ours since the last one as met ([`GapReport::met`]). The spells' time
///   is reported too ([`GapReport::job_time`]): the job's time at work that the cost is
///   weighed against.
/// - Once the period is known (`PREDICT_AFTER` samples) the pacer launches nothing from
///   a guard before the next predicted spell until its predicted end: the job's work then
///   meets our context idle and pays one switch, not a kernel of ours queued into its
///   work. A prediction that is wrong shows as a sign elsewhere, which anchors it again.
#[derive(Clone, Debug, Default)]
pub struct GapPacer {
    /// Our previous kernel's end.
    prev_end: Option<Time>,
    /// The spell in progress.
    spell: Option<Spell>,
    /// The hold in force after a sign ([`GapPacer::set_hold`]).
    hold: Duration,
    /// The anchor of the last spell whose start was seen exactly (the period's phase).
    last_anchor: Option<Time>,
    /// Looks since our last kernel ([`GapPacer::looked`]): that kernel's end.
    look_from: Option<Time>,
    /// Our last kernel ran clear (the job idle since the one before).
    last_clear: bool,
    /// Learned: a spell's length, the period between spells, and how many periods.
    spell_len: Option<Duration>,
    period: Option<Duration>,
    periods: u32,
}

impl GapPacer {
    /// A pacer that knows nothing of the job yet.
    pub fn new() -> Self {
        GapPacer::default()
    }

    /// The hold in force after a sign (the cost bound's:
    /// [`GapCost::hold`](super::GapCost::hold)), which the launcher also passes to
    /// [`GapPacer::next_launch`]: a sign a hold after the last one may be the same
    /// spell's.
    pub fn set_hold(&mut self, hold: Duration) {
        self.hold = hold;
    }

    /// A look after a wait that cannot say that nobody ran (the CUDA launcher's probe
    /// pair misses a job at work in its launch gaps) ended at `ended`: not judged, but
    /// the next kernel's timing, judged against it, is exact.
    pub fn looked(&mut self, ended: Time) {
        if self.look_from.is_none() {
            self.look_from = self.prev_end;
        }
        self.prev_end = Some(ended);
        self.last_clear = false;
    }

    /// The learned spell length and period, when known.
    pub fn learned(&self) -> (Option<Duration>, Option<Duration>) {
        (self.spell_len, self.period)
    }

    /// A kernel of ours launched at `launched` ended at `ended` with `outcome`: what it
    /// charges the job (the caller adds the reports up).
    pub fn kernel_done(
        &mut self,
        launched: Time,
        ended: Time,
        outcome: KernelOutcome,
    ) -> GapReport {
        // The kernel that ran, as chosen at its launch: asked before this report moves
        // the pacer's state (prev_end, last_clear), which would choose another.
        let ours = self.kernel_for(launched);
        // The job came while a stretched kernel of ours ran, or queued behind it: it
        // waited half of what the kernel was stretched by, on average.
        let long_wait = if matches!(outcome, KernelOutcome::Busy | KernelOutcome::HeldBack) {
            ours.saturating_sub(GAP_KERNEL) / 2
        } else {
            Duration::ZERO
        };
        self.last_clear = outcome == KernelOutcome::Clear;
        // Since when the job's work is unseen: our previous kernel's end, or before the
        // looks since it.
        let look_from = self.look_from.take();
        let prev_end = self.prev_end.replace(ended);
        let mut report = GapReport {
            kernels: 1,
            ours,
            held_back: u32::from(outcome == KernelOutcome::HeldBack),
            long_wait,
            clock: self
                .prediction()
                .map(|(_, period, spell)| Clock { period, spell }),
            ..GapReport::default()
        };
        if !outcome.met() {
            if let Some(spell) = &mut self.spell {
                spell.clear_since.get_or_insert(launched);
                if ended >= spell.over_at(launched) {
                    let spell = *spell;
                    report.job_time = self.close(spell, spell.clear_since);
                } else {
                    spell.inside += 1;
                }
            }
            return report;
        }
        if let Some(spell) = &mut self.spell {
            spell.clear_since = None;
        }
        // Busy or held back: the job works at this launch. After others: it worked
        // somewhere since our previous kernel ended; exactly now only if that was just
        // before.
        let exact = outcome != KernelOutcome::AfterOthers
            || prev_end.is_none_or(|p| launched.saturating_since(p) <= EXACT);
        // The same spell: within the hold in force of its last sign (our look after it),
        // up to MAX_MERGE (after a longer one the job may have begun another), right
        // after the pacer held off for its rest, or, seen at work now, up to
        // UNBROKEN_MERGE after its latest sign with no clear kernel of ours since.
        let same = self.spell.is_some_and(|s| {
            let merge = self.hold.clamp(MIN_HOLD, MAX_MERGE).max(s.backoff());
            launched <= s.last.max(s.latest) + merge + CENSOR_SLACK
                || s.until.is_some_and(|u| launched <= u + CENSOR_SLACK)
                || (exact && s.clear_since.is_none() && launched <= s.latest + UNBROKEN_MERGE)
        });
        let unknown = self.spell_len.is_none();
        if same && let Some(spell) = &mut self.spell {
            report.met = spell.inside + 1;
            spell.inside = 0;
            spell.latest = spell.latest.max(launched);
            // After others, a wait after the spell's last sign: the job worked in that
            // wait. Held off for the rest of the spell as learned, that is what was
            // expected and says nothing of its length; held off a shortest hold (the
            // length unknown or outrun), the spell's last work lay between our previous
            // kernel's end and this launch: taken as halfway.
            let after_rest = spell
                .until
                .is_some_and(|u| launched + CENSOR_SLACK >= u && launched <= u + CENSOR_SLACK);
            if exact {
                let past_end = match spell.until {
                    Some(u) => launched > u + CENSOR_SLACK,
                    None => unknown && launched > spell.anchor + FIRST_LOOKS,
                };
                if past_end {
                    spell.outlasted = spell.outlasted.saturating_add(1);
                }
                spell.last = spell.last.max(launched);
                spell.working = true;
            } else if after_rest {
                spell.censored = true;
            } else if let Some(p) = prev_end {
                let half = p + launched.saturating_since(p) / 2;
                spell.last = spell.last.max(half);
            }
            // Its time at work so far, as it goes: a spell longer than an NVML sample
            // (a decode request) is not counted all in the sample it closes in.
            let so_far = spell.last.saturating_since(spell.anchor);
            report.job_time = so_far.saturating_sub(spell.reported);
            spell.reported = spell.reported.max(so_far);
        } else {
            if let Some(old) = self.spell.take() {
                report.job_time = self.close(old, None);
            }
            // A spell that came while the pacer stayed idle through it as predicted was
            // not seen to start: anchored at the prediction, its length is not learned
            // from it, and it is no sample of the period (that would only repeat the
            // prediction). Only a start seen exactly is.
            //
            // A sign right after a look (a probe pair that said "nobody", not believed)
            // shows the job at work now, not since when: its start was not seen, and a
            // predicted one lies between our kernel before the look and this sign.
            // Beside a ResNet-18 trainer on an H200, a look after a predicted step found
            // it still at work; taken as a start seen, that sign was a period sample that
            // fit nothing and a spell of no length, and the prediction wore away.
            let predicted = look_from
                .or(prev_end)
                .and_then(|p| self.predicted_between(p, launched));
            let anchor = predicted.unwrap_or(launched);
            let start_seen = exact && look_from.is_none();
            if predicted.is_none() && start_seen {
                if let Some(last) = self.last_anchor {
                    self.learn_period(launched.saturating_since(last));
                }
                self.last_anchor = Some(launched);
            }
            self.spell = Some(Spell {
                anchor,
                last: if exact { launched } else { anchor },
                inside: 0,
                until: None,
                censored: predicted.is_some() || !start_seen,
                anchored: predicted.is_some() || exact,
                working: exact,
                outlasted: 0,
                clear_since: None,
                latest: launched,
                reported: Duration::ZERO,
            });
            report.met = 1;
        }
        if let Some(spell) = self.spell.as_mut().filter(|s| s.anchored) {
            spell.until = self.spell_len.map(|len| spell.anchor + len + AFTER_SPELL);
        }
        report
    }

    /// Our kernels ran clear from the last one reported until `t` (a launcher that does
    /// not report each clear kernel, as the simulated GPU's): ends the spell in progress
    /// if that shows it over (a shortest hold after its last sign, and `CLEAR_FOR` of
    /// clear kernels). Returns what that charges (the job time of the spell it ended).
    pub fn clear_until(&mut self, t: Time) -> GapReport {
        let mut report = GapReport::default();
        let clear_from = self.prev_end;
        if clear_from.is_some_and(|p| p < t) {
            self.prev_end = Some(t);
            self.last_clear = true;
            self.look_from = None;
        }
        if let Some(spell) = self
            .spell
            .filter(|s| t >= s.over_at(clear_from.unwrap_or(t)))
        {
            let first_clear = spell.clear_since.or(clear_from).unwrap_or(t);
            report.job_time = self.close(spell, Some(first_clear));
        }
        report
    }

    /// Ends `spell`: learns its length if its start and end were seen (`first_clear`: the
    /// launch of the first kernel of ours that ran clear after its last sign, a shortest
    /// hold or more after it, [`Spell::end_seen_by`]), and returns the job time it stands
    /// for (one anchored but not seen whole: at least what was seen, and the length
    /// learned if that is more; one never anchored, seen only after others in a wait of
    /// ours: what was seen), less what was reported as its signs came.
    fn close(&mut self, spell: Spell, first_clear: Option<Time>) -> Duration {
        self.spell = None;
        let seen = spell.last.saturating_since(spell.anchor);
        let seen_end = first_clear.is_some_and(|c| spell.end_seen_by(c));
        let time = if !spell.anchored {
            // Seen only as work somewhere in a wait of ours (after others, long after our
            // previous kernel): how much of that wait it took is unknown, and crediting
            // it the length learned would weigh the charge against work never seen.
            seen
        } else if spell.censored || !seen_end {
            seen.max(self.spell_len.unwrap_or_default())
        } else {
            self.spell_len = Some(ewma(self.spell_len, seen));
            seen
        };
        time.saturating_sub(spell.reported)
    }

    /// The start of the last spell the pacer predicted (and stayed idle through) within
    /// `(from, to]`, if any.
    fn predicted_between(&self, from: Time, to: Time) -> Option<Time> {
        let (anchor, period, _) = self.prediction()?;
        let since = to.saturating_since(anchor);
        let n = (since.as_secs_f64() / period.as_secs_f64()).floor();
        let start = anchor + period.mul_f64(n);
        (start > from && start <= to && !looked_at(n)).then_some(start)
    }

    /// The last anchor, the period and the spell length, once the pacer predicts: a
    /// period learned from [`PREDICT_AFTER`] samples, in which the job idles a third of
    /// the time or more ([`PREDICT_IDLE`]).
    fn prediction(&self) -> Option<(Time, Duration, Duration)> {
        let (Some(anchor), Some(period), Some(len)) =
            (self.last_anchor, self.period, self.spell_len)
        else {
            return None;
        };
        let idles = period > (len + GUARD * 2).max(len.mul_f64(PREDICT_IDLE));
        (self.periods >= PREDICT_AFTER && idles).then_some((anchor, period, len))
    }

    /// Takes in the time between two spells' anchors. Holds and predictions skip spells,
    /// so samples span whole numbers of periods: the period is their common divisor
    /// ([`common_period`]), no shorter than a spell and a guard on either side. A sample
    /// that shares none with the period known is a new job's: start over from it.
    fn learn_period(&mut self, sample: Duration) {
        let shortest = self.spell_len.unwrap_or_default() + GUARD * 2;
        let common = self
            .period
            .and_then(|known| common_period(known, sample, shortest).map(|p| (known, p)));
        match common {
            // The same period: learn the sample as the periods it spans.
            Some((known, p)) if p >= known.mul_f64(0.9) => {
                let k = (sample.as_secs_f64() / known.as_secs_f64())
                    .round()
                    .max(1.0);
                self.period = Some(ewma(Some(known), sample.div_f64(k)));
                self.periods = self.periods.saturating_add(1);
            }
            // The period known spanned several: the common one is it, once the one
            // known has lost its samples (a single shorter sample is as likely a
            // piece of the job's work seen as two).
            Some((_, p)) if self.periods <= 1 => {
                self.period = Some(p);
                self.periods = 2;
            }
            Some(_) => self.periods -= 1,
            // Another job's, or a sample the job's jitter put out: a period known from
            // several samples loses one, and gives way only once none are left.
            None if self.periods > 1 => self.periods -= 1,
            None => {
                self.period = Some(sample);
                self.periods = 1;
            }
        }
    }

    /// The length of a kernel of ours launched at `at`, where no spell of the job is open
    /// and our kernel before ran clear just before `at`: where the job's next spell is
    /// predicted far enough ahead (a stretched kernel and the guard end before the next
    /// predicted start, LOOK_EVERY's included), [`PREDICTED_STRETCH`] if the predicted
    /// gaps hold ten of them (`LONG_IDLE`), else [`STRETCH_KERNEL`]; [`STRETCH_KERNEL`] too
    /// where its spells are long ([`STRETCH_FOR_SPELLS`]); otherwise [`GAP_KERNEL`].
    pub fn kernel_for(&self, at: Time) -> Duration {
        match self.stretch_until(at) {
            Some(Time::MAX) => STRETCH_KERNEL,
            Some(until) if at < until && self.idles_long() => PREDICTED_STRETCH,
            Some(until) if at < until => STRETCH_KERNEL,
            _ => GAP_KERNEL,
        }
    }

    /// Whether the job is predicted idle between its spells for [`LONG_IDLE`] kernels of
    /// [`PREDICTED_STRETCH`] or more (a trainer's wait on its input): where the gaps are
    /// shorter, a prediction wrong by a little puts a kernel of ours into the next spell
    /// more often, and the pacer can predict such gaps wrongly beside a service whose
    /// requests come at random (the simulator's 20/s of 0.87 ms, predicted as a 9.7 ms
    /// period of 2 ms spells).
    fn idles_long(&self) -> bool {
        self.prediction().is_some_and(|(_, period, len)| {
            period.saturating_sub(len) >= PREDICTED_STRETCH * LONG_IDLE
        })
    }

    /// The next time after `at` that [`GapPacer::kernel_for`] may change, when a
    /// launcher that does not ask each kernel (the simulated GPU) must look again: the
    /// end of the stretch in force, or when the open spell would end if our kernels ran
    /// clear from `at` (and told so, [`GapPacer::clear_until`]). `None`: only what our
    /// next kernels meet can change it.
    pub fn kernel_changes_at(&self, at: Time) -> Option<Time> {
        if let Some(spell) = &self.spell {
            let closes = spell.over_at(self.prev_end.unwrap_or(at));
            let may_stretch = self.prediction().is_some() || self.long_spells();
            return may_stretch.then(|| closes.max(at));
        }
        // Stretched until the job shows itself: no time to look again at.
        self.stretch_until(at).filter(|&u| u > at && u < Time::MAX)
    }

    /// Whether the job's spells as learned last [`STRETCH_FOR_SPELLS`] or more.
    fn long_spells(&self) -> bool {
        self.spell_len.is_some_and(|len| len >= STRETCH_FOR_SPELLS)
    }

    /// Until when kernels launched from `at` on may be stretched, when no spell is open
    /// and our kernel before ran clear: a guard and a stretched kernel before the next
    /// predicted start; without a prediction, for a job of long spells, until it shows
    /// itself ([`Time::MAX`]).
    fn stretch_until(&self, at: Time) -> Option<Time> {
        let just_clear = self.last_clear
            && self
                .prev_end
                .is_some_and(|p| at.saturating_since(p) <= EXACT);
        if self.spell.is_some() || !just_clear {
            return None;
        }
        let Some((anchor, period, len)) = self.prediction() else {
            return self.long_spells().then_some(Time::MAX);
        };
        let guard = GUARD + period / 20;
        let since = at.saturating_since(anchor);
        let n = (since.as_secs_f64() / period.as_secs_f64()).floor();
        let start = anchor + period.mul_f64(n);
        // Inside the predicted spell (the launcher idle through it, or looking): none.
        if at < start + len + AFTER_SPELL {
            return None;
        }
        let next = start + period;
        let until = next.since_epoch().checked_sub(guard + PREDICTED_STRETCH)?;
        Some(Time::from_duration(until)).filter(|&u| u > at)
    }

    /// When the next kernel of length `kernel` may be launched, `earliest` being when the
    /// duty's gap ends: in a spell, `min_hold` (the cost bound's hold, at least the
    /// shortest) after its last sign, and past what is left of it as learned.
    pub fn next_launch(&self, earliest: Time, kernel: Duration, min_hold: Duration) -> Time {
        let mut at = earliest;
        if let Some(spell) = &self.spell {
            // In a spell seen at work: the next look the bound's hold after its last
            // sign, and not before the end of the spell as learned.
            if spell.working {
                at = at.max(spell.last.max(spell.anchor) + spell.look_after(min_hold));
            }
            if let Some(until) = spell.until {
                at = at.max(until);
            }
        }
        let Some((anchor, period, len)) = self.prediction() else {
            return at;
        };
        // A spell still open at `at` (a clear kernel then would not end it) puts off
        // nothing more.
        if self.spell.is_some_and(|s| {
            at < s.last.max(s.anchor) + MIN_HOLD || s.until.is_some_and(|u| at < u)
        }) {
            return at;
        }
        // The predicted spell that our next kernel would meet: the first whose end is
        // still ahead.
        let guard = GUARD + period / 20;
        let since = at.saturating_since(anchor);
        let mut n = (since.as_secs_f64() / period.as_secs_f64()).floor();
        let mut start = anchor + period.mul_f64(n);
        if start + len + AFTER_SPELL <= at {
            start += period;
            n += 1.0;
        }
        let end = start + len + AFTER_SPELL;
        if at + kernel + guard > start && at < end && !looked_at(n) {
            end
        } else {
            at
        }
    }
}

/// Every this many predicted spells the pacer fills on through one, so that it sees a
/// start again: the spells it stays idle through show only that the job worked in them,
/// and a period learned a little off would drift out of phase unseen.
const LOOK_EVERY: f64 = 8.0;

/// Whether the `n`th spell after the last start seen is one the pacer fills through.
fn looked_at(n: f64) -> bool {
    n.rem_euclid(LOOK_EVERY) < 0.5
}

/// The longest period that `a` and `b` are both near whole multiples of (within a tenth
/// of it), if it is at least `shortest`: Euclid's algorithm, with remainders within the
/// tolerance taken as none.
fn common_period(a: Duration, b: Duration, shortest: Duration) -> Option<Duration> {
    let (mut a, mut b) = (a.max(b).as_secs_f64(), a.min(b).as_secs_f64());
    let shortest = shortest.as_secs_f64().max(1e-4);
    while b >= shortest {
        let r = (a - (a / b).round() * b).abs();
        if r <= 0.1 * b {
            return Some(Duration::from_secs_f64(b));
        }
        (a, b) = (b, r);
    }
    None
}

fn ewma(old: Option<Duration>, sample: Duration) -> Duration {
    match old {
        Some(old) => old.mul_f64(1.0 - LEARN) + sample.mul_f64(LEARN),
        None => sample,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn t(ms: f64) -> Time {
        Time::from_secs_f64(ms / 1e3)
    }

    /// A launch-bound training step as `scripts/gap_trace.py` showed one: 18 ms from its
    /// first kernel to its last, its kernels packed between host-side gaps of 0.6, 0.5
    /// and 1.5 ms (busy intervals, ms into the step), then a wait on its input: a step
    /// every 41 ms from 12 ms on.
    const STEP: [(f64, f64); 4] = [(0.0, 6.0), (6.6, 11.0), (11.5, 15.5), (17.0, 18.0)];
    const PERIOD_MS: f64 = 41.0;

    /// Whether the trainer works at some time in `[from, to]` (ms).
    fn trainer_works(from: f64, to: f64) -> bool {
        let first = ((from - 12.0) / PERIOD_MS).floor().max(0.0) as u32;
        (first..=first + 2).any(|k| {
            let s = 12.0 + PERIOD_MS * f64::from(k);
            STEP.iter().any(|&(a, b)| from < s + b && to >= s + a)
        })
    }

    /// A kernel of ours of `kernel` launched at `at`, our previous one having ended at
    /// `prev_end`, beside a job that `works(from_ms, to_ms)` says works in that span: how
    /// it ended (cut short by 0.2 ms where the job works during it), and when.
    fn run_beside(
        works: impl Fn(f64, f64) -> bool,
        prev_end: Time,
        at: Time,
        kernel: Duration,
    ) -> (KernelOutcome, Time) {
        let ms = |at: Time| at.since_epoch().as_secs_f64() * 1e3;
        if works(ms(at), ms(at + kernel)) {
            (KernelOutcome::Busy, at + kernel + MS / 5)
        } else if works(ms(prev_end), ms(at)) {
            (KernelOutcome::AfterOthers, at + kernel)
        } else {
            (KernelOutcome::Clear, at + kernel)
        }
    }

    /// What a pacer did beside the trainer over its last `last` steps of `steps`.
    #[derive(Debug, Default)]
    struct Beside {
        /// Kernels of ours launched inside a step (from its first kernel to its last).
        inside: u32,
        /// Kernels of ours launched between steps.
        between: u32,
        /// Our kernels' time between steps.
        ours_between: Duration,
        /// Stretched kernels of ours launched inside a step.
        long_inside: u32,
        /// What the pacer charged.
        report: GapReport,
    }

    /// A pacer that launches a kernel of the length it gives whenever it may (a gap of
    /// 150 us after each), beside the trainer, at the hold `hold`: the pacer, and what it
    /// did over the last `last` steps of `steps`.
    fn beside_trainer(steps: u32, last: u32, hold: Duration) -> (GapPacer, Beside) {
        let mut pacer = GapPacer::new();
        let gap = Duration::from_micros(150);
        let ms = |at: Time| at.since_epoch().as_secs_f64() * 1e3;
        let end = 12.0 + PERIOD_MS * f64::from(steps);
        let from = 12.0 + PERIOD_MS * f64::from(steps - last);
        let mut now = Time::ZERO + MS * 12;
        let mut prev_end = now;
        let mut seen = Beside::default();
        loop {
            let kernel = pacer.kernel_for(now);
            let at = pacer.next_launch(now, kernel, hold);
            if ms(at) >= end {
                break;
            }
            let kernel = pacer.kernel_for(at);
            let (outcome, ended) = run_beside(trainer_works, prev_end, at, kernel);
            let report = pacer.kernel_done(at, ended, outcome);
            if ms(at) >= from {
                let into = (ms(at) - 12.0).rem_euclid(PERIOD_MS);
                if into <= 18.0 {
                    seen.inside += 1;
                    seen.long_inside += u32::from(kernel > GAP_KERNEL);
                } else {
                    seen.between += 1;
                    seen.ours_between += kernel;
                }
                seen.report += report;
            }
            prev_end = ended;
            now = ended + gap;
        }
        (pacer, seen)
    }

    #[test]
    fn the_pacer_learns_a_launch_bound_steps_spell_through_its_gaps_and_its_period() {
        let (pacer, seen) = beside_trainer(60, 20, MIN_HOLD);
        let (len, period) = pacer.learned();
        let (len, period) = (
            len.unwrap().as_secs_f64() * 1e3,
            period.unwrap().as_secs_f64() * 1e3,
        );
        assert!((40.0..42.0).contains(&period), "{period}");
        // From the first sign (a kernel of ours at the step's start) to the last.
        assert!((15.0..18.5).contains(&len), "{len}");
        // Once it knows them, our kernels stay out of the steps, inner gaps included:
        // a meeting a step (its arrival, our context the last one on the GPU), one more
        // in each step it fills through to see its start again (one in 8), and our
        // kernels fill the waits (22 ms of 41, less the guard; how much of them: the
        // next test).
        assert!(seen.inside <= 6, "{seen:?}");
        assert!(seen.report.met <= 28, "{seen:?}");
        assert!(seen.between >= 20 * 30, "{seen:?}");
        // The steps' time as seen: 20 steps of about 18 ms.
        let job = seen.report.job_time.as_secs_f64() * 1e3;
        assert!((20.0 * 14.0..20.0 * 19.0).contains(&job), "{job}");
    }

    #[test]
    fn between_steps_on_a_clock_the_pacer_stretches_its_kernels_and_never_into_a_step() {
        let (_, seen) = beside_trainer(60, 20, MIN_HOLD);
        // 23 ms between steps, less the spell's end as seen and the guard: short
        // kernels alone would hold at most 40 % of that (20 x ~15 ms x 0.4 = 120 ms).
        let ours = seen.ours_between.as_secs_f64() * 1e3;
        assert!(ours >= 20.0 * 9.0, "{ours} ms: {seen:?}");
        assert_eq!(seen.long_inside, 0, "{seen:?}");
        // And the job met none of them.
        assert_eq!(seen.report.long_wait, Duration::ZERO, "{seen:?}");
    }

    #[test]
    fn no_kernel_is_stretched_before_the_job_is_known_or_inside_a_spell() {
        let mut pacer = GapPacer::new();
        assert_eq!(pacer.kernel_for(t(5.0)), GAP_KERNEL);
        // Spells seen but no period yet: short.
        pacer.kernel_done(t(10.0), t(10.2), KernelOutcome::Busy);
        assert_eq!(pacer.kernel_for(t(30.0)), GAP_KERNEL);
        // A period learned, a spell open: short until it is seen to end.
        let (mut pacer, _) = beside_trainer(12, 1, MIN_HOLD);
        let start = t(12.0 + PERIOD_MS * 12.0);
        pacer.kernel_done(start, start + MS / 5, KernelOutcome::Busy);
        assert_eq!(pacer.kernel_for(start + MS * 19), GAP_KERNEL);
        let closes = pacer.kernel_changes_at(start + MS * 19).unwrap();
        assert!(closes >= start + MS * 19, "{closes:?}");
        // Seen to end (clear from 19 to 22.5 ms): stretched until a guard before the
        // next step, and the launcher is told when that ends.
        pacer.kernel_done(start + MS * 19, start + MS * 19, KernelOutcome::Clear);
        let clear = start + MS * 23;
        pacer.kernel_done(clear, clear, KernelOutcome::Clear);
        assert_eq!(pacer.kernel_for(clear), PREDICTED_STRETCH);
        let until = pacer.kernel_changes_at(clear).unwrap();
        let left = (start + MS * 41).saturating_since(until);
        assert!(
            left > GUARD + PREDICTED_STRETCH && left < MS * 5,
            "{left:?}"
        );
        assert_eq!(pacer.kernel_for(until), GAP_KERNEL);
        // A stretched kernel's report counts the GPU time it asked, whatever it met.
        for outcome in [KernelOutcome::Clear, KernelOutcome::Busy] {
            let ran = pacer.clone().kernel_done(clear, clear + MS, outcome);
            assert_eq!(ran.ours, PREDICTED_STRETCH, "{outcome:?}");
            // And, the pacer predicting, the period and spell length it predicts with.
            let (len, period) = pacer.learned();
            let clock = ran.clock.map(|c| (Some(c.spell), Some(c.period)));
            assert_eq!(clock, Some((len, period)), "{outcome:?}");
        }
        // A job that comes early and meets one waits half of what it was stretched by.
        let met = pacer
            .clone()
            .kernel_done(clear, clear + MS, KernelOutcome::Busy);
        assert_eq!(met.long_wait, (PREDICTED_STRETCH - GAP_KERNEL) / 2);
        let met = pacer.kernel_done(until, until + MS / 10, KernelOutcome::Busy);
        assert_eq!(met.long_wait, Duration::ZERO);
    }

    #[test]
    fn between_long_spells_that_come_unpredicted_kernels_are_stretched_not_between_short_ones() {
        // A spell seen whole: signs from `start` to `start + len`, then clear kernels
        // for CLEAR_FOR; returns when it was seen to end.
        fn spell(pacer: &mut GapPacer, start: f64, len: f64) -> Time {
            // A look every shortest hold finds it at work.
            let mut at = start;
            while at <= start + len {
                pacer.kernel_done(t(at), t(at + 0.1), KernelOutcome::Busy);
                at += 5.0;
            }
            let from = at;
            pacer.kernel_done(t(from), t(from + 0.1), KernelOutcome::Clear);
            let to = from + 4.0;
            pacer.kernel_done(t(to), t(to + 0.1), KernelOutcome::Clear);
            t(to + 0.1)
        }
        // Requests of 100 ms at uneven times: no period, long spells.
        let mut long = GapPacer::new();
        let mut end = Time::ZERO;
        for start in [1000.0, 1700.0, 3100.0, 3650.0] {
            end = spell(&mut long, start, 100.0);
        }
        assert_eq!(long.prediction(), None);
        assert_eq!(long.kernel_for(end + MS / 4), STRETCH_KERNEL);
        // Nothing to look again at: stretched until the job shows itself.
        assert_eq!(long.kernel_changes_at(end + MS / 4), None);
        // After a wait (not just clear), short again.
        assert_eq!(long.kernel_for(end + MS * 5), GAP_KERNEL);
        // The same with requests of 2 ms: short kernels only.
        let mut short = GapPacer::new();
        for start in [1000.0, 1700.0, 3100.0, 3650.0] {
            end = spell(&mut short, start, 2.0);
        }
        assert_eq!(short.kernel_for(end + MS / 4), GAP_KERNEL);
    }

    #[test]
    fn a_step_seen_again_after_a_look_with_nothing_clear_between_is_the_same_spell() {
        // The pattern of a ResNet-18 step beside our kernels on an H200
        // (docs/data/gap-trace-h200.txt), steps every 37 ms: a kernel of ours meets the
        // step at its start, the pacer holds off, a look 9.4 ms later (a probe pair said
        // "nobody", not believed) finds it still at work, then our kernels run clear
        // from 17 ms on.
        let step = |pacer: &mut GapPacer, at: f64| {
            pacer.kernel_done(t(at + 0.24), t(at + 0.55), KernelOutcome::Clear);
            pacer.kernel_done(t(at + 0.58), t(at + 1.3), KernelOutcome::AfterOthers);
            pacer.looked(t(at + 9.8));
            pacer.kernel_done(t(at + 9.96), t(at + 10.9), KernelOutcome::AfterOthers);
            let mut clear = at + 17.0;
            while clear < at + 36.0 {
                pacer.kernel_done(t(clear), t(clear + 0.1), KernelOutcome::Clear);
                clear += 0.33;
            }
        };
        let mut pacer = GapPacer::new();
        pacer.set_hold(MIN_HOLD);
        for k in 0..12 {
            step(&mut pacer, 100.0 + 37.0 * f64::from(k));
        }
        let (len, period) = pacer.learned();
        let period = period.unwrap().as_secs_f64() * 1e3;
        let len = len.unwrap().as_secs_f64() * 1e3;
        // One spell a step, from its start to the look that found it at work: no 9.4 ms
        // period (before UNBROKEN_MERGE: 9.4, and a spell of 0.6 ms).
        assert!((36.0..38.0).contains(&period), "{period}");
        assert!((9.0..10.0).contains(&len), "{len}");
        assert!(pacer.prediction().is_some());
    }

    #[test]
    fn spells_nearly_back_to_back_are_not_predicted_and_their_gaps_are_filled() {
        // A service's queued requests (GPT-2 decode beside our kernels on an H200):
        // spells of 250 ms every 263 ms, seen whole (a look every 5 ms finds each at
        // work, then clear kernels for 4 ms).
        let mut pacer = GapPacer::new();
        pacer.set_hold(MIN_HOLD);
        let mut end = Time::ZERO;
        for k in 0..10 {
            let start = 1000.0 + 263.0 * f64::from(k);
            let mut at = start;
            while at <= start + 250.0 {
                pacer.kernel_done(t(at), t(at + 0.1), KernelOutcome::Busy);
                at += 5.0;
            }
            pacer.kernel_done(t(at), t(at + 0.1), KernelOutcome::Clear);
            pacer.kernel_done(t(at + 4.0), t(at + 4.1), KernelOutcome::Clear);
            end = t(at + 4.1);
        }
        let (len, period) = pacer.learned();
        assert!(
            len.unwrap() > MS * 240 && period.unwrap() < MS * 270,
            "{len:?} {period:?}"
        );
        // No prediction: the pacer fills from the spell's seen end on, with stretched
        // kernels (its spells are long), not holding off for a spell due soon.
        assert_eq!(pacer.prediction(), None);
        let at = end + MS / 5;
        assert_eq!(pacer.kernel_for(at), STRETCH_KERNEL);
        assert_eq!(pacer.next_launch(at, STRETCH_KERNEL, MIN_HOLD), at);
    }

    #[test]
    fn a_look_that_finds_a_predicted_step_still_at_work_keeps_the_prediction() {
        // Steps of 11 ms seen whole, every 37.9 ms (a look every 5.5 ms, then clear
        // kernels for 4 ms).
        let mut pacer = GapPacer::new();
        pacer.set_hold(MIN_HOLD);
        let step = |n: u32| 1000.0 + 37.9 * f64::from(n);
        for n in 0..6 {
            let s = step(n);
            for at in [0.0, 5.5, 11.0] {
                pacer.kernel_done(t(s + at), t(s + at + 0.2), KernelOutcome::Busy);
            }
            pacer.kernel_done(t(s + 16.5), t(s + 16.6), KernelOutcome::Clear);
            pacer.kernel_done(t(s + 20.1), t(s + 20.2), KernelOutcome::Clear);
        }
        assert!(pacer.prediction().is_some());
        let len = pacer.learned().0.unwrap();
        // Three steps running as an H200 trace showed them: our kernels clear until the
        // guard before the predicted step, idle through it, then a look (a probe pair
        // that said "nobody") and a kernel that starts late: the step ran 12.5 ms, longer
        // than learned. Then clear kernels again.
        for n in 6..9 {
            let s = step(n);
            pacer.kernel_done(t(s - 3.5), t(s - 3.0), KernelOutcome::Clear);
            pacer.looked(t(s + 12.4));
            pacer.kernel_done(t(s + 12.52), t(s + 12.95), KernelOutcome::AfterOthers);
            pacer.kernel_done(t(s + 24.7), t(s + 24.8), KernelOutcome::Clear);
            pacer.kernel_done(t(s + 28.3), t(s + 28.4), KernelOutcome::Clear);
        }
        // The sign was no start seen: no period sample, no spell of no length (before:
        // the spell learned fell from 11 to 6.2 ms, and the prediction stopped).
        let period = pacer.learned().1.unwrap().as_secs_f64() * 1e3;
        assert!((37.0..38.5).contains(&period), "{period}");
        assert!(pacer.learned().0.unwrap() >= len, "{pacer:?}");
        assert!(pacer.prediction().is_some(), "{pacer:?}");
    }

    #[test]
    fn a_spell_that_outlasts_its_learned_length_is_looked_at_less_and_less_often() {
        // Spells of 10 ms learned (a look every 5 ms finds each at work, then clear
        // kernels), at uneven times.
        let mut pacer = GapPacer::new();
        pacer.set_hold(MIN_HOLD);
        for start in [1000.0, 1130.0, 1290.0, 1400.0, 1570.0] {
            for at in [0.0, 5.0, 10.0] {
                pacer.kernel_done(t(start + at), t(start + at + 0.1), KernelOutcome::Busy);
            }
            pacer.kernel_done(t(start + 15.5), t(start + 15.6), KernelOutcome::Clear);
            pacer.kernel_done(t(start + 19.1), t(start + 19.2), KernelOutcome::Clear);
        }
        // Then a spell of 300 ms (requests queued back to back): each look while it
        // lasts finds it at work.
        let (start, end) = (2000.0, 2300.0);
        let mut at = t(start);
        let mut looks = 0;
        while at < t(end) {
            pacer.kernel_done(at, at + MS / 10, KernelOutcome::Busy);
            looks += 1;
            at = pacer.next_launch(at + MS / 4, GAP_KERNEL, MIN_HOLD);
        }
        // A look every 5 ms would be 60 meetings; doubling from the second sign past
        // the learned end, up to 40 ms: 12.
        assert!(looks <= 14, "{looks}");
        // And the pacer looks again within MAX_LOOK of the spell's end.
        assert!(at <= t(end) + MAX_LOOK, "{at:?}");
        // A new spell starts at the shortest hold again.
        pacer.kernel_done(at, at + MS / 10, KernelOutcome::Clear);
        let clear = at + MS * 4;
        pacer.kernel_done(clear, clear + MS / 10, KernelOutcome::Clear);
        let next = t(2500.0);
        pacer.kernel_done(next, next + MS / 10, KernelOutcome::Busy);
        let look = pacer.next_launch(next + MS / 4, GAP_KERNEL, MIN_HOLD);
        assert!(
            look <= next + MIN_HOLD.max(pacer.learned().0.unwrap()) + MS,
            "{look:?}"
        );
    }

    #[test]
    fn without_the_spell_our_kernels_would_fill_the_steps_inner_gaps() {
        // The same trainer, with spells cut at each inner gap (a hold shorter than the
        // gaps): the model the pacer replaced. Our kernels then run inside the steps.
        let mut pacer = GapPacer::new();
        let kernel = Duration::from_micros(100);
        let mut inside = 0;
        let mut now = Time::ZERO + MS * 12;
        for _ in 0..4000 {
            let at = pacer.next_launch(now, kernel, MS / 10);
            let ms = at.since_epoch().as_secs_f64() * 1e3;
            let busy = trainer_works(ms, ms);
            let outcome = if busy {
                KernelOutcome::Busy
            } else {
                KernelOutcome::Clear
            };
            pacer.kernel_done(at, at + kernel, outcome);
            let into = (ms - 12.0).rem_euclid(PERIOD_MS);
            inside += u32::from(into <= 18.0);
            now = at + kernel + Duration::from_micros(150);
        }
        assert!(inside > 50, "{inside}");
    }

    #[test]
    fn a_hold_of_the_cost_bound_longer_than_the_steps_does_not_lengthen_the_learned_spell() {
        // At the shortest hold the pacer learns the step; then the bound holds it off for
        // 300 ms after each sign: the sign after each hold is another step's.
        let (pacer, _) = beside_trainer(40, 10, MIN_HOLD);
        let len = pacer.learned().0.unwrap();
        let mut pacer = pacer;
        let mut now = Time::from_secs_f64(2.0);
        pacer.set_hold(MS * 300);
        for _ in 0..20 {
            // A look after the hold: the job worked in it. Not seen at work: no hold.
            let at = pacer.next_launch(now, MS / 10, MS * 300);
            pacer.kernel_done(at, at + MS / 10, KernelOutcome::AfterOthers);
            let next = pacer.next_launch(at + MS / 5, MS / 10, MS * 300);
            assert_eq!(next, at + MS / 5);
            // The next kernel finds it at work: held off the bound's hold from then.
            pacer.kernel_done(next, next + MS / 5, KernelOutcome::Busy);
            now = next + MS / 2;
            let after = pacer.next_launch(now, MS / 10, MS * 300);
            assert!(after >= next + MS * 300, "{after:?} {next:?}");
        }
        let after = pacer.learned().0.unwrap();
        assert!(after.abs_diff(len) < MS, "{len:?} -> {after:?}");
    }

    #[test]
    fn a_period_sample_spanning_skipped_spells_counts_as_that_many_periods() {
        // The period (ms) a new pacer learns from spells every 37 ms of which it met
        // the `met`th.
        let learned = |met: [f64; 5]| {
            let mut pacer = GapPacer::new();
            for n in met {
                let start = 1000.0 + 37.0 * n;
                pacer.kernel_done(t(start), t(start + 2.0), KernelOutcome::Busy);
                pacer.kernel_done(t(start + 12.0), t(start + 12.1), KernelOutcome::Clear);
            }
            pacer.learned().1.unwrap().as_secs_f64() * 1e3
        };
        // Met at the 1st, 2nd, 5th, 6th and 9th: the samples of 111 and 148 ms are 3
        // and 4 periods.
        let period = learned([0.0, 1.0, 4.0, 5.0, 9.0]);
        assert!((36.0..38.0).contains(&period), "{period}");
        // A period learned from skipped spells is corrected by samples a third of it,
        // once they have outweighed it (one alone may be a piece of the job's work).
        let period = learned([0.0, 3.0, 6.0, 7.0, 8.0]);
        assert!((36.0..38.0).contains(&period), "{period}");
    }

    #[test]
    fn the_common_period_of_samples_spanning_several_is_found() {
        let ms = |x: f64| Duration::from_secs_f64(x / 1e3);
        let near = |d: Option<Duration>, x: f64| {
            d.is_some_and(|d| (d.as_secs_f64() * 1e3 - x).abs() < 1.5)
        };
        assert!(near(common_period(ms(113.0), ms(75.5), ms(5.0)), 37.5));
        assert!(near(common_period(ms(189.0), ms(37.5), ms(5.0)), 37.5));
        assert!(near(common_period(ms(37.0), ms(37.6), ms(5.0)), 37.0));
        // Nothing in common above the shortest: none.
        assert_eq!(common_period(ms(37.0), ms(50.0), ms(20.0)), None);
    }

    #[test]
    fn after_each_sign_the_pacer_holds_the_bounds_hold_and_a_clear_look_ends_the_spell() {
        let mut pacer = GapPacer::new();
        let first = pacer.kernel_done(t(10.0), t(12.0), KernelOutcome::Busy);
        assert_eq!((first.kernels, first.met, first.held_back), (1, 1, 0));
        // The bound's hold after the sign, at least the shortest.
        assert_eq!(pacer.next_launch(t(12.2), MS, MS * 7), t(17.0));
        assert_eq!(pacer.next_launch(t(12.2), MS, MS), t(15.0));
        // A sign within the hold of the last one is the same spell, and one after a
        // late start a long idle wait after our last kernel says only that the job ran
        // in that wait: the spell's last exact sign stays.
        // Its time at work is reported as its signs come: 5 ms by the sign at 15 ms.
        let r = pacer.kernel_done(t(15.0), t(15.3), KernelOutcome::HeldBack);
        assert_eq!((r.met, r.held_back), (1, 1));
        assert_eq!(r.job_time, MS * 5);
        let r = pacer.kernel_done(t(19.9), t(20.0), KernelOutcome::AfterOthers);
        assert_eq!(r.met, 1);
        // Clear kernels for 3.5 ms, a shortest hold after the last sign, end the spell: the job's
        // last work lay between 15.3 and 19.9 ms (it ran unseen after 15), taken as 17.6:
        // 7.6 ms is learned, and had been reported by the sign that said so.
        assert_eq!(r.job_time, Duration::from_micros(2600));
        let r = pacer.kernel_done(t(25.0), t(25.1), KernelOutcome::Clear);
        assert_eq!(
            r.job_time,
            Duration::ZERO,
            "one clear kernel may be in a gap"
        );
        let r = pacer.kernel_done(t(28.5), t(28.6), KernelOutcome::Clear);
        assert_eq!(r.met, 0);
        assert_eq!(r.job_time, Duration::ZERO);
        assert_eq!(pacer.learned().0, Some(Duration::from_micros(7600)));
        // After it, nothing is held.
        assert_eq!(pacer.next_launch(t(25.3), MS, MS * 20), t(25.3));
        // The next spell's first sign holds off for the rest of it as learned, and a
        // late start right after that (the job worked, as expected) says nothing new.
        pacer.kernel_done(t(80.0), t(80.2), KernelOutcome::Busy);
        assert_eq!(pacer.next_launch(t(80.4), MS, MIN_HOLD), t(87.9));
        let r = pacer.kernel_done(t(87.9), t(88.0), KernelOutcome::AfterOthers);
        assert_eq!(r.job_time, Duration::ZERO, "its rest unseen");
        let r = pacer.kernel_done(t(93.0), t(93.1), KernelOutcome::Clear);
        assert_eq!(
            r.job_time,
            Duration::ZERO,
            "one clear kernel may be in a gap"
        );
        // At its end the length learned stands for its time at work.
        let r = pacer.kernel_done(t(96.5), t(96.6), KernelOutcome::Clear);
        assert_eq!(r.job_time, Duration::from_micros(7600));
        assert_eq!(pacer.learned().0, Some(Duration::from_micros(7600)));
        // A spell seen to its end is learned: 120-126 ms, to the one before 3:1.
        let mut job = pacer
            .kernel_done(t(120.0), t(120.2), KernelOutcome::Busy)
            .job_time;
        job += pacer
            .kernel_done(t(125.0), t(125.2), KernelOutcome::Busy)
            .job_time;
        job += pacer
            .kernel_done(t(126.0), t(126.1), KernelOutcome::AfterOthers)
            .job_time;
        let r = pacer.kernel_done(t(131.2), t(131.3), KernelOutcome::Clear);
        assert_eq!(
            r.job_time,
            Duration::ZERO,
            "one clear kernel may be in a gap"
        );
        let r = pacer.kernel_done(t(134.7), t(134.8), KernelOutcome::Clear);
        assert_eq!(job + r.job_time, MS * 6);
        let len = pacer.learned().0.unwrap().as_secs_f64() * 1e3;
        assert!((len - (0.75 * 7.6 + 0.25 * 6.0)).abs() < 1e-6, "{len}");
    }

    /// Requests of 230 ms (busy throughout) that start at uneven times, 2 a second on
    /// average, from 1 s on (ms).
    fn request_starts() -> impl Iterator<Item = f64> {
        let gaps = [520.0, 310.0, 760.0, 450.0, 290.0, 640.0, 380.0, 550.0];
        (0..).scan(1000.0, move |at, i| {
            *at += gaps[i % gaps.len()];
            Some(*at)
        })
    }
    const REQUEST_MS: f64 = 230.0;

    fn request_works(from: f64, to: f64) -> bool {
        request_starts()
            .take_while(|&s| s <= to)
            .any(|s| from < s + REQUEST_MS && to >= s)
    }

    /// A launcher beside the requests from `from` to `to` (ms) at the hold `hold`, as the
    /// CUDA one: after a wait longer than [`EXACT`] a look (a probe pair, which sees
    /// nothing) before the kernel. Returns what the pacer charged.
    fn beside_requests(pacer: &mut GapPacer, from: f64, to: f64, hold: Duration) -> GapReport {
        let ms = |at: Time| at.since_epoch().as_secs_f64() * 1e3;
        pacer.set_hold(hold);
        let mut now = t(from);
        let mut prev_end = now;
        let mut seen = GapReport::default();
        while ms(now) < to {
            let mut at = pacer.next_launch(now, pacer.kernel_for(now), hold);
            if at.saturating_since(prev_end) > EXACT {
                pacer.looked(at);
                prev_end = at;
                at += MS / 20;
            }
            let kernel = pacer.kernel_for(at);
            let (outcome, ended) = run_beside(request_works, prev_end, at, kernel);
            seen += pacer.kernel_done(at, ended, outcome);
            prev_end = ended;
            now = ended + Duration::from_micros(150);
        }
        seen
    }

    #[test]
    fn before_anything_is_learned_a_long_spell_is_looked_at_less_and_less_often() {
        // The first request the pacer sees, 230 ms at work: a look every 5 ms would meet
        // it 46 times (a start-up burst that grew the bound's hold to 690 ms beside GPT-2
        // decode on an H200); doubling from the second sign, up to 40 ms: 10.
        let mut pacer = GapPacer::new();
        let first = request_starts().next().unwrap();
        let seen = beside_requests(&mut pacer, first - 50.0, first + 300.0, MIN_HOLD);
        assert!((6..=12).contains(&seen.met), "{seen:?}");
        assert!(pacer.learned().0.is_some());
    }

    #[test]
    fn a_hold_longer_than_the_spells_keeps_their_length_and_time_at_work() {
        // Learned at the shortest hold: the requests' 230 ms.
        let mut pacer = GapPacer::new();
        beside_requests(&mut pacer, 1000.0, 5000.0, MIN_HOLD);
        let learned = pacer.learned().0.unwrap().as_secs_f64() * 1e3;
        assert!((learned - REQUEST_MS).abs() < 0.2 * REQUEST_MS, "{learned}");
        // Then the cost bound's hold grows to 690 ms: each request's first sign, and a
        // look 690 ms later that finds the job idle. The request went on somewhere in
        // that wait, not for none of it: the length stays, and so does the time at work
        // that the meetings are charged against.
        let seen = beside_requests(&mut pacer, 5000.0, 15_000.0, MS * 690);
        let len = pacer.learned().0.unwrap().as_secs_f64() * 1e3;
        assert!((len - REQUEST_MS).abs() < 0.2 * REQUEST_MS, "{len}");
        let worked = request_starts()
            .take_while(|&s| s < 15_000.0)
            .filter(|&s| s >= 5000.0)
            .count() as f64;
        let job_time = seen.job_time.as_secs_f64() * 1e3;
        assert!(
            job_time >= 0.5 * worked * REQUEST_MS,
            "{job_time} of {worked} requests"
        );
    }

    #[test]
    fn a_sign_a_hold_after_the_last_is_the_same_spell_up_to_10_ms() {
        let mut pacer = GapPacer::new();
        pacer.set_hold(MS * 8);
        pacer.kernel_done(t(0.0), t(0.2), KernelOutcome::Busy);
        // Looked at again after the 8 ms hold: the job still works, the same spell.
        let r = pacer.kernel_done(t(8.5), t(8.7), KernelOutcome::Busy);
        assert_eq!(r.met, 1);
        let job = r.job_time;
        pacer.kernel_done(t(8.9), t(9.0), KernelOutcome::Clear);
        let r = pacer.kernel_done(t(13.6), t(13.7), KernelOutcome::Clear);
        assert_eq!(
            job + r.job_time,
            Duration::from_micros(8500),
            "one spell, 0-8.5 ms"
        );
        // After a 30 ms hold a sign may be another spell's: merged up to 10 ms only.
        let mut pacer = GapPacer::new();
        pacer.set_hold(MS * 30);
        pacer.kernel_done(t(0.0), t(0.2), KernelOutcome::Busy);
        let r = pacer.kernel_done(t(30.0), t(30.2), KernelOutcome::Busy);
        assert_eq!(
            r.job_time,
            Duration::ZERO,
            "the first spell was not seen to end"
        );
        pacer.kernel_done(t(36.0), t(36.1), KernelOutcome::Clear);
        let r = pacer.kernel_done(t(37.6), t(37.7), KernelOutcome::Clear);
        assert_eq!(
            r.job_time,
            Duration::ZERO,
            "a new spell at 30 ms, seen at one sign"
        );
    }

    #[test]
    fn after_a_look_that_cannot_say_nobody_ran_the_next_sign_is_exact() {
        let mut pacer = GapPacer::new();
        pacer.kernel_done(t(0.0), t(0.2), KernelOutcome::Busy);
        // A late start 9 ms after our last kernel: the job worked somewhere in between,
        // not seen at work, so nothing is held.
        let mut after_wait = pacer.clone();
        after_wait.kernel_done(t(9.1), t(9.2), KernelOutcome::AfterOthers);
        // With a look (a probe pair) just before, it worked right then.
        pacer.looked(t(9.0));
        pacer.kernel_done(t(9.1), t(9.2), KernelOutcome::AfterOthers);
        assert_eq!(pacer.next_launch(t(9.3), MS, MIN_HOLD), t(14.1));
        assert_eq!(after_wait.next_launch(t(9.3), MS, MIN_HOLD), t(9.3));
    }

    #[test]
    fn a_period_sample_that_does_not_fit_costs_one_sample_not_the_period() {
        let mut pacer = GapPacer::new();
        let spell = |pacer: &mut GapPacer, start: f64| {
            pacer.kernel_done(t(start), t(start + 0.2), KernelOutcome::Busy);
            pacer.kernel_done(t(start + 6.0), t(start + 6.1), KernelOutcome::Clear);
            pacer.kernel_done(t(start + 7.6), t(start + 7.7), KernelOutcome::Clear);
        };
        for n in 0..6 {
            spell(&mut pacer, 1000.0 + 37.0 * f64::from(n));
        }
        // A step 17 ms late (the job stalled): not a multiple of 37 ms.
        spell(&mut pacer, 1000.0 + 37.0 * 6.0 + 17.0);
        let period = pacer.learned().1.unwrap().as_secs_f64() * 1e3;
        assert!((36.0..38.0).contains(&period), "{period}");
    }

    #[test]
    fn kernels_of_ours_launched_inside_a_spell_are_charged_at_its_next_sign() {
        let mut pacer = GapPacer::new();
        pacer.kernel_done(t(10.0), t(10.2), KernelOutcome::Busy);
        // Two kernels in the job's inner gap, then a sign within the hold: three met.
        pacer.kernel_done(t(12.0), t(12.1), KernelOutcome::Clear);
        pacer.kernel_done(t(12.3), t(12.4), KernelOutcome::Clear);
        let r = pacer.kernel_done(t(12.6), t(12.7), KernelOutcome::AfterOthers);
        assert_eq!(r.met, 3);
    }
}
