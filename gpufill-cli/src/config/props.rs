//! Property tests of the parser: arbitrary text, and arbitrary TOML built from the
//! known keys with values of random types, give a config or a [`ConfigError`] that
//! names its key, never a panic.

use std::path::Path;
use std::sync::LazyLock;

use proptest::prelude::*;

use super::*;

/// Every key the parser knows, as `(table, key)` ("" is the top level): those the
/// defaults render (the runtime's settings and `[metrics]`), and one it does not know.
static KEYS: LazyLock<Vec<(String, String)>> = LazyLock::new(|| {
    let rendered: toml::Table = toml::from_str(&Config::default().to_toml_string()).unwrap();
    let mut keys = Vec::new();
    for (name, value) in rendered {
        match value {
            toml::Value::Table(table) => {
                keys.extend(table.keys().map(|key| (name.clone(), key.clone())));
            }
            _ => keys.push((String::new(), name)),
        }
    }
    keys.push(("probe".to_owned(), "no_such_key".to_owned()));
    keys
});

fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<i64>().prop_map(|v| v.to_string()),
        any::<f64>().prop_map(|v| format!("{v:?}")),
        Just("nan".to_owned()),
        Just("-inf".to_owned()),
        (-10.0..200.0f64).prop_map(|v| format!("{v:.3}")),
        any::<bool>().prop_map(|v| v.to_string()),
        "[a-zA-Z0-9_/ -]{0,12}".prop_map(|s| format!("{s:?}")),
        proptest::collection::vec(any::<i64>(), 0..4).prop_map(|v| format!("{v:?}")),
        Just("\"all\"".to_owned()),
        Just("[0, \"GPU-x\"]".to_owned()),
        Just("{ a = 1 }".to_owned()),
        Just("\"sm\"".to_owned()),
        Just("\"127.0.0.1:0\"".to_owned()),
        Just("1979-05-27T07:32:00Z".to_owned()),
    ]
}

fn document() -> impl Strategy<Value = String> {
    proptest::collection::vec((0..KEYS.len(), value()), 0..12).prop_map(|entries| {
        let mut top = String::new();
        let mut tables: Vec<(&str, String)> = Vec::new();
        for (i, v) in entries {
            let (table, key) = &KEYS[i];
            let line = format!("{key} = {v}\n");
            if table.is_empty() {
                top.push_str(&line);
            } else if let Some((_, body)) = tables.iter_mut().find(|(t, _)| t == table) {
                body.push_str(&line);
            } else {
                tables.push((table.as_str(), line));
            }
        }
        for (table, body) in tables {
            top.push_str(&format!("[{table}]\n{body}"));
        }
        top
    })
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 512,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn arbitrary_text_gives_a_config_or_an_error(text in "\\PC{0,200}") {
        let _ = Config::from_toml_str(&text, Some(Path::new("f.toml")));
    }

    #[test]
    fn arbitrary_known_keys_give_a_valid_config_or_an_error_naming_the_file(doc in document()) {
        match Config::from_toml_str(&doc, Some(Path::new("f.toml"))) {
            Ok(config) => {
                // Accepted values resolve without panicking and render back equal.
                prop_assert!(config.validate(None).is_ok());
                let settings = config.to_settings();
                let _ = (settings.fill_settings(), settings.yield_settings(false), settings.retry_settings());
                prop_assert_eq!(Config::from_toml_str(&config.to_toml_string(), None).unwrap(), config);
            }
            Err(e) => {
                let text = e.to_string();
                prop_assert!(text.starts_with("f.toml:"), "{}", text);
                if let ConfigError::Invalid { key: Some(key), .. } = &e {
                    prop_assert!(text.contains(key.as_str()), "{}", text);
                    prop_assert!(e.position().is_some(), "no line:col in {}", text);
                }
            }
        }
    }
}
