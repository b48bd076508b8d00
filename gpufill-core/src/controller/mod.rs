//! Controllers: pure arithmetic that turns a measured utilization and a target into a duty.
//!
//! Two are provided: [`PiController`], the one gpufill uses, and [`WindowRule`], the
//! original Python tool's rule, kept so that the comparison in the benches is honest.

mod pi;
mod window;

pub use pi::{PiController, PiGains};
pub use window::{WindowRule, WindowRuleSettings};

use crate::time::Time;
use crate::units::{Duty, Utilization};

/// Decides the duty. No I/O, no clock, no errors.
pub trait Controller {
    /// Called every tick while filling. `measured` is a new device sample, or `None`
    /// when none has arrived since the last call: then the controller only re-applies
    /// its feed-forward for `target` (so a target change acts at once) and integrates nothing.
    fn update(&mut self, now: Time, measured: Option<Utilization>, target: Utilization) -> Duty;

    /// Forgets transient state after a pause (yielding, a fault). What was learned
    /// about the device's steady offset may be kept.
    fn reset(&mut self, now: Time);
}

impl<C: Controller + ?Sized> Controller for Box<C> {
    fn update(&mut self, now: Time, measured: Option<Utilization>, target: Utilization) -> Duty {
        (**self).update(now, measured, target)
    }
    fn reset(&mut self, now: Time) {
        (**self).reset(now)
    }
}

/// Which controller to use: the one controller choice, named in the config as
/// `controller = "pi" | "window"`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ControllerKind {
    /// [`PiController`] with default gains.
    #[default]
    Pi,
    /// [`WindowRule`] with the original tool's settings.
    Window,
}

named_choice!(ControllerKind { Pi => "pi", Window => "window" });

impl ControllerKind {
    /// A fresh controller of this kind with its default settings.
    pub fn build(self) -> Box<dyn Controller + Send> {
        match self {
            ControllerKind::Pi => Box::new(PiController::default()),
            ControllerKind::Window => Box::new(WindowRule::default()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kind_names_parse_back_and_others_are_refused() {
        for kind in ControllerKind::ALL {
            assert_eq!(kind.as_str().parse::<ControllerKind>(), Ok(kind));
        }
        assert_eq!(
            "PI".parse::<ControllerKind>(),
            Err("expected \"pi\" or \"window\", got \"PI\"".to_owned())
        );
    }
}
