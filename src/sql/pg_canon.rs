//! Canonical SQL for Postgres: the Postgres server's own grammar (libpg_query, through the
//! `pg_query` crate), its raw parse tree as compact JSON with every location field removed.
//!
//! What is normalised comes from the parser itself: keyword case, whitespace, comments, a
//! trailing `;`, the case of unquoted identifiers (folded to lower case as Postgres folds them,
//! so `Amount`, `amount` and `"amount"` are one column, `"Amount"` another), redundant
//! parentheses, optional `AS`, `INNER`/`OUTER`, `!=` (read as `<>`), and `x::t` against
//! `CAST(x AS t)`. Everything the parser keeps (constants, operators, clauses, their order) is
//! meaning and changes the text. Byte offsets (`location`, `*_location`, `stmt_len`, the list
//! bounds `list_start`/`list_end` and `rexpr_list_start`/`rexpr_list_end`: every `ParseLoc` of
//! the Postgres tree) change with formatting and are removed at every depth.
//!
//! Bounds rendered by [`CanonicalResolver`](crate::core::fragment::CanonicalResolver) (`$start`,
//! `$end`) are parameters `$1` and `$2` for the parser (outside strings, quoted identifiers and
//! comments).

use super::canon::{CanonSource, Canonical, SqlError};
use serde_json::Value;

/// The canonical form of a Postgres query body.
///
/// `sql` must hold exactly one query: `SELECT`, `WITH … SELECT`, `VALUES`, or a set operation of
/// them (never `SELECT … INTO`, which creates a table); one trailing `;` is fine.
///
/// # Errors
/// [`SqlError::Postgres`] when the Postgres grammar rejects the text; [`SqlError::NotAQuery`]
/// when it is empty, holds several statements, or a statement that is not a query.
///
/// # Example
/// ```
/// use efmesh::sql::pg_canon::canonicalize;
/// let a = canonicalize("SELECT \"id\", amount::float8 AS amt FROM raw.orders o -- note")?;
/// let b = canonicalize("select ID, cast(amount as float8) amt\nfrom raw.orders as o;")?;
/// assert_eq!(a, b);
/// assert_ne!(a, canonicalize("SELECT id, amount::float8 AS amt FROM raw.orders o WHERE id > 1")?);
/// assert!(canonicalize("DELETE FROM raw.orders").is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn canonicalize(sql: &str) -> Result<Canonical, SqlError> {
    let text = with_bound_parameters(sql)?;
    let parsed = pg_query::parse(&text, 0).map_err(|e| {
        let message = parse_message(&e);
        SqlError::Postgres { line: error_line(&text, &message), message }
    })?;
    let stmts = &parsed.protobuf.stmts;
    match stmts.len() {
        1 => {}
        0 => return Err(SqlError::NotAQuery { found: "no statement".into() }),
        n => return Err(SqlError::NotAQuery { found: format!("{n} statements") }),
    }
    let Some(node) = stmts[0].stmt.as_ref() else {
        return Err(SqlError::NotAQuery { found: "no statement".into() });
    };
    match &node.node {
        Some(pg_query::NodeEnum::SelectStmt(s)) if s.into_clause.is_none() => {}
        Some(pg_query::NodeEnum::SelectStmt(_)) => return Err(SqlError::NotAQuery { found: "a `SELECT … INTO` statement (it creates a table)".into() }),
        Some(other) => return Err(SqlError::NotAQuery { found: format!("a `{}` statement", statement_name(other)) }),
        None => return Err(SqlError::NotAQuery { found: "no statement".into() }),
    }
    let mut tree = serde_json::to_value(node).map_err(|e| SqlError::Postgres { message: format!("cannot serialise the parse tree: {e}"), line: None })?;
    strip_locations(&mut tree);
    Ok(Canonical { text: tree.to_string(), source: CanonSource::PgQuery })
}

/// libpg_query's message, without a trailing period.
fn parse_message(e: &pg_query::Error) -> String {
    let text = match e {
        pg_query::Error::Parse(m) => m.clone(),
        other => other.to_string(),
    };
    text.trim_end_matches('.').to_string()
}

/// The 1-based line of `text` holding its byte `offset`.
fn line_of(text: &str, offset: usize) -> u64 {
    let before = text.get(..offset).unwrap_or(text);
    before.matches('\n').count() as u64 + 1
}

