//! `settings_table!` (this file's macro): a table of settings, each key written once, in
//! one line: its doc, type, default, rule ([`super::rules`]), whether a running agent
//! takes it (`live`) or keeps it until a restart (`restart`), and its command-line flag
//! if it has one. From that line come the struct field, its part of `Default`, its check
//! in [`crate::Settings::validate`], its key in the file, its entry in
//! [`crate::Settings::every_key`] (so [`crate::RESTART_KEYS`] and the binary's flags),
//! and (feature `serde`) how the file reads and writes it.

/// Defines a table of settings: `$name`, whose keys sit under `$prefix` in the file
/// (`"load."`; `""` for the top level). Each line is a key: its doc, its name (and
/// `as "key"` where the file's key differs), type, default, rule, `live` or `restart`,
/// and `flag("--name", "VALUE", "help")` where it has one. The tables inside it
/// (`[load]`) follow under `tables`, each a line of its own.
macro_rules! settings_table {
    (
        $(#[doc = $doc:literal])*
        pub struct $name:ident in $prefix:literal {
            $(
                $(#[doc = $fdoc:literal])*
                pub $field:ident $(as $key:literal)?: $ty:ty = $default:expr, $rule:expr, $when:ident
                    $(, flag($long:literal, $value_name:literal, $help:expr))?;
            )+
            $(tables {
                $(
                    $(#[doc = $tdoc:literal])*
                    pub $table:ident $(as $tkey:literal)?: $tty:ty;
                )+
            })?
        }
    ) => {
        $(#[doc = $doc])*
        #[derive(Clone, Debug, PartialEq)]
        pub struct $name {
            $(
                $(#[doc = $fdoc])*
                #[doc = ""]
                #[doc = concat!(
                    "Key `", $prefix, settings_table!(@key $field $(as $key)?),
                    "`, default `", stringify!($default), "`, rule `", stringify!($rule),
                    "`, ", stringify!($when), $(", flag `", $long, "`",)? "."
                )]
                pub $field: $ty,
            )+
            $($(
                $(#[doc = $tdoc])*
                pub $table: $tty,
            )+)?
        }

        impl Default for $name {
            fn default() -> Self {
                $name {
                    $($field: $default,)+
                    $($($table: <$tty>::default(),)+)?
                }
            }
        }

        impl $name {
            /// This table's keys in the file, in the order they are listed.
            pub const KEYS: &'static [&'static str] = &[
                $(settings_table!(@key $field $(as $key)?),)+
                $($(settings_table!(@key $table $(as $tkey)?),)+)?
            ];

            /// Every key of this table and of the tables in it, as its line defines it,
            /// in the order they are listed: its name, restart need and flag, for a
            /// front end that lists the keys or builds flags from them.
            pub fn every_key() -> Vec<$crate::settings::Key> {
                #[allow(unused_mut)]
                let mut keys = vec![$(
                    $crate::settings::Key {
                        name: concat!($prefix, settings_table!(@key $field $(as $key)?)),
                        restart: settings_table!(@restart $when),
                        flag: settings_table!(@flag $($long, $value_name, $help)?),
                    },
                )+];
                $($(keys.extend(<$tty>::every_key());)+)?
                keys
            }

            /// Sets `key` (as [`Self::every_key`] names it) to its value in `from`, and
            /// says whether that changed it.
            #[allow(clippy::clone_on_copy)]
            pub fn copy_key(&mut self, from: &Self, key: &str) -> bool {
                $(
                    if key == concat!($prefix, settings_table!(@key $field $(as $key)?)) {
                        let changed = self.$field != from.$field;
                        self.$field = from.$field.clone();
                        return changed;
                    }
                )+
                false $($(|| self.$table.copy_key(&from.$table, key))+)?
            }

            /// Where the value of `key`, a key with a flag, lives, by what its flag reads:
            /// a front end parses the flag's text by the variant and writes it there.
            #[allow(unused_variables)] // by a table without flags
            pub fn flag_value(&mut self, key: &str) -> Option<$crate::settings::FlagValue<'_>> {
                $(
                    settings_table!(
                        @flag_value self key $field $rule,
                        concat!($prefix, settings_table!(@key $field $(as $key)?))
                        $(, $long)?
                    );
                )+
                $($(
                    if let Some(value) = self.$table.flag_value(key) {
                        return Some(value);
                    }
                )+)?
                None
            }

            /// The first key whose value its rule refuses, with why.
            pub(crate) fn first_problem(&self) -> Option<(&'static str, String)> {
                use $crate::settings::rules::Rule;
                None$(.or_else(|| {
                    let key = concat!($prefix, settings_table!(@key $field $(as $key)?));
                    $rule.problem(&self.$field).map(|reason| (key, reason))
                }))+
                $($(.or_else(|| self.$table.first_problem()))+)?
            }
        }

        #[cfg(feature = "serde")]
        impl $crate::settings::file::Table for $name {
            const KEYS: &'static [&'static str] = $name::KEYS;

            fn read_value<'de, A: ::serde::de::MapAccess<'de>>(
                &mut self,
                key: &str,
                map: &mut A,
            ) -> Result<(), A::Error> {
                use $crate::settings::rules::Read;
                $(
                    if key == settings_table!(@key $field $(as $key)?) {
                        self.$field = map.next_value_seed(Read::new(&$rule))?;
                        return Ok(());
                    }
                )+
                $($(
                    if key == settings_table!(@key $table $(as $tkey)?) {
                        self.$table =
                            map.next_value_seed($crate::settings::file::TableOf::<$tty>::new())?;
                        return Ok(());
                    }
                )+)?
                Err(::serde::de::Error::unknown_field(key, Self::KEYS))
            }

            fn write_fields<S: ::serde::ser::SerializeStruct>(
                &self,
                out: &mut S,
            ) -> Result<(), S::Error> {
                use $crate::settings::rules::Written;
                $(
                    Written::new(&$rule, &self.$field)
                        .write_as(settings_table!(@key $field $(as $key)?), out)?;
                )+
                $($(
                    out.serialize_field(settings_table!(@key $table $(as $tkey)?), &self.$table)?;
                )+)?
                Ok(())
            }
        }

        #[cfg(feature = "serde")]
        impl<'de> ::serde::Deserialize<'de> for $name {
            fn deserialize<D: ::serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                $crate::settings::file::deserialize_table(d, stringify!($name))
            }
        }

        #[cfg(feature = "serde")]
        impl ::serde::Serialize for $name {
            fn serialize<S: ::serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                $crate::settings::file::serialize_table(self, stringify!($name), s)
            }
        }
    };
    (@key $field:ident) => { stringify!($field) };
    (@key $field:ident as $key:literal) => { $key };
    (@restart live) => { false };
    (@restart restart) => { true };
    (@flag) => { None };
    (@flag $long:literal, $value_name:literal, $help:expr) => {
        Some($crate::settings::Flag { long: $long, value_name: $value_name, help: $help })
    };
    (@flag_value $self:ident $key:ident $field:ident $rule:expr, $full:expr) => {};
    (@flag_value $self:ident $key:ident $field:ident $rule:expr, $full:expr, $long:literal) => {
        if $key == $full {
            return Some($crate::settings::FlagRule::flag_value(&$rule, &mut $self.$field));
        }
    };
}
