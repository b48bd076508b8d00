//! `settings_table!` (this file's macro): a table of settings, each key written once with its doc, its
//! type, its default and its rule ([`super::rules`]). From that one line come the
//! struct field, its part of `Default`, its check in [`crate::Settings::validate`], its
//! key in the file, and (feature `serde`) how the file reads and writes it.

/// Defines a table of settings: `$name`, whose keys sit under `$prefix` in the file
/// (`"load."`; `""` for the top level). Each line is a field: its doc, its name (and
/// `as "key"` where the file's key differs), type, default and rule.
macro_rules! settings_table {
    (
        $(#[doc = $doc:literal])*
        pub struct $name:ident in $prefix:literal {
            $(
                $(#[doc = $fdoc:literal])*
                pub $field:ident $(as $key:literal)?: $ty:ty = $default:expr, $rule:expr;
            )+
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
                    "`, default `", stringify!($default), "`, rule `", stringify!($rule), "`."
                )]
                pub $field: $ty,
            )+
        }

        impl Default for $name {
            fn default() -> Self {
                $name { $($field: $default,)+ }
            }
        }

        impl $name {
            /// This table's keys in the file, in the order they are listed.
            pub const KEYS: &'static [&'static str] =
                &[$(settings_table!(@key $field $(as $key)?)),+];
        }

        impl $crate::settings::rules::Checked for $name {
            fn first_problem(&self) -> Option<(&'static str, String)> {
                use $crate::settings::rules::Rule;
                None$(.or_else(|| {
                    let key = concat!($prefix, settings_table!(@key $field $(as $key)?));
                    $rule.problem(key, &self.$field)
                }))+
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
                use $crate::settings::file::Read;
                $(
                    if key == settings_table!(@key $field $(as $key)?) {
                        self.$field = map.next_value_seed(Read::new(&$rule))?;
                        return Ok(());
                    }
                )+
                Err(::serde::de::Error::unknown_field(key, Self::KEYS))
            }

            fn write_fields<S: ::serde::ser::SerializeStruct>(
                &self,
                out: &mut S,
            ) -> Result<(), S::Error> {
                use $crate::settings::file::Written;
                $(
                    Written::new(&$rule, &self.$field)
                        .write_as(settings_table!(@key $field $(as $key)?), out)?;
                )+
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
}
