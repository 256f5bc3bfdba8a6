//! Operators DuckDB reads as one where efmesh's SQL parser reads two.
//!
//! DuckDB lexes operators with Postgres's rule: a run of operator characters is one operator
//! (cut where a `--` or `/*` comment starts), except that a run of several characters ending in
//! `+` or `-` that holds none of `~ ! @ % ^ & |` and the backtick loses its trailing signs, which
//! become operators of their own. So `3 * -2` and `3*-2` are one query to DuckDB, but `3^-2` is
//! the operator `^-`, which DuckDB does not have (a `Catalog Error` when the model is built),
//! while sqlparser, whose tree is fingerprinted ([`super::canon`]), reads `3 ^ -2` there: the
//! broken text and the fixed one share a fingerprint, and an edit from one to the other would
//! be "no changes". And an operator DuckDB's grammar ranks apart (`//`, `->`, `->>`) that loses
//! signs so is no longer that operator to it but a generic one, ranked otherwise: `1 + 7//-2` is
//! `(1 + 7) // -2` (-4) where `1 + 7 // -2` is `1 + (7 // -2)` (-2), one sqlparser tree.
//! [`glued_operators`] finds such runs, so that the load refuses them
//! (`project::glued_operators`).
//!
//! Checked on DuckDB 1.5.5: every run of two or three operator characters this module flags as
//! unknown between two numbers is DuckDB's `Scalar Function with name <run> does not exist`;
//! every run of two or three characters ending in signs that DuckDB cuts reads as the same query
//! written apart, in the contexts of an arithmetic, comparison, `^`, `||`, `AND`, `NOT`, `IS
//! NULL` and `LIKE` operator, but for `//`, `->`, `->>` ([`RANKED_APART`]) and `**` (which
//! sqlparser does not parse: such a body's fingerprint is DuckDB's own tree). DuckDB's operator
//! characters are Postgres's without `#` and `?` (a positional column `#1`, a parameter `?`).

use crate::core::fragment::skip_literal_or_comment;

/// A run of operator characters DuckDB reads as one operator it does not have, where sqlparser
/// reads several.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GluedOperator {
    /// The operator as DuckDB reads it (`^-`); for one [`GluedOperator::ranked_otherwise`], the
    /// run as written: the operator and the signs DuckDB cuts off it (`//-`).
    pub operator: String,
    /// The characters with a space where sqlparser splits them (`^ -`): what to write.
    pub apart: String,
    /// 1-based line of the text it is on.
    pub line: u64,
    /// DuckDB has the operator left once the signs are cut off (`//`, `->`, `->>`:
    /// [`RANKED_APART`]) but reads it as a generic operator, ranked otherwise than written apart:
    /// the model builds (or not) and computes something else than the spelling apart, whose
    /// fingerprint it has. Otherwise DuckDB has no operator of that name: the model fails when
    /// built.
    pub ranked_otherwise: bool,
}

/// The characters of an operator to DuckDB's lexer.
const OPERATOR_CHARS: &[u8] = b"~!@^&|`+-*/%<>=";

/// The characters that let an operator end in `+` or `-` (Postgres's rule; its `#` and `?`
/// are no operator characters to DuckDB).
const SIGN_ENDING_ALLOWED_BY: &[u8] = b"~!@%^&|`";

/// The binary operators both parsers know that sqlparser reads before a prefix `~` (bitwise
/// not) or `@` (absolute value) written against them (`3*~2`, `x=@y`), where DuckDB reads one
/// operator (`*~`, `=@`) it does not have.
const BEFORE_PREFIX: &[&str] = &["+", "-", "*", "/", "//", "%", "^", "**", "||", "&", "|", "<<", ">>", "=", "==", "<>", "!=", "<", ">", "<=", ">="];

/// DuckDB's other binary operators that sqlparser reads before a prefix `~` or `@` written
/// against them as it does after [`BEFORE_PREFIX`] (`j->>~k`, `s~~@2`, `s!~~~p`, `l<@@2`), where
/// DuckDB reads one operator (`->>~`, `~~@`, `!~~~`, `<@@`) it does not have. Not DuckDB's own
/// operators so spelt ([`DUCKDB_ENDING_IN_PREFIX`]).
const OTHER_BEFORE_PREFIX: &[&str] = &["->", "->>", "~", "~*", "!~", "!~*", "~~", "!~~", "~~~", "~~*", "!~~*", "@>", "<@", "<=>"];

