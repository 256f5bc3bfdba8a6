//! Declared schemas: an ordered list of `(column, type)` and the type families the schema
//! contract compares.
//!
//! The contract compares names strictly and types by *family* (reference `core-semantics.md`
//! §5.3): text, numeric, boolean, temporal, or any (unchecked). Families are derived from DuckDB
//! type spellings, case-insensitively.

use serde::{Deserialize, Serialize};

/// One declared column.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Column {
    /// Column name as it appears in the query's output.
    pub name: String,
    /// Declared SQL type, as written by the model author (e.g. `varchar`, `timestamptz`).
    pub ty: String,
}

/// An ordered list of columns.
#[derive(Debug, Clone, PartialEq, Eq, Default, Hash, Serialize, Deserialize)]
pub struct Schema(pub Vec<Column>);

impl Schema {
    /// Column names in declaration order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|c| c.name.as_str())
    }

    /// Finds a column by exact name.
    pub fn get(&self, name: &str) -> Option<&Column> {
        self.0.iter().find(|c| c.name == name)
    }

    /// True when the schema declares `name`.
    pub fn contains(&self, name: &str) -> bool {
        self.get(name).is_some()
    }
}

/// True when a declared type is a timestamp with a time zone (`timestamptz`, `timestamp with
/// time zone`, `timestamp(3) with time zone`): its values are instants, compared with
/// `TIMESTAMPTZ` literals ([`crate::core::interval::to_tz_literal`]).
pub fn is_zoned_timestamp(ty: &str) -> bool {
    let t = ty.trim().to_ascii_lowercase();
    let words: Vec<&str> = t.split_whitespace().collect();
    t.starts_with("timestamptz")
        || t == "timestamp_tz"
        || (words.first().is_some_and(|w| w.starts_with("timestamp")) && words.ends_with(&["with", "time", "zone"]))
}

/// True when DuckDB's CSV reader cannot be given a declared type: asked to read a column as a
/// timestamp or a time with a time zone (`timestamptz`, `timestamp with time zone`, `timetz`,
/// `time with time zone`), DuckDB 1.5.5 reads a value it cannot convert (`NA`, `1`, a typo) as
/// NULL instead of failing (duckdb/duckdb#24820), where every other type fails naming the line.
/// Such a column is read as text and cast by the relation its consumers read
/// ([`crate::core::External::reads_as_text`]), where a value that is no time fails the build.
pub fn csv_reader_nulls_bad_values(ty: &str) -> bool {
    let t = ty.split_whitespace().collect::<Vec<_>>().join(" ").to_ascii_lowercase();
    is_zoned_timestamp(&t) || t == "timetz" || t == "time_tz" || t == "time with time zone" || (t.starts_with("time(") && t.ends_with(" with time zone"))
}

/// True when a declared type is a timestamp without a time zone (`timestamp`, `datetime`,
/// `timestamp(3)`, `timestamp_ns`, `timestamp without time zone`).
pub fn is_naive_timestamp(ty: &str) -> bool {
    let t = ty.trim().to_ascii_lowercase();
    (t.starts_with("timestamp") || t == "datetime") && !is_zoned_timestamp(&t)
}

/// True when a declared type is a time of day without a time zone (`time`, `time(3)`, DuckDB's
/// `time_ns`, `time without time zone`): like a timestamp without one, its cast drops a UTC
/// offset (`10:00:00+02` is stored as `10:00:00` by DuckDB and Postgres alike).
pub fn is_naive_time(ty: &str) -> bool {
    let t = ty.split_whitespace().collect::<Vec<_>>().join(" ").to_ascii_lowercase();
    let base = t.split(['(', ' ']).next().unwrap_or("");
    matches!(base, "time" | "time_ns") && !t.ends_with(" with time zone")
}

/// True when a cast to the declared type drops a UTC offset without an error, so that a value
/// carrying one would be stored off by it: a timestamp ([`is_naive_timestamp`]) or a time of
/// day ([`is_naive_time`]) without a time zone.
pub fn drops_utc_offset(ty: &str) -> bool {
    is_naive_timestamp(ty) || is_naive_time(ty)
}

/// DuckDB's blanks (`StringUtil::CharacterIsSpace`): what its casts skip around a value.
fn is_blank(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\u{b}' | '\u{c}' | '\r')
}

/// True when `s` is a time of day as DuckDB's cast reads one (`Time::TryConvertInternal`):
/// hours (any number of digits), `:`, minutes (one or two digits), and optionally `:`, seconds
/// (one or two digits) and a fraction (`.` then any digits, maybe none). `10:00` without seconds
/// is DuckDB's only at the end of a value, but Postgres reads `10:00-03` too.
fn is_clock(s: &str) -> bool {
    let digits = |p: &str, max: usize| !p.is_empty() && p.len() <= max && p.bytes().all(|b| b.is_ascii_digit());
    let parts: Vec<&str> = s.split(':').collect();
    match *parts.as_slice() {
        [h, m] => digits(h, usize::MAX) && digits(m, 2),
        [h, m, sec] => {
            let whole = sec.split_once('.').map_or(sec, |(w, fraction)| if fraction.bytes().all(|b| b.is_ascii_digit()) { w } else { "" });
            digits(h, usize::MAX) && digits(m, 2) && digits(whole, 2)
        }
        _ => false,
    }
}

/// True when `s` (after its sign) is a UTC offset as the casts read one: digits, maybe
/// parted by colons. That holds every form DuckDB's timestamp cast reads
/// (`Timestamp::TryParseUTCOffset`: `hh`, `hhmm`, `hh:mm`, `hh:mm:ss`, a last `:` skipped) and
/// the malformed ones its `time` cast drops all the same (`+020`, `+02:0`, `+2`); a timestamp
/// holding one of those fails its cast anyway.
fn is_offset(s: &str) -> bool {
    s.starts_with(|c: char| c.is_ascii_digit()) && s.bytes().all(|b| b.is_ascii_digit() || b == b':')
}

