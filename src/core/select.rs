//! Model selection expressions, like dbt's `--select`: which models of the DAG a command looks at.
//!
//! An expression is a union of terms separated by commas or whitespace (`a.b, +c.d e.f+`). A
//! term is an atom with optional graph operators:
//!
//! | term | selects |
//! | --- | --- |
//! | `s.m` | the model `s.m` |
//! | `+s.m` | `s.m` and all its ancestors |
//! | `s.m+` | `s.m` and all its descendants |
//! | `+s.m+` | both |
//! | `2+s.m`, `s.m+1` | ancestors (descendants) up to that many edges away |
//! | `kind:view` | every model of that kind (the kind tags of model files) |
//! | `schema:raw` | every model of that schema |
//! | `tag:finance` | every model carrying that tag (the `tags` model property) |
//!
//! The operators apply to method atoms too (`kind:external+` is every external model and what
//! reads it). Unlike dbt, a comma is a union, as in efmesh's other model lists (`--model a,b`);
//! Pure: evaluated against a
//! [`Dag`], no I/O. Unknown models and kinds are errors with a "did you mean" hint.

use super::dag::Dag;
use super::error::did_you_mean;
use super::name::ModelName;
use std::collections::BTreeSet;

/// Kind tags `kind:` accepts (those of [`super::Kind::tag`]).
const KINDS: [&str; 9] =
    ["full", "view", "embedded", "incremental_by_time_range", "external", "seed", "incremental_by_unique_key", "scd_type2", "incremental_by_partition"];

/// How far a graph operator reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Depth {
    /// Every ancestor (descendant).
    All,
    /// Up to this many edges away.
    Edges(usize),
}

/// What a term starts from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Atom {
    /// One model by name, as written.
    Model(String),
    /// Every model of a kind (`kind:view`).
    Kind(String),
    /// Every model of a schema (`schema:raw`).
    Schema(String),
    /// Every model carrying a tag (`tag:finance`).
    Tag(String),
}

/// One term of a selection: an atom, with its ancestors and descendants when asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Term {
    /// The models the term starts from.
    pub atom: Atom,
    /// `+atom` / `N+atom`.
    pub ancestors: Option<Depth>,
    /// `atom+` / `atom+N`.
    pub descendants: Option<Depth>,
}

/// A parsed selection expression: the union of its terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selection {
    /// The terms, in the order written.
    pub terms: Vec<Term>,
}

/// Why an expression does not parse or does not select against a DAG.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectError {
    /// No term at all.
    #[error("empty selection: give at least one model, `+model`, `model+`, `kind:K`, `schema:S` or `tag:T`")]
    Empty,
    /// A term that is not of the grammar.
    #[error("cannot read selector `{term}`: {reason}")]
    Syntax {
        /// The term as written.
        term: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A model name the project does not have.
    #[error("unknown model `{name}` in selector{}", hint(.suggestion))]
    UnknownModel {
        /// The name as written.
        name: String,
        /// The closest model name.
        suggestion: Option<String>,
    },
    /// A kind that does not exist.
    #[error("unknown kind `{kind}` in selector (kinds: {}){}", KINDS.join(", "), hint(.suggestion))]
    UnknownKind {
        /// The kind as written.
        kind: String,
        /// The closest kind.
        suggestion: Option<String>,
    },
    /// A schema no model has.
    #[error("no model in schema `{schema}`{}", hint(.suggestion))]
    UnknownSchema {
        /// The schema as written.
        schema: String,
        /// The closest schema.
        suggestion: Option<String>,
    },
    /// A tag no model carries.
    #[error("no model is tagged `{tag}`{}", hint(.suggestion))]
    UnknownTag {
        /// The tag as written.
        tag: String,
        /// The closest tag some model carries.
        suggestion: Option<String>,
    },
}

fn hint(suggestion: &Option<String>) -> String {
    suggestion.as_ref().map(|s| format!("\n  hint: did you mean `{s}`?")).unwrap_or_default()
}

impl Selection {
    /// Parses an expression: terms separated by commas or whitespace.
    ///
    /// # Errors
    /// [`SelectError::Empty`] or [`SelectError::Syntax`] naming the term.
    pub fn parse(expr: &str) -> Result<Selection, SelectError> {
        let terms = expr.split(|c: char| c == ',' || c.is_whitespace()).filter(|t| !t.is_empty()).map(parse_term).collect::<Result<Vec<_>, _>>()?;
        if terms.is_empty() {
            return Err(SelectError::Empty);
        }
        Ok(Selection { terms })
    }

    /// The models selected from `dag`, by name (the caller keeps the DAG's order).
    ///
    /// # Errors
    /// An atom naming a model, kind or schema the DAG does not have.
    pub fn eval(&self, dag: &Dag) -> Result<BTreeSet<ModelName>, SelectError> {
        let mut out = BTreeSet::new();
        for term in &self.terms {
            let seeds = seeds(&term.atom, dag)?;
            if let Some(depth) = term.ancestors {
                out.extend(walk(&seeds, depth, |n| dag.get(n).map(|m| m.parents().into_iter().collect()).unwrap_or_default()));
            }
            if let Some(depth) = term.descendants {
                out.extend(walk(&seeds, depth, |n| dag.children(n).cloned().collect()));
            }
            out.extend(seeds);
        }
        Ok(out)
    }
}

