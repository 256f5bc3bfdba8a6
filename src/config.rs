//! `efmesh.toml`: project configuration, deserialised strictly.
//!
//! Unknown keys are errors naming the key and its line (DECISIONS.md, "Because models are
//! scripts"). Relative paths resolve against the directory holding the config file, never the
//! process's working directory.
//!
//! ```toml
//! [project]
//! models = ["models/**/*.{lua,rhai,sql}"]   # discovery globs (default shown)
//! tests = ["tests/**/*.{lua,rhai}"]          # unit-test files for `efmesh test` (default shown)
//! audits = ["audits/**/*.{lua,rhai,sql}"]   # audit definitions, loaded first (default shown)
//! macros = ["macros/**/*.{lua,rhai}"]       # macro definitions, loaded first (default shown)
//!
//! [engine]
//! path = "efmesh.duckdb"         # DuckDB database file (default shown)
//! threads = 4                    # optional: DuckDB worker threads (default: one per core)
//! memory_limit = "4GB"           # optional: DuckDB memory limit (default: 80 % of RAM)
//! batch_commit_ms = 1000         # a time-range model's batches share a transaction this long (0: one each)
//!
//! [state]
//! path = "efmesh.state.sqlite"   # SQLite state store (default shown)
//!
//! [lake]                         # optional: models with `target = "parquet"`
//! path = "lake"                  # a local directory, or "s3://bucket/prefix"
//!
//! [ducklake]                     # optional: models with `target = "ducklake"`
//! catalog = "lake.ducklake"
//! data_path = "lake_data"
//! ```

use serde::Deserialize;
use std::path::{Path, PathBuf};

/// Default discovery globs.
pub const DEFAULT_MODEL_GLOBS: &[&str] = &["models/**/*.{lua,rhai,sql}"];
/// Default globs of unit-test files (`efmesh test`).
pub const DEFAULT_TEST_GLOBS: &[&str] = &["tests/**/*.{lua,rhai}"];

/// Errors reading or validating `efmesh.toml`.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config: {error}")]
    Read {
        /// Config path.
        path: PathBuf,
        /// Cause (in the message, not a `source`, so a printed cause chain never repeats it).
        error: std::io::Error,
    },
    /// The TOML is malformed or has unknown or mistyped keys.
    #[error("invalid config `{path}`: {message}")]
    Invalid {
        /// Config path.
        path: PathBuf,
        /// The parser's message, naming the key and line, with the value of every secret-looking
        /// key ([`redact_secrets`]) replaced by `<redacted>`.
        message: String,
    },
}

impl ConfigError {
    /// The line of the file at fault, when TOML's message names it (`TOML parse error at line
    /// 4, column 8`).
    pub fn line(&self) -> Option<u32> {
        let ConfigError::Invalid { message, .. } = self else { return None };
        message.split_once("at line ").and_then(|(_, rest)| rest.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()).filter(|l| *l > 0)
    }

    /// A `hint:` line for the CLI, when one helps.
    pub fn hint(&self) -> Option<&'static str> {
        match self {
            ConfigError::Read { error, .. } if error.kind() == std::io::ErrorKind::NotFound => Some(
                "run `efmesh init` to create a project, or pass `--config PATH` (without it, efmesh looks for efmesh.toml here and in every parent directory)",
            ),
            _ => None,
        }
    }
}

/// `[project]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProjectSection {
    /// Globs (relative to the config directory) selecting model files.
    #[serde(default = "default_globs")]
    pub models: Vec<String>,
    /// Globs (relative to the config directory) selecting unit-test files for `efmesh test`.
    #[serde(default = "default_test_globs")]
    pub tests: Vec<String>,
    /// Globs selecting audit files (`define_audit`), evaluated before every model file.
    #[serde(default = "default_audit_globs")]
    pub audits: Vec<String>,
    /// Globs selecting macro files (`define_macro`), evaluated before every model file like
    /// audit files; their macros are called as `@name(…)` from the query of any model.
    #[serde(default = "default_macro_globs")]
    pub macros: Vec<String>,
}

impl ProjectSection {
    /// Every glob list with its key, each glob in the form the walk matches
    /// ([`normalize_glob`]); the first glob that cannot name files inside the project is an
    /// error naming its key.
    fn normalized(mut self) -> Result<Self, String> {
        for (key, globs) in [("models", &mut self.models), ("tests", &mut self.tests), ("audits", &mut self.audits), ("macros", &mut self.macros)] {
            for g in globs.iter_mut() {
                *g = normalize_glob(g).map_err(|why| format!("`project.{key}` glob `{g}` {why}"))?;
            }
        }
        Ok(self)
    }
}

/// `glob` as the discovery walk matches it: paths relative to the project root without a
/// leading `./`, so `./models/*.sql` (or `models//x/./*.sql`) selects what `models/*.sql` does
/// instead of nothing — a glob matching nothing would plan its models as removed. A glob that
/// cannot name a file inside the project (absolute, or with a `..` step) is refused: the walk
/// only sees the project's own files. A glob with brace groups (`{./a/*.lua,b/*.lua}`,
/// `models/{./x,y}/*.sql`) is judged by each brace-free glob it stands for
/// (`brace_alternatives`): one absolute or with a `..` step is refused, and when one of them
/// changes the glob becomes the group of them all (`{a/*.lua,b/*.lua}`); a brace glob whose
/// alternatives are already in walk form is kept as written.
///
/// # Errors
/// Why the glob is refused.
pub fn normalize_glob(glob: &str) -> Result<String, String> {
    let Some(alternatives) = brace_alternatives(glob)? else { return normalize_plain_glob(glob) };
    let mut normalized = Vec::with_capacity(alternatives.len());
    for alternative in &alternatives {
        normalized.push(normalize_plain_glob(alternative).map_err(|why| format!("(its brace alternative `{alternative}`) {why}"))?);
    }
    if normalized == alternatives { Ok(glob.to_string()) } else { Ok(format!("{{{}}}", normalized.join(","))) }
}

/// [`normalize_glob`] of a glob read without its brace groups: `/`-separated steps, `.` and
/// empty steps dropped.
fn normalize_plain_glob(glob: &str) -> Result<String, String> {
    // A leading `\` escapes a glob character (`\[m]odels/*.lua`): not a path separator.
    if glob.starts_with('/') || glob.get(1..3) == Some(":/") || glob.get(1..3) == Some(":\\") {
        return Err("is absolute: discovery globs are relative to the directory of efmesh.toml and match files inside it".to_string());
    }
    let steps: Vec<&str> = glob.split('/').filter(|s| !s.is_empty() && *s != ".").collect();
    if steps.contains(&"..") {
        return Err("leaves the project directory (`..`): discovery globs match files inside the directory of efmesh.toml".to_string());
    }
    if steps.is_empty() {
        return Err("names no file".to_string());
    }
    Ok(steps.join("/"))
}

/// Most brace-free globs one discovery glob may stand for ([`brace_alternatives`]).
const MAX_BRACE_ALTERNATIVES: usize = 1024;

/// Deepest nesting of brace groups [`brace_alternatives`] reads (globset's own limit is 100).
const MAX_BRACE_DEPTH: usize = 100;

/// The brace-free globs `glob` stands for, in order: each `{a,b}` group (nested ones too)
/// replaced by each of its alternatives in turn; `\` escapes and `[…]` classes (whose `{`, `,`,
/// `}` and `/` are characters) copied as written; a literal `,` outside any group written `[,]`,
/// so that the alternatives can be joined into one group again. `None` for a glob without a
/// group, or with an unclosed or too deeply nested one (globset then refuses the glob itself
/// when discovery compiles it).
///
/// # Errors
/// A glob standing for more than [`MAX_BRACE_ALTERNATIVES`] globs.
fn brace_alternatives(glob: &str) -> Result<Option<Vec<String>>, String> {
    let chars: Vec<char> = glob.chars().collect();
    let mut grouped = false;
    let expanded = expand_braces(&chars, &mut 0, 0, &mut grouped)?;
    Ok(expanded.filter(|_| grouped))
}