/// The UTC offset a date and time text ends with when it is not zero (`+02:00` of
/// `2026-01-02T10:00:00+02:00`): a cast to a timestamp or a time without a time zone drops it
/// silently (both DuckDB and Postgres), so the value would be stored two hours off. Every form
/// DuckDB reads counts (`+02`, `+0200`, `+02:00`, `+02:00:00`, `+02:`), after any time of day it
/// reads (`10:00:0+02`, `1:0:0.5+02`; a blank before the offset, which its `time` cast and
/// Postgres read), blanks after it (`+02\t`, `+0200\n`) skipped as the cast skips them. `Z`,
/// `+00`, `+00:00`, `+00:00:00` change nothing.
pub fn nonzero_utc_offset(text: &str) -> Option<&str> {
    let t = text.trim_end_matches(is_blank);
    let at = t.rfind(['+', '-'])?;
    let (head, offset) = (&t[..at], &t[at..]);
    // After a time of day (`hh:mm[:ss[.f]]`), not a date's `-02`.
    let after_time = head.trim_end_matches(is_blank).rsplit(|c: char| is_blank(c) || c == 'T' || c == 't').next().is_some_and(is_clock);
    (after_time && is_offset(&offset[1..]) && offset.bytes().any(|b| matches!(b, b'1'..=b'9'))).then_some(offset)
}

/// Checks that a declared type is one type expression and nothing more: not empty, its quotes
/// closed, its parentheses and brackets balanced (never closing one it did not open), no `;` and
/// no comment outside quotes. Declared types are written into engine statements (`CAST(NULL AS
/// <type>)`, `ALTER TABLE … ADD COLUMN`), so a type text that could end the statement or comment
/// out the rest is refused at load, before any statement holds it. Which types exist is the
/// engine's to say (`efmesh check`, the apply's contract).
///
/// # Errors
/// What is wrong with the text, to follow "type `<t>` ".
pub fn check_type_text(ty: &str) -> Result<(), String> {
    if ty.trim().is_empty() {
        return Err("is empty".into());
    }
    let b = ty.as_bytes();
    let (mut depth, mut quote, mut i) = (0i32, None::<u8>, 0);
    while i < b.len() {
        let c = b[i];
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None => match c {
                b'\'' | b'"' => quote = Some(c),
                b'(' | b'[' => depth += 1,
                b')' | b']' => {
                    depth -= 1;
                    if depth < 0 {
                        return Err(format!("closes a `{}` it never opened", c as char));
                    }
                }
                b';' => return Err("holds a `;`: a type is one expression, not statements".into()),
                b'-' if b.get(i + 1) == Some(&b'-') => return Err("holds a comment (`--`)".into()),
                b'/' if b.get(i + 1) == Some(&b'*') => return Err("holds a comment (`/*`)".into()),
                _ => {}
            },
        }
        i += 1;
    }
    match (quote, depth) {
        (Some(q), _) => Err(format!("has an unclosed `{}`", q as char)),
        (None, d) if d > 0 => Err("has an unclosed `(` or `[`".into()),
        _ => Ok(()),
    }
}

/// The words of a declared type, split at whitespace outside parentheses, brackets and quotes:
/// `decimal(18, 2) name varchar` is `decimal(18, 2)`, `name`, `varchar`.
fn type_words(ty: &str) -> Vec<&str> {
    let mut words = Vec::new();
    let (mut depth, mut quote, mut start) = (0i32, None::<char>, None::<usize>);
    for (i, c) in ty.char_indices() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None => match c {
                '\'' | '"' => quote = Some(c),
                '(' | '[' => depth += 1,
                ')' | ']' => depth -= 1,
                c if c.is_whitespace() && depth <= 0 => {
                    if let Some(s) = start.take() {
                        words.push(&ty[s..i]);
                    }
                    continue;
                }
                _ => {}
            },
        }
        if start.is_none() {
            start = Some(i);
        }
    }
    if let Some(s) = start {
        words.push(&ty[s..]);
    }
    words
}

/// True when `word`, after `previous`, continues a type rather than naming a column: `double
/// precision`, `character varying`, `integer array`, `timestamp with time zone`, a word opening
/// with `(` or `[` (`decimal (18, 2)`, `integer []`).
fn continues_type(word: &str, previous: &str) -> bool {
    let (w, p) = (word.to_ascii_lowercase(), previous.to_ascii_lowercase());
    w.starts_with(['(', '['])
        || matches!(w.as_str(), "precision" | "varying" | "array" | "with" | "without")
        || (w == "time" && matches!(p.as_str(), "with" | "without"))
        || (w == "zone" && p == "time")
}

/// True when `word` can be a column name in a `name type` pair: an identifier (letters, digits
/// and `_`, not starting with a digit) or a double-quoted name.
fn is_column_word(word: &str) -> bool {
    if word.len() >= 2 && word.starts_with('"') && word.ends_with('"') {
        return true;
    }
    let mut chars = word.chars();
    chars.next().is_some_and(|c| c.is_alphabetic() || c == '_') && chars.all(|c| c.is_alphanumeric() || c == '_')
}

/// Column `column` declared with type `ty`, read as several `name type` pairs run together: what
/// a `-- schema:` header missing a comma declares (`-- schema: id integer name varchar` gives
/// `id` the type `integer name varchar`). The pairs, `(name, type)` as written, `column`'s first
/// (`[(id, integer), (name, varchar)]`); `None` when the type does not read so — one word, or
/// words that continue a type (`double precision`, `character varying`, `timestamp with time
/// zone`, an `interval day to second`). A guess for a hint about a type the engine refused (or a
/// column the query returns that the schema lacks), never a way to split a schema.
pub fn run_together(column: &str, ty: &str) -> Option<Vec<(String, String)>> {
    let words = type_words(ty);
    if words.first().is_some_and(|w| w.eq_ignore_ascii_case("interval")) {
        return None;
    }
    let mut pairs: Vec<(String, Vec<&str>)> = vec![(column.to_string(), Vec::new())];
    let mut i = 0;
    while i < words.len() {
        let (word, previous) = (words[i], if i == 0 { "" } else { words[i - 1] });
        let typed = pairs.last().is_some_and(|(_, t)| !t.is_empty());
        let next_is_type = words.get(i + 1).is_some_and(|n| !n.starts_with(['(', '[']));
        if typed && next_is_type && is_column_word(word) && !continues_type(word, previous) {
            pairs.push((word.to_string(), vec![words[i + 1]]));
            i += 2;
        } else {
            if let Some((_, t)) = pairs.last_mut() {
                t.push(word);
            }
            i += 1;
        }
    }
    (pairs.len() > 1).then(|| pairs.into_iter().map(|(name, t)| (name, t.join(" "))).collect())
}

