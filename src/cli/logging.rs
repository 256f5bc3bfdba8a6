//! The stderr logger: pretty (coloured at a terminal unless `NO_COLOR` is set), logfmt or JSON
//! lines, and at a terminal a progress bar for the builds of `apply` and `run`.
//!
//! Logs never touch stdout. The progress bar is driven by the lifecycle events the apply layer
//! logs anyway (`builds planned`, `build start`, `backfill batch`, `build done`, `promoted`), so
//! the library knows nothing of terminals; log lines written while the bar is shown go through
//! [`MultiProgress::suspend`], so the bar never garbles them.

use super::args::{LogFormat, LogLevel};
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::{IsTerminal, Write as _};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::filter::{EnvFilter, Targets};
use tracing_subscriber::fmt::format::{FormatEvent, FormatFields, Writer};
use tracing_subscriber::fmt::time::FormatTime;
use tracing_subscriber::fmt::{FmtContext, FormattedFields, MakeWriter};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;

/// How the logger was set up, resolved from the flags and the terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Setup {
    /// The line format.
    pub format: LogFormat,
    /// ANSI colours in pretty lines.
    pub color: bool,
    /// A progress bar for builds.
    pub progress: bool,
}

impl Setup {
    /// Resolves `--log-format` (none: pretty at a terminal, logfmt otherwise), colours (pretty at a
    /// terminal, `NO_COLOR` unset or empty) and the progress bar (pretty at a terminal, unless
    /// `no_bar`: a `--json` command, `watch`).
    pub fn resolve(format: Option<LogFormat>, stderr_tty: bool, no_color: bool, no_bar: bool) -> Setup {
        let format = format.unwrap_or(if stderr_tty { LogFormat::Pretty } else { LogFormat::Logfmt });
        let pretty_tty = format == LogFormat::Pretty && stderr_tty;
        Setup { format, color: pretty_tty && !no_color, progress: pretty_tty && !no_bar }
    }
}

/// True when `NO_COLOR` is set to a non-empty value (<https://no-color.org>).
fn no_color() -> bool {
    std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty())
}

/// The progress bars of the running command, cleared by [`clear_progress`] before an error is
/// printed.
static PROGRESS: OnceLock<Arc<Mutex<Bars>>> = OnceLock::new();

/// The HTTP and TLS crates never log below `info`, whatever `RUST_LOG` says: at `debug` and
/// `trace` ureq logs whole request URLs, and the S3 lake's are pre-signed (their query string
/// holds a signature and maybe a session token).
fn quiet_http(filter: EnvFilter) -> EnvFilter {
    ["ureq=info", "ureq_proto=info", "rustls=info"].iter().filter_map(|d| d.parse().ok()).fold(filter, EnvFilter::add_directive)
}

/// Installs the stderr logger for a command (`no_bar`: never draw the progress bar, e.g. for a
/// `--json` command). `RUST_LOG`, when set and valid, replaces the `--log-level` filter.
pub fn init(level: LogLevel, format: Option<LogFormat>, no_bar: bool) {
    let setup = Setup::resolve(format, std::io::stderr().is_terminal(), no_color(), no_bar);
    let filter = quiet_http(EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(format!("efmesh={},warn", level.as_str()))));
    let multi = MultiProgress::with_draw_target(if setup.progress { ProgressDrawTarget::stderr() } else { ProgressDrawTarget::hidden() });
    let writer = Stderr { multi: multi.clone() };
    let lines = match setup.format {
        LogFormat::Pretty => tracing_subscriber::fmt::layer().with_writer(writer).with_ansi(setup.color).with_target(false).with_timer(LocalClock).boxed(),
        LogFormat::Logfmt => tracing_subscriber::fmt::layer().with_writer(writer).with_ansi(false).fmt_fields(LogfmtFields).event_format(Logfmt).boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .with_target(false)
            .with_writer(writer)
            .boxed(),
    };
    let progress = setup.progress.then(|| {
        let bars = Arc::new(Mutex::new(Bars { multi, models: None, batches: None }));
        let _ = PROGRESS.set(bars.clone());
        // The bar follows the lifecycle events whatever `--log-level` shows.
        ProgressLayer { bars }.with_filter(Targets::new().with_target("efmesh::apply", tracing::Level::INFO))
    });
    let _ = tracing_subscriber::registry().with(lines.with_filter(filter)).with(progress).try_init();
}

/// Removes the progress bars from the terminal (before an error is printed after them).
pub fn clear_progress() {
    if let Some(bars) = PROGRESS.get()
        && let Ok(mut b) = bars.lock()
    {
        b.clear();
    }
}

/// Local wall-clock time (`HH:MM:SS.mmm`) for pretty lines, read by people at a terminal.
struct LocalClock;

impl FormatTime for LocalClock {
    fn format_time(&self, w: &mut Writer<'_>) -> std::fmt::Result {
        write!(w, "{}", jiff::ZonedDateTime::now().strftime("%H:%M:%S%.3f"))
    }
}

