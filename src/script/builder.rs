//! The language-neutral model builder: every host (Lua today, Rhai and `.sql` next) turns its
//! values into a JSON-like spec and calls [`build_model`], so all languages share one set of
//! rules, defaults and messages.
//!
//! Query text produced by a host may contain *site markers* (`\u{1}<index>\u{2}`) standing for
//! `ref()` and `cols()` calls recorded in a [`Sites`] table; [`parse_query`] turns the text into
//! a [`Fragment`]. Markers are how refs survive string concatenation and `string.format` in the
//! scripts.

use super::foreign::Lang;
use super::macros::SourceMap;
use crate::core::error::did_you_mean;
use crate::core::fragment::{ColsSite, Fragment, Node, RefSite};
use crate::core::interval::{Grain, parse_instant};
use crate::core::kind::{
    CsvOptions, DEFAULT_BATCH_SIZE, DEFAULT_VALID_FROM, DEFAULT_VALID_TO, External, FileFormat, Kind, Partitioned, ScdType2, Seed, TimeRange, UniqueKey,
};
use crate::core::target::{TARGET_NAMES, Target};
use crate::core::{Column, LoadError, Location, Model, ModelName, Schema};
use serde_json::{Map, Value};

const MARK_OPEN: char = '\u{1}';
const MARK_CLOSE: char = '\u{2}';

/// A recorded `ref()` or `cols()` call.
#[derive(Debug, Clone)]
pub enum Site {
    /// `ref(target)`.
    Ref(RefSite),
    /// `cols(parent, …)`; an empty column list means "every declared column".
    Cols(ColsSite),
}

/// Every site recorded during one project load.
#[derive(Debug, Default)]
pub struct Sites(Vec<Site>);

impl Sites {
    /// Records a site and returns the marker text to splice into SQL.
    pub fn record(&mut self, site: Site) -> String {
        self.0.push(site);
        format!("{MARK_OPEN}{}{MARK_CLOSE}", self.0.len() - 1)
    }

    /// The model a `ref()` call's marker (`text` is exactly the marker `ref()` returned) refers
    /// to: `cols(ref("s.a"), …)` names the parent as `cols("s.a", …)` does.
    pub fn ref_target(&self, text: &str) -> Option<ModelName> {
        let inner = text.strip_prefix(MARK_OPEN)?.strip_suffix(MARK_CLOSE)?;
        match self.get(inner)? {
            Site::Ref(r) => Some(r.target.clone()),
            Site::Cols(_) => None,
        }
    }

    /// The site a marker's inner text (`<index>`) names.
    pub fn get(&self, inner: &str) -> Option<&Site> {
        inner.parse::<usize>().ok().and_then(|i| self.0.get(i))
    }
}

/// Splits query text on site markers and `@start`/`@end` into a fragment.
///
/// # Errors
/// A message when the text holds a malformed or unknown marker.
pub fn parse_query(text: &str, sites: &Sites) -> Result<Fragment, String> {
    let mut f = Fragment::default();
    let mut rest = text;
    while let Some(open) = rest.find(MARK_OPEN) {
        f.push_sql_with_bounds(&rest[..open]);
        let after = &rest[open + 1..];
        let close = after.find(MARK_CLOSE).ok_or("malformed ref marker in query text")?;
        let idx: usize = after[..close].parse().map_err(|_| "malformed ref marker in query text")?;
        match sites.0.get(idx) {
            Some(Site::Ref(r)) => f.nodes.push(Node::Ref(r.clone())),
            Some(Site::Cols(c)) => f.nodes.push(Node::Cols(c.clone())),
            None => return Err("unknown ref marker in query text".into()),
        }
        rest = &after[close + 1..];
    }
    f.push_sql_with_bounds(rest);
    Ok(f)
}

/// The file line of each line of a Lua or Rhai model's query ([`Model::query_lines`]), when the
/// text the script built (`written`: string literals, with the markers of the `ref()` and
/// `cols()` calls spliced between them by `..`, `%s`, `+` or `${…}`) is written as it is in
/// `source`, the file holding the `define_model` call (its bytes as evaluated): each literal
/// piece found after the one before, the first exactly once in the file, so a line is never
/// guessed. `expanded` is `written` with its macro calls expanded (`expansion` leads back: a
/// line a call expanded to is the call's). Empty otherwise — a literal with escapes (`"a\nb"`),
/// text the script computed (a value `%s`-formatted in, `string.rep`, a loop), or written in
/// another file —: an error at a line of the query is then reported at the model's own line,
/// naming the line of the query. A file with CRLF line ends is also searched with LF ones
/// (Lua reads a long string's `\r\n` as `\n`); its lines are the same.
pub fn script_query_lines(source: &[u8], written: &str, expanded: &str, expansion: &SourceMap) -> Vec<u32> {
    let lf;
    let (source, pieces) = match placed_pieces(source, written) {
        Some(pieces) => (source, pieces),
        None if memchr::memchr(b'\r', source).is_some() => {
            lf = lf_only(source);
            match placed_pieces(&lf, written) {
                Some(pieces) => (lf.as_slice(), pieces),
                None => return Vec::new(),
            }
        }
        None => return Vec::new(),
    };
    let newlines: Vec<usize> = memchr::memchr_iter(b'\n', source).collect();
    let line_at = |at: usize| u32::try_from(newlines.partition_point(|&n| n < at) + 1).unwrap_or(u32::MAX);
    std::iter::once(0)
        .chain(expanded.match_indices('\n').map(|(i, _)| i + 1))
        .map(|start| {
            let at = expansion.input_offset(start).min(written.len());
            // The piece holding `at` (the last one starting at or before it), up to its end (a
            // line starting at a marker starts where the piece before it ends).
            let (text_at, source_at, len) = pieces[pieces.partition_point(|p| p.0 <= at).saturating_sub(1)];
            line_at(source_at + at.saturating_sub(text_at).min(len))
        })
        .collect()
}

/// The most bytes between two literal pieces of a query in its file ([`placed_pieces`]): room
/// for the `ref(…)`/`cols(…)` call and the concatenation or interpolation around it.
const PIECE_GAP_MAX: usize = 240;

/// The literal pieces of `written` (the text between its site markers; empty ones left out) as
/// `(offset in written, offset in source, length)`: the first found exactly once in `source`,
/// each next one after the one before, within [`PIECE_GAP_MAX`] bytes of it and no
/// `define_model` between (the call and concatenation joining them: a piece kept in a variable
/// written elsewhere would be matched to the same text further on, another model's query).
/// `None` when one is not found so, the first is found twice, or there is no piece.
fn placed_pieces(source: &[u8], written: &str) -> Option<Vec<(usize, usize, usize)>> {
    let mut placed: Vec<(usize, usize, usize)> = Vec::new();
    let (mut at, mut from) = (0, 0);
    loop {
        let end = written[at..].find(MARK_OPEN).map_or(written.len(), |i| at + i);
        let piece = &written.as_bytes()[at..end];
        if !piece.is_empty() {
            let found = if placed.is_empty() {
                let first = memchr::memmem::find(source, piece)?;
                if memchr::memmem::find(&source[first + 1..], piece).is_some() {
                    return None;
                }
                first
            } else {
                let found = from + memchr::memmem::find(&source[from..], piece)?;
                let gap = &source[from..found];
                if gap.len() > PIECE_GAP_MAX || memchr::memmem::find(gap, b"define_model").is_some() {
                    return None;
                }
                found
            };
            placed.push((at, found, piece.len()));
            from = found + piece.len();
        }
        if end == written.len() {
            break;
        }
        at = end + written[end..].find(MARK_CLOSE)? + MARK_CLOSE.len_utf8();
    }
    (!placed.is_empty()).then_some(placed)
}

/// `source` with each `\r\n` read as `\n`.
fn lf_only(source: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(source.len());
    let mut rest = source;
    while let Some(i) = memchr::memmem::find(rest, b"\r\n") {
        out.extend_from_slice(&rest[..i]);
        rest = &rest[i + 1..];
    }
    out.extend_from_slice(rest);
    out
}

/// The Jinja tags (dbt's templating: `{{ ref('x') }}`, `{% if … %}`, `{# … #}`) of SQL text,
/// outside its string literals, quoted identifiers and comments: each one's byte offset and its
/// text up to its closing `}}`, `%}` or `#}` (within [`JINJA_TAG_MAX`] bytes: else up to the end
/// of its line, with `…`), on one line (`{{\n  config(…)\n}}` shown `{{ config(…) }}`), cut with
/// `…` after 80 characters. Neither engine reads them: `{%` is no SQL; a `{#` counts only when
/// no digit follows it and a `#}` closes it within [`JINJA_TAG_MAX`] bytes, not DuckDB's
/// positional reference as a map key (`MAP {#1: 'x'}`); and a `{{` counts only when a name
/// follows it that a call, an attribute, a filter or the closing `}}` follows (`{{ ref(`,
/// `{{ this }}`), not a struct key (DuckDB's `MAP {{a: 1}: 'x'}`).
pub(super) fn jinja_tags(text: &str) -> Vec<(usize, String)> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if let Some(end) = crate::core::fragment::skip_literal_or_comment(b, i) {
            i = end;
            continue;
        }
        let close = match (b[i], b.get(i + 1)) {
            (b'{', Some(b'%')) => "%}",
            (b'{', Some(b'#')) if !b.get(i + 2).is_some_and(u8::is_ascii_digit) => "#}",
            (b'{', Some(b'{')) if jinja_expression(&text[i + 2..]) => "}}",
            _ => {
                i += 1;
                continue;
            }
        };
        let mut limit = text.len().min(i + 2 + JINJA_TAG_MAX);
        while !text.is_char_boundary(limit) {
            limit -= 1;
        }
        let (end, closed) = match text[i + 2..limit].find(close) {
            Some(p) => (i + 2 + p + close.len(), true),
            // A `{#` no `#}` closes is no Jinja comment (Jinja refuses it too): the SQL's own.
            None if close == "#}" => {
                i += 2;
                continue;
            }
            None => (text[i..].find('\n').map_or(text.len(), |p| i + p), false),
        };
        let written = text[i..end].split_whitespace().collect::<Vec<_>>().join(" ");
        let mut shown: String = written.chars().take(80).collect();
        if !closed || shown.len() < written.len() {
            shown.push('…');
        }
        out.push((i, shown));
        i = end;
    }
    out
}

