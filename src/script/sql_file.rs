//! Raw `.sql` model files: a header of `-- key: value` comment lines, then the query.
//!
//! ```sql
//! -- name:   med.census_daily
//! -- kind:   full
//! -- schema: day date, dept varchar, patients bigint
//! -- grain:  day, dept
//! -- refs:   med.stays
//! -- description: Patients per department and day
//! -- target: parquet    (optional: table | parquet | ducklake)
//! -- cron:   @daily     (optional: when intervals are due, or when `run` refreshes a full/keyed model; UTC)
//! -- owner:  care-analytics                         (optional metadata)
//! -- tags:   census, daily                          (optional metadata)
//! -- column_descriptions: day = 'Calendar day', patients = 'Distinct cases, any ward'
//! SELECT date_trunc('day', entered_at)::date AS day, dept, count(DISTINCT case_id) AS patients
//! FROM @ref(med.stays)
//! GROUP BY ALL
//! ```
//!
//! - `kind` takes options in parentheses: `incremental_by_time_range(time_column = moved_at,
//!   start = 2026-01-01, grain = day, batch_size = 7, lookback = 2)`, `external(path =
//!   data/x.csv, null_markers = [NA])`, `incremental_by_unique_key(key = [a, b])`,
//!   `incremental_by_partition(partitioned_by = [day, ward])`,
//!   `scd_type2(key = id, columns = [dept], invalidate_hard_deletes = false, renamed = {doctor = physician})`.
//!   Values are bare words, `'quoted strings'`, numbers, `true`/`false`, `[lists]` or `{maps = like_this}`.
//! - A line of the header that has no `key:` continues the previous key (long schemas). A blank
//!   line ends the header: `--` lines below it are comments of the query. `/* … */` comments
//!   before the header (a licence) are skipped.
//! - `@ref(schema.table)` references a model; every one must be declared in `refs`, and every
//!   declared ref must be used (the original's rule: refs are explicit in raw SQL).
//! - `@start` / `@end` are the interval bounds, as in every language.
//! - Statements separated by `;` before the query are its pre-statements, after it its
//!   post-statements (sqlmesh's layout; `-- statements_affect_data: true` fingerprints them).
//!
//! The file becomes the same [`Model`] the Lua and Rhai hosts build (through
//! [`super::builder::build_model`]), so the same model in any language has the same fingerprint.

use super::builder::{Site, Sites, build_model};
use super::foreign::{Foreign, Lang};
use crate::core::error::did_you_mean;
use crate::core::fragment::RefSite;
use crate::core::{LoadError, LoadErrors, Location, Model, ModelName};
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};

const KEYS: &[&str] = &[
    "name",
    "kind",
    "schema",
    "grain",
    "refs",
    "description",
    "target",
    "audits",
    "cron",
    "statements_affect_data",
    "owner",
    "tags",
    "column_descriptions",
    "ignored_lints",
    "signals",
];

/// Parses every `.sql` model file (paths relative to `root`).
///
/// # Errors
/// Every problem found, each with file:line.
pub fn load(root: &Path, files: &[PathBuf]) -> Result<Vec<Model>, LoadErrors> {
    let mut models = Vec::new();
    let mut errors = Vec::new();
    for f in files {
        match fs_err::read_to_string(root.join(f)) {
            Ok(text) => match parse(f, &text) {
                Ok(m) => models.push(m),
                Err(e) => errors.extend(e),
            },
            Err(e) => errors.push(LoadError::new(Some(Location { file: f.clone(), line: 0 }), None, format!("cannot read: {e}"))),
        }
    }
    if errors.is_empty() { Ok(models) } else { Err(LoadErrors(errors)) }
}

/// Parses one `.sql` model file's text; `file` is used in locations. Without macros and
/// audit definitions (see [`parse_with`]).
///
/// # Errors
/// Every problem found, each with file:line.
pub fn parse(file: &Path, text: &str) -> Result<Model, Vec<LoadError>> {
    parse_with(file, text, None)
}

