//! Model bodies as fragments: literal SQL text interleaved with references, column lists and
//! interval bounds, so the same body renders differently for fingerprinting, execution and
//! environments (reference `core-semantics.md` §1.2).

use super::model::Location;
use super::name::{ModelName, quote_ident};

/// One piece of a body.
#[derive(Debug, Clone, PartialEq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Node {
    /// Literal SQL text.
    Text(String),
    /// A reference to another model (the only source of DAG edges).
    Ref(RefSite),
    /// A checked column list of a parent, rendered as quoted identifiers joined by `, `.
    Cols(ColsSite),
    /// The interval's inclusive lower bound (`@start`).
    Start,
    /// The interval's exclusive upper bound (`@end`).
    End,
    /// A bound in another form: `@start_date`, `@end_ds`, … (sqlmesh's macro variables).
    Bound(Bound),
    /// `@this`: the model's own table (a self-referencing incremental model reading its
    /// previous rows). Never a DAG edge; see [`Resolver::this`].
    This(ModelName),
}

/// A bound of the interval in a form other than `@start`/`@end`'s `TIMESTAMP`: what a model
/// compares a `DATE` or a string partition column with. As in sqlmesh, the `end` forms are
/// **inclusive** (the last instant of the interval: `BETWEEN @start_date AND @end_date`), while
/// `@end` itself is exclusive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Bound {
    /// The end of the interval (its last instant) rather than its start.
    pub end: bool,
    /// How the instant renders.
    pub form: BoundForm,
}

/// The rendering of a [`Bound`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum BoundForm {
    /// `DATE 'YYYY-MM-DD'` (`@start_date`, `@end_date`).
    Date,
    /// `'YYYY-MM-DD'`, a string (`@start_ds`, `@end_ds`).
    Ds,
    /// `'YYYY-MM-DD HH:MM:SS.ffffff'`, a string (`@start_ts`, `@end_ts`).
    Ts,
}

impl Bound {
    /// Every bound form, with its marker (without the `@`).
    pub const ALL: [(&'static str, Bound); 6] = [
        ("start_date", Bound { end: false, form: BoundForm::Date }),
        ("end_date", Bound { end: true, form: BoundForm::Date }),
        ("start_ds", Bound { end: false, form: BoundForm::Ds }),
        ("end_ds", Bound { end: true, form: BoundForm::Ds }),
        ("start_ts", Bound { end: false, form: BoundForm::Ts }),
        ("end_ts", Bound { end: true, form: BoundForm::Ts }),
    ];

    /// The marker's name without the `@` (`start_date`).
    pub fn marker(self) -> &'static str {
        Self::ALL.iter().find(|(_, b)| *b == self).map(|(m, _)| *m).expect("every bound has a marker")
    }

    /// The canonical placeholder (`$start_date`): what is fingerprinted and what `render`
    /// prints without an interval.
    pub fn placeholder(self) -> String {
        format!("${}", self.marker())
    }

    /// The SQL literal of this bound of `iv` (half-open `[start, end)`, UTC): the start's
    /// instant, or for an end form the interval's last instant (one microsecond before `end`,
    /// DuckDB's and Postgres's timestamp resolution), so `@end_date` of the day
    /// `[2026-01-01, 2026-01-02)` is `DATE '2026-01-01'`.
    pub fn literal(self, iv: super::interval::Interval) -> String {
        let micros = if self.end { iv.end.saturating_mul(1000).saturating_sub(1) } else { iv.start.saturating_mul(1000) };
        let Ok(ts) = jiff::Timestamp::from_microsecond(micros) else { return "NULL".into() };
        match self.form {
            BoundForm::Date => format!("DATE '{}'", ts.strftime("%Y-%m-%d")),
            BoundForm::Ds => format!("'{}'", ts.strftime("%Y-%m-%d")),
            BoundForm::Ts => format!("'{}'", ts.strftime("%Y-%m-%d %H:%M:%S%.6f")),
        }
    }
}

/// A `ref(...)` call: the target and where it was written.
#[derive(Debug, Clone, PartialEq, Hash, serde::Serialize, serde::Deserialize)]
pub struct RefSite {
    /// The referenced model.
    pub target: ModelName,
    /// File and line of the call.
    pub location: Location,
}

