//! Connecting to Postgres, for the state store ([`crate::state::PostgresStore`]) and the engine
//! ([`crate::engine::postgres`]): how a database is named in messages (never its password), how
//! a driver error becomes text (the password scrubbed), and the one way a client connects.

use std::time::Duration;

/// How long a connection attempt waits for the server.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A URL or `key=value` string parsed, or an error that never quotes it (a password can sit
/// anywhere in it: `user:pw@`, `?password=`, `password=`).
///
/// # Errors
/// The message of the parse failure, passwords redacted.
pub fn parse(url: &str) -> Result<postgres::Config, String> {
    url.parse::<postgres::Config>()
        .map_err(|e| format!("not a Postgres URL or `key=value` connection string: {}", crate::config::redact_url_passwords(&e.to_string())))
}

/// The database of `config` as messages name it: `postgres://user@host:port/db` (no password).
pub fn describe(config: &postgres::Config) -> String {
    use postgres::config::Host;
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .map(|h| match h {
            Host::Tcp(h) => h.clone(),
            Host::Unix(p) => p.display().to_string(),
        })
        .collect();
    let port = config.get_ports().first().map(|p| format!(":{p}")).unwrap_or_default();
    let user = config.get_user().map(|u| format!("{u}@")).unwrap_or_default();
    let db = config.get_dbname().unwrap_or("");
    format!("postgres://{user}{}{port}/{db}", hosts.join(","))
}

/// [`describe`] of a URL, `None` when it does not parse (then nothing of it may be shown).
pub fn describe_url(url: &str) -> Option<String> {
    url.parse::<postgres::Config>().ok().map(|c| describe(&c))
}

/// The password of `config`, to scrub from messages ([`scrubbed`]).
pub fn secret(config: &postgres::Config) -> Option<String> {
    config.get_password().map(|p| String::from_utf8_lossy(p).into_owned())
}

/// An error as text, with its causes (a server error's message is only in its source: the
/// error itself says `db error`), and with `secret` (the password) removed, whatever it quotes.
pub fn scrubbed(e: &dyn std::error::Error, secret: Option<&str>) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    let mut text = crate::config::redact_url_passwords(&text);
    if let Some(s) = secret.filter(|s| !s.is_empty()) {
        text = text.replace(s, crate::config::REDACTED);
    }
    text
}

/// True when `e` says the connection is gone: closed by the server (a restart, a terminated
/// backend) or cut under the driver (an I/O error: a broken pipe, a reset).
pub fn connection_lost(e: &postgres::Error) -> bool {
    e.is_closed() || std::error::Error::source(e).is_some_and(|s| s.downcast_ref::<std::io::Error>().is_some())
}

/// True when `e` is about the connection, not the work: lost ([`connection_lost`]), a
/// connection exception (class 08), the server shutting down or not yet accepting connections
/// (`57P01`–`57P03`), too many connections (`53300`). The next attempt connects again.
pub fn connection_trouble(e: &postgres::Error) -> bool {
    use postgres::error::SqlState;
    connection_lost(e)
        || e.code().is_some_and(|c| {
            [SqlState::ADMIN_SHUTDOWN, SqlState::CRASH_SHUTDOWN, SqlState::CANNOT_CONNECT_NOW, SqlState::TOO_MANY_CONNECTIONS].contains(c)
                || c.code().starts_with("08")
        })
}

/// True for a failure retrying may cure, for the engine and the state store alike:
/// [`connection_trouble`], or another connection's lock — a serialization failure (`40001`), a
/// deadlock (`40P01`), a lock wait that timed out (`55P03`). A lost connection may leave unknown
/// whether the last `COMMIT` landed; retrying is safe because every engine batch is a
/// transaction that rewrites its interval (`DELETE` + `INSERT`, or an upsert of the same rows),
/// the state store records an interval only after the engine committed it, every state write
/// is one transaction (the retried attempt plans again from what landed), and a promotion whose
/// view swap failed transiently keeps its intent, so the views are put back as they were before
/// anything is retried.
pub fn is_transient(e: &postgres::Error) -> bool {
    use postgres::error::SqlState;
    connection_trouble(e)
        || e.code().is_some_and(|c| [SqlState::T_R_SERIALIZATION_FAILURE, SqlState::T_R_DEADLOCK_DETECTED, SqlState::LOCK_NOT_AVAILABLE].contains(c))
}

/// Connects a client as `config` says, naming itself `efmesh` and waiting at most
/// [`CONNECT_TIMEOUT`] unless the URL says otherwise.
///
/// # Errors
/// The driver's error.
pub fn connect(mut config: postgres::Config) -> Result<postgres::Client, postgres::Error> {
    if config.get_application_name().is_none() {
        config.application_name("efmesh");
    }
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(CONNECT_TIMEOUT);
    }
    config.connect(postgres::NoTls)
}
