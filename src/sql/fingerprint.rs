//! Fingerprints: one blake3 hash per model version, and the physical table it names.
//!
//! The rule comes from `DECISIONS.md` ("Canonical SQL and fingerprints"): blake3 over a
//! versioned, canonical payload that includes the model's name (the original omitted it, so two
//! identical models shared ledger rows). The payload is compact JSON with keys in this fixed
//! order:
//!
//! ```text
//! {"v": FINGERPRINT_VERSION,
//!  "name": "<schema>.<table>",
//!  "kind": Model::kind_payload(),                // no start/end/batch_size/lookback; "target" unless table
//!  "columns": [[name, normalised type(, "exact")], …],  // declaration order
//!  "grain": [column, …],                         // declaration order
//!  "body": "<blake3 hex of the canonical body>" | null,
//!  "parents": ["<schema>.<table>=<fingerprint>", …],  // sorted
//!  "statements": {"pre": [text, …], "post": [text, …]}} // only when data-relevant
//! ```
//!
//! `statements` appears only for a model with pre/post statements declared data-relevant
//! (`statements_affect_data`): their canonical text ([`super::statements::canonical_text`]).
//!
//! Declared types are lower-cased with runs of whitespace collapsed to one space outside their
//! quoted parts and member names ([`normalize_type`]), so `TIMESTAMP  WITH TIME ZONE` and
//! `timestamp with time zone` hash alike and `ENUM('a', 'A')` and `ENUM('A', 'a')` do not; a
//! type with such parts is `[name, type, "exact"]` ([`EXACT_TYPE`]). A parent's fingerprint
//! enters its children's, so an upstream change re-versions everything downstream. The
//! description never enters the payload.

use crate::core::{Model, ModelName};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

/// Version of the payload layout. Bumping it changes every fingerprint, which re-plans every
/// model as a breaking change; bump it only when the payload or the canonical form changes on
/// purpose (a sqlparser upgrade that changes AST serialisation counts).
pub const FINGERPRINT_VERSION: u32 = 1;

/// Length of a fingerprint in hex digits (blake3's 32 bytes).
pub const FINGERPRINT_LEN: usize = 64;

/// Length of [`Fingerprint::short`].
pub const SHORT_LEN: usize = 12;

/// A model version's fingerprint: 64 lower-case hex digits of a blake3 hash.
///
/// Ordered and hashed as its text. Serialises as that string.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(transparent)]
pub struct Fingerprint(String);

/// Why a string is not a fingerprint.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid fingerprint `{text}`: expected {FINGERPRINT_LEN} lower-case hex digits")]
pub struct FingerprintError {
    /// The offending text.
    pub text: String,
}