fn parse_term(raw: &str) -> Result<Term, SelectError> {
    let err = |reason: &str| SelectError::Syntax { term: raw.to_string(), reason: reason.to_string() };
    let depth = |digits: &str| -> Result<Depth, SelectError> {
        if digits.is_empty() {
            return Ok(Depth::All);
        }
        digits.parse::<usize>().map(Depth::Edges).map_err(|_| err("the depth of `+` must be a whole number"))
    };
    let mut rest = raw;
    let mut ancestors = None;
    // `N+name` / `+name`: digits then a `+` at the front.
    let lead = rest.chars().take_while(char::is_ascii_digit).count();
    if rest[lead..].starts_with('+') {
        ancestors = Some(depth(&rest[..lead])?);
        rest = &rest[lead + 1..];
    } else if lead > 0 {
        return Err(err("a leading number must be followed by `+` (`2+model`)"));
    }
    // `name+` / `name+N`: the last `+` and digits after it.
    let mut descendants = None;
    if let Some(i) = rest.rfind('+') {
        let after = &rest[i + 1..];
        if !after.chars().all(|c| c.is_ascii_digit()) {
            return Err(err("`+` may only come first (`+model`, `2+model`) or last (`model+`, `model+2`)"));
        }
        descendants = Some(depth(after)?);
        rest = &rest[..i];
    }
    if rest.is_empty() {
        return Err(err("no model or method between the `+`"));
    }
    if rest.contains('+') {
        return Err(err("`+` may only come first (`+model`, `2+model`) or last (`model+`, `model+2`)"));
    }
    let atom = match rest.split_once(':') {
        None => Atom::Model(rest.to_string()),
        Some(("kind", v)) if !v.is_empty() => Atom::Kind(v.to_string()),
        Some(("schema", v)) if !v.is_empty() => Atom::Schema(v.to_string()),
        Some(("tag", v)) if !v.is_empty() => Atom::Tag(v.to_string()),
        Some((m, _)) if m == "kind" || m == "schema" || m == "tag" => return Err(err(&format!("`{m}:` needs a value"))),
        Some((m, _)) => return Err(err(&format!("unknown method `{m}:`; methods are `kind:`, `schema:` and `tag:`"))),
    };
    Ok(Term { atom, ancestors, descendants })
}

fn seeds(atom: &Atom, dag: &Dag) -> Result<BTreeSet<ModelName>, SelectError> {
    match atom {
        Atom::Model(name) => match ModelName::parse(name).ok().filter(|n| dag.get(n).is_some()) {
            Some(n) => Ok(BTreeSet::from([n])),
            None => Err(SelectError::UnknownModel { name: name.clone(), suggestion: dag.suggest(name) }),
        },
        Atom::Kind(kind) => {
            if !KINDS.contains(&kind.as_str()) {
                return Err(SelectError::UnknownKind { kind: kind.clone(), suggestion: did_you_mean(kind, KINDS).map(str::to_string) });
            }
            Ok(dag.models().filter(|m| m.kind.tag() == kind).map(|m| m.name.clone()).collect())
        }
        Atom::Schema(schema) => {
            let found: BTreeSet<ModelName> = dag.models().filter(|m| m.name.schema() == schema).map(|m| m.name.clone()).collect();
            if found.is_empty() {
                let schemas: BTreeSet<&str> = dag.models().map(|m| m.name.schema()).collect();
                return Err(SelectError::UnknownSchema { schema: schema.clone(), suggestion: did_you_mean(schema, schemas).map(str::to_string) });
            }
            Ok(found)
        }
        Atom::Tag(tag) => {
            let found: BTreeSet<ModelName> = dag.models().filter(|m| m.tags.iter().any(|t| t == tag)).map(|m| m.name.clone()).collect();
            if found.is_empty() {
                let tags: BTreeSet<&str> = dag.models().flat_map(|m| m.tags.iter().map(String::as_str)).collect();
                return Err(SelectError::UnknownTag { tag: tag.clone(), suggestion: did_you_mean(tag, tags).map(str::to_string) });
            }
            Ok(found)
        }
    }
}

