//! How decisions reach Redis: a function library where the server has functions,
//! else scripts; chosen at startup, and the errors that say why the code was refused.

use std::fmt;
use std::time::Duration;

use redis::RedisError;

use crate::Error;
use crate::connection::Connection;
use crate::script::LIBRARY;

/// What an ACL user needs, for the error that says it lacks something.
const SCRIPT_COMMANDS: &str = " (the decision code runs TIME, and GET, SET, HGET, HSET, \
    DEL, PEXPIRE, PTTL, PFADD and PFCOUNT on its keys: an ACL user needs \
    +fcall +function|load, or +evalsha +eval without functions, and those, with \
    ~<prefix>*)";

/// How a store's decisions reach Redis, chosen when it connects ([`RedisStore::calls`](super::RedisStore::calls)).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Calls {
    /// `FCALL` of Spillway's function library, loaded at startup (Redis ≥ 7.0, Valkey):
    /// the library stays compiled and its algorithms defined between calls.
    Function {
        /// The function called (`spillway_<version>_decide`).
        name: String,
    },
    /// `EVALSHA` of the decision script, which defines its algorithms again on every
    /// call: the server has no functions, or they were turned off.
    Script {
        /// Why not functions.
        why: String,
    },
}

impl fmt::Display for Calls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Calls::Function { name } => write!(f, "FCALL {name} (a Redis function library)"),
            Calls::Script { why } => write!(f, "EVALSHA of the decision script ({why})"),
        }
    }
}

/// `FUNCTION LOAD` of the library (on every master of a Cluster); one already loaded
/// (this version, by another process) is as good.
pub(super) async fn load_library(connection: &Connection) -> Result<(), RedisError> {
    let mut load = redis::cmd("FUNCTION");
    load.arg("LOAD").arg(&LIBRARY.source);
    match connection.query(&load).await {
        Err(e) if e.to_string().contains("already exists") => Ok(()),
        other => other.map(drop),
    }
}

/// Whether the store should call functions: the library loads, or `why` not. A
/// transient failure (the connection) is the caller's error, not a reason to use
/// scripts for the store's whole life.
pub(super) async fn choose_calls(
    connection: &Connection,
    timeout: Duration,
) -> Result<Calls, Error> {
    let load = until_answered(|| load_library(connection));
    match tokio::time::timeout(timeout, load).await {
        Ok(Ok(())) => Ok(Calls::Function {
            name: LIBRARY.function.clone(),
        }),
        Ok(Err(e)) if crate::error::is_transient(&e) => Err(refused(e.to_string(), true)),
        Ok(Err(e)) if is_unknown_command(&e) => Ok(Calls::Script {
            why: "the server has no functions: Redis before 7.0".into(),
        }),
        Ok(Err(e)) => Ok(Calls::Script {
            why: format!("FUNCTION LOAD was refused: {e}"),
        }),
        Err(_) => Err(no_answer(timeout)),
    }
}

/// `call` again while it only timed out: at startup a busy server may answer after the
/// store's response timeout (the decision timeout, 10 ms by default; `FUNCTION LOAD`
/// compiles the library), and it has still run the command. The caller bounds the
/// whole by the connect timeout. Each try waits the response timeout: no busy loop.
pub(super) async fn until_answered<T, F: Future<Output = Result<T, RedisError>>>(
    mut call: impl FnMut() -> F,
) -> Result<T, RedisError> {
    loop {
        match call().await {
            Err(e) if e.is_timeout() => continue,
            other => return other,
        }
    }
}

/// The decision code could not be loaded or run at startup, and `why`.
pub(super) fn refused(mut why: String, transient: bool) -> Error {
    // Redis does not say which command a script was refused.
    if why.contains("can't run this command") {
        why.push_str(SCRIPT_COMMANDS);
    }
    Error::Script {
        url: String::new(),
        why,
        transient,
    }
}

/// No answer at startup within `timeout`.
pub(super) fn no_answer(timeout: Duration) -> Error {
    Error::ConnectTimeout {
        url: String::new(),
        timeout,
        tls: false,
    }
}

pub(super) fn is_function_not_found(e: &RedisError) -> bool {
    e.to_string().contains("Function not found")
}

pub(super) fn is_unknown_command(e: &RedisError) -> bool {
    e.to_string().contains("unknown command")
}
