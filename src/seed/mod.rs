//! Seeds: small CSV and JSON files of the project, loaded into tables.
//!
//! A seed is declared like any model (`kind.seed { path = "seeds/departments.csv" }`) with a
//! schema; its rows come from the file. The work is split so that a plan stays fast and a bad
//! value never half-builds anything:
//!
//! | when | what | where |
//! |---|---|---|
//! | every load (`check`, `plan`, `apply`, `render`) | the file's bytes are read and hashed (blake3); nothing is parsed | [`hash_seed_files`] |
//! | `apply`, contract phase, before anything is built | the file is read again and its hash compared with the planned one; it is parsed ([`read`]), staged as text in a temporary table, and every value is checked against its declared type by the engine | `crate::apply::seed` |
//! | `apply`, build | the seed's physical table is created from the staged text cast to the declared types, in one transaction | `crate::apply::seed` |
//!
//! CSV rules ([RFC 4180](https://www.rfc-editor.org/rfc/rfc4180), read with the `csv` crate): a
//! UTF-8 byte-order mark is ignored; the first record is a header that must name exactly the
//! declared columns (in any order; a missing or an extra column is an error naming it); an
//! unquoted empty field is NULL, a quoted empty field (`""`) is the empty string; an unquoted
//! field equal to one of the seed's `null_markers` (e.g. `NA`) is NULL, while a quoted one
//! (`"NA"`) stays text. Every record must have as many fields as the header. A quoted field ends
//! at its closing quote: text after it (`"x" `, `"5"" screen"x`), which the `csv` crate would
//! append to the value, is refused naming the row, the column, and the line and character where
//! the text starts.
//!
//! JSON rules: an array of objects, or objects one after another (newline-delimited JSON). Keys
//! must be declared columns; a declared column missing from an object is NULL in that row (but a
//! declared column that no object has is an error); `null` is NULL; strings are taken as text,
//! numbers and booleans as their JSON spelling, arrays and objects as JSON text. All of them are
//! then cast to the declared type like CSV text.
//!
//! Rows are numbered the way a spreadsheet user counts them: in a CSV file the header is row 1
//! and the first record row 2; in a JSON file the first object is row 1. Messages add the line
//! when it differs from the row (quoted line breaks, blank lines, JSON spread over lines). A CSV
//! row's line is the file line where its record starts, counted from the bytes (`\n`, `\r\n` and
//! a lone `\r` each end a line), not the `csv` crate's count, which is off after `\r\n`
//! terminators and blank lines.

use crate::core::error::did_you_mean;
use crate::core::json::Json;
use crate::core::kind::{FileFormat, Seed};
use crate::core::{Kind, LoadError, Model, Schema};
use std::path::{Path, PathBuf};

/// At most this many structural problems are reported per seed file (the first ones).
pub const MAX_ERRORS: usize = 10;

/// The file a seed path designates: absolute as is, otherwise relative to the project root
/// (the directory of `efmesh.toml`), like external sources.
pub fn resolve(root: &Path, path: &str) -> PathBuf {
    let p = Path::new(path);
    if p.is_absolute() { p.to_path_buf() } else { root.join(p) }
}

/// blake3 of a seed file's bytes, 64 lower-case hex digits: the content hash that enters the
/// seed's fingerprint.
pub fn content_hash(bytes: &[u8]) -> String {
    blake3::hash(bytes).to_hex().to_string()
}

/// Reads every seed file of `models` (paths resolved against `root`) and records its content
/// hash in the model's kind. Only hashes: no parsing, so planning stays fast.
///
/// Returns one [`LoadError`] per unreadable file, at the model's `define_model` location and
/// naming the path.
pub fn hash_seed_files(root: &Path, models: &mut [Model]) -> Vec<LoadError> {
    let mut errors = Vec::new();
    for m in models.iter_mut() {
        let Kind::Seed(seed) = &mut m.kind else { continue };
        let file = resolve(root, &seed.path);
        match crate::file::read_regular(&file) {
            Ok(bytes) => seed.content_hash = content_hash(&bytes),
            Err(e) => errors.push(
                LoadError::new(Some(m.location.clone()), Some(m.name.clone()), format!("cannot read seed file `{}`: {e}", seed.path))
                    .with_hint(format!("seed paths are relative to the project directory `{}`", root.display())),
            ),
        }
    }
    errors
}

/// Where a value sits in a seed file: the 1-based row as a spreadsheet user counts it (CSV: the
/// header is row 1; JSON: the first object is row 1) and the 1-based line where the row starts
/// (0 when unknown).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Place {
    /// 1-based row.
    pub row: u64,
    /// 1-based line where the row starts; 0 when unknown.
    pub line: u64,
}

impl std::fmt::Display for Place {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "row {}", self.row)?;
        if self.line != 0 && self.line != self.row {
            write!(f, " (line {})", self.line)?;
        }
        Ok(())
    }
}

