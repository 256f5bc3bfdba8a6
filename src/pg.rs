//! Connecting to Postgres, for the state store ([`crate::state::PostgresStore`]) and the engine
//! ([`crate::engine::postgres`]): how a database is named in messages (never its password), how
//! a driver error becomes text (the password scrubbed), and the one way a client connects.

use std::time::Duration;

/// How long a connection attempt waits for the server, unless the URL says otherwise
/// (`connect_timeout`): the whole attempt — the TCP connect and the startup handshake
/// (authentication, the server's first answer) — is bounded by it ([`connect`]).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Idle time on a connection before the first TCP keepalive probe (the driver's default is two
/// hours), unless the URL says otherwise (`keepalives_idle`).
pub const KEEPALIVES_IDLE: Duration = Duration::from_secs(30);

/// Time between TCP keepalive probes, unless the URL says otherwise (`keepalives_interval`).
pub const KEEPALIVES_INTERVAL: Duration = Duration::from_secs(10);

/// Unanswered keepalive probes before the connection is given up, unless the URL says
/// otherwise (`keepalives_retries`): a server that went silent (a network cut without a reset)
/// is found within about [`KEEPALIVES_IDLE`] + 3 × [`KEEPALIVES_INTERVAL`] of an idle wait.
pub const KEEPALIVES_RETRIES: u32 = 3;

/// How long data sent on a connection may stay unacknowledged before the connection is given
/// up (Linux's `TCP_USER_TIMEOUT`), unless the URL says otherwise (`tcp_user_timeout`): a
/// statement sent into a network that went silent fails after it instead of waiting forever.
pub const TCP_USER_TIMEOUT: Duration = Duration::from_secs(60);

/// A connection attempt that failed ([`connect`]): the driver's error, a server that did not
/// finish the startup handshake within the bound, or an attempt that panicked.
#[derive(Debug)]
pub enum ConnectError {
    /// The driver's error (refused, reset, a DNS failure, a refused login, a server error).
    Driver(postgres::Error),
    /// The server accepted the TCP connection (or none answered) but did not complete the
    /// startup handshake within `after`.
    NoAnswer {
        /// The bound that passed.
        after: Duration,
    },
    /// The connection attempt ended without a result: its thread panicked (the driver could
    /// not build its runtime: out of threads or memory).
    Panicked,
}

impl ConnectError {
    /// The driver's error, when there is one.
    pub fn driver(&self) -> Option<&postgres::Error> {
        match self {
            ConnectError::Driver(e) => Some(e),
            ConnectError::NoAnswer { .. } | ConnectError::Panicked => None,
        }
    }

    /// True when the server may take the connection later: a driver error
    /// [`is_transient`] says so of, with a server's code (starting up, shutting down, out of
    /// connections). An unreachable or silent server, a refused login are not.
    pub fn is_transient_refusal(&self) -> bool {
        self.driver().is_some_and(|e| e.code().is_some() && is_transient(e))
    }
}

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnectError::Driver(e) => std::fmt::Display::fmt(e, f),
            ConnectError::NoAnswer { after } => write!(
                f,
                "no answer from the server within {} s (connected, but the startup handshake did not complete: a hung or overloaded server, \
                 a proxy holding the connection, a network dropping its packets, or not a Postgres server at that address)",
                after.as_secs_f64()
            ),
            ConnectError::Panicked => f.write_str(
                "the connection attempt failed inside efmesh (the Postgres driver could not start: out of threads or memory?); the server was not asked",
            ),
        }
    }
}

impl std::error::Error for ConnectError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            // The driver's error is shown as this one's text: its causes follow it.
            ConnectError::Driver(e) => std::error::Error::source(e),
            ConnectError::NoAnswer { .. } | ConnectError::Panicked => None,
        }
    }
}

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
/// error itself says `db error`), with the passwords it quotes redacted ([`redact_passwords`]).
pub fn scrubbed(e: &dyn std::error::Error, secret: Option<&str>) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    redact_passwords(&text, secret)
}

