//! One source per figure, checked on README.md and every page of docs/: a measured
//! figure stated in prose (a speed, a time per operation) sits in a section that says
//! when, on what code (a commit) and by what command it was measured, or is a table's on
//! its page, or links to the page that has it; and every measured table says the same
//! three things before it. A figure restated without its source goes stale unseen.
//! (The pages' transcripts are run by `docs.rs`, their links checked by `links.rs`.)

use crate::support;

use std::path::Path;

use support::docs::{pages, root};

mod current;
mod tables;

use tables::{measured_table, names_command, names_commit, paragraph_before, tables};

/// A paragraph of a page (tables and code blocks apart), the line it starts on, and
/// whether it names, itself, the date, commit and command of a measurement.
struct Paragraph {
    line: usize,
    text: String,
    sourced: bool,
}

impl Paragraph {
    fn new(line: usize, text: String) -> Paragraph {
        let sourced = names_source(&text);
        Paragraph {
            line,
            text,
            sourced,
        }
    }
}

/// Whether `text` says when, on what code and by what command something was measured.
fn names_source(text: &str) -> bool {
    dated(text) && names_commit(text) && names_command(text)
}

/// The prose paragraphs of `text` and, apart, the sources: the rows of its measured
/// tables and the code blocks (a command's output) whose paragraph before them says
/// when, on what code and by what command. A row of any other table (a list of
/// settings, of failures and what Spillway does) is prose, a paragraph of its own: a
/// figure it states needs a source too. A figure's source is its own paragraph, row or
/// block, never its section's: another measurement's date above would stand in for it.
fn prose_and_tables(text: &str) -> (Vec<Paragraph>, String) {
    // A table is a source when it is measured (its source line is checked apart) or
    // when the paragraph just before it names one.
    let lines: Vec<&str> = text.lines().collect();
    let measured: Vec<usize> = tables(text)
        .into_iter()
        .filter(|(start, rows)| {
            measured_table(rows) || names_source(&paragraph_before(&lines, *start))
        })
        .flat_map(|(start, rows)| start..start + rows.len())
        .collect();
    let (mut paragraphs, mut sources) = (Vec::new(), String::new());
    let mut current: Option<(usize, String)> = None;
    let finish = |current: &mut Option<(usize, String)>, paragraphs: &mut Vec<Paragraph>| {
        if let Some((line, text)) = current.take() {
            paragraphs.push(Paragraph::new(line, text));
        }
    };
    // A code block's lines are a source when the paragraph before it names one, as a
    // table's rows are.
    let mut fenced: Option<bool> = None;
    for (i, line) in text.lines().enumerate() {
        if line.starts_with("```") {
            finish(&mut current, &mut paragraphs);
            fenced = match fenced {
                Some(_) => None,
                None => Some(names_source(&paragraph_before(&lines, i))),
            };
            continue;
        }
        if let Some(sourced) = fenced {
            if sourced {
                sources.push_str(line);
                sources.push('\n');
            }
            continue;
        }
        if line.starts_with('#') {
            finish(&mut current, &mut paragraphs);
        } else if line.trim_start().starts_with('|') {
            finish(&mut current, &mut paragraphs);
            if measured.contains(&i) {
                sources.push_str(line);
                sources.push('\n');
            } else {
                paragraphs.push(Paragraph::new(i + 1, line.to_owned()));
            }
        } else if line.trim().is_empty() {
            finish(&mut current, &mut paragraphs);
        } else {
            let (_, p) = current.get_or_insert((i + 1, String::new()));
            p.push_str(line);
            p.push('\n');
        }
    }
    finish(&mut current, &mut paragraphs);
    (paragraphs, sources)
}

/// The measured figures `text` states, as written: a number followed by a unit of
/// speed or time per operation (ns, µs, decisions/s, k/s, N/s: "15.7", "52,419"), a
/// latency in ms or a ratio (`×`) with a decimal point (a round one is a setting or a
/// bound: "a 10 ms timeout", "up to 2× the limit"; one after `≤`, `<`, `≥` or `>` is a
/// goal), and a count of a whole ("39 of 36,968", a whole of at least 10).
fn figures(text: &str) -> Vec<String> {
    let mut found = measures(text);
    found.extend(counts(text));
    found
}

