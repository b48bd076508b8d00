//! [`Overrides`]: the values the command line gives, laid over the file. The table in
//! `overrides!` (this file's macro) is the one place that says which flag sets which key: it defines the
//! struct, [`Overrides::apply`] and [`Overrides::flag_for_key`].

use gpufill_runtime::{ControllerKind, GpuSelector, Metric, SpinKernel};

use super::Config;

macro_rules! overrides {
    ($( $field:ident: $ty:ty, $flag:literal => $key:literal, |$c:ident| $target:expr; )+) => {
        /// Values given on the command line, one per flag; `None` leaves the file's value.
        #[derive(Clone, Debug, Default, PartialEq)]
        pub struct Overrides {
            $(
                #[doc = concat!("`", $flag, "`, which sets `", $key, "`.")]
                pub $field: Option<$ty>,
            )+
        }

        impl Overrides {
            /// Lays these values over `config`. Validate afterwards.
            pub fn apply(&self, config: &mut Config) {
                $(
                    if let Some(value) = &self.$field {
                        let $c = &mut *config;
                        $target = value.clone();
                    }
                )+
            }

            /// Whether these overrides set `key`.
            pub fn sets(&self, key: &str) -> bool {
                match key {
                    $($key => self.$field.is_some(),)+
                    _ => false,
                }
            }

            /// The flag that sets a config key, for error messages.
            pub fn flag_for_key(key: &str) -> Option<&'static str> {
                match key {
                    $($key => Some($flag),)+
                    _ => None,
                }
            }
        }
    };
}

overrides! {
    target_percent: f64, "--target" => "target_percent", |c| c.target_percent;
    gpus: GpuSelector, "--gpus" => "gpus", |c| c.gpus;
    controller: ControllerKind, "--controller" => "controller", |c| c.controller;
    metric: Metric, "--metric" => "metric", |c| c.metric;
    kernel: SpinKernel, "--kernel" => "load.kernel", |c| c.load.kernel;
    tick_ms: u64, "--tick-ms" => "tick_ms", |c| c.tick_ms;
    width_blocks: u32, "--width" => "load.width_blocks", |c| c.load.width_blocks;
    max_duty_percent: f64, "--max-duty" => "load.max_duty_percent", |c| c.load.max_duty_percent;
    period_ms: u64, "--period-ms" => "load.period_ms", |c| c.load.period_ms;
    grace_s: f64, "--grace" => "yield.grace_s", |c| c.yielding.grace_s;
    metrics_listen: String, "--metrics" => "metrics.listen", |c| c.metrics.listen;
}

impl Config {
    /// Lays the flags over the file's values. Validate afterwards.
    pub fn apply(&mut self, flags: &Overrides) {
        flags.apply(self);
    }
}