/// How far [`jinja_tags`] looks for a tag's closing `}}`, `%}` or `#}`, in bytes.
const JINJA_TAG_MAX: usize = 500;

/// Whether the text after a `{{` starts a Jinja expression: a name (after Jinja's `-` and blanks)
/// followed by `(`, `.`, `[`, `|`, `-` or `}`.
fn jinja_expression(after: &str) -> bool {
    let rest = after.trim_start_matches('-').trim_start();
    let name = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(rest.len());
    name > 0 && !rest.starts_with(|c: char| c.is_ascii_digit()) && matches!(rest[name..].trim_start().chars().next(), Some('(' | '.' | '[' | '|' | '-' | '}'))
}

/// The quoted arguments of a Jinja call given by position (`'stg', 'orders'` of `source('stg',
/// 'orders')`), not those given by name (`v='2'`).
fn jinja_positional_strings(args: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut prev = ' ';
    let mut chars = args.chars();
    while let Some(c) = chars.next() {
        if c == '\'' || c == '"' {
            let s: String = chars.by_ref().take_while(|d| *d != c).collect();
            if prev != '=' {
                out.push(s);
            }
            prev = c;
        } else if !c.is_whitespace() {
            prev = c;
        }
    }
    out
}

/// The load error of Jinja tag `tag` (as [`jinja_tags`] shows it) in a model written in `lang`:
/// its message (efmesh does not use Jinja; `at` adds where the tag is, e.g. " (line 2 of the
/// query)") and a hint saying what `lang` writes instead — `@ref(x)` in a `.sql` file,
/// `ref("x")` in Lua and Rhai for dbt's `ref`; an `external` model for `source`; the header lines
/// or `define_model` fields for `config`; `@this` for `this`; `@start`/`@end` for
/// `is_incremental()`. A dbt model's name becomes `<schema>.<name>` (efmesh's names have a schema).
pub(super) fn jinja_problem(tag: &str, lang: Lang, at: &str) -> (String, String) {
    let message = format!("`{tag}`{at} is Jinja (dbt's templating), which efmesh does not use: a model's query is plain SQL");
    let inner = tag.get(2..).unwrap_or_default().trim_start_matches('-').trim_start();
    let name_len = inner.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(inner.len());
    let (call, args) = inner.split_at(name_len);
    let args = jinja_positional_strings(args);
    let model = |s: Option<&String>| match s {
        Some(s) if s.contains('.') => s.clone(),
        Some(s) if !s.is_empty() => format!("<schema>.{s}"),
        _ => "<schema>.<table>".to_string(),
    };
    let reference = |name: &str| match lang {
        Lang::Sql => format!("`@ref({name})` (and list `{name}` in `-- refs:`)"),
        Lang::Lua => format!("`ref(\"{name}\")` spliced into the query text (`\"SELECT … FROM \" .. ref(\"{name}\")`)"),
        Lang::Rhai => format!("`ref(\"{name}\")` spliced into the query text (`` `SELECT … FROM ${{ref(\"{name}\")}}` ``)"),
    };
    let hint = match (tag.starts_with("{{"), call) {
        (true, "ref") => {
            let target = model(args.get(1).or(args.first()));
            let named = if target.starts_with("<schema>.") { "; a model's name is `<schema>.<table>`" } else { "" };
            format!("write {}{named}", reference(&target))
        }
        (true, "source") => {
            let relation = format!(
                "{}.{}",
                args.first().filter(|s| !s.is_empty()).map_or("<schema>", String::as_str),
                args.get(1).filter(|s| !s.is_empty()).map_or("<table>", String::as_str)
            );
            let external = match lang {
                Lang::Sql => format!("`-- kind: external(table = {relation})`"),
                Lang::Lua => format!("`kind = kind.external {{ table = \"{relation}\" }}`"),
                Lang::Rhai => format!("`kind: kind::external(#{{ table: \"{relation}\" }})`"),
            };
            format!("a dbt source is a model of kind `external` here: declare `{relation}` as one ({external}), then read it with {}", reference(&relation))
        }
        (true, "config") => match lang {
            Lang::Sql => "a `.sql` model's settings are its header lines: `-- kind: full` for `materialized='table'`, `-- kind: view` for `'view'`, `-- kind: incremental_by_unique_key(key = id)` for an incremental model with a `unique_key`".to_string(),
            Lang::Lua => "a model's settings are fields of `define_model`: `kind = kind.full()` for `materialized='table'`, `kind = kind.view()` for `'view'`, `kind = kind.incremental_by_unique_key { key = \"id\" }` for an incremental model with a `unique_key`".to_string(),
            Lang::Rhai => "a model's settings are fields of `define_model`: `kind: kind::full()` for `materialized='table'`, `kind: kind::view()` for `'view'`, `kind: kind::incremental_by_unique_key(#{ key: \"id\" })` for an incremental model with a `unique_key`".to_string(),
        },
        (true, "this") => "write `@this`: the model's own table (in `incremental_by_time_range` and `incremental_by_unique_key` models)".to_string(),
        _ if tag.contains("is_incremental") => {
            "an `incremental_by_time_range` model computes its intervals one at a time: filter its rows with `@start` and `@end`, without an `is_incremental()` branch".to_string()
        }
        _ => {
            let build = match lang {
                Lang::Sql => "the query is SQL as written",
                Lang::Lua => "build the query text in Lua",
                Lang::Rhai => "build the query text in Rhai",
            };
            format!(
                "{build}: read another model with {}, the interval's bounds with `@start`/`@end`, the model's own table with `@this`; reusable SQL is a macro, `@name(…)`",
                reference("<schema>.<table>")
            )
        }
    };
    (message, hint)
}

/// The message of a query's `@word` no rule gives a meaning ([`Fragment::unknown_markers`]).
fn unknown_marker(name: &str) -> String {
    let known = ["start", "end", "this"].into_iter().chain(crate::core::fragment::Bound::ALL.iter().map(|(m, _)| *m));
    let like = crate::core::error::did_you_mean(name, known).map(|k| format!(" (did you mean `@{k}`?)")).unwrap_or_default();
    format!(
        "unknown marker `@{name}` in the query{like}: the markers are `@start`, `@end` (timestamps), `@start_date`/`@end_date`, `@start_ds`/`@end_ds`, `@start_ts`/`@end_ts` and `@this`; DuckDB would read `@{name}` as `abs({name})` (write `abs(…)` for that)"
    )
}

/// The error of a `ref()`/`cols()` call placed inside a string literal, a quoted identifier or a
/// comment of `model`'s query ([`Fragment::quoted_sites`]), at the call's file:line. The call
/// renders its SQL text there, read by nobody although a dependency is recorded: in a literal
/// the relation's name (or column names) becomes text — only an external read from files,
/// rendered `read_csv('…')`, has quotes that end the literal early (the engine's parser error
/// at build time, while `check` and `render` pass); in a quoted identifier the rendered name's
/// double quotes end the identifier early.
fn quoted_site(q: &crate::core::fragment::QuotedSite<'_>, model: Option<&ModelName>) -> LoadError {
    let (what, location) = match q.node {
        Node::Cols(c) => (format!("`cols()` of model `{}`", c.parent), Some(c.location.clone())),
        Node::Ref(r) => (format!("the reference to model `{}`", r.target), Some(r.location.clone())),
        _ => ("a reference".to_string(), None),
    };
    let (why, hint) = if q.inside == "a comment" {
        ("a reference inside a comment reads nothing (yet records a dependency)".to_string(), "move it out of the comment, or drop it")
    } else {
        let why = match (q.inside, q.node) {
            ("a string literal", Node::Cols(_)) => {
                "a call inside a string literal inlines the column names there as text: nothing is read (yet a dependency is recorded)".to_string()
            }
            ("a string literal", _) => "a reference inside a string literal inlines the relation's name there as text: nothing is read (yet a dependency is recorded; an external read from files renders as `read_csv('…')`, whose quotes would end the literal early)".to_string(),
            (inside, _) => format!(
                "a reference inside {inside} renders quoted names there, whose quotes would end the quoting early: nothing is read (yet a dependency is recorded)"
            ),
        };
        (
            why,
            "move it out of the quotes: to read the relation, put the reference where a table goes (`FROM …`); for its name as text, write the name in the literal",
        )
    };
    LoadError::new(location, model.cloned(), format!("{what} is inside {} of the query: {why}", q.inside)).with_hint(hint)
}

/// Fills `cols(parent)` calls that named no columns with the parent's declared columns, once all
/// models are known.
pub fn expand_all_cols(models: &mut [Model]) {
    let schemas: std::collections::BTreeMap<ModelName, Vec<String>> =
        models.iter().map(|m| (m.name.clone(), m.relation_columns().into_iter().map(|c| c.name).collect())).collect();
    for m in models.iter_mut() {
        if let Some(body) = &mut m.body {
            for n in &mut body.nodes {
                if let Node::Cols(c) = n
                    && c.columns.is_empty()
                    && let Some(cols) = schemas.get(&c.parent)
                {
                    c.columns = cols.clone();
                }
            }
        }
    }
}

