//! `gpufill simulate`'s table and CSV: a row a tick (the table a row every `--every`,
//! which the caller picks), in either metric's columns: `util`, or `sm` and `width`.

use std::io::{self, Write};

use gpufill_core::{Tick, TimeOfDay, Utilization};

/// The table's and the CSV's rows of a run that measures utilization, or SM activity
/// (`sm`: [`super::SimRun::measures_sm`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rows {
    sm: bool,
}

impl Rows {
    /// The rows of a run that measures SM activity (`sm`), else utilization.
    pub fn new(sm: bool) -> Rows {
        Rows { sm }
    }

    /// The CSV's header line.
    ///
    /// # Errors
    /// I/O errors of `w`.
    pub fn write_csv_header(&self, w: &mut dyn Write) -> io::Result<()> {
        if self.sm {
            writeln!(w, "t_s,target,sm,duty,width,state")
        } else {
            writeln!(w, "t_s,target,util,duty,state")
        }
    }

    /// The table's header, after the time of day at the start (given when a schedule has
    /// windows).
    ///
    /// # Errors
    /// I/O errors of `out`.
    pub fn write_header(
        &self,
        out: &mut dyn Write,
        start_time: Option<TimeOfDay>,
    ) -> io::Result<()> {
        if let Some(start_time) = start_time {
            writeln!(out, "time of day at the start: {start_time}")?;
        }
        if self.sm {
            writeln!(
                out,
                "{:>8} {:>7} {:>6} {:>6} {:>6}  {:<9} foreign",
                "t_s", "target", "sm", "duty", "width", "state"
            )
        } else {
            writeln!(
                out,
                "{:>8} {:>7} {:>6} {:>6}  {:<9} foreign",
                "t_s", "target", "util", "duty", "state"
            )
        }
    }

    /// `t`'s line of the CSV.
    ///
    /// # Errors
    /// I/O errors of `w`.
    pub fn write_csv_row(&self, w: &mut dyn Write, t: &Tick) -> io::Result<()> {
        if self.sm {
            return writeln!(
                w,
                "{:.3},{:.1},{},{:.2},{},{}",
                t.at.as_secs_f64(),
                t.target.percent(),
                percent(t.util),
                t.duty.percent(),
                t.width.get(),
                t.state.as_str()
            );
        }
        writeln!(
            w,
            "{:.3},{:.1},{},{:.2},{}",
            t.at.as_secs_f64(),
            t.target.percent(),
            percent(t.util),
            t.duty.percent(),
            t.state.as_str()
        )
    }

    /// `t`'s row of the table.
    ///
    /// # Errors
    /// I/O errors of `out`.
    pub fn write_row(&self, out: &mut dyn Write, t: &Tick) -> io::Result<()> {
        if self.sm {
            return writeln!(
                out,
                "{:>8.2} {:>7.1} {:>6} {:>6.1} {:>6}  {:<9} {}",
                t.at.as_secs_f64(),
                t.target.percent(),
                percent(t.util),
                t.duty.percent(),
                t.width.get(),
                t.state.as_str(),
                t.foreign
            );
        }
        writeln!(
            out,
            "{:>8.2} {:>7.1} {:>6} {:>6.1}  {:<9} {}",
            t.at.as_secs_f64(),
            t.target.percent(),
            percent(t.util),
            t.duty.percent(),
            t.state.as_str(),
            t.foreign
        )
    }
}

/// A percentage with one decimal; empty for none (no new sample).
fn percent(u: Option<Utilization>) -> String {
    u.map_or_else(String::new, |u| format!("{:.1}", u.percent()))
}

#[cfg(test)]
mod tests {
    use gpufill_core::{Duty, LaunchShape, State, Time, Width};

    use super::*;

    /// A tick at 5 s, yielding to one foreign process, with a sample of 50 %.
    fn yielding() -> Tick {
        Tick {
            at: Time::from_millis(5000),
            state: State::Yielding,
            target: Utilization::from_percent(50.0).unwrap(),
            sample: None,
            util: Some(Utilization::from_percent(50.0).unwrap()),
            duty: Duty::ZERO,
            width: Width::blocks(132).unwrap(),
            shape: LaunchShape::Bursts,
            foreign: 1,
            probed: None,
            cost: None,
            events: Vec::new(),
        }
    }

    fn text(write: impl FnOnce(&mut dyn Write) -> io::Result<()>) -> String {
        let mut out = Vec::new();
        write(&mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn each_row_lies_under_its_header() {
        let rows = Rows::new(false);
        assert_eq!(
            text(|o| rows.write_header(o, None)),
            "     t_s  target   util   duty  state     foreign\n"
        );
        assert_eq!(
            text(|o| rows.write_row(o, &yielding())),
            "    5.00    50.0   50.0    0.0  yielding  1\n"
        );
        let sm = Rows::new(true);
        assert_eq!(
            text(|o| sm.write_header(o, None)),
            "     t_s  target     sm   duty  width  state     foreign\n"
        );
        let mut tick = yielding();
        tick.util = None;
        assert_eq!(
            text(|o| sm.write_row(o, &tick)),
            "    5.00    50.0           0.0    132  yielding  1\n"
        );
    }

    #[test]
    fn the_csv_has_a_column_a_value_and_an_empty_one_for_no_sample() {
        let rows = Rows::new(false);
        assert_eq!(
            text(|o| rows.write_csv_header(o)),
            "t_s,target,util,duty,state\n"
        );
        assert_eq!(
            text(|o| rows.write_csv_row(o, &yielding())),
            "5.000,50.0,50.0,0.00,yielding\n"
        );
        let sm = Rows::new(true);
        let mut tick = yielding();
        tick.util = None;
        assert_eq!(
            text(|o| sm.write_csv_header(o)),
            "t_s,target,sm,duty,width,state\n"
        );
        assert_eq!(
            text(|o| sm.write_csv_row(o, &tick)),
            "5.000,50.0,,0.00,132,yielding\n"
        );
    }

    #[test]
    fn a_schedule_s_start_time_comes_before_the_header() {
        let start = TimeOfDay::MIDNIGHT;
        let header = text(|o| Rows::new(false).write_header(o, Some(start)));
        assert_eq!(
            header.lines().next().unwrap(),
            format!("time of day at the start: {start}")
        );
        assert_eq!(header.lines().count(), 2);
    }
}
