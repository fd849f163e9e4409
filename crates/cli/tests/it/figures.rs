//! One source per figure, checked on README.md and every page of docs/: a measured
//! figure stated in prose (a speed, a time per operation) sits in a section that says
//! when, on what code (a commit) and by what command it was measured, or is a table's on
//! its page, or links to the page that has it; and every measured table says the same
//! three things before it. A figure restated without its source goes stale unseen.
//! (The pages' transcripts are run by `docs.rs`, their links checked by `links.rs`.)

use crate::support;

use std::path::Path;

use support::docs::{pages, root};

mod tables;

use tables::{measured_table, names_command, names_commit, tables};

/// A paragraph of a page (tables and code blocks apart), the line it starts on, and
/// whether the section it is in (heading to heading, tables included) names the date,
/// commit and command of a measurement.
struct Paragraph {
    line: usize,
    text: String,
    sourced_section: bool,
}

/// The prose paragraphs of `text` and, apart, the rows of its measured tables (the
/// sources). A row of any other table (a list of settings, of failures and what Spillway
/// does) is prose, a paragraph of its own: a figure it states needs a source too.
fn prose_and_tables(text: &str) -> (Vec<Paragraph>, String) {
    let measured: Vec<usize> = tables(text)
        .into_iter()
        .filter(|(_, rows)| measured_table(rows))
        .flat_map(|(start, rows)| start..start + rows.len())
        .collect();
    let (mut paragraphs, mut tables) = (Vec::new(), String::new());
    let mut current: Option<Paragraph> = None;
    let mut fenced = false;
    let mut section_start = 0;
    for (i, line) in text.lines().enumerate() {
        if line.starts_with('#') && !fenced {
            paragraphs.extend(current.take());
            source_section(&mut paragraphs[section_start..], text, i);
            section_start = paragraphs.len();
            continue;
        }
        if line.starts_with("```") {
            fenced = !fenced;
            paragraphs.extend(current.take());
            continue;
        }
        if fenced {
            continue;
        }
        if line.trim_start().starts_with('|') {
            paragraphs.extend(current.take());
            if measured.contains(&i) {
                tables.push_str(line);
                tables.push('\n');
            } else {
                paragraphs.push(Paragraph {
                    line: i + 1,
                    text: line.to_owned(),
                    sourced_section: false,
                });
            }
        } else if line.trim().is_empty() {
            paragraphs.extend(current.take());
        } else {
            let p = current.get_or_insert(Paragraph {
                line: i + 1,
                text: String::new(),
                sourced_section: false,
            });
            p.text.push_str(line);
            p.text.push('\n');
        }
    }
    paragraphs.extend(current);
    let end = text.lines().count();
    source_section(&mut paragraphs[section_start..], text, end);
    (paragraphs, tables)
}

/// Marks `paragraphs`, one section's, as sourced when the section's lines (from the first
/// paragraph's to line `end`, exclusive) name a date, a commit and a command.
fn source_section(paragraphs: &mut [Paragraph], text: &str, end: usize) {
    let Some(first) = paragraphs.first().map(|p| p.line) else {
        return;
    };
    let section: Vec<&str> = text.lines().skip(first - 1).take(end + 1 - first).collect();
    let section = section.join("\n");
    let sourced_section = dated(&section) && names_commit(&section) && names_command(&section);
    for p in paragraphs {
        p.sourced_section = sourced_section;
    }
}

/// The measured figures `text` states: a number followed by a unit of speed or time per
/// operation (ns, µs, decisions/s, k/s, N/s), or a latency in ms with a decimal point
/// (a round number of ms is a setting: "a 10 ms timeout"), as written ("15.7",
/// "52,419").
fn figures(text: &str) -> Vec<String> {
    const UNITS: [&str; 6] = [" decisions/s", "k/s", "/s", "ns", "µs", " ms"];
    let mut found = Vec::new();
    for unit in UNITS {
        for (at, _) in text.match_indices(unit) {
            let after = text[at + unit.len()..].chars().next();
            if after.is_some_and(char::is_alphanumeric) {
                continue;
            }
            let before = text[..at].trim_end_matches(' ');
            let number: String = before
                .chars()
                .rev()
                .take_while(|c| c.is_ascii_digit() || *c == '.' || *c == ',')
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            let number = number.trim_matches(|c| c == '.' || c == ',');
            let start = before.len() - number.len();
            let prefix = before[..start].chars().next_back();
            // `2^53 µs` is a bound, `p99` a name: not figures.
            if number.is_empty()
                || !number.starts_with(|c: char| c.is_ascii_digit())
                || prefix.is_some_and(|c| c == '^' || c.is_alphanumeric())
                || (unit == " ms" && !number.contains('.'))
            {
                continue;
            }
            found.push(number.to_owned());
        }
    }
    found
}