const MODEL_KEYS: &[&str] = &[
    "name",
    "kind",
    "schema",
    "query",
    "grain",
    "description",
    "target",
    "cron",
    "pre_statements",
    "post_statements",
    "statements_affect_data",
    "owner",
    "tags",
    "column_descriptions",
    "ignored_lints",
    "signals",
];

/// Builds a model from a host-neutral spec (`name`, `kind`, `schema`, `grain`, `description`, `target`;
/// the query arrives separately as text with markers).
///
/// # Errors
/// Every problem found in the spec, each naming the field at fault.
///
/// Messages about a field are worded as the language of `location`'s file writes it
/// ([`Lang::of`]; Lua for another file): a `.sql` model missing its schema is told about its
/// `-- schema:` header line, not about `define_model`'s `schema` field.
pub fn build_model(spec: &Map<String, Value>, query: Option<&str>, sites: &Sites, location: Location) -> Result<Model, Vec<LoadError>> {
    let lang = Lang::of(&location.file).unwrap_or(Lang::Lua);
    let mut errors = Vec::new();
    let name = match spec.get("name") {
        Some(Value::String(s)) => match ModelName::parse(s) {
            Ok(n) => Some(n),
            Err(e) => {
                errors.push(LoadError::new(Some(location.clone()), None, e.to_string()));
                None
            }
        },
        Some(_) => {
            errors.push(LoadError::new(Some(location.clone()), None, "`name` must be a string `<schema>.<table>`"));
            None
        }
        None => {
            errors.push(LoadError::new(Some(location.clone()), None, "`define_model` needs a `name`"));
            None
        }
    };
    let err = |msg: String| LoadError::new(Some(location.clone()), name.clone(), msg);
    // Sorted: the spec keeps the table's order, which Lua does not fix between runs.
    let mut keys: Vec<&String> = spec.keys().collect();
    keys.sort();
    for key in keys {
        if !MODEL_KEYS.contains(&key.as_str()) {
            let mut e = err(format!("unknown field `{key}` in `define_model`"));
            if let Some(s) = did_you_mean(key, MODEL_KEYS.iter().copied()) {
                e = e.with_hint(format!("did you mean `{s}`?"));
            }
            errors.push(e);
        }
    }
    let kind = match spec.get("kind") {
        Some(Value::Object(k)) => match parse_kind(k, lang) {
            Ok(k) => Some(k),
            Err(msg) => {
                errors.push(err(msg).in_field("kind"));
                None
            }
        },
        Some(_) => {
            errors.push(err("`kind` must be a kind, e.g. `kind.full()`".into()).in_field("kind"));
            None
        }
        None => {
            errors.push(match lang {
                Lang::Sql => err("missing header `-- kind: <kind>`".into()).with_hint(format!(
                    "say how the model is built, e.g. `-- kind: full`, `-- kind: view` or `-- kind: incremental_by_time_range(time_column = day, start = 2026-01-01)` (kinds: {})",
                    KIND_TAGS.join(", ")
                )),
                Lang::Rhai => err("`define_model` needs a `kind`".into()).with_hint("use a kind constructor, e.g. `kind: kind::full()`"),
                Lang::Lua => err("`define_model` needs a `kind`".into()).with_hint("use a kind constructor, e.g. `kind = kind.full()`"),
            });
            None
        }
    };
    let schema = match spec.get("schema") {
        Some(v) => match parse_schema(v) {
            Ok(s) => s,
            Err(msg) => {
                errors.push(err(msg).in_field("schema"));
                Schema::default()
            }
        },
        None => {
            errors.push(match lang {
                Lang::Sql => err("missing header `-- schema: <column> <type>, …`".into())
                    .with_hint("declare the output columns as `name type` pairs, e.g. `-- schema: id bigint, day date`"),
                Lang::Rhai => err("`define_model` needs a `schema`".into())
                    .with_hint("declare the output columns as `[column, type]` pairs, e.g. `schema: [[\"id\", \"bigint\"], [\"day\", \"date\"]]`"),
                Lang::Lua => err("`define_model` needs a `schema`".into())
                    .with_hint("declare the output columns as `{ column, type }` pairs, e.g. `schema = { { \"id\", \"bigint\" }, { \"day\", \"date\" } }`"),
            });
            Schema::default()
        }
    };
    let grain = match spec.get("grain") {
        None => Vec::new(),
        Some(v) => string_list(v).unwrap_or_else(|| {
            errors.push(err("`grain` must be a list of column names".into()).in_field("grain"));
            Vec::new()
        }),
    };
    let description = match spec.get("description") {
        None => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => {
            errors.push(err("`description` must be a string".into()).in_field("description"));
            None
        }
    };
    let target = match spec.get("target") {
        None => Target::Table,
        Some(Value::String(s)) => match Target::parse(s) {
            Some(t) => t,
            None => {
                let mut e = err(format!("unknown target `{s}` (targets: `table`, `parquet`, `ducklake`)"));
                if let Some(h) = did_you_mean(s, TARGET_NAMES.iter().copied()) {
                    e = e.with_hint(format!("did you mean `{h}`?"));
                }
                errors.push(e.in_field("target"));
                Target::Table
            }
        },
        Some(_) => {
            errors.push(err("`target` must be a string: `table`, `parquet` or `ducklake`".into()).in_field("target"));
            Target::Table
        }
    };
    if let Some(k) = kind.as_ref().filter(|k| !target.supports(k)) {
        errors.push(
            err(format!("target `{target}` does not support kind `{}`", k.tag()))
                .in_field("target")
                .with_hint("`parquet` and `ducklake` store `full` and `incremental_by_time_range` models; drop `target` to keep a table"),
        );
    }
    let cron = match spec.get("cron") {
        None => None,
        Some(Value::String(s)) => match check_cron(s, kind.as_ref()) {
            Ok(()) => Some(s.trim().to_string()),
            Err(msg) => {
                errors.push(err(msg).in_field("cron"));
                None
            }
        },
        Some(_) => {
            errors.push(err("`cron` must be a string, e.g. `\"*/15 * * * *\"` or `\"@daily\"`".into()).in_field("cron"));
            None
        }
    };
    let owner = match spec.get("owner") {
        None => None,
        Some(Value::String(s)) if !s.trim().is_empty() => Some(s.trim().to_string()),
        Some(_) => {
            errors.push(err(match lang {
                Lang::Sql => "`owner` is empty: name who answers for the model, e.g. `-- owner: finance-team`".into(),
                Lang::Lua | Lang::Rhai => "`owner` must be a non-empty string, e.g. `\"finance-team\"`".into(),
            }));
            None
        }
    };
    let tags = match spec.get("tags") {
        None => Vec::new(),
        Some(v) => match string_list(v).filter(|l| l.iter().all(|t| !t.trim().is_empty() && !t.contains([',', ' ', ':']))) {
            Some(list) => {
                let mut tags: Vec<String> = Vec::new();
                for t in list {
                    if !tags.contains(&t) {
                        tags.push(t);
                    }
                }
                tags
            }
            None => {
                errors.push(err(match lang {
                    Lang::Sql => "`tags` must be words without spaces or colons, separated by commas, e.g. `-- tags: finance, daily`".into(),
                    Lang::Rhai => "`tags` must be a list of words without spaces, commas or colons, e.g. `[\"finance\", \"daily\"]`".into(),
                    Lang::Lua => "`tags` must be a list of words without spaces, commas or colons, e.g. `{ \"finance\", \"daily\" }`".into(),
                }));
                Vec::new()
            }
        },
    };
    let column_descriptions = match spec.get("column_descriptions") {
        None => Vec::new(),
        Some(v) => match column_descriptions(v, &schema, kind.as_ref()) {
            Ok(d) => d,
            Err(e) => {
                errors.extend(e.into_iter().map(|(msg, hint)| {
                    let e = err(msg);
                    match hint {
                        Some(h) => e.with_hint(h),
                        None => e,
                    }
                }));
                Vec::new()
            }
        },
    };
    let ignored_lints = match spec.get("ignored_lints") {
        None => Vec::new(),
        Some(v) => match string_list(v) {
            Some(list) => {
                for name in list.iter().filter(|n| crate::sql::lint::rule(n).is_none()) {
                    let mut e =
                        err(format!("`ignored_lints`: unknown lint rule `{name}` (rules: {})", crate::sql::lint::rule_names().collect::<Vec<_>>().join(", ")));
                    if let Some(s) = did_you_mean(name, crate::sql::lint::rule_names()) {
                        e = e.with_hint(format!("did you mean `{s}`?"));
                    }
                    errors.push(e);
                }
                list
            }
            None => {
                errors.push(err("`ignored_lints` must be a list of lint rule names, e.g. `{ \"missing_grain\" }`".into()));
                Vec::new()
            }
        },
    };
    let signals = match spec.get("signals") {
        None => Vec::new(),
        Some(v) => match parse_signals(v, &location).and_then(|s| check_signal_kind(&s, kind.as_ref()).map(|()| s)) {
            Ok(s) => s,
            Err(msg) => {
                errors.push(err(msg));
                Vec::new()
            }
        },
    };
    // dbt's Jinja is no SQL: refused here rather than as the engine's parser error at plan (a
    // `.sql` file refuses it at its own line before building).
    let jinja = query.map(jinja_tags).unwrap_or_default();
    let body = match query {
        None => None,
        // A NUL byte (`"\0"` in a Lua or Rhai string: a file holding one is refused at its
        // line) reaches no engine: DuckDB stops at it ("nul byte found in provided data").
        Some(text) if text.contains('\0') => {
            let line = text[..text.find('\0').unwrap_or(0)].matches('\n').count() + 1;
            errors.push(err(format!("the query holds a NUL byte (`\\0`, line {line} of the query): no engine reads it")));
            None
        }
        Some(text) if !jinja.is_empty() => {
            for (offset, tag) in &jinja {
                let line = text[..*offset].matches('\n').count() + 1;
                let (message, hint) = jinja_problem(tag, lang, &format!(" (line {line} of the query)"));
                errors.push(err(message).with_hint(hint));
            }
            None
        }
        Some(text) => match parse_query(text, sites) {
            Ok(mut f) => {
                if let Some(n) = &name {
                    f.bind_this(n);
                }
                // (Without a name, `@this` is not bound: the name's own error says what to fix.)
                for unknown in f.unknown_markers().iter().filter(|_| name.is_some()) {
                    errors.push(err(unknown_marker(unknown)));
                }
                errors.extend(f.quoted_sites().into_iter().map(|q| quoted_site(&q, name.as_ref())));
                Some(f)
            }
            Err(msg) => {
                errors.push(err(msg));
                None
            }
        },
    };
    let statements = model_statements(spec, sites, name.as_ref(), kind.as_ref(), &target, &location, &mut errors);
    match (name, kind, errors.is_empty()) {
        (Some(name), Some(kind), true) => Ok(Model {
            name,
            kind,
            schema,
            body,
            grain,
            description,
            location,
            target,
            audits: Vec::new(),
            cron,
            statements,
            owner,
            tags,
            column_descriptions,
            ignored_lints,
            signals,
            query_lines: Vec::new(),
        }),
        _ => Err(errors),
    }
}

