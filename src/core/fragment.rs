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

/// Decides how references and bounds render.
pub trait Resolver {
    /// SQL for a reference to `model`.
    fn relation(&self, model: &ModelName) -> String;
    /// SQL for `@start`.
    fn start(&self) -> String;
    /// SQL for `@end`.
    fn end(&self) -> String;
}

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

    /// Splits literal SQL on the `@start` / `@end` markers and appends it. Markers count only
    /// as whole words outside string literals, quoted identifiers and comments.
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
                let hit = if rest.starts_with("start") {
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

    /// True when the body uses `@start` or `@end`.
    pub fn uses_bounds(&self) -> bool {
        self.nodes.iter().any(|n| matches!(n, Node::Start | Node::End))
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
            let mut j = i + 1;
            while j < n {
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
            let mut j = i + 2;
            while j + 1 < n && !(bytes[j] == b'*' && bytes[j + 1] == b'/') {
                j += 1;
            }
            Some((j + 2).min(n))
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
}