/// The hint for column `column` declared `ty` when that reads as several columns run together
/// ([`run_together`]): "is a comma missing?", with the columns the declaration would be with
/// commas. `None` otherwise.
pub fn missing_comma_hint(column: &str, ty: &str) -> Option<String> {
    let pairs = run_together(column, ty)?;
    let with_commas = pairs.iter().map(|(name, t)| format!("{name} {t}")).collect::<Vec<_>>().join(", ");
    Some(format!(
        "is a comma missing? `{column} {ty}` reads as {} columns run together; the schema separates columns with commas: `{with_commas}`",
        pairs.len()
    ))
}

/// Coarse type classes the schema contract compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TypeFamily {
    /// VARCHAR, TEXT, STRING, CHAR, UUID…
    Text,
    /// Integers, floats, decimals.
    Numeric,
    /// BOOLEAN.
    Boolean,
    /// DATE, TIME, TIMESTAMP[TZ], INTERVAL.
    Temporal,
    /// Lists, arrays, structs, maps, unions: compatible with one another (their element types
    /// are not compared), never with a scalar family.
    Nested,
    /// JSON (DuckDB's `JSON`, Postgres's `json`/`jsonb`): compatible with text (its values are
    /// text) and nested types (a struct or list is what a JSON document holds), never with a
    /// numeric, boolean or temporal family — a JSON column declared `integer` would serve `"2"`
    /// and `{"x":3}`.
    Json,
    /// Anything else (BLOB, UUID-like extension types…): not checked.
    Any,
}

impl TypeFamily {
    /// The family of a DuckDB type spelling such as `VARCHAR(10)`, `timestamp with time zone`
    /// or `DECIMAL(18,3)`.
    pub fn of(ty: &str) -> TypeFamily {
        let t = ty.trim().to_ascii_uppercase();
        // `INTEGER[]`, `VARCHAR[3]`, `INTEGER ARRAY`, `STRUCT(…)`, `MAP(…)`, `UNION(…)`.
        if t.ends_with(']')
            || t.ends_with(" ARRAY")
            || ["STRUCT", "MAP", "UNION"].iter().any(|k| t.starts_with(k) && t[k.len()..].trim_start().starts_with('('))
        {
            return TypeFamily::Nested;
        }
        let base = t.split(['(', ' ']).next().unwrap_or("");
        match base {
            "VARCHAR" | "TEXT" | "STRING" | "CHAR" | "BPCHAR" | "UUID" | "NVARCHAR" | "CHARACTER" => TypeFamily::Text,
            "BOOLEAN" | "BOOL" | "LOGICAL" => TypeFamily::Boolean,
            "TINYINT" | "SMALLINT" | "INTEGER" | "INT" | "BIGINT" | "HUGEINT" | "UTINYINT" | "USMALLINT" | "UINTEGER" | "UBIGINT" | "UHUGEINT" | "INT1"
            | "INT2" | "INT4" | "INT8" | "INT16" | "INT32" | "INT64" | "INT128" | "SHORT" | "LONG" | "SIGNED" | "FLOAT" | "FLOAT4" | "FLOAT8" | "REAL"
            | "DOUBLE" | "DECIMAL" | "NUMERIC" | "VARINT" | "BIGNUM" => TypeFamily::Numeric,
            "DATE" | "TIME" | "TIMETZ" | "TIMESTAMP" | "TIMESTAMPTZ" | "DATETIME" | "TIMESTAMP_S" | "TIMESTAMP_MS" | "TIMESTAMP_NS" | "TIMESTAMP_US"
            | "INTERVAL" => TypeFamily::Temporal,
            "JSON" | "JSONB" => TypeFamily::Json,
            _ => TypeFamily::Any,
        }
    }

    /// True for the built-in scalar families (text, numeric, boolean, temporal).
    pub fn is_scalar(self) -> bool {
        matches!(self, TypeFamily::Text | TypeFamily::Numeric | TypeFamily::Boolean | TypeFamily::Temporal)
    }

    /// True unless the families differ and neither is [`TypeFamily::Any`] (JSON is compatible
    /// with text and nested types too).
    pub fn compatible(self, other: TypeFamily) -> bool {
        use TypeFamily::{Any, Json, Nested, Text};
        self == other || self == Any || other == Any || matches!((self, other), (Json, Text | Nested) | (Text | Nested, Json))
    }
}

impl std::fmt::Display for TypeFamily {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = match self {
            TypeFamily::Text => "text",
            TypeFamily::Numeric => "numeric",
            TypeFamily::Boolean => "boolean",
            TypeFamily::Temporal => "temporal",
            TypeFamily::Nested => "nested",
            TypeFamily::Json => "json",
            TypeFamily::Any => "any",
        };
        f.write_str(s)
    }
}

/// DuckDB's integer types and their aliases (where a fractional value would be rounded), any
/// case (Postgres's `SMALLINT`/`INTEGER`/`BIGINT` among them).
pub fn is_integer_type(ty: &str) -> bool {
    let t = ty.trim().to_ascii_lowercase();
    matches!(
        t.as_str(),
        "tinyint"
            | "int1"
            | "smallint"
            | "int2"
            | "short"
            | "integer"
            | "int"
            | "int4"
            | "signed"
            | "bigint"
            | "int8"
            | "long"
            | "hugeint"
            | "int128"
            | "utinyint"
            | "usmallint"
            | "uinteger"
            | "ubigint"
            | "uhugeint"
    )
}