/// The expansions of the glob text starting at `chars[*at]`, up to the `,` or `}` ending it
/// inside a group (`depth > 0`) or to the end ([`brace_alternatives`]); `*at` is left on that
/// `,` or `}`. `grouped` is set when a group was read. `None` for an unclosed group or one
/// nested deeper than [`MAX_BRACE_DEPTH`].
fn expand_braces(chars: &[char], at: &mut usize, depth: usize, grouped: &mut bool) -> Result<Option<Vec<String>>, String> {
    if depth > MAX_BRACE_DEPTH {
        return Ok(None);
    }
    let mut out = vec![String::new()];
    let append = |out: &mut Vec<String>, text: &str| out.iter_mut().for_each(|o| o.push_str(text));
    while let Some(&c) = chars.get(*at) {
        match c {
            ',' | '}' if depth > 0 => return Ok(Some(out)),
            '{' => {
                *at += 1;
                *grouped = true;
                let mut group = Vec::new();
                loop {
                    let Some(alternative) = expand_braces(chars, at, depth + 1, grouped)? else { return Ok(None) };
                    group.extend(alternative);
                    match chars.get(*at) {
                        Some(',') => *at += 1,
                        Some('}') => {
                            *at += 1;
                            break;
                        }
                        _ => return Ok(None),
                    }
                }
                if out.len().saturating_mul(group.len()) > MAX_BRACE_ALTERNATIVES {
                    return Err(format!("stands for more than {MAX_BRACE_ALTERNATIVES} globs through its brace groups: write it as several globs"));
                }
                out = out.iter().flat_map(|o| group.iter().map(move |g| format!("{o}{g}"))).collect();
            }
            '\\' => {
                let end = (*at + 2).min(chars.len());
                append(&mut out, &chars[*at..end].iter().collect::<String>());
                *at = end;
            }
            '[' => {
                // A class runs to its `]`; a `]` first in it (after `[`, `[!` or `[^`) is a member.
                let mut end = *at + 1;
                if matches!(chars.get(end), Some('!' | '^')) {
                    end += 1;
                }
                if chars.get(end) == Some(&']') {
                    end += 1;
                }
                while chars.get(end).is_some_and(|c| *c != ']') {
                    end += 1;
                }
                let end = (end + 1).min(chars.len());
                append(&mut out, &chars[*at..end].iter().collect::<String>());
                *at = end;
            }
            ',' => {
                append(&mut out, "[,]");
                *at += 1;
            }
            c => {
                append(&mut out, &c.to_string());
                *at += 1;
            }
        }
    }
    // The end of the glob: inside a group, that group was never closed.
    Ok((depth == 0).then_some(out))
}

impl Default for ProjectSection {
    fn default() -> Self {
        Self { models: default_globs(), tests: default_test_globs(), audits: default_audit_globs(), macros: default_macro_globs() }
    }
}

fn default_test_globs() -> Vec<String> {
    DEFAULT_TEST_GLOBS.iter().map(|s| s.to_string()).collect()
}

/// Default audit discovery globs.
pub const DEFAULT_AUDIT_GLOBS: &[&str] = &["audits/**/*.{lua,rhai,sql}"];

/// Default macro discovery globs.
pub const DEFAULT_MACRO_GLOBS: &[&str] = &["macros/**/*.{lua,rhai}"];

fn default_macro_globs() -> Vec<String> {
    DEFAULT_MACRO_GLOBS.iter().map(|s| s.to_string()).collect()
}

fn default_audit_globs() -> Vec<String> {
    DEFAULT_AUDIT_GLOBS.iter().map(|s| s.to_string()).collect()
}

fn default_globs() -> Vec<String> {
    DEFAULT_MODEL_GLOBS.iter().map(|s| s.to_string()).collect()
}

/// `[engine]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineSection {
    /// DuckDB database file, relative to the config directory.
    #[serde(default = "default_engine_path")]
    pub path: PathBuf,
    /// The NAME of an environment variable holding a `postgres://` URL (or a `key=value`
    /// connection string): the project's models then run on that Postgres database instead of
    /// DuckDB ([`Config::engine_file`] is `None`). The URL itself is never read from the file,
    /// logged or stored. Refused together with a DuckDB setting (`path`, `threads`,
    /// `memory_limit`, extensions).
    #[serde(default)]
    pub url_env: Option<String>,
    /// DuckDB's `threads` setting: the most worker threads DuckDB runs queries on, at least 1
    /// (default: DuckDB's own choice, one per core). Set on every DuckDB database efmesh opens.
    #[serde(default)]
    pub threads: Option<u32>,
    /// DuckDB's `memory_limit` setting, e.g. `"4GB"`, `"512MiB"` (default: DuckDB's own choice,
    /// 80 % of the machine's memory): a number and a unit (`KB`, `MB`, `GB`, `TB` for powers of
    /// 1000, `KiB`, `MiB`, `GiB`, `TiB` for powers of 1024), or `"-1"` for no limit. It bounds
    /// DuckDB's buffer manager, not efmesh's own memory. Set on every DuckDB database efmesh
    /// opens; checked when the config loads ([`memory_limit_problem`]).
    #[serde(default)]
    pub memory_limit: Option<String>,
    /// Where DuckDB finds extensions (its `extension_directory` setting), relative to the config
    /// directory: `<dir>/v1.5.5/linux_amd64/<name>.duckdb_extension`. When set (here or by the
    /// `EFMESH_EXTENSION_DIRECTORY` environment variable), efmesh never downloads an extension:
    /// a missing one is an error saying where to put it (air-gapped installs).
    #[serde(default)]
    pub extension_directory: Option<PathBuf>,
    /// Extensions loaded when the database opens, by name (from `extension_directory`) or by
    /// file through [`EngineSection::extensions`].
    #[serde(default)]
    pub load: Vec<String>,
    /// Per-extension files: `httpfs = "/opt/duckdb/httpfs.duckdb_extension"`, relative to the
    /// config directory. Such an extension is loaded from its file whenever efmesh needs it.
    #[serde(default)]
    pub extensions: std::collections::BTreeMap<String, PathBuf>,
    /// How long (milliseconds) consecutive batches of one time-range model may share one engine
    /// transaction: a batch joins the open transaction while less than this has passed since it
    /// began, then it commits and the batches' intervals are recorded done (SPEC §4 invariant 4).
    /// A killed apply loses at most about this much work plus one batch; `0` commits every batch
    /// on its own. Any engine. Default [`DEFAULT_BATCH_COMMIT_MS`].
    #[serde(default = "default_batch_commit_ms")]
    pub batch_commit_ms: u64,
}

/// The default of `[engine] batch_commit_ms`.
pub const DEFAULT_BATCH_COMMIT_MS: u64 = 1000;

fn default_batch_commit_ms() -> u64 {
    DEFAULT_BATCH_COMMIT_MS
}

impl Default for EngineSection {
    fn default() -> Self {
        Self {
            path: default_engine_path(),
            url_env: None,
            threads: None,
            memory_limit: None,
            extension_directory: None,
            load: Vec::new(),
            extensions: Default::default(),
            batch_commit_ms: DEFAULT_BATCH_COMMIT_MS,
        }
    }
}

/// What is wrong with an `[engine] memory_limit` value, if anything: the grammar DuckDB's
/// `memory_limit` setting accepts (a number, optional spaces, a unit: `B`, `KB`/`K`, `MB`/`M`,
/// `GB`/`G`, `TB`/`T`, `KiB`, `MiB`, `GiB`, `TiB` or their spelled-out names, any case; `-1`,
/// `none` or `null` for no limit), except that nothing may follow the unit (DuckDB ignores it).
/// A test checks this agrees with DuckDB on valid and invalid samples.
pub fn memory_limit_problem(value: &str) -> Option<String> {
    let v = value.trim();
    // DuckDB looks at the value's first character as written: a leading `-` means no limit.
    if value.starts_with('-') || v == "none" || v == "null" {
        return None;
    }
    let bad = |why: &str| {
        Some(format!("`engine.memory_limit` = \"{value}\" {why} (expected a number and a unit, e.g. \"4GB\" or \"512MiB\", or \"-1\" for no limit)"))
    };
    let number_end = v.find(|c: char| !(c.is_ascii_digit() || matches!(c, '.' | 'e' | 'E' | '-'))).unwrap_or(v.len());
    let Some(number) = v[..number_end].parse::<f64>().ok().filter(|_| number_end > 0) else {
        return bad("does not start with a number");
    };
    // DuckDB refuses what does not fit its byte count (an unsigned 64-bit number).
    if !number.is_finite() || number * 1024f64.powi(4) >= 1.8e19 {
        return bad("is out of range");
    }
    let unit = v[number_end..].trim_start().to_ascii_lowercase();
    const UNITS: &[&str] = &[
        "b",
        "byte",
        "bytes",
        "k",
        "kb",
        "kilobyte",
        "kilobytes",
        "m",
        "mb",
        "megabyte",
        "megabytes",
        "g",
        "gb",
        "gigabyte",
        "gigabytes",
        "t",
        "tb",
        "terabyte",
        "terabytes",
        "kib",
        "mib",
        "gib",
        "tib",
    ];
    if unit.is_empty() {
        return bad("has no unit");
    }
    if !UNITS.contains(&unit.as_str()) {
        return bad(&format!("has an unknown unit `{}`", v[number_end..].trim_start()));
    }
    None
}

