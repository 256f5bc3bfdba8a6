//! Pre/post statements ([`crate::core::Statements`]): the load-time parse check in the engine's
//! grammar, and the canonical text the fingerprint hashes when they are declared data-relevant.

use crate::core::fragment::skip_literal_or_comment;
use sqlparser::dialect::DuckDbDialect;
use sqlparser::parser::Parser;

/// The grammar a statement is checked with, the engine's (the one lineage reads bodies in):
/// `Embedded` is sqlparser's DuckDB dialect (the embedded engine's own parser needs a
/// connection, which a load does not open), `Postgres` is libpg_query, Postgres's own parser.
pub use crate::sql::lineage::Grammar;

/// Renders statements for [`check`]: bounds as the literals of a sample interval (the engine
/// parses literals; a placeholder such as `$start` is no Postgres syntax), `@this` as its
/// placeholder, references as logical names.
pub struct CheckResolver;

impl crate::core::Resolver for CheckResolver {
    fn relation(&self, model: &crate::core::ModelName) -> String {
        model.to_string()
    }
    fn start(&self) -> String {
        crate::core::interval::to_sql_literal(0)
    }
    fn end(&self) -> String {
        crate::core::interval::to_sql_literal(86_400_000)
    }
    fn bound(&self, b: crate::core::fragment::Bound) -> String {
        b.literal(crate::core::interval::Interval::new(0, 86_400_000))
    }
}

/// Checks that `sql` (a statement rendered with literal bounds) is exactly one statement of
/// `grammar`, and one the engine can run inside the write's transaction (where pre/post
/// statements run): not transaction control, not a statement the engine refuses in a
/// transaction block ([`outside_transaction`]).
///
/// # Errors
/// The parser's message, how many statements the text holds, or why the statement cannot run
/// in the write's transaction.
pub fn check(sql: &str, grammar: Grammar) -> Result<(), String> {
    // Transaction control and DuckDB's CHECKPOINT are found by their first words: sqlparser
    // does not parse `CHECKPOINT`, and a parse error would hide the reason.
    if let Some(why) = lexical_refusal(sql, grammar) {
        return Err(why);
    }
    let n = match grammar {
        Grammar::Embedded => Parser::parse_sql(&DuckDbDialect {}, sql).map_err(|e| crate::sql::SqlError::from_parser(e, sql).to_string())?.len(),
        Grammar::Postgres => {
            let parsed = pg_query::parse(sql, 0).map_err(|e| format!("Postgres cannot parse SQL: {}", e.to_string().trim_end_matches('.')))?;
            for raw in &parsed.protobuf.stmts {
                if let Some(what) = raw.stmt.as_ref().and_then(|n| n.node.as_ref()).and_then(outside_transaction) {
                    return Err(refusal(what, "Postgres"));
                }
            }
            parsed.protobuf.stmts.len()
        }
    };
    match n {
        1 => Ok(()),
        0 => Err("the statement is empty".into()),
        n => Err(format!("the text holds {n} statements; give each its own entry")),
    }
}

/// The message for a statement (`what`) the engine cannot run inside a transaction block.
fn refusal(what: &str, engine: &str) -> String {
    format!(
        "`{what}` cannot run inside a transaction block ({engine}), and pre/post statements run inside the write's transaction (so a failed batch rolls them back); run it outside efmesh, e.g. after `efmesh run`"
    )
}

/// Refusals found by a statement's first words: transaction control on either engine (efmesh
/// begins and commits the write's transaction: a `COMMIT` would commit half a batch, a
/// `ROLLBACK` undo it while its intervals are recorded as done), and DuckDB's `CHECKPOINT` /
/// `FORCE CHECKPOINT`, which DuckDB refuses in a transaction that has written or started.
fn lexical_refusal(sql: &str, grammar: Grammar) -> Option<String> {
    let words = first_words(sql, 2);
    let first = words.first().map(String::as_str)?;
    let second = words.get(1).map_or("", String::as_str);
    match (first, second) {
        ("BEGIN" | "START" | "COMMIT" | "END" | "ROLLBACK" | "ABORT" | "SAVEPOINT" | "RELEASE", _) | ("PREPARE", "TRANSACTION") => Some(format!(
            "`{first}` controls transactions, and pre/post statements run inside the write's transaction, which efmesh begins and commits (a `COMMIT` would commit half a batch, a `ROLLBACK` undo a write whose intervals are then recorded as done)"
        )),
        ("CHECKPOINT", _) if grammar == Grammar::Embedded => Some(refusal("CHECKPOINT", "DuckDB: \"the current transaction has transaction local changes\"")),
        ("FORCE", "CHECKPOINT") if grammar == Grammar::Embedded => Some(refusal("FORCE CHECKPOINT", "DuckDB")),
        _ => None,
    }
}