/// A problem in a seed file's structure (header, quoting, field counts, JSON syntax, encoding).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeedError {
    /// The row at fault, when there is one.
    pub place: Option<Place>,
    /// The column at fault, when there is one.
    pub column: Option<String>,
    /// What is wrong.
    pub message: String,
}

impl SeedError {
    fn at(place: Option<Place>, column: Option<&str>, message: impl Into<String>) -> Self {
        Self { place, column: column.map(str::to_string), message: message.into() }
    }
}

impl std::fmt::Display for SeedError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.place, &self.column) {
            (Some(p), Some(c)) => write!(f, "{p}, column `{c}`: ")?,
            (Some(p), None) => write!(f, "{p}: ")?,
            (None, Some(c)) => write!(f, "column `{c}`: ")?,
            (None, None) => {}
        }
        f.write_str(&self.message)
    }
}

/// A parsed seed: one text value (or NULL) per declared column, in declared order, for every
/// row, with where each row came from. Values are not typed yet (the engine casts them).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SeedRows {
    /// One entry per row: its place and its values in declared column order.
    pub rows: Vec<(Place, Vec<Option<String>>)>,
}

/// Parses a seed file's bytes by the seed's format against the declared `schema`.
///
/// # Errors
/// The first [`MAX_ERRORS`] structural problems, each naming the row and column when it has one.
pub fn read(bytes: &[u8], seed: &Seed, schema: &Schema) -> Result<SeedRows, Vec<SeedError>> {
    let data = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    match seed.format {
        // `.ndjson`/`.jsonl` are JSON Lines: zero lines is zero records.
        FileFormat::Json => {
            let path = seed.path.to_ascii_lowercase();
            read_json(data, schema, !(path.ends_with(".ndjson") || path.ends_with(".jsonl")))
        }
        _ => read_csv(data, seed, schema),
    }
}

