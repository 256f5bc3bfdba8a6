//! Comparing result rows with expected rows, and printing the difference.
//!
//! Rows are compared as the engine renders their values as text after casting both sides to the
//! model's declared types, so `1` and `1.0` in a `double` column, or `'2026-01-01'` and
//! `DATE '2026-01-01'`, are equal, while NULL equals only NULL (never the text `'NULL'`).

use std::collections::BTreeMap;

/// One row: each value as the engine's text, `None` for NULL.
pub type TextRow = Vec<Option<String>>;

/// How actual rows differ from expected ones.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RowDiff {
    /// Expected rows the query did not return (multiset difference, in expected order).
    pub missing: Vec<TextRow>,
    /// Returned rows that were not expected (multiset difference, in returned order).
    pub unexpected: Vec<TextRow>,
    /// With `ordered`, when both sides hold the same rows in another order: the first 1-based
    /// position that differs, with the expected and the returned row there.
    pub order: Option<OrderMismatch>,
}

/// The first position where two equal multisets of rows differ in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrderMismatch {
    /// 1-based row position.
    pub row: usize,
    /// The expected row at that position.
    pub expected: TextRow,
    /// The returned row at that position.
    pub actual: TextRow,
}

impl RowDiff {
    /// True when the rows match.
    pub fn is_empty(&self) -> bool {
        self.missing.is_empty() && self.unexpected.is_empty() && self.order.is_none()
    }
}

/// Compares `actual` with `expected`: as multisets (each row counted with its multiplicity),
/// and with `ordered` also position by position.
pub fn compare(expected: &[TextRow], actual: &[TextRow], ordered: bool) -> RowDiff {
    let mut remaining: BTreeMap<&TextRow, usize> = BTreeMap::new();
    for r in actual {
        *remaining.entry(r).or_default() += 1;
    }
    let mut missing = Vec::new();
    for r in expected {
        match remaining.get_mut(r) {
            Some(n) if *n > 0 => *n -= 1,
            _ => missing.push(r.clone()),
        }
    }
    let mut unexpected = Vec::new();
    for r in actual {
        if let Some(n) = remaining.get_mut(r)
            && *n > 0
        {
            *n -= 1;
            unexpected.push(r.clone());
        }
    }
    let order = if ordered && missing.is_empty() && unexpected.is_empty() {
        expected.iter().zip(actual).enumerate().find(|(_, (e, a))| e != a).map(|(i, (e, a))| OrderMismatch {
            row: i + 1,
            expected: e.clone(),
            actual: a.clone(),
        })
    } else {
        None
    };
    RowDiff { missing, unexpected, order }
}

/// `rows` with each negative zero of a `numeric` column (`-0`, `-0.0`, `-0e0` as the engines
/// print a double's) written as the zero it equals.
pub fn unsigned_zeros(mut rows: Vec<TextRow>, numeric: &[bool]) -> Vec<TextRow> {
    let negative_zero = |v: &str| {
        v.strip_prefix('-').is_some_and(|rest| {
            let mantissa = rest.split(['e', 'E']).next().unwrap_or_default();
            !mantissa.is_empty() && mantissa.chars().all(|c| c == '0' || c == '.') && mantissa.starts_with('0')
        })
    };
    for row in &mut rows {
        for (value, numeric) in row.iter_mut().zip(numeric) {
            if *numeric && let Some(v) = value.as_mut().filter(|v| negative_zero(v)) {
                v.remove(0);
            }
        }
    }
    rows
}