/// A model's `pre_statements` / `post_statements` (each a string or a list of strings; the
/// strings may hold `@start`… bounds on time-range models and `@this`, never `ref`/`cols`) and
/// `statements_affect_data`. Whether each parses in the engine's grammar is checked once the
/// project is loaded ([`crate::project::check_statements`]).
fn model_statements(
    spec: &Map<String, Value>,
    sites: &Sites,
    name: Option<&ModelName>,
    kind: Option<&Kind>,
    target: &Target,
    location: &Location,
    errors: &mut Vec<LoadError>,
) -> crate::core::Statements {
    let err = |msg: String| LoadError::new(Some(location.clone()), name.cloned(), msg);
    let mut out = crate::core::Statements::default();
    for (key, into) in [("pre_statements", &mut out.pre), ("post_statements", &mut out.post)] {
        let texts = match spec.get(key) {
            None => continue,
            Some(Value::String(s)) => vec![s.clone()],
            Some(v) => match string_list(v) {
                Some(l) => l,
                None => {
                    errors.push(err(format!("`{key}` must be a list of SQL statements (strings)")));
                    continue;
                }
            },
        };
        for (i, text) in texts.iter().enumerate() {
            let what = format!("`{key}`[{}]", i + 1);
            let text = text.trim().trim_end_matches(';').trim_end();
            if text.is_empty() {
                errors.push(err(format!("{what} is empty")));
                continue;
            }
            if text.contains('\0') {
                errors.push(err(format!("{what} holds a NUL byte (`\\0`): no engine reads it")));
                continue;
            }
            let jinja = jinja_tags(text);
            if !jinja.is_empty() {
                let lang = Lang::of(&location.file).unwrap_or(Lang::Lua);
                for (_, tag) in jinja {
                    let (message, hint) = jinja_problem(&tag, lang, "");
                    errors.push(err(format!("{what}: {message}")).with_hint(hint));
                }
                continue;
            }
            let mut f = match parse_query(text, sites) {
                Ok(f) => f,
                Err(msg) => {
                    errors.push(err(format!("{what}: {msg}")));
                    continue;
                }
            };
            if f.nodes.iter().any(|n| matches!(n, Node::Ref(_) | Node::Cols(_))) {
                errors.push(
                    err(format!("{what} uses `ref`/`cols`: a statement is not part of the DAG"))
                        .with_hint("write the relation's name, or `@this` for the model's own table"),
                );
                continue;
            }
            let bounds = f.nodes.iter().any(|n| matches!(n, Node::Start | Node::End | Node::Bound(_)));
            if bounds && kind.is_some_and(|k| k.time_range().is_none()) {
                errors.push(err(format!(
                    "{what} uses interval bounds (`@start`, `@end`, …), but kind `{}` has no interval (only `incremental_by_time_range` models have one)",
                    kind.map(Kind::tag).unwrap_or_default()
                )));
                continue;
            }
            if let Some(n) = name {
                f.bind_this(n);
            }
            into.push(crate::core::Statement { sql: f, location: location.clone() });
        }
    }
    out.affect_data = match spec.get("statements_affect_data") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            errors.push(err("`statements_affect_data` must be a boolean".into()));
            false
        }
    };
    // A `.sql` model's statements are the ones around its query, not fields.
    let statements = match Lang::of(&location.file) {
        Some(Lang::Sql) => "statements before or after its query",
        _ => "`pre_statements`/`post_statements`",
    };
    if !out.is_empty() {
        if let Some(k) = kind.filter(|k| matches!(k, Kind::Embedded | Kind::External(_))) {
            errors.push(err(format!("an `{}` model is never built, so it cannot have {statements}", k.tag())));
        } else if *target != Target::Table {
            errors.push(err(format!("{statements} need the `table` target (this model's is `{target}`)")).in_field("target"));
        }
    } else if out.affect_data {
        errors.push(err(format!("`statements_affect_data` is set, but the model has no {statements}")).in_field("statements_affect_data"));
    }
    out
}

/// A field's problem: the message and an optional hint.
type Problem = (String, Option<String>);

/// A model's `column_descriptions`: a map from a column of the model (its declared schema and
/// the kind's managed columns, case-insensitive) to a string, returned in schema order with the
/// schema's spelling. Errors are `(message, hint)` pairs, each starting with
/// `` `column_descriptions` `` (the `.sql` host moves them to its header line).
fn column_descriptions(v: &Value, schema: &Schema, kind: Option<&Kind>) -> Result<Vec<(String, String)>, Vec<Problem>> {
    // An empty Lua table arrives as an empty list.
    if matches!(v, Value::Array(a) if a.is_empty()) {
        return Ok(Vec::new());
    }
    let Value::Object(map) = v else {
        return Err(vec![("`column_descriptions` must map column names to descriptions, e.g. `{ id = \"the order id\" }`".into(), None)]);
    };
    let mut columns: Vec<String> = schema.0.iter().map(|c| c.name.clone()).collect();
    columns.extend(kind.map(Kind::managed_columns).unwrap_or_default().into_iter().map(|c| c.name));
    let mut found: Vec<(usize, String, String)> = Vec::new();
    let mut errors = Vec::new();
    for (col, text) in map {
        let Some(pos) = columns.iter().position(|c| c.eq_ignore_ascii_case(col)) else {
            let hint = did_you_mean(col, columns.iter().map(String::as_str)).map(|s| format!("did you mean `{s}`?"));
            errors.push((format!("`column_descriptions`: the model has no column `{col}` (columns: {})", columns.join(", ")), hint));
            continue;
        };
        match text {
            Value::String(s) => {
                if found.iter().any(|(p, _, _)| *p == pos) {
                    errors.push((format!("`column_descriptions`: column `{}` is described twice", columns[pos]), None));
                } else {
                    found.push((pos, columns[pos].clone(), s.trim().to_string()));
                }
            }
            _ => errors.push((format!("`column_descriptions`: the description of `{col}` must be a string"), None)),
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    found.sort_by_key(|(p, _, _)| *p);
    Ok(found.into_iter().map(|(_, c, d)| (c, d)).collect())
}

/// A model's `cron`: a valid expression ([`crate::core::cron::parse`]). On a time-range model it
/// may not fire more often than its grain ([`crate::core::cron::check`]); on a `full`,
/// unique-key, partition or SCD type 2 model (refreshed by `run` at its ticks) not more often
/// than every five minutes, as sqlmesh. Views, embedded models, seeds and externals are never
/// computed by `run`: a `cron` there would schedule nothing, so it is refused.
fn check_cron(expr: &str, kind: Option<&Kind>) -> Result<(), String> {
    let cron = crate::core::cron::parse(expr)?;
    match kind {
        Some(Kind::IncrementalByTimeRange(t)) => crate::core::cron::check(&cron, expr.trim(), t.grain),
        Some(Kind::Full | Kind::IncrementalByUniqueKey(_) | Kind::IncrementalByPartition(_) | Kind::ScdType2(_)) => {
            crate::core::cron::check_refresh(&cron, expr.trim())
        }
        Some(k) => Err(format!(
            "`cron` has nothing to schedule on a `{}` model: {}; it is supported on `full`, `incremental_by_time_range`, `incremental_by_unique_key`, `incremental_by_partition` and `scd_type2` models",
            k.tag(),
            match k {
                Kind::View => "a view is computed when it is read",
                Kind::Embedded => "an embedded model is inlined into its readers",
                Kind::Seed(_) => "a seed changes only when its file does (the next apply loads it)",
                _ => "efmesh never computes it",
            }
        )),
        None => Ok(()),
    }
}

/// The unknown signals named by the `signals` of a model `spec` that did not build (a
/// malformed `signals` is the builder's own error): reported with the model's other load
/// errors, in the same pass, rather than once those are fixed. `location` is where the uses are.
pub fn unknown_signals(spec: &Map<String, Value>, location: &Location, foreign: Option<&super::foreign::Foreign>) -> Vec<LoadError> {
    let (Some(foreign), Some(v)) = (foreign, spec.get("signals")) else { return Vec::new() };
    let Ok(uses) = parse_signals(v, location) else { return Vec::new() };
    let name = spec.get("name").and_then(Value::as_str).and_then(|n| ModelName::parse(n).ok());
    foreign.check_signal_uses(name.as_ref(), &uses)
}

/// A model's `signals`: a list whose entries are a signal's name, or a table/map naming it
/// (`{ "name", key = value }` in Lua, `#{ name: "name", key: value }` in Rhai) with its named
/// arguments (strings, numbers, booleans, lists, maps). Each use is located at `location`.
///
/// # Errors
/// A message for a load error at the model.
pub fn parse_signals(v: &Value, location: &crate::core::Location) -> Result<Vec<crate::core::SignalUse>, String> {
    let items = match v {
        Value::Array(items) => items.as_slice(),
        Value::Object(m) if m.is_empty() => &[],
        _ => return Err("`signals` must be a list of signal names or `{ \"name\", key = value }` uses".into()),
    };
    let mut out: Vec<crate::core::SignalUse> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let (name, args) = match item {
            Value::String(s) => (s.clone(), Map::new()),
            Value::Object(m) => {
                let mut m = m.clone();
                let name = match (m.remove("1"), m.remove("name")) {
                    (Some(Value::String(s)), None) | (None, Some(Value::String(s))) => s,
                    (Some(_), Some(_)) => return Err(format!("signal {} is named twice (a first element and `name`)", i + 1)),
                    _ => {
                        return Err(format!(
                            "signal {} must name its signal: `{{ \"name\", key = value }}` (Lua) or `#{{ name: \"name\", key: value }}` (Rhai)",
                            i + 1
                        ));
                    }
                };
                if let Some(k) = m.keys().find(|k| k.parse::<usize>().is_ok()) {
                    return Err(format!("signal `{name}`: argument {k} has no name; signal arguments are named (`key = value`)"));
                }
                (name, m)
            }
            other => return Err(format!("signal {} must be a name or a `{{ \"name\", key = value }}` use, got {}", i + 1, json_type(other))),
        };
        if !crate::core::name::is_identifier(&name) {
            return Err(format!("signal name `{name}` must be an identifier (`[A-Za-z_][A-Za-z0-9_]*`)"));
        }
        let use_ = crate::core::SignalUse { name, args: Value::Object(args).to_string(), location: location.clone() };
        if out.contains(&use_) {
            return Err(format!("signal `{}` is used twice with the same arguments", use_.name));
        }
        out.push(use_);
    }
    Ok(out)
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "nil",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a table",
    }
}

