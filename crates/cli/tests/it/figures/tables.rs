//! Every measured table says its date, commit and command.

use super::*;

/// Whether `text` names a commit: 7 to 12 hex digits with a letter and a digit among them,
/// as `git rev-parse --short` prints one.
pub(super) fn names_commit(text: &str) -> bool {
    text.split(|c: char| !c.is_ascii_alphanumeric())
        .any(|word| {
            (7..=12).contains(&word.len())
                && word
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
                && word.bytes().any(|b| b.is_ascii_digit())
                && word.bytes().any(|b| b.is_ascii_alphabetic())
        })
}

/// Whether `text` names the command that measured: `cargo …`, `scripts/…`, `spillway …`
/// or `redis-benchmark …` in backticks.
pub(super) fn names_command(text: &str) -> bool {
    [
        "`cargo ",
        "`scripts/",
        "`spillway ",
        "`redis-benchmark ",
        "`BENCH_",
    ]
    .iter()
    .any(|start| text.contains(start))
}

/// The tables of `text` (outside code blocks): the index of each one's first line, and
/// its rows.
pub(super) fn tables(text: &str) -> Vec<(usize, Vec<&str>)> {
    let mut found: Vec<(usize, Vec<&str>)> = Vec::new();
    let (mut fenced, mut in_table) = (false, false);
    for (i, line) in text.lines().enumerate() {
        if line.starts_with("```") {
            fenced = !fenced;
        }
        let row = !fenced && line.trim_start().starts_with('|');
        match found.last_mut() {
            Some((_, rows)) if row && in_table => rows.push(line),
            _ if row => found.push((i, vec![line])),
            _ => {}
        }
        in_table = row;
    }
    found
}

/// Whether a table holds measurements: its header names a measure, or one of its cells
/// is a figure and nothing else ("72.4 ns", "**30.9 ns**", "809,716/s (15.4×)").
pub(super) fn measured_table(rows: &[&str]) -> bool {
    let figure_cell = |cell: &str| {
        let cell = cell.trim().trim_matches('*');
        let head = cell.split(" (").next().unwrap_or_default();
        let unit = head.trim_start_matches(|c: char| c.is_ascii_digit() || c == '.' || c == ',');
        unit.len() < head.len()
            && ["ns", "µs", "ms", "/s", "k/s", "decisions/s"].contains(&unit.trim_start())
    };
    rows.first().is_some_and(|header| measured_header(header))
        || rows
            .iter()
            .skip(2)
            .flat_map(|row| row.split('|'))
            .any(figure_cell)
}

/// Whether a table's header row names a measure: a unit of time (`µs`, `ms`, `ns`), a
/// rate (`/s`), a latency percentile, resident memory, CPU, decisions, or what a run
/// sent and admitted; as words, so "means" is not nanoseconds.
fn measured_header(row: &str) -> bool {
    const WORDS: [&str; 9] = [
        "µs",
        "ms",
        "ns",
        "RSS",
        "CPU",
        "decisions",
        "sent",
        "admitted",
        "requests",
    ];
    row.contains("/s")
        || row
            .split(|c: char| !c.is_alphanumeric() && c != 'µ')
            .any(|word| WORDS.contains(&word) || word.starts_with("p99"))
}

/// The measured tables of `text` (a header naming a speed, a latency, a CPU time or a
/// memory size) whose own source line does not say when (a date), on what code (a
/// commit) and how (the command) they were measured: `page:line: what is missing`. A
/// table's source line is the paragraph just before it; a table right after another
/// (only blank lines between) is of the same run, and shares its source. Not any text
/// since the heading: another measurement's commit above it would stand in for its own.
fn unsourced_tables(page: &Path, text: &str) -> Vec<String> {
    let lines: Vec<&str> = text.lines().collect();
    let mut unsourced = Vec::new();
    let (mut source, mut previous_end) = (String::new(), None);
    for (start, rows) in tables(text) {
        let follows = previous_end
            .is_some_and(|end: usize| lines[end..start].iter().all(|l| l.trim().is_empty()));
        if !follows {
            source = paragraph_before(&lines, start);
        }
        previous_end = Some(start + rows.len());
        if !measured_table(&rows) {
            continue;
        }
        let missing: Vec<&str> = [
            ("date", dated(&source)),
            ("commit", names_commit(&source)),
            ("command", names_command(&source)),
        ]
        .into_iter()
        .filter_map(|(what, named)| (!named).then_some(what))
        .collect();
        if !missing.is_empty() {
            unsourced.push(format!(
                "{}:{}: no {}",
                page.display(),
                start + 1,
                missing.join(", no ")
            ));
        }
    }
    unsourced
}

