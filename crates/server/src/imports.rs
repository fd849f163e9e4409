//! The crate's modules import one another one way: the graph of `crate::<module>`
//! imports between its top-level modules has no circle, and `config` imports none of
//! them (issue #36: settings → xds → reload → state → settings was a circle).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Top-level module -> the top-level modules its files name with `crate::`.
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut files = vec![src.clone()];
    while let Some(path) = files.pop() {
        if path.is_dir() {
            files.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
            continue;
        }
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let relative = path.strip_prefix(&src).unwrap();
        let module = relative
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_owned();
        if ["lib", "imports"].contains(&module.as_str()) {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let code = text.split("#[cfg(test)]").next().unwrap_or("");
        let uses = graph.entry(module.clone()).or_default();
        for (i, _) in code.match_indices("crate::") {
            let rest = &code[i + "crate::".len()..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() && name != module && name.chars().next().unwrap().is_lowercase() {
                uses.insert(name);
            }
            // `use crate::{a, b}`
            if rest.starts_with('{') {
                let list = &rest[1..rest.find('}').unwrap_or(1)];
                for item in list.split(',') {
                    let name = item.trim().split("::").next().unwrap_or("").to_owned();
                    if !name.is_empty() && name != module {
                        uses.insert(name);
                    }
                }
            }
        }
    }
    graph
}

#[test]
fn imports_go_one_way() {
    let graph = graph();
    assert!(
        graph.get("config").is_some_and(BTreeSet::is_empty),
        "config imports {:?}",
        graph.get("config")
    );
    // Depth-first search for a back edge.
    fn visit<'g>(
        node: &'g str,
        graph: &'g BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<&'g str>,
        done: &mut BTreeSet<&'g str>,
    ) {
        if let Some(at) = path.iter().position(|n| *n == node) {
            panic!(
                "an import circle: {}",
                [&path[at..], &[node]].concat().join(" -> ")
            );
        }
        if !done.insert(node) {
            return;
        }
        path.push(node);
        for next in graph.get(node).into_iter().flatten() {
            visit(next, graph, path, done);
        }
        path.pop();
    }
    let mut done = BTreeSet::new();
    for node in graph.keys() {
        visit(node, &graph, &mut Vec::new(), &mut done);
    }
    assert!(graph.len() > 10, "{graph:?}");
}