/// The models reached from `start` through `next`, at most `depth` edges away (`start` excluded
/// unless reached again, which a DAG never does).
fn walk(start: &BTreeSet<ModelName>, depth: Depth, next: impl Fn(&ModelName) -> Vec<ModelName>) -> BTreeSet<ModelName> {
    let limit = match depth {
        Depth::All => usize::MAX,
        Depth::Edges(n) => n,
    };
    let mut seen = BTreeSet::new();
    let mut frontier: Vec<ModelName> = start.iter().cloned().collect();
    let mut level = 0;
    while !frontier.is_empty() && level < limit {
        let mut following = Vec::new();
        for n in &frontier {
            for m in next(n) {
                if seen.insert(m.clone()) {
                    following.push(m);
                }
            }
        }
        frontier = following;
        level += 1;
    }
    seen
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::{Kind, Model};

    /// raw.a → s.b → s.c → s.d, raw.a → s.e (a view), s.f alone.
    fn dag() -> Dag {
        Dag::build(vec![
            Model::fixture("raw.a", Kind::Full, &[]),
            Model::fixture("s.b", Kind::Full, &["raw.a"]),
            Model::fixture("s.c", Kind::Full, &["s.b"]),
            Model::fixture("s.d", Kind::Full, &["s.c"]),
            Model::fixture("s.e", Kind::View, &["raw.a"]),
            Model::fixture("s.f", Kind::Full, &[]),
        ])
        .unwrap()
    }

    fn names(expr: &str) -> Vec<String> {
        Selection::parse(expr).unwrap().eval(&dag()).unwrap().iter().map(ToString::to_string).collect()
    }

    #[test]
    fn graph_operators_select_ancestors_and_descendants_to_a_depth() {
        assert_eq!(names("s.c"), ["s.c"]);
        assert_eq!(names("+s.c"), ["raw.a", "s.b", "s.c"]);
        assert_eq!(names("s.c+"), ["s.c", "s.d"]);
        assert_eq!(names("+s.c+"), ["raw.a", "s.b", "s.c", "s.d"]);
        assert_eq!(names("1+s.d"), ["s.c", "s.d"]);
        assert_eq!(names("2+s.d"), ["s.b", "s.c", "s.d"]);
        assert_eq!(names("raw.a+1"), ["raw.a", "s.b", "s.e"]);
        assert_eq!(names("0+s.d"), ["s.d"]);
    }

    #[test]
    fn terms_separated_by_commas_or_spaces_are_a_union() {
        assert_eq!(names("s.f, s.e"), ["s.e", "s.f"]);
        assert_eq!(names("s.f s.d,s.e"), ["s.d", "s.e", "s.f"]);
        assert_eq!(names("kind:view"), ["s.e"]);
        assert_eq!(names("+kind:view"), ["raw.a", "s.e"]);
        assert_eq!(names("schema:raw+1 s.f"), ["raw.a", "s.b", "s.e", "s.f"]);
    }

    #[test]
    fn unknown_names_are_errors_with_a_hint() {
        let e = Selection::parse("+s.cc").unwrap().eval(&dag()).unwrap_err();
        assert_eq!(e, SelectError::UnknownModel { name: "s.cc".into(), suggestion: Some("s.c".into()) });
        assert!(e.to_string().contains("unknown model `s.cc` in selector\n  hint: did you mean `s.c`?"), "{e}");
        let e = Selection::parse("kind:veiw").unwrap().eval(&dag()).unwrap_err();
        assert!(e.to_string().contains("did you mean `view`?"), "{e}");
        let e = Selection::parse("schema:rwa").unwrap().eval(&dag()).unwrap_err();
        assert!(e.to_string().contains("no model in schema `rwa`") && e.to_string().contains("did you mean `raw`?"), "{e}");
        let e = Selection::parse("nothing.here").unwrap().eval(&dag()).unwrap_err();
        assert_eq!(e, SelectError::UnknownModel { name: "nothing.here".into(), suggestion: None });
    }

    #[test]
    fn tags_select_the_models_carrying_them() {
        let mut models: Vec<Model> = dag().models().cloned().collect();
        for m in &mut models {
            match m.name.to_string().as_str() {
                "s.b" => m.tags = vec!["finance".into(), "daily".into()],
                "s.e" => m.tags = vec!["finance".into()],
                _ => {}
            }
        }
        let dag = Dag::build(models).unwrap();
        let sel = |e: &str| Selection::parse(e).unwrap().eval(&dag).map(|s| s.iter().map(ToString::to_string).collect::<Vec<_>>());
        assert_eq!(sel("tag:finance").unwrap(), ["s.b", "s.e"]);
        assert_eq!(sel("tag:daily+").unwrap(), ["s.b", "s.c", "s.d"]);
        let e = sel("tag:finanse").unwrap_err();
        assert!(e.to_string().contains("no model is tagged `finanse`") && e.to_string().contains("did you mean `finance`?"), "{e}");
    }

    #[test]
    fn malformed_terms_are_refused() {
        assert_eq!(Selection::parse(" , "), Err(SelectError::Empty));
        for bad in ["+", "s.a+b", "2s.a", "a+.b", "tag:", "owner:me", "kind:", "s.a+x"] {
            assert!(matches!(Selection::parse(bad), Err(SelectError::Syntax { .. })), "{bad}");
        }
        let t = &Selection::parse("3+s.a+").unwrap().terms[0];
        assert_eq!((t.ancestors, t.descendants), (Some(Depth::Edges(3)), Some(Depth::All)));
    }
}