/// True for an integer or decimal type (DuckDB's and Postgres's spellings): one whose values
/// compare exactly.
pub fn is_exact_number(ty: &str) -> bool {
    let base = ty.trim().split(['(', ' ']).next().unwrap_or("");
    is_integer_type(ty) || base.eq_ignore_ascii_case("decimal") || base.eq_ignore_ascii_case("numeric")
}

/// The scale `s` of a `decimal(p,s)` / `numeric(p,s)` / `dec(p,s)` type (a value with more
/// decimals would be rounded), if it is one: 0 for `decimal(p)`; 3 for a bare `decimal`
/// (DuckDB's `DECIMAL(18,3)`; Postgres's bare `numeric` rounds nothing, and its checks compare
/// values).
pub fn decimal_scale(ty: &str) -> Option<u32> {
    let t = ty.trim().to_ascii_lowercase();
    let (base, rest) = t.split_once('(').unwrap_or((t.as_str(), ""));
    if !matches!(base.trim(), "decimal" | "numeric" | "dec") {
        return None;
    }
    if rest.is_empty() {
        return Some(3);
    }
    let inner = rest.strip_suffix(')')?;
    match inner.split_once(',') {
        Some((_, scale)) => scale.trim().parse().ok(),
        None => Some(0),
    }
}

/// True when two spellings name the same type: case, spacing and DuckDB's aliases aside (`int`,
/// `int4` and `INTEGER`; `text` and `VARCHAR`; `timestamptz` and `TIMESTAMP WITH TIME ZONE`), a
/// text type's length ignored (DuckDB ignores it) and a decimal's width and scale too (DuckDB's
/// CSV reader names a refused `decimal(10,2)` conversion `DECIMAL`).
/// Two spellings both outside the aliases known here (lists, structs, extension types,
/// `timestamp(3)`) are compared by their [`TypeFamily`]: two of one family are taken for the same
/// type; one known and one unknown spelling are not the same type.
pub fn same_type(a: &str, b: &str) -> bool {
    match (canonical_type(a), canonical_type(b)) {
        (Some(a), Some(b)) => a == b,
        (None, None) => TypeFamily::of(a) == TypeFamily::of(b),
        _ => false,
    }
}

/// One spelling for each of DuckDB's scalar types and their aliases ([`same_type`]); `None` for a
/// spelling not among them.
fn canonical_type(ty: &str) -> Option<String> {
    let t = ty.split_whitespace().collect::<Vec<_>>().join(" ").to_ascii_lowercase();
    let t = t.replace(" (", "(").replace("( ", "(").replace(" ,", ",").replace(", ", ",").replace(" )", ")");
    if is_zoned_timestamp(&t) {
        return (!t.contains('(')).then(|| "timestamptz".to_string());
    }
    let (base, args) = match t.split_once('(') {
        Some((base, rest)) => (base, Some(rest.strip_suffix(')')?)),
        None => (t.as_str(), None),
    };
    let canonical = match base {
        "varchar" | "text" | "string" | "char" | "bpchar" | "nvarchar" | "character" | "character varying" => return Some("varchar".to_string()),
        "decimal" | "numeric" | "dec" => return Some("decimal".to_string()),
        "tinyint" | "int1" => "tinyint",
        "smallint" | "int2" | "int16" | "short" => "smallint",
        "integer" | "int" | "int4" | "int32" | "signed" | "integral" => "integer",
        "bigint" | "int8" | "int64" | "long" | "oid" => "bigint",
        "hugeint" | "int128" => "hugeint",
        "float" | "float4" | "real" => "float",
        "double" | "float8" | "double precision" => "double",
        "boolean" | "bool" | "logical" => "boolean",
        "timestamp" | "datetime" | "timestamp without time zone" | "timestamp_us" => "timestamp",
        "utinyint" | "uint8" => "utinyint",
        "usmallint" | "uint16" => "usmallint",
        "uinteger" | "uint32" => "uinteger",
        "ubigint" | "uint64" => "ubigint",
        "uhugeint" | "uint128" => "uhugeint",
        "varint" | "bignum" => "bignum",
        "timetz" | "time with time zone" => "timetz",
        "date" | "time" | "interval" | "uuid" | "blob" | "json" | "timestamp_s" | "timestamp_ms" | "timestamp_ns" => base,
        _ => return None,
    };
    args.is_none().then(|| canonical.to_string())
}

/// The element type of a list type (`integer[]`, `decimal(10,2)[3]`), if it is one.
pub fn list_element(ty: &str) -> Option<&str> {
    let t = ty.trim_end().strip_suffix(']')?;
    let open = t.rfind('[')?;
    t[open + 1..].chars().all(|c| c.is_ascii_digit()).then(|| t[..open].trim_end())
}

/// True when a value written with `decimals` decimals (its text's digits after the point,
/// trailing zeros apart) would be rounded by `ty`: a fraction into an integer type, more
/// decimals than the scale a decimal type names (`decimal(10,2)`; a bare `decimal` is DuckDB's
/// `(18,3)` but Postgres's rounds nothing, so it names none).
pub fn rounds(ty: &str, decimals: usize) -> bool {
    if is_integer_type(ty) {
        return decimals > 0;
    }
    ty.contains('(') && decimal_scale(ty).is_some_and(|scale| decimals > scale as usize)
}