/// Signals gate the intervals of `incremental_by_time_range` models only.
///
/// # Errors
/// The message for a model of another kind.
pub fn check_signal_kind(signals: &[crate::core::SignalUse], kind: Option<&Kind>) -> Result<(), String> {
    match kind {
        Some(k) if !signals.is_empty() && !matches!(k, Kind::IncrementalByTimeRange(_)) => Err(format!(
            "`signals` are only supported on `incremental_by_time_range` models (this one is `{}`): a signal says which intervals are ready",
            k.tag()
        )),
        _ => Ok(()),
    }
}

fn string_list(v: &Value) -> Option<Vec<String>> {
    match v {
        Value::Array(items) => items.iter().map(|i| i.as_str().map(str::to_string)).collect(),
        Value::Object(m) if m.is_empty() => Some(Vec::new()),
        _ => None,
    }
}

fn parse_schema(v: &Value) -> Result<Schema, String> {
    let items = match v {
        Value::Array(items) => items,
        Value::Object(m) if m.is_empty() => return Ok(Schema::default()),
        _ => return Err("`schema` must be a list of `{ column, type }` pairs".into()),
    };
    let mut cols = Vec::new();
    for (i, item) in items.iter().enumerate() {
        match item {
            Value::Array(pair) if pair.len() == 2 => match (&pair[0], &pair[1]) {
                (Value::String(n), Value::String(t)) => {
                    crate::core::schema::check_type_text(t).map_err(|why| format!("schema entry {} (`{n}`): type `{t}` {why}", i + 1))?;
                    cols.push(Column { name: n.clone(), ty: t.clone() });
                }
                _ => return Err(format!("schema entry {} must be two strings `{{ column, type }}`", i + 1)),
            },
            _ => return Err(format!("schema entry {} must be a pair `{{ column, type }}`", i + 1)),
        }
    }
    Ok(Schema(cols))
}

/// Refuses an option of kind `tag` that is not among `allowed`: the message names the one meant
/// when a name is close (`delimeter`: `delimiter`), then every option the kind takes, sorted (or
/// that it takes none), so a newcomer never has to look them up.
fn check_keys(tag: &str, k: &Map<String, Value>, allowed: &[&str]) -> Result<(), String> {
    for key in k.keys() {
        if key != "kind" && !allowed.contains(&key.as_str()) {
            let hint = did_you_mean(key, allowed.iter().copied()).map(|s| format!(" (did you mean `{s}`?)")).unwrap_or_default();
            let mut options: Vec<&str> = allowed.to_vec();
            options.sort_unstable();
            let options = if options.is_empty() {
                format!("kind `{tag}` takes no options")
            } else {
                format!("its options: {}", options.iter().map(|o| format!("`{o}`")).collect::<Vec<_>>().join(", "))
            };
            return Err(format!("unknown option `{key}` for kind `{tag}`{hint}; {options}"));
        }
    }
    Ok(())
}

fn opt_str<'a>(k: &'a Map<String, Value>, key: &str, tag: &str) -> Result<Option<&'a str>, String> {
    match k.get(key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(format!("`{key}` of kind `{tag}` must be a string")),
    }
}

fn opt_bool(k: &Map<String, Value>, key: &str, tag: &str) -> Result<Option<bool>, String> {
    match k.get(key) {
        None => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(format!("`{key}` of kind `{tag}` must be a boolean")),
    }
}

fn opt_u32(k: &Map<String, Value>, key: &str, tag: &str) -> Result<Option<u32>, String> {
    match k.get(key) {
        None => Ok(None),
        Some(v) => v
            .as_u64()
            .or_else(|| v.as_f64().filter(|f| f.fract() == 0.0 && *f >= 0.0).map(|f| f as u64))
            .and_then(|n| u32::try_from(n).ok())
            .map(Some)
            .ok_or_else(|| format!("`{key}` of kind `{tag}` must be a non-negative integer")),
    }
}

/// The `key` option of a keyed kind: one column name, or a non-empty list of them.
fn key_columns(k: &Map<String, Value>, tag: &str) -> Result<Vec<String>, String> {
    column_names(k, "key", tag)
}

/// A required option naming columns (`key`, `partitioned_by`): one column name, or a non-empty
/// list of distinct ones.
fn column_names(k: &Map<String, Value>, opt: &str, tag: &str) -> Result<Vec<String>, String> {
    let key = match k.get(opt) {
        None => return Err(format!("kind `{tag}` needs `{opt}` (one column or a list of columns)")),
        Some(Value::String(s)) => vec![s.clone()],
        Some(v) => string_list(v).ok_or_else(|| format!("`{opt}` of kind `{tag}` must be a column name or a list of column names"))?,
    };
    if key.is_empty() || key.iter().any(String::is_empty) {
        return Err(format!("`{opt}` of kind `{tag}` is empty; name at least one column"));
    }
    if let Some(dup) = key.iter().enumerate().find(|(i, c)| key[..*i].contains(c)).map(|(_, c)| c) {
        return Err(format!("`{opt}` of kind `{tag}` names column `{dup}` twice"));
    }
    Ok(key)
}

