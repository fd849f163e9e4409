//! docs/reliability.md's summary ("In short: …") states counts the tables below it
//! measured: how many faults and policies, how many answers broke their policy, the
//! slowest recovery on one server, on a Cluster and over TLS, and how many hostile
//! cases. Each is read here from its tables, and the summary must say it: a re-run that
//! changes a table and not the summary fails, as the summary once said "recovery within
//! the breaker's 500 ms" beside a table whose slowest was 554 ms, and "47 malformed
//! requests" beside 220 cases.

use crate::support;

use std::collections::BTreeSet;

use support::docs::root;

/// A table of the page: the heading it is under, its header's cells and its rows'.
struct Table {
    heading: String,
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// The values of the column whose header is `name`.
    fn column(&self, name: &str) -> Vec<&str> {
        let i = self
            .header
            .iter()
            .position(|h| h == name)
            .unwrap_or_else(|| panic!("{}: no column {name}", self.heading));
        self.rows.iter().map(|r| r[i].as_str()).collect()
    }
}

fn cells(row: &str) -> Vec<String> {
    let row = row.trim().trim_start_matches('|').trim_end_matches('|');
    row.split('|').map(|c| c.trim().to_owned()).collect()
}

fn tables(text: &str) -> Vec<Table> {
    let (mut found, mut heading, mut fenced) = (Vec::<Table>::new(), String::new(), false);
    let mut in_table = false;
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
        }
        if !fenced && line.starts_with('#') {
            heading = line.trim_start_matches('#').trim().to_owned();
        }
        let row = !fenced && line.trim_start().starts_with('|');
        match (row, in_table) {
            (true, false) => found.push(Table {
                heading: heading.clone(),
                header: cells(line),
                rows: Vec::new(),
            }),
            (true, true) if !line.contains("---") => {
                found.last_mut().unwrap().rows.push(cells(line));
            }
            _ => {}
        }
        in_table = row;
    }
    found
}

/// The summary: from "In short:" to the paragraph's end.
fn summary(text: &str) -> String {
    let start = text.find("In short:").expect("a summary");
    let end = text[start..].find("\n\n").map_or(text.len(), |e| start + e);
    text[start..end]
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn the_summary_states_what_its_tables_measured() {
    let text = std::fs::read_to_string(root().join("docs/reliability.md")).unwrap();
    let summary = summary(&text);
    let all = tables(&text);
    let matrices: Vec<&Table> = all
        .iter()
        .filter(|t| t.header.iter().any(|h| h == "recovery ms"))
        .collect();
    let titled = |title: &str| {
        matrices
            .iter()
            .find(|t| t.heading.ends_with(title))
            .unwrap_or_else(|| panic!("a fault matrix under a heading ending {title}"))
    };
    let (one, cluster, tls) = (
        titled("(standalone Redis)"),
        titled("(Redis Cluster)"),
        titled("over TLS"),
    );

    // The faults and policies of the plain matrices (TLS repeats them).
    let faults: BTreeSet<&str> = [one, cluster]
        .iter()
        .flat_map(|t| t.column("fault"))
        .collect();
    let policies: BTreeSet<&str> = one.column("policy").into_iter().collect();
    let broke: u64 = matrices
        .iter()
        .flat_map(|t| t.column("broke the rule"))
        .map(|n| n.parse::<u64>().unwrap())
        .sum();
    let said = [
        format!("{} faults", faults.len()),
        format!("× {} failure policies", policies.len()),
        format!("with {broke} answers breaking their policy"),
    ];
    for s in &said {
        assert!(
            summary.contains(s.as_str()),
            "the summary should say {s:?}: {summary}"
        );
    }

    // The slowest recovery of each matrix, in the summary's order.
    let slowest = |t: &Table| {
        t.column("recovery ms")
            .into_iter()
            .map(|ms| ms.parse::<f64>().unwrap())
            .fold(0.0_f64, f64::max)
            .round()
    };
    let recoveries = [
        format!(
            "at most {} ms after a fault ended on one server",
            slowest(one)
        ),
        format!("{} ms on a Cluster", slowest(cluster)),
        format!("{} ms over TLS", slowest(tls)),
    ];
    for s in &recoveries {
        assert!(
            summary.contains(s.as_str()),
            "the summary should say {s:?}: {summary}"
        );
    }

    // The hostile cases: every row of the tables under "Hostile input"'s subsections
    // (the five cases in other crates' tests, under the section's own heading, are not
    // counted), a lie of the store three cases (told to three APIs).
    let section = &text[text.find("## Hostile input").unwrap()..text.find("## Fuzzing").unwrap()];
    let cases: usize = tables(section)
        .iter()
        .filter(|t| t.heading != "Hostile input")
        .map(|t| match t.heading.as_str() {
            "A store that lies" => 3 * t.rows.len(),
            _ => t.rows.len(),
        })
        .sum();
    let hostile = format!("{cases} hostile cases");
    assert!(
        summary.contains(&hostile),
        "the summary should say {hostile:?}: {summary}"
    );
    assert!(
        section.contains(&format!("**{cases} hostile cases**")),
        "the section should say {cases}"
    );
}