/// The decimals a number's text needs (`-1.250` has 2, `1.5e-3` has 4, `1.5e2` has 0), `None`
/// for anything but a number.
pub fn decimals_of(text: &str) -> Option<usize> {
    let t = text.trim();
    let (mantissa, exponent) = match t.split_once(['e', 'E']) {
        Some((m, e)) => (m, e.parse::<i64>().ok()?),
        None => (t, 0),
    };
    let m = mantissa.strip_prefix(['+', '-']).unwrap_or(mantissa);
    let (whole, fraction) = m.split_once('.').unwrap_or((m, ""));
    let digits = |s: &str| s.chars().all(|c| c.is_ascii_digit());
    if (whole.is_empty() && fraction.is_empty()) || !digits(whole) || !digits(fraction) {
        return None;
    }
    // The digits' scale less their trailing zeros (`100e-2` is 1: none).
    let all = format!("{whole}{fraction}");
    let zeros = i64::try_from(all.len() - all.trim_end_matches('0').len()).ok()?;
    let places = i64::try_from(fraction.len()).ok()? - zeros;
    usize::try_from((places - exponent).max(0)).ok()
}

/// The digits of a second's fraction a time type keeps: 6 (microseconds) for `timestamp`,
/// `timestamptz`, `datetime`, `time` (with or without a time zone, DuckDB's and Postgres's
/// spellings); 0, 3 and 9 for DuckDB's `timestamp_s`, `timestamp_ms` and `timestamp_ns`; `p`
/// for a precision the type names (Postgres's `timestamp(3)`, `time(0)`). `None` for other types.
pub fn second_digits(ty: &str) -> Option<usize> {
    let t = ty.trim().to_ascii_lowercase();
    match t.as_str() {
        "timestamp_s" => return Some(0),
        "timestamp_ms" => return Some(3),
        "timestamp_ns" => return Some(9),
        _ => {}
    }
    let base = t.split(['(', ' ']).next().unwrap_or("");
    if !matches!(base, "timestamp" | "timestamptz" | "timestamp_tz" | "timestamp_us" | "datetime" | "time" | "timetz") {
        return None;
    }
    match t.split_once('(') {
        Some((_, rest)) => rest.split(')').next()?.trim().parse().ok(),
        None => Some(6),
    }
}

/// Where the date a text starts with ends, as DuckDB's cast reads one (`Date::TryConvertDate`):
/// blanks, an optional `-`, the year's digits, a separator (` `, `-`, `/` or `\`), the month's
/// one or two digits, the same separator, the day's one or two digits, an optional ` (BC)`.
/// `None` when the text does not start so, or a digit follows the day (the cast refuses both).
/// What follows is dropped by a cast to `date`, whatever it is.
fn date_prefix_end(text: &str) -> Option<usize> {
    let b = text.as_bytes();
    let mut i = b.iter().take_while(|c| is_blank(char::from(**c))).count();
    i += usize::from(b.get(i) == Some(&b'-'));
    let digits = |from: usize, max: usize| b[from..].iter().take(max).take_while(|c| c.is_ascii_digit()).count();
    let year = digits(i, usize::MAX);
    if year == 0 {
        return None;
    }
    i += year;
    let sep = *b.get(i).filter(|c| matches!(**c, b' ' | b'-' | b'/' | b'\\'))?;
    i += 1;
    let month = digits(i, 2);
    if month == 0 || b.get(i + month) != Some(&sep) {
        return None;
    }
    i += month + 1;
    let day = digits(i, 2);
    if day == 0 {
        return None;
    }
    i += day;
    if b.get(i).is_some_and(u8::is_ascii_digit) {
        return None;
    }
    if b.len() >= i + 5 && is_blank(char::from(b[i])) && b[i + 1..i + 5].eq_ignore_ascii_case(b"(bc)") {
        i += 5;
    }
    Some(i)
}

/// Why casting the text `text` to the date or time type `ty` would change the value without an
/// error (DuckDB and Postgres both cut or round silently): a time of day other than midnight
/// into a `date`, or more digits of a second's fraction than the type keeps
/// ([`second_digits`]: `2026-01-01 00:00:00.0000009` or `…00:00:0.0000009` into a microsecond
/// `timestamp`; trailing zeros count for nothing). `None` when the cast keeps the value, for
/// other types, and for a text that is no date or time (the engine's cast refuses it).
pub fn temporal_cut(text: &str, ty: &str) -> Option<String> {
    let b = text.as_bytes();
    if ty.trim().eq_ignore_ascii_case("date") {
        // The time of day: DuckDB's `date` cast reads the date ([`date_prefix_end`]) and drops
        // whatever follows it (`T10:00`, ` T10:00`, ` 10:00 PM`, `_10:00`), so the first number
        // after it, past anything but a sign, is one, up to the first character that is no
        // digit, `:` or `.` (a `Z` or an offset after it is not the time; nor is an offset
        // right after the date, `2026-01-02+05:30`, which the cast drops too). A text that is
        // no DuckDB date (Postgres reads more): the time after the first ' ' or 'T'.
        let (rest, is_date) = match date_prefix_end(text) {
            Some(end) => (text[end..].trim_start_matches(|c: char| !c.is_ascii_digit() && c != '+' && c != '-'), true),
            None => {
                let trimmed = text.trim();
                let sep = trimmed.find([' ', 'T', 't'])?;
                (trimmed[sep + 1..].trim_start(), false)
            }
        };
        let clock: String = rest.chars().take_while(|c| c.is_ascii_digit() || *c == ':' || *c == '.').collect();
        // (After a DuckDB date, an hour alone, `2026-01-02 10`, is dropped as well.)
        return ((is_date || clock.contains(':')) && clock.chars().any(|c| matches!(c, '1'..='9')))
            .then(|| format!("\"{text}\" has a time of day, which `{ty}` would drop: write the date alone"));
    }
    let keep = second_digits(ty)?;
    // The fraction of the seconds: the digits after a `.` that follows `:s` or `:ss` (DuckDB
    // reads one or two digits of seconds; Postgres also `mm:ss.f`).
    let dot =
        (2..b.len()).find(|&i| b[i] == b'.' && b[i - 1].is_ascii_digit() && (b[i - 2] == b':' || (i >= 3 && b[i - 2].is_ascii_digit() && b[i - 3] == b':')))?;
    let fraction: String = text[dot + 1..].chars().take_while(char::is_ascii_digit).collect();
    let digits = fraction.trim_end_matches('0').len();
    (digits > keep).then(|| format!("\"{text}\" has {digits} digits of a second's fraction and `{ty}` keeps {keep}, which would cut it"))
}