fn read_csv(data: &[u8], seed: &Seed, schema: &Schema) -> Result<SeedRows, Vec<SeedError>> {
    let delimiter = u8::try_from(seed.effective_delimiter()).map_err(|_| vec![SeedError::at(None, None, "the delimiter must be an ASCII character")])?;
    let mut reader = csv::ReaderBuilder::new().has_headers(false).flexible(true).delimiter(delimiter).from_reader(data);
    let mut record = csv::ByteRecord::new();
    let mut errors = Vec::new();
    let mut lines = Lines::new(data);

    // The header (the reader skips blank lines before it).
    match reader.read_byte_record(&mut record) {
        Ok(true) => {}
        Ok(false) => return Err(vec![SeedError::at(None, None, "the file is empty: a CSV seed starts with a header row naming its columns")]),
        Err(e) => return Err(vec![csv_error(&e, &mut lines)]),
    }
    let header_begin = lines.record_start(record.position().map_or(0, |p| p.byte() as usize));
    let header_place = Some(Place { row: 1, line: lines.line_of(header_begin) });
    let header_raw = data.get(header_begin..(reader.position().byte() as usize).min(data.len())).unwrap_or_default();
    if let Some((field, at)) = quoted_fields(header_raw, record.len(), delimiter).trailing {
        let what = text_after_quote(data, header_begin + at, delimiter, &mut lines);
        return Err(vec![SeedError::at(header_place, None, format!("header field {}: {what}", field + 1))]);
    }
    let mut header = Vec::with_capacity(record.len());
    for (i, field) in record.iter().enumerate() {
        match std::str::from_utf8(field) {
            Ok(name) => header.push(name.trim().to_string()),
            Err(_) => return Err(vec![SeedError::at(header_place, None, format!("header field {} is not valid UTF-8", i + 1))]),
        }
    }
    for (i, name) in header.iter().enumerate() {
        if header[..i].contains(name) {
            errors.push(SeedError::at(header_place, Some(name), "the header names this column twice"));
        }
    }
    let missing: Vec<&str> = schema.names().filter(|n| !header.iter().any(|h| h == n)).collect();
    let extra: Vec<&str> = header.iter().map(String::as_str).filter(|h| !schema.contains(h)).collect();
    if !missing.is_empty() {
        let mut msg = format!("the header lacks declared column{} {}", plural(missing.len()), ticks(&missing));
        if let [one] = missing.as_slice()
            && let Some(s) = did_you_mean(one, extra.iter().copied())
        {
            msg.push_str(&format!(" (the header has `{s}`)"));
        }
        errors.push(SeedError::at(header_place, None, msg));
    }
    if !extra.is_empty() {
        errors.push(SeedError::at(
            header_place,
            None,
            format!("the header has column{} {} that the schema does not declare", plural(extra.len()), ticks(&extra)),
        ));
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    // Declared column i is field `index[i]` of each record.
    let index: Vec<usize> = schema.names().map(|n| header.iter().position(|h| h == n).expect("checked above")).collect();

    let mut out = SeedRows::default();
    // The header is row 1; every record (a blank line is none) is the next row.
    let mut row = 1u64;
    loop {
        let start = reader.position().clone();
        match reader.read_byte_record(&mut record) {
            Ok(false) => break,
            Ok(true) => {}
            Err(e) => {
                errors.push(csv_error(&e, &mut lines));
                break;
            }
        }
        row += 1;
        let pos = record.position().cloned().unwrap_or(start);
        // The reading began where the previous record's terminator did (the `\n` of a `\r\n`
        // may still be ahead, and blank lines are skipped): the record starts past them. Its
        // line is counted from the file's bytes, not taken from the reader, whose count is off
        // after a `\r\n` terminator and skips blank lines.
        let begin = lines.record_start(pos.byte() as usize);
        let place = Place { row, line: lines.line_of(begin) };
        if record.len() != header.len() {
            errors.push(SeedError::at(
                Some(place),
                None,
                format!("the row has {} field{}, the header has {}", record.len(), plural(record.len()), header.len()),
            ));
            if errors.len() >= MAX_ERRORS {
                break;
            }
            continue;
        }
        let end = reader.position().byte() as usize;
        let raw = data.get(begin..end.min(data.len())).unwrap_or_default();
        let Quoting { quoted, unclosed, trailing } = quoted_fields(raw, record.len(), delimiter);
        // The CSV reader takes a quote never closed as running to the end of the file (every
        // row after it one value): refused, naming where it opens.
        if let Some(field) = unclosed {
            let column = header.get(field).map(String::as_str);
            errors.push(SeedError::at(
                Some(place),
                column,
                "a quoted value is never closed: its opening quote runs to the end of the file (add the closing `\"`, or double a quote inside a value: `\"\"`)",
            ));
            break;
        }
        // The CSV reader appends text after a closing quote to the value (`"x" ` is `x `);
        // RFC 4180 has no such field, and other readers (DuckDB) read it otherwise: refused.
        if let Some((field, at)) = trailing {
            let column = header.get(field).map(String::as_str);
            errors.push(SeedError::at(Some(place), column, text_after_quote(data, begin + at, delimiter, &mut lines)));
            if errors.len() >= MAX_ERRORS {
                break;
            }
            continue;
        }
        let mut values = Vec::with_capacity(index.len());
        for (col, &i) in schema.names().zip(&index) {
            let field = &record[i];
            let text = match std::str::from_utf8(field) {
                Ok(t) => t,
                Err(_) => {
                    errors.push(SeedError::at(Some(place), Some(col), "the value is not valid UTF-8"));
                    ""
                }
            };
            let is_quoted = quoted.get(i).copied().unwrap_or(false);
            let null = !is_quoted && (text.is_empty() || seed.null_markers.iter().any(|m| m == text));
            values.push((!null).then(|| text.to_string()));
        }
        if errors.len() >= MAX_ERRORS {
            break;
        }
        out.rows.push((place, values));
    }
    if errors.is_empty() { Ok(out) } else { Err(errors) }
}

/// How the fields of one raw CSV record are quoted ([`quoted_fields`]).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Quoting {
    /// Whether each field begins with a quote.
    quoted: Vec<bool>,
    /// The first field whose opening quote is never closed.
    unclosed: Option<usize>,
    /// The first field with text after its closing quote (`"x"y`), and the offset of that text
    /// in the record.
    trailing: Option<(usize, usize)>,
}

/// Which of the first `n` fields of one raw CSV record (as in the file, from its first byte,
/// terminator included) begin with a quote. The `csv` crate unescapes fields but does not say
/// whether a field was quoted, which is what separates `""` (empty text) from an empty field
/// (NULL). Quoting only counts at the start of a field (RFC 4180), as in the `csv` crate: a
/// quote inside an unquoted field is literal. Text after a closing quote, which the `csv` crate
/// appends to the value, is reported (`trailing`); the scan then goes on, as the crate does, to
/// the next delimiter.
fn quoted_fields(raw: &[u8], n: usize, delimiter: u8) -> Quoting {
    let mut out = Vec::with_capacity(n);
    let mut unclosed = None;
    let mut trailing = None;
    let mut i = 0;
    for field in 0..n {
        let quoted = raw.get(i) == Some(&b'"');
        out.push(quoted);
        if quoted {
            i += 1;
            // Up to the closing quote; `""` inside is an escaped quote.
            let mut closed = false;
            while i < raw.len() {
                if raw[i] == b'"' {
                    if raw.get(i + 1) == Some(&b'"') {
                        i += 2;
                        continue;
                    }
                    i += 1;
                    closed = true;
                    break;
                }
                i += 1;
            }
            if !closed && unclosed.is_none() {
                unclosed = Some(field);
            }
            if closed && trailing.is_none() && i < raw.len() && raw[i] != delimiter && raw[i] != b'\n' && raw[i] != b'\r' {
                trailing = Some((field, i));
            }
        }
        while i < raw.len() && raw[i] != delimiter && raw[i] != b'\n' && raw[i] != b'\r' {
            i += 1;
        }
        i += 1;
    }
    Quoting { quoted: out, unclosed, trailing }
}