/// The environment variable giving an extension directory when `[engine] extension_directory`
/// is not set.
pub const EXTENSION_DIRECTORY_ENV: &str = "EFMESH_EXTENSION_DIRECTORY";

/// The configuration file's name, looked for by [`discover`].
pub const CONFIG_FILE: &str = "efmesh.toml";

/// The [`CONFIG_FILE`] in `dir` or in its nearest ancestor that has one (as cargo finds
/// `Cargo.toml`); `None` when no ancestor has one. Relative paths in the file found still resolve
/// against its own directory ([`Config::root`]), wherever the command runs from.
pub fn discover(dir: &Path) -> Option<PathBuf> {
    dir.ancestors().map(|d| d.join(CONFIG_FILE)).find(|p| p.is_file())
}

fn default_engine_path() -> PathBuf {
    "efmesh.duckdb".into()
}

/// `[state]`: where the state store lives. Either a SQLite file (`path`, the default
/// `efmesh.state.sqlite`) or a Postgres database (`url_env`: the NAME of an environment variable
/// holding a `postgres://` URL, never the URL itself, and `schema`, default `efmesh_state`).
#[derive(Debug, Clone)]
pub struct StateSection {
    /// SQLite state file, relative to the config directory. For a Postgres state it is the
    /// default and only anchors the project's local records (`.efmesh/` beside it); no file is
    /// ever opened there ([`Config::state_file`] is `None`).
    pub path: PathBuf,
    /// `url_env`: the environment variable holding the Postgres URL (a Postgres state store).
    pub url_env: Option<String>,
    /// `schema`: the Postgres schema holding the store's tables (default `efmesh_state`).
    pub schema: String,
}

impl Default for StateSection {
    fn default() -> Self {
        Self { path: default_state_path(), url_env: None, schema: DEFAULT_STATE_SCHEMA.to_string() }
    }
}

/// The Postgres schema of a state store whose `[state]` names none.
pub const DEFAULT_STATE_SCHEMA: &str = "efmesh_state";

fn default_state_path() -> PathBuf {
    "efmesh.state.sqlite".into()
}

/// `[state]` as written, checked by [`RawStateSection::into_section`].
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStateSection {
    #[serde(default)]
    path: Option<PathBuf>,
    #[serde(default)]
    url_env: Option<String>,
    #[serde(default)]
    schema: Option<String>,
    /// Accepted only to be refused with a message that never quotes it (a URL holds a password).
    #[serde(default)]
    url: Option<toml::Value>,
}

impl RawStateSection {
    fn into_section(self) -> Result<StateSection, String> {
        if self.url.is_some() {
            return Err("`state.url` is not read: a database URL holds a password, and secrets come only from the environment; \
                        put the URL in an environment variable and name it with `url_env = \"PG_URL\"`"
                .to_string());
        }
        match (self.path, self.url_env) {
            (Some(_), Some(_)) => Err("`state.path` (a SQLite file) and `state.url_env` (a Postgres database) are both set: keep one".to_string()),
            (path, None) => {
                if self.schema.is_some() {
                    return Err("`state.schema` applies to a Postgres state store only: set `state.url_env` too, or remove it".to_string());
                }
                Ok(StateSection { path: path.unwrap_or_else(default_state_path), ..StateSection::default() })
            }
            (None, Some(var)) => {
                if var.is_empty() || var.contains(['=', '\0']) || var.contains("://") {
                    return Err(format!("`state.url_env` must name an environment variable (e.g. `PG_URL`), got {var:?}"));
                }
                let schema = self.schema.unwrap_or_else(|| DEFAULT_STATE_SCHEMA.to_string());
                let ok = schema.len() <= 63
                    && schema.chars().next().is_some_and(|c| c.is_ascii_lowercase() || c == '_')
                    && schema.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
                if !ok {
                    return Err(format!("`state.schema` must be a lowercase SQL identifier (letters, digits, `_`, at most 63), got {schema:?}"));
                }
                Ok(StateSection { path: default_state_path(), url_env: Some(var), schema })
            }
        }
    }
}

/// `[lake]`: where models with `target = "parquet"` write their files (see `docs/targets.md`).
///
/// S3 credentials never appear here: they are read from the environment variables named by
/// `s3_access_key_id_env`, `s3_secret_access_key_env` and `s3_session_token_env`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LakeSection {
    /// The lake root: a local directory (relative to the config directory) or `s3://bucket/prefix`.
    pub path: String,
    /// S3 endpoint `host[:port]` for S3-compatible stores (default: AWS). Written with
    /// `http://` or `https://`, the scheme is read at load as `s3_use_ssl` and dropped.
    #[serde(default)]
    pub s3_endpoint: Option<String>,
    /// S3 region (default `us-east-1`).
    #[serde(default)]
    pub s3_region: Option<String>,
    /// `path` or `vhost` addressing (default: DuckDB's, `vhost`).
    #[serde(default)]
    pub s3_url_style: Option<String>,
    /// Whether to use HTTPS (default true).
    #[serde(default)]
    pub s3_use_ssl: Option<bool>,
    /// Environment variable holding the access key id (default `AWS_ACCESS_KEY_ID`).
    #[serde(default = "default_key_id_env")]
    pub s3_access_key_id_env: String,
    /// Environment variable holding the secret access key (default `AWS_SECRET_ACCESS_KEY`).
    #[serde(default = "default_secret_env")]
    pub s3_secret_access_key_env: String,
    /// Environment variable holding a session token, used when set (default `AWS_SESSION_TOKEN`).
    #[serde(default = "default_token_env")]
    pub s3_session_token_env: String,
}

impl LakeSection {
    /// What is wrong with the section's values, if anything.
    fn problem(&self) -> Option<String> {
        if self.path.trim().is_empty() {
            return Some("`lake.path` is empty".into());
        }
        if let Some(rest) = self.path.strip_prefix("s3://") {
            if rest.split('/').next().is_none_or(str::is_empty) {
                return Some(format!("`lake.path` `{}` names no bucket (expected `s3://bucket/prefix`)", self.path));
            }
        } else if self.path.contains("://") {
            return Some(format!("`lake.path` `{}`: only local directories and `s3://` are supported", self.path));
        }
        match self.s3_url_style.as_deref() {
            None | Some("path") | Some("vhost") => None,
            Some(other) => Some(format!("`lake.s3_url_style` must be `path` or `vhost`, got `{other}`")),
        }
    }

    /// True when the lake is an `s3://` location.
    pub fn is_s3(&self) -> bool {
        self.path.starts_with("s3://")
    }

    /// The S3 settings of the section.
    pub fn s3(&self) -> S3Settings {
        S3Settings {
            endpoint: self.s3_endpoint.clone(),
            region: self.s3_region.clone(),
            url_style: self.s3_url_style.clone(),
            use_ssl: self.s3_use_ssl,
            access_key_id_env: self.s3_access_key_id_env.clone(),
            secret_access_key_env: self.s3_secret_access_key_env.clone(),
            session_token_env: self.s3_session_token_env.clone(),
        }
    }
}

/// How DuckDB reaches an S3 location (`[lake]` or `[ducklake]`): the `s3_*` keys of either.
/// Credentials are the NAMES of environment variables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3Settings {
    /// `host[:port]` of an S3-compatible store (default: AWS).
    pub endpoint: Option<String>,
    /// Region (default `us-east-1`).
    pub region: Option<String>,
    /// `path` or `vhost`.
    pub url_style: Option<String>,
    /// HTTPS or not (default true).
    pub use_ssl: Option<bool>,
    /// Variable holding the access key id.
    pub access_key_id_env: String,
    /// Variable holding the secret access key.
    pub secret_access_key_env: String,
    /// Variable holding a session token (used when set).
    pub session_token_env: String,
}

/// Reads a scheme written in `[<section>] s3_endpoint` (`http://127.0.0.1:9000`) as the
/// section's `s3_use_ssl` and leaves the endpoint as `host[:port]`, the form both efmesh's own
/// S3 client (which puts the scheme in front) and DuckDB's S3 secret (`ENDPOINT` without a
/// scheme, `USE_SSL`) take: kept as written, the endpoint became `http://http://…`, an unknown
/// host. A trailing `/` is dropped.
///
/// # Errors
/// A message naming the key when the scheme is neither `http://` nor `https://`, when it
/// contradicts `s3_use_ssl`, or when the endpoint holds a path or no host.
fn split_s3_endpoint(section: &str, endpoint: &mut Option<String>, use_ssl: &mut Option<bool>) -> Result<(), String> {
    let Some(written) = endpoint.as_deref() else { return Ok(()) };
    let lower = written.to_ascii_lowercase();
    let (ssl, rest) = if lower.starts_with("https://") {
        (Some(true), &written["https://".len()..])
    } else if lower.starts_with("http://") {
        (Some(false), &written["http://".len()..])
    } else {
        (None, written)
    };
    let host = rest.trim_end_matches('/');
    if host.is_empty() || host.contains('/') || host.contains(char::is_whitespace) {
        return Err(format!(
            "`{section}.s3_endpoint` must be `host[:port]` (optionally after `http://` or `https://`), got `{written}`{}",
            if ssl.is_none() && host.contains("://") { ": only `http://` and `https://` are understood" } else { "" }
        ));
    }
    if let Some(ssl) = ssl {
        if use_ssl.is_some_and(|set| set != ssl) {
            let scheme = if ssl { "https://" } else { "http://" };
            return Err(format!(
                "`{section}.s3_endpoint` `{written}` says `{scheme}` but `{section}.s3_use_ssl = {}`: remove one of them (the scheme sets `s3_use_ssl`)",
                !ssl
            ));
        }
        *use_ssl = Some(ssl);
    }
    *endpoint = Some(host.to_string());
    Ok(())
}