/// `text` with every password it quotes where a connection string holds one replaced by
/// [`crate::config::REDACTED`]: the `user:password@` of a URL, the value of a `password=` key
/// (a `key=value` string, quoted or not, or a URL's `?password=`; `sslpassword=` too), and
/// `secret` (the connection's password) where it stands as a URL's password without a scheme
/// before it (`:secret@`), as written or percent-encoded. Nowhere else: a password that is
/// also a word (`postgres`, a database's name) is left alone in the rest of the message, which
/// would otherwise be garbled and tell the reader where the password's text occurs.
pub fn redact_passwords(text: &str, secret: Option<&str>) -> String {
    let mut out = redact_password_keys(&crate::config::redact_url_passwords(text));
    if let Some(s) = secret.filter(|s| !s.is_empty()) {
        for form in [s.to_string(), percent_encoded(s)] {
            out = out.replace(&format!(":{form}@"), &format!(":{}@", crate::config::REDACTED));
        }
    }
    out
}

/// `text` with the value of every `…password=` key redacted: up to the closing quote of a
/// single-quoted value (`\'` escapes one, as libpq reads it), else up to a blank, `&`, `#`, a
/// double quote or a backtick.
fn redact_password_keys(text: &str) -> String {
    const KEY: &str = "password";
    let lower = text.to_ascii_lowercase();
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    let mut from = 0;
    while let Some(found) = lower[from..].find(KEY) {
        let key_end = from + found + KEY.len();
        from = key_end;
        // `password`, blanks, `=`, blanks: the value starts after them.
        let mut i = key_end;
        while i < bytes.len() && bytes[i] == b' ' {
            i += 1;
        }
        if bytes.get(i) != Some(&b'=') {
            continue;
        }
        i += 1;
        while i < bytes.len() && bytes[i] == b' ' {
            i += 1;
        }
        let (start, end) = if bytes.get(i) == Some(&b'\'') {
            let mut j = i + 1;
            while j < bytes.len() && bytes[j] != b'\'' {
                j += if bytes[j] == b'\\' { 2 } else { 1 };
            }
            (i + 1, j.min(bytes.len()))
        } else {
            let end = text[i..].find(|c: char| c.is_whitespace() || matches!(c, '&' | '#' | '"' | '`')).map_or(text.len(), |p| i + p);
            (i, end)
        };
        if end > start {
            out.push_str(&text[copied..start]);
            out.push_str(crate::config::REDACTED);
            copied = end;
            from = end;
        }
    }
    out.push_str(&text[copied..]);
    out
}