/// Up to `n` first words of `sql` (after whitespace and comments), upper-cased.
fn first_words(sql: &str, n: usize) -> Vec<String> {
    let b = sql.as_bytes();
    let mut words = Vec::new();
    let mut i = 0;
    while i < b.len() && words.len() < n {
        if b[i].is_ascii_whitespace() {
            i += 1;
        } else if b[i..].starts_with(b"--") || b[i..].starts_with(b"/*") {
            i = skip_literal_or_comment(b, i).unwrap_or(b.len());
        } else if b[i].is_ascii_alphabetic() {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            words.push(sql[start..i].to_ascii_uppercase());
        } else {
            break;
        }
    }
    words
}

/// True when `sql` (a pre/post statement, rendered) may change the session that runs it beyond
/// its transaction — a setting, a temporary object, an attached database, a loaded extension —
/// or may do something this cannot tell. Such a change reaches every later write on the same
/// connection, so an apply or run with several connections (`--jobs`) builds one model at a time
/// when a model has one (as a sequential apply does, where it reaches every model after it).
///
/// False only for statements known to act on the database's objects alone, by their first words:
/// `INSERT`, `UPDATE`, `DELETE`, `MERGE`, `TRUNCATE`, `COPY`, `ANALYZE`, `VACUUM`, `REINDEX`,
/// `CLUSTER`, `REFRESH`, `COMMENT`, `GRANT`, `REVOKE`, `CHECKPOINT`; `CREATE`, `ALTER` and `DROP`
/// of anything but a temporary object or a secret (`TEMP`, `TEMPORARY` or `SECRET` before the
/// kind of object: DuckDB's secrets live in the session's database instance) and naming nothing
/// in the session's temporary schema (`temp.stage`, `temp.main.stage` on DuckDB, `pg_temp.stage`
/// on Postgres); and on Postgres `SET LOCAL`, `SET TRANSACTION` and `SET CONSTRAINTS`, which end
/// with the transaction. Never for a text calling `set_config` (Postgres's function form of
/// `SET`) or `setseed` (which seeds the session's `random()`). Everything else counts: `SET`,
/// `RESET`, `PRAGMA`, `USE`, `ATTACH`, `DETACH`, `LOAD`, `INSTALL`, `CALL`, `DO`, `EXECUTE`,
/// `SELECT`, `WITH`, …
pub fn may_change_session(sql: &str, grammar: Grammar) -> bool {
    let canonical = canonical_text(sql);
    if canonical.contains("set_config") || canonical.contains("setseed") {
        return true;
    }
    let words = first_words(sql, 8);
    let Some(first) = words.first() else { return true };
    match first.as_str() {
        "INSERT" | "UPDATE" | "DELETE" | "MERGE" | "TRUNCATE" | "COPY" | "ANALYZE" | "VACUUM" | "REINDEX" | "CLUSTER" | "REFRESH" | "COMMENT" | "GRANT"
        | "REVOKE" | "CHECKPOINT" => false,
        "SET" => !(grammar == Grammar::Postgres && words.get(1).is_some_and(|w| matches!(w.as_str(), "LOCAL" | "TRANSACTION" | "CONSTRAINTS"))),
        "CREATE" | "ALTER" | "DROP" if names_temp_schema(sql) => true,
        "CREATE" | "ALTER" | "DROP" => {
            for w in &words[1..] {
                match w.as_str() {
                    "TEMP" | "TEMPORARY" | "SECRET" => return true,
                    "TABLE" | "VIEW" | "INDEX" | "SCHEMA" | "SEQUENCE" | "MACRO" | "FUNCTION" | "TYPE" => return false,
                    _ => {}
                }
            }
            false
        }
        _ => true,
    }
}