/// The message for text after a closing quote starting at byte `at` of `data`: the text (up to
/// the next delimiter or line break) and the line and character where it starts.
fn text_after_quote(data: &[u8], at: usize, delimiter: u8, lines: &mut Lines<'_>) -> String {
    let at = at.min(data.len());
    let rest = &data[at..];
    let text = &rest[..rest.iter().position(|b| *b == delimiter || matches!(b, b'\n' | b'\r')).unwrap_or(rest.len())];
    let text = String::from_utf8_lossy(text);
    let shown: String = text.chars().take(20).collect();
    let more = if shown.len() < text.len() { "…" } else { "" };
    let line_start = data[..at].iter().rposition(|b| matches!(b, b'\n' | b'\r')).map_or(0, |p| p + 1);
    // Characters, not bytes: a UTF-8 continuation byte starts none.
    let character = data[line_start..at].iter().filter(|b| (**b & 0xC0) != 0x80).count() + 1;
    let line = lines.line_of(at);
    format!(
        "text after the closing quote of a quoted value ({shown:?}{more} at line {line}, character {character}): RFC 4180 allows only the delimiter or a line break there; quote the whole value and double each quote inside it (`\"5\"\" screen\"`)"
    )
}

/// The 1-based lines of a CSV file's bytes (after the byte-order mark), counted as the `csv`
/// crate ends lines: `\n`, `\r\n` (one break) and a lone `\r`; line breaks inside quoted
/// values count too (they are lines of the file). Offsets asked for mostly grow, so counting
/// resumes where it stopped.
struct Lines<'a> {
    data: &'a [u8],
    /// The offset counted up to and the line it is on.
    at: (usize, u64),
}

impl<'a> Lines<'a> {
    /// Counting from the start of `data`.
    fn new(data: &'a [u8]) -> Self {
        Self { data, at: (0, 1) }
    }

    /// Where a record whose reading began at byte `from` starts: past the line breaks the
    /// reader skips first (the `\n` of the previous record's `\r\n`, blank lines). A record
    /// never starts with a line break.
    fn record_start(&self, from: usize) -> usize {
        let from = from.min(self.data.len());
        from + self.data[from..].iter().take_while(|b| matches!(b, b'\r' | b'\n')).count()
    }

    /// The 1-based line holding byte `offset`.
    fn line_of(&mut self, offset: usize) -> u64 {
        let offset = offset.min(self.data.len());
        let (from, line) = if offset >= self.at.0 { self.at } else { (0, 1) };
        let data = self.data;
        // A `\r` followed by `\n` is counted at the `\n`, also when the `\n` is past `offset`.
        let breaks = (from..offset).filter(|&i| data[i] == b'\n' || (data[i] == b'\r' && data.get(i + 1) != Some(&b'\n'))).count();
        self.at = (offset, line + breaks as u64);
        self.at.1
    }
}

fn csv_error(e: &csv::Error, lines: &mut Lines<'_>) -> SeedError {
    let place = e.position().map(|p| {
        let begin = lines.record_start(p.byte() as usize);
        Place { row: p.record() + 1, line: lines.line_of(begin) }
    });
    let message = match e.kind() {
        csv::ErrorKind::Utf8 { err, .. } => format!("field {} is not valid UTF-8", err.field() + 1),
        _ => e.to_string(),
    };
    SeedError::at(place, None, message)
}

/// What a JSON object's text says beyond its `serde_json::Value`: the first key it gives twice
/// (serde_json's map keeps the last value silently), and the text of each number, array and
/// object ([`Json`] keeps numbers as written; a `Value` holds an integer past 64 bits or a long
/// decimal as the nearest double).
struct RawObject {
    first_duplicate: Option<String>,
    raw: std::collections::HashMap<String, String>,
}

impl<'de> serde::Deserialize<'de> for RawObject {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Keys;
        impl<'de> serde::de::Visitor<'de> for Keys {
            type Value = RawObject;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<RawObject, A::Error> {
                let mut seen = std::collections::HashSet::new();
                let mut raw = std::collections::HashMap::new();
                let mut first_duplicate = None;
                while let Some(key) = map.next_key::<String>()? {
                    let value = map.next_value::<&serde_json::value::RawValue>()?;
                    if !value.get().starts_with(['"', 'n', 't', 'f']) {
                        raw.insert(key.clone(), value.get().to_string());
                    }
                    if !seen.insert(key.clone()) && first_duplicate.is_none() {
                        first_duplicate = Some(key);
                    }
                }
                Ok(RawObject { first_duplicate, raw })
            }
        }
        d.deserialize_map(Keys)
    }
}

