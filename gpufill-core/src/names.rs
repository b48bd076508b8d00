//! Choices named by a word in gpufill's config and on its command line
//! (`controller = "pi"`, `load.kernel = "sleep"`, `yield.mps = "auto"`): one macro,
//! [`crate::named_choice!`], gives every such enum its names, its `FromStr` with the
//! same message (`expected "pi" or "window", got "PI"`) and its `Display`. The enums
//! live with what they choose (this crate, `gpufill-cuda`, `gpufill-runtime`); the
//! macro lives here, in the crate they all depend on.

/// Gives a fieldless enum the names it goes by in the config and on the command line:
/// `ALL` (every value, in the order the config lists them), `NAMES` (their names, in the
/// same order), `as_str`, `FromStr` (the error lists the names: `expected "util" or
/// "sm", got "SM"`), `Display` and [`Choice`].
///
/// ```
/// #[derive(Clone, Copy, Debug, PartialEq)]
/// enum Colour { Red, Green }
/// gpufill_core::named_choice!(Colour { Red => "red", Green => "green" });
///
/// assert_eq!("green".parse::<Colour>(), Ok(Colour::Green));
/// assert_eq!(Colour::Red.to_string(), "red");
/// assert_eq!(Colour::NAMES, ["red", "green"]);
/// assert_eq!(
///     "Red".parse::<Colour>(),
///     Err("expected \"red\" or \"green\", got \"Red\"".to_owned())
/// );
/// ```
#[macro_export]
macro_rules! named_choice {
    ($ty:ident { $($variant:ident => $name:literal),+ $(,)? }) => {
        impl $ty {
            /// Every value, in the order the config lists them.
            pub const ALL: [$ty; [$($name),+].len()] = [$($ty::$variant),+];

            /// Every name, in the order of [`Self::ALL`].
            pub const NAMES: [&'static str; [$($name),+].len()] = [$($name),+];

            /// The name used in the config and on the command line.
            pub fn as_str(self) -> &'static str {
                match self { $($ty::$variant => $name),+ }
            }
        }

        impl ::std::str::FromStr for $ty {
            type Err = String;

            /// Parses the name [`Self::as_str`] gives; a hyphen may stand for an
            /// underscore (`fill-gaps` is `fill_gaps`), as on command lines.
            fn from_str(name: &str) -> Result<Self, String> {
                $ty::ALL
                    .into_iter()
                    .find(|c| c.as_str() == name || c.as_str() == name.replace('-', "_"))
                    .ok_or_else(|| $crate::names::unknown_name(&$ty::NAMES, name))
            }
        }

        impl $crate::names::Choice for $ty {
            const NAMES: &'static [&'static str] = &$ty::NAMES;
        }

        impl ::std::fmt::Display for $ty {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

/// A choice named by a word ([`crate::named_choice!`] implements it), for code that reads
/// any of them: a file's reader, a flag's parser.
pub trait Choice: Copy + std::str::FromStr<Err = String> + std::fmt::Display + 'static {
    /// Every name, in the order the config lists them.
    const NAMES: &'static [&'static str];
}

/// `expected "a", "b" or "c", got "x"`: why `name` is none of `names`.
#[doc(hidden)]
pub fn unknown_name(names: &[&str], name: &str) -> String {
    format!("{}, got {name:?}", expected(names))
}

/// `expected "a", "b" or "c"`: the names a choice takes, for a message that shows what
/// it got in its own way (a file's `true` is not the name `"true"`).
pub fn expected(names: &[&str]) -> String {
    let quoted: Vec<String> = names.iter().map(|n| format!("{n:?}")).collect();
    let list = match quoted.as_slice() {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} or {last}", init.join(", ")),
    };
    format!("expected {list}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_listed_with_or_before_the_last() {
        assert_eq!(unknown_name(&["a"], "x"), "expected \"a\", got \"x\"");
        assert_eq!(
            unknown_name(&["a", "b", "c"], "x"),
            "expected \"a\", \"b\" or \"c\", got \"x\""
        );
        assert_eq!(expected(&["a", "b"]), "expected \"a\" or \"b\"");
    }
}