/// The scanner tokens Postgres's parser reads with one token of look-ahead (`NOT IN`, `NULLS
/// FIRST`, `WITH TIME`, `WITHOUT TIME`, `FORMAT JSON`, `U&"…" UESCAPE '…'`): a prefix of the
/// text ending at one of them may be read as another token than in the whole text.
const LOOK_AHEAD: [pg_query::protobuf::Token; 8] = [
    pg_query::protobuf::Token::Not,
    pg_query::protobuf::Token::NullsP,
    pg_query::protobuf::Token::With,
    pg_query::protobuf::Token::Without,
    pg_query::protobuf::Token::Format,
    pg_query::protobuf::Token::Uident,
    pg_query::protobuf::Token::Usconst,
    pg_query::protobuf::Token::Uescape,
];

/// The token text of a libpg_query message `… at or near "X"` (X as the text spells it).
fn near_text(message: &str) -> Option<&str> {
    message.split_once(" at or near \"")?.1.strip_suffix('"')
}

/// The 1-based line of `text` where libpg_query stopped with `message` (the `pg_query` crate
/// drops libpg_query's error cursor, so it is found from the scanner and the parser itself).
///
/// - `… at end of input`: the line of the last token (comments are not tokens).
/// - `… at or near "X"`: the error is at a token whose text is X (compared ignoring ASCII
///   case). When exactly one token of the text is X, its line, without parsing anything.
///   Otherwise the parser decides between the X tokens. A prefix of the text ending at a token
///   Postgres does not read with look-ahead ([`LOOK_AHEAD`]; or the last token) is read as the
///   whole text reads it, so it fails "at or near" something exactly when it reaches the
///   error token, and then with `message` itself. A binary search over the X tokens (a few
///   parses) picks such a prefix end; it is kept only when verified: the prefix up to it fails
///   with `message`, the one up to the previous such end does not, and exactly one X token
///   lies between the two. Prefixes ending at a look-ahead token are never asked: they do not
///   fail monotonically (`x NOT` fails where `x NOT IN (1)` parses), which once gave the line
///   of an earlier `NOT`.
///
/// `None` — no line rather than a wrong one — for any other message, a text that cannot be
/// scanned, and an error token that cannot be verified (two X tokens with only look-ahead
/// tokens between them).
fn error_line(text: &str, message: &str) -> Option<u64> {
    use pg_query::protobuf::{ScanToken, Token};
    let comments = [Token::SqlComment as i32, Token::CComment as i32];
    let tokens: Vec<ScanToken> = pg_query::scan_tokens(text).ok()?.into_iter().filter(|t| !comments.contains(&t.token)).collect();
    let line_at = |i: usize| -> Option<u64> { Some(line_of(text, usize::try_from(tokens.get(i)?.start).ok()?)) };
    if message.contains("at end of input") {
        return line_at(tokens.len().checked_sub(1)?);
    }
    let near = near_text(message)?;
    let is_near = |t: &ScanToken| {
        let (Ok(start), Ok(end)) = (usize::try_from(t.start), usize::try_from(t.end)) else { return false };
        text.get(start..end).is_some_and(|s| s.eq_ignore_ascii_case(near))
    };
    let candidates: Vec<usize> = (0..tokens.len()).filter(|&i| is_near(&tokens[i])).collect();
    if let [only] = candidates.as_slice() {
        return line_at(*only);
    }
    // The token indexes a prefix may end at: read as in the whole text.
    let ends: Vec<usize> = (0..tokens.len()).filter(|&i| i + 1 == tokens.len() || !LOOK_AHEAD.iter().any(|&k| k as i32 == tokens[i].token)).collect();
    // The position in `ends` of the first end at or after token `i`.
    let end_from = |i: usize| ends.partition_point(|&e| e < i);
    // The message of the prefix ending at `ends[j]` when it fails at or near a token.
    let failure = |j: usize| -> Option<String> {
        let end = usize::try_from(tokens.get(*ends.get(j)?)?.end).ok()?;
        match pg_query::parse(text.get(..end)?, 0) {
            Err(e) => Some(parse_message(&e)).filter(|m| near_text(m).is_some()),
            Ok(_) => None,
        }
    };
    let (mut low, mut high) = (0, candidates.len());
    while low < high {
        let mid = low + (high - low) / 2;
        if failure(end_from(candidates[mid])).is_some() {
            high = mid;
        } else {
            low = mid + 1;
        }
    }
    let j = end_from(*candidates.get(low)?);
    let verified = failure(j).as_deref() == Some(message) && (j == 0 || failure(j - 1).is_none());
    if !verified {
        return None;
    }
    let after = if j == 0 { 0 } else { ends[j - 1] + 1 };
    let last = *ends.get(j)?;
    let mut between = candidates.iter().copied().filter(|c| (after..=last).contains(c));
    match (between.next(), between.next()) {
        (Some(only), None) => line_at(only),
        _ => None,
    }
}