/// True when `sql` names something in the session's temporary schema: a name whose first part
/// (outside string literals and comments, quoted or not, in any letter case) is `temp` (DuckDB's
/// temporary catalog: `temp.stage`, `temp.main.stage`), `pg_temp` or `pg_temp_<n>` (Postgres's),
/// followed by a `.`. `CREATE TABLE temp.stage …` makes a temporary table as `CREATE TEMP TABLE
/// stage …` does, without the `TEMP` keyword [`may_change_session`] otherwise goes by. A name
/// read in the statement counts too (conservatively: the statement then only runs with one
/// connection).
fn names_temp_schema(sql: &str) -> bool {
    let b = sql.as_bytes();
    let is_temp = |name: &str| {
        let name = name.to_ascii_lowercase();
        name == "temp" || name == "pg_temp" || name.strip_prefix("pg_temp_").is_some_and(|n| !n.is_empty() && n.bytes().all(|c| c.is_ascii_digit()))
    };
    // The byte after `end` past white space is a `.`: `name` is a qualifier.
    let qualifies = |end: usize| b[end..].iter().find(|c| !c.is_ascii_whitespace()) == Some(&b'.');
    // The last byte before the current token, past white space, was a `.`: not a first part.
    let mut after_dot = false;
    let mut i = 0;
    while i < b.len() {
        if let Some(end) = skip_literal_or_comment(b, i) {
            let piece = &sql[i..end];
            if let Some(quoted) = piece.strip_prefix('"') {
                if !after_dot && quoted.strip_suffix('"').is_some_and(is_temp) && qualifies(end) {
                    return true;
                }
                after_dot = false;
            } else if !piece.starts_with("--") && !piece.starts_with("/*") {
                after_dot = false;
            }
            i = end;
        } else if b[i].is_ascii_alphabetic() || b[i] == b'_' {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b'$') {
                i += 1;
            }
            if !after_dot && is_temp(&sql[start..i]) && qualifies(i) {
                return true;
            }
            after_dot = false;
        } else {
            if !b[i].is_ascii_whitespace() {
                after_dot = b[i] == b'.';
            }
            i += 1;
        }
    }
    false
}

/// What Postgres refuses inside a transaction block (`PreventInTransactionBlock`), by its name,
/// or `None`: `VACUUM`, `CREATE INDEX CONCURRENTLY`, `DROP INDEX CONCURRENTLY`,
/// `REINDEX … CONCURRENTLY`, `REINDEX SYSTEM`/`DATABASE`, `CLUSTER` without a table,
/// `CREATE`/`DROP DATABASE`, `ALTER DATABASE … SET TABLESPACE`, `CREATE`/`DROP TABLESPACE`,
/// `ALTER SYSTEM`, `ALTER TABLE … DETACH PARTITION … CONCURRENTLY`. (`ANALYZE`, `REINDEX` of a
/// table or index, `CHECKPOINT` and `REFRESH MATERIALIZED VIEW CONCURRENTLY` run in one.)
fn outside_transaction(node: &pg_query::NodeEnum) -> Option<&'static str> {
    use pg_query::NodeEnum as N;
    use pg_query::protobuf::{AlterTableType, ReindexObjectType};
    let def_named =
        |options: &[pg_query::Node], name: &str| options.iter().any(|o| matches!(&o.node, Some(N::DefElem(d)) if d.defname.eq_ignore_ascii_case(name)));
    match node {
        N::VacuumStmt(v) if v.is_vacuumcmd => Some("VACUUM"),
        N::IndexStmt(i) if i.concurrent => Some("CREATE INDEX CONCURRENTLY"),
        N::DropStmt(d) if d.concurrent => Some("DROP INDEX CONCURRENTLY"),
        N::ReindexStmt(r) if def_named(&r.params, "concurrently") => Some("REINDEX … CONCURRENTLY"),
        N::ReindexStmt(r) if r.kind == ReindexObjectType::ReindexObjectSystem as i32 => Some("REINDEX SYSTEM"),
        N::ReindexStmt(r) if r.kind == ReindexObjectType::ReindexObjectDatabase as i32 => Some("REINDEX DATABASE"),
        N::ClusterStmt(c) if c.relation.is_none() => Some("CLUSTER (without a table)"),
        N::CreatedbStmt(_) => Some("CREATE DATABASE"),
        N::DropdbStmt(_) => Some("DROP DATABASE"),
        N::AlterDatabaseStmt(a) if def_named(&a.options, "tablespace") => Some("ALTER DATABASE … SET TABLESPACE"),
        N::CreateTableSpaceStmt(_) => Some("CREATE TABLESPACE"),
        N::DropTableSpaceStmt(_) => Some("DROP TABLESPACE"),
        N::AlterSystemStmt(_) => Some("ALTER SYSTEM"),
        N::AlterTableStmt(a)
            if a.cmds.iter().any(|c| {
                matches!(&c.node, Some(N::AlterTableCmd(c)) if c.subtype == AlterTableType::AtDetachPartition as i32
                    && matches!(c.def.as_deref().and_then(|d| d.node.as_ref()), Some(N::PartitionCmd(p)) if p.concurrent))
            }) =>
        {
            Some("ALTER TABLE … DETACH PARTITION … CONCURRENTLY")
        }
        _ => None,
    }
}

