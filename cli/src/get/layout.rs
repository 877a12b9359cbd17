//! How `describe` lays out its text: `Label:  value` lines aligned like kubectl
//! describe's, indented tables, long texts cut to one line.

use std::collections::BTreeMap;

use crate::printing::{column_widths, format_row};

/// A table under a section of `describe`, or `<none>`.
pub(super) fn print_indented_table(headers: &[&str], rows: &[Vec<String>]) {
    if rows.is_empty() {
        println!("  <none>");
        return;
    }
    let widths = column_widths(headers, rows);
    println!("  {}", format_row(&widths, headers));
    for row in rows {
        println!("  {}", format_row(&widths, row));
    }
}

pub(super) fn one_line(text: &str, max: usize) -> String {
    let flat = text.replace('\n', " ");
    if flat.chars().count() > max { format!("{}...", flat.chars().take(max - 3).collect::<String>()) } else { flat }
}

/// `Label:  value` lines aligned like kubectl describe's.
#[derive(Default)]
pub(super) struct Describe {
    pub(super) text: String,
}

impl Describe {
    const WIDTH: usize = 24;

    pub(super) fn field(&mut self, depth: usize, label: &str, value: String) {
        let pad = "  ".repeat(depth);
        let width = Self::WIDTH.saturating_sub(pad.len() + 1);
        let value = crate::printing::visible(&value);
        self.text.push_str(&format!("{pad}{:<width$} {value}\n", format!("{label}:")));
    }

    pub(super) fn optional(&mut self, depth: usize, label: &str, value: Option<String>) {
        if let Some(value) = value {
            self.field(depth, label, value);
        }
    }

    pub(super) fn section(&mut self, label: &str) {
        self.text.push_str(&format!("{label}:\n"));
    }

    pub(super) fn map(&mut self, depth: usize, label: &str, map: Option<&BTreeMap<String, String>>) {
        match map.filter(|m| !m.is_empty()) {
            None => self.field(depth, label, "<none>".into()),
            Some(map) => {
                let mut first = true;
                for (k, v) in map {
                    let label = if first { label } else { "" };
                    if first {
                        self.field(depth, label, format!("{k}={v}"));
                    } else {
                        self.text.push_str(&format!("{:width$}{k}={v}\n", "", width = Self::WIDTH));
                    }
                    first = false;
                }
            }
        }
    }
}