/// The paragraph that ends just before line `start` (blank lines between allowed): its
/// lines back to a blank line, a heading, a table row or a code fence.
pub(super) fn paragraph_before(lines: &[&str], start: usize) -> String {
    let mut end = start;
    while end > 0 && lines[end - 1].trim().is_empty() {
        end -= 1;
    }
    let mut first = end;
    while first > 0 {
        let line = lines[first - 1];
        let trimmed = line.trim_start();
        if trimmed.is_empty()
            || line.starts_with('#')
            || trimmed.starts_with('|')
            || trimmed.starts_with("```")
        {
            break;
        }
        first -= 1;
    }
    lines[first..end].join("\n")
}

/// Every measured table says, just before it, when, on what code and by what command it
/// was measured: a table without them cannot be re-run or compared.
#[test]
fn every_measured_table_has_its_date_commit_and_command() {
    let unsourced: Vec<String> = pages()
        .iter()
        .flat_map(|page| unsourced_tables(page, &std::fs::read_to_string(page).unwrap()))
        .collect();
    assert!(
        unsourced.is_empty(),
        "measured tables without their date, commit and command (say them in the text \
         before the table):\n{}",
        unsourced.join("\n")
    );
}

#[test]
fn a_table_without_its_commit_is_found() {
    let page = root().join("docs/performance.md");
    let table = "| path | p99 µs |\n|---|---:|\n| a | 1 |\n";
    let sourced =
        format!("## A\n\nOn 2026-11-27 at `f94d917`, `scripts/decision-cost 5`:\n\n{table}");
    assert!(unsourced_tables(&page, &sourced).is_empty());
    let same_run = format!("{sourced}\n{table}");
    assert!(unsourced_tables(&page, &same_run).is_empty());
    let another_day = format!("{sourced}\nAnd another day:\n\n{table}");
    assert_eq!(
        unsourced_tables(&page, &another_day),
        [format!(
            "{}:11: no date, no commit, no command",
            page.display()
        )]
    );
    // Another measurement's source above, in the same section, is not this table's.
    let borrowed = format!(
        "## A\n\nOn 2026-11-27 at `f94d917`, `scripts/decision-cost 5` gave 3 µs.\n\n\
         Beside a do-nothing server:\n\n{table}"
    );
    assert_eq!(
        unsourced_tables(&page, &borrowed),
        [format!(
            "{}:7: no date, no commit, no command",
            page.display()
        )]
    );
    let no_commit = format!("## A\n\nOn 2026-11-27, `scripts/decision-cost 5`:\n\n{table}");
    assert_eq!(
        unsourced_tables(&page, &no_commit),
        [format!("{}:5: no commit", page.display())]
    );
    assert!(!names_commit("2026-11-27, 1000000 decisions, deadbeef"));
    assert!(measured_header("| path | p99.9 | CPU µs |"));
    assert!(measured_header("| run | decisions/s |"));
    assert!(!measured_header("| word | what it means here |"));
    assert!(measured_header(
        "| offset | sent | admitted | past the limit |"
    ));
    let unlabelled = ["| | run 1 |", "|---|---|", "| exact | **52,419/s** |"];
    assert!(measured_table(&unlabelled));
    assert!(measured_table(&[
        "| | a |",
        "|---|---|",
        "| lease | 809,716/s (15.4×) |"
    ]));
    assert!(!measured_table(&[
        "| failure | fix |",
        "|---|---|",
        "| stalls | a 10 ms timeout |"
    ]));
    assert!(names_commit("at 9401cad,"));
}
