//! The docs' metric tables, made from the series list: README.md's and
//! docs/operations.md's are [`markdown_table`] of every series `/metrics` serves.

use super::{Labels, Series};

/// A metric table of the docs: a row a series, with its name and labels, type, whether
/// it is per GPU, and what it means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetricTable {
    /// README.md's: the meaning is the help line.
    Short,
    /// docs/operations.md's: the help line and what the docs say beyond it.
    Full,
}

/// `table` in Markdown: a header, then a row for each of `series`, in order.
pub fn markdown_table<'a>(
    series: impl IntoIterator<Item = &'a Series>,
    table: MetricTable,
) -> String {
    let mut out = "| series | type | per GPU | meaning |\n|---|---|---|---|\n".to_owned();
    for series in series {
        let labels = series.labels();
        let meaning = match table {
            MetricTable::Short => series.help.to_owned(),
            MetricTable::Full => format!("{} {}", series.help, series.notes),
        };
        let cells = [
            series_cell(series.name, &labels),
            series.kind.as_str().to_owned(),
            if labels.gpu { "yes" } else { "no" }.to_owned(),
            meaning.trim_end().replace('|', "\\|"),
        ];
        out.push_str(&format!("| {} |\n", cells.join(" | ")));
    }
    out
}

/// The series' name as its table shows it: with its own labels, and the values of the
/// one that takes a fixed set (`gpufill_state{state="filling\|..."}`).
fn series_cell(name: &str, labels: &Labels) -> String {
    match (labels.own.as_slice(), labels.values.is_empty()) {
        ([], _) => format!("`{name}`"),
        ([label], false) => format!("`{name}{{{label}=\"{}\"}}`", labels.values.join("\\|")),
        (own, _) => format!("`{name}{{{}}}`", own.join(",")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prometheus::series;

    #[test]
    fn a_table_has_a_row_a_series_naming_its_labels_and_their_values() {
        let table = markdown_table(series(), MetricTable::Short);
        let rows: Vec<&str> = table.lines().skip(2).collect();
        assert_eq!(rows.len(), series().len());
        let row = |name: &str| *rows.iter().find(|r| r.starts_with(name)).unwrap();
        assert_eq!(
            row("| `gpufill_state{"),
            "| `gpufill_state{state=\"filling\\|yielding\\|blind\\|stopped\\|off\"}` | gauge | \
             yes | 1 for the loop's current state, 0 for the others; blind and stopped are \
             error states. |"
        );
        assert!(row("| `gpufill_build_info{version,revision}` | gauge | no |").len() > 50);
        assert!(row("| `process_open_fds` | gauge | no |").ends_with("descriptors. |"));
    }

    #[test]
    fn the_full_table_adds_the_notes_to_the_help() {
        let short = markdown_table(&crate::reload::SERIES, MetricTable::Short);
        let full = markdown_table(&crate::reload::SERIES, MetricTable::Full);
        assert!(!short.contains("As Prometheus's own"), "{short}");
        assert!(
            full.contains("refused (the old settings stay). As Prometheus's own"),
            "{full}"
        );
    }
}