/// Makes one [`Line`] per event.
struct Stderr {
    multi: MultiProgress,
}

impl<'a> MakeWriter<'a> for Stderr {
    type Writer = Line;

    fn make_writer(&'a self) -> Line {
        Line { buf: Vec::with_capacity(256), multi: self.multi.clone() }
    }
}

/// One event's bytes, written to stderr in one piece when dropped (with the progress bars, if
/// any, lifted for the time of the write).
struct Line {
    buf: Vec<u8>,
    multi: MultiProgress,
}

impl std::io::Write for Line {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for Line {
    fn drop(&mut self) {
        if self.buf.is_empty() {
            return;
        }
        let buf = std::mem::take(&mut self.buf);
        // A log line that cannot be written has nowhere else to go.
        self.multi.suspend(|| {
            let mut err = std::io::stderr().lock();
            let _ = err.write_all(&buf);
            let _ = err.flush();
        });
    }
}

// ---------------------------------------------------------------------------------------------
// logfmt

/// An event's message and fields, in the order they were recorded.
#[derive(Default)]
struct Fields {
    message: Option<String>,
    pairs: Vec<(&'static str, String)>,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, value.to_string());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.put(field, format!("{value:?}"));
    }
}

impl Fields {
    fn put(&mut self, field: &Field, value: String) {
        if field.name() == "message" {
            self.message = Some(value);
        } else {
            self.pairs.push((field.name(), value));
        }
    }
}

/// Writes `key=value` for logfmt: the key with spaces, `=`, `"` and control characters replaced
/// by `_`; the value bare when it has none of those, else double-quoted with `\\`, `\"`, `\n`,
/// `\r`, `\t` and other control characters (`\u001b`…) escaped, so every event is one line.
fn write_pair(w: &mut impl std::fmt::Write, key: &str, value: &str) -> std::fmt::Result {
    for c in key.chars() {
        w.write_char(if c <= ' ' || c == '=' || c == '"' || c.is_control() { '_' } else { c })?;
    }
    w.write_char('=')?;
    write_value(w, value)
}

/// The value half of [`write_pair`].
fn write_value(w: &mut impl std::fmt::Write, value: &str) -> std::fmt::Result {
    let bare = !value.is_empty() && !value.chars().any(|c| c <= ' ' || c == '=' || c == '"' || c.is_control());
    if bare {
        return w.write_str(value);
    }
    w.write_char('"')?;
    for c in value.chars() {
        match c {
            '"' => w.write_str("\\\"")?,
            '\\' => w.write_str("\\\\")?,
            '\n' => w.write_str("\\n")?,
            '\r' => w.write_str("\\r")?,
            '\t' => w.write_str("\\t")?,
            c if c.is_control() => write!(w, "\\u{:04x}", c as u32)?,
            c => w.write_char(c)?,
        }
    }
    w.write_char('"')
}

/// Span fields as logfmt pairs (appended to the lines of the events inside the span).
struct LogfmtFields;

impl<'w> FormatFields<'w> for LogfmtFields {
    fn format_fields<R: tracing_subscriber::field::RecordFields>(&self, mut w: Writer<'w>, fields: R) -> std::fmt::Result {
        let mut f = Fields::default();
        fields.record(&mut f);
        let mut first = true;
        for (k, v) in f.message.iter().map(|m| ("msg", m)).chain(f.pairs.iter().map(|(k, v)| (*k, v))) {
            if !first {
                w.write_char(' ')?;
            }
            first = false;
            write_pair(&mut w, k, v)?;
        }
        Ok(())
    }
}

/// `ts=<UTC RFC 3339, ms> level=<level> msg=<message> <field>=<value>…`, one line per event.
struct Logfmt;

impl<S, N> FormatEvent<S, N> for Logfmt
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(&self, ctx: &FmtContext<'_, S, N>, mut w: Writer<'_>, event: &Event<'_>) -> std::fmt::Result {
        let mut f = Fields::default();
        event.record(&mut f);
        let ts = jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%S%.3fZ").to_string();
        write_pair(&mut w, "ts", &ts)?;
        w.write_char(' ')?;
        write_pair(&mut w, "level", &event.metadata().level().as_str().to_ascii_lowercase())?;
        w.write_char(' ')?;
        write_pair(&mut w, "msg", f.message.as_deref().unwrap_or(""))?;
        for (k, v) in &f.pairs {
            w.write_char(' ')?;
            write_pair(&mut w, k, v)?;
        }
        if let Some(scope) = ctx.event_scope() {
            for span in scope.from_root() {
                let ext = span.extensions();
                if let Some(fields) = ext.get::<FormattedFields<N>>()
                    && !fields.is_empty()
                {
                    write!(w, " {}", fields.fields)?;
                }
            }
        }
        writeln!(w)
    }
}