/// Whether `text` names a date (YYYY-MM-DD): a paragraph that says when it measured.
fn dated(text: &str) -> bool {
    text.as_bytes().windows(10).any(|w| {
        w[..4].iter().all(u8::is_ascii_digit)
            && w[4] == b'-'
            && w[5..7].iter().all(u8::is_ascii_digit)
            && w[7] == b'-'
            && w[8..].iter().all(u8::is_ascii_digit)
    })
}

/// The pages `text` links to (relative `.md` links), read.
fn linked_pages(page: &Path, text: &str) -> Vec<String> {
    text.split("](")
        .skip(1)
        .filter_map(|rest| rest.split(')').next())
        .map(|target| target.split('#').next().unwrap_or(""))
        .filter(|target| target.ends_with(".md") && !target.contains("://"))
        .filter_map(|target| std::fs::read_to_string(page.parent().unwrap().join(target)).ok())
        .collect()
}

/// Where a stated figure is sourced: in a section that says when, on what code and how it
/// was measured, in a table of its own page, or on a page its paragraph links to. The figures
/// of `text` that are none of these.
fn unsourced(page: &Path, text: &str) -> Vec<String> {
    let (paragraphs, tables) = prose_and_tables(text);
    let mut missing = Vec::new();
    for p in &paragraphs {
        if p.sourced_section {
            continue;
        }
        let linked = linked_pages(page, &p.text);
        for figure in figures(&p.text) {
            if !tables.contains(&figure) && !linked.iter().any(|l| l.contains(&figure)) {
                missing.push(format!("{}:{}: {figure}", page.display(), p.line));
            }
        }
    }
    missing
}

/// One source per figure: a measured figure (a speed, a time per operation) stated in
/// prose says when, on what code and how it was measured, or is a table's on the same page, or links to the
/// page that has it. Restated without its source, it goes stale unseen.
#[test]
fn every_stated_figure_has_its_source() {
    let missing: Vec<String> = pages()
        .iter()
        .flat_map(|page| unsourced(page, &std::fs::read_to_string(page).unwrap()))
        .collect();
    assert!(
        missing.is_empty(),
        "figures without a source (give their section the date, commit and command, or \
         link the page that measured them):\n{}",
        missing.join("\n")
    );
}

#[test]
fn a_figure_without_its_source_is_found() {
    let page = root().join("README.md");
    let stale = "In process, 24.7 ns a check against governor's 49.9 ns.\n";
    assert_eq!(unsourced(&page, stale).len(), 2, "{:?}", figures(stale));
    let linked = "123.45 ns, or 24.7 ns a check: [performance](docs/performance.md).\n";
    assert_eq!(
        unsourced(&page, linked),
        [format!("{}:1: 123.45", page.display())]
    );
    let dated = "## Measured\n\nOn 2026-11-27 at `f94d917`, `cargo bench`:\n\n| a |\n\n24.7 ns a check.\n\n## Next\n\n1 ns.\n";
    assert_eq!(
        unsourced(&page, dated),
        [format!("{}:11: 1", page.display())]
    );
    let no_command = "## Measured\n\nOn 2026-11-27 at `f94d917`:\n\n24.7 ns a check.\n";
    assert_eq!(
        unsourced(&page, no_command),
        [format!("{}:5: 24.7", page.display())]
    );
    assert_eq!(
        figures("about 9 µs a read, 52,419/s, 2^53 µs, p99"),
        ["52,419", "9"]
    );
    assert_eq!(figures("a 10 ms timeout, p99 2.9 ms"), ["2.9"]);
    // A table of prose (no figure column) is no source: its figures need one.
    let prose_table = "| failure | what Spillway does |\n|---|---|\n| stalls | max 12.5 ms |\n";
    assert_eq!(
        unsourced(&page, prose_table),
        [format!("{}:3: 12.5", page.display())]
    );
}
