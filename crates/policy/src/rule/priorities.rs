//! A `shares` rule's priorities: where its requests name one, and the names.

/// Where a `shares` rule's requests name their priority, and the names, highest first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Priorities {
    /// The descriptor entry that carries it, after the child's.
    pub key: String,
    /// Level 0 (the highest) first.
    pub names: Vec<String>,
}

impl Priorities {
    /// `names`, highest first: 1 to 9 of them, distinct and non-empty.
    pub fn new(key: &str, names: &[String]) -> Result<Priorities, String> {
        let most = usize::from(spillway_core::algorithm::shares::MAX_LEVELS);
        if names.is_empty() || names.len() > most {
            return Err(format!("{} priorities (expected 1 to {most})", names.len()));
        }
        if key.is_empty() || names.iter().any(String::is_empty) {
            return Err("a priority and its names must not be empty".into());
        }
        if let Some(twice) = names
            .iter()
            .enumerate()
            .find(|(i, n)| names[..*i].contains(n))
        {
            return Err(format!("priority `{}` is listed twice", twice.1));
        }
        Ok(Priorities {
            key: key.to_owned(),
            names: names.to_vec(),
        })
    }

    /// How many levels.
    pub fn levels(&self) -> u8 {
        self.names.len() as u8
    }

    /// The level a request naming `value` is at: its place in the list; none, or a
    /// name not listed, is the lowest (a client cannot promote itself by inventing one).
    pub fn level(&self, value: Option<&str>) -> u8 {
        spillway_core::algorithm::shares::level(&self.names, value)
    }
}
