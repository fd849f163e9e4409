//! Load errors: each names the file, the line and the field it is about, so an
//! operator can go straight to the mistake.

use std::fmt;
use std::path::{Path, PathBuf};

/// One mistake in one policy file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    /// The file the mistake is in.
    pub file: PathBuf,
    /// 1-based line, when the mistake is at a place in the file.
    pub line: Option<u64>,
    /// Where in the document: `descriptors[0].rate_limit.unit`; empty for the whole file.
    pub field: String,
    /// What is wrong, lowercase, without a trailing period.
    pub message: String,
}

impl Error {
    pub(crate) fn new(
        file: &Path,
        line: Option<u64>,
        field: &str,
        message: impl Into<String>,
    ) -> Error {
        Error {
            file: file.to_owned(),
            line,
            field: field.to_owned(),
            message: message.into(),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        if !self.field.is_empty() {
            write!(f, ": {}", self.field)?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for Error {}

/// Every mistake found in a load; a load with any mistake loads nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Errors(pub Vec<Error>);

impl Errors {
    /// The mistakes, in file order.
    pub fn iter(&self) -> impl Iterator<Item = &Error> {
        self.0.iter()
    }
}

impl fmt::Display for Errors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.as_slice() {
            [one] => write!(f, "{one}"),
            many => {
                write!(f, "{} errors", many.len())?;
                for e in many {
                    write!(f, "\n  {e}")?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for Errors {}