fn read_json(data: &[u8], schema: &Schema, json_array_file: bool) -> Result<SeedRows, Vec<SeedError>> {
    let text = std::str::from_utf8(data).map_err(|e| {
        let line = data[..e.valid_up_to()].iter().filter(|b| **b == b'\n').count() as u64 + 1;
        vec![SeedError::at(None, None, format!("the file is not valid UTF-8 (line {line})"))]
    })?;
    // Lines are counted incrementally: offsets only grow.
    let mut counted = (0usize, 1u64);
    let mut line_of = |offset: usize| {
        let (from, line) = counted;
        let line = if offset >= from { line + text[from..offset].matches('\n').count() as u64 } else { text[..offset].matches('\n').count() as u64 + 1 };
        counted = (offset, line);
        line
    };
    let skip_ws = |mut i: usize| {
        while text[i..].starts_with(|c: char| c.is_whitespace()) {
            i += text[i..].chars().next().map_or(1, char::len_utf8);
        }
        i
    };
    let syntax = |line: u64, e: &serde_json::Error| {
        let line = line + e.line().saturating_sub(1) as u64;
        SeedError::at(None, None, format!("invalid JSON at line {line}: {}", strip_position(&e.to_string())))
    };
    let mut i = skip_ws(0);
    // An empty JSON Lines file holds no records; an empty `.json` is no document.
    if i >= text.len() && json_array_file {
        return Err(vec![SeedError::at(None, None, "the file is empty (a seed with no rows is `[]`)")]);
    }
    let array = text[i..].starts_with('[');
    if array {
        i = skip_ws(i + 1);
    }
    // Each object, with the raw text of its numbers, arrays and objects ([`RawObject`]).
    type Object = (Place, serde_json::Map<String, serde_json::Value>, std::collections::HashMap<String, String>);
    let mut objects: Vec<Object> = Vec::new();
    let mut errors = Vec::new();
    let mut row = 0u64;
    loop {
        if array && text[i..].starts_with(']') {
            i = skip_ws(i + 1);
            if i < text.len() {
                return Err(vec![SeedError::at(None, None, format!("unexpected text after the closing `]` at line {}", line_of(i)))]);
            }
            break;
        }
        if i >= text.len() {
            if array {
                return Err(vec![SeedError::at(None, None, "the array is not closed with `]`")]);
            }
            break;
        }
        let mut stream = serde_json::Deserializer::from_str(&text[i..]).into_iter::<serde_json::Value>();
        let value = match stream.next() {
            Some(Ok(v)) => v,
            Some(Err(e)) => return Err(vec![syntax(line_of(i), &e)]),
            None => break,
        };
        row += 1;
        let place = Place { row, line: line_of(i) };
        let object_text = &text[i..i + stream.byte_offset()];
        i = skip_ws(i + stream.byte_offset());
        if array {
            if text[i..].starts_with(',') {
                i = skip_ws(i + 1);
            } else if !text[i..].starts_with(']') {
                return Err(vec![SeedError::at(None, None, format!("expected `,` or `]` after the object of {place}"))]);
            }
        }
        match value {
            serde_json::Value::Object(map) => {
                // A key given twice would keep its last value silently (a CSV header naming a
                // column twice is refused too).
                let raw = serde_json::from_str::<RawObject>(object_text).ok();
                if let Some(key) = raw.as_ref().and_then(|r| r.first_duplicate.clone()) {
                    errors.push(SeedError::at(Some(place), Some(&key), "the key is given twice in the object"));
                }
                for key in map.keys().filter(|k| !schema.contains(k)) {
                    let mut msg = "the key is not a declared column".to_string();
                    if let Some(s) = did_you_mean(key, schema.names()) {
                        msg.push_str(&format!(" (did you mean `{s}`?)"));
                    }
                    errors.push(SeedError::at(Some(place), Some(key), msg));
                }
                objects.push((place, map, raw.map(|r| r.raw).unwrap_or_default()));
            }
            other => errors.push(SeedError::at(Some(place), None, format!("expected an object, found {}", json_kind(&other)))),
        }
        if errors.len() >= MAX_ERRORS {
            break;
        }
    }
    if !objects.is_empty() && errors.is_empty() {
        let absent: Vec<&str> = schema.names().filter(|n| !objects.iter().any(|(_, o, _)| o.contains_key(*n))).collect();
        if !absent.is_empty() {
            errors.push(SeedError::at(None, None, format!("no object has declared column{} {}", plural(absent.len()), ticks(&absent))));
        }
    }
    if !errors.is_empty() {
        errors.truncate(MAX_ERRORS);
        return Err(errors);
    }
    let rows = objects
        .into_iter()
        .map(|(place, mut o, mut raw)| {
            let values = schema
                .names()
                .map(|n| match o.remove(n) {
                    None | Some(serde_json::Value::Null) => None,
                    Some(serde_json::Value::String(s)) => Some(s),
                    Some(serde_json::Value::Bool(b)) => Some(b.to_string()),
                    // Numbers as written, also inside arrays and objects: every digit reaches the cast.
                    Some(v) => Some(raw.remove(n).and_then(|t| Json::parse(&t).ok()).map_or_else(|| v.to_string(), |j| j.compact())),
                })
                .collect();
            (place, values)
        })
        .collect();
    Ok(SeedRows { rows })
}

