//! The current figures: docs/performance.md's first table agrees with the sections it
//! links (every figure and commit of a row is in its section), and the README states no
//! figure that table does not hold. So the page a reader lands on and the lab notebook
//! below it cannot disagree.

use super::*;

use crate::links::anchor;

/// The heading of the table of current figures.
const CURRENT: &str = "## Current figures";

/// The rows of the current figures' table on `text` (the first table after [`CURRENT`]):
/// each row's line, its text, and the anchor of its last link (`#…`).
fn current_rows(text: &str) -> Vec<(usize, String, String)> {
    let Some(at) = text.lines().position(|l| l.trim() == CURRENT) else {
        return Vec::new();
    };
    let rows = tables(text)
        .into_iter()
        .find(|(start, _)| *start > at)
        .map(|(start, rows)| {
            (
                start,
                rows.into_iter().map(str::to_owned).collect::<Vec<_>>(),
            )
        });
    let Some((start, rows)) = rows else {
        return Vec::new();
    };
    rows.into_iter()
        .enumerate()
        .skip(2)
        .map(|(i, row)| {
            let target = row
                .rsplit("](#")
                .next()
                .filter(|_| row.contains("](#"))
                .and_then(|t| t.split(')').next())
                .unwrap_or_default()
                .to_owned();
            (start + i + 1, row, target)
        })
        .collect()
}

/// The section of `text` whose heading's anchor is `target`: its heading to the next
/// heading of its level or above.
fn section(text: &str, target: &str) -> Option<String> {
    let lines: Vec<&str> = text.lines().collect();
    let level = |l: &str| l.chars().take_while(|c| *c == '#').count();
    let start = lines
        .iter()
        .position(|l| l.starts_with('#') && anchor(l.trim_start_matches('#')) == target)?;
    let depth = level(lines[start]);
    let end = (start + 1..lines.len())
        .find(|&i| {
            let n = level(lines[i]);
            n > 0 && n <= depth && lines[i].chars().nth(n) == Some(' ')
        })
        .unwrap_or(lines.len());
    Some(lines[start..end].join("\n"))
}

/// Where the current figures of `text` (docs/performance.md) disagree with the sections
/// they link: `line: what`.
fn disagreements(text: &str) -> Vec<String> {
    let rows = current_rows(text);
    if rows.is_empty() {
        return vec![format!("no table under `{CURRENT}`")];
    }
    let mut found = Vec::new();
    for (line, row, target) in rows {
        let Some(section) = section(text, &target) else {
            found.push(format!(
                "{line}: links no section of the page (`#{target}`)"
            ));
            continue;
        };
        for figure in figures(&row) {
            if !section.contains(&figure) {
                found.push(format!("{line}: {figure} is not in #{target}"));
            }
        }
        let commits = row
            .split('`')
            .skip(1)
            .step_by(2)
            .filter(|w| names_commit(w) && !w.contains(' '));
        for commit in commits {
            if !section.contains(commit) {
                found.push(format!("{line}: commit {commit} is not in #{target}"));
            }
        }
    }
    found
}

/// The figures the README states that the current figures' table does not hold.
fn not_current(readme: &str, performance: &str) -> Vec<String> {
    let at = performance.find(CURRENT).unwrap_or(performance.len());
    let table = performance[at..].split("\n## ").next().unwrap_or_default();
    let (paragraphs, tables) = prose_and_tables(readme);
    let stated = paragraphs
        .iter()
        .flat_map(|p| figures(&p.text).into_iter().map(move |f| (p.line, f)))
        .chain(figures(&tables).into_iter().map(|f| (0, f)));
    stated
        .filter(|(_, f)| !table.contains(f.as_str()))
        .map(|(line, f)| format!("README.md:{line}: {f}"))
        .collect()
}

fn read(page: &str) -> String {
    std::fs::read_to_string(root().join(page)).unwrap()
}

#[test]
fn the_current_figures_agree_with_their_sections_and_the_readme_quotes_only_them() {
    let performance = read("docs/performance.md");
    let wrong = disagreements(&performance);
    assert!(
        wrong.is_empty(),
        "docs/performance.md's current figures disagree with the sections they link:\n{}",
        wrong.join("\n")
    );
    let stale = not_current(&read("README.md"), &performance);
    assert!(
        stale.is_empty(),
        "figures the README states that docs/performance.md's current figures do not \
         hold (quote the table, or update it from a new run):\n{}",
        stale.join("\n")
    );
}

#[test]
fn a_current_figure_its_section_lacks_is_found() {
    let page = "# P\n\n## Current figures\n\n| what | figure | measured | the run |\n|---|---|---|---|\n\
        | a check | 32.4 ns (1.95×) | 2026-11-28 at `d4bd775`, `cargo bench` | [in process](#in-process) |\n\n\
        ## In process\n\nRun 2026-11-28 at `d4bd775`, `cargo bench`:\n\n| case | ns |\n|---|---:|\n| hot | 32.4 ns (1.95×) |\n";
    assert_eq!(disagreements(page), Vec::<String>::new());
    let newer = page.replacen("32.4 ns (1.95×) | 2026", "30.1 ns (1.95×) | 2026", 1);
    assert_eq!(disagreements(&newer), ["7: 30.1 is not in #in-process"]);
    let moved = page.replacen(
        "at `d4bd775`, `cargo bench` |",
        "at `e5f6a7b`, `cargo bench` |",
        1,
    );
    assert_eq!(
        disagreements(&moved),
        ["7: commit e5f6a7b is not in #in-process"]
    );
    let readme = "In process, 32.4 ns a check ([performance](docs/performance.md)); 2.5× faster.\n";
    assert_eq!(not_current(readme, page), ["README.md:1: 2.5"]);
}