impl Fingerprint {
    /// Parses 64 lower-case hex digits.
    ///
    /// # Errors
    /// [`FingerprintError`] for any other text.
    ///
    /// # Example
    /// ```
    /// use efmesh::sql::fingerprint::Fingerprint;
    /// let fp = Fingerprint::parse(&"ab".repeat(32))?;
    /// assert_eq!(fp.short(), "abababababab");
    /// assert!(Fingerprint::parse("ABAB").is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn parse(s: &str) -> Result<Self, FingerprintError> {
        let ok = s.len() == FINGERPRINT_LEN && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        if ok { Ok(Self(s.to_string())) } else { Err(FingerprintError { text: s.to_string() }) }
    }

    /// The 64 hex digits.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The first 12 hex digits, for human output (`plan`, `status`).
    #[must_use]
    pub fn short(&self) -> &str {
        self.0.get(..SHORT_LEN).unwrap_or(&self.0)
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Wraps text trusted to be a fingerprint (e.g. read back from the state store) without
/// checking it; use [`Fingerprint::parse`] for untrusted input.
impl From<String> for Fingerprint {
    fn from(s: String) -> Self {
        Self(s)
    }
}

impl From<Fingerprint> for String {
    fn from(fp: Fingerprint) -> String {
        fp.0
    }
}

impl FromStr for Fingerprint {
    type Err = FingerprintError;
    fn from_str(s: &str) -> Result<Self, FingerprintError> {
        Self::parse(s)
    }
}

impl AsRef<str> for Fingerprint {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl<'de> serde::Deserialize<'de> for Fingerprint {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Self::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// The fingerprint of one model version.
///
/// `canonical_body` is the model's [`Canonical`](super::canon::Canonical) text (its body rendered
/// with [`CanonicalResolver`](crate::core::fragment::CanonicalResolver), then canonicalised), or
/// `None` for a model without a body (externals). `parents` holds exactly the model's direct
/// parents ([`Model::parents`]) with their fingerprints. The payload is described in the
/// [module docs](self); `description` and the kind's scheduling fields never enter it.
///
/// # Example
/// ```
/// use efmesh::core::{Kind, Location, Model, ModelName, Schema, Column};
/// use efmesh::sql::{canon::canonicalize, fingerprint::fingerprint};
/// use std::collections::BTreeMap;
/// let moves = ModelName::parse("med.moves")?;
/// let columns = Schema(vec![Column { name: "id".into(), ty: "BIGINT".into() }]);
/// let location = Location { file: "models/moves.lua".into(), line: 1 };
/// let model = Model { grain: vec!["id".into()], ..Model::new(moves, Kind::Full, columns, None, location) };
/// let body = canonicalize("SELECT id FROM raw.moves")?;
/// let fp = fingerprint(&model, Some(&body.text), &BTreeMap::new());
/// assert_eq!(fp.as_str().len(), 64);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[must_use]
pub fn fingerprint(model: &Model, canonical_body: Option<&str>, parents: &BTreeMap<ModelName, Fingerprint>) -> Fingerprint {
    let digest = canonical_body.map(body_digest);
    fingerprint_with_digest(model, digest.as_deref(), parents)
}

/// The digest of a canonical body that the payload holds: blake3, 64 lowercase hex. Hashing the
/// digest instead of the text keeps fingerprinting cheap for large bodies and lets the
/// canonicalisation cache store 64 bytes per body.
#[must_use]
pub fn body_digest(canonical_body: &str) -> String {
    blake3::hash(canonical_body.as_bytes()).to_hex().to_string()
}

/// [`fingerprint`] from a body's [`body_digest`] rather than its canonical text.
#[must_use]
pub fn fingerprint_with_digest(model: &Model, body_digest: Option<&str>, parents: &BTreeMap<ModelName, Fingerprint>) -> Fingerprint {
    // The same compact text as `payload(..).to_string()` (tested), written without building a
    // `Value` tree: this runs for every model on every plan.
    #[derive(serde::Serialize)]
    struct Payload<'a> {
        v: u32,
        name: String,
        kind: Value,
        columns: Vec<TypedColumn<'a>>,
        grain: &'a [String],
        body: Option<&'a str>,
        parents: Vec<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        statements: Option<Value>,
    }
    let mut parent_list: Vec<String> = parents.iter().map(|(n, fp)| format!("{n}={fp}")).collect();
    parent_list.sort_unstable();
    let p = Payload {
        v: FINGERPRINT_VERSION,
        name: model.name.to_string(),
        kind: model.kind_payload(),
        columns: model.schema.0.iter().map(|c| TypedColumn::new(&c.name, &c.ty)).collect(),
        grain: &model.grain,
        body: body_digest,
        parents: parent_list,
        statements: statements_payload(model),
    };
    // Serialised into one buffer, hashed in one call: serde_json writes many pieces of a few
    // bytes, and each `blake3::Hasher::update` call has a fixed cost well above a copy.
    // Serialising plain data into memory cannot fail.
    let mut text = Vec::with_capacity(512);
    let _ = serde_json::to_writer(&mut text, &p);
    Fingerprint(blake3::hash(&text).to_hex().to_string())
}

/// The JSON value that [`fingerprint`] hashes (its compact text), for `plan --explain` and
/// tests. `body_digest` is the [`body_digest`] of the canonical body (`None` for externals).
#[must_use]
pub fn payload(model: &Model, body_digest: Option<&str>, parents: &BTreeMap<ModelName, Fingerprint>) -> Value {
    let columns: Vec<Value> = model
        .schema
        .0
        .iter()
        .map(|c| match normalized_type(&c.ty) {
            (ty, true) => json!([c.name, ty, EXACT_TYPE]),
            (ty, false) => json!([c.name, ty]),
        })
        .collect();
    let mut parents: Vec<String> = parents.iter().map(|(n, fp)| format!("{n}={fp}")).collect();
    parents.sort_unstable();
    // `json!` keeps key order with serde_json's `preserve_order`; the order is part of the
    // payload, so it is spelled out here once.
    let mut v = json!({
        "v": FINGERPRINT_VERSION,
        "name": model.name.to_string(),
        "kind": model.kind_payload(),
        "columns": columns,
        "grain": model.grain,
        "body": body_digest,
        "parents": parents,
    });
    if let (Some(st), Value::Object(m)) = (statements_payload(model), &mut v) {
        m.insert("statements".into(), st);
    }
    v
}

/// The pre/post statements as the fingerprint hashes them: `{"pre": [canonical text…], "post":
/// […]}` ([`super::statements::canonical_text`] of each, rendered with placeholders), only when
/// the model declares them data-relevant (`statements_affect_data`) and has some. `None`
/// otherwise: the payload then has no `statements` key, so models without data-relevant
/// statements keep the fingerprints they always had.
#[must_use]
pub fn statements_payload(model: &Model) -> Option<Value> {
    let st = &model.statements;
    if !st.affect_data || st.is_empty() {
        return None;
    }
    let canon = |l: &[crate::core::Statement]| -> Vec<String> {
        l.iter().map(|s| super::statements::canonical_text(&s.sql.render(&crate::core::fragment::CanonicalResolver))).collect()
    };
    Some(json!({"pre": canon(&st.pre), "post": canon(&st.post)}))
}

/// A declared type as hashed and compared: lower-cased, with runs of whitespace collapsed to one
/// space and the ends trimmed, outside the parts whose exact text is part of the type — a quoted
/// part (`'…'`, an `ENUM` label; `"…"`, a quoted name, its doubled quotes included) and the
/// member names of a `STRUCT`, `ROW` or `UNION` (`Name` in `STRUCT(Name INTEGER)`), kept as
/// written. `ENUM('a', 'A')` is not `ENUM('A', 'a')` (the labels' order is the enum's: it decides
/// comparisons, `min`, `arg_min`), `ENUM('New  York')` not `ENUM('New York')`, and
/// `STRUCT(Name INTEGER)` not `STRUCT(name INTEGER)` (DuckDB keeps a member's case in what it
/// returns, `{"Name": 1}`), while `TIMESTAMP  WITH TIME ZONE` is `timestamp with time zone`.
/// A type without such parts normalises as it did before efmesh kept them ([`folded_type`]).
///
/// # Example
/// ```
/// use efmesh::sql::fingerprint::normalize_type;
/// assert_eq!(normalize_type("  DECIMAL(18,  3) "), "decimal(18, 3)");
/// assert_eq!(normalize_type("ENUM('New  York', 'a')"), "enum('New  York', 'a')");
/// assert_eq!(normalize_type("STRUCT(Name VARCHAR, \"Zip Code\" INT)[]"), "struct(Name varchar, \"Zip Code\" int)[]");
/// ```
#[must_use]
pub fn normalize_type(ty: &str) -> String {
    normalized_type(ty).0
}

/// [`normalize_type`], and whether the type has a part kept as written (a quoted part, a member
/// name): such a type is hashed with the mark `"exact"` ([`TypedColumn`]).
#[must_use]
pub fn normalized_type(ty: &str) -> (String, bool) {
    let mut out = String::with_capacity(ty.len());
    let mut exact = false;
    // Whitespace was skipped after some text: one space is due before the next token.
    let mut space = false;
    // Per open parenthesis: whether it lists members, each name first (`STRUCT(`, `ROW(`, `UNION(`).
    let mut members: Vec<bool> = Vec::new();
    // The next word is a member name (just after such a `(` or one of its `,`).
    let mut name_next = false;
    // Where in `out` the last word is, while nothing but whitespace followed it (`STRUCT (`).
    let mut last_word: Option<usize> = None;
    let mut chars = ty.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if c.is_whitespace() {
            space = !out.is_empty();
            continue;
        }
        if space {
            out.push(' ');
            space = false;
        }
        match c {
            '\'' | '"' => {
                // Up to the closing quote; a doubled quote is one inside.
                let mut end = ty.len();
                while let Some((j, d)) = chars.next() {
                    if d == c {
                        if chars.peek().is_some_and(|&(_, e)| e == c) {
                            chars.next();
                            continue;
                        }
                        end = j + d.len_utf8();
                        break;
                    }
                }
                out.push_str(&ty[i..end]);
                (exact, name_next, last_word) = (true, false, None);
            }
            '(' => {
                let listed = last_word.is_some_and(|from| matches!(out[from..].trim_end(), "struct" | "row" | "union"));
                members.push(listed);
                out.push('(');
                (name_next, last_word) = (listed, None);
            }
            ')' => {
                members.pop();
                out.push(')');
                (name_next, last_word) = (false, None);
            }
            ',' => {
                out.push(',');
                (name_next, last_word) = (members.last().copied().unwrap_or(false), None);
            }
            _ => {
                // A word: up to whitespace, a quote, a parenthesis or a comma.
                let mut end = i + c.len_utf8();
                while let Some(&(j, d)) = chars.peek() {
                    if d.is_whitespace() || matches!(d, '\'' | '"' | '(' | ')' | ',') {
                        break;
                    }
                    end = j + d.len_utf8();
                    chars.next();
                }
                let word = &ty[i..end];
                if name_next {
                    out.push_str(word);
                    (exact, name_next, last_word) = (true, false, None);
                } else {
                    last_word = Some(out.len());
                    if word.is_ascii() {
                        out.extend(word.chars().map(|c| c.to_ascii_lowercase()));
                    } else {
                        out.push_str(&word.to_lowercase());
                    }
                }
            }
        }
    }
    (out, exact)
}

/// A declared type as efmesh normalised it before it kept quoted parts and member names as
/// written: lower-cased throughout, whitespace runs collapsed, trimmed. What a snapshot recorded
/// then (its `schema` entries have no `"exact"` mark), so the plan compares a new type with such an
/// entry in this form: a label's case it cannot know from it.
#[must_use]
pub fn folded_type(ty: &str) -> String {
    ty.split_whitespace().map(str::to_lowercase).collect::<Vec<_>>().join(" ")
}

/// The mark a declared column's `[name, type]` carries, in the fingerprint payload and in the
/// model's metadata, when its type has a part kept as written ([`normalized_type`]): no efmesh
/// before that rule wrote it, so such a type's fingerprint is never one an earlier efmesh stored
/// for a spelling that differs in case (`ENUM('a')` then hashed as `enum('a')`, like
/// `ENUM('A')`), and a snapshot tells which rule recorded its types.
pub const EXACT_TYPE: &str = "exact";

/// A declared column as the fingerprint payload and the model's metadata hold it:
/// `[name, normalised type]`, or `[name, normalised type, "exact"]` ([`EXACT_TYPE`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(untagged)]
pub enum TypedColumn<'a> {
    /// A type without parts kept as written.
    Plain(&'a str, String),
    /// A type with some ([`EXACT_TYPE`]).
    Exact(&'a str, String, &'static str),
}

impl<'a> TypedColumn<'a> {
    /// Column `name` of declared type `ty`.
    #[must_use]
    pub fn new(name: &'a str, ty: &str) -> Self {
        match normalized_type(ty) {
            (ty, true) => TypedColumn::Exact(name, ty, EXACT_TYPE),
            (ty, false) => TypedColumn::Plain(name, ty),
        }
    }
}

/// The unquoted name of a model version's physical table (in schema `_efmesh`):
/// `<schema>__<table>__<64 hex fingerprint>`.
///
/// # Why two models never share a physical name
/// The prefix is unambiguous: a model's schema cannot contain `__` (see
/// [`ModelName::parse`]), so the first `__` ends the schema and the last `__` starts the
/// fingerprint, which is exactly 64 hex characters (hex has no `_`); `(schema, table, fp)` is
/// read back from the name, so distinct models or versions get distinct names. Independently,
/// the fingerprint hashes the model's name: even without the prefix, two different models with
/// equal fingerprints would be a blake3 collision.
///
/// Note: the name is 64 + 4 + len(schema) + len(table) bytes long, above Postgres's 63-byte
/// identifier limit; DuckDB has no such limit.
///
/// # Example
/// ```
/// use efmesh::core::ModelName;
/// use efmesh::sql::fingerprint::{physical_table, Fingerprint};
/// let fp = Fingerprint::parse(&"0".repeat(64))?;
/// let t = physical_table(&ModelName::parse("med.moves")?, &fp);
/// assert_eq!(t, format!("med__moves__{}", "0".repeat(64)));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[must_use]
pub fn physical_table(name: &ModelName, fp: &Fingerprint) -> String {
    format!("{}__{}__{}", name.schema(), name.table(), fp.as_str())
}

/// Hex digits of the fingerprint a shortened physical name keeps at least
/// ([`physical_table_within`]): 128 bits.
pub const SHORT_FINGERPRINT_HEX: usize = 32;

/// [`physical_table`] within an engine's identifier limit of `limit` bytes (Postgres: 63), or
/// as it is without one. A name over the limit is shortened deterministically: the model part
/// `<schema>__<table>` cut (at a character boundary) to leave room for `__` and at least
/// [`SHORT_FINGERPRINT_HEX`] hex digits of the fingerprint, then as many fingerprint digits as
/// fit. Two versions' names still differ unless their fingerprints share the first 128 bits (the
/// fingerprint hashes the model's name, so different models sharing a cut prefix differ there
/// too). The name is recorded with each snapshot, so the mapping never needs recomputing.
///
/// # Example
/// ```
/// use efmesh::core::ModelName;
/// use efmesh::sql::fingerprint::{physical_table_within, Fingerprint};
/// let fp = Fingerprint::parse(&"ab".repeat(32))?;
/// let name = ModelName::parse("med.moves")?;
/// let short = physical_table_within(&name, &fp, Some(63));
/// assert!(short.len() <= 63 && short.starts_with("med__moves__abab"));
/// assert_eq!(physical_table_within(&name, &fp, None), format!("med__moves__{}", "ab".repeat(32)));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[must_use]
pub fn physical_table_within(name: &ModelName, fp: &Fingerprint, limit: Option<usize>) -> String {
    let full = physical_table(name, fp);
    let Some(limit) = limit.filter(|l| full.len() > *l) else { return full };
    // Room for `<schema part>__<table part>`: both parts are kept (the janitor reads the shape
    // `<schema>__<table>__<hex>`), the table's up to 13 bytes when both must be cut.
    let room = limit.saturating_sub(2 + SHORT_FINGERPRINT_HEX + 2);
    let (schema, table) = (name.schema(), name.table());
    let (s_keep, t_keep) = if schema.len() + table.len() <= room {
        (schema.len(), table.len())
    } else {
        let t_keep = table.len().min(13.max(room.saturating_sub(schema.len())));
        (room.saturating_sub(t_keep).clamp(1, schema.len()), t_keep.max(1))
    };
    let cut = |s: &str, mut n: usize| {
        while !s.is_char_boundary(n) {
            n -= 1;
        }
        s[..n].to_string()
    };
    let prefix = format!("{}__{}", cut(schema, s_keep), cut(table, t_keep));
    let hex = limit.saturating_sub(2 + prefix.len()).min(fp.as_str().len());
    format!("{prefix}__{}", &fp.as_str()[..hex])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::{Column, Kind, Location, Schema};

    fn model(name: &str) -> Model {
        Model::new(
            ModelName::parse(name).unwrap(),
            Kind::Full,
            Schema(vec![Column { name: "id".into(), ty: "BIGINT".into() }]),
            None,
            Location { file: "m.lua".into(), line: 1 },
        )
    }

    #[test]
    fn shortened_physical_names_fit_the_limit_and_never_collide() {
        let mut seen = std::collections::BTreeSet::new();
        let long = "x".repeat(60);
        for i in 0..200 {
            // Long names sharing their first 40 bytes, short ones, long schemas.
            let names = [format!("s.{long}{i}"), format!("s.t{i}"), format!("{long}{i}.t"), format!("{long}{i}.{long}")];
            for n in names {
                let name = ModelName::parse(&n).unwrap();
                let fp = fingerprint(&model(&n), Some("d"), &BTreeMap::new());
                let short = physical_table_within(&name, &fp, Some(63));
                assert!(short.len() <= 63, "{short}");
                // The physical-name shape survives: `<schema>__<table>__<at least 32 hex>`.
                let (model_part, hex) = short.rsplit_once("__").unwrap();
                assert!(hex.len() >= SHORT_FINGERPRINT_HEX && model_part.split_once("__").is_some_and(|(s, t)| !s.is_empty() && !t.is_empty()), "{short}");
                assert!(short.ends_with(&fp.as_str()[..SHORT_FINGERPRINT_HEX]) || short.contains(&fp.as_str()[..SHORT_FINGERPRINT_HEX]), "{short}");
                assert!(seen.insert(short.clone()), "collision: {short}");
                // Deterministic.
                assert_eq!(short, physical_table_within(&name, &fp, Some(63)));
            }
        }
    }

    #[test]
    fn the_fast_path_hashes_exactly_the_payload_text() {
        let mut m = model("s.t");
        m.grain = vec!["id".into()];
        let mut parents = BTreeMap::new();
        parents.insert(ModelName::parse("a.b").unwrap(), Fingerprint("f".repeat(64)));
        let digest = body_digest("{\"x\":1}");
        let text = payload(&m, Some(&digest), &parents).to_string();
        assert_eq!(fingerprint_with_digest(&m, Some(&digest), &parents).as_str(), blake3::hash(text.as_bytes()).to_hex().as_str());
    }

    #[test]
    fn physical_names_of_different_models_never_collide() {
        // `a__b.c` is not a valid name (a schema cannot contain `__`), so prefixes never meet;
        // and the fingerprint hashes the model name, so identical bodies still differ.
        assert!(ModelName::parse("a__b.c").is_err());
        let (x, y) = (model("a.b__c"), model("a.b"));
        let body = Some("SELECT 1");
        let (fx, fy) = (fingerprint(&x, body, &BTreeMap::new()), fingerprint(&y, body, &BTreeMap::new()));
        assert_ne!(fx, fy);
        let (px, py) = (physical_table(&x.name, &fx), physical_table(&y.name, &fy));
        assert_ne!(px, py);
        assert!(px.starts_with("a__b__c__") && py.starts_with("a__b__"));
        // The fingerprint is always the fixed-length tail after the last `__`.
        assert_eq!(px.rsplit_once("__").unwrap().1, fx.as_str());
    }

    #[test]
    fn payload_keys_come_in_a_fixed_order() {
        let mut parents = BTreeMap::new();
        parents.insert(ModelName::parse("z.p").unwrap(), Fingerprint::from("f".repeat(64)));
        parents.insert(ModelName::parse("a.p").unwrap(), Fingerprint::from("e".repeat(64)));
        let p = payload(&model("s.t"), None, &parents);
        let keys: Vec<&str> = p.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys, ["v", "name", "kind", "columns", "grain", "body", "parents"]);
        assert_eq!(p["parents"][0], format!("a.p={}", "e".repeat(64)));
        assert_eq!(p["columns"], json!([["id", "bigint"]]));
    }

    #[test]
    fn declared_types_hash_modulo_case_and_whitespace() {
        assert_eq!(normalize_type("  TIMESTAMP   WITH\tTIME ZONE "), "timestamp with time zone");
        assert_eq!(normalize_type("DECIMAL(18, 3)"), "decimal(18, 3)");
        assert_eq!(normalize_type("MAP(VARCHAR,  INTEGER[])"), "map(varchar, integer[])");
    }

    #[test]
    fn types_without_kept_parts_normalise_as_before() {
        // The rule before quoted parts and member names were kept (`folded_type`): a type
        // without them keeps its text, so its fingerprint does not change.
        let rule = |ty: &str| ty.split_whitespace().map(str::to_lowercase).collect::<Vec<_>>().join(" ");
        for ty in [
            "",
            " ",
            "BIGINT",
            "  TIMESTAMP   WITH\tTIME ZONE ",
            "DECIMAL(18, 3)",
            "DECIMAL ( 18 ,3 )",
            "MAP(VARCHAR, INTEGER[])",
            "\u{85}INT\u{a0}EGER Ä",
            "Mood",
        ] {
            assert_eq!(normalized_type(ty), (rule(ty), false), "{ty:?}");
            assert_eq!(folded_type(ty), rule(ty), "{ty:?}");
        }
        // A struct's lower-case member names read as they did, but the type is marked.
        assert_eq!(normalized_type("\u{b}Struct(a INT,\u{c}b VARCHAR)\r\n"), ("struct(a int, b varchar)".to_string(), true));
    }

    #[test]
    fn quoted_parts_and_member_names_keep_their_text() {
        // An enum's labels (their order is the enum's: `ENUM('a', 'A')` sorts `'a'` first), a
        // label's spaces, a quoted member name, an unquoted one (DuckDB returns it as written):
        // each pair is two types.
        for (a, b) in [
            ("ENUM('A', 'a')", "ENUM('a', 'A')"),
            ("ENUM('New  York')", "ENUM('New York')"),
            ("STRUCT(\"Name\" VARCHAR)", "STRUCT(\"name\" VARCHAR)"),
            ("STRUCT(Name VARCHAR)", "STRUCT(name VARCHAR)"),
            ("STRUCT(a STRUCT(B INT))", "STRUCT(a STRUCT(b INT))"),
            ("ROW(Id INT)", "ROW(id INT)"),
            ("UNION(Num INT, s VARCHAR)", "UNION(num INT, s VARCHAR)"),
            ("MAP(VARCHAR, STRUCT(X INT))[]", "MAP(VARCHAR, STRUCT(x INT))[]"),
            ("ENUM('it''S')", "ENUM('it''s')"),
        ] {
            assert_ne!(normalize_type(a), normalize_type(b), "{a} / {b}");
            assert!(normalized_type(a).1 && normalized_type(b).1, "{a} / {b}");
        }
        // Outside them, case and runs of whitespace are still formatting.
        for (a, b) in [
            ("ENUM('A',  'a')", "enum('A', 'a')"),
            ("STRUCT(Name VARCHAR,  \"Zip Code\" INT)[]", "struct(Name   varchar, \"Zip Code\" int)[]"),
            ("ENUM('it''S', 'b')", "Enum('it''S',\t'b')"),
        ] {
            assert_eq!(normalize_type(a), normalize_type(b), "{a} / {b}");
        }
        assert_eq!(normalize_type("  Enum( 'A' ,  'a b' ) "), "enum( 'A' , 'a b' )");
        assert_eq!(normalize_type("STRUCT (Name INT, \"x\"\"Y\" INT)"), "struct (Name int, \"x\"\"Y\" int)");
        // A quote left open keeps the rest as written.
        assert_eq!(normalize_type("ENUM('A', 'B"), "enum('A', 'B");
        // Comparisons with what the engine describes read families, not this text: a declared
        // enum still matches DuckDB's `DESCRIBE` of it.
        assert!(crate::core::schema::same_type("ENUM('A','a')", "ENUM('A', 'a')"));
    }

    #[test]
    fn a_type_with_kept_parts_is_marked_in_the_payload() {
        let typed = |ty: &str| {
            let mut m = model("s.t");
            m.schema.0.push(Column { name: "lvl".into(), ty: ty.into() });
            m
        };
        let (a, b) = (typed("ENUM('A', 'a')"), typed("ENUM('a', 'A')"));
        assert_ne!(fingerprint(&a, Some("d"), &BTreeMap::new()), fingerprint(&b, Some("d"), &BTreeMap::new()));
        let p = payload(&a, None, &BTreeMap::new());
        assert_eq!(p["columns"], json!([["id", "bigint"], ["lvl", "enum('A', 'a')", "exact"]]));
        // The fast path writes the same entries.
        assert_eq!(fingerprint_with_digest(&a, None, &BTreeMap::new()).as_str(), blake3::hash(p.to_string().as_bytes()).to_hex().as_str());
        // An earlier efmesh hashed `ENUM('a', 'a')` and `ENUM('A', 'a')` alike, as
        // `[lvl, "enum('a', 'a')"]`: neither is that payload now.
        let old_payload = json!([["id", "bigint"], ["lvl", "enum('a', 'a')"]]);
        assert_ne!(payload(&typed("ENUM('a', 'a')"), None, &BTreeMap::new())["columns"], old_payload);
        assert_eq!(serde_json::to_value(TypedColumn::new("x", "VARCHAR")).unwrap(), json!(["x", "varchar"]));
    }

    #[test]
    fn fingerprints_parse_strictly_and_serialise_as_strings() {
        let hex = "0123456789abcdef".repeat(4);
        let fp: Fingerprint = hex.parse().unwrap();
        assert_eq!((fp.as_str(), fp.short(), fp.to_string()), (hex.as_str(), "0123456789ab", hex.clone()));
        assert!(Fingerprint::parse(&hex.to_uppercase()).is_err());
        assert!(Fingerprint::parse(&hex[1..]).is_err());
        assert!(Fingerprint::parse(&format!("{}g", &hex[1..])).is_err());
        let json = serde_json::to_string(&fp).unwrap();
        assert_eq!(json, format!("\"{hex}\""));
        assert_eq!(serde_json::from_str::<Fingerprint>(&json).unwrap(), fp);
        assert!(serde_json::from_str::<Fingerprint>("\"abc\"").is_err());
    }
}