/// How a value prints in a diff: NULL as `NULL`, text as is — but quoted (`'NULL'`, `'a '`,
/// `''`) when it would read as something else: the text `NULL` (any case), text that is empty or
/// starts or ends with white space (`'a '` and `'a'` would print alike), and text holding a
/// control character (a line break would break the table's rows and columns), which is shown
/// escaped: `'a\nb'`, `'a\tb'`, `'\r'`, others as `\u{1b}`. Quoted text escapes a backslash as
/// `\\`, so an escape is never read for a backslash the value holds.
pub fn show(v: &Option<String>) -> std::borrow::Cow<'_, str> {
    match v.as_deref() {
        None => "NULL".into(),
        // Quoted too when it looks quoted already (`'a\nb'` as written, four characters and a
        // backslash: told from the value holding a line break, shown `'a\nb'`).
        Some(t)
            if t.eq_ignore_ascii_case("null")
                || t.is_empty()
                || t.trim() != t
                || t.contains(char::is_control)
                || (t.len() >= 2 && t.starts_with('\'') && t.ends_with('\'')) =>
        {
            let mut quoted = String::with_capacity(t.len() + 2);
            quoted.push('\'');
            for c in t.chars() {
                match c {
                    '\n' => quoted.push_str("\\n"),
                    '\r' => quoted.push_str("\\r"),
                    '\t' => quoted.push_str("\\t"),
                    '\\' => quoted.push_str("\\\\"),
                    c if c.is_control() => quoted.extend(c.escape_unicode()),
                    c => quoted.push(c),
                }
            }
            quoted.push('\'');
            quoted.into()
        }
        Some(t) => t.into(),
    }
}

/// Rows printed at most per side; the rest is summarised.
pub const MAX_SHOWN: usize = 50;