fn default_key_id_env() -> String {
    "AWS_ACCESS_KEY_ID".into()
}

fn default_secret_env() -> String {
    "AWS_SECRET_ACCESS_KEY".into()
}

fn default_token_env() -> String {
    "AWS_SESSION_TOKEN".into()
}

/// `[ducklake]`: the DuckLake catalog that models with `target = "ducklake"` live in: a local
/// DuckDB file (`catalog`), or a Postgres database (`catalog_url_env`) that several machines
/// share, with the data in a shared place (`data_path = "s3://…"`; see `docs/scaling.md`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DuckLakeSection {
    /// The catalog's metadata database: a local DuckDB file, relative to the config directory.
    /// Empty when the catalog is in Postgres (`catalog_url_env`).
    #[serde(default)]
    pub catalog: PathBuf,
    /// The NAME of an environment variable holding a `postgres://` URL (or a `key=value`
    /// string): the catalog's metadata lives in that Postgres database (DuckDB's
    /// `postgres_scanner` extension). Never the URL itself; it is never logged.
    #[serde(default)]
    pub catalog_url_env: Option<String>,
    /// Where DuckLake writes its parquet data files: a local directory, relative to the config
    /// directory (default: DuckLake's, `<catalog>.files` beside the catalog), or
    /// `s3://bucket/prefix` (reached with the `s3_*` keys below).
    #[serde(default)]
    pub data_path: Option<PathBuf>,
    /// S3 endpoint `host[:port]` of an `s3://` data path (default: AWS); a scheme as in
    /// [`LakeSection::s3_endpoint`].
    #[serde(default)]
    pub s3_endpoint: Option<String>,
    /// S3 region (default `us-east-1`).
    #[serde(default)]
    pub s3_region: Option<String>,
    /// `path` or `vhost` addressing.
    #[serde(default)]
    pub s3_url_style: Option<String>,
    /// Whether to use HTTPS (default true).
    #[serde(default)]
    pub s3_use_ssl: Option<bool>,
    /// Environment variable holding the access key id (default `AWS_ACCESS_KEY_ID`).
    #[serde(default = "default_key_id_env")]
    pub s3_access_key_id_env: String,
    /// Environment variable holding the secret access key (default `AWS_SECRET_ACCESS_KEY`).
    #[serde(default = "default_secret_env")]
    pub s3_secret_access_key_env: String,
    /// Environment variable holding a session token, used when set (default `AWS_SESSION_TOKEN`).
    #[serde(default = "default_token_env")]
    pub s3_session_token_env: String,
}

impl DuckLakeSection {
    /// What is wrong with the section's values, if anything.
    fn problem(&self) -> Option<String> {
        match (&self.catalog_url_env, self.catalog.as_os_str().is_empty()) {
            (Some(_), false) => {
                return Some("`ducklake.catalog` (a local file) and `ducklake.catalog_url_env` (a Postgres database) are both set: keep one".into());
            }
            (None, true) => return Some("`[ducklake]` needs `catalog` (a local file) or `catalog_url_env` (the variable holding a Postgres URL)".into()),
            (Some(var), true) if var.is_empty() || var.contains(['=', '\0']) || var.contains("://") => {
                return Some(format!("`ducklake.catalog_url_env` must name an environment variable (e.g. `DUCKLAKE_PG_URL`), got {var:?}"));
            }
            _ => {}
        }
        let data = self.data_path.as_ref().map(|d| d.to_string_lossy().into_owned()).unwrap_or_default();
        if let Some(rest) = data.strip_prefix("s3://") {
            if rest.split('/').next().is_none_or(str::is_empty) {
                return Some(format!("`ducklake.data_path` `{data}` names no bucket (expected `s3://bucket/prefix`)"));
            }
        } else if data.contains("://") {
            return Some(format!("`ducklake.data_path` `{data}`: only local directories and `s3://` are supported"));
        }
        match self.s3_url_style.as_deref() {
            None | Some("path") | Some("vhost") => None,
            Some(other) => Some(format!("`ducklake.s3_url_style` must be `path` or `vhost`, got `{other}`")),
        }
    }

    /// The data path when it is an `s3://` location.
    pub fn s3_data_path(&self) -> Option<String> {
        self.data_path.as_ref().map(|d| d.to_string_lossy().into_owned()).filter(|d| d.starts_with("s3://"))
    }

    /// The S3 settings of the section.
    pub fn s3(&self) -> S3Settings {
        S3Settings {
            endpoint: self.s3_endpoint.clone(),
            region: self.s3_region.clone(),
            url_style: self.s3_url_style.clone(),
            use_ssl: self.s3_use_ssl,
            access_key_id_env: self.s3_access_key_id_env.clone(),
            secret_access_key_env: self.s3_secret_access_key_env.clone(),
            session_token_env: self.s3_session_token_env.clone(),
        }
    }
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    project: ProjectSection,
    #[serde(default)]
    engine: EngineSection,
    #[serde(default)]
    state: RawStateSection,
    #[serde(default)]
    lake: Option<LakeSection>,
    #[serde(default)]
    ducklake: Option<DuckLakeSection>,
    #[serde(default)]
    environments: RawEnvironmentsSection,
    #[serde(default)]
    lint: LintSection,
}

/// `[lint]`: which of `efmesh check`'s lint rules ([`crate::sql::lint::RULES`]) run and which
/// fail the check. A rule neither ignored nor an error is a warning (exit code unchanged).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LintSection {
    /// Rules never run (`"all"`: every rule).
    #[serde(default)]
    pub ignore: Vec<String>,
    /// Rules whose findings are errors: `check` exits 1 (`"all"`: every rule not ignored).
    #[serde(default)]
    pub error: Vec<String>,
}

impl LintSection {
    /// True when `rule` runs.
    pub fn runs(&self, rule: &str) -> bool {
        !self.ignore.iter().any(|r| r == rule || r == "all")
    }

    /// True when a finding of `rule` fails `check`.
    pub fn is_error(&self, rule: &str) -> bool {
        self.error.iter().any(|r| r == rule || r == "all")
    }

    fn problem(&self) -> Option<String> {
        for (key, list) in [("ignore", &self.ignore), ("error", &self.error)] {
            for name in list {
                if name != "all" && crate::sql::lint::rule(name).is_none() {
                    let hint =
                        crate::core::error::did_you_mean(name, crate::sql::lint::rule_names()).map(|s| format!(" (did you mean `{s}`?)")).unwrap_or_default();
                    let names = crate::sql::lint::rule_names().collect::<Vec<_>>().join(", ");
                    return Some(format!("`lint.{key}`: unknown rule `{name}`{hint}; rules: {names}, or `all`"));
                }
            }
        }
        self.error.iter().find(|r| *r != "all" && self.ignore.contains(r)).map(|r| format!("`lint`: rule `{r}` is both ignored and an error"))
    }
}

/// `[environments]`: the lifecycle of environments other than `prod`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EnvironmentsSection {
    /// `ttl` (`"7d"`, `"12h"`, `"2w"`: [`crate::core::interval::parse_duration`]) in
    /// milliseconds: an environment other than `prod` not promoted for that long is expired and
    /// `efmesh janitor` drops it (`crate::lifecycle`). `None` (no `ttl`): environments never
    /// expire, only `efmesh invalidate` expires one.
    pub ttl: Option<crate::core::interval::Millis>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEnvironmentsSection {
    #[serde(default)]
    ttl: Option<String>,
}

impl RawEnvironmentsSection {
    fn into_section(self) -> Result<EnvironmentsSection, String> {
        let ttl = match self.ttl {
            None => None,
            Some(text) => {
                let d = crate::core::interval::parse_duration(&text).map_err(|e| format!("`environments.ttl`: {e}"))?;
                if d.is_zero() {
                    return Err(format!("`environments.ttl` must be longer than 0, got {text:?} (remove it and environments never expire)"));
                }
                Some(i64::try_from(d.as_millis()).map_err(|_| format!("`environments.ttl` {text:?} is too long"))?)
            }
        };
        Ok(EnvironmentsSection { ttl })
    }
}