/// DuckDB's operators that are one of [`BEFORE_PREFIX`] or [`OTHER_BEFORE_PREFIX`] followed by
/// `~` or `@`: `^@` (starts with), `<@` (contained by), `~~` (`LIKE`), `!~~` (`NOT LIKE`) and
/// `~~~` (`GLOB`, which sqlparser reads as `~~ ~`: a body holding it is read by DuckDB's parser,
/// `canon::read_otherwise`).
const DUCKDB_ENDING_IN_PREFIX: &[&str] = &["^@", "<@", "~~", "!~~", "~~~"];

/// DuckDB's operators with a token of their own in its grammar, ranked there apart from the
/// generic operators, that a run can leave once its trailing signs are cut (`7//-2`, `j->-1`,
/// `j->>-1`): DuckDB then reads them as a generic operator (ranked below `+` and `-`, and without
/// the arrows' reach, `canon::is_arrow`), so `1 + 7//-2` is `(1 + 7) // -2` where `1 + 7 // -2`
/// is `1 + (7 // -2)`, while sqlparser reads both alike. (`**` is one too, but sqlparser does not
/// parse it: a body holding it has DuckDB's own tree as its canonical form.)
pub const RANKED_APART: &[&str] = &["//", "->", "->>"];

/// Every operator of `sql`, outside string literals, quoted identifiers and comments, that DuckDB
/// reads as one operator it does not have where sqlparser reads several (see the
/// [module docs](self)): one of two characters or more ending in `+` or `-` (`^-`, `%-`, `|-`,
/// `||-`, `!=-`, `~-`: no DuckDB operator ends so), or one of [`BEFORE_PREFIX`] and
/// [`OTHER_BEFORE_PREFIX`] (`+ - * / // % ^ ** || & | << >> = == <> != < > <= >= -> ->> ~ ~*
/// !~ !~* ~~ !~~ ~~~ ~~* !~~* @> <@ <=>`, and signs) followed by a prefix `~` or `@` (`*~`,
/// `!=~`, `=@`, `->>~`, `<@@`; not DuckDB's `^@`, `<@`, `~~`, `!~~` and `~~~`). And every one of
/// [`RANKED_APART`] that DuckDB cuts from signs written against it (`//-`, `->+`, `->>-`), which
/// it then ranks otherwise ([`GluedOperator::ranked_otherwise`]). In order of position.
///
/// # Example
/// ```
/// use efmesh::sql::operator_runs::glued_operators;
/// let found = glued_operators("SELECT 3 * -2, 'a^-b',\n  3^-2 -- x^-1");
/// assert_eq!(found.len(), 1);
/// assert_eq!((found[0].operator.as_str(), found[0].apart.as_str(), found[0].line), ("^-", "^ -", 2));
/// ```
#[must_use]
pub fn glued_operators(sql: &str) -> Vec<GluedOperator> {
    let b = sql.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if let Some(end) = skip_literal_or_comment(b, i) {
            i = end;
            continue;
        }
        if !OPERATOR_CHARS.contains(&b[i]) {
            i += 1;
            continue;
        }
        // The run, up to a comment's start (Postgres's lexer cuts it there too).
        let mut j = i;
        while j < b.len() && OPERATOR_CHARS.contains(&b[j]) && !(b[j..].starts_with(b"--") || b[j..].starts_with(b"/*")) {
            j += 1;
        }
        // The run's operators as DuckDB reads them: the run, unless it ends in signs it cannot
        // end in (then those are operators of their own).
        let mut at = i;
        while at < j {
            let run = &sql[at..j];
            let mut n = run.len();
            if n > 1 && run.ends_with(['+', '-']) && !run.as_bytes()[..n - 1].iter().any(|c| SIGN_ENDING_ALLOWED_BY.contains(c)) {
                while n > 1 && run[..n].ends_with(['+', '-']) {
                    n -= 1;
                }
            }
            let operator = &run[..n];
            let line = || u64::try_from(sql[..at].matches('\n').count() + 1).unwrap_or(u64::MAX);
            if n < run.len() && RANKED_APART.contains(&operator) {
                // `//-`: `//`, cut from its signs, is a generic operator to DuckDB.
                out.push(GluedOperator { operator: run.to_string(), apart: format!("{operator} {}", &run[n..]), line: line(), ranked_otherwise: true });
            } else if let Some(apart) = glued_apart(operator) {
                out.push(GluedOperator { operator: operator.to_string(), apart, line: line(), ranked_otherwise: false });
            }
            at += n;
        }
        i = j;
    }
    out
}