/// Counts of a whole: `N of M`, `M` at least 10 ("1 of 3 masters" is a shape).
fn counts(text: &str) -> Vec<String> {
    let digits = |c: &char| c.is_ascii_digit() || *c == ',';
    let mut found = Vec::new();
    for (at, of) in text.match_indices(" of ") {
        let before: String = {
            let mut v: Vec<char> = text[..at].chars().rev().take_while(digits).collect();
            v.reverse();
            v.into_iter().collect()
        };
        let after: String = text[at + of.len()..].chars().take_while(digits).collect();
        let (n, m) = (before.trim_matches(','), after.trim_matches(','));
        let prefix = text[..at - before.len()].chars().next_back();
        let whole = m.replace(',', "").parse::<u64>().unwrap_or(0);
        if n.is_empty()
            || m.is_empty()
            || !n.starts_with(|c: char| c.is_ascii_digit())
            || prefix.is_some_and(|c| c.is_alphanumeric() || c == '.' || c == '^')
            || whole < 10
        {
            continue;
        }
        found.push(format!("{n} of {m}"));
    }
    found
}

/// Numbers followed by a unit of speed, time or ratio.
fn measures(text: &str) -> Vec<String> {
    const UNITS: [&str; 7] = [" decisions/s", "k/s", "/s", "ns", "µs", " ms", "×"];
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
            let goal = before[..start].trim_end().ends_with(['≤', '<', '≥', '>']);
            if number.is_empty()
                || !number.starts_with(|c: char| c.is_ascii_digit())
                || prefix.is_some_and(|c| c == '^' || c.is_alphanumeric())
                || ((unit == " ms" || unit == "×") && !number.contains('.'))
                || (unit == "×" && goal)
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
        if p.sourced {
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
        "figures without a source (give their paragraph the date, commit and command, or \
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
    // The source is the figure's own paragraph: a section's is not enough.
    let own = "## Measured\n\nOn 2026-11-27 at `f94d917`, `cargo bench` gave 24.7 ns a check.\n\n## Next\n\n1 ns.\n";
    assert_eq!(unsourced(&page, own), [format!("{}:7: 1", page.display())]);
    let section =
        "## Measured\n\nOn 2026-11-27 at `f94d917`, `cargo bench`:\n\n| a |\n\n24.7 ns a check.\n";
    assert_eq!(
        unsourced(&page, section),
        [format!("{}:7: 24.7", page.display())]
    );
    let no_command = "## Measured\n\nOn 2026-11-27 at `f94d917`: 24.7 ns a check.\n";
    assert_eq!(
        unsourced(&page, no_command),
        [format!("{}:3: 24.7", page.display())]
    );
    // A command's output shown under its source is one, as a measured table is.
    let output = "On 2026-11-27 at `f94d917`, `spillway bench …`:\n\n```text\n  3.52 µs a decision\n```\n\nSo 3.52 µs a decision.\n";
    assert!(unsourced(&page, output).is_empty());
    let bare = output.replacen("On 2026-11-27 at `f94d917`, `spillway bench …`", "Then", 1);
    assert_eq!(
        unsourced(&page, &bare),
        [format!("{}:7: 3.52", page.display())]
    );
    // Ratios and counts are figures too.
    let ratio = "Two threads on one hot key run 1.95× governor's speed; 39 of 36,968 timed out.\n";
    assert_eq!(
        unsourced(&page, ratio),
        [
            format!("{}:1: 1.95", page.display()),
            format!("{}:1: 39 of 36,968", page.display())
        ]
    );
    assert_eq!(
        figures("1.95× governor, up to 2× the limit, goal ≤ 1.2×, within 1.06× of it"),
        ["1.95", "1.06"]
    );
    assert_eq!(
        figures("39 of 36,968 timed out, 1 of 3 masters, 0 of 40 runs, p9 of 10"),
        ["39 of 36,968", "0 of 40"]
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
