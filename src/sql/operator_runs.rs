//! Operators DuckDB reads as one where efmesh's SQL parser reads two.
//!
//! DuckDB lexes operators with Postgres's rule: a run of operator characters is one operator
//! (cut where a `--` or `/*` comment starts), except that a run of several characters ending in
//! `+` or `-` that holds none of `~ ! @ % ^ & |` and the backtick loses its trailing signs, which
//! become operators of their own. So `3 * -2` and `3*-2` are one query to DuckDB, but `3^-2` is
//! the operator `^-`, which DuckDB does not have (a `Catalog Error` when the model is built),
//! while sqlparser, whose tree is fingerprinted ([`super::canon`]), reads `3 ^ -2` there: the
//! broken text and the fixed one share a fingerprint, and an edit from one to the other would
//! be "no changes". [`glued_operators`] finds such runs, so that the load refuses them
//! (`project::glued_operators`).
//!
//! Checked on DuckDB 1.5.5: every run of two or three operator characters this module flags
//! between two numbers is DuckDB's `Scalar Function with name <run> does not exist`. DuckDB's
//! operator characters are Postgres's without `#` and `?` (a positional column `#1`, a
//! parameter `?`).

use crate::core::fragment::skip_literal_or_comment;

/// A run of operator characters DuckDB reads as one operator it does not have, where sqlparser
/// reads several.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GluedOperator {
    /// The operator as DuckDB reads it (`^-`).
    pub operator: String,
    /// The characters with a space where sqlparser splits them (`^ -`): what to write.
    pub apart: String,
    /// 1-based line of the text it is on.
    pub line: u64,
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

/// Every operator of `sql`, outside string literals, quoted identifiers and comments, that DuckDB
/// reads as one operator it does not have where sqlparser reads several (see the
/// [module docs](self)): one of two characters or more ending in `+` or `-` (`^-`, `%-`, `|-`,
/// `||-`, `!=-`, `~-`: no DuckDB operator ends so), or one of `+ - * / // % ^ ** || & | << >> =
/// == <> != < > <= >=` (and signs) followed by a prefix `~` or `@` (`*~`, `!=~`, `=@`; not
/// DuckDB's `^@` and `<@`). In order of position.
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
            if let Some(apart) = glued_apart(operator) {
                let line = u64::try_from(sql[..at].matches('\n').count() + 1).unwrap_or(u64::MAX);
                out.push(GluedOperator { operator: operator.to_string(), apart, line });
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
    let before_prefix = op.is_empty() || BEFORE_PREFIX.contains(&op);
    (matches!(last, "~" | "@") && before_prefix && !matches!(operator, "^@" | "<@")).then(|| format!("{head} {last}"))
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
        ] {
            let g = glued_operators(sql);
            assert_eq!(g.len(), 1, "{sql}: {g:?}");
            assert_eq!((g[0].operator.as_str(), g[0].apart.as_str(), g[0].line), (operator, apart, 1), "{sql}");
        }
    }

    /// What DuckDB reads as sqlparser does is never found: signs an operator may not end in
    /// (`*-` is `*` and `-`), DuckDB's own operators, operators apart, and anything in a
    /// literal, a quoted identifier or a comment.
    #[test]
    fn operators_duckdb_splits_or_has_are_not_found() {
        for sql in [
            "SELECT 3*-2, 3/-2, 3//-2, 3+-2, 3-+2, 3**-2, 3<<-2, 3>>-2, 3*+-2",
            "SELECT 1 WHERE x=-1 OR x<>-1 OR x<=-1 OR x>=-1 OR x<-1 OR x>-1 OR x==-1",
            "SELECT 3 ^ -2, 3 % -2, a | -1, a & ~b, ~1, @ -2, 'a' || -1",
            "SELECT s ~~ p, s !~~ p, s ~~~ p, s !~ p, s ^@ p, l <@ m, l @> m, a && b, j ->> 'k', j->'k'",
            "SELECT list_transform(l, x -> -x), [1, 2]->>-1, f(a := -1), f(a => -1), #1-#2",
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