// ---------------------------------------------------------------------------------------------
// progress

/// The bars: models built of those planned, and the batches of the model being backfilled.
struct Bars {
    multi: MultiProgress,
    models: Option<ProgressBar>,
    batches: Option<ProgressBar>,
}

impl Bars {
    fn clear(&mut self) {
        for bar in [self.batches.take(), self.models.take()].into_iter().flatten() {
            bar.finish_and_clear();
            self.multi.remove(&bar);
        }
    }

    fn clear_batches(&mut self) {
        if let Some(bar) = self.batches.take() {
            bar.finish_and_clear();
            self.multi.remove(&bar);
        }
    }

    fn on_event(&mut self, message: &str, fields: &Fields) {
        let field = |name: &str| fields.pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| v.as_str());
        let number = |name: &str| field(name).and_then(|v| v.parse::<u64>().ok());
        match message {
            "builds planned" => {
                self.clear();
                let Some(n) = number("models").filter(|n| *n > 0) else { return };
                let bar = self.multi.add(ProgressBar::new(n));
                bar.set_style(style("{prefix} [{bar:30}] {pos}/{len} models · {elapsed} · {msg}"));
                bar.set_prefix(field("env").map(|e| format!("apply {e}")).unwrap_or_else(|| "apply".into()));
                bar.enable_steady_tick(Duration::from_millis(250));
                self.models = Some(bar);
            }
            "build start" => {
                self.clear_batches();
                if let (Some(bar), Some(model)) = (&self.models, field("model")) {
                    bar.set_message(model.to_string());
                }
            }
            "backfill batch" | "lake batch" => {
                let (Some(i), Some(n)) = (number("batch"), number("batches")) else { return };
                if self.batches.is_none() && self.models.is_some() {
                    let bar = self.multi.add(ProgressBar::new(n));
                    bar.set_style(style("  {prefix} [{bar:30}] {pos}/{len} batches · ETA {eta}"));
                    bar.set_prefix(field("model").unwrap_or("").to_string());
                    self.batches = Some(bar);
                }
                if let Some(bar) = &self.batches {
                    bar.set_length(n);
                    bar.set_position(i.saturating_sub(1));
                }
            }
            "build done" => {
                self.clear_batches();
                if let Some(bar) = &self.models {
                    bar.inc(1);
                    if bar.length().is_some_and(|n| bar.position() >= n) {
                        self.clear();
                    }
                }
            }
            m if m.starts_with("promoted") => self.clear(),
            _ => {}
        }
    }
}

fn style(template: &str) -> ProgressStyle {
    ProgressStyle::with_template(template).unwrap_or_else(|_| ProgressStyle::default_bar()).progress_chars("=> ")
}

/// Feeds the apply layer's lifecycle events to [`Bars`].
struct ProgressLayer {
    bars: Arc<Mutex<Bars>>,
}

impl<S: Subscriber> Layer<S> for ProgressLayer {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let mut f = Fields::default();
        event.record(&mut f);
        let Some(message) = f.message.take() else { return };
        if let Ok(mut bars) = self.bars.lock() {
            bars.on_event(&message, &f);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(k: &str, v: &str) -> String {
        let mut s = String::new();
        write_pair(&mut s, k, v).expect("write");
        s
    }

    #[test]
    fn logfmt_values_are_quoted_and_escaped_onto_one_line() {
        assert_eq!(pair("model", "a.b"), "model=a.b");
        assert_eq!(pair("msg", "build done"), r#"msg="build done""#);
        assert_eq!(pair("msg", ""), r#"msg="""#);
        assert_eq!(pair("sql", "SELECT 1\nFROM \"t\"\twhere x = 'a\\b'"), r#"sql="SELECT 1\nFROM \"t\"\twhere x = 'a\\b'""#);
        assert_eq!(pair("x", "a=b"), r#"x="a=b""#);
        assert_eq!(pair("x", "\u{1b}[31mred"), r#"x="\u001b[31mred""#);
        assert_eq!(pair("bad key", "v"), "bad_key=v");
    }

    #[test]
    fn setup_follows_terminal_flag_and_no_color() {
        let s = Setup::resolve(None, true, false, false);
        assert_eq!(s, Setup { format: LogFormat::Pretty, color: true, progress: true });
        assert_eq!(Setup::resolve(None, false, false, false), Setup { format: LogFormat::Logfmt, color: false, progress: false });
        assert!(!Setup::resolve(None, true, true, false).color, "NO_COLOR");
        assert!(!Setup::resolve(None, true, false, true).progress, "--json hides the bar");
        assert_eq!(Setup::resolve(Some(LogFormat::Json), true, false, false), Setup { format: LogFormat::Json, color: false, progress: false });
        assert!(!Setup::resolve(Some(LogFormat::Pretty), false, false, false).color, "pretty into a file has no colour");
    }
}