/// A loaded configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// The config file.
    pub path: PathBuf,
    /// Its directory: the project root every relative path resolves against.
    pub root: PathBuf,
    /// `[project]`.
    pub project: ProjectSection,
    /// `[engine]`.
    pub engine: EngineSection,
    /// `[state]`.
    pub state: StateSection,
    /// `[lake]`, when configured.
    pub lake: Option<LakeSection>,
    /// `[ducklake]`, when configured.
    pub ducklake: Option<DuckLakeSection>,
    /// `[environments]`.
    pub environments: EnvironmentsSection,
    /// `[lint]`.
    pub lint: LintSection,
    /// The project root's identity (device, inode) when the file was read; `None` when unknown.
    /// A command refuses to open its engine or state store once the root names another directory
    /// ([`Config::root_replaced`]).
    pub root_identity: Option<(u64, u64)>,
}

/// The identity (device, inode) of the directory `p` names now, symlinks followed.
fn dir_identity(p: &Path) -> Option<(u64, u64)> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        fs_err::metadata(p).ok().map(|m| (m.dev(), m.ino()))
    }
    #[cfg(not(unix))]
    {
        let _ = p;
        None
    }
}

impl Config {
    /// Why the project root no longer names the directory the configuration was read from — a
    /// symlink flipped to another release, the directory moved and another put in its place
    /// while the command ran — or `None`. The engine and the state store are opened by path one
    /// after the other: opened across such a swap, they would be two projects' (one's ledger
    /// recording what the other's engine holds), so the opening is refused instead.
    #[must_use]
    pub fn root_replaced(&self) -> Option<String> {
        let known = self.root_identity?;
        (dir_identity(&self.root) != Some(known)).then(|| {
            format!(
                "the project directory `{}` is no longer the directory this command started in (moved, replaced, or a symlink changed while it ran); it stopped before opening the engine or the state store there: run it again",
                self.root.display()
            )
        })
    }

    /// True when the project writes a lake (`[lake]` or `[ducklake]`), which other machines may
    /// share: its writers take one lock ([`crate::state::lease::writer_lease`]).
    #[must_use]
    pub fn writes_a_lake(&self) -> bool {
        self.lake.is_some() || self.ducklake.is_some()
    }

    /// Reads and validates `path`.
    ///
    /// # Errors
    /// [`ConfigError::Read`] when the file cannot be read, [`ConfigError::Invalid`] for bad TOML,
    /// unknown keys or wrong types (the message names the key and line).
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = fs_err::read_to_string(path).map_err(|error| ConfigError::Read { path: path.to_path_buf(), error })?;
        Self::parse(path, &text)
    }

    /// Parses config text as if read from `path`.
    ///
    /// # Errors
    /// As [`Config::load`].
    pub fn parse(path: &Path, text: &str) -> Result<Config, ConfigError> {
        // Every message may quote the file (the parser shows the offending line): secrets
        // written in it never leave in an error.
        let invalid = |message: String| ConfigError::Invalid { path: path.to_path_buf(), message: redact_secrets(text, &message) };
        let mut raw: RawConfig = toml::from_str(text).map_err(|e| invalid(e.to_string().trim_end().replace('\n', "\n  ")))?;
        if raw.project.models.is_empty() {
            return Err(invalid("`project.models` lists no globs".into()));
        }
        let project = raw.project.normalized().map_err(invalid)?;
        if let Some(message) = raw.lake.as_ref().and_then(LakeSection::problem) {
            return Err(invalid(message));
        }
        if let Some(message) = raw.ducklake.as_ref().and_then(DuckLakeSection::problem) {
            return Err(invalid(message));
        }
        if let Some(lake) = &mut raw.lake {
            split_s3_endpoint("lake", &mut lake.s3_endpoint, &mut lake.s3_use_ssl).map_err(invalid)?;
        }
        if let Some(dl) = &mut raw.ducklake {
            split_s3_endpoint("ducklake", &mut dl.s3_endpoint, &mut dl.s3_use_ssl).map_err(invalid)?;
        }
        if let Some(message) = raw.lint.problem() {
            return Err(invalid(message));
        }
        let state = raw.state.into_section().map_err(invalid)?;
        let environments = raw.environments.into_section().map_err(invalid)?;
        if let Some(var) = &raw.engine.url_env {
            if var.is_empty() || var.contains(['=', '\0']) || var.contains("://") {
                return Err(invalid(format!("`engine.url_env` must name an environment variable (e.g. `PG_URL`), got {var:?}")));
            }
            let e = &raw.engine;
            let duckdb_only = [
                ("path", e.path != default_engine_path()),
                ("threads", e.threads.is_some()),
                ("memory_limit", e.memory_limit.is_some()),
                ("extension_directory", e.extension_directory.is_some()),
                ("load", !e.load.is_empty()),
                ("extensions", !e.extensions.is_empty()),
            ];
            if let Some((key, _)) = duckdb_only.iter().find(|(_, set)| *set) {
                return Err(invalid(format!("`engine.{key}` is a DuckDB setting, and `engine.url_env` makes the engine Postgres: remove one of them")));
            }
            if raw.lake.is_some() || raw.ducklake.is_some() {
                let section = if raw.lake.is_some() { "[lake]" } else { "[ducklake]" };
                return Err(invalid(format!(
                    "`{section}` needs the DuckDB engine (the parquet lake and DuckLake are DuckDB features), and `engine.url_env` makes the engine Postgres"
                )));
            }
        }
        if raw.engine.threads == Some(0) {
            return Err(invalid("`engine.threads` must be at least 1, got 0".into()));
        }
        if let Some(message) = raw.engine.memory_limit.as_deref().and_then(memory_limit_problem) {
            return Err(invalid(message));
        }
        let abs = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
        let root = abs.parent().map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from("."));
        let mut engine = raw.engine;
        // Extension paths are used by the engine, which knows nothing of the project root.
        let absolute = |p: &Path| if p.is_absolute() { p.to_path_buf() } else { root.join(p) };
        engine.extension_directory = engine.extension_directory.as_deref().map(absolute);
        for file in engine.extensions.values_mut() {
            *file = absolute(file);
        }
        let root_identity = dir_identity(&root);
        let config = Config { path: abs, root, project, engine, state, lake: raw.lake, ducklake: raw.ducklake, environments, lint: raw.lint, root_identity };
        config.files_apart().map_err(invalid)?;
        Ok(config)
    }

    /// A configuration with defaults rooted at `root` (for embedding and tests).
    pub fn with_root(root: &Path) -> Config {
        Config {
            root_identity: None,
            path: root.join("efmesh.toml"),
            root: root.to_path_buf(),
            project: ProjectSection::default(),
            engine: EngineSection::default(),
            state: StateSection::default(),
            lake: None,
            ducklake: None,
            environments: EnvironmentsSection::default(),
            lint: LintSection::default(),
        }
    }

    /// Resolves `p` against the project root.
    pub fn resolve(&self, p: &Path) -> PathBuf {
        if p.is_absolute() { p.to_path_buf() } else { self.root.join(p) }
    }

    /// The DuckDB file. For a Postgres engine ([`Config::engine_file`] is `None`) a path no
    /// file is opened at.
    pub fn engine_path(&self) -> PathBuf {
        self.resolve(&self.engine.path)
    }

    /// Refuses a configuration whose DuckDB file, SQLite state file and DuckLake catalog file
    /// are not three different files (compared as resolved paths): DuckDB would open the state
    /// store as a database, or efmesh write its state into the engine's file.
    fn files_apart(&self) -> Result<(), String> {
        // The file itself when it exists (symbolic links followed), else the path with its `.`
        // and `..` steps taken.
        let normal = |p: PathBuf| -> PathBuf {
            if let Ok(real) = fs_err::canonicalize(&p) {
                return real;
            }
            let mut out = PathBuf::new();
            for c in p.components() {
                match c {
                    std::path::Component::CurDir => {}
                    std::path::Component::ParentDir => {
                        out.pop();
                    }
                    other => out.push(other),
                }
            }
            out
        };
        if let Some(file) = self.engine_file()
            && let Some(stem) = file.file_name().map(|n| n.to_string_lossy().split('.').next().unwrap_or_default().to_string())
            && ["main", "temp", "system"].iter().any(|r| stem.eq_ignore_ascii_case(r) && stem != *r)
        {
            return Err(format!(
                "`engine.path` names the DuckDB file `{}`: DuckDB names its database `{stem}`, which it cannot tell from its own `{}` catalog or schema; rename the file",
                file.display(),
                stem.to_lowercase()
            ));
        }
        let files = [("engine.path", self.engine_file()), ("state.path", self.state_file()), ("ducklake.catalog", self.ducklake_catalog_file())];
        for (i, (a, fa)) in files.iter().enumerate() {
            for (b, fb) in &files[i + 1..] {
                if let (Some(fa), Some(fb)) = (fa, fb)
                    && normal(fa.clone()) == normal(fb.clone())
                {
                    return Err(format!("`{a}` and `{b}` name the same file `{}`: each needs a file of its own", fa.display()));
                }
            }
        }
        Ok(())
    }

    /// The name DuckDB gives the database of the engine file, lower-cased, as queries qualify
    /// names with it (`efmesh.s.t`): the file name up to its first dot, with `_db` appended when
    /// that is `main`, `temp` or `system` (DuckDB's own rule: `main.duckdb` is `main_db`);
    /// `None` when the engine is a Postgres database.
    pub fn duckdb_database_name(&self) -> Option<String> {
        let file = self.engine_file()?;
        let name = file.file_name()?.to_string_lossy().split('.').next().unwrap_or_default().to_string();
        let name = if matches!(name.as_str(), "main" | "temp" | "system") { format!("{name}_db") } else { name };
        Some(name.to_lowercase())
    }

    /// The DuckDB file, or `None` when the engine is a Postgres database (`[engine] url_env`):
    /// there is no file whose identity could prove its catalog unchanged.
    pub fn engine_file(&self) -> Option<PathBuf> {
        self.engine.url_env.is_none().then(|| self.engine_path())
    }

    /// The SQLite state file; for a Postgres state store ([`Config::state_file`] is `None`) a
    /// path no file is opened at, whose directory anchors the project's local records
    /// (`.efmesh/`: the load cache, the engine-catalog record).
    pub fn state_path(&self) -> PathBuf {
        self.resolve(&self.state.path)
    }

    /// The SQLite state file, or `None` for a Postgres state store (`[state] url_env`): there is
    /// no file whose identity could tell that the store changed.
    pub fn state_file(&self) -> Option<PathBuf> {
        self.state.url_env.is_none().then(|| self.state_path())
    }

    /// The DuckLake catalog's local file, or `None` without `[ducklake]` or when the catalog is
    /// in Postgres (`catalog_url_env`).
    pub fn ducklake_catalog_file(&self) -> Option<PathBuf> {
        self.ducklake.as_ref().filter(|dl| dl.catalog_url_env.is_none()).map(|dl| self.resolve(&dl.catalog))
    }

    /// True when the project has a DuckLake catalog that may hold tables: a Postgres catalog, or
    /// a local file that exists.
    pub fn ducklake_catalog_exists(&self) -> bool {
        self.ducklake.as_ref().is_some_and(|dl| dl.catalog_url_env.is_some() || self.resolve(&dl.catalog).exists())
    }

    /// The lake root as the engine addresses it: `s3://…` as written (without a trailing `/`),
    /// or a local directory made absolute against the project root. `None` without `[lake]`.
    pub fn lake_root(&self) -> Option<String> {
        let lake = self.lake.as_ref()?;
        let p = lake.path.trim_end_matches('/');
        Some(if lake.is_s3() { p.to_string() } else { self.resolve(Path::new(p)).to_string_lossy().into_owned() })
    }
}