/// The leading block of `-- key: value` lines of a `.sql` file (a model's or an audit's):
/// `(key, value, line)` in order, and the byte offset where the body starts. Before the first
/// key, blank lines, `--` comments without a key and `/* … */` comments (a licence, a note) are
/// skipped. Inside the header, a comment line without a key continues the previous value,
/// after a `,` when `comma_joined(key)` (list values such as `schema`), after a space otherwise.
/// A blank line ends the header: the `--` lines below it are comments of the query, and a line
/// there naming one of `keys` (`-- kind: full`) is an error at its line, naming the blank line.
/// An unknown key (with a "did you mean" among `keys`; `what` ends the message, e.g. " of a
/// `.sql` audit file") and a repeated key are errors at their line.
pub(super) fn read_header(
    text: &str,
    keys: &[&str],
    at: &dyn Fn(usize) -> Location,
    what: &str,
    comma_joined: &dyn Fn(&str) -> bool,
    errors: &mut Vec<LoadError>,
) -> (Vec<(String, String, usize)>, usize) {
    let mut header: Vec<(String, String, usize)> = Vec::new();
    let mut body_start = text.len();
    let mut offset = 0;
    // Whether a `-- key:` line was seen, and the line of the blank line that ended the header.
    let mut started = false;
    let mut ended_at: Option<usize> = None;
    // Inside a `/* … */` comment before the header, and where the first such comment starts.
    let mut in_block = false;
    let mut block_start: Option<usize> = None;
    for (i, raw) in text.split_inclusive('\n').enumerate() {
        let line = raw.trim();
        if in_block {
            match line.find("*/") {
                Some(end) if line[end + 2..].trim().is_empty() => in_block = false,
                Some(_) => {
                    // Code right after the comment's end: the body starts at the comment.
                    body_start = block_start.unwrap_or(offset);
                    break;
                }
                None => {}
            }
            offset += raw.len();
            continue;
        }
        if line.is_empty() {
            if started && ended_at.is_none() {
                ended_at = Some(i + 1);
            }
            offset += raw.len();
            continue;
        }
        if let Some(opened) = line.strip_prefix("/*").filter(|_| !started) {
            if block_start.is_none() {
                block_start = Some(offset);
            }
            match opened.find("*/") {
                Some(end) if opened[end + 2..].trim().is_empty() => {}
                Some(_) => {
                    body_start = offset;
                    break;
                }
                None => in_block = true,
            }
            offset += raw.len();
            continue;
        }
        let Some(comment) = line.strip_prefix("--") else {
            body_start = offset;
            break;
        };
        offset += raw.len();
        let comment = comment.trim();
        let key = comment.split_once(':').filter(|(k, _)| !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
        if let Some(blank) = ended_at {
            // Below the header: a comment of the query, unless it reads as a header line.
            if let Some((k, _)) = key.filter(|(k, _)| keys.contains(k)) {
                errors.push(
                    LoadError::new(Some(at(i + 1)), None, format!("header key `{k}` comes after the blank line {blank}, which ends the header"))
                        .with_hint(format!("remove the blank line to keep `-- {k}:` in the header; below the header, `--` lines are comments of the query")),
                );
            } else if let Some((k, _)) = key
                // One letter away (`audit`, `descripton`): closer than a did-you-mean, since a
                // comment word such as `note` must stay a comment (not `name`).
                && let Some(s) = keys.iter().copied().find(|key| crate::core::error::levenshtein(k, key) == 1)
            {
                // A near miss of a key (`-- audit:` for `audits`) would otherwise vanish as a
                // comment: refused as the header refuses it, with both ways out.
                errors.push(
                    LoadError::new(
                        Some(at(i + 1)),
                        None,
                        format!("`-- {k}:` after the blank line {blank}, which ends the header, reads like the header key `{s}`"),
                    )
                    .with_hint(format!("did you mean `-- {s}:` in the header (remove the blank line)? For a comment, write it without the colon")),
                );
            }
            continue;
        }
        match key {
            Some((k, v)) => {
                started = true;
                if !keys.contains(&k) {
                    let mut e = LoadError::new(Some(at(i + 1)), None, format!("unknown header key `{k}`{what}"));
                    if let Some(s) = did_you_mean(k, keys.iter().copied()) {
                        e = e.with_hint(format!("did you mean `{s}`?"));
                    }
                    errors.push(e);
                } else if header.iter().any(|(k2, _, _)| k2 == k) {
                    errors.push(LoadError::new(Some(at(i + 1)), None, format!("header key `{k}` is given twice")));
                } else {
                    header.push((k.to_string(), v.trim().to_string(), i + 1));
                }
            }
            None => {
                // A continuation of the previous key, or a plain comment before the header.
                if let Some((key, v, _)) = header.last_mut().filter(|_| !comment.is_empty()) {
                    if comma_joined(key) && !v.is_empty() && !v.ends_with(',') {
                        v.push(',');
                    }
                    v.push(' ');
                    v.push_str(comment);
                }
            }
        }
    }
    // Without a header, a `/* … */` comment before the body is the body's (as when it was not
    // skipped).
    if let Some(b) = block_start.filter(|_| !started) {
        body_start = body_start.min(b);
    }
    (header, body_start)
}

/// Parses one `.sql` model file's text, expanding its `@name(…)` macro calls and resolving
/// its `-- audits:` through `foreign`.
///
/// # Errors
/// Every problem found, each with file:line.
pub fn parse_with(file: &Path, text: &str, foreign: Option<&Foreign>) -> Result<Model, Vec<LoadError>> {
    // A byte-order mark (some editors save UTF-8 with one) is not part of the header.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let at = |line: usize| Location { file: file.to_path_buf(), line: line as u32 };
    if let Some(line) = super::nul_byte_line(text.as_bytes()) {
        return Err(vec![LoadError::new(Some(Location { file: file.to_path_buf(), line }), None, super::NUL_BYTE)]);
    }
    if text.trim().is_empty() {
        return Err(vec![
            LoadError::new(Some(at(1)), None, "the file is empty")
                .with_hint("a .sql model starts with `-- name:`, `-- kind:` and `-- schema:` lines, then its query"),
        ]);
    }
    let mut errors = Vec::new();
    let (header, body_start) = read_header(text, KEYS, &at, "", &|key| !matches!(key, "description" | "owner"), &mut errors);
    let get = |k: &str| header.iter().find(|(key, _, _)| key == k);
    let name_line = get("name").map(|(_, _, l)| *l).unwrap_or(1);
    let location = at(name_line);
    let model_name = get("name").and_then(|(_, v, _)| ModelName::parse(v).ok());
    let mut spec = Map::new();
    for (key, value, line) in &header {
        // A list or call left open (`not_null(n, unique(n)`, `n = 'unterminated`) would be read
        // as other values than written: refused at its line.
        let structured = !matches!(key.as_str(), "name" | "description" | "target" | "cron" | "owner" | "statements_affect_data");
        if let Err(msg) = if structured { balanced(value) } else { Ok(()) } {
            errors.push(LoadError::new(Some(at(*line)), model_name.clone(), format!("`{key}`: {msg}")));
            continue;
        }
        let parsed = match key.as_str() {
            "name" | "description" | "target" | "cron" | "owner" => Ok(Value::String(value.clone())),
            "tags" | "ignored_lints" => Ok(Value::Array(split_top(value, ',').into_iter().filter(|s| !s.is_empty()).map(Value::String).collect())),
            "column_descriptions" => parse_column_descriptions(value),
            "statements_affect_data" => match value.as_str() {
                "true" => Ok(Value::Bool(true)),
                "false" => Ok(Value::Bool(false)),
                other => Err(format!("expected `true` or `false`, got `{other}`")),
            },
            "audits" => Ok(Value::Null),
            "signals" => signal_uses(value),
            "kind" => parse_kind(value),
            "schema" => parse_schema(value),
            "grain" | "refs" => Ok(Value::Array(split_top(value, ',').into_iter().filter(|s| !s.is_empty()).map(Value::String).collect())),
            _ => unreachable!("keys are checked"),
        };
        match parsed {
            Ok(v) if key != "refs" && key != "audits" => {
                spec.insert(key.clone(), v);
            }
            Ok(_) => {}
            Err(msg) => errors.push(LoadError::new(Some(at(*line)), model_name.clone(), format!("`{key}`: {msg}"))),
        }
    }
    if get("name").is_none() {
        errors.push(
            LoadError::new(Some(at(1)), None, "missing header `-- name: <schema>.<table>`")
                .with_hint("a .sql model starts with `-- name:`, `-- kind:` and `-- schema:` lines"),
        );
    }

    // Declared refs.
    let mut declared: Vec<(ModelName, usize, bool)> = Vec::new();
    if let Some((_, v, line)) = get("refs") {
        for r in split_top(v, ',') {
            if r.is_empty() {
                continue;
            }
            match ModelName::parse(&r) {
                Ok(n) => declared.push((n, *line, false)),
                Err(e) => errors.push(LoadError::new(Some(at(*line)), model_name.clone(), format!("`refs`: {e}"))),
            }
        }
    }

    // The body: replace `@ref(x)` with site markers.
    let body = &text[body_start.min(text.len())..];
    let body_line0 = text[..body_start.min(text.len())].matches('\n').count();
    let mut sites = Sites::default();
    let mut query = String::new();
    let mut rest = body;
    let mut consumed = 0usize;
    while let Some(pos) = find_ref(rest) {
        query.push_str(&rest[..pos]);
        let after = &rest[pos + "@ref(".len()..];
        let line = body_line0 + body[..consumed + pos].matches('\n').count() + 1;
        let Some(close) = after.find(')') else {
            errors.push(LoadError::new(Some(at(line)), model_name.clone(), "`@ref(` without a closing `)`"));
            rest = "";
            break;
        };
        let target = after[..close].trim();
        match ModelName::parse(target) {
            Ok(n) => match declared.iter_mut().find(|(d, _, _)| *d == n) {
                Some(d) => {
                    d.2 = true;
                    query.push_str(&sites.record(Site::Ref(RefSite { target: n, location: at(line) })));
                }
                None => {
                    // A typo of a declared ref is far likelier than a missing declaration.
                    let names: Vec<String> = declared.iter().filter(|(_, _, used)| !used).map(|(d, _, _)| d.to_string()).collect();
                    let hint = match crate::core::error::did_you_mean(&n.to_string(), names.iter().map(String::as_str)) {
                        Some(close) => format!("did you mean `@ref({close})`? (declared in `refs`; otherwise add `{n}` to the `-- refs:` header line)"),
                        None => format!("add `{n}` to the `-- refs:` header line"),
                    };
                    errors.push(LoadError::new(Some(at(line)), model_name.clone(), format!("`@ref({n})` is not declared in `refs`")).with_hint(hint));
                }
            },
            Err(e) => errors.push(LoadError::new(Some(at(line)), model_name.clone(), format!("`@ref({target})`: {e}"))),
        }
        let step = pos + "@ref(".len() + close + 1;
        consumed += step;
        rest = &rest[step..];
    }
    query.push_str(rest);
    // `@name(…)` macro calls (the `@ref` sites are markers by now, passed through as text).
    // The text as written (with `@ref` markers, which hold no line break): lines are counted in
    // it, through the expansion's source map, so a multi-line expansion shifts no line after it.
    let written = query;
    let (query, source_map) = match super::macros::expand_mapped(&written, foreign, &|off| at(body_line0 + written[..off].matches('\n').count() + 1)) {
        Ok(q) => q,
        Err(e) => {
            errors.extend(e.into_iter().map(|mut e| {
                e.model = model_name.clone();
                e
            }));
            (written.clone(), super::macros::SourceMap::default())
        }
    };
    // `-- audits:` uses.
    let mut audits = Vec::new();
    if let Some((_, v, line)) = get("audits") {
        for piece in split_top(v, ',').into_iter().filter(|p| !p.is_empty()) {
            match audit_use(&piece) {
                Ok((name, positional, named)) => {
                    let resolved = match foreign {
                        Some(f) => f.render_audit(&name, positional, named, &at(*line), Lang::Sql, &[]),
                        None => Err(LoadError::new(Some(at(*line)), None, format!("audit `{name}`: no audit definitions are loaded here"))),
                    };
                    match resolved {
                        Ok(a) => audits.push(a),
                        Err(mut e) => {
                            e.model = model_name.clone();
                            errors.push(e);
                        }
                    }
                }
                Err(m) => errors.push(LoadError::new(Some(at(*line)), model_name.clone(), format!("`audits`: {m}"))),
            }
        }
    }
    for (n, line, used) in &declared {
        if !used {
            errors.push(LoadError::new(Some(at(*line)), model_name.clone(), format!("ref `{n}` is declared in `refs` but never used with `@ref({n})`")));
        }
    }
    let is_external = matches!(spec.get("kind").and_then(|k| k.get("kind")).and_then(Value::as_str), Some("external" | "seed"));
    // Statements before the query are pre-statements, after it post-statements (sqlmesh's layout).
    let line_of = |off: usize| body_line0 + written[..source_map.input_offset(off).min(written.len())].matches('\n').count() + 1;
    let expanded: &str = &query;
    // dbt's Jinja (`{{ ref('x') }}`, `{{ config(…) }}`, `{% if … %}`) is no SQL: each tag is an
    // error at its line (a macro's at its call), saying what to write instead, rather than the
    // engine's parser error at plan. The body is read no further (a `;` inside a tag would split
    // it into statements).
    let jinja = super::builder::jinja_tags(expanded);
    if !jinja.is_empty() {
        for (offset, tag) in &jinja {
            let (message, hint) = super::builder::jinja_problem(tag, Lang::Sql, "");
            errors.push(LoadError::new(Some(at(line_of(*offset))), model_name.clone(), message).with_hint(hint));
        }
        return Err(errors);
    }
    let mut body_refused = false;
    let (query, pre, post) = match split_body(expanded) {
        Ok(parts) => parts,
        Err((off, msg)) => {
            errors.push(LoadError::new(Some(at(line_of(off))), model_name.clone(), msg));
            body_refused = true;
            ((0, ""), Vec::new(), Vec::new())
        }
    };
    let query = query.1;
    // The file line of each line of the query (a slice of `expanded`), for errors placed at a
    // line of it (`Model::query_lines`).
    let query_lines: Vec<u32> = {
        let start = (query.as_ptr() as usize).saturating_sub(expanded.as_ptr() as usize);
        std::iter::once(0).chain(query.match_indices('\n').map(|(i, _)| i + 1)).map(|l| u32::try_from(line_of(start + l)).unwrap_or(u32::MAX)).collect()
    };
    let query = if query.is_empty() && is_external { None } else { Some(query) };
    // (A body refused above has its own error: not "no query" as well.)
    if query.is_some_and(str::is_empty) && pre.is_empty() && post.is_empty() && !header.is_empty() && !body_refused {
        errors.push(LoadError::new(Some(location.clone()), model_name.clone(), "the file has a header but no query"));
    }
    for (key, list) in [("pre_statements", &pre), ("post_statements", &post)] {
        if !list.is_empty() {
            spec.insert(key.into(), Value::Array(list.iter().map(|(_, s)| Value::String((*s).to_string())).collect()));
        }
    }
    // A model that does not build also reports its unknown signals (at the `signals` line), with
    // its other errors: they are checked after the load only on models that built.
    let signals_at = get("signals").map_or_else(|| location.clone(), |(_, _, l)| at(*l));
    if !errors.is_empty() {
        errors.extend(super::builder::unknown_signals(&spec, &signals_at, foreign));
        return Err(errors);
    }
    // The builder reports the metadata fields at the model; here their header line is known.
    let mut model = build_model(&spec, query, &sites, location).map_err(|errs| {
        errs.into_iter()
            .map(|mut e| {
                let line = e
                    .field
                    .into_iter()
                    .chain(["owner", "tags", "column_descriptions", "ignored_lints"].into_iter().filter(|k| e.message.starts_with(&format!("`{k}`"))))
                    .find_map(&get)
                    .map(|(_, _, l)| *l);
                // A statement's problem (`pre_statements`[n] …) is at that statement's own line.
                let statement = [("pre_statements", &pre), ("post_statements", &post)].into_iter().find_map(|(k, list)| {
                    let n: usize = e.message.strip_prefix(&format!("`{k}`["))?.split(']').next()?.parse().ok()?;
                    list.get(n.checked_sub(1)?).map(|(off, _)| line_of(*off))
                });
                if let Some(l) = line.or(statement) {
                    e.location = Some(at(l));
                }
                e
            })
            .chain(super::builder::unknown_signals(&spec, &signals_at, foreign))
            .collect::<Vec<_>>()
    })?;
    model.audits = audits;
    if model.body.is_some() {
        model.query_lines = query_lines;
    }
    // Each statement is located at its own line.
    for (st, (off, _)) in model.statements.pre.iter_mut().zip(&pre).chain(model.statements.post.iter_mut().zip(&post)) {
        st.location = at(line_of(*off));
    }
    if let Some((_, _, line)) = get("signals") {
        for s in &mut model.signals {
            s.location = at(*line);
        }
    }
    Ok(model)
}

/// A `.sql` body split on its top-level `;`: the query (the only statement, or else the one that
/// starts with `SELECT`, `WITH`, `FROM`, `VALUES`, `TABLE`, `PIVOT`, `UNPIVOT` or `(`), the
/// statements before it (pre) and after it (post), each with its byte offset. A body with no
/// statement at all is an empty query.
///
/// # Errors
/// A second query, or statements without a query (offset, message).
#[allow(clippy::type_complexity)]
fn split_body<'a>(body: &'a str) -> Result<((usize, &'a str), Vec<(usize, &'a str)>, Vec<(usize, &'a str)>), (usize, String)> {
    let b = body.as_bytes();
    let mut pieces: Vec<(usize, &'a str)> = Vec::new();
    let mut start = 0;
    let mut i = 0;
    let push = |from: usize, to: usize, pieces: &mut Vec<(usize, &'a str)>| {
        let text = &body[from..to];
        if !is_blank(text) {
            // Located at its first word (after whitespace and comments).
            let lead = text.len() - text.trim_start().len();
            pieces.push((from + first_word_at(text), text[lead..].trim_end()));
        }
    };
    while i < b.len() {
        if let Some(end) = crate::core::fragment::skip_literal_or_comment(b, i) {
            i = end;
            continue;
        }
        if b[i] == b';' {
            push(start, i, &mut pieces);
            start = i + 1;
        }
        i += 1;
    }
    push(start, b.len(), &mut pieces);
    if pieces.len() == 1 {
        // One statement is the query, whatever it starts with (as before statements existed).
        return Ok((pieces[0], Vec::new(), Vec::new()));
    }
    let queries: Vec<usize> = (0..pieces.len()).filter(|&k| is_query(pieces[k].1)).collect();
    match queries.as_slice() {
        [] if pieces.is_empty() => Ok(((0, ""), Vec::new(), Vec::new())),
        [] => Err((pieces[0].0, "the body has statements but no query (`SELECT …`): statements before the query are pre-statements, after it post-statements".into())),
        [q] => Ok((pieces[*q], pieces[..*q].to_vec(), pieces[q + 1..].to_vec())),
        [_, second, ..] => Err((
            pieces[*second].0,
            "a second query in the body: a model has one query; the statements before it are pre-statements, those after it post-statements (neither may be a query)".into(),
        )),
    }
}

/// True when `text` holds only whitespace and comments.
fn is_blank(text: &str) -> bool {
    first_word(text).is_empty()
}

/// The byte offset in `text` of its first character that is neither whitespace nor in a comment.
fn first_word_at(text: &str) -> usize {
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i].is_ascii_whitespace() {
            i += 1;
        } else if b[i..].starts_with(b"--") || b[i..].starts_with(b"/*") {
            i = crate::core::fragment::skip_literal_or_comment(b, i).unwrap_or(b.len());
        } else {
            return i;
        }
    }
    b.len()
}