/// A `cols(parent, ...)` call: which columns of which parent, and where.
#[derive(Debug, Clone, PartialEq, Hash, serde::Serialize, serde::Deserialize)]
pub struct ColsSite {
    /// The parent whose declared schema must contain every column.
    pub parent: ModelName,
    /// Column names, in the order given.
    pub columns: Vec<String>,
    /// File and line of the call.
    pub location: Location,
}

/// A model body.
#[derive(Debug, Clone, PartialEq, Default, Hash, serde::Serialize, serde::Deserialize)]
pub struct Fragment {
    /// Pieces in order; adjacent texts are merged.
    pub nodes: Vec<Node>,
}

/// A `ref()` or `cols()` call placed inside a string literal, a quoted identifier or a comment of
/// a body's text ([`Fragment::quoted_sites`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QuotedSite<'a> {
    /// The call: a [`Node::Ref`] or a [`Node::Cols`].
    pub node: &'a Node,
    /// What holds it: `a string literal`, `a quoted identifier` or `a comment`.
    pub inside: &'static str,
}

/// Decides how references and bounds render.
pub trait Resolver {
    /// SQL for a reference to `model`.
    fn relation(&self, model: &ModelName) -> String;
    /// SQL for `@start`.
    fn start(&self) -> String;
    /// SQL for `@end`.
    fn end(&self) -> String;
    /// SQL for a bound in another form (`@start_date`, …): by default its placeholder.
    fn bound(&self, b: Bound) -> String {
        b.placeholder()
    }
    /// SQL for `@this` in the body of `model`: by default the placeholder relation `"@this"`
    /// (what is fingerprinted: never the model's own name, which every name-following analysis
    /// — lineage, the batch lint — would follow back into the model itself).
    fn this(&self, model: &ModelName) -> String {
        let _ = model;
        THIS_PLACEHOLDER.to_string()
    }
}

/// The canonical text of `@this`: a quoted identifier no model can be named.
pub const THIS_PLACEHOLDER: &str = "\"@this\"";

impl Fragment {
    /// Appends text, merging with a preceding text node.
    pub fn push_text(&mut self, s: &str) {
        if s.is_empty() {
            return;
        }
        if let Some(Node::Text(t)) = self.nodes.last_mut() {
            t.push_str(s);
        } else {
            self.nodes.push(Node::Text(s.to_string()));
        }
    }

