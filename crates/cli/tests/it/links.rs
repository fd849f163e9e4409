//! The docs' links, checked: every relative link and `#anchor` in README.md and
//! docs/*.md must resolve (GitHub's anchors).

use crate::support;

use support::docs::pages;

/// GitHub's anchor for a heading: lower case, punctuation but `-` and `_` dropped,
/// spaces to `-`.
pub(crate) fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a Markdown page's headings (outside code blocks).
fn anchors(text: &str) -> Vec<String> {
    let mut fenced = false;
    let mut out: Vec<String> = Vec::new();
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced || !line.starts_with('#') {
            continue;
        }
        let base = anchor(line.trim_start_matches('#'));
        let n = out
            .iter()
            .filter(|a| **a == base || a.starts_with(&format!("{base}-")))
            .count();
        out.push(if n == 0 { base } else { format!("{base}-{n}") });
    }
    out
}

/// The `](target)` links of a page's text outside code.
fn links(text: &str) -> Vec<(usize, String)> {
    let mut fenced = false;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        // Inline code holds no links.
        let prose: String = line
            .split('`')
            .enumerate()
            .filter(|(k, _)| k % 2 == 0)
            .map(|(_, s)| s)
            .collect::<Vec<_>>()
            .join(" ");
        let mut rest = prose.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            out.push((i + 1, after[..end].to_owned()));
            rest = &after[end..];
        }
    }
    out
}

#[test]
fn every_relative_link_and_anchor_resolves() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        for (line, target) in links(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (file, fragment) = match target.split_once('#') {
                Some((f, a)) => (f, Some(a)),
                None => (target.as_str(), None),
            };
            let dest = if file.is_empty() {
                page.clone()
            } else {
                page.parent().unwrap().join(file)
            };
            if !dest.exists() {
                broken.push(format!(
                    "{}:{line}: `{target}`: no such file",
                    page.display()
                ));
                continue;
            }
            if let Some(fragment) = fragment {
                let anchors = if dest.extension().is_some_and(|e| e == "md") {
                    anchors(&std::fs::read_to_string(&dest).unwrap())
                } else {
                    Vec::new()
                };
                if !anchors.iter().any(|a| a == fragment) {
                    broken.push(format!(
                        "{}:{line}: `{target}`: no heading `#{fragment}` in {}",
                        page.display(),
                        dest.display()
                    ));
                }
            }
        }
    }
    assert!(checked > 0, "no relative link found");
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn anchors_are_githubs() {
    assert_eq!(anchor("The console: `GET /ui`"), "the-console-get-ui");
    let page = "# A\n## B: `c`\n```\n# not a heading\n```\n## B: c\n";
    assert_eq!(anchors(page), ["a", "b-c", "b-c-1"]);
}