/// `operator` spelt as sqlparser reads it (`^ -`), when DuckDB reads it as one operator it does
/// not have ([`glued_operators`]).
fn glued_apart(operator: &str) -> Option<String> {
    if operator.len() < 2 {
        return None;
    }
    if operator.ends_with(['+', '-']) {
        let head = operator.trim_end_matches(['+', '-']);
        return Some(format!("{head} {}", &operator[head.len()..]));
    }
    let (head, last) = operator.split_at(operator.len() - 1);
    let op = head.trim_end_matches(['+', '-']);
    let before_prefix = op.is_empty() || BEFORE_PREFIX.contains(&op) || OTHER_BEFORE_PREFIX.contains(&op);
    if !matches!(last, "~" | "@") || !before_prefix || DUCKDB_ENDING_IN_PREFIX.contains(&operator) {
        return None;
    }
    // `->-~` is `-> - ~`: `->-` apart from the prefix would be `->` cut from its sign.
    let signs = &head[op.len()..];
    Some(if !signs.is_empty() && RANKED_APART.contains(&op) { format!("{op} {signs} {last}") } else { format!("{head} {last}") })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(sql: &str) -> Vec<String> {
        glued_operators(sql).into_iter().map(|g| g.operator).collect()
    }

    /// Each run DuckDB 1.5.5 refuses as `Scalar Function with name <run> does not exist` (an
    /// operator ending in a sign it may not end in would have been split) is found, with what
    /// to write instead.
    #[test]
    fn runs_duckdb_reads_as_one_unknown_operator_are_found() {
        for (sql, operator, apart) in [
            ("SELECT 3^-2", "^-", "^ -"),
            ("SELECT 3 ^+ 2", "^+", "^ +"),
            ("SELECT 3%-2", "%-", "% -"),
            ("SELECT a|-1", "|-", "| -"),
            ("SELECT a&-1", "&-", "& -"),
            ("SELECT 'a'||-1", "||-", "|| -"),
            ("SELECT 1 WHERE x!=-1", "!=-", "!= -"),
            ("SELECT ~-1", "~-", "~ -"),
            ("SELECT @-2", "@-", "@ -"),
            ("SELECT 3 ^-+ 2", "^-+", "^ -+"),
            ("SELECT s~~-1", "~~-", "~~ -"),
            ("SELECT l@>-1", "@>-", "@> -"),
            // Cut before a comment: `^-/* c */2` is still `^-`.
            ("SELECT 3 ^-/* c */2", "^-", "^ -"),
            // A binary operator against a prefix `~` or `@`.
            ("SELECT 3*~2", "*~", "* ~"),
            ("SELECT a&~b", "&~", "& ~"),
            ("SELECT -~1", "-~", "- ~"),
            ("SELECT 1 WHERE x=~y", "=~", "= ~"),
            ("SELECT 1 WHERE x!=~y", "!=~", "!= ~"),
            ("SELECT 3*-~2", "*-~", "*- ~"),
            ("SELECT 3+@2", "+@", "+ @"),
            ("SELECT 1 WHERE x>=@y", ">=@", ">= @"),
            // DuckDB's other binary operators against a prefix `~` or `@` (sqlparser reads
            // `j ->> ~k`, `s ~~ @2`, `s !~~ ~p`).
            ("SELECT j->~k", "->~", "-> ~"),
            ("SELECT j->@2", "->@", "-> @"),
            ("SELECT j->>~k", "->>~", "->> ~"),
            ("SELECT j->>@2", "->>@", "->> @"),
            ("SELECT s~~@2", "~~@", "~~ @"),
            ("SELECT s!~~~p", "!~~~", "!~~ ~"),
            ("SELECT s~~~@2", "~~~@", "~~~ @"),
            ("SELECT s~~*~p", "~~*~", "~~* ~"),
            ("SELECT s!~~*@2", "!~~*@", "!~~* @"),
            ("SELECT l<@@2", "<@@", "<@ @"),
            ("SELECT l@>~m", "@>~", "@> ~"),
            ("SELECT s~*~p", "~*~", "~* ~"),
            ("SELECT s!~*@2", "!~*@", "!~* @"),
            ("SELECT s~@2", "~@", "~ @"),
            ("SELECT s!~@2", "!~@", "!~ @"),
            ("SELECT a<=>~b", "<=>~", "<=> ~"),
            // Apart, the signs stay apart from the arrow too (`->-` would be `->` cut from `-`).
            ("SELECT j->-~k", "->-~", "-> - ~"),
            ("SELECT 7//-~2", "//-~", "// - ~"),
        ] {
            let g = glued_operators(sql);
            assert_eq!(g.len(), 1, "{sql}: {g:?}");
            assert_eq!((g[0].operator.as_str(), g[0].apart.as_str(), g[0].line, g[0].ranked_otherwise), (operator, apart, 1, false), "{sql}");
        }
    }

    /// `//`, `->` and `->>` cut from the signs written against them are generic operators to
    /// DuckDB 1.5.5, ranked otherwise than the operator apart (`1 + 7//-2` is -4, `1 + 7 // -2`
    /// is -2; `'2' = j->>-1` is `'2' = (j ->> -1)`, `'2' = j ->> -1` is `('2' = j) ->> -1`):
    /// found, with the spelling apart, and told apart from an operator DuckDB does not have.
    #[test]
    fn operators_duckdb_ranks_otherwise_once_cut_from_their_signs_are_found() {
        for (sql, operator, apart) in [
            ("SELECT 1 + 7//-2", "//-", "// -"),
            ("SELECT 7//-2 * 3", "//-", "// -"),
            ("SELECT 7//+2 * 3", "//+", "// +"),
            ("SELECT 7 //+-2", "//+-", "// +-"),
            ("SELECT '2' = j->>-1", "->>-", "->> -"),
            ("SELECT j->-1", "->-", "-> -"),
            ("SELECT list_transform(l, x->+x)", "->+", "-> +"),
        ] {
            let g = glued_operators(sql);
            assert_eq!(g.len(), 1, "{sql}: {g:?}");
            assert_eq!((g[0].operator.as_str(), g[0].apart.as_str(), g[0].line, g[0].ranked_otherwise), (operator, apart, 1, true), "{sql}");
        }
        // Written apart, or against no sign, they are DuckDB's own.
        assert_eq!(found("SELECT 1 + 7 // -2, j ->> -1, j -> -1, 7//2, j->>'k', j->'k', x -> -x"), Vec::<String>::new());
    }

    /// What DuckDB reads as sqlparser does is never found: signs an operator may not end in
    /// (`*-` is `*` and `-`), DuckDB's own operators, operators apart, and anything in a
    /// literal, a quoted identifier or a comment. (`3**-2` ranks otherwise too, but sqlparser
    /// does not parse `**`: the body's fingerprint is DuckDB's tree.)
    #[test]
    fn operators_duckdb_splits_or_has_are_not_found() {
        for sql in [
            "SELECT 3*-2, 3/-2, 3+-2, 3-+2, 3**-2, 3<<-2, 3>>-2, 3*+-2",
            "SELECT 1 WHERE x=-1 OR x<>-1 OR x<=-1 OR x>=-1 OR x<-1 OR x>-1 OR x==-1",
            "SELECT 3 ^ -2, 3 % -2, a | -1, a & ~b, ~1, @ -2, 'a' || -1",
            "SELECT s ~~ p, s !~~ p, s ~~~ p, s !~ p, s ^@ p, l <@ m, l @> m, a && b, j ->> 'k', j->'k'",
            "SELECT s~~p, s!~~p, s~~~p, s~~*p, s!~~*p, s~*p, s!~*p, s^@p, l<@m, l@>m, a<=>b",
            "SELECT list_transform(l, x -> -x), [1, 2]->>'a', f(a := -1), f(a => -1), #1-#2",
            "SELECT 'x^-2', \"a^-b\", E'\\'^-', $$3^-2$$, $t$^-$t$ -- 3^-2\n/* 3^-2 */",
            "SELECT 3^--2\n",
            "SELECT 3^/* c */-2",
        ] {
            assert_eq!(found(sql), Vec::<String>::new(), "{sql}");
        }
    }

    #[test]
    fn every_glued_operator_is_found_at_its_line() {
        let g = glued_operators("SELECT a,\n  3^-2 AS b,\n  'x\ny' AS c, 1!=-1 AS d, 2%+1 AS e");
        let at: Vec<(&str, u64)> = g.iter().map(|g| (g.operator.as_str(), g.line)).collect();
        assert_eq!(at, [("^-", 2), ("!=-", 4), ("%+", 4)]);
    }
}
