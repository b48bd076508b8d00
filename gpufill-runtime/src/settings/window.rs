//! [`WindowSettings`]: one `[[schedule.window]]`, whose keys have no defaults (a window
//! names its start, end and target). Its rule is `rules::Windows`; how the file reads it,
//! `file.rs`.

use gpufill_core::TimeOfDay;

/// One daily window, `[start, end)` in local time (it may cross midnight).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WindowSettings {
    /// First minute inside (`start = "HH:MM"`).
    pub start: TimeOfDay,
    /// First minute outside; differs from `start` (`end = "HH:MM"`).
    pub end: TimeOfDay,
    /// The target inside, percent in `[0, 100]` (0: gpufill off).
    pub target_percent: f64,
}