/// Parses a kind table `{ kind = "<tag>", … }` of a model written in `lang`.
///
/// # Errors
/// A message naming the unknown tag or the offending option, its examples written as `lang`
/// writes them (`renamed = {doctor = physician}` in a `.sql` file's `-- kind:` line).
pub fn parse_kind(k: &Map<String, Value>, lang: Lang) -> Result<Kind, String> {
    let tag = k.get("kind").and_then(Value::as_str).ok_or("`kind` must be built with a kind constructor, e.g. `kind.full()`")?;
    match tag {
        "full" | "view" | "embedded" => {
            check_keys(tag, k, &[])?;
            Ok(match tag {
                "full" => Kind::Full,
                "view" => Kind::View,
                _ => Kind::Embedded,
            })
        }
        "incremental_by_time_range" => {
            check_keys(tag, k, &["time_column", "start", "end", "grain", "batch_size", "lookback", "auto_restatement_intervals"])?;
            let time_column = opt_str(k, "time_column", tag)?.ok_or("kind `incremental_by_time_range` needs `time_column`")?.to_string();
            let start = opt_str(k, "start", tag)?.ok_or("kind `incremental_by_time_range` needs `start`")?;
            let start = parse_instant(start).map_err(|e| format!("`start`: {e}"))?;
            let end = opt_str(k, "end", tag)?.map(|e| parse_instant(e).map_err(|m| format!("`end`: {m}"))).transpose()?;
            let grain = match opt_str(k, "grain", tag)? {
                None => Grain::Day,
                Some(g) => Grain::parse(g).ok_or_else(|| format!("`grain` must be {}, got `{g}`", Grain::EXPECTED))?,
            };
            Ok(Kind::IncrementalByTimeRange(TimeRange {
                time_column,
                start,
                end,
                grain,
                batch_size: opt_u32(k, "batch_size", tag)?.unwrap_or(DEFAULT_BATCH_SIZE),
                lookback: opt_u32(k, "lookback", tag)?.unwrap_or(0),
                auto_restatement_intervals: opt_u32(k, "auto_restatement_intervals", tag)?.unwrap_or(0),
            }))
        }
        "external" => {
            check_keys(tag, k, &["table", "path", "format", "null_markers", "union_by_name", "hive_partitioning", "delimiter", "header"])?;
            match (opt_str(k, "table", tag)?, opt_str(k, "path", tag)?) {
                (Some(t), None) => {
                    if t.split('.').any(|p| !crate::core::name::is_identifier(p)) {
                        return Err(format!("external `table` `{t}` must be dotted identifiers"));
                    }
                    for opt in ["format", "null_markers", "union_by_name", "hive_partitioning", "delimiter", "header"] {
                        if k.contains_key(opt) {
                            return Err(format!("`{opt}` applies to file externals, not `table`"));
                        }
                    }
                    Ok(Kind::External(External::Table { name: t.to_string() }))
                }
                (None, Some(p)) => {
                    let format = match opt_str(k, "format", tag)? {
                        Some(f) => FileFormat::parse(f).ok_or_else(|| format!("`format` must be `csv`, `parquet` or `json`, got `{f}`"))?,
                        None => FileFormat::infer(p).ok_or_else(|| format!("cannot infer the format of `{p}`; set `format`"))?,
                    };
                    let null_markers = null_marker_list(k, lang)?;
                    if !null_markers.is_empty() && format != FileFormat::Csv {
                        return Err("`null_markers` applies to CSV files only".into());
                    }
                    let csv = CsvOptions { delimiter: opt_delimiter(k, tag)?.map(|c| c.to_string()), header: opt_bool(k, "header", tag)? };
                    if csv != CsvOptions::default() && format != FileFormat::Csv {
                        let opt = if csv.delimiter.is_some() { "delimiter" } else { "header" };
                        return Err(format!("`{opt}` applies to CSV files only"));
                    }
                    Ok(Kind::External(External::Files {
                        path: p.to_string(),
                        format,
                        union_by_name: opt_bool(k, "union_by_name", tag)?,
                        hive_partitioning: opt_bool(k, "hive_partitioning", tag)?,
                        null_markers,
                        csv: (csv != CsvOptions::default()).then_some(csv),
                    }))
                }
                (Some(_), Some(_)) => Err("kind `external` takes `table` or `path`, not both".into()),
                (None, None) => Err("kind `external` needs `table` or `path`".into()),
            }
        }
        "incremental_by_unique_key" => {
            check_keys(tag, k, &["key"])?;
            Ok(Kind::IncrementalByUniqueKey(UniqueKey { key: key_columns(k, tag)? }))
        }
        "incremental_by_partition" => {
            check_keys(tag, k, &["partitioned_by"])?;
            Ok(Kind::IncrementalByPartition(Partitioned { partitioned_by: column_names(k, "partitioned_by", tag)? }))
        }
        "scd_type2" => {
            check_keys(tag, k, &["key", "valid_from", "valid_to", "columns", "invalidate_hard_deletes", "renamed"])?;
            let key = key_columns(k, tag)?;
            let valid_from = opt_str(k, "valid_from", tag)?.unwrap_or(DEFAULT_VALID_FROM).to_string();
            let valid_to = opt_str(k, "valid_to", tag)?.unwrap_or(DEFAULT_VALID_TO).to_string();
            for (opt, v) in [("valid_from", &valid_from), ("valid_to", &valid_to)] {
                if !crate::core::name::is_identifier(v) {
                    return Err(format!("`{opt}` of kind `scd_type2` must be a column name, got `{v}`"));
                }
            }
            if valid_from.eq_ignore_ascii_case(&valid_to) {
                return Err(format!("`valid_from` and `valid_to` of kind `scd_type2` must differ (both are `{valid_from}`)"));
            }
            let columns = match k.get("columns") {
                None => None,
                Some(v) => {
                    let cols = string_list(v).ok_or("`columns` of kind `scd_type2` must be a list of column names")?;
                    if cols.is_empty() {
                        return Err("`columns` of kind `scd_type2` is empty; omit it to watch every non-key column".into());
                    }
                    Some(cols)
                }
            };
            Ok(Kind::ScdType2(ScdType2 {
                key,
                valid_from,
                valid_to,
                columns,
                invalidate_hard_deletes: opt_bool(k, "invalidate_hard_deletes", tag)?.unwrap_or(true),
                renamed: renamed_columns(k, lang)?,
            }))
        }
        "seed" => parse_seed(k, lang).map(Kind::Seed),
        other => Err(unknown_kind(other)),
    }
}

/// The `kind` constructor `tag` as `lang` writes it, in backquotes, for a message: `kind.external`
/// (Lua), `kind::external` (Rhai), `-- kind: external(…)` (a `.sql` header line).
fn kind_constructor(lang: Lang, tag: &str) -> String {
    match lang {
        Lang::Lua => format!("`kind.{tag}`"),
        Lang::Rhai => format!("`kind::{tag}`"),
        Lang::Sql => format!("`-- kind: {tag}(…)`"),
    }
}

/// `null_markers` of kind `external` or `seed`: a list of strings (none when absent).
fn null_marker_list(k: &Map<String, Value>, lang: Lang) -> Result<Vec<String>, String> {
    match k.get("null_markers") {
        None => Ok(Vec::new()),
        Some(v) => string_list(v).ok_or_else(|| {
            let example = match lang {
                Lang::Lua => "null_markers = { \"NA\", \"\" }",
                Lang::Rhai => "null_markers: [\"NA\", \"\"]",
                Lang::Sql => "null_markers = [NA, '']",
            };
            format!("`null_markers` must be a list of strings, e.g. `{example}`")
        }),
    }
}

/// `renamed` of kind `scd_type2`: a map `{ old = "new" }` of column names (sorted by old name).
fn renamed_columns(k: &Map<String, Value>, lang: Lang) -> Result<Vec<(String, String)>, String> {
    let example = match lang {
        Lang::Lua => "renamed = { doctor = \"physician\" }",
        Lang::Rhai => "renamed: #{ doctor: \"physician\" }",
        Lang::Sql => "renamed = {doctor = physician}",
    };
    let shape = || format!("`renamed` of kind `scd_type2` must map old column names to new ones, e.g. `{example}`");
    let map = match k.get("renamed") {
        None => return Ok(Vec::new()),
        Some(Value::Object(m)) => m,
        Some(Value::Array(a)) if a.is_empty() => return Ok(Vec::new()),
        Some(_) => return Err(shape()),
    };
    let mut out: Vec<(String, String)> = Vec::with_capacity(map.len());
    for (old, new) in map {
        let new = new.as_str().ok_or_else(shape)?;
        for c in [old.as_str(), new] {
            if !crate::core::name::is_identifier(c) {
                return Err(format!("`renamed` of kind `scd_type2`: `{c}` is not a column name"));
            }
        }
        if old == new {
            return Err(format!("`renamed` of kind `scd_type2` renames `{old}` to itself"));
        }
        if out.iter().any(|(_, n)| n == new) {
            return Err(format!("`renamed` of kind `scd_type2` renames two columns to `{new}`"));
        }
        out.push((old.clone(), new.to_string()));
    }
    out.sort();
    Ok(out)
}

/// `delimiter`: exactly one character.
fn opt_delimiter(k: &Map<String, Value>, tag: &str) -> Result<Option<char>, String> {
    match opt_str(k, "delimiter", tag)? {
        None => Ok(None),
        Some(d) => {
            let mut chars = d.chars();
            match (chars.next(), chars.next()) {
                (Some(c), None) if c != '"' && c != '\n' && c != '\r' => Ok(Some(c)),
                _ => Err(format!("`delimiter` of kind `{tag}` must be one character other than a quote or a line break, got `{d}`")),
            }
        }
    }
}

/// Parses the options of kind `seed`: `path` (required, one CSV or JSON file), `format`,
/// `null_markers` (CSV), `delimiter` (CSV). The content hash is filled later, when the project
/// loads the file (`crate::seed::hash_seed_files`). Messages name kind `external` as `lang`
/// writes it.
fn parse_seed(k: &Map<String, Value>, lang: Lang) -> Result<Seed, String> {
    let external = kind_constructor(lang, "external");
    let tag = "seed";
    check_keys(tag, k, &["path", "format", "null_markers", "delimiter"])?;
    let path = opt_str(k, "path", tag)?.ok_or("kind `seed` needs `path` (a CSV or JSON file of the project)")?;
    if path.trim().is_empty() {
        return Err("`path` of kind `seed` is empty".into());
    }
    if path.contains(['*', '?', '[']) {
        return Err(format!("a seed is one file, not a glob: `{path}` (read many files with {external})"));
    }
    if path.contains("://") {
        return Err(format!("a seed is a file of the project, not a URL: `{path}` (read remote files with {external})"));
    }
    let format = match opt_str(k, "format", tag)? {
        Some(f) => FileFormat::parse(f).ok_or_else(|| format!("`format` of a seed must be `csv` or `json`, got `{f}`"))?,
        None => FileFormat::infer(path).ok_or_else(|| format!("cannot infer the format of `{path}`; set `format` (`csv` or `json`)"))?,
    };
    if format == FileFormat::Parquet {
        return Err(format!("a seed is a CSV or JSON file; read parquet `{path}` with {external}"));
    }
    let null_markers = null_marker_list(k, lang)?;
    let delimiter = opt_delimiter(k, tag)?;
    if let Some(d) = delimiter.filter(|d| !d.is_ascii()) {
        return Err(format!("`delimiter` of kind `seed` must be an ASCII character, got `{d}`"));
    }
    if format == FileFormat::Json {
        if !null_markers.is_empty() {
            return Err("`null_markers` applies to CSV seeds only (JSON has `null`)".into());
        }
        if delimiter.is_some() {
            return Err("`delimiter` applies to CSV seeds only".into());
        }
    }
    Ok(Seed { path: path.to_string(), format, null_markers, delimiter, content_hash: String::new() })
}