/// The first word of `text` after whitespace and comments, upper-cased (`(` or another
/// punctuation character counts as a word); empty when there is none.
fn first_word(text: &str) -> String {
    let rest = &text[first_word_at(text)..];
    let word: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
    if word.is_empty() { rest.chars().take(1).collect() } else { word.to_ascii_uppercase() }
}

/// True when a statement of the body is a query (the model's) rather than a pre/post statement.
fn is_query(text: &str) -> bool {
    matches!(first_word(text).as_str(), "SELECT" | "WITH" | "FROM" | "VALUES" | "TABLE" | "PIVOT" | "UNPIVOT" | "(")
}

/// The `-- signals:` header: `name, other(key = 'value', n = 3)`, as the list
/// [`super::builder::parse_signals`] reads (each use a map with its `name`).
fn signal_uses(value: &str) -> Result<Value, String> {
    let mut out = Vec::new();
    for piece in split_top(value, ',').into_iter().filter(|p| !p.is_empty()) {
        let (name, positional, mut named) = audit_use(&piece).map_err(|m| m.replace("audit", "signal"))?;
        if !positional.is_empty() {
            return Err(format!("signal `{name}`: arguments are named: write `{name}(key = value)`"));
        }
        if named.contains_key("name") {
            return Err(format!("signal `{name}`: `name` cannot be an argument name"));
        }
        named.insert("name".into(), Value::String(name));
        out.push(Value::Object(named));
    }
    Ok(Value::Array(out))
}