/// serde_json appends ` at line L column C` (relative to the slice it parsed); the caller
/// states the file's line instead.
fn strip_position(msg: &str) -> &str {
    msg.rfind(" at line ").map_or(msg, |p| &msg[..p])
}

fn json_kind(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "`null`",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

fn ticks(names: &[&str]) -> String {
    names.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::Column;

    fn seed(format: FileFormat, null_markers: &[&str]) -> Seed {
        Seed {
            path: "seeds/x".into(),
            format,
            null_markers: null_markers.iter().map(|s| s.to_string()).collect(),
            delimiter: None,
            content_hash: String::new(),
        }
    }

    fn schema(cols: &[&str]) -> Schema {
        Schema(cols.iter().map(|c| Column { name: c.to_string(), ty: "varchar".into() }).collect())
    }

    fn csv(text: &str, cols: &[&str], markers: &[&str]) -> Result<SeedRows, Vec<SeedError>> {
        read(text.as_bytes(), &seed(FileFormat::Csv, markers), &schema(cols))
    }

    fn values(rows: &SeedRows) -> Vec<Vec<Option<&str>>> {
        rows.rows.iter().map(|(_, v)| v.iter().map(Option::as_deref).collect()).collect()
    }

    #[test]
    fn quoted_empty_is_text_unquoted_empty_and_markers_are_null() {
        let rows = csv("a,b,c\n\"\",,NA\n\"NA\",x,\"\"\"q\"\"\"\n", &["a", "b", "c"], &["NA"]).unwrap();
        assert_eq!(values(&rows), vec![vec![Some(""), None, None], vec![Some("NA"), Some("x"), Some("\"q\"")]]);
    }

    #[test]
    fn bom_is_ignored_and_header_order_is_free() {
        let rows = csv("\u{feff}b,a\r\n2,1\r\n", &["a", "b"], &[]).unwrap();
        assert_eq!(values(&rows), vec![vec![Some("1"), Some("2")]]);
    }

    #[test]
    fn quoting_is_seen_after_crlf_terminators_and_blank_lines() {
        let rows = csv("a,b\r\n\"\",x\r\n\r\n\"NA\",\r\n", &["a", "b"], &["NA"]).unwrap();
        assert_eq!(values(&rows), vec![vec![Some(""), Some("x")], vec![Some("NA"), None]]);
    }

    #[test]
    fn rows_are_counted_like_a_spreadsheet_and_lines_follow_quoted_breaks() {
        let rows = csv("a,b\n\"x\ny\",1\n,2\n", &["a", "b"], &[]).unwrap();
        let places: Vec<Place> = rows.rows.iter().map(|(p, _)| *p).collect();
        assert_eq!(places, vec![Place { row: 2, line: 2 }, Place { row: 3, line: 4 }]);
        assert_eq!(places[1].to_string(), "row 3 (line 4)");
        assert_eq!(values(&rows)[0], vec![Some("x\ny"), Some("1")]);
    }

    #[test]
    fn header_problems_name_the_columns() {
        let errs = csv("a,bb,extra\n1,2,3\n", &["a", "b"], &[]).unwrap_err();
        let text: Vec<String> = errs.iter().map(ToString::to_string).collect();
        assert!(text[0].contains("lacks declared column `b`") && text[0].contains("`bb`"), "{text:?}");
        assert!(text[1].contains("`bb`, `extra`") && text[1].contains("does not declare"), "{text:?}");
    }

    #[test]
    fn ragged_rows_are_named() {
        let errs = csv("a,b\n1,2\n3\n", &["a", "b"], &[]).unwrap_err();
        assert_eq!(errs[0].to_string(), "row 3: the row has 1 field, the header has 2");
    }

    #[test]
    fn the_quote_scanner_follows_rfc_4180() {
        let q = |quoted: Vec<bool>, unclosed, trailing| Quoting { quoted, unclosed, trailing };
        assert_eq!(quoted_fields(b"\"a,\"\"b\",,\"\"\n", 3, b','), q(vec![true, false, true], None, None));
        // Text after a closing quote is found where it starts (`w`, byte 7), the field boundaries
        // stay the `csv` crate's.
        assert_eq!(quoted_fields(b"x\"y,\"z\"w,\r\n", 3, b','), q(vec![false, true, false], None, Some((1, 7))));
        assert_eq!(quoted_fields(b"\"multi\nline\",\"\"", 2, b','), q(vec![true, true], None, None));
        assert_eq!(quoted_fields(b"1,\"open\n2,b\n", 2, b','), q(vec![false, true], Some(1), None));
        assert_eq!(quoted_fields(b"\"a\"\r\n", 1, b','), q(vec![true], None, None));
        assert_eq!(quoted_fields(b"\"a\";b", 2, b';'), q(vec![true, false], None, None));
    }

    fn places(rows: &SeedRows) -> Vec<(u64, u64)> {
        rows.rows.iter().map(|(p, _)| (p.row, p.line)).collect()
    }

    #[test]
    fn lines_are_the_file_lines_with_crlf_blank_lines_quoted_breaks_and_a_bom() {
        let cols = ["code", "beds"];
        // LF: row and line agree, no line shown.
        let rows = csv("code,beds\nA,1\nB,2\nX,zz\n", &cols, &[]).unwrap();
        assert_eq!(places(&rows), vec![(2, 2), (3, 3), (4, 4)]);
        assert_eq!(rows.rows[2].0.to_string(), "row 4");
        // CRLF: the same (the reader alone said `row 4 (line 3)`).
        let rows = csv("code,beds\r\nA,1\r\nB,2\r\nX,zz\r\n", &cols, &[]).unwrap();
        assert_eq!(places(&rows), vec![(2, 2), (3, 3), (4, 4)]);
        assert_eq!(rows.rows[2].0.to_string(), "row 4");
        // Blank lines are no rows but are lines, with LF or CRLF.
        let rows = csv("code,beds\nA,1\n\n\n\nX,zz\n", &cols, &[]).unwrap();
        assert_eq!(places(&rows), vec![(2, 2), (3, 6)]);
        assert_eq!(rows.rows[1].0.to_string(), "row 3 (line 6)");
        let rows = csv("code,beds\r\nA,1\r\n\r\n\r\nX,zz\r\n", &cols, &[]).unwrap();
        assert_eq!(places(&rows), vec![(2, 2), (3, 5)]);
        // A quoted line break, LF or CRLF: the next record is a line further.
        let rows = csv("code,beds\r\n\"multi\r\nline\",1\r\nX,zz\r\n", &cols, &[]).unwrap();
        assert_eq!(places(&rows), vec![(2, 2), (3, 4)]);
        assert_eq!(rows.rows[1].0.to_string(), "row 3 (line 4)");
        assert_eq!(values(&rows)[0], vec![Some("multi\r\nline"), Some("1")]);
        let rows = csv("code,beds\n\"a\n\nb\",1\nX,zz", &cols, &[]).unwrap();
        assert_eq!(places(&rows), vec![(2, 2), (3, 5)]);
        // A lone `\r` ends a line, as the reader takes it.
        let rows = csv("code,beds\rA,1\r\rX,zz\r", &cols, &[]).unwrap();
        assert_eq!(places(&rows), vec![(2, 2), (3, 4)]);
        // A byte-order mark and blank lines before the header.
        let rows = csv("\u{feff}\r\n\r\ncode,beds\r\nA,1\r\n", &cols, &[]).unwrap();
        assert_eq!(places(&rows), vec![(2, 4)]);
        let errs = csv("\u{feff}\n\ncode,bedz\nA,1\n", &cols, &[]).unwrap_err();
        assert!(errs[0].to_string().starts_with("row 1 (line 3): the header lacks declared column `beds`"), "{errs:?}");
        // Structural errors carry the same place.
        let errs = csv("code,beds\r\nA,1\r\n\r\nX\r\n", &cols, &[]).unwrap_err();
        assert_eq!(errs[0].to_string(), "row 3 (line 4): the row has 1 field, the header has 2");
    }

    #[test]
    fn text_after_a_closing_quote_is_refused_at_its_row_line_and_column() {
        let cols = ["code", "name"];
        let errs = csv("code,name\nA,\"5\"\" screen\"x\nB,\"x\" \n", &cols, &[]).unwrap_err();
        let text: Vec<String> = errs.iter().map(ToString::to_string).collect();
        assert_eq!(text.len(), 2, "{text:?}");
        assert!(text[0].starts_with("row 2, column `name`: text after the closing quote of a quoted value (\"x\" at line 2, character 15)"), "{text:?}");
        assert!(text[1].starts_with("row 3, column `name`: text after the closing quote of a quoted value (\" \" at line 3, character 6)"), "{text:?}");
        // After a quoted line break, with CRLF: the line and character of the text itself.
        let errs = csv("code,name\r\n\"é\r\nz\"y,1\r\n", &cols, &[]).unwrap_err();
        assert!(
            errs[0].to_string().starts_with("row 2, column `code`: text after the closing quote of a quoted value (\"y\" at line 3, character 3)"),
            "{errs:?}"
        );
        // In the header too.
        let errs = csv("\"code\"x,name\n", &cols, &[]).unwrap_err();
        assert!(errs[0].to_string().starts_with("row 1: header field 1: text after the closing quote"), "{errs:?}");
    }

    #[test]
    fn valid_quoting_still_loads() {
        let rows =
            csv("code,name\r\n\"a,b\",\"say \"\"hi\"\"\"\r\n\"multi\nline\",\"\"\r\n\"\"\"\",\"x\"\r\nplain,\"5\"\" screen\"\r\n", &["code", "name"], &[])
                .unwrap();
        assert_eq!(
            values(&rows),
            vec![
                vec![Some("a,b"), Some("say \"hi\"")],
                vec![Some("multi\nline"), Some("")],
                vec![Some("\""), Some("x")],
                vec![Some("plain"), Some("5\" screen")],
            ]
        );
        assert_eq!(places(&rows), vec![(2, 2), (3, 3), (4, 5), (5, 6)]);
    }

    #[test]
    fn a_quote_never_closed_is_refused_at_its_row_and_column() {
        // The CSV reader alone reads the rest of the file into one value.
        let errs = csv("id,name\n1,\"unterminated\n2,b\n3,c\n", &["id", "name"], &[]).unwrap_err();
        assert_eq!(errs.len(), 1, "{errs:?}");
        let text = errs[0].to_string();
        assert!(text.starts_with("row 2, column `name`: a quoted value is never closed"), "{text}");
    }

    #[test]
    fn json_arrays_and_ndjson_read_alike() {
        let s = schema(&["a", "n"]);
        let arr = read(b"[{\"a\": \"x\", \"n\": 1},\n {\"n\": 2.5}, {\"a\": null, \"n\": true}]", &seed(FileFormat::Json, &[]), &s).unwrap();
        let nd = read(b"{\"a\": \"x\", \"n\": 1}\n{\"n\": 2.5}\n{\"a\": null, \"n\": true}\n", &seed(FileFormat::Json, &[]), &s).unwrap();
        assert_eq!(values(&arr), vec![vec![Some("x"), Some("1")], vec![None, Some("2.5")], vec![None, Some("true")]]);
        assert_eq!(values(&arr), values(&nd));
        assert_eq!(nd.rows[2].0, Place { row: 3, line: 3 });
        assert_eq!(arr.rows[1].0, Place { row: 2, line: 2 });
    }

    #[test]
    fn json_numbers_reach_the_cast_as_written() {
        // A `serde_json::Value` holds these as the nearest double: 123456789012345680000…, 12345678901234568.
        let s = schema(&["a", "n"]);
        let rows = read(
            b"[{\"a\": 123456789012345678901234567890, \"n\": 12345678901234567.89}, {\"a\": -1E2, \"n\": [18446744073709551616]}]",
            &seed(FileFormat::Json, &[]),
            &s,
        )
        .unwrap();
        assert_eq!(
            values(&rows),
            vec![vec![Some("123456789012345678901234567890"), Some("12345678901234567.89")], vec![Some("-1E2"), Some("[18446744073709551616]")]]
        );
    }

    #[test]
    fn json_problems_name_row_and_key() {
        let s = schema(&["a", "n"]);
        let errs = read(b"[{\"a\": 1, \"nn\": 2}, 3]", &seed(FileFormat::Json, &[]), &s).unwrap_err();
        let text: Vec<String> = errs.iter().map(ToString::to_string).collect();
        assert!(text[0].starts_with("row 1, column `nn`: the key is not a declared column (did you mean `n`?)"), "{text:?}");
        assert!(text[1].starts_with("row 2 (line 1): expected an object, found a number"), "{text:?}");
        let errs = read(b"{\"a\": 1}\n{\"a\": }\n", &seed(FileFormat::Json, &[]), &s).unwrap_err();
        assert!(errs[0].to_string().starts_with("invalid JSON at line 2:"), "{errs:?}");
        // A key twice in one object is refused, as a CSV header naming a column twice.
        let errs = read(b"[{\"a\": 1, \"n\": 2}, {\"a\": 1, \"n\": 2, \"a\": 3}]", &seed(FileFormat::Json, &[]), &s).unwrap_err();
        assert!(errs[0].to_string().starts_with("row 2 (line 1), column `a`: the key is given twice in the object"), "{errs:?}");
        // An empty file is no seed (`[]` is one with no rows).
        for empty in [&b""[..], b"  \n"] {
            let errs = read(empty, &seed(FileFormat::Json, &[]), &s).unwrap_err();
            assert!(errs[0].to_string().contains("the file is empty"), "{errs:?}");
            // An empty JSON Lines file is zero records.
            let lines = Seed { path: "seeds/x.ndjson".into(), ..seed(FileFormat::Json, &[]) };
            assert!(read(empty, &lines, &s).is_ok_and(|r| r.rows.is_empty()));
        }
        assert!(read(b"[]", &seed(FileFormat::Json, &[]), &s).is_ok_and(|r| r.rows.is_empty()));
    }
}