/// The statement's node name as Postgres calls it (`DeleteStmt` → `DELETE`), for messages.
fn statement_name(node: &pg_query::NodeEnum) -> String {
    let debug = format!("{node:?}");
    let name = debug.split(['(', ' ', '{']).next().unwrap_or("?");
    name.trim_end_matches("Stmt").to_ascii_uppercase()
}

/// Removes every key holding a byte offset into the text (Postgres's `ParseLoc` fields:
/// `location`, `*_location`, `stmt_len`, `list_start`, `list_end`, `rexpr_list_start`,
/// `rexpr_list_end`), at any depth.
fn strip_locations(v: &mut Value) {
    const OFFSETS: &[&str] = &["location", "stmt_len", "list_start", "list_end", "rexpr_list_start", "rexpr_list_end"];
    match v {
        Value::Object(map) => {
            map.retain(|k, _| !OFFSETS.contains(&k.as_str()) && !k.ends_with("_location"));
            map.values_mut().for_each(strip_locations);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_locations),
        _ => {}
    }
}

/// `sql` with the canonical bounds `$start` and `$end` as parameters `$1` and `$2` (and their
/// other forms, `$start_date` … `$end_ts`, as `$3` … `$8`), outside
/// string literals (`'…'`, `E'…'` with its backslash escapes, dollar-quoted `$tag$…$tag$`),
/// quoted identifiers and comments.
///
/// # Errors
/// [`SqlError::Postgres`] for a positional parameter (`$1`) written in the body itself: it would
/// be indistinguishable from a bound.
fn with_bound_parameters(sql: &str) -> Result<String, SqlError> {
    let b = sql.as_bytes();
    let mut out = String::with_capacity(sql.len());
    let mut i = 0;
    let mut copied = 0;
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    while i < b.len() {
        match b[i] {
            q @ (b'\'' | b'"') => {
                // `E'…'`: backslash escapes (an `E` that does not end a longer identifier).
                let escapes = q == b'\'' && i > 0 && matches!(b[i - 1], b'E' | b'e') && !(i > 1 && ident(b[i - 2]));
                i += 1;
                while i < b.len() {
                    if escapes && b[i] == b'\\' {
                        i += 2;
                        continue;
                    }
                    if b[i] == q {
                        if b.get(i + 1) == Some(&q) {
                            i += 2;
                            continue;
                        }
                        break;
                    }
                    i += 1;
                }
                i += 1;
            }
            b'-' if b.get(i + 1) == Some(&b'-') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                i += 2;
                while i < b.len() && !(b[i] == b'*' && b.get(i + 1) == Some(&b'/')) {
                    i += 1;
                }
                i += 2;
            }
            b'$' => {
                let rest = &sql[i + 1..];
                let tag_len = rest.bytes().take_while(|&c| ident(c)).count();
                let opens_quote = rest.as_bytes().get(tag_len) == Some(&b'$') && !rest.as_bytes().first().is_some_and(u8::is_ascii_digit);
                if opens_quote {
                    // A dollar-quoted string: up to the same `$tag$`.
                    let delimiter = &sql[i..i + tag_len + 2];
                    let body = i + delimiter.len();
                    i = sql[body..].find(delimiter).map_or(b.len(), |end| body + end + delimiter.len());
                    continue;
                }
                if rest.as_bytes().first().is_some_and(u8::is_ascii_digit) {
                    let n: String = rest.chars().take_while(char::is_ascii_digit).collect();
                    return Err(SqlError::Postgres {
                        message: format!("a positional parameter `${n}` in a model body; the interval's bounds are `@start` and `@end`"),
                        line: Some(line_of(sql, i)),
                    });
                }
                const BOUNDS: [(&str, &str); 8] = [
                    ("start", "$1"),
                    ("end", "$2"),
                    ("start_date", "$3"),
                    ("end_date", "$4"),
                    ("start_ds", "$5"),
                    ("end_ds", "$6"),
                    ("start_ts", "$7"),
                    ("end_ts", "$8"),
                ];
                let found = BOUNDS.into_iter().find(|(word, _)| rest.starts_with(word) && tag_len == word.len());
                if let Some((word, param)) = found {
                    out.push_str(&sql[copied..i]);
                    out.push_str(param);
                    i += 1 + word.len();
                    copied = i;
                } else {
                    i += 1;
                }
            }
            _ => i += 1,
        }
    }
    out.push_str(&sql[copied.min(sql.len())..]);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = "SELECT o.id, o.region, sum(o.amount) AS total FROM raw.orders AS o JOIN raw.regions AS r ON r.id = o.region_id \
                        WHERE o.amount > 10 AND r.name <> 'x' GROUP BY o.id, o.region ORDER BY total DESC LIMIT 5";

    fn text(sql: &str) -> String {
        canonicalize(sql).unwrap_or_else(|e| panic!("{sql}: {e}")).text
    }

    #[test]
    fn formatting_variants_have_one_canonical_text() {
        let variants = [
            "select o.id, o.region, sum(o.amount) as total from raw.orders as o join raw.regions as r on r.id = o.region_id where o.amount > 10 and r.name <> 'x' group by o.id, o.region order by total desc limit 5",
            "SELECT   o.id ,o.region,sum( o.amount )AS total\nFROM raw.orders AS o\n  JOIN raw.regions AS r ON r.id = o.region_id\nWHERE o.amount > 10 AND r.name <> 'x'\nGROUP BY o.id, o.region\nORDER BY total DESC\nLIMIT 5",
            "SELECT o.id, o.region, sum(o.amount) AS total FROM raw.orders AS o JOIN raw.regions AS r ON r.id = o.region_id WHERE o.amount > 10 AND r.name <> 'x' GROUP BY o.id, o.region ORDER BY total DESC LIMIT 5;",
            "SELECT o.id, o.region, sum(o.amount) AS total -- the total\nFROM raw.orders AS o JOIN raw.regions AS r ON r.id = o.region_id WHERE o.amount > 10 AND r.name <> 'x' GROUP BY o.id, o.region ORDER BY total DESC LIMIT 5",
            "/* header */ SELECT o.id, o.region, sum(o.amount) AS total FROM raw.orders AS o JOIN raw.regions AS r ON r.id = o.region_id WHERE o.amount > 10 AND r.name <> 'x' GROUP BY o.id, o.region ORDER BY total DESC LIMIT 5",
            "SELECT o.id, o.region, sum(o.amount) total FROM raw.orders o JOIN raw.regions r ON r.id = o.region_id WHERE o.amount > 10 AND r.name <> 'x' GROUP BY o.id, o.region ORDER BY total DESC LIMIT 5",
            "SELECT o.id, o.region, sum(o.amount) AS total FROM raw.orders AS o INNER JOIN raw.regions AS r ON r.id = o.region_id WHERE o.amount > 10 AND r.name <> 'x' GROUP BY o.id, o.region ORDER BY total DESC LIMIT 5",
            "SELECT o.id, o.region, sum(o.amount) AS total FROM raw.orders AS o JOIN raw.regions AS r ON r.id = o.region_id WHERE o.amount > 10 AND r.name != 'x' GROUP BY o.id, o.region ORDER BY total DESC LIMIT 5",
            "SELECT O.ID, O.REGION, SUM(O.AMOUNT) AS TOTAL FROM RAW.ORDERS AS O JOIN RAW.REGIONS AS R ON R.ID = O.REGION_ID WHERE O.AMOUNT > 10 AND R.NAME <> 'x' GROUP BY O.ID, O.REGION ORDER BY TOTAL DESC LIMIT 5",
            "SELECT \"o\".\"id\", \"o\".\"region\", \"sum\"(\"o\".\"amount\") AS \"total\" FROM \"raw\".\"orders\" AS \"o\" JOIN \"raw\".\"regions\" AS \"r\" ON \"r\".\"id\" = \"o\".\"region_id\" WHERE \"o\".\"amount\" > 10 AND \"r\".\"name\" <> 'x' GROUP BY \"o\".\"id\", \"o\".\"region\" ORDER BY \"total\" DESC LIMIT 5",
            "SELECT o.id, o.region, sum(o.amount) AS total FROM raw.orders AS o JOIN raw.regions AS r ON (r.id = o.region_id) WHERE (o.amount > 10) AND (r.name <> 'x') GROUP BY o.id, o.region ORDER BY total DESC LIMIT 5",
            "SELECT o.id, o.region, sum(o.amount) AS total FROM raw.orders AS o JOIN raw.regions AS r ON r.id = o.region_id WHERE ((o.amount > 10) AND (r.name <> 'x')) GROUP BY o.id, o.region ORDER BY total DESC LIMIT 5",
            "SELECT o.id, o.region, sum(o.amount) AS total FROM raw.orders AS o JOIN raw.regions AS r ON r.id = o.region_id WHERE o.amount > (10) AND r.name <> 'x' GROUP BY o.id, o.region ORDER BY total DESC LIMIT 5",
            "SELECT o.id, o.region, sum(o.amount) AS total FROM raw.orders AS o JOIN raw.regions AS r ON r.id = o.region_id WHERE o.amount > 10 AND r.name <> 'x' GROUP BY o.id, o.region ORDER BY total DESC LIMIT 5 -- trailing",
            "\n\n\tSELECT o.id, o.region, sum(o.amount) AS total FROM raw.orders AS o JOIN raw.regions AS r ON r.id = o.region_id WHERE o.amount > 10 AND r.name <> 'x' GROUP BY o.id, o.region ORDER BY total DESC LIMIT 5\n\n",
            "SELECT o.id, o.region, sum(o.amount) AS total FROM raw.orders AS o JOIN raw.regions AS r ON r.id = o.region_id WHERE o.amount > 10 AND r.name <> 'x' GROUP BY o.id, o.region ORDER BY total DESC LIMIT 5 ;  ",
            "SeLeCt o.id, o.region, SuM(o.amount) As total FrOm raw.orders As o JoIn raw.regions aS r On r.id = o.region_id WhErE o.amount > 10 AnD r.name <> 'x' GrOuP bY o.id, o.region OrDeR bY total DeSc LiMiT 5",
            "SELECT o.id, o.region, sum(o.amount) AS total FROM raw.orders AS o JOIN raw.regions AS r ON r.id = o.region_id WHERE o.amount > 10 /* ten */ AND r.name <> 'x' GROUP BY o.id, o.region ORDER BY total DESC LIMIT 5",
            "SELECT o.id,\n       o.region,\n       sum(o.amount) AS total\n  FROM raw.orders AS o\n  JOIN raw.regions AS r\n    ON r.id = o.region_id\n WHERE o.amount > 10\n   AND r.name <> 'x'\n GROUP BY o.id,\n          o.region\n ORDER BY total DESC\n LIMIT 5",
            "SELECT o.id, o.region, sum(o.amount) AS total FROM raw.orders AS o JOIN raw.regions AS r ON r.id = o.region_id WHERE o.amount > 10 AND r.name <> 'x' GROUP BY o.id, o.region ORDER BY total DESC LIMIT 5\n-- end of model\n",
            "SELECT o.id, o.region, sum(o.amount) AS \"total\" FROM raw.orders AS o JOIN raw.regions AS r ON r.id = o.region_id WHERE o.amount > 10 AND r.name <> 'x' GROUP BY o.id, o.region ORDER BY \"total\" DESC LIMIT 5",
        ];
        assert!(variants.len() >= 20);
        let base = text(BASE);
        for v in variants {
            assert_eq!(text(v), base, "{v}");
        }
        // Lists and arrays whatever their spacing (their bounds are byte offsets too).
        assert_eq!(text("SELECT ARRAY[1,2] FROM t WHERE a IN (1,2)"), text("SELECT ARRAY[ 1, 2 ]\nFROM t WHERE a IN ( 1 , 2 )"));
        assert_ne!(text("SELECT a FROM t WHERE a IN (1, 2)"), text("SELECT a FROM t WHERE a IN (1, 3)"));
        // Casts: `::` and `CAST`; bounds as parameters wherever they are written.
        assert_eq!(text("SELECT a::bigint FROM t WHERE d >= $start AND d < $end"), text("SELECT CAST(a AS bigint) FROM t WHERE d >= $start AND d < $end"));
    }

    #[test]
    fn semantic_edits_change_the_canonical_text() {
        let edits = [
            BASE.replace("o.id, o.region, sum", "o.id, sum"),
            BASE.replace("sum(o.amount)", "avg(o.amount)"),
            BASE.replace("> 10", ">= 10"),
            BASE.replace("> 10", "> 11"),
            BASE.replace("'x'", "'y'"),
            BASE.replace("JOIN raw.regions", "LEFT JOIN raw.regions"),
            BASE.replace("raw.orders", "raw.orders_v2"),
            BASE.replace("SELECT o.id", "SELECT DISTINCT o.id"),
            BASE.replace("DESC", "ASC"),
            BASE.replace("LIMIT 5", "LIMIT 6"),
            BASE.replace("GROUP BY o.id, o.region", "GROUP BY o.region, o.id"),
            BASE.replace("AS total", "AS \"Total\""),
            BASE.replace(" AND r.name <> 'x'", ""),
            format!("{BASE} OFFSET 1"),
            BASE.replace("r.id = o.region_id", "r.id = o.id"),
        ];
        assert!(edits.len() >= 10);
        let base = text(BASE);
        let mut seen = std::collections::BTreeSet::from([base.clone()]);
        for e in &edits {
            let t = text(e);
            assert_ne!(t, base, "{e}");
            assert!(seen.insert(t), "two edits share a text: {e}");
        }
        assert_ne!(text("SELECT 1 UNION SELECT 2"), text("SELECT 1 UNION ALL SELECT 2"));
        assert_ne!(text("SELECT a FROM t WHERE d >= $start"), text("SELECT a FROM t WHERE d >= $end"));
    }

    #[test]
    fn only_one_query_is_a_body() {
        for (sql, found) in [
            ("DELETE FROM t", "a `DELETE` statement"),
            ("SELECT 1; SELECT 2", "2 statements"),
            ("", "no statement"),
            ("-- nothing", "no statement"),
            ("SELECT * INTO t2 FROM t", "a `SELECT … INTO` statement (it creates a table)"),
            ("CREATE TABLE t (a int)", "a `CREATE` statement"),
        ] {
            match canonicalize(sql) {
                Err(SqlError::NotAQuery { found: f }) => assert_eq!(f, found, "{sql}"),
                other => panic!("{sql}: {other:?}"),
            }
        }
        let err = canonicalize("SELECT a FRM t").unwrap_err();
        assert!(matches!(err, SqlError::Postgres { .. }), "{err:?}");
        assert!(err.to_string().starts_with("Postgres cannot parse SQL at line 1: syntax error at or near"), "{err}");
        // WITH, VALUES and set operations are queries.
        for sql in ["WITH x AS (SELECT 1 AS a) SELECT a FROM x", "VALUES (1), (2)", "SELECT 1 EXCEPT SELECT 2"] {
            assert_eq!(canonicalize(sql).unwrap().source, CanonSource::PgQuery);
        }
    }

    /// A body Postgres refuses names the line of the body the parser stopped at (what a `.sql`
    /// model's error is placed at), as DuckDB's do: the offending token's, or the last token's
    /// for an error at the end of input (comments after it are not tokens).
    #[test]
    fn a_parse_error_names_the_line_the_parser_stopped_at() {
        let line = |sql: &str| canonicalize(sql).unwrap_err().line();
        assert_eq!(line("SELECT region,\n  list_sum([amount])::bigint AS total\nFROM t\nGROUP BY region"), Some(2));
        assert_eq!(line("SELECT region, sum(amount)::bigint AS total\nFROM t\nGROUP BY ALL\n-- the end\n"), Some(3));
        assert_eq!(line("SELECT a FROM t WHERE x = $1"), Some(1));
        assert_eq!(line("SELECT a\nFROM t\nWHERE d >= $start\n  AND x = $1"), Some(4));
        let e = canonicalize("SELECT a,\n  b\nFRM t\n").unwrap_err();
        assert_eq!(e.line(), Some(3), "{e:?}");
        assert_eq!(e.to_string(), "Postgres cannot parse SQL at line 3: syntax error at or near \"t\"");
        // A multi-byte character before the error moves no line.
        assert_eq!(line("SELECT 'ééé' AS a,\n  b\nFRM t\n"), Some(3));
    }

    /// Prefixes do not fail monotonically (`x NOT` fails where `x NOT IN (2)` parses): the
    /// `NOT` of line 2 is never taken for the one of line 3 the parser stopped at, whatever the
    /// padding before and after.
    #[test]
    fn a_parse_error_after_a_look_ahead_token_of_the_same_text_names_its_own_line() {
        for pad in [0, 1, 3, 5, 6, 9] {
            for order in [1, 7, 26, 40] {
                let sql = format!(
                    "SELECT 1 AS a FROM (SELECT 1 AS x) t WHERE x > 0{}\nAND x NOT IN (2)\nAND x = 1 NOT\nORDER BY 1{}",
                    " AND x > 0".repeat(pad),
                    ", 1".repeat(order)
                );
                let e = canonicalize(&sql).unwrap_err();
                assert_eq!(e.line(), Some(3), "{pad} {order}: {e:?}");
                assert_eq!(e.to_string(), "Postgres cannot parse SQL at line 3: syntax error at or near \"NOT\"");
            }
        }
        // Two `NOT`s, the error at the last token: found by the parser, at its own line.
        let e = canonicalize("SELECT a FROM t\nWHERE a NOT IN (1)\n  AND b NOT\n").unwrap_err();
        assert_eq!(e.line(), Some(3), "{e:?}");
    }

    /// The only token whose text is the message's `at or near "X"` is the error's, without
    /// parsing (here the text even parses: no search could place it); compared ignoring case.
    #[test]
    fn a_single_token_of_the_messages_text_is_the_error_line() {
        assert_eq!(error_line("SELECT a\nFROM t", "syntax error at or near \"t\""), Some(2));
        assert_eq!(error_line("SELECT a\nFROM t", "syntax error at or near \"FROM\""), Some(2));
        assert_eq!(error_line("SELECT a\nFROM t", "syntax error at or near \"nowhere\""), None);
        assert_eq!(canonicalize("select a,\n  b,\nfrom t").unwrap_err().line(), Some(3));
    }

    /// Two tokens of the error's text with only look-ahead tokens between them cannot be told
    /// apart: the right line or none, never the other one's.
    #[test]
    fn an_ambiguous_error_token_gives_its_line_or_none_never_another() {
        let e = canonicalize("SELECT 1 FROM t\nWHERE x NOT\nNOT IN (1)").unwrap_err();
        assert!(e.to_string().ends_with("syntax error at or near \"NOT\""), "{e}");
        assert!(matches!(e.line(), None | Some(2)), "{e:?}");
        // A message neither at a token nor at the end of input gives no line.
        assert_eq!(error_line("SELECT a\nFROM t", "something else"), None);
    }

    #[test]
    fn no_location_survives_and_bounds_are_parameters_only_outside_quotes_and_comments() {
        let t = text(BASE);
        assert!(!t.contains("location") && !t.contains("stmt_len"), "{t}");
        let t = text("SELECT ARRAY[1, 2], a IN (1, 2) FROM t");
        assert!(!t.contains("list_start") && !t.contains("list_end"), "{t}");
        assert_eq!(
            with_bound_parameters("WHERE d >= $start AND d < $end AND s = '$start' AND \"$end\" = 1 -- $start\n/* $end */ AND $ended = 2").unwrap(),
            "WHERE d >= $1 AND d < $2 AND s = '$start' AND \"$end\" = 1 -- $start\n/* $end */ AND $ended = 2"
        );
        assert_eq!(
            with_bound_parameters("WHERE d BETWEEN $start_date AND $end_date AND $end_dates = 1").unwrap(),
            "WHERE d BETWEEN $3 AND $4 AND $end_dates = 1"
        );
        // Dollar-quoted and `E'…'` strings are strings: a `$start` in them stays text.
        assert_eq!(
            with_bound_parameters("SELECT $$a $start$$, $q$ $end $q$, E'it\\'s $start' WHERE d < $end").unwrap(),
            "SELECT $$a $start$$, $q$ $end $q$, E'it\\'s $start' WHERE d < $2"
        );
        assert_ne!(text("SELECT $$a $start$$ AS s"), text("SELECT $$a $1$$ AS s"));
        // A positional parameter of the body's own would read as a bound: refused.
        let err = canonicalize("SELECT a FROM t WHERE d >= $1").unwrap_err();
        assert!(err.to_string().contains("positional parameter `$1`"), "{err}");
    }
}