/// Fragments of a key name (matched case-insensitively anywhere in it) that mark its value as a
/// secret. Keys ending in `_env` name an environment variable, which is not a secret.
const SECRET_KEY_MARKS: &[&str] = &["password", "passwd", "secret", "token", "key_id", "access_key", "api_key", "apikey", "private_key", "credential"];

/// What replaces a secret in an error message.
pub const REDACTED: &str = "<redacted>";

fn is_secret_key(key: &str) -> bool {
    let k = key.trim().trim_matches(|c| c == '"' || c == '\'').to_ascii_lowercase();
    !k.ends_with("_env") && SECRET_KEY_MARKS.iter().any(|m| k.contains(m))
}

/// The `key = value` assignments of one line of TOML (inline tables too): each key and the byte
/// range of its value as written (inside the quotes for a quoted string).
fn assignments(line: &str) -> Vec<(&str, std::ops::Range<usize>)> {
    let b = line.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    // The end of the quoted text opening at `i` (the closing quote's index, or the line's end).
    let close = |i: usize| {
        let q = b[i];
        let mut j = i + 1;
        while j < b.len() && b[j] != q {
            j += if q == b'"' && b[j] == b'\\' { 2 } else { 1 };
        }
        j.min(b.len())
    };
    while i < b.len() {
        match b[i] {
            b'#' => break,
            b'"' | b'\'' => i = close(i) + 1,
            b'=' => {
                let key_end = line[..i].trim_end().len();
                let key_start = line[..key_end].rfind(|c: char| c.is_ascii_whitespace() || c == '{' || c == ',' || c == '[').map_or(0, |p| p + 1);
                let mut v = i + 1;
                while v < b.len() && (b[v] == b' ' || b[v] == b'\t') {
                    v += 1;
                }
                let (range, next) = match b.get(v) {
                    Some(b'"' | b'\'') => {
                        let end = close(v);
                        (v + 1..end, end + 1)
                    }
                    _ => {
                        let end = line[v..].find(|c: char| c == ',' || c == '}' || c == '#' || c.is_ascii_whitespace()).map_or(b.len(), |p| v + p);
                        (v..end, end)
                    }
                };
                out.push((&line[key_start..key_end], range.start.min(b.len())..range.end.min(b.len())));
                i = next;
            }
            _ => i += 1,
        }
    }
    out
}

/// `message` with every value of a secret-looking key (`password`, `secret`, `token`, `key_id`,
/// `access_key`, … — see [`SECRET_KEY_MARKS`]) of the config `text` replaced by
/// [`REDACTED`]: on each line of the message that quotes an assignment (the parser shows the
/// offending line), and anywhere else the value appears (values of 4 characters or more).
pub fn redact_secrets(text: &str, message: &str) -> String {
    let mut secrets: Vec<&str> =
        text.lines().flat_map(|line| assignments(line).into_iter().filter(|(k, r)| is_secret_key(k) && !r.is_empty()).map(move |(_, r)| &line[r])).collect();
    secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    let mut out: String = message
        .split('\n')
        .map(|original| {
            let mut line = original.to_string();
            // Right to left, so earlier ranges stay valid.
            for (_, r) in assignments(original).into_iter().rev().filter(|(k, r)| is_secret_key(k) && !r.is_empty()) {
                line.replace_range(r, REDACTED);
            }
            line
        })
        .collect::<Vec<_>>()
        .join("\n");
    for s in secrets.iter().filter(|s| s.chars().count() >= 4) {
        out = out.replace(*s, REDACTED);
    }
    redact_url_passwords(&out)
}