/// `s` as a URL's userinfo writes it: every byte but the unreserved ones percent-encoded.
fn percent_encoded(s: &str) -> String {
    s.bytes().map(|b| if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') { (b as char).to_string() } else { format!("%{b:02X}") }).collect()
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

/// Connects a client as `config` says, naming itself `efmesh`, with TCP keepalives
/// ([`KEEPALIVES_IDLE`], [`KEEPALIVES_INTERVAL`], [`KEEPALIVES_RETRIES`]) and
/// [`TCP_USER_TIMEOUT`] unless the URL sets them, and waiting at most [`CONNECT_TIMEOUT`] (or
/// the URL's `connect_timeout`) for the whole attempt: the TCP connect and the startup
/// handshake. The driver bounds only the TCP connect, so the attempt runs on a thread of its
/// own; one the server never answers is left behind (blocked until the server answers or closes,
/// or the process ends) and the caller gets [`ConnectError::NoAnswer`].
///
/// # Errors
/// [`ConnectError`]: the driver's error, or no answer within the bound.
pub fn connect(config: postgres::Config) -> Result<postgres::Client, ConnectError> {
    let config = configured(config);
    let bound = config.get_connect_timeout().copied().unwrap_or(CONNECT_TIMEOUT);
    bounded(bound, move || config.connect(postgres::NoTls))
}

/// `config` with what [`connect`] adds where the URL says nothing: the application name
/// `efmesh`, [`CONNECT_TIMEOUT`], the keepalive settings and [`TCP_USER_TIMEOUT`].
fn configured(mut config: postgres::Config) -> postgres::Config {
    if config.get_application_name().is_none() {
        config.application_name("efmesh");
    }
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(CONNECT_TIMEOUT);
    }
    // The driver's defaults: keepalives on, first probe after two hours.
    if config.get_keepalives_idle() == Duration::from_secs(2 * 60 * 60) {
        config.keepalives_idle(KEEPALIVES_IDLE);
    }
    if config.get_keepalives_interval().is_none() {
        config.keepalives_interval(KEEPALIVES_INTERVAL);
    }
    if config.get_keepalives_retries().is_none() {
        config.keepalives_retries(KEEPALIVES_RETRIES);
    }
    if config.get_tcp_user_timeout().is_none() {
        config.tcp_user_timeout(TCP_USER_TIMEOUT);
    }
    config
}

/// Runs `attempt` on a thread of its own and waits at most `bound` for it: its result,
/// [`ConnectError::Panicked`] when it panicked, or [`ConnectError::NoAnswer`] (the thread is
/// left to finish on its own; what it returns then is dropped). When no thread can be
/// started, `attempt` runs on this one, unbounded.
fn bounded(bound: Duration, attempt: impl FnOnce() -> Result<postgres::Client, postgres::Error> + Send + 'static) -> Result<postgres::Client, ConnectError> {
    let (sender, receiver) = std::sync::mpsc::sync_channel(1);
    let attempt = std::sync::Arc::new(std::sync::Mutex::new(Some(attempt)));
    let on_thread = attempt.clone();
    let spawned = std::thread::Builder::new().name("efmesh-pg-connect".to_string()).spawn(move || {
        let job = on_thread.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
        if let Some(job) = job {
            // The receiver is gone when the caller stopped waiting: the client is dropped.
            let _ = sender.send(job());
        }
    });
    if spawned.is_err() {
        let job = attempt.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
        return match job {
            Some(job) => job().map_err(ConnectError::Driver),
            None => Err(ConnectError::NoAnswer { after: Duration::ZERO }),
        };
    }
    match receiver.recv_timeout(bound) {
        Ok(result) => result.map_err(ConnectError::Driver),
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => Err(ConnectError::NoAnswer { after: bound }),
        // The attempt panicked (the driver could not build its runtime): no answer was waited for.
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => Err(ConnectError::Panicked),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The password is redacted where a connection string holds it — a URL's `user:password@`
    /// (as written or percent-encoded), a `password=` key of a `key=value` string (quoted or
    /// not) or of a URL's query — and nowhere else: a password that is also a word (here
    /// `postgres`, the database's name too) leaves the rest of the message as the server wrote it.
    #[test]
    fn the_password_is_redacted_only_where_a_connection_string_holds_it() {
        let r = crate::config::REDACTED;
        let secret = Some("postgres");
        // The server's words, the database's name: untouched.
        for text in [
            "db error: FATAL: permission denied for database postgres",
            "cannot open Postgres database `postgres://app@127.0.0.1:55600/postgres`: password authentication failed for user \"app\"",
        ] {
            assert_eq!(redact_passwords(text, secret), text);
        }
        // Where a connection string holds the password: redacted.
        for (text, want) in [
            ("attach postgres://app:postgres@db:5432/postgres failed", format!("attach postgres://app:{r}@db:5432/postgres failed")),
            ("host=db user=app password=postgres dbname=postgres", format!("host=db user=app password={r} dbname=postgres")),
            ("host=db password = 'post gres\\'s' dbname=postgres", format!("host=db password = '{r}' dbname=postgres")),
            ("postgres://app@db/postgres?sslmode=disable&password=postgres&x=1", format!("postgres://app@db/postgres?sslmode=disable&password={r}&x=1")),
            ("`ducklake:postgres:sslpassword=postgres dbname=postgres`", format!("`ducklake:postgres:sslpassword={r} dbname=postgres`")),
            ("user app:postgres@db refused", format!("user app:{r}@db refused")),
        ] {
            assert_eq!(redact_passwords(text, secret), want, "{text}");
        }
        // A password needing percent-encoding, written encoded in a URL without a scheme.
        assert_eq!(redact_passwords("app:p%40ss%20w@db", Some("p@ss w")), format!("app:{r}@db"));
        assert_eq!(redact_passwords("the word p@ss w stays", Some("p@ss w")), "the word p@ss w stays");
    }

    /// A server that accepts the TCP connection but never answers the startup message fails
    /// the connect within the bound (the URL's `connect_timeout`, the whole attempt), with a
    /// message saying the server did not answer, instead of waiting forever.
    #[test]
    fn a_server_that_accepts_but_never_answers_fails_the_connect_within_the_bound() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a local port");
        let port = listener.local_addr().expect("its address").port();
        // Accepts, holds the connection, never writes.
        std::thread::spawn(move || {
            let held: Vec<std::net::TcpStream> = listener.incoming().take(1).filter_map(Result::ok).collect();
            std::thread::sleep(Duration::from_secs(30));
            drop(held);
        });
        let config = parse(&format!("postgres://app:pw@127.0.0.1:{port}/db?connect_timeout=1")).expect("a URL");
        let started = std::time::Instant::now();
        let err = connect(config).map(|_| ()).expect_err("no answer");
        assert!(started.elapsed() < Duration::from_secs(5), "gave up after {:?}", started.elapsed());
        assert!(matches!(err, ConnectError::NoAnswer { after } if after == Duration::from_secs(1)), "{err:?}");
        let text = scrubbed(&err, Some("pw"));
        assert!(text.starts_with("no answer from the server within 1 s"), "{text}");
        assert!(!err.is_transient_refusal());
    }

    /// A connection attempt that panicked (the driver could not start its runtime) is said to
    /// have failed inside efmesh, at once, not to have waited for a server's answer.
    #[test]
    fn a_connect_attempt_that_panics_is_not_called_a_silent_server() {
        let started = std::time::Instant::now();
        let err = bounded(Duration::from_secs(30), || -> Result<postgres::Client, postgres::Error> { panic!("cannot build the runtime (test)") })
            .map(|_| ())
            .expect_err("a panicked attempt");
        assert!(started.elapsed() < Duration::from_secs(10), "waited {:?}", started.elapsed());
        assert!(matches!(err, ConnectError::Panicked), "{err:?}");
        let text = err.to_string();
        assert!(text.contains("failed inside efmesh") && !text.contains("no answer from the server"), "{text}");
        assert!(!err.is_transient_refusal());
    }

    /// A connection efmesh opens has TCP keepalives that notice a silent peer within a minute
    /// or so, a TCP user timeout and a connect timeout, unless the URL sets its own.
    #[test]
    fn connections_get_keepalives_and_timeouts_unless_the_url_sets_them() {
        let plain = configured(parse("postgres://app@db/x").expect("a URL"));
        assert_eq!(plain.get_keepalives_idle(), KEEPALIVES_IDLE);
        assert_eq!(plain.get_keepalives_interval(), Some(KEEPALIVES_INTERVAL));
        assert_eq!(plain.get_keepalives_retries(), Some(KEEPALIVES_RETRIES));
        assert_eq!(plain.get_tcp_user_timeout(), Some(&TCP_USER_TIMEOUT));
        assert_eq!(plain.get_connect_timeout(), Some(&CONNECT_TIMEOUT));
        assert!(plain.get_keepalives());
        let own = configured(parse("postgres://app@db/x?keepalives_idle=5&connect_timeout=3&tcp_user_timeout=7").expect("a URL"));
        assert_eq!(own.get_keepalives_idle(), Duration::from_secs(5));
        assert_eq!(own.get_connect_timeout(), Some(&Duration::from_secs(3)));
        assert_eq!(own.get_tcp_user_timeout(), Some(&Duration::from_secs(7)));
    }
}