    /// Splits literal SQL on the `@start` / `@end` markers (and their other forms, [`Bound`])
    /// and appends it. Markers count only as whole words outside string literals, quoted
    /// identifiers and comments.
    pub fn push_sql_with_bounds(&mut self, s: &str) {
        let bytes = s.as_bytes();
        let word = |b: Option<&u8>| b.is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'_');
        let mut last = 0;
        let mut i = 0;
        while i < bytes.len() {
            if let Some(end) = skip_literal_or_comment(bytes, i) {
                i = end;
                continue;
            }
            if bytes[i] == b'@' {
                let rest = &s[i + 1..];
                let form = Bound::ALL.iter().find(|(m, _)| rest.starts_with(m) && !word(rest.as_bytes().get(m.len())));
                let hit = if let Some((m, b)) = form {
                    Some((Node::Bound(*b), m.len() + 1))
                } else if rest.starts_with("start") {
                    Some((Node::Start, 6))
                } else if rest.starts_with("end") {
                    Some((Node::End, 4))
                } else {
                    None
                };
                if let Some((node, len)) = hit {
                    let before = if i == 0 { None } else { bytes.get(i - 1) };
                    if !word(bytes.get(i + len)) && !word(before) {
                        self.push_text(&s[last..i]);
                        self.nodes.push(node);
                        i += len;
                        last = i;
                        continue;
                    }
                }
            }
            i += 1;
        }
        self.push_text(&s[last..]);
    }

    /// Turns every `@this` marker of the text nodes (a whole word, outside string literals,
    /// quoted identifiers and comments) into [`Node::This`] of `model`.
    pub fn bind_this(&mut self, model: &ModelName) {
        if !self.nodes.iter().any(|n| matches!(n, Node::Text(t) if t.contains("@this"))) {
            return;
        }
        let word = |b: Option<&u8>| b.is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'_');
        let mut out = Fragment::default();
        for n in std::mem::take(&mut self.nodes) {
            let Node::Text(s) = n else {
                out.nodes.push(n);
                continue;
            };
            let bytes = s.as_bytes();
            let (mut last, mut i) = (0, 0);
            while i < bytes.len() {
                if let Some(end) = skip_literal_or_comment(bytes, i) {
                    i = end;
                    continue;
                }
                if bytes[i..].starts_with(b"@this") && !word(bytes.get(i + 5)) && !(i > 0 && word(bytes.get(i - 1))) {
                    out.push_text(&s[last..i]);
                    out.nodes.push(Node::This(model.clone()));
                    i += 5;
                    last = i;
                    continue;
                }
                i += 1;
            }
            out.push_text(&s[last..]);
        }
        *self = out;
    }

    /// The `@word` markers of the text nodes that no rule gives a meaning (whole words outside
    /// string literals, quoted identifiers and comments, not a call `@name(`): what is left after
    /// the bounds and `@this` are taken, e.g. sqlmesh's `@start_millis`. DuckDB and Postgres read
    /// `@x` as `abs(x)`: such a marker would filter silently on a column of that name.
    pub fn unknown_markers(&self) -> Vec<String> {
        // One text: a literal or comment may span a `ref()`/`cols()` call (each a plain token).
        let s: String = self.nodes.iter().map(|n| if let Node::Text(t) = n { t.as_str() } else { " r " }).collect();
        let mut out: Vec<String> = Vec::new();
        for (name, call) in at_words(&s) {
            if !call && name != "this_model" && !out.iter().any(|o| *o == name) {
                out.push(name.to_string());
            }
        }
        out
    }

    /// The `ref()`/`cols()` calls of the body placed inside a string literal, a quoted identifier
    /// or a comment of its text (the lexical rule of [`skip_literal_or_comment`], over the whole
    /// text: a literal may open before a call and close after it), in order of appearance. Such
    /// a call reads nothing: it renders the relation's SQL text (a quoted, qualified name) into
    /// the literal, where its quotes end the literal early, or into the comment.
    pub fn quoted_sites(&self) -> Vec<QuotedSite<'_>> {
        // One text, each non-text node a plain token; the offsets of the calls' tokens.
        let mut s = String::new();
        let mut calls: Vec<(usize, &Node)> = Vec::new();
        for n in &self.nodes {
            match n {
                Node::Text(t) => s.push_str(t),
                Node::Ref(_) | Node::Cols(_) => {
                    calls.push((s.len() + 1, n));
                    s.push_str(" r ");
                }
                _ => s.push_str(" r "),
            }
        }
        let mut out = Vec::new();
        if calls.is_empty() {
            return out;
        }
        let bytes = s.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            let Some(end) = skip_literal_or_comment(bytes, i) else {
                i += 1;
                continue;
            };
            let inside = match bytes[i] {
                b'\'' | b'$' => "a string literal",
                b'"' => "a quoted identifier",
                _ => "a comment",
            };
            out.extend(calls.iter().filter(|(at, _)| *at > i && *at < end).map(|(_, node)| QuotedSite { node, inside }));
            i = end;
        }
        out
    }

    /// True when the body reads its own table (`@this`).
    pub fn reads_itself(&self) -> bool {
        self.nodes.iter().any(|n| matches!(n, Node::This(_)))
    }

    /// Every reference, in order of appearance.
    pub fn refs(&self) -> impl Iterator<Item = &RefSite> {
        self.nodes.iter().filter_map(|n| match n {
            Node::Ref(r) => Some(r),
            _ => None,
        })
    }

    /// Every column list, in order of appearance.
    pub fn cols(&self) -> impl Iterator<Item = &ColsSite> {
        self.nodes.iter().filter_map(|n| match n {
            Node::Cols(c) => Some(c),
            _ => None,
        })
    }

    /// True when the body uses `@start` or `@end` (or another form of them).
    pub fn uses_bounds(&self) -> bool {
        self.nodes.iter().any(|n| matches!(n, Node::Start | Node::End | Node::Bound(_)))
    }

    /// Renders the body with `resolver`.
    pub fn render(&self, resolver: &dyn Resolver) -> String {
        let mut out = String::new();
        for n in &self.nodes {
            match n {
                Node::Text(t) => out.push_str(t),
                Node::Ref(r) => out.push_str(&resolver.relation(&r.target)),
                Node::Cols(c) => {
                    let list: Vec<String> = c.columns.iter().map(|c| quote_ident(c)).collect();
                    out.push_str(&list.join(", "));
                }
                Node::Start => out.push_str(&resolver.start()),
                Node::End => out.push_str(&resolver.end()),
                Node::Bound(b) => out.push_str(&resolver.bound(*b)),
                Node::This(m) => out.push_str(&resolver.this(m)),
            }
        }
        out
    }
}