/// `text` with the password of every URL in it (`scheme://user:password@host`) replaced by
/// [`REDACTED`], whatever key the URL was written under.
pub fn redact_url_passwords(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let (head, tail) = rest.split_at(at + 3);
        out.push_str(head);
        // The authority ends at the first `/`, `?`, `#`, quote or blank; its userinfo at the last `@`.
        let end = tail.find(|c: char| matches!(c, '/' | '?' | '#' | '"' | '\'' | '`') || c.is_whitespace()).unwrap_or(tail.len());
        let authority = &tail[..end];
        match authority.rfind('@').and_then(|a| authority[..a].find(':').map(|c| (c, a))) {
            Some((colon, a)) => {
                out.push_str(&authority[..=colon]);
                out.push_str(REDACTED);
                out.push_str(&authority[a..]);
            }
            None => out.push_str(authority),
        }
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {

    /// Discovery globs are matched against paths relative to the project root: a leading `./`
    /// (or `//`, `/./`) is dropped, so it selects what the glob without it does instead of
    /// nothing (its models would be planned as removed); absolute globs and `..` steps, which
    /// can never match a file the walk sees, are refused naming the key.
    #[test]
    fn discovery_globs_are_normalized_and_those_leaving_the_project_refused() {
        for (glob, want) in
            [("./models/*.sql", "models/*.sql"), ("models//a/./*.lua", "models/a/*.lua"), ("././tests/**/*.lua", "tests/**/*.lua"), ("m/*.lua", "m/*.lua")]
        {
            assert_eq!(normalize_glob(glob).as_deref(), Ok(want), "{glob}");
        }
        let c = Config::parse(Path::new("/p/efmesh.toml"), "[project]\nmodels = [\"./m/*.lua\"]\ntests = [\"./t/*.lua\"]\n").unwrap();
        assert_eq!((c.project.models, c.project.tests), (vec!["m/*.lua".to_string()], vec!["t/*.lua".to_string()]));
        for (text, key) in [
            ("models = [\"/abs/*.lua\"]", "project.models"),
            ("models = [\"m/*.lua\"]\nmacros = [\"../shared/*.lua\"]", "project.macros"),
            ("models = [\"./\"]", "project.models"),
        ] {
            match Config::parse(Path::new("/p/efmesh.toml"), &format!("[project]\n{text}\n")) {
                Err(ConfigError::Invalid { message, .. }) => assert!(message.contains(&format!("`{key}` glob")), "{text}: {message}"),
                other => panic!("{text}: {other:?}"),
            }
        }
    }

    /// A brace glob is judged by each glob it stands for: a `./` (or `//`) inside a group is
    /// dropped as outside one — `{./models/a/*.lua,models/b/*.lua}` matched nothing of `a`, whose
    /// models were then planned as removed — an alternative that is absolute or has a `..` step
    /// is refused naming it, and a glob whose alternatives are already in walk form (the
    /// default `models/**/*.{lua,rhai,sql}`), has no group (a class `[{,]`) or an unclosed one
    /// (left for globset to refuse) is kept as written.
    #[test]
    fn brace_globs_are_normalized_alternative_by_alternative() {
        for (glob, want) in [
            ("{./models/a/*.lua,models/b/*.lua}", "{models/a/*.lua,models/b/*.lua}"),
            ("models/{./a,b//c}/*.sql", "{models/a/*.sql,models/b/c/*.sql}"),
            ("{./m,n}/x,y.lua", "{m/x[,]y.lua,n/x[,]y.lua}"),
            ("models/**/*.{lua,rhai,sql}", "models/**/*.{lua,rhai,sql}"),
            ("{a,b/{c,d}}/*.lua", "{a,b/{c,d}}/*.lua"),
            ("m/[{,]*.lua", "m/[{,]*.lua"),
            ("m/{a,b", "m/{a,b"),
        ] {
            assert_eq!(normalize_glob(glob).as_deref(), Ok(want), "{glob}");
        }
        let many = "{a,b}".repeat(11);
        for (glob, why) in [
            ("{./a/*.lua,../b/*.lua}", "(its brace alternative `../b/*.lua`) leaves the project directory"),
            ("{/abs/*.lua,m/*.lua}", "(its brace alternative `/abs/*.lua`) is absolute"),
            ("m/{x,{y,..}}/*.lua", "(its brace alternative `m/../*.lua`) leaves the project directory"),
            (many.as_str(), "stands for more than 1024 globs"),
        ] {
            assert!(normalize_glob(glob).is_err_and(|e| e.starts_with(why)), "{glob}: {:?}", normalize_glob(glob));
        }
        let c = Config::parse(Path::new("/p/efmesh.toml"), "[project]\nmodels = [\"{./m/a/*.lua,m/b/*.lua}\"]\n").unwrap();
        assert_eq!(c.project.models, vec!["{m/a/*.lua,m/b/*.lua}".to_string()]);
        match Config::parse(Path::new("/p/efmesh.toml"), "[project]\nmodels = [\"{m/*.lua,../x/*.lua}\"]\n") {
            Err(ConfigError::Invalid { message, .. }) => {
                assert!(message.contains("`project.models` glob `{m/*.lua,../x/*.lua}` (its brace alternative `../x/*.lua`)"), "{message}")
            }
            other => panic!("{other:?}"),
        }
    }

    /// The engine's DuckDB file, the SQLite state file and the DuckLake catalog file must be
    /// three files: the same path for two of them is refused naming both keys.
    #[test]
    fn the_engine_state_and_ducklake_files_must_differ() {
        for (text, keys) in [
            ("[engine]\npath = \"x.db\"\n[state]\npath = \"./x.db\"\n", ("engine.path", "state.path")),
            ("[engine]\npath = \"x.db\"\n[state]\npath = \"sub/../x.db\"\n", ("engine.path", "state.path")),
            ("[state]\npath = \"lake.ducklake\"\n[ducklake]\ncatalog = \"lake.ducklake\"\ndata_path = \"d\"\n", ("state.path", "ducklake.catalog")),
        ] {
            match Config::parse(Path::new("/p/efmesh.toml"), &format!("[project]\nmodels = [\"m/*.lua\"]\n{text}")) {
                Err(ConfigError::Invalid { message, .. }) => {
                    assert!(message.contains(&format!("`{}` and `{}` name the same file", keys.0, keys.1)), "{text}: {message}")
                }
                other => panic!("{text}: {other:?}"),
            }
        }
    }

    #[test]
    fn the_duckdb_database_is_named_as_duckdb_names_it() {
        for (path, name) in
            [("efmesh.duckdb", "efmesh"), ("main.duckdb", "main_db"), ("temp.x.duckdb", "temp_db"), ("system", "system_db"), ("Shop.prod.duckdb", "shop")]
        {
            let c = Config::parse(Path::new("/p/efmesh.toml"), &format!("[project]\nmodels = [\"m/*.lua\"]\n[engine]\npath = \"{path}\"\n")).unwrap();
            assert_eq!(c.duckdb_database_name().as_deref(), Some(name), "{path}");
        }
        // DuckDB keeps `Main` as it is, and then cannot tell it from its own `main`: refused.
        for path in ["Main.duckdb", "SYSTEM.db"] {
            match Config::parse(Path::new("/p/efmesh.toml"), &format!("[project]\nmodels = [\"m/*.lua\"]\n[engine]\npath = \"{path}\"\n")) {
                Err(ConfigError::Invalid { message, .. }) => assert!(message.contains("rename the file"), "{path}: {message}"),
                other => panic!("{path}: {other:?}"),
            }
        }
        assert_eq!(normalize_glob("\\[m]odels/*.lua").as_deref(), Ok("\\[m]odels/*.lua"));
    }
    use super::*;

    fn state_of(text: &str) -> Result<StateSection, String> {
        match Config::parse(Path::new("/p/efmesh.toml"), &format!("[project]\nmodels = [\"m/*.lua\"]\n{text}")) {
            Ok(c) => Ok(c.state),
            Err(ConfigError::Invalid { message, .. }) => Err(message),
            Err(e) => panic!("{e}"),
        }
    }

    fn environments_of(text: &str) -> Result<EnvironmentsSection, String> {
        match Config::parse(Path::new("/p/efmesh.toml"), &format!("[project]\nmodels = [\"m/*.lua\"]\n{text}")) {
            Ok(c) => Ok(c.environments),
            Err(ConfigError::Invalid { message, .. }) => Err(message),
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn an_environment_ttl_is_a_duration_and_none_by_default() {
        assert_eq!(environments_of("").unwrap().ttl, None);
        assert_eq!(environments_of("[environments]\n").unwrap().ttl, None);
        assert_eq!(environments_of("[environments]\nttl = \"7d\"\n").unwrap().ttl, Some(7 * 86_400_000));
        assert_eq!(environments_of("[environments]\nttl = \"36h\"\n").unwrap().ttl, Some(36 * 3_600_000));
        let zero = environments_of("[environments]\nttl = \"0d\"\n").unwrap_err();
        assert!(zero.contains("longer than 0"), "{zero}");
        let unit = environments_of("[environments]\nttl = \"7 parsecs\"\n").unwrap_err();
        assert!(unit.contains("environments.ttl") && unit.contains("unit"), "{unit}");
        let key = environments_of("[environments]\nttl_days = 7\n").unwrap_err();
        assert!(key.contains("ttl_days"), "{key}");
    }

    #[test]
    fn a_postgres_state_is_named_by_an_environment_variable_and_a_schema() {
        let s = state_of("[state]\nurl_env = \"PG_URL\"\n").unwrap();
        assert_eq!((s.url_env.as_deref(), s.schema.as_str()), (Some("PG_URL"), "efmesh_state"));
        let s = state_of("[state]\nurl_env = \"PG_URL\"\nschema = \"team_a\"\n").unwrap();
        assert_eq!(s.schema, "team_a");
        let c = Config::parse(Path::new("/p/efmesh.toml"), "[project]\nmodels = [\"m/*.lua\"]\n[state]\nurl_env = \"PG_URL\"\n").unwrap();
        assert_eq!(c.state_file(), None);
        let c = Config::parse(Path::new("/p/efmesh.toml"), "[project]\nmodels = [\"m/*.lua\"]\n").unwrap();
        assert_eq!(c.state_file(), Some(PathBuf::from("/p/efmesh.state.sqlite")));
    }

    #[test]
    fn a_state_with_both_a_file_and_a_database_or_a_literal_url_is_refused_without_quoting_the_url() {
        let both = state_of("[state]\npath = \"s.sqlite\"\nurl_env = \"PG_URL\"\n").unwrap_err();
        assert!(both.contains("both set"), "{both}");
        let literal = state_of("[state]\nurl = \"postgres://efmesh:hunter2secret@db:5432/app\"\n").unwrap_err();
        assert!(literal.contains("url_env") && !literal.contains("hunter2secret"), "{literal}");
        let schema_alone = state_of("[state]\nschema = \"x\"\n").unwrap_err();
        assert!(schema_alone.contains("Postgres"), "{schema_alone}");
        let bad_schema = state_of("[state]\nurl_env = \"PG_URL\"\nschema = \"Bad-Name\"\n").unwrap_err();
        assert!(bad_schema.contains("identifier"), "{bad_schema}");
        // A syntax error on the URL's line quotes the line: its password is still redacted.
        let broken = state_of("[state]\nurl = \"postgres://efmesh:hunter2secret@db/app\" oops\n").unwrap_err();
        assert!(!broken.contains("hunter2secret"), "{broken}");
    }

    #[test]
    fn url_passwords_are_redacted_wherever_they_appear() {
        assert_eq!(redact_url_passwords("at postgres://u:p4ss@h:5/db?x=1 and s3://b/k"), "at postgres://u:<redacted>@h:5/db?x=1 and s3://b/k");
        assert_eq!(redact_url_passwords("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(redact_url_passwords("\"postgresql://a:b:c@h\""), "\"postgresql://a:<redacted>@h\"");
    }

    #[test]
    fn secrets_never_appear_in_config_errors() {
        let secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
        for text in [
            format!("[lake]\npath = \"lake\"\ns3_secret_access_key = \"{secret}\"\n"),
            format!("[state]\npath = \"s.db\"\npassword = '{secret}'\n"),
            format!("[engine]\nauth = {{ token = \"{secret}\", user = \"me\" }}\n"),
            format!("[state]\napi_key = {secret}\n"),
            format!("[lake]\npath = \"s3://\"\ns3_access_key_id_env = \"K\"\naws_access_key = \"{secret}\"\n"),
        ] {
            let err = Config::parse(Path::new("/p/efmesh.toml"), &text).unwrap_err().to_string();
            assert!(!err.contains(secret) && !err.contains("wJalr"), "{err}");
        }
        // Short values are redacted on the quoted line; names of environment variables are not secrets.
        let err = Config::parse(Path::new("/p/efmesh.toml"), "[state]\ntoken = \"ab\"\n").unwrap_err().to_string();
        assert!(err.contains("token = \"<redacted>\"") && !err.contains("\"ab\""), "{err}");
        assert_eq!(redact_secrets("x_token_env = \"MY_VAR\"", "x_token_env = \"MY_VAR\""), "x_token_env = \"MY_VAR\"");
    }

    #[test]
    fn unknown_keys_are_named() {
        let err = Config::parse(Path::new("/p/efmesh.toml"), "[engine]\npaht = \"x.duckdb\"\n").unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("paht"), "{msg}");
        let err = Config::parse(Path::new("/p/efmesh.toml"), "[stat]\n").unwrap_err();
        assert!(err.to_string().contains("stat"), "{err}");
    }

    #[test]
    fn lake_sections_parse_and_resolve() {
        let c = Config::parse(Path::new("/p/efmesh.toml"), "[lake]\npath = \"out/lake/\"\n[ducklake]\ncatalog = \"l.ducklake\"\n").unwrap();
        assert_eq!(c.lake_root().as_deref(), Some("/p/out/lake"));
        assert_eq!(c.ducklake.as_ref().map(|d| c.resolve(&d.catalog)), Some(PathBuf::from("/p/l.ducklake")));
        let s3 = Config::parse(Path::new("/p/efmesh.toml"), "[lake]\npath = \"s3://b/x/\"\ns3_url_style = \"path\"\n").unwrap();
        assert_eq!(s3.lake_root().as_deref(), Some("s3://b/x"));
        assert_eq!(s3.lake.unwrap().s3_access_key_id_env, "AWS_ACCESS_KEY_ID");
        for bad in ["path = \"s3://\"", "path = \"gs://b\"", "path = \"x\"\ns3_url_style = \"virtual\"", "path = \"x\"\ns3_key = \"k\""] {
            let err = Config::parse(Path::new("/p/efmesh.toml"), &format!("[lake]\n{bad}\n")).unwrap_err();
            assert!(err.to_string().contains("lake") || err.to_string().contains("s3_key"), "{err}");
        }
        assert!(Config::with_root(Path::new("/p")).lake_root().is_none());
    }

    /// An `s3_endpoint` written with a scheme is read as `s3_use_ssl` and kept as `host[:port]`
    /// (both the S3 client and DuckDB's secret put the scheme in front themselves: kept, it
    /// became `http://http://…`); a scheme contradicting `s3_use_ssl`, another scheme, or a path
    /// is refused naming the key.
    #[test]
    fn an_s3_endpoint_scheme_sets_use_ssl_and_is_dropped() {
        let parse = |section: &str, keys: &str| {
            let path = if section == "lake" { "path = \"s3://b/x\"" } else { "catalog = \"l.ducklake\"\ndata_path = \"s3://b/d\"" };
            Config::parse(Path::new("/p/efmesh.toml"), &format!("[{section}]\n{path}\n{keys}\n"))
        };
        let lake = |keys: &str| parse("lake", keys).map(|c| c.lake.map(|l| (l.s3_endpoint, l.s3_use_ssl)).unwrap());
        let some = |e: &str, ssl: Option<bool>| -> Result<(Option<String>, Option<bool>), String> { Ok((Some(e.to_string()), ssl)) };
        assert_eq!(lake("s3_endpoint = \"http://127.0.0.1:9000\"").map_err(|e| e.to_string()), some("127.0.0.1:9000", Some(false)));
        assert_eq!(lake("s3_endpoint = \"HTTPS://minio.internal:9000/\"").map_err(|e| e.to_string()), some("minio.internal:9000", Some(true)));
        assert_eq!(lake("s3_endpoint = \"http://m:9000\"\ns3_use_ssl = false").map_err(|e| e.to_string()), some("m:9000", Some(false)));
        assert_eq!(lake("s3_endpoint = \"m:9000\"").map_err(|e| e.to_string()), some("m:9000", None));
        assert_eq!(lake("s3_endpoint = \"m:9000\"\ns3_use_ssl = false").map_err(|e| e.to_string()), some("m:9000", Some(false)));
        let dl = parse("ducklake", "s3_endpoint = \"http://127.0.0.1:9000\"").unwrap().ducklake.unwrap().s3();
        assert_eq!((dl.endpoint.as_deref(), dl.use_ssl), (Some("127.0.0.1:9000"), Some(false)));
        for (section, keys, want) in [
            ("lake", "s3_endpoint = \"http://m:9000\"\ns3_use_ssl = true", "`lake.s3_use_ssl = true`"),
            ("ducklake", "s3_endpoint = \"https://m:9000\"\ns3_use_ssl = false", "`ducklake.s3_use_ssl = false`"),
            ("lake", "s3_endpoint = \"ftp://m:9000\"", "only `http://` and `https://`"),
            ("lake", "s3_endpoint = \"http://m:9000/bucket\"", "`lake.s3_endpoint` must be `host[:port]`"),
            ("ducklake", "s3_endpoint = \"http://\"", "`ducklake.s3_endpoint` must be `host[:port]`"),
        ] {
            let err = parse(section, keys).unwrap_err().to_string();
            assert!(err.contains(&format!("`{section}.s3_endpoint`")) && err.contains(want), "{keys}: {err}");
        }
    }

    #[test]
    fn paths_resolve_against_the_config_directory() {
        let c = Config::parse(Path::new("/p/q/efmesh.toml"), "[state]\npath = \"s/state.db\"\n").unwrap();
        assert_eq!(c.state_path(), PathBuf::from("/p/q/s/state.db"));
        assert_eq!(c.engine_path(), PathBuf::from("/p/q/efmesh.duckdb"));
        assert_eq!(c.project.models, vec!["models/**/*.{lua,rhai,sql}".to_string()]);
    }

    #[test]
    fn extension_paths_resolve_against_the_config_directory() {
        let text = "[engine]\nextension_directory = \"ext\"\nload = [\"httpfs\"]\n[engine.extensions]\nducklake = \"x/ducklake.duckdb_extension\"\n";
        let c = Config::parse(Path::new("/p/q/efmesh.toml"), text).unwrap();
        assert_eq!(c.engine.extension_directory, Some(PathBuf::from("/p/q/ext")));
        assert_eq!(c.engine.extensions["ducklake"], PathBuf::from("/p/q/x/ducklake.duckdb_extension"));
        assert_eq!(c.engine.load, vec!["httpfs".to_string()]);
    }
}