/// One use of the `-- audits:` header: `name`, `name(a, b)` or `name(p = v, blocking = false)`
/// (`:=` is accepted for `=`): the name, positional and named arguments.
#[allow(clippy::type_complexity)]
fn audit_use(piece: &str) -> Result<(String, Vec<Value>, Map<String, Value>), String> {
    let (name, inner) = match piece.find('(') {
        Some(p) => (piece[..p].trim(), Some(piece[p + 1..].strip_suffix(')').ok_or_else(|| format!("`{piece}`: expected `)` at the end"))?)),
        None => (piece.trim(), None),
    };
    if !crate::core::name::is_identifier(name) {
        return Err(format!("`{piece}` is not an audit use: write `name` or `name(arguments)`, e.g. `not_null(id)`"));
    }
    let mut positional = Vec::new();
    let mut named = Map::new();
    for arg in inner.map(|i| split_top(i, ',')).unwrap_or_default() {
        if arg.is_empty() {
            return Err(format!("audit `{name}`: an empty argument"));
        }
        let key = arg.split_once('=').map(|(k, v)| (k.trim().trim_end_matches(':').trim(), v)).filter(|(k, _)| crate::core::name::is_identifier(k));
        match key {
            Some((k, v)) if v.trim().is_empty() => return Err(format!("audit `{name}`: argument `{k}` has no value")),
            Some((k, v)) => {
                if named.insert(k.to_string(), audit_value(v)).is_some() {
                    return Err(format!("audit `{name}`: argument `{k}` is given twice"));
                }
            }
            None => positional.push(audit_value(&arg)),
        }
    }
    Ok((name.to_string(), positional, named))
}

/// An audit (or signal) argument: [`scalar`], with negative and decimal numbers too, in lists
/// as well (`values = [1.5, -2]`). A bare number with a leading zero (`01`, `-007`) is text, as
/// written ([`leading_zero`]); kind options are not argument values and keep reading `07` as 7.
fn audit_value(v: &str) -> Value {
    if let Some(inner) = v.trim().strip_prefix('[').and_then(|x| x.strip_suffix(']')) {
        return Value::Array(split_top(inner, ',').into_iter().filter(|s| !s.is_empty()).map(|s| audit_value(&s)).collect());
    }
    if leading_zero(v) {
        return Value::String(v.trim().to_string());
    }
    match scalar(v) {
        Value::String(s) if s == v.trim() && !leading_zero(&s) => {
            if let Ok(i) = s.parse::<i64>() {
                Value::from(i)
            } else if let Some(n) = s.parse::<f64>().ok().filter(|f| f.is_finite() && s.contains('.')).and_then(serde_json::Number::from_f64) {
                Value::Number(n)
            } else {
                Value::String(s)
            }
        }
        other => other,
    }
}

/// Position of the next `@ref(` outside string literals and comments.
fn find_ref(s: &str) -> Option<usize> {
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if let Some(end) = crate::core::fragment::skip_literal_or_comment(b, i) {
            i = end;
            continue;
        }
        if b[i..].starts_with(b"@ref(") {
            return Some(i);
        }
        i += 1;
    }
    None
}

/// Checks that `value` closes every `(`, `[`, `{` and quote it opens, and closes none it did not
/// open. A `'` opens a quoted value except after a letter or digit (`data/it's.csv` is a bare
/// word, `a<>'x, y'` holds a quoted value); a `"…"` identifier is skipped; a quote doubled
/// inside quotes is one quote character.
fn balanced(value: &str) -> Result<(), String> {
    let mut open: Vec<char> = Vec::new();
    let mut quote: Option<char> = None;
    let mut prev = ' ';
    let mut chars = value.chars().peekable();
    while let Some(c) = chars.next() {
        // An apostrophe inside a word (`it's`) opens nothing; anywhere else a `'` opens a quote.
        let starts = !prev.is_alphanumeric();
        prev = c;
        match (quote, c) {
            // A doubled quote inside quotes is one quote character.
            (Some(q), c) if c == q && chars.peek() == Some(&q) => {
                chars.next();
                continue;
            }
            (Some(q), c) if c == q => {
                quote = None;
                continue;
            }
            (Some(_), _) => continue,
            (None, '\'') if starts => {
                quote = Some('\'');
                continue;
            }
            (None, '"') => {
                quote = Some('"');
                continue;
            }
            _ => {}
        }
        match c {
            '(' | '[' | '{' => open.push(c),
            ')' | ']' | '}' => {
                let want = match c {
                    ')' => '(',
                    ']' => '[',
                    _ => '{',
                };
                if open.pop() != Some(want) {
                    return Err(format!("`{value}` closes a `{c}` it never opened"));
                }
            }
            _ => {}
        }
    }
    if let Some(q) = quote {
        return Err(format!("`{value}` has an unclosed `{q}`"));
    }
    match open.last() {
        Some(c) => Err(format!("`{value}` has an unclosed `{c}`")),
        None => Ok(()),
    }
}

/// Splits on `sep` outside parentheses, brackets and quotes; trims each piece.
fn split_top(s: &str, sep: char) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    // Quotes as [`balanced`] reads them: a `'` opens a quoted value except after a letter or
    // digit (`seeds/it's.csv` is a bare word), a doubled quote inside quotes is one character.
    let mut quote: Option<char> = None;
    let mut prev = ' ';
    let mut cur = String::new();
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        let starts = !prev.is_alphanumeric();
        prev = c;
        match (quote, c) {
            (Some(q), c) if c == q && chars.peek() == Some(&q) => {
                cur.push(c);
                cur.extend(chars.next());
                continue;
            }
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'') if starts => quote = Some('\''),
            (None, '"') => quote = Some('"'),
            (None, '(' | '[' | '{') => depth += 1,
            (None, ')' | ']' | '}') => depth -= 1,
            _ => {}
        }
        if c == sep && depth == 0 && quote.is_none() {
            out.push(cur.trim().to_string());
            cur.clear();
        } else {
            cur.push(c);
        }
    }
    if !cur.trim().is_empty() || !out.is_empty() {
        out.push(cur.trim().to_string());
    }
    out
}