/// Every kind tag a model may declare.
pub const KIND_TAGS: &[&str] =
    &["full", "view", "embedded", "incremental_by_time_range", "external", "incremental_by_unique_key", "scd_type2", "seed", "incremental_by_partition"];

/// The error for a kind tag that is not in [`KIND_TAGS`], with a "did you mean" (the kinds
/// listed when none is close). Every language's: a `.sql` model's `-- kind:` line, a kind tag
/// the builder reads, Lua's `kind.ful()` (the prelude's guard) and Rhai's `kind::ful()`.
pub fn unknown_kind(tag: &str) -> String {
    match did_you_mean(tag, KIND_TAGS.iter().copied()) {
        Some(s) => format!("unknown kind `{tag}` (did you mean `{s}`?)"),
        None => {
            let mut kinds = KIND_TAGS.to_vec();
            kinds.sort_unstable();
            format!("unknown kind `{tag}` (kinds: {})", kinds.join(", "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Builds `spec` (a JSON object) with `query` as if written at line 3 of `file`; the errors as
    /// displayed.
    fn errors_of(file: &str, spec: Value, query: Option<&str>) -> Vec<String> {
        let location = Location { file: file.into(), line: 3 };
        match build_model(spec.as_object().expect("an object"), query, &Sites::default(), location) {
            Ok(m) => panic!("built {}", m.name),
            Err(errs) => errs.iter().map(ToString::to_string).collect(),
        }
    }

    /// A Lua or Rhai query written in its file as literals around `ref()` markers is placed at
    /// the file's lines, whatever splices the markers in (`%s`, `..`); one the file does not hold
    /// as it is (an escape, text written twice, computed text) is placed nowhere.
    #[test]
    fn a_scripts_query_is_placed_at_the_lines_of_its_file_only_where_written() {
        let mut sites = Sites::default();
        let r = sites.record(Site::Ref(RefSite { target: ModelName::parse("s.a").unwrap(), location: Location { file: "m.lua".into(), line: 1 } }));
        let none = SourceMap::default();
        let lines = |source: &str, written: &str| script_query_lines(source.as_bytes(), written, written, &none);
        // `[[` then a newline: Lua skips that newline, the query starts on the next line.
        let formatted = "-- x\ndefine_model {\n  query = ([[\n    SELECT a,\n           b\n    FROM %s\n    WHERE c\n  ]]):format(ref(\"s.a\")),\n}\n";
        let written = format!("    SELECT a,\n           b\n    FROM {r}\n    WHERE c\n  ");
        assert_eq!(lines(formatted, &written), [4, 5, 6, 7, 8]);
        // Saved with CRLF line ends, which Lua reads as `\n` in a long string: the same lines.
        assert_eq!(lines(&formatted.replace('\n', "\r\n"), &written), [4, 5, 6, 7, 8]);
        // A marker between two literals, the second one on the next line of the file.
        let concatenated = "define_model {\n  query = \"SELECT n FROM \" .. ref(\"s.a\") .. [[\nWHERE n > 0\nLIMIT 1]],\n}\n";
        assert_eq!(lines(concatenated, &format!("SELECT n FROM {r}WHERE n > 0\nLIMIT 1")), [2, 4]);
        // A query starting with a marker starts where its first literal is.
        assert_eq!(lines("q = ref(a) .. [[ AS t\nWHERE b]]\n", &format!("{r} AS t\nWHERE b")), [1, 2]);
        // An escape (`\\n` in the file), text the file holds twice, or does not hold: no lines.
        assert_eq!(lines("q = \"SELECT 1\\nFROM t\"\n", "SELECT 1\nFROM t"), [] as [u32; 0]);
        assert_eq!(lines("a = [[SELECT 1 AS n]]\nb = [[SELECT 1 AS n]]\n", "SELECT 1 AS n"), [] as [u32; 0]);
        assert_eq!(lines("q = ([[SELECT %s AS n]]):format(2)\n", "SELECT 2 AS n"), [] as [u32; 0]);
        assert_eq!(lines("q = [[SELECT 1]]\n", &format!("SELECT 1 FROM {r} WHERE x")), [] as [u32; 0]);
        // A later piece kept in a variable written above: the same text further on is another
        // model's query, never this one's.
        let kept = "local tail = [[ WHERE n >\n  bad]]\ndefine_model { query = [[SELECT n\nFROM ]] .. ref(a) .. tail }\n\
                    define_model { query = [[SELECT n AS n\nFROM ]] .. ref(a) .. [[ WHERE n >\n  bad]] }\n";
        assert_eq!(lines(kept, &format!("SELECT n\nFROM {r} WHERE n >\n  bad")), [] as [u32; 0]);
    }

    /// Unknown fields are reported in name order, not the spec's (a Lua table's order changes
    /// between runs).
    #[test]
    fn unknown_fields_of_a_model_are_reported_sorted() {
        let spec = json!({ "zz": 1, "name": "s.m", "kind": { "kind": "full" }, "schema": [["x", "integer"]], "descripton": "x", "aa": 2 });
        let unknown: Vec<String> = errors_of("models/m.lua", spec, Some("SELECT 1 AS x"))
            .iter()
            .filter_map(|e| e.split("unknown field ").nth(1).map(|rest| rest.split(' ').next().unwrap_or_default().to_string()))
            .collect();
        assert_eq!(unknown, ["`aa`", "`descripton`", "`zz`"]);
    }

    /// A NUL byte in a Lua or Rhai model's query or statements (`"\0"` in a string: no file
    /// holds one) passed `check` with a warning and failed `apply` with the engine's "nul byte
    /// found in provided data": a load error at the model.
    #[test]
    fn a_nul_byte_in_a_query_or_a_statement_is_a_load_error() {
        let spec = json!({ "name": "s.m", "kind": { "kind": "full" }, "schema": [["x", "integer"]] });
        assert_eq!(
            errors_of("models/m.lua", spec, Some("SELECT 1\n  AS x\0")),
            ["models/m.lua:3: model `s.m`: the query holds a NUL byte (`\\0`, line 2 of the query): no engine reads it"]
        );
        let spec = json!({ "name": "s.m", "kind": { "kind": "full" }, "schema": [["x", "integer"]], "post_statements": ["SELECT 1", "SELECT '\0'"] });
        assert_eq!(
            errors_of("models/m.lua", spec, Some("SELECT 1 AS x")),
            ["models/m.lua:3: model `s.m`: `post_statements`[2] holds a NUL byte (`\\0`): no engine reads it"]
        );
    }

    /// A missing `schema` or `kind` is told in the words of the model's language: the `.sql`
    /// header line (it was "`define_model` needs a `schema`", Lua's field, in a `.sql` file too).
    #[test]
    fn a_missing_schema_or_kind_is_told_as_the_models_language_writes_it() {
        let no_schema = json!({ "name": "s.m", "kind": { "kind": "full" } });
        let no_kind = json!({ "name": "s.m", "schema": [["id", "bigint"]] });
        assert_eq!(
            errors_of("models/m.sql", no_schema.clone(), Some("SELECT 1 AS id")),
            [
                "models/m.sql:3: model `s.m`: missing header `-- schema: <column> <type>, …`\n  hint: declare the output columns as `name type` pairs, e.g. `-- schema: id bigint, day date`"
            ]
        );
        assert_eq!(
            errors_of("models/m.lua", no_schema.clone(), Some("SELECT 1 AS id")),
            [
                "models/m.lua:3: model `s.m`: `define_model` needs a `schema`\n  hint: declare the output columns as `{ column, type }` pairs, e.g. `schema = { { \"id\", \"bigint\" }, { \"day\", \"date\" } }`"
            ]
        );
        assert_eq!(
            errors_of("models/m.rhai", no_schema, Some("SELECT 1 AS id")),
            [
                "models/m.rhai:3: model `s.m`: `define_model` needs a `schema`\n  hint: declare the output columns as `[column, type]` pairs, e.g. `schema: [[\"id\", \"bigint\"], [\"day\", \"date\"]]`"
            ]
        );
        let sql = errors_of("models/m.sql", no_kind.clone(), Some("SELECT 1 AS id"));
        assert_eq!(sql.len(), 1, "{sql:?}");
        assert!(
            sql[0].starts_with("models/m.sql:3: model `s.m`: missing header `-- kind: <kind>`\n  hint: say how the model is built, e.g. `-- kind: full`"),
            "{sql:?}"
        );
        assert_eq!(
            errors_of("models/m.lua", no_kind.clone(), Some("SELECT 1 AS id")),
            ["models/m.lua:3: model `s.m`: `define_model` needs a `kind`\n  hint: use a kind constructor, e.g. `kind = kind.full()`"]
        );
        assert_eq!(
            errors_of("models/m.rhai", no_kind, Some("SELECT 1 AS id")),
            ["models/m.rhai:3: model `s.m`: `define_model` needs a `kind`\n  hint: use a kind constructor, e.g. `kind: kind::full()`"]
        );
    }

    /// Kind options' examples are written as the model's language writes them.
    #[test]
    fn kind_option_examples_are_in_the_models_language() {
        let scd = |renamed: Value| json!({ "kind": "scd_type2", "key": "id", "renamed": renamed });
        let kind = |k: Value, lang| parse_kind(k.as_object().expect("an object"), lang).expect_err("refused");
        assert_eq!(
            kind(scd(json!("doctor")), Lang::Sql),
            "`renamed` of kind `scd_type2` must map old column names to new ones, e.g. `renamed = {doctor = physician}`"
        );
        assert!(kind(scd(json!("doctor")), Lang::Lua).ends_with("e.g. `renamed = { doctor = \"physician\" }`"));
        assert!(kind(scd(json!("doctor")), Lang::Rhai).ends_with("e.g. `renamed: #{ doctor: \"physician\" }`"));
        let glob = json!({ "kind": "seed", "path": "seeds/*.csv" });
        assert_eq!(kind(glob.clone(), Lang::Sql), "a seed is one file, not a glob: `seeds/*.csv` (read many files with `-- kind: external(…)`)");
        assert_eq!(kind(glob.clone(), Lang::Lua), "a seed is one file, not a glob: `seeds/*.csv` (read many files with `kind.external`)");
        assert_eq!(kind(glob, Lang::Rhai), "a seed is one file, not a glob: `seeds/*.csv` (read many files with `kind::external`)");
        let markers = json!({ "kind": "external", "path": "data/x.csv", "null_markers": "NA" });
        assert_eq!(kind(markers.clone(), Lang::Sql), "`null_markers` must be a list of strings, e.g. `null_markers = [NA, '']`");
        assert_eq!(kind(markers, Lang::Lua), "`null_markers` must be a list of strings, e.g. `null_markers = { \"NA\", \"\" }`");
    }

    /// An unknown kind option names every option the kind takes, sorted, after the one meant
    /// when a name is close; a kind without options says it takes none.
    #[test]
    fn an_unknown_kind_option_lists_the_kinds_options_sorted() {
        let kind = |k: Value| parse_kind(k.as_object().expect("an object"), Lang::Sql).expect_err("refused");
        let options = "`delimiter`, `format`, `header`, `hive_partitioning`, `null_markers`, `path`, `table`, `union_by_name`";
        assert_eq!(
            kind(json!({ "kind": "external", "path": "data/x.csv", "delimeter": ";" })),
            format!("unknown option `delimeter` for kind `external` (did you mean `delimiter`?); its options: {options}")
        );
        assert_eq!(
            kind(json!({ "kind": "external", "path": "data/x.csv", "zzzz": 1 })),
            format!("unknown option `zzzz` for kind `external`; its options: {options}")
        );
        assert_eq!(kind(json!({ "kind": "full", "x": 1 })), "unknown option `x` for kind `full`; kind `full` takes no options");
        assert_eq!(
            kind(json!({ "kind": "incremental_by_unique_key", "key": "id", "keys": "k" })),
            "unknown option `keys` for kind `incremental_by_unique_key` (did you mean `key`?); its options: `key`"
        );
    }

    /// Jinja tags are found outside literals and comments, shown on one line; DuckDB's struct
    /// and map literals (`{'a': 1}`, `MAP {{'k': 1}: 'v'}`, `{{a: 1}: 2}`, `MAP {#1: 'x'}`) are none.
    #[test]
    fn jinja_tags_are_found_outside_literals_and_comments() {
        let text = "{{ config(materialized='table') }}\nSELECT {'a': 1} AS s, MAP {{'k': 1}: 'v'} AS m, MAP {{a: 1}: 2} AS n, '{{ ref(\"x\") }}' AS t -- {{ ref('y') }}\nFROM {{ ref('orders') }} /* {% if %} */\n{%- if is_incremental() -%} WHERE d > (SELECT max(d) FROM {{this}}) {% endif %}\n{#\n  a comment\n#}{{\n  source('raw',\n         'events')\n}}";
        let tags: Vec<(usize, String)> = jinja_tags(text);
        let lines: Vec<(usize, &str)> = tags.iter().map(|(off, t)| (text[..*off].matches('\n').count() + 1, t.as_str())).collect();
        assert_eq!(
            lines,
            [
                (1, "{{ config(materialized='table') }}"),
                (3, "{{ ref('orders') }}"),
                (4, "{%- if is_incremental() -%}"),
                (4, "{{this}}"),
                (4, "{% endif %}"),
                (5, "{# a comment #}"),
                (7, "{{ source('raw', 'events') }}"),
            ]
        );
        // An unclosed tag is shown to its line's end; a long one is cut.
        assert_eq!(jinja_tags("SELECT 1 FROM {{ ref('a')\nWHERE x"), [(14, "{{ ref('a')…".to_string())]);
        let long = format!("{{{{ ref('{}') }}}}", "a".repeat(100));
        assert_eq!(jinja_tags(&long)[0].1.chars().count(), 81);
        assert!(jinja_tags("SELECT {'a': {'b': 1}} AS s, [{'x': 2}] AS l FROM t").is_empty());
        // DuckDB's positional references (`#1`), as a map key right after a `{` or a struct's
        // value, are SQL, as is a `{#` no `#}` closes; a Jinja comment closed on a later line is one.
        assert!(jinja_tags("SELECT MAP {#1: 'x'} AS m FROM (SELECT 1 AS one)").is_empty());
        assert!(jinja_tags("SELECT MAP {#1: #2, #2: 'y'} AS m, {'a': #1} AS s, {'b': #2}::STRUCT(b int) AS t FROM (SELECT 1, 2)").is_empty());
        assert!(jinja_tags("SELECT {#1: 'x'} AS m, {'a': #1} AS s FROM t -- {# a note #}").is_empty());
        assert!(jinja_tags("SELECT MAP {#1: 'x'} AS m, '{#}' AS t FROM (SELECT 1 AS one)\n{#x FROM t").is_empty());
        assert_eq!(jinja_tags("SELECT MAP {#1: 'x'} AS m\n{# ported\n from dbt #}FROM t"), [(26, "{# ported from dbt #}".to_string())]);
    }

    /// The hint says what the model's language writes instead of dbt's `ref`, `source`,
    /// `config`, `this` and `is_incremental()`.
    #[test]
    fn a_jinja_tag_is_told_what_to_write_instead() {
        let (message, hint) = jinja_problem("{{ ref('orders') }}", Lang::Sql, "");
        assert_eq!(message, "`{{ ref('orders') }}` is Jinja (dbt's templating), which efmesh does not use: a model's query is plain SQL");
        assert_eq!(hint, "write `@ref(<schema>.orders)` (and list `<schema>.orders` in `-- refs:`); a model's name is `<schema>.<table>`");
        let (_, hint) = jinja_problem("{{ ref('pkg', \"stg.orders\", v=2) }}", Lang::Lua, "");
        assert_eq!(hint, "write `ref(\"stg.orders\")` spliced into the query text (`\"SELECT … FROM \" .. ref(\"stg.orders\")`)");
        let (_, hint) = jinja_problem("{{ ref('stg.orders') }}", Lang::Rhai, "");
        assert_eq!(hint, "write `ref(\"stg.orders\")` spliced into the query text (`` `SELECT … FROM ${ref(\"stg.orders\")}` ``)");
        let (_, hint) = jinja_problem("{{ source('raw', 'payments') }}", Lang::Sql, "");
        assert_eq!(
            hint,
            "a dbt source is a model of kind `external` here: declare `raw.payments` as one (`-- kind: external(table = raw.payments)`), then read it with `@ref(raw.payments)` (and list `raw.payments` in `-- refs:`)"
        );
        let (_, hint) = jinja_problem("{{ source('raw', 'payments') }}", Lang::Lua, "");
        assert!(hint.contains("(`kind = kind.external { table = \"raw.payments\" }`), then read it with `ref(\"raw.payments\")`"), "{hint}");
        assert!(
            jinja_problem("{{ config(materialized='view') }}", Lang::Sql, "").1.starts_with("a `.sql` model's settings are its header lines: `-- kind: full`")
        );
        assert!(
            jinja_problem("{{ config(materialized='view') }}", Lang::Lua, "")
                .1
                .starts_with("a model's settings are fields of `define_model`: `kind = kind.full()`")
        );
        assert!(jinja_problem("{{this}}", Lang::Sql, "").1.starts_with("write `@this`"));
        assert!(jinja_problem("{%- if is_incremental() -%}", Lang::Sql, "").1.contains("filter its rows with `@start` and `@end`"));
        let (message, hint) = jinja_problem("{% endif %}", Lang::Sql, " (line 2 of the query)");
        assert!(message.starts_with("`{% endif %}` (line 2 of the query) is Jinja"), "{message}");
        assert!(hint.starts_with("the query is SQL as written: read another model with `@ref(<schema>.<table>)`"), "{hint}");
    }

    /// Jinja in a Lua or Rhai query (or a statement) is a load error at the model naming the
    /// line of the query, not the engine's parser error at plan.
    #[test]
    fn jinja_in_a_script_query_or_statement_is_a_load_error() {
        let spec = json!({ "name": "s.m", "kind": { "kind": "full" }, "schema": [["id", "bigint"]] });
        assert_eq!(
            errors_of("models/m.lua", spec.clone(), Some("SELECT id\nFROM {{ ref('orders') }}")),
            [
                "models/m.lua:3: model `s.m`: `{{ ref('orders') }}` (line 2 of the query) is Jinja (dbt's templating), which efmesh does not use: a model's query is plain SQL\n  hint: write `ref(\"<schema>.orders\")` spliced into the query text (`\"SELECT … FROM \" .. ref(\"<schema>.orders\")`); a model's name is `<schema>.<table>`"
            ]
        );
        let mut with_statement = spec.clone();
        with_statement["post_statements"] = json!(["ANALYZE {{ this }}"]);
        let errs = errors_of("models/m.rhai", with_statement, Some("SELECT 1 AS id"));
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(errs[0].starts_with("models/m.rhai:3: model `s.m`: `post_statements`[1]: `{{ this }}` is Jinja (dbt's templating)"), "{errs:?}");
        // Text that only looks like it (in a literal, a struct literal) builds.
        let location = Location { file: "models/m.lua".into(), line: 1 };
        let query = "SELECT 1 AS id, '{{ ref(''x'') }}' AS t, {'k': {'n': 1}} AS s";
        assert!(build_model(spec.as_object().expect("an object"), Some(query), &Sites::default(), location).is_ok());
    }
}