/// The diff as aligned text lines (no trailing newline), each prefixed by `indent`: a header of
/// column names, then `-` lines for missing rows and `+` lines for unexpected ones.
pub fn render(columns: &[String], diff: &RowDiff, indent: &str) -> String {
    let mut lines: Vec<(&str, &TextRow)> = Vec::new();
    lines.extend(diff.missing.iter().take(MAX_SHOWN).map(|r| ("-", r)));
    lines.extend(diff.unexpected.iter().take(MAX_SHOWN).map(|r| ("+", r)));
    if let Some(o) = &diff.order {
        lines.push(("expected", &o.expected));
        lines.push(("returned", &o.actual));
    }
    let mark_width = lines.iter().map(|(m, _)| m.chars().count()).max().unwrap_or(1);
    let widths: Vec<usize> = columns
        .iter()
        .enumerate()
        .map(|(i, c)| lines.iter().map(|(_, r)| r.get(i).map_or(0, |v| show(v).chars().count())).max().unwrap_or(0).max(c.chars().count()))
        .collect();
    let line = |mark: &str, cells: Vec<std::borrow::Cow<'_, str>>| {
        let body: Vec<String> = cells.iter().zip(&widths).map(|(c, w)| format!("{c:w$}")).collect();
        format!("{indent}{mark:mark_width$}  {}", body.join("  ")).trim_end().to_string()
    };
    let mut out = vec![line("", columns.iter().map(|c| c.as_str().into()).collect())];
    for (mark, row) in &lines {
        out.push(line(mark, row.iter().map(show).collect()));
    }
    for (n, what) in [(diff.missing.len(), "missing"), (diff.unexpected.len(), "unexpected")] {
        if n > MAX_SHOWN {
            out.push(format!("{indent}… {} more {what} rows not shown", n - MAX_SHOWN));
        }
    }
    out.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negative_zeros_of_numeric_columns_are_zero_and_text_is_left_alone() {
        let row = |v: &[&str]| v.iter().map(|s| Some(s.to_string())).collect::<TextRow>();
        let rows = vec![row(&["-0.0", "-0", "-0e0", "-0.01", "-10", "-0.0"])];
        assert_eq!(unsigned_zeros(rows, &[true, true, true, true, true, false]), vec![row(&["0.0", "0", "0e0", "-0.01", "-10", "-0.0"])]);
    }

    /// Text that would print like other text (or like nothing) is quoted; other text is not.
    #[test]
    fn text_with_edge_white_space_or_empty_is_quoted_in_a_diff() {
        let s = |v: Option<&str>| show(&v.map(str::to_string)).into_owned();
        assert_eq!([s(Some("a ")), s(Some(" a")), s(Some("")), s(Some("null")), s(None), s(Some("a b"))], ["'a '", "' a'", "''", "'null'", "NULL", "a b"]);
    }

    /// A line break, a carriage return or a tab printed raw would break the diff's table: text
    /// holding one is quoted with it escaped (a backslash it holds too, so the escapes read back
    /// unambiguously); a backslash alone leaves text as it is.
    #[test]
    fn text_with_control_characters_is_quoted_escaped_and_keeps_the_table_on_its_rows() {
        let s = |v: &str| show(&Some(v.to_string())).into_owned();
        assert_eq!(s("a\nb"), "'a\\nb'");
        assert_eq!(s("x\r\n"), "'x\\r\\n'");
        assert_eq!(s("a\tb"), "'a\\tb'");
        assert_eq!(s("esc\u{1b}"), "'esc\\u{1b}'");
        assert_eq!(s("c:\\d\ne"), "'c:\\\\d\\ne'");
        assert_eq!(s("c:\\d"), "c:\\d");
        // Written as a quoted escape, it is quoted again: not the value with a line break.
        assert_eq!(s("'a\\nb'"), "''a\\\\nb''");
        assert_ne!(s("'a\\nb'"), s("a\nb"));
        let d = RowDiff { missing: vec![row(&[Some("1"), Some("two\nlines")])], unexpected: vec![row(&[Some("1"), Some("two lines")])], order: None };
        let text = render(&["id".into(), "note".into()], &d, "");
        assert_eq!(text, "   id  note\n-  1   'two\\nlines'\n+  1   two lines");
        assert_eq!(text.lines().count(), 3, "one line per row: {text}");
    }

    fn row(v: &[Option<&str>]) -> TextRow {
        v.iter().map(|x| x.map(str::to_string)).collect()
    }

    #[test]
    fn multiset_difference_counts_duplicates_and_nulls() {
        let a = row(&[Some("1"), None]);
        let b = row(&[Some("2"), Some("x")]);
        let expected = vec![a.clone(), a.clone(), b.clone()];
        let actual = vec![b.clone(), a.clone(), row(&[Some("1"), Some("NULL")])];
        let d = compare(&expected, &actual, false);
        assert_eq!(d.missing, vec![a.clone()], "one of the two expected NULL rows is missing");
        assert_eq!(d.unexpected, vec![row(&[Some("1"), Some("NULL")])], "the text 'NULL' is not NULL");
        assert!(compare(&[a.clone(), b.clone()], &[b.clone(), a.clone()], false).is_empty());
    }

    #[test]
    fn ordered_comparison_names_the_first_displaced_row() {
        let (a, b) = (row(&[Some("1")]), row(&[Some("2")]));
        let d = compare(&[a.clone(), b.clone()], &[b.clone(), a.clone()], true);
        assert_eq!(d.order, Some(OrderMismatch { row: 1, expected: a.clone(), actual: b.clone() }));
        assert!(d.missing.is_empty() && d.unexpected.is_empty());
        assert!(compare(&[a.clone(), b.clone()], &[a, b], true).is_empty());
    }

    #[test]
    fn render_aligns_columns() {
        let d = RowDiff { missing: vec![row(&[Some("1"), Some("emergency")])], unexpected: vec![row(&[Some("10"), None])], order: None };
        let text = render(&["id".into(), "dept".into()], &d, "  ");
        assert_eq!(text, "     id  dept\n  -  1   emergency\n  +  10  NULL");
        // The text `NULL` is told from NULL.
        let d = RowDiff { missing: vec![row(&[Some("1"), Some("NULL")])], unexpected: vec![row(&[Some("1"), None])], order: None };
        assert_eq!(render(&["id".into(), "dept".into()], &d, ""), "   id  dept\n-  1   'NULL'\n+  1   NULL");
    }
}