fn parse_schema(v: &str) -> Result<Value, String> {
    let mut cols = Vec::new();
    for piece in split_top(v, ',') {
        if piece.is_empty() {
            continue;
        }
        // A quoted name may hold spaces (`"order date" date`), a doubled quote standing for one.
        let (name, ty) = match piece.strip_prefix('"') {
            Some(quoted) => {
                let mut name = String::new();
                let mut rest = quoted;
                loop {
                    let Some((inside, after)) = rest.split_once('"') else {
                        return Err(format!("`{piece}`: the column name's `\"` is never closed"));
                    };
                    name.push_str(inside);
                    match after.strip_prefix('"') {
                        Some(more) => {
                            name.push('"');
                            rest = more;
                        }
                        None => break (name, after),
                    }
                }
            }
            None => match piece.split_once(char::is_whitespace) {
                Some((name, ty)) => (name.to_string(), ty),
                None => return Err(format!("`{piece}` needs a column name and a type")),
            },
        };
        if name.is_empty() || ty.trim().is_empty() {
            return Err(format!("`{piece}` needs a column name and a type"));
        }
        cols.push(Value::Array(vec![Value::String(name), Value::String(ty.trim().to_string())]));
    }
    // Refused here, at the header line: the model's own check ("the schema declares no
    // columns") would place it at the `-- name:` line.
    if cols.is_empty() {
        return Err("declares no columns: list the output columns as `name type` pairs (`-- schema: id bigint, day date`)".to_string());
    }
    Ok(Value::Array(cols))
}

/// `-- column_descriptions: id = 'The order id', amount = 'In EUR, with VAT'`: a map from
/// column to description (quote a description holding a comma).
fn parse_column_descriptions(v: &str) -> Result<Value, String> {
    let mut m = Map::new();
    for piece in split_top(v, ',').into_iter().filter(|p| !p.is_empty()) {
        let Some((col, text)) = piece.split_once('=') else {
            return Err(format!("`{piece}` must be `column = 'description'`"));
        };
        let col = col.trim().trim_matches('"');
        if !crate::core::name::is_identifier(col) {
            return Err(format!("`{col}` is not a column name (write `column = 'description'`)"));
        }
        let text = match scalar(text) {
            Value::String(s) => s,
            other => other.to_string(),
        };
        if m.insert(col.to_string(), Value::String(text)).is_some() {
            return Err(format!("column `{col}` is described twice"));
        }
    }
    Ok(Value::Object(m))
}

fn scalar(v: &str) -> Value {
    let v = v.trim();
    if let Some(inner) = v.strip_prefix('[').and_then(|x| x.strip_suffix(']')) {
        return Value::Array(split_top(inner, ',').into_iter().filter(|s| !s.is_empty()).map(|s| scalar(&s)).collect());
    }
    // `{a = b, c = d}`: a map (e.g. `renamed = {doctor = physician}`); an entry without `=`
    // leaves the whole value as text, which the builder then reports as malformed.
    if let Some(inner) = v.strip_prefix('{').and_then(|x| x.strip_suffix('}')) {
        let mut m = Map::new();
        for piece in split_top(inner, ',').into_iter().filter(|s| !s.is_empty()) {
            let Some((k, val)) = piece.split_once('=') else { return Value::String(v.to_string()) };
            let key = match scalar(k) {
                Value::String(k) => k,
                other => other.to_string(),
            };
            m.insert(key, scalar(val));
        }
        return Value::Object(m);
    }
    if let Some(q) = v.strip_prefix('\'').and_then(|x| x.strip_suffix('\'')) {
        return Value::String(q.to_string());
    }
    match v {
        "true" => return Value::Bool(true),
        "false" => return Value::Bool(false),
        _ => {}
    }
    if let Ok(n) = v.parse::<u64>() {
        return Value::from(n);
    }
    Value::String(v.to_string())
}

/// True for a bare number written with a leading zero (`01`, `-007`, `00.5`): text, not a
/// number, as an audit or signal argument ([`audit_value`]: a code such as `01` would otherwise
/// become `1`, and an `accepted_values` list of them match `'001'` or `' 1'`). `0`, `0.5` and
/// `-0.25` are numbers. Kind options (`batch_size = 07`) are numbers whatever their zeros.
fn leading_zero(v: &str) -> bool {
    let digits = v.trim().trim_start_matches(['-', '+']).as_bytes();
    digits.len() > 1 && digits[0] == b'0' && digits[1].is_ascii_digit()
}

