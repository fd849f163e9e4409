//! Reading policy files: one file, or every `*.yaml` / `*.yml` of a directory (dotfiles
//! skipped, as the reference skips them), one domain per file.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::set::{Domain, PolicySet};
use crate::{Error, Errors, raw, validate};

/// How files become a set.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoadOptions {
    /// Files that declare the same domain make one domain (the reference's
    /// `MERGE_DOMAIN_CONFIG`); a descriptor declared by two of them is refused. Off, a
    /// domain declared twice is refused.
    pub merge_domains: bool,
}

/// Loads a file or a directory of files. Any mistake anywhere loads nothing, and every
/// mistake found is returned: a file's own, and a domain defined by two files (even when
/// one of them has other mistakes).
pub fn load(path: impl AsRef<Path>) -> Result<PolicySet, Errors> {
    load_with(path, LoadOptions::default())
}

/// [`load`], as `options` say.
pub fn load_with(path: impl AsRef<Path>, options: LoadOptions) -> Result<PolicySet, Errors> {
    let path = path.as_ref();
    let files = files(path).map_err(|e| Errors(vec![e]))?;
    let mut errors = Vec::new();
    let mut domains: Vec<Domain> = Vec::new();
    let mut first_file: HashMap<String, PathBuf> = HashMap::new();
    for file in &files {
        let text = match std::fs::read_to_string(file) {
            Ok(text) => text,
            Err(e) => {
                errors.push(Error::new(file, None, "", format!("cannot read: {e}")));
                continue;
            }
        };
        let (name, result) = parse_named(file, &text);
        if let Some(name) = name.filter(|n| !n.is_empty() && !options.merge_domains) {
            match first_file.get(&name) {
                Some(first) => errors.push(duplicate(file, &name, first)),
                None => {
                    first_file.insert(name, file.clone());
                }
            }
        }
        match result {
            Ok(d) if errors.is_empty() => domains.push(d),
            Ok(_) => {}
            Err(mut e) => errors.append(&mut e.0),
        }
    }
    if errors.is_empty() {
        assemble_with(domains, options)
    } else {
        Err(Errors(errors))
    }
}

/// Parses and checks one file's text (`file` names it in errors).
pub fn parse(file: impl AsRef<Path>, text: &str) -> Result<Domain, Errors> {
    parse_named(file.as_ref(), text).1
}

/// The file's domain name, if it could be read, and the checked domain or its mistakes.
fn parse_named(file: &Path, text: &str) -> (Option<String>, Result<Domain, Errors>) {
    let raw: raw::File = match serde_saphyr::from_str(text) {
        Ok(raw) => raw,
        Err(e) => return (None, Err(Errors(vec![yaml_error(file, &e)]))),
    };
    let name = raw.domain.as_ref().map(|d| d.value.clone());
    (name, validate::domain(file, raw).map_err(Errors))
}

fn duplicate(file: &Path, name: &str, first: &Path) -> Error {
    Error::new(
        file,
        None,
        "domain",
        format!("duplicate domain '{name}' (also in {})", first.display()),
    )
}

/// A set from domains parsed one by one; two files with one domain is a mistake.
pub fn assemble(domains: impl IntoIterator<Item = Domain>) -> Result<PolicySet, Errors> {
    assemble_with(domains, LoadOptions::default())
}

/// [`assemble`], as `options` say: with `merge_domains`, files of one domain make one.
pub fn assemble_with(
    domains: impl IntoIterator<Item = Domain>,
    options: LoadOptions,
) -> Result<PolicySet, Errors> {
    let mut set = PolicySet::default();
    let mut errors = Vec::new();
    for d in domains {
        if let Some(first) = set.domains.get_mut(&d.name) {
            if options.merge_domains {
                errors.extend(first.merge(d));
            } else {
                errors.push(duplicate(&d.file, &d.name, &first.file));
            }
            continue;
        }
        set.domains.insert(d.name.clone(), d);
    }
    if errors.is_empty() {
        Ok(set)
    } else {
        Err(Errors(errors))
    }
}

/// The policy files under `path`, sorted so that loads and errors are repeatable.
fn files(path: &Path) -> Result<Vec<PathBuf>, Error> {
    let meta = std::fs::metadata(path)
        .map_err(|e| Error::new(path, None, "", format!("cannot read: {e}")))?;
    if !meta.is_dir() {
        return Ok(vec![path.to_owned()]);
    }
    let entries = std::fs::read_dir(path)
        .map_err(|e| Error::new(path, None, "", format!("cannot list: {e}")))?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| is_policy_file(p))
        .collect();
    files.sort();
    Ok(files)
}

/// Whether a path in a policy directory is a policy file (and so whether a change to it
/// calls for a reload).
pub fn is_policy_file(p: &Path) -> bool {
    let visible = p
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| !n.starts_with('.'));
    let yaml = matches!(p.extension().and_then(|e| e.to_str()), Some("yaml" | "yml"));
    visible && yaml && p.is_file()
}

fn yaml_error(file: &Path, e: &serde_saphyr::Error) -> Error {
    let line = e.location().map(|l| l.line()).filter(|&l| l > 0);
    Error::new(file, line, "", one_line(&e.to_string()))
}

/// serde-saphyr's message without the snippet it draws under it, and without the
/// `error: line N column M:` it starts with (the line is already in the error).
fn one_line(message: &str) -> String {
    let first = message.lines().next().unwrap_or(message).trim();
    let first = first.strip_prefix("error: ").unwrap_or(first);
    match first
        .strip_prefix("line ")
        .and_then(|rest| rest.split_once(": "))
    {
        Some((position, what)) if position.contains(" column ") => what.to_owned(),
        _ => first.to_owned(),
    }
}
