//! What the commands print: a human table (the default) or one JSON document (`--output
//! json`) on stdout, and progress and errors on stderr. This is the only module that writes
//! to the terminal; JSON shapes are described by the schemas in `cli/schema/`.
#![allow(clippy::print_stdout, reason = "a command-line tool prints its results on stdout")]

use std::io::{IsTerminal, Write};

use clap::ValueEnum;
use serde_json::Value;

/// How results are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Tables and lines for a person.
    Table,
    /// One JSON document on stdout, for scripts.
    Json,
}

/// A table: headers and rows of cells, columns as wide as their widest cell.
#[derive(Debug, Clone, Default)]
pub struct Table {
    headers: Vec<String>,
    rows: Vec<Vec<String>>,
    /// Columns aligned right (numbers).
    right: Vec<bool>,
}

impl Table {
    /// A table with these column headers; a header starting with `>` is right-aligned (the
    /// `>` is not shown).
    pub fn new(headers: &[&str]) -> Self {
        Table {
            headers: headers.iter().map(|h| h.trim_start_matches('>').to_owned()).collect(),
            rows: Vec::new(),
            right: headers.iter().map(|h| h.starts_with('>')).collect(),
        }
    }

    /// Adds a row (missing cells are empty, extra ones dropped).
    pub fn row(&mut self, cells: Vec<String>) {
        let mut cells = cells;
        cells.resize(self.headers.len(), String::new());
        self.rows.push(cells);
    }

    /// Whether the table has no rows.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The table as text: a header line, then one line per row; two spaces between columns,
    /// no trailing spaces. Cell text is kept to one line.
    pub fn render(&self) -> String {
        let clean = |c: &str| c.replace(['\n', '\r', '\t'], " ");
        let rows: Vec<Vec<String>> =
            self.rows.iter().map(|r| r.iter().map(|c| clean(c)).collect()).collect();
        let mut widths: Vec<usize> = self.headers.iter().map(|h| h.chars().count()).collect();
        for row in &rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let mut out = String::new();
        for row in std::iter::once(&self.headers).chain(rows.iter()) {
            let mut line = String::new();
            for (i, cell) in row.iter().enumerate() {
                let pad = widths[i].saturating_sub(cell.chars().count());
                if i > 0 {
                    line.push_str("  ");
                }
                if self.right[i] {
                    line.push_str(&" ".repeat(pad));
                    line.push_str(cell);
                } else {
                    line.push_str(cell);
                    line.push_str(&" ".repeat(pad));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// Prints a command's result: `json` in JSON mode, else `text()` (already ending in a newline).
pub fn emit(format: Format, json: &Value, text: impl FnOnce() -> String) {
    let mut stdout = std::io::stdout().lock();
    let written = match format {
        Format::Json => serde_json::to_string_pretty(json)
            .map_err(std::io::Error::other)
            .and_then(|s| writeln!(stdout, "{s}")),
        Format::Table => write!(stdout, "{}", text()),
    };
    // A closed pipe (`| head`) is not an error worth a message.
    let _ = written.and_then(|()| stdout.flush());
}

/// Prints a line to stdout (for progress meant to be read, like `watch` without a terminal).
pub fn line(text: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{text}").and_then(|()| stdout.flush());
}

/// Prints a progress or notice line to stderr.
pub fn note(text: &str) {
    eprintln!("{text}");
}

/// Whether stdout is a terminal.
pub fn stdout_is_terminal() -> bool {
    std::io::stdout().is_terminal()
}

/// Whether stderr is a terminal (progress may be redrawn in place).
pub fn stderr_is_terminal() -> bool {
    std::io::stderr().is_terminal()
}

/// Redraws stdout's screen with `text` (on a terminal: clear, home, text).
pub fn redraw(text: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = write!(stdout, "\x1b[2J\x1b[H{text}").and_then(|()| stdout.flush());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_aligns_columns_and_numbers_right() {
        let mut table = Table::new(&["NAME", ">ACTIVE", "STATUS"]);
        table.row(vec!["orders".into(), "12".into(), "Active".into()]);
        table.row(vec!["a-much-longer-name".into(), "3".into(), "Disabled".into()]);
        assert_eq!(
            table.render(),
            "NAME                ACTIVE  STATUS\n\
             orders                  12  Active\n\
             a-much-longer-name       3  Disabled\n"
        );
    }

    #[test]
    fn cells_stay_on_one_line_and_rows_are_padded() {
        let mut table = Table::new(&["A", "B"]);
        table.row(vec!["x\ny".into()]);
        assert_eq!(table.render(), "A    B\nx y\n");
        assert!(!table.is_empty());
        assert!(Table::new(&["A"]).is_empty());
    }

    #[test]
    fn non_ascii_cells_are_measured_in_characters() {
        let mut table = Table::new(&["NAME", ">N"]);
        table.row(vec!["café".into(), "1".into()]);
        assert_eq!(table.render(), "NAME  N\ncafé  1\n");
    }
}