/// When a string literal, quoted identifier or comment starts at `bytes[i]`, the index just past
/// it (a doubled quote stays inside a quoted run; an unterminated run ends the text). The one
/// lexical rule every scan of model SQL for markers (`@start`, `@end`, `@ref(…)`) follows.
pub fn skip_literal_or_comment(bytes: &[u8], i: usize) -> Option<usize> {
    let n = bytes.len();
    match bytes.get(i)? {
        q @ (b'\'' | b'"') => {
            // An escape string (`E'it\'s'`, Postgres and DuckDB): a backslash escapes the next
            // byte. `E` begins the token only when no identifier byte comes before it.
            let escapes = *q == b'\''
                && i > 0
                && matches!(bytes[i - 1], b'E' | b'e')
                && (i < 2 || !(bytes[i - 2].is_ascii_alphanumeric() || bytes[i - 2] == b'_' || bytes[i - 2] >= 0x80));
            let mut j = i + 1;
            while j < n {
                if escapes && bytes[j] == b'\\' {
                    j += 2;
                    continue;
                }
                if bytes[j] == *q {
                    if bytes.get(j + 1) == Some(q) {
                        j += 2;
                        continue;
                    }
                    return Some(j + 1);
                }
                j += 1;
            }
            Some(n)
        }
        b'-' if bytes.get(i + 1) == Some(&b'-') => Some(bytes[i..].iter().position(|b| *b == b'\n').map_or(n, |p| i + p)),
        b'/' if bytes.get(i + 1) == Some(&b'*') => {
            // Block comments nest (Postgres and DuckDB): `/* a /* b */ c */` is one comment.
            let (mut j, mut depth) = (i + 2, 1usize);
            while j + 1 < n {
                if bytes[j] == b'/' && bytes[j + 1] == b'*' {
                    depth += 1;
                    j += 2;
                } else if bytes[j] == b'*' && bytes[j + 1] == b'/' {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        return Some(j);
                    }
                } else {
                    j += 1;
                }
            }
            Some(n)
        }
        // A dollar-quoted string (`$$…$$`, `$tag$…$tag$`: Postgres and DuckDB), not a `$1`
        // parameter or a `$start` placeholder: the tag is empty or an identifier, closed by `$`,
        // and the `$` does not continue an identifier.
        b'$' if i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_') => {
            let tag_end = i + 1 + bytes[i + 1..].iter().take_while(|b| b.is_ascii_alphanumeric() || **b == b'_').count();
            if bytes.get(tag_end) != Some(&b'$') || bytes.get(i + 1).is_some_and(u8::is_ascii_digit) {
                return None;
            }
            let tag = &bytes[i..=tag_end];
            let body = tag_end + 1;
            Some(bytes[body..].windows(tag.len()).position(|w| w == tag).map_or(n, |p| body + p + tag.len()))
        }
        _ => None,
    }
}

/// Renders references as logical names (`schema.table`) and bounds as the placeholders
/// `$start` / `$end`: the text that is canonicalised and fingerprinted, and what
/// `efmesh render` prints without `--env`.
pub struct CanonicalResolver;

impl Resolver for CanonicalResolver {
    fn relation(&self, model: &ModelName) -> String {
        model.to_string()
    }
    fn start(&self) -> String {
        "$start".into()
    }
    fn end(&self) -> String {
        "$end".into()
    }
}

/// Each `@word` of `s` outside string literals, quoted identifiers and comments, in order: the
/// word and whether it is called (`@name(`). Operators (`@>`, `<@`, `@@`, `x@y`) are no words.
/// DuckDB and Postgres read `@x` as `abs(x)`: what gives such a word a meaning (a marker, a macro
/// call) is the caller's to say ([`Fragment::unknown_markers`],
/// [`crate::core::audit::AuditSql::at_words`]).
pub fn at_words(s: &str) -> Vec<(&str, bool)> {
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b >= 0x80;
    // (Not the end of an operator: `<@`, `^@`, `@@`, `&@`, …)
    let operator = |b: u8| word(b) || b"@<^&|~!#?".contains(&b);
    let bytes = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if let Some(end) = skip_literal_or_comment(bytes, i) {
            i = end;
            continue;
        }
        let starts =
            bytes[i] == b'@' && (i == 0 || !operator(bytes[i - 1])) && bytes.get(i + 1).is_some_and(|b| b.is_ascii_alphabetic() || *b == b'_' || *b >= 0x80);
        if starts {
            let len = bytes[i + 1..].iter().take_while(|b| word(**b)).count();
            let call = bytes[i + 1 + len..].iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'(');
            out.push((&s[i + 1..i + 1 + len], call));
            i += 1 + len;
            continue;
        }
        i += 1;
    }
    out
}