fn parse_kind(v: &str) -> Result<Value, String> {
    let v = v.trim();
    let (tag, opts) = match v.find('(') {
        Some(p) => {
            let inner = v[p + 1..].strip_suffix(')').ok_or("expected `)` at the end of the kind options")?;
            (v[..p].trim(), inner)
        }
        None => (v, ""),
    };
    // Checked here too, so the error points at the `-- kind:` line, not the model's first line.
    if !super::builder::KIND_TAGS.contains(&tag) {
        return Err(super::builder::unknown_kind(tag));
    }
    let mut m = Map::new();
    m.insert("kind".into(), Value::String(tag.to_string()));
    for piece in split_top(opts, ',') {
        if piece.is_empty() {
            continue;
        }
        let (k, val) = piece.split_once('=').ok_or_else(|| format!("option `{piece}` must be `key = value`"))?;
        if m.insert(k.trim().to_string(), scalar(val)).is_some() {
            return Err(format!("option `{}` is given twice", k.trim()));
        }
    }
    Ok(Value::Object(m))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::{Kind, Node};

    fn p(text: &str) -> Result<Model, Vec<LoadError>> {
        parse(Path::new("models/x.sql"), text)
    }

    #[test]
    fn statements_before_and_after_the_query_are_pre_and_post_statements() {
        let m = p("-- name: a.b\n-- kind: full\n-- schema: x varchar\nSET threads = 1;\n-- why\nSELECT ';' AS x -- not; a split\n;\n/* c; */ ANALYZE @this;\n")
            .unwrap_or_else(|e| panic!("{e:?}"));
        let texts = |l: &[crate::core::Statement]| -> Vec<(String, u32)> {
            l.iter().map(|s| (s.sql.render(&crate::core::fragment::CanonicalResolver), s.location.line)).collect()
        };
        assert_eq!(texts(&m.statements.pre), [("SET threads = 1".to_string(), 4)]);
        assert_eq!(texts(&m.statements.post), [("/* c; */ ANALYZE \"@this\"".to_string(), 8)]);
        assert!(m.body.is_some_and(|b| b.render(&crate::core::fragment::CanonicalResolver).contains("SELECT ';' AS x")));
        // A body of one statement is the query, whatever its first word.
        let m = p("-- name: a.b\n-- kind: full\n-- schema: x varchar\nPIVOT t ON y USING sum(v);\n").unwrap_or_else(|e| panic!("{e:?}"));
        assert!(m.statements.is_empty() && m.body.is_some());
        let e = p("-- name: a.b\n-- kind: full\n-- schema: x varchar\nSET a = 1;\nANALYZE t\n").unwrap_err();
        assert!(e[0].to_string().contains("models/x.sql:4") && e[0].to_string().contains("no query"), "{e:?}");
    }

    /// A quoted column name in `-- schema:` may hold spaces and doubled quotes, as Lua's
    /// `{ "order date", "date" }` does (it was split at its first space).
    #[test]
    fn a_quoted_schema_column_name_keeps_its_spaces() {
        let m = p("-- name: a.b\n-- kind: full\n-- schema: id integer, \"order date\" date, \"a \"\"q\"\"\" varchar\nSELECT 1 AS id, DATE '2026-01-01' AS \"order date\", 'x' AS \"a \"\"q\"\"\"\n")
            .unwrap_or_else(|e| panic!("{e:?}"));
        let cols: Vec<(String, String)> = m.schema.0.iter().map(|c| (c.name.clone(), c.ty.clone())).collect();
        assert_eq!(cols, [("id".into(), "integer".into()), ("order date".into(), "date".into()), ("a \"q\"".into(), "varchar".into())]);
        let e = p("-- name: a.b\n-- kind: full\n-- schema: \"order date date\nSELECT 1\n").unwrap_err();
        assert!(e[0].to_string().contains("models/x.sql:3") && e[0].to_string().contains("has an unclosed"), "{e:?}");
    }

    #[test]
    fn non_ascii_text_and_a_byte_order_mark_are_read_and_the_query_lines_are_the_files() {
        // A byte-order mark before the header, a non-ASCII name before `@ref`, `@this` after one.
        let m = p("\u{feff}-- name: a.b\n-- kind: full\n-- schema: größe bigint\n-- refs: a.c\n\nSELECT n AS größe\nFROM @ref(a.c)\nWHERE 'é' <> ''\n")
            .unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(m.name.to_string(), "a.b");
        assert_eq!(m.parents().into_iter().map(|n| n.to_string()).collect::<Vec<_>>(), ["a.c"]);
        assert_eq!(m.query_lines, [6, 7, 8]);
        assert_eq!(m.query_location(2).map(|l| l.to_string()).as_deref(), Some("models/x.sql:7"));
        assert_eq!((m.query_location(4), m.query_location(0)), (None, None));
        let mut f = crate::core::Fragment::default();
        f.push_text("SELECT 'ß' AS größe FROM @this");
        f.bind_this(&m.name);
        assert!(f.render(&crate::core::fragment::CanonicalResolver).ends_with("FROM \"@this\""));
    }

    #[test]
    fn a_header_value_left_open_or_an_argument_without_a_value_is_an_error_at_its_line() {
        let head = "-- name: a.b\n-- kind: full\n-- schema: n bigint, r varchar\n";
        for (line, want) in [
            ("-- audits: not_null(n, unique(n)", "models/x.sql:4: model `a.b`: `audits`: `not_null(n, unique(n)` has an unclosed `(`"),
            ("-- audits: not_null(n))", "models/x.sql:4: model `a.b`: `audits`: `not_null(n))` closes a `)` it never opened"),
            ("-- audits: accepted_range(column = n, min = )", "models/x.sql:4: model `a.b`: `audits`: audit `accepted_range`: argument `min` has no value"),
            ("-- column_descriptions: n = 'unterminated", "models/x.sql:4: model `a.b`: `column_descriptions`: `n = 'unterminated` has an unclosed `'`"),
        ] {
            let errs = p(&format!("{head}{line}\nSELECT 1 AS n, 'x' AS r\n")).unwrap_err();
            assert!(errs.iter().any(|e| e.to_string() == want), "{line}: {errs:?}");
        }
        // Quotes (and quoted identifiers) hold brackets and doubled quotes; an apostrophe inside
        // a bare word is no quote.
        p(&format!("{head}-- column_descriptions: n = 'a (b] it''s (x', r = 'x'\nSELECT 1 AS n, 'x' AS r\n")).unwrap_or_else(|e| panic!("{e:?}"));
        p("-- name: a.b\n-- kind: external(path = data/it's.csv)\n-- schema: n bigint\n").unwrap_or_else(|e| panic!("{e:?}"));
        // …and splits nothing after it into its value.
        let m =
            p(&format!("{head}-- column_descriptions: n = the customer's id, r = the value\nSELECT 1 AS n, 'x' AS r\n")).unwrap_or_else(|e| panic!("{e:?}"));
        let described: Vec<(String, Option<String>)> = m.schema.0.iter().map(|c| (c.name.clone(), m.column_description(&c.name).map(str::to_string))).collect();
        assert_eq!(described, [("n".to_string(), Some("the customer's id".to_string())), ("r".to_string(), Some("the value".to_string()))]);
        let m = p("-- name: a.b\n-- kind: seed(path = seeds/it's.csv, delimiter = ';')\n-- schema: n bigint\n").unwrap_or_else(|e| panic!("{e:?}"));
        // A quote right after an operator is one: its comma splits nothing.
        assert_eq!(split_top("condition = first<>'a,b', x = a||', '||b", ','), ["condition = first<>'a,b'", "x = a||', '||b"]);
        assert!(matches!(&m.kind, Kind::Seed(s) if s.path == "seeds/it's.csv" && s.delimiter == Some(';')), "{:?}", m.kind);
    }

    /// An empty `-- schema:` (or one of commas only) is an error at its own line: the model's
    /// check ("the schema declares no columns") placed it at the `-- name:` line.
    #[test]
    fn an_empty_schema_line_is_an_error_at_its_line() {
        for schema in ["-- schema:", "-- schema:   ", "-- schema: ,"] {
            let errs = p(&format!("-- name: a.b\n-- kind: full\n{schema}\n\nSELECT 1 AS x\n")).unwrap_err();
            let text: Vec<String> = errs.iter().map(ToString::to_string).collect();
            assert!(text.iter().any(|e| e.starts_with("models/x.sql:3: model `a.b`: `schema`: declares no columns")), "{schema}: {text:?}");
        }
        // Continued on the next comment line, it declares its columns.
        let m = p("-- name: a.b\n-- kind: full\n-- schema:\n--   x integer\nSELECT 1 AS x\n").unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(m.schema.0.len(), 1);
    }

    /// A NUL byte anywhere in a `.sql` model (header, query, comment) refuses the file at the line
    /// of the first one, before anything else is read from it.
    #[test]
    fn a_nul_byte_is_refused_at_its_line() {
        for (text, line) in [
            ("-- name: a.b\n-- kind: full\n-- schema: x integer\nSELECT 1 AS x -- \0\n", 4),
            ("-- name: a.b\0\n-- kind: full\n-- schema: x integer\nSELECT 1 AS x\n", 1),
            ("-- name: a.b\n-- kind: full\n-- schema: x varchar\n\nSELECT 'a\0' AS x\n-- \0\n", 5),
        ] {
            let errs = p(text).unwrap_err();
            assert_eq!(errs.len(), 1, "{errs:?}");
            assert_eq!(errs[0].location.as_ref().map(|l| l.line), Some(line), "{errs:?}");
            assert!(errs[0].message.contains("NUL byte"), "{errs:?}");
        }
        assert_eq!(super::super::nul_byte_line(b"a\nb\n\nc\0"), Some(4));
        assert_eq!(super::super::nul_byte_line(b"no nul\n"), None);
    }

    #[test]
    fn a_kind_option_given_twice_is_an_error() {
        let errs = p("-- name: a.b\n-- kind: incremental_by_time_range(time_column = day, start = 2026-01-01, time_column = n)\n-- schema: day date, n bigint\nSELECT 1\n").unwrap_err();
        assert!(errs.iter().any(|e| e.to_string().contains("models/x.sql:2") && e.to_string().contains("option `time_column` is given twice")), "{errs:?}");
    }

    #[test]
    fn an_empty_file_is_one_error_and_a_header_without_a_query_another() {
        for text in ["", "\n  \n"] {
            let errs = p(text).unwrap_err();
            assert_eq!(errs.iter().map(|e| (e.message.as_str(), e.location.as_ref().map(|l| l.line))).collect::<Vec<_>>(), [("the file is empty", Some(1))]);
        }
        // A comment but no header: the missing header only (it has no header to lack a query).
        let errs = p("-- hello\n").unwrap_err();
        assert_eq!(errs.iter().map(|e| e.message.as_str()).collect::<Vec<_>>(), ["missing header `-- name: <schema>.<table>`"]);
        let errs = p("-- name: a.b\n-- kind: full\n-- schema: x int\n").unwrap_err();
        assert_eq!(errs.iter().map(|e| e.message.as_str()).collect::<Vec<_>>(), ["the file has a header but no query"]);
    }

    #[test]
    fn two_queries_in_a_body_are_one_error_not_also_no_query() {
        let text = "-- name: s.m\n-- kind: full\n-- schema: a integer\nSELECT 1 AS a; SELECT 2 AS a\n";
        let errs = p(text).unwrap_err();
        let messages: Vec<&str> = errs.iter().map(|e| e.message.as_str()).collect();
        assert_eq!(messages.len(), 1, "{messages:?}");
        assert!(messages[0].starts_with("a second query in the body"), "{messages:?}");
    }

    #[test]
    fn header_and_refs_become_a_model() {
        let m = p("-- name: med.census\n-- kind: full\n-- schema: day date,\n--   n decimal(18, 2)\n-- refs: med.stays\nSELECT day, n FROM @ref(med.stays);\n")
            .unwrap();
        assert_eq!(m.name.to_string(), "med.census");
        assert_eq!(m.schema.0.len(), 2);
        assert_eq!(m.schema.0[1].ty, "decimal(18, 2)");
        let refs: Vec<_> = m.body.as_ref().unwrap().refs().map(|r| (r.target.to_string(), r.location.line)).collect();
        assert_eq!(refs, vec![("med.stays".to_string(), 6)]);
        assert_eq!(m.location.line, 1);
    }

    #[test]
    fn kind_options_parse() {
        let m = p("-- name: a.b\n-- kind: incremental_by_time_range(time_column = t, start = '2026-01-01', grain = hour, batch_size = 7)\n-- schema: t timestamp\nSELECT t FROM x WHERE t >= @start AND t < @end").unwrap();
        let Kind::IncrementalByTimeRange(t) = &m.kind else { panic!() };
        assert_eq!((t.time_column.as_str(), t.batch_size, t.grain.as_str()), ("t", 7, "hour"));
        assert!(m.body.unwrap().nodes.iter().any(|n| matches!(n, Node::Start)));
    }

    #[test]
    fn maps_parse_as_objects() {
        let m = p("-- name: a.b\n-- kind: scd_type2(key = id, renamed = {doc = physician, 'w' = ward})\n-- schema: id bigint, physician varchar, ward varchar\nSELECT 1 AS id, 'x' AS physician, 'y' AS ward").unwrap();
        let Kind::ScdType2(s) = &m.kind else { panic!() };
        assert_eq!(s.renamed, vec![("doc".to_string(), "physician".to_string()), ("w".to_string(), "ward".to_string())]);
    }

    #[test]
    fn undeclared_and_unused_refs_are_named() {
        let errs = p("-- name: a.b\n-- kind: full\n-- schema: x int\n-- refs: a.c\nSELECT x FROM @ref(a.d)").unwrap_err();
        let text: Vec<String> = errs.iter().map(ToString::to_string).collect();
        assert!(text.iter().any(|e| e.contains("`@ref(a.d)` is not declared") && e.starts_with("models/x.sql:5")), "{text:?}");
        assert!(text.iter().any(|e| e.contains("`a.c` is declared") && e.starts_with("models/x.sql:4")), "{text:?}");
    }

    #[test]
    fn a_typo_of_a_declared_ref_gets_a_did_you_mean() {
        let errs = p("-- name: a.b\n-- kind: full\n-- schema: x int\n-- refs: med.stays\nSELECT x FROM @ref(med.stay)").unwrap_err();
        let hints: Vec<String> = errs.iter().filter_map(|e| e.hint.clone()).collect();
        assert!(hints.iter().any(|h| h.starts_with("did you mean `@ref(med.stays)`?")), "{hints:?}");
    }

    #[test]
    fn an_unknown_kind_is_reported_on_its_line() {
        let errs = p("-- name: a.b\n-- kind: fulll\n-- schema: x int\nSELECT 1 AS x").unwrap_err();
        let e = errs[0].to_string();
        assert!(e.starts_with("models/x.sql:2") && e.contains("did you mean `full`"), "{e}");
    }

    #[test]
    fn a_bare_number_with_a_leading_zero_is_text_and_list_numbers_keep_sign_and_fraction() {
        use serde_json::json;
        let (_, _, named) = audit_use("accepted_values(column = code, values = [01, 02, '03', 4, -5, 1.5, 0, 0.5])").unwrap();
        assert_eq!(named["values"], json!(["01", "02", "03", 4, -5, 1.5, 0, 0.5]));
        let (_, positional, _) = audit_use("accepted_range(n, -007, 00)").unwrap();
        assert_eq!(positional, [json!("n"), json!("-007"), json!("00")]);
        assert_eq!((audit_value("01"), audit_value("10"), audit_value("0")), (json!("01"), json!(10), json!(0)));
    }

    /// Kind options are not argument values: `batch_size = 07` is 7, as before audit arguments
    /// read a leading zero as text.
    #[test]
    fn a_kind_option_with_a_leading_zero_is_still_a_number() {
        let m = p("-- name: a.b\n-- kind: incremental_by_time_range(time_column = t, start = '2026-01-01', batch_size = 07, lookback = 01)\n-- schema: t timestamp\nSELECT t FROM x WHERE t >= @start AND t < @end").unwrap_or_else(|e| panic!("{e:?}"));
        let Kind::IncrementalByTimeRange(t) = &m.kind else { panic!() };
        assert_eq!((t.batch_size, t.lookback), (7, 1));
    }

    #[test]
    fn unknown_header_keys_get_a_suggestion() {
        let errs = p("-- name: a.b\n-- knd: full\n-- schema: x int\nSELECT 1 AS x").unwrap_err();
        assert!(errs[0].to_string().contains("did you mean `kind`"), "{:?}", errs[0]);
    }

    #[test]
    fn refs_inside_strings_and_comments_are_text() {
        let m = p("-- name: a.b\n-- kind: full\n-- schema: x varchar\nSELECT '@ref(a.c)' AS x -- @ref(a.d)\n").unwrap();
        assert_eq!(m.body.unwrap().refs().count(), 0);
    }

    /// A blank line ends the header: a prose `--` comment below it is the query's, not a
    /// continuation of the last key (it was read into `refs`, `schema` or `description`), while a
    /// keyless line inside the header still continues its key.
    #[test]
    fn a_comment_below_a_blank_line_after_the_header_is_the_querys_not_the_last_keys() {
        let head = "-- name: a.b\n-- kind: full\n";
        let m = p(&format!(
            "{head}-- schema: region varchar, total bigint\n-- refs: a.c\n\n-- counts events per region\nSELECT region, 1 AS total FROM @ref(a.c)\n"
        ))
        .unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(m.parents().into_iter().map(|n| n.to_string()).collect::<Vec<_>>(), ["a.c"]);
        let m = p(&format!("{head}-- schema: region varchar, total bigint\n\n-- total is in cents\nSELECT 'x' AS region, 1 AS total\n"))
            .unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(m.schema.0.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), ["region", "total"]);
        assert_eq!(m.query_lines, [6]);
        let m = p(&format!("{head}-- schema: x bigint\n-- description: Totals\n-- owner: ops\n\n-- amounts in cents\n\n-- note: raw\nSELECT 1 AS x\n"))
            .unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!((m.owner.as_deref(), m.description.as_deref()), (Some("ops"), Some("Totals")));
        // Inside the header (no blank line), a line without a key continues the previous one.
        let m = p(&format!("{head}-- schema: x bigint\n-- description: Totals\n--   in cents\nSELECT 1 AS x\n")).unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(m.description.as_deref(), Some("Totals in cents"));
        // A header line below the blank line is no comment: an error at its line, naming the blank.
        let errs = p(&format!("{head}\n-- schema: x bigint\nSELECT 1 AS x\n")).unwrap_err();
        let text: Vec<String> = errs.iter().map(ToString::to_string).collect();
        assert!(text.iter().any(|e| e.starts_with("models/x.sql:4: header key `schema` comes after the blank line 3, which ends the header")), "{text:?}");
    }

    /// A `/* … */` comment above the header (a licence) is skipped: it hid the header ("missing
    /// header `-- name: …`" and an undeclared `@ref`).
    /// Below the blank line that ends the header, a near miss of a header key is refused (it
    /// would vanish as a comment: an audit silently missing), a word that is no key is a comment.
    #[test]
    fn a_near_miss_of_a_header_key_below_the_header_is_refused() {
        let errs = p("-- name: a.b\n-- kind: full\n-- schema: id integer\n\n-- audit: not_null(columns = [id])\nSELECT 1 AS id").unwrap_err();
        let e = errs[0].to_string();
        assert!(e.starts_with("models/x.sql:5") && e.contains("reads like the header key `audits`"), "{e}");
        assert!(p("-- name: a.b\n-- kind: full\n-- schema: id integer\n\n-- note: one row\nSELECT 1 AS id").is_ok());
    }

    #[test]
    fn a_block_comment_before_the_header_is_skipped() {
        let rest = "-- name: mart.blk\n-- kind: view\n-- schema: region varchar\n-- refs: stg.events\nSELECT DISTINCT region FROM @ref(stg.events)\n";
        for (lead, name_line) in [("/* Copyright ACME */\n", 2), ("\n/*\n * Copyright ACME\n * -- name: not.this\n */\n\n-- a note\n", 8)] {
            let m = p(&format!("{lead}{rest}")).unwrap_or_else(|e| panic!("{lead:?}: {e:?}"));
            assert_eq!((m.name.to_string(), m.location.line), ("mart.blk".to_string(), name_line), "{lead:?}");
            assert_eq!(m.parents().into_iter().map(|n| n.to_string()).collect::<Vec<_>>(), ["stg.events"], "{lead:?}");
        }
        // Without a header after it, the comment starts the body: the header is missing.
        let errs = p("/* note */ SELECT 1 AS x\n").unwrap_err();
        assert_eq!(errs.iter().map(|e| e.message.as_str()).collect::<Vec<_>>(), ["missing header `-- name: <schema>.<table>`"]);
    }

    /// A header without `-- schema:` or `-- kind:` is told about that header line, in `.sql`
    /// words, at the model's `-- name:` line: it was "`define_model` needs a `schema`" with a hint
    /// about "(column, type) pairs", Lua's field.
    #[test]
    fn a_missing_schema_or_kind_line_is_told_in_sql_terms() {
        let text = |errs: Vec<LoadError>| errs.iter().map(ToString::to_string).collect::<Vec<_>>();
        assert_eq!(
            text(p("/* licence */\n-- name: a.b\n-- kind: full\nSELECT 1 AS x\n").unwrap_err()),
            [
                "models/x.sql:2: model `a.b`: missing header `-- schema: <column> <type>, …`\n  hint: declare the output columns as `name type` pairs, e.g. `-- schema: id bigint, day date`"
            ]
        );
        let errs = text(p("-- name: a.b\n-- schema: x bigint\nSELECT 1 AS x\n").unwrap_err());
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(
            errs[0].starts_with(
                "models/x.sql:1: model `a.b`: missing header `-- kind: <kind>`\n  hint: say how the model is built, e.g. `-- kind: full`, `-- kind: view`"
            ),
            "{errs:?}"
        );
        let errs = text(p("-- name: a.b\nSELECT 1 AS x\n").unwrap_err());
        assert_eq!(errs.len(), 2, "{errs:?}");
        assert!(errs.iter().all(|e| !e.contains("define_model") && !e.contains("(column, type)")), "{errs:?}");
    }

    /// The header fields whose message held a Lua example (`tags`, `owner`, kind options,
    /// `statements_affect_data`) give the `.sql` spelling, at their header line.
    #[test]
    fn header_field_messages_are_in_sql_terms_at_their_line() {
        let head = "-- name: a.b\n-- kind: full\n-- schema: x bigint\n";
        for (line, want) in [
            (
                "-- tags: finance daily",
                "models/x.sql:4: model `a.b`: `tags` must be words without spaces or colons, separated by commas, e.g. `-- tags: finance, daily`",
            ),
            ("-- owner:", "models/x.sql:4: model `a.b`: `owner` is empty: name who answers for the model, e.g. `-- owner: finance-team`"),
            (
                "-- statements_affect_data: true",
                "models/x.sql:4: model `a.b`: `statements_affect_data` is set, but the model has no statements before or after its query",
            ),
        ] {
            let errs = p(&format!("{head}{line}\nSELECT 1 AS x\n")).unwrap_err();
            assert_eq!(errs.iter().map(ToString::to_string).collect::<Vec<_>>(), [want], "{line}");
        }
        for (kind, want) in [
            (
                "scd_type2(key = x, renamed = doctor)",
                "models/x.sql:2: model `a.b`: `renamed` of kind `scd_type2` must map old column names to new ones, e.g. `renamed = {doctor = physician}`",
            ),
            (
                "seed(path = seeds/*.csv)",
                "models/x.sql:2: model `a.b`: a seed is one file, not a glob: `seeds/*.csv` (read many files with `-- kind: external(…)`)",
            ),
            (
                "external(path = data/x.csv, null_markers = NA)",
                "models/x.sql:2: model `a.b`: `null_markers` must be a list of strings, e.g. `null_markers = [NA, '']`",
            ),
        ] {
            let errs = p(&format!("-- name: a.b\n-- kind: {kind}\n-- schema: x bigint, y varchar\nSELECT 1 AS x, 'a' AS y\n")).unwrap_err();
            assert_eq!(errs.iter().map(ToString::to_string).collect::<Vec<_>>(), [want], "{kind}");
        }
    }

    /// dbt's Jinja (`{{ ref('x') }}`, `{{ source(…) }}`, `{{ config(…) }}`) is a load error at its
    /// line naming the model, with the `.sql` way to say it: it reached the engine's parser as
    /// SQL (`cannot parse SQL …: Expected …, found: {`). Jinja inside a literal or a comment is text.
    #[test]
    fn dbt_jinja_is_an_error_at_its_line_with_what_to_write_instead() {
        let errs = p("-- name: mart.orders\n-- kind: full\n-- schema: id bigint\n\n{{\n  config(materialized='table')\n}}\nSELECT id -- {{ ref('not_this') }}\nFROM {{ ref('stg_orders') }}\nJOIN {{ source('raw', 'payments') }} USING (id)\nWHERE note <> '{{ ref(\"x\") }}'\n")
            .unwrap_err();
        let got: Vec<(String, String)> = errs
            .iter()
            .map(|e| (format!("{}: {}", e.location.as_ref().map(ToString::to_string).unwrap_or_default(), e.message), e.hint.clone().unwrap_or_default()))
            .collect();
        let jinja = "is Jinja (dbt's templating), which efmesh does not use: a model's query is plain SQL";
        assert_eq!(
            got,
            [
                (
                    format!("models/x.sql:5: `{{{{ config(materialized='table') }}}}` {jinja}"),
                    "a `.sql` model's settings are its header lines: `-- kind: full` for `materialized='table'`, `-- kind: view` for `'view'`, `-- kind: incremental_by_unique_key(key = id)` for an incremental model with a `unique_key`".to_string()
                ),
                (
                    format!("models/x.sql:9: `{{{{ ref('stg_orders') }}}}` {jinja}"),
                    "write `@ref(<schema>.stg_orders)` (and list `<schema>.stg_orders` in `-- refs:`); a model's name is `<schema>.<table>`".to_string()
                ),
                (
                    format!("models/x.sql:10: `{{{{ source('raw', 'payments') }}}}` {jinja}"),
                    "a dbt source is a model of kind `external` here: declare `raw.payments` as one (`-- kind: external(table = raw.payments)`), then read it with `@ref(raw.payments)` (and list `raw.payments` in `-- refs:`)".to_string()
                ),
            ]
        );
        assert!(errs.iter().all(|e| e.model.as_ref().map(ToString::to_string).as_deref() == Some("mart.orders")), "{errs:?}");
        // A dbt file as it is (no header): the missing header, and each tag at its line.
        let errs = p("{{ config(materialized='view') }}\nselect * from {{ ref('orders') }}\n").unwrap_err();
        let text: Vec<String> = errs.iter().map(ToString::to_string).collect();
        assert_eq!(text.len(), 3, "{text:?}");
        assert!(text[0].starts_with("models/x.sql:1: missing header `-- name: <schema>.<table>`"), "{text:?}");
        assert!(text[1].starts_with("models/x.sql:1: `{{ config(materialized='view') }}` is Jinja"), "{text:?}");
        assert!(text[2].starts_with("models/x.sql:2: `{{ ref('orders') }}` is Jinja"), "{text:?}");
        // In a literal or a comment it is text, and DuckDB's struct literals are no Jinja.
        p("-- name: a.b\n-- kind: full\n-- schema: t varchar, s struct(k integer)\nSELECT '{{ ref(''x'') }}' AS t, {'k': 1} AS s -- {% if %}\n")
            .unwrap_or_else(|e| panic!("{e:?}"));
    }

    #[test]
    fn externals_need_no_query() {
        let m = p("-- name: raw.x\n-- kind: external(path = data/x.csv, null_markers = [NA, ''])\n-- schema: a int\n").unwrap();
        assert!(m.body.is_none());
    }
}
