//! The manual reads plainly, checked on README.md and every page of docs/: sentences short
//! enough on average to follow, and no reference a reader cannot follow (the tracker's
//! internal issue numbers). Tables and code blocks are not prose and are left out.

use crate::support;

use support::docs::pages;

/// The most words a page's sentences may average. The reference pages of a rate limiter
/// run long; past this they were hard going (the pages once averaged 40–58).
const MOST_WORDS_A_SENTENCE: f64 = 33.0;

/// The prose of a Markdown page: its paragraphs and list items, each on one line, without
/// code blocks and tables.
fn prose(text: &str) -> Vec<String> {
    let (mut blocks, mut current, mut fenced) = (Vec::new(), String::new(), false);
    for line in text.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") {
            fenced = !fenced;
        }
        let item = trimmed.starts_with("- ") || trimmed.starts_with("* ");
        let apart = fenced
            || trimmed.starts_with("```")
            || trimmed.starts_with('|')
            || line.starts_with('#')
            || trimmed.is_empty();
        // A block ends at a line that is not prose, and where a list item starts.
        if (apart || item) && !current.trim().is_empty() {
            blocks.push(std::mem::take(&mut current));
        }
        if apart {
            current.clear();
            continue;
        }
        current.push_str(if item { &trimmed[2..] } else { trimmed });
        current.push(' ');
    }
    if !current.trim().is_empty() {
        blocks.push(current);
    }
    blocks
}

/// The sentences of `block`: split after `.`, `!`, `?` or `:` followed by a space and a
/// capital, a backtick or an emphasis mark, as a reader's eye splits them.
fn sentences(block: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let bytes = block.as_bytes();
    for i in 1..bytes.len().saturating_sub(1) {
        if matches!(bytes[i - 1], b'.' | b'!' | b'?')
            && bytes[i] == b' '
            && (bytes[i + 1].is_ascii_uppercase() || matches!(bytes[i + 1], b'`' | b'*' | b'('))
        {
            out.push(&block[start..i]);
            start = i + 1;
        }
    }
    out.push(&block[start..]);
    out.into_iter()
        .filter(|s| s.split_whitespace().count() > 2)
        .collect()
}

/// The average number of words a sentence of `text` has.
fn average_sentence(text: &str) -> f64 {
    let blocks = prose(text);
    let lengths: Vec<usize> = blocks
        .iter()
        .flat_map(|b| sentences(b))
        .map(|s| s.split_whitespace().count())
        .collect();
    if lengths.is_empty() {
        return 0.0;
    }
    lengths.iter().sum::<usize>() as f64 / lengths.len() as f64
}

/// The tracker's issue numbers in `text` ("issue 3", "#31" at a word's start): the reader
/// has no tracker to look them up in. Links to public issues (`owner/repo#123`) are fine.
fn issue_numbers(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for block in prose(text) {
        let lower = block.to_lowercase();
        let number = |from: usize| -> String {
            block[from..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect()
        };
        for (at, _) in lower.match_indices("issue ") {
            let n = number(at + 6);
            if !n.is_empty() {
                found.push(format!("issue {n}"));
            }
        }
        for (at, _) in block.match_indices('#') {
            let before = block[..at].chars().next_back();
            let n = number(at + 1);
            if !n.is_empty() && before.is_none_or(|c| c == ' ' || c == '(') {
                found.push(format!("#{n}"));
            }
        }
    }
    found
}

#[test]
fn sentences_are_short_enough_to_follow() {
    let long: Vec<String> = pages()
        .iter()
        .filter_map(|page| {
            let average = average_sentence(&std::fs::read_to_string(page).unwrap());
            (average > MOST_WORDS_A_SENTENCE)
                .then(|| format!("{}: {average:.1} words a sentence", page.display()))
        })
        .collect();
    assert!(
        long.is_empty(),
        "pages whose sentences average over {MOST_WORDS_A_SENTENCE} words (split the long \
         ones, or make them lists):\n{}",
        long.join("\n")
    );
}

#[test]
fn the_manual_names_no_internal_issue_numbers() {
    let found: Vec<String> = pages()
        .iter()
        .flat_map(|page| {
            issue_numbers(&std::fs::read_to_string(page).unwrap())
                .into_iter()
                .map(move |n| format!("{}: {n}", page.display()))
        })
        .collect();
    assert!(
        found.is_empty(),
        "internal issue numbers (say what changed instead):\n{}",
        found.join("\n")
    );
}

#[test]
fn long_sentences_and_issue_numbers_are_found() {
    let short = "One limit for all. Two limits, each a key.\n\n| a table | of many many words |\n";
    assert!(
        (average_sentence(short) - 4.5).abs() < 1e-9,
        "{}",
        average_sentence(short)
    );
    let long = format!("{}.\n", ["word"; 60].join(" "));
    assert!(average_sentence(&long) > MOST_WORDS_A_SENTENCE);
    let list = "- first item has five words\n- second item has five words\n";
    assert_eq!(sentences(&prose(list)[0]), ["first item has five words "]);
    assert_eq!(
        issue_numbers("As issue 3 found (#31), unlike envoyproxy/gateway#4891."),
        ["issue 3", "#31"]
    );
}