/// The canonical text of a statement (rendered with placeholders for the bounds): comments
/// dropped, whitespace runs collapsed to one space (none next to punctuation), everything outside
/// string literals and quoted identifiers lower-cased, a trailing `;` dropped. So formatting,
/// comments and keyword case never change it; anything else does. A lexical form, not a parse
/// tree: it does not depend on a grammar or a parser version.
///
/// ```
/// use efmesh::sql::statements::canonical_text;
/// assert_eq!(canonical_text("CREATE  INDEX i -- why\n ON t ( a );"), canonical_text("create index i on t(a)"));
/// assert_ne!(canonical_text("SET x = 'A'"), canonical_text("SET x = 'a'"));
/// ```
pub fn canonical_text(sql: &str) -> String {
    let b = sql.as_bytes();
    let mut out = String::with_capacity(sql.len());
    let mut space = false;
    let mut i = 0;
    let punct = |c: char| !(c.is_alphanumeric() || c == '_' || c == '\'' || c == '"' || c == '$' || c == '@');
    while i < b.len() {
        if let Some(end) = skip_literal_or_comment(b, i) {
            let piece = &sql[i..end];
            if piece.starts_with("--") || piece.starts_with("/*") {
                space = true;
            } else {
                if space && out.chars().last().is_some_and(|c| !punct(c)) {
                    out.push(' ');
                }
                space = false;
                out.push_str(piece);
            }
            i = end;
            continue;
        }
        let c = sql[i..].chars().next().unwrap_or(' ');
        if c.is_whitespace() {
            space = true;
        } else {
            if space && !punct(c) && out.chars().last().is_some_and(|l| !punct(l)) {
                out.push(' ');
            }
            space = false;
            out.extend(c.to_lowercase());
        }
        i += c.len_utf8();
    }
    out.trim_end_matches(';').trim_end().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_engines_statements_parse() {
        for sql in [
            "SET threads = 2",
            "RESET threads",
            "CREATE INDEX IF NOT EXISTS i ON s.t (a)",
            "ANALYZE s.t",
            "INSERT INTO log VALUES ('x', TIMESTAMP '2026-01-01 00:00:00')",
            "DELETE FROM log WHERE d < DATE '2026-01-01'",
            "CREATE TABLE IF NOT EXISTS log (a int)",
        ] {
            check(sql, Grammar::Embedded).unwrap_or_else(|e| panic!("{sql}: {e}"));
            check(sql, Grammar::Postgres).unwrap_or_else(|e| panic!("{sql}: {e}"));
        }
        assert!(check("CREATE INDEKS i ON t (a)", Grammar::Embedded).is_err());
        assert!(check("CREATE INDEKS i ON t (a)", Grammar::Postgres).is_err());
        assert!(check("SET a = 1; SET b = 2", Grammar::Embedded).unwrap_err().contains("2 statements"));
        assert!(check("SET a = 1; SET b = 2", Grammar::Postgres).unwrap_err().contains("2 statements"));
    }

    #[test]
    fn only_statements_known_to_leave_the_session_alone_are_harmless() {
        for harmless in [
            "INSERT INTO ops.log VALUES ('a')",
            "DELETE FROM ops.log WHERE m = 'a'",
            "/* efmesh: pre-statement 1 of model `s.a` (models/a.sql:4) */\nCREATE SCHEMA IF NOT EXISTS ops",
            "CREATE TABLE IF NOT EXISTS ops.log (m varchar)",
            "CREATE OR REPLACE VIEW v AS SELECT 1",
            "CREATE INDEX IF NOT EXISTS i ON s.t (a)",
            "DROP TABLE IF EXISTS temp_log",
            "ALTER TABLE s.t ADD COLUMN b int",
            "ANALYZE s.t",
            "COMMENT ON TABLE s.t IS 'x'",
        ] {
            assert!(!may_change_session(harmless, Grammar::Embedded), "{harmless}");
            assert!(!may_change_session(harmless, Grammar::Postgres), "{harmless}");
        }
        for changing in [
            "SET TimeZone = 'America/New_York'",
            "set integer_division = true",
            "RESET threads",
            "PRAGMA enable_profiling",
            "USE other",
            "ATTACH 'x.duckdb' AS x",
            "LOAD spatial",
            "CALL pragma_version()",
            "SELECT set_config('TimeZone', 'UTC', false)",
            "INSERT INTO log SELECT set_config('TimeZone', 'UTC', false)",
            "CREATE TEMP TABLE stage AS SELECT 1",
            "CREATE OR REPLACE TEMPORARY MACRO m(x) AS x",
            "CREATE SECRET (TYPE s3, KEY_ID 'k')",
            "",
        ] {
            assert!(may_change_session(changing, Grammar::Embedded), "{changing}");
        }
        // An object of the session's temporary schema, whatever the kind word before it, and
        // `setseed` (the session's `random()` seed) anywhere in a statement.
        for changing in [
            "CREATE TABLE temp.stage AS SELECT 1",
            "CREATE OR REPLACE VIEW temp.v AS SELECT 1",
            "create table if not exists TEMP . stage (a int)",
            "CREATE TABLE \"temp\".stage (a int)",
            "CREATE TABLE temp.main.stage (a int)",
            "DROP TABLE IF EXISTS temp.stage",
            "ALTER TABLE temp.stage ADD COLUMN b int",
            "CREATE INDEX i ON temp.stage (a)",
            "CREATE TABLE pg_temp.stage (a int)",
            "CREATE VIEW pg_temp_3.v AS SELECT 1",
            "DROP VIEW /* why */ pg_temp.v",
            "SELECT setseed(0.5)",
            "INSERT INTO ops.log SELECT setseed(0.1), 'x'",
            "INSERT INTO ops.log SELECT 1 FROM (SELECT SETSEED (0.2)) s",
        ] {
            assert!(may_change_session(changing, Grammar::Embedded), "{changing}");
            assert!(may_change_session(changing, Grammar::Postgres), "{changing}");
        }
        // `temp` as a table name, a later part of a name, a prefix of a word or text is no
        // temporary schema.
        for harmless in [
            "CREATE TABLE ops.temp (a int)",
            "CREATE TABLE temp (a int)",
            "CREATE TABLE ops.temp_stage AS SELECT 'temp.x' AS a",
            "DROP TABLE IF EXISTS temporal.stage",
            "CREATE VIEW ops.v AS SELECT t.a FROM ops.t AS t -- temp.stage\n",
            "CREATE TABLE db.temp.stage (a int)",
        ] {
            assert!(!may_change_session(harmless, Grammar::Embedded), "{harmless}");
            assert!(!may_change_session(harmless, Grammar::Postgres), "{harmless}");
        }
        // On Postgres a setting made for the transaction ends with it.
        assert!(!may_change_session("SET LOCAL work_mem = '64MB'", Grammar::Postgres));
        assert!(may_change_session("SET LOCAL work_mem = '64MB'", Grammar::Embedded));
        assert!(may_change_session("SET work_mem = '64MB'", Grammar::Postgres));
    }

    #[test]
    fn canonical_text_ignores_formatting_only() {
        assert_eq!(canonical_text("INSERT INTO log\n  VALUES ( 'A b' ) ;"), "insert into log values('A b')");
        assert_eq!(canonical_text("SELECT \"Mixed\"  /* c */ FROM t"), "select \"Mixed\" from t");
        assert_ne!(canonical_text("ANALYZE t1"), canonical_text("ANALYZE t2"));
    }
}