/// The innermost element type of a (possibly nested) list type: `integer` for `integer[][]`.
pub fn innermost_element(ty: &str) -> Option<&str> {
    let mut element = list_element(ty)?;
    while let Some(inner) = list_element(element) {
        element = inner;
    }
    Some(element)
}

/// A POSIX regular expression matching a number in a text (a list's, `[1.5, 2]`, `{1.555}`)
/// with more decimals than `ty` (an integer or `decimal(p,s)` type) holds; `None` for other
/// types. A number in exponent notation is not matched (its mantissa says nothing alone).
pub fn rounded_digits_regex(ty: &str) -> Option<String> {
    // Not a mantissa: `1.5e3` is 1500 (exponent notation is checked by value).
    const END: &str = "([^0-9eE]|$)";
    if is_integer_type(ty) {
        return Some(format!("[.][0-9]*[1-9][0-9]*{END}"));
    }
    decimal_scale(ty).map(|scale| format!("[.][0-9]{{{scale}}}[0-9]*[1-9][0-9]*{END}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nonzero_utc_offset_after_a_time_is_found() {
        assert_eq!(nonzero_utc_offset("2026-01-02T10:00:00+02:00"), Some("+02:00"));
        assert_eq!(nonzero_utc_offset("2026-01-02 10:00:00.5-0530"), Some("-0530"));
        assert_eq!(nonzero_utc_offset("2026-01-02 10:00-03"), Some("-03"));
        for none in ["2026-01-02", "2026-01-02T10:00:00Z", "2026-01-02T10:00:00+00:00", "2026-01-02 10:00:00", "2026-01-02 10:00:00+00"] {
            assert_eq!(nonzero_utc_offset(none), None, "{none}");
        }
        assert!(is_naive_timestamp("TIMESTAMP(3)") && is_naive_timestamp("datetime") && !is_naive_timestamp("timestamptz") && !is_naive_timestamp("date"));
    }

    #[test]
    fn every_utc_offset_duckdb_reads_is_found_after_every_time_it_reads() {
        // DuckDB reads `±hh[[:]mm[:ss]]` after `h:m:s[.f]` (one or two digits each), then skips
        // blanks: each of these casts to a `timestamp` (or `time`) with the offset dropped.
        for (text, offset) in [
            ("2026-01-02 10:00:00+02:00:00", "+02:00:00"),
            ("2026-01-02 10:00:00-00:00:30", "-00:00:30"),
            ("2026-01-02 10:00:0+02", "+02"),
            ("2026-01-02 1:0:0.5+0200", "+0200"),
            ("2026-01-02 10:00:00.+02:", "+02:"),
            ("2026-01-02 10:00:00+02\t", "+02"),
            ("2026-01-02 10:00:00+0200\n", "+0200"),
            ("2026-01-02 10:00:00+02:00 \r\n", "+02:00"),
            ("2026-01-02 10:00:00+02\u{b}", "+02"),
            ("10:00:00+02", "+02"),
            ("10:00:00 +02", "+02"),
            ("10:00:0.5+020", "+020"),
        ] {
            assert_eq!(nonzero_utc_offset(text), Some(offset), "{text:?}");
        }
        // Zero offsets change nothing, in every form; a date's `-02` is no offset.
        for zero in [
            "2026-01-02 10:00:00+00",
            "2026-01-02 10:00:00+00:00:00",
            "2026-01-02 10:00:00-0000\t",
            "2026-01-02 10:00:0+00:",
            "10:00:00+00:00",
            "2026-01-02-03",
            "2026-01-02 10:00:00 UTC",
        ] {
            assert_eq!(nonzero_utc_offset(zero), None, "{zero:?}");
        }
    }

    #[test]
    fn a_time_without_a_time_zone_drops_an_offset_as_a_timestamp_does() {
        for naive in ["time", "TIME(3)", "time without time zone", "time_ns", "timestamp", "timestamp_ms"] {
            assert!(drops_utc_offset(naive), "{naive}");
        }
        for kept in ["timetz", "time with time zone", "TIME(3) WITH TIME ZONE", "time_tz", "timestamptz", "date", "varchar", "interval"] {
            assert!(!drops_utc_offset(kept), "{kept}");
        }
        assert!(is_naive_time("Time") && !is_naive_time("timestamp") && !is_naive_time("timetz"));
    }

    #[test]
    fn a_fraction_after_a_one_digit_second_and_a_time_after_any_separator_are_cuts() {
        // DuckDB reads one or two digits of seconds: the fraction after either is cut.
        assert!(temporal_cut("2026-01-02 10:00:0.9999999", "timestamp").is_some_and(|w| w.contains("7 digits") && w.contains("keeps 6")));
        assert!(temporal_cut("1:0:0.1234567", "time").is_some_and(|w| w.contains("7 digits")));
        assert!(temporal_cut("2026-01-02 10:00:0.1234+02", "timestamp(3) with time zone").is_some_and(|w| w.contains("4 digits")));
        for kept in ["2026-01-02 10:00:0.999999", "2026-01-02 10:00:0.9999990", "2026-01-02 10:00:0"] {
            assert_eq!(temporal_cut(kept, "timestamp"), None, "{kept}");
        }
        // DuckDB's `date` cast drops whatever follows the date: a time after ` T`, `_`, two
        // blanks, or after a date spelled `2026 01 02` or `2026/1/2`, is a time of day too.
        for cut in ["2026-01-02 T10:00", "2026-01-02_10:00:00", "2026-01-02\t 10:00", "2026 01 02 10:00", "2026/1/2 1:0:0", "2026-01-02 10"] {
            assert!(temporal_cut(cut, "date").is_some_and(|w| w.contains("time of day")), "{cut:?}");
        }
        for kept in ["2026-01-02 T00:00", "2026 01 02", "2026-01-02 (BC)", "2026-01-02 Z", "2026/01/02 00:00:00.000 +05:30"] {
            assert_eq!(temporal_cut(kept, "date"), None, "{kept:?}");
        }
    }

    #[test]
    fn a_time_of_day_into_a_date_and_a_fraction_past_the_precision_are_cuts() {
        assert!(temporal_cut("2026-01-01 23:59:59", "date").is_some_and(|w| w.contains("time of day")));
        assert!(temporal_cut("2026-01-01T00:00:01Z", "DATE").is_some());
        assert!(temporal_cut("2026-01-01 10:00+05:30", "date").is_some());
        for kept in ["2026-01-01", "2026-01-01 00:00:00", "2026-01-01T00:00:00.000Z", "2026-01-01 00:00:00+02:00"] {
            assert_eq!(temporal_cut(kept, "date"), None, "{kept}");
        }
        assert!(temporal_cut("2026-01-01 00:00:00.0000009", "timestamp").is_some_and(|w| w.contains("7 digits") && w.contains("keeps 6")));
        assert!(temporal_cut("2026-01-01 00:00:00.5", "TIMESTAMP_S").is_some());
        assert!(temporal_cut("12:00:00.1234", "time(3)").is_some());
        assert!(temporal_cut("2026-01-01 00:00:00.1234567+02:00", "timestamp with time zone").is_some());
        for (kept, ty) in [
            ("2026-01-01 00:00:00.123456", "timestamp"),
            ("2026-01-01 00:00:00.1234560", "timestamptz"),
            ("2026-01-01 00:00:00.000000001", "timestamp_ns"),
            ("2026-01-01 00:00:00.0000009", "varchar"),
            ("2026-01-01 23:59:59", "timestamp"),
        ] {
            assert_eq!(temporal_cut(kept, ty), None, "{kept} {ty}");
        }
        assert_eq!((second_digits("timestamp(3) with time zone"), second_digits("datetime"), second_digits("date")), (Some(3), Some(6), None));
    }

    #[test]
    fn a_bare_utc_offset_after_a_date_is_no_time_of_day() {
        // DuckDB casts `2026-01-02+05:30` to 2026-01-02: only a clock after ' ' or 'T' is one.
        for kept in ["2026-01-02+05:30", "2026-01-02-03", "2026-01-02 +05:30", " 2026-01-02+05:30 ", "2026-01-02T00:00+05:30"] {
            assert_eq!(temporal_cut(kept, "date"), None, "{kept}");
        }
        for cut in ["2026-01-02 10:00+05:30", "2026-01-02T05:30", " 2026-01-02 00:00:01"] {
            assert!(temporal_cut(cut, "date").is_some_and(|w| w.contains("time of day")), "{cut}");
        }
    }

    #[test]
    fn decimal_scales_lists_and_rounding_are_read_from_type_names() {
        assert_eq!(
            (decimal_scale("DEC(10, 2)"), decimal_scale("numeric(5)"), decimal_scale("decimal"), decimal_scale("double")),
            (Some(2), Some(0), Some(3), None)
        );
        assert_eq!((list_element("integer[]"), list_element("decimal(10,2)[3]"), list_element("integer")), (Some("integer"), Some("decimal(10,2)"), None));
        assert_eq!(list_element("integer[][]"), Some("integer[]"));
        assert!(rounds("bigint", 1) && !rounds("bigint", 0) && rounds("dec(10,2)", 3) && !rounds("decimal(10,2)", 2) && !rounds("double", 9));
        assert_eq!(
            (decimals_of("-1.250"), decimals_of("3"), decimals_of("1e3"), decimals_of("x"), decimals_of(".5")),
            (Some(2), Some(0), Some(0), None, Some(1))
        );
        assert_eq!((decimals_of("1e-7"), decimals_of("1.55e-1"), decimals_of("1.5e2"), decimals_of("1.5e")), (Some(7), Some(3), Some(0), None));
        // Trailing zeros of the whole part count against a negative exponent.
        assert_eq!((decimals_of("100e-2"), decimals_of("10E-3"), decimals_of("1200e-3"), decimals_of("0")), (Some(0), Some(2), Some(1), Some(0)));
        assert_eq!(
            (innermost_element("integer[][]"), innermost_element("dec(5,2)[]"), innermost_element("integer")),
            (Some("integer"), Some("dec(5,2)"), None)
        );
        assert_eq!(
            (rounded_digits_regex("int").as_deref(), rounded_digits_regex("decimal(10,2)").as_deref(), rounded_digits_regex("text")),
            (Some("[.][0-9]*[1-9][0-9]*([^0-9eE]|$)"), Some("[.][0-9]{2}[0-9]*[1-9][0-9]*([^0-9eE]|$)"), None)
        );
    }

    #[test]
    fn aliases_of_one_type_are_the_same_type_and_other_types_are_not() {
        for (a, b) in [
            ("int", "INTEGER"),
            ("int4", "integer"),
            ("bigint", "BIGINT"),
            ("long", "BIGINT"),
            ("text", "VARCHAR"),
            ("varchar(10)", "VARCHAR"),
            ("timestamptz", "TIMESTAMP WITH TIME ZONE"),
            ("decimal", "DECIMAL(18,3)"),
            ("numeric(10, 2)", "DECIMAL"),
            ("double precision", "DOUBLE"),
            ("integer[]", "INTEGER[]"),
            ("int64", "BIGINT"),
            ("int32", "INTEGER"),
            ("uint32", "UINTEGER"),
            ("timestamp_us", "TIMESTAMP"),
        ] {
            assert!(same_type(a, b), "{a} = {b}");
        }
        for (a, b) in [
            ("varchar", "INTEGER"),
            ("integer", "BIGINT"),
            ("timestamp", "TIMESTAMP WITH TIME ZONE"),
            ("float", "DOUBLE"),
            ("date", "TIMESTAMP"),
            ("int64", "INTEGER"),
            ("int16", "INTEGER"),
            ("oid", "INTEGER"),
            ("timestamp(3)", "TIMESTAMP"),
        ] {
            assert!(!same_type(a, b), "{a} != {b}");
        }
    }

    #[test]
    fn zoned_timestamps_are_told_from_naive_ones() {
        for zoned in ["timestamptz", "TIMESTAMPTZ", "timestamp with time zone", "TIMESTAMP(3) WITH TIME ZONE", "timestamp_tz"] {
            assert!(is_zoned_timestamp(zoned), "{zoned}");
        }
        for naive in ["timestamp", "timestamp without time zone", "date", "timestamp_ns", "varchar"] {
            assert!(!is_zoned_timestamp(naive), "{naive}");
        }
    }

    #[test]
    fn a_type_text_is_one_balanced_expression_without_statements_or_comments() {
        for ok in [
            "bigint",
            "DECIMAL(18, 2)",
            "INTEGER[]",
            "STRUCT(a INT, \"b;c\" VARCHAR)",
            "ENUM('x;y', 'it''s')",
            "MAP(VARCHAR, INT[3])",
            "timestamp with time zone",
        ] {
            assert_eq!(check_type_text(ok), Ok(()), "{ok}");
        }
        for (bad, why) in [
            ("bigint); DROP VIEW v; --", "closes a `)` it never opened"),
            ("bigint; DROP VIEW v", "holds a `;`: a type is one expression, not statements"),
            ("bigint -- x", "holds a comment (`--`)"),
            ("int /* x */", "holds a comment (`/*`)"),
            ("DECIMAL(18, 2", "has an unclosed `(` or `[`"),
            ("ENUM('a)", "has an unclosed `'`"),
            ("  ", "is empty"),
        ] {
            assert_eq!(check_type_text(bad), Err(why.to_string()), "{bad}");
        }
    }

    /// A declared type that reads as `name type` pairs run together (a `-- schema:` line missing
    /// a comma) is split into them for the hint; a type of several words is not.
    #[test]
    fn a_type_reading_as_columns_run_together_is_split_for_the_hint() {
        let pairs = |column: &str, ty: &str| run_together(column, ty).map(|p| p.into_iter().map(|(n, t)| format!("{n} {t}")).collect::<Vec<_>>().join(", "));
        assert_eq!(pairs("id", "integer name varchar").as_deref(), Some("id integer, name varchar"));
        assert_eq!(pairs("id", "integer name varchar day date").as_deref(), Some("id integer, name varchar, day date"));
        assert_eq!(pairs("n", "decimal(18, 2) x double precision").as_deref(), Some("n decimal(18, 2), x double precision"));
        assert_eq!(pairs("id", "bigint ts timestamp with time zone").as_deref(), Some("id bigint, ts timestamp with time zone"));
        assert_eq!(pairs("id", "integer \"order date\" date").as_deref(), Some("id integer, \"order date\" date"));
        for one in [
            "integer",
            "double precision",
            "character varying(10)",
            "timestamp with time zone",
            "time without time zone",
            "timestamp(3) with time zone",
            "integer array",
            "decimal (18, 2)",
            "STRUCT(a integer, b varchar)",
            "interval day to second",
            "integer name",
        ] {
            assert_eq!(run_together("c", one), None, "{one}");
        }
        let hint = missing_comma_hint("id", "integer name varchar").unwrap_or_default();
        assert!(hint.starts_with("is a comma missing? `id integer name varchar` reads as 2 columns run together;"), "{hint}");
        assert!(hint.ends_with("separates columns with commas: `id integer, name varchar`"), "{hint}");
        assert_eq!(missing_comma_hint("id", "bigint"), None);
    }

    #[test]
    fn families_follow_duckdb_spellings() {
        assert_eq!(TypeFamily::of("varchar"), TypeFamily::Text);
        assert_eq!(TypeFamily::of("VARCHAR(10)"), TypeFamily::Text);
        assert_eq!(TypeFamily::of("DECIMAL(18,3)"), TypeFamily::Numeric);
        assert_eq!(TypeFamily::of("bigint"), TypeFamily::Numeric);
        assert_eq!(TypeFamily::of("TIMESTAMP WITH TIME ZONE"), TypeFamily::Temporal);
        assert_eq!(TypeFamily::of("timestamptz"), TypeFamily::Temporal);
        assert_eq!(TypeFamily::of("boolean"), TypeFamily::Boolean);
        assert_eq!(TypeFamily::of("INTEGER[]"), TypeFamily::Nested);
        assert_eq!(TypeFamily::of("varchar[3]"), TypeFamily::Nested);
        assert_eq!(TypeFamily::of("integer ARRAY"), TypeFamily::Nested);
        assert_eq!(TypeFamily::of("integer array[3]"), TypeFamily::Nested);
        assert_eq!(TypeFamily::of("STRUCT(a INTEGER)"), TypeFamily::Nested);
        assert_eq!(TypeFamily::of("struct (a integer)"), TypeFamily::Nested);
        assert_eq!(TypeFamily::of("MAP(VARCHAR, INTEGER)"), TypeFamily::Nested);
        assert_eq!(TypeFamily::of("JSON"), TypeFamily::Json);
        assert_eq!(TypeFamily::of("blob"), TypeFamily::Any);
        assert_eq!(TypeFamily::of("mapping"), TypeFamily::Any, "a type merely starting with MAP");
    }

    #[test]
    fn a_nested_value_never_passes_for_a_scalar() {
        assert!(!TypeFamily::of("varchar").compatible(TypeFamily::of("STRUCT(a INTEGER)")));
        assert!(!TypeFamily::of("INTEGER[]").compatible(TypeFamily::of("INTEGER")));
        assert!(TypeFamily::of("INTEGER[]").compatible(TypeFamily::of("BIGINT[]")));
        assert!(TypeFamily::of("json").compatible(TypeFamily::of("STRUCT(a INTEGER)")));
    }

    #[test]
    fn any_is_compatible_with_everything() {
        assert!(TypeFamily::Any.compatible(TypeFamily::Text));
        assert!(TypeFamily::Numeric.compatible(TypeFamily::Any));
        assert!(!TypeFamily::Numeric.compatible(TypeFamily::Text));
    }
}