#[cfg(test)]
mod dollar_quote_tests {
    use super::skip_literal_or_comment;

    #[test]
    fn dollar_quoted_strings_are_skipped_whole_and_parameters_are_not_strings() {
        let t = b"x $$a;b$$ y";
        assert_eq!(skip_literal_or_comment(t, 2), Some(9));
        let t = b"$q$it's; $$ $q$;";
        assert_eq!(skip_literal_or_comment(t, 0), Some(15));
        assert_eq!(skip_literal_or_comment(b"$1 + $2", 0), None);
        assert_eq!(skip_literal_or_comment(b"$start AND", 0), None);
        assert_eq!(skip_literal_or_comment(b"a$b$", 1), None);
    }

    #[test]
    fn an_escape_string_ends_at_its_unescaped_quote_and_a_plain_one_at_its_first() {
        // `E'it\'s @x'`: the backslash escapes the quote (DuckDB reads `it's @x`).
        let t = br"SELECT E'it\'s @x' AS v";
        assert_eq!(skip_literal_or_comment(t, 8), Some(18));
        // `e'a\\'`: an escaped backslash, then the closing quote.
        assert_eq!(skip_literal_or_comment(br"SELECT e'a\\' AS v", 8), Some(13));
        // Not an `E` prefix (an identifier ends with it), and a plain string: the first quote.
        assert_eq!(skip_literal_or_comment(br"SELECT typE'a\'", 11), Some(15));
        assert_eq!(skip_literal_or_comment(br"SELECT 'a\' AS v", 7), Some(11));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_are_split_on_word_boundaries_only() {
        let mut f = Fragment::default();
        f.push_sql_with_bounds("WHERE t >= @start AND t < @end AND x = '@ended' AND y=@start_x AND z = 'it''s @start' -- @end\n /* @start */ AND \"@end\" = 1");
        let starts = f.nodes.iter().filter(|n| matches!(n, Node::Start)).count();
        let ends = f.nodes.iter().filter(|n| matches!(n, Node::End)).count();
        assert_eq!((starts, ends), (1, 1));
        assert_eq!(
            f.render(&CanonicalResolver),
            "WHERE t >= $start AND t < $end AND x = '@ended' AND y=@start_x AND z = 'it''s @start' -- @end\n /* @start */ AND \"@end\" = 1"
        );
    }

    #[test]
    fn end_forms_are_the_last_instant_of_the_interval() {
        use super::super::interval::{Interval, parse_instant};
        let day = Interval::new(parse_instant("2026-01-01").unwrap(), parse_instant("2026-01-02").unwrap());
        let lit = |m: &str, iv| Bound::ALL.iter().find(|(k, _)| *k == m).unwrap().1.literal(iv);
        assert_eq!(lit("start_date", day), "DATE '2026-01-01'");
        assert_eq!(lit("end_date", day), "DATE '2026-01-01'");
        assert_eq!(lit("start_ds", day), "'2026-01-01'");
        assert_eq!(lit("end_ds", day), "'2026-01-01'");
        assert_eq!(lit("start_ts", day), "'2026-01-01 00:00:00.000000'");
        assert_eq!(lit("end_ts", day), "'2026-01-01 23:59:59.999999'");
        let hour = Interval::new(parse_instant("2026-03-01 23:00").unwrap(), parse_instant("2026-03-02").unwrap());
        assert_eq!(lit("end_date", hour), "DATE '2026-03-01'");
        let week = Interval::new(parse_instant("2026-01-01").unwrap(), parse_instant("2026-01-08").unwrap());
        assert_eq!(lit("end_date", week), "DATE '2026-01-07'");
    }

    #[test]
    fn this_is_bound_to_the_model_outside_literals_only() {
        let mut f = Fragment::default();
        f.push_sql_with_bounds("SELECT t FROM @this AS p WHERE p.t < @start AND x = '@this' AND @thisx = 1 -- @this\n");
        let name = ModelName::parse("s.running").unwrap();
        f.bind_this(&name);
        assert!(f.reads_itself());
        assert_eq!(f.nodes.iter().filter(|n| matches!(n, Node::This(m) if *m == name)).count(), 1);
        assert_eq!(f.render(&CanonicalResolver), "SELECT t FROM \"@this\" AS p WHERE p.t < $start AND x = '@this' AND @thisx = 1 -- @this\n");
    }

    #[test]
    fn unknown_markers_are_whole_words_outside_literals_and_calls() {
        let mut f = Fragment::default();
        f.push_sql_with_bounds(
            "SELECT '@x', \"@y\", @start_millis, @m(1), @m (2), a@b, @start, @@z, j @> '{}' -- @c\n/* @d /* @e */ @f */ @this, @execution_ds, l<@k, s^@t, @größe, @start_millis",
        );
        f.bind_this(&ModelName::parse("s.t").unwrap());
        assert_eq!(f.unknown_markers(), ["start_millis", "execution_ds", "größe"]);
        // A literal spanning a `ref()` call.
        let mut g = Fragment::default();
        g.push_text("SELECT 'read from ");
        g.nodes.push(Node::Ref(RefSite { target: ModelName::parse("s.u").unwrap(), location: Location { file: "m.lua".into(), line: 1 } }));
        g.push_text(" by @me' AS x, @ours");
        assert_eq!(g.unknown_markers(), ["ours"]);
    }

    /// A call inside a literal, a quoted identifier or a comment (opened before it, closed after
    /// it) is found; one beside a literal, or after a `--` held in a literal, is not.
    #[test]
    fn calls_inside_literals_and_comments_are_quoted_sites() {
        let at = Location { file: "m.lua".into(), line: 1 };
        let body = |pieces: &[Option<&str>]| {
            let mut f = Fragment::default();
            for p in pieces {
                match p {
                    Some(t) => f.push_text(t),
                    None => f.nodes.push(Node::Ref(RefSite { target: ModelName::parse("s.u").unwrap(), location: at.clone() })),
                }
            }
            f
        };
        let inside = |f: &Fragment| f.quoted_sites().iter().map(|q| q.inside).collect::<Vec<_>>();
        assert_eq!(inside(&body(&[Some("SELECT 'read from "), None, Some("' AS x FROM "), None])), ["a string literal"]);
        assert_eq!(inside(&body(&[Some("SELECT x FROM \""), None, Some("\"")])), ["a quoted identifier"]);
        assert_eq!(inside(&body(&[Some("SELECT x -- from "), None, Some("\nFROM "), None, Some(" /* "), None, Some(" */")])), ["a comment", "a comment"]);
        assert_eq!(inside(&body(&[Some("SELECT $$"), None, Some("$$ AS x")])), ["a string literal"]);
        assert!(inside(&body(&[Some("SELECT 'a' || '--' AS d, '' AS e FROM "), None, Some(" WHERE x <> ''")])).is_empty());
        assert!(inside(&body(&[Some("SELECT x FROM "), None, Some(" JOIN "), None, Some(" USING (x)")])).is_empty());
    }

    #[test]
    fn other_bound_forms_are_markers_of_their_own() {
        let mut f = Fragment::default();
        f.push_sql_with_bounds(
            "WHERE d BETWEEN @start_date AND @end_date AND s >= @start_ds AND s <= @end_ds AND t < @end_ts AND u = @start_dates AND v = '@end_date'",
        );
        let forms: Vec<Bound> = f.nodes.iter().filter_map(|n| if let Node::Bound(b) = n { Some(*b) } else { None }).collect();
        assert_eq!(forms.iter().map(|b| b.marker()).collect::<Vec<_>>(), ["start_date", "end_date", "start_ds", "end_ds", "end_ts"]);
        assert!(f.uses_bounds());
        assert_eq!(
            f.render(&CanonicalResolver),
            "WHERE d BETWEEN $start_date AND $end_date AND s >= $start_ds AND s <= $end_ds AND t < $end_ts AND u = @start_dates AND v = '@end_date'"
        );
    }
}
