//! The audit registry a script host keeps during one load: every `define_audit` (the built-ins
//! from `stdlib/`, then the project's), looked up by name when a model attaches an audit.
//!
//! Language-neutral: the host stores its own callable body next to each [`AuditDef`]. Lookups
//! happen where the audit is attached, so a definition must be evaluated first: the built-ins
//! are, and so are files matched by `[project] audits` (default `audits/**/*.{lua,rhai,sql}`),
//! evaluated before any model file; otherwise `require`/`import` the defining file. A name
//! the host's own registry lacks is looked up in the other languages' definitions
//! ([`super::foreign::Foreign::render_audit`]).

use crate::core::audit::{Audit, AuditDef, AuditSql, Bound, THIS};
use crate::core::error::did_you_mean;
use crate::core::fragment::RefSite;
use crate::core::{LoadError, Location, ModelName};
use crate::script::builder::{Site, Sites};
use serde_json::{Map, Value};
use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap, HashSet};

/// Source name of the built-in Lua audits, as locations show it.
pub const LUA_BUILTINS: &str = "efmesh:audits.lua";
/// Source name of the built-in Rhai audits, as locations show it.
pub const RHAI_BUILTINS: &str = "efmesh:audits.rhai";

/// The budget of the verification calls of one audit use ([`Answers::checks`]), as a multiple
/// of the file's budget (time, and work where a host counts it). They run outside the file's
/// budget, each use's under a budget of its own (not one shared by the uses of a file: a body
/// costly for its first use's arguments only is called with them again at every later use), so
/// a pure body that fits the file's budget once per use always loads: its verification calls
/// at a use are at most two calls that each fit it (a call again, and one with the first use's
/// arguments). A file's verification calls take at most its number of uses times this.
pub const VERIFY_FACTOR: u32 = 2;

/// The verification calls of one file evaluation take at most this many times the file's time
/// budget in all, whatever the number of audit uses (each use's own budget is cut to what is
/// left): loading a file always ends within a bound.
pub const VERIFY_TOTAL_FACTOR: u32 = 10;

/// Definitions by name, each with the host's body `B`.
#[derive(Debug, Clone)]
pub struct Registry<B> {
    defs: BTreeMap<String, (AuditDef, B)>,
}

impl<B> Default for Registry<B> {
    fn default() -> Self {
        Self { defs: BTreeMap::new() }
    }
}

impl<B: Clone> Registry<B> {
    /// Records a definition.
    ///
    /// # Errors
    /// A load error at the definition when the name is taken (built-in names included).
    pub fn define(&mut self, def: AuditDef, body: B) -> Result<(), LoadError> {
        if let Some((first, _)) = self.defs.get(&def.name) {
            let at = if first.location.file.to_string_lossy().starts_with("efmesh:") {
                "a built-in audit".to_string()
            } else {
                format!("defined at {}", first.location)
            };
            return Err(LoadError::new(Some(def.location.clone()), None, format!("audit `{}` is already defined ({at})", def.name))
                .with_hint("give the audit another name"));
        }
        self.defs.insert(def.name.clone(), (def, body));
        Ok(())
    }

    /// Every definition, by name (built-ins included).
    pub fn defs(&self) -> impl Iterator<Item = &AuditDef> {
        self.defs.values().map(|(d, _)| d)
    }

    /// Every name defined.
    pub fn names(&self) -> Vec<String> {
        self.defs.keys().cloned().collect()
    }

    /// The definition named `name` and its body, if defined.
    pub fn get(&self, name: &str) -> Option<(AuditDef, B)> {
        self.defs.get(name).map(|(d, b)| (d.clone(), b.clone()))
    }

    /// The definition named `name` and its body.
    ///
    /// # Errors
    /// A load error at `location` for an unknown name, with a "did you mean".
    pub fn lookup(&self, name: &str, location: &Location) -> Result<(AuditDef, B), LoadError> {
        match self.defs.get(name) {
            Some((d, b)) => Ok((d.clone(), b.clone())),
            None => {
                let mut e = LoadError::new(Some(location.clone()), None, format!("unknown audit `{name}`"));
                e = match did_you_mean(name, self.defs.keys().map(String::as_str)) {
                    Some(s) => e.with_hint(format!("did you mean `{s}`?")),
                    None => e.with_hint("define it with `define_audit` in `audits/` (evaluated before the models), or require/import the file defining it"),
                };
                Err(e)
            }
        }
    }
}

/// Binds a use's arguments, naming the audit and its use site on error.
///
/// # Errors
/// A load error at `location`.
pub fn bind(def: &AuditDef, positional: Vec<Value>, named: Map<String, Value>, location: &Location) -> Result<Bound, LoadError> {
    def.bind(positional, named).map_err(|m| LoadError::new(Some(location.clone()), None, m))
}

/// Turns the text a body returned into the model's audit. A `ref()` the body called (a marker
/// recorded in `sites`) becomes a reference to that model, located at the use (`location`):
/// the model is checked to exist there once every file is loaded.
///
/// # Errors
/// A load error at `location` naming the audit.
pub fn finish(def: &AuditDef, bound: Bound, text: &str, sites: &Sites, location: &Location) -> Result<Audit, LoadError> {
    let marker = |inner: &str| match sites.get(inner) {
        Some(Site::Ref(r)) => Ok(RefSite { target: r.target.clone(), location: location.clone() }),
        Some(Site::Cols(_)) => Err("`cols()` cannot be used in an audit body (`ref()` can)".to_string()),
        None => Err("unknown host marker in the audit body's SQL".to_string()),
    };
    let sql = AuditSql::parse(text, &marker).map_err(|m| LoadError::new(Some(location.clone()), None, format!("audit `{}`: {m}", def.name)))?;
    if let Some(word) = sql.at_words().into_iter().next() {
        return Err(at_word(def, &word, location));
    }
    Ok(Audit::new(def, bound, sql, location.clone()))
}

/// The answers the audit bodies of one interpreter gave, by definition (where it is defined,
/// its name) and bound arguments, with the use that got each first ([`finish_pure`]). Only the
/// definitions evaluated once for every model file ([`Answers::share`]: the built-ins, the
/// audit and macro definition files) are remembered: one a model file's `require`/`import`
/// defines is defined again, with a body of its own, for each file evaluated.
#[derive(Debug, Default)]
pub struct Answers {
    /// The definitions evaluated once for the whole interpreter: name and where defined.
    shared: HashSet<(String, Location)>,
    /// Definition and arguments ([`use_key`]) → the answer (as [`canonical`] gives it) and the
    /// use that got it first.
    seen: HashMap<String, (String, Location)>,
    /// Definition ([`def_key`]) → the arguments of its first use.
    first: HashMap<String, Map<String, Value>>,
}

impl Answers {
    /// Remembers from now on the answers of the definitions `registry` holds: called when the
    /// definition files are evaluated, before the first model file.
    pub fn share<B: Clone>(&mut self, registry: &Registry<B>) {
        self.shared = registry.defs().map(|d| (d.name.clone(), d.location.clone())).collect();
    }

    /// Whether the answers of `def` are remembered.
    fn remembers(&self, def: &AuditDef) -> bool {
        self.shared.contains(&(def.name.clone(), def.location.clone()))
    }

    /// The verification calls a host makes at a use of `def` with `args`, after its first
    /// call ([`finish_pure`]): none for a built-in audit (efmesh's own, pure) nor for arguments
    /// this interpreter already rendered for a remembered definition (its one call is compared
    /// with the recorded answer); otherwise a second call with `args`, and, for a remembered
    /// definition whose first use had other arguments, a call with those.
    pub fn checks(&self, def: &AuditDef, args: &Map<String, Value>) -> Checks {
        if builtin(def) || (self.remembers(def) && self.seen.contains_key(&use_key(def, args))) {
            return Checks { again: false, earlier: None };
        }
        let earlier = if self.remembers(def) { self.first.get(&def_key(def)).filter(|a| *a != args).cloned() } else { None };
        Checks { again: true, earlier }
    }
}

/// The verification calls of a use ([`Answers::checks`]), made after the first call and outside
/// the file's budget (the hosts give each use's a budget of their own, [`VERIFY_FACTOR`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Checks {
    /// Call the body again with the use's arguments.
    pub again: bool,
    /// Call the body with these arguments (those of the definition's first use in this
    /// interpreter).
    pub earlier: Option<Map<String, Value>>,
}

impl Checks {
    /// Whether any verification call is asked for.
    pub fn any(&self) -> bool {
        self.again || self.earlier.is_some()
    }

    /// Makes the verification calls asked for with `call` (one call of the body with the given
    /// arguments), for [`Calls::again`] and [`Calls::earlier`]: again with the use's `args`,
    /// then with the first use's arguments.
    ///
    /// # Errors
    /// The first failing call's.
    #[allow(clippy::type_complexity)]
    pub fn call(
        self,
        args: &Map<String, Value>,
        call: impl Fn(&Map<String, Value>) -> Result<String, LoadError>,
    ) -> Result<(Option<String>, Option<(Map<String, Value>, String)>), LoadError> {
        let again = if self.again { Some(call(args)?) } else { None };
        let earlier = match self.earlier {
            Some(first) => {
                let text = call(&first)?;
                Some((first, text))
            }
            None => None,
        };
        Ok((again, earlier))
    }
}

/// Whether `def` is one of efmesh's built-in audits (`stdlib/`, defined at [`LUA_BUILTINS`] or
/// [`RHAI_BUILTINS`]), which keep no state.
fn builtin(def: &AuditDef) -> bool {
    let file = def.location.file.as_path();
    file == std::path::Path::new(LUA_BUILTINS) || file == std::path::Path::new(RHAI_BUILTINS)
}

/// What a host's calls of an audit body for one use returned ([`finish_pure`]).
#[derive(Debug)]
pub struct Calls {
    /// The first call with the use's arguments.
    pub first: String,
    /// A second call with the same arguments, right after, when [`Checks::again`] asked.
    pub again: Option<String>,
    /// The arguments of [`Checks::earlier`], when given, and what the body returned for them
    /// at this use.
    pub earlier: Option<(Map<String, Value>, String)>,
}

/// [`finish`] for a use whose body was called as [`Calls`] says, refusing a body whose answer
/// depends on state kept between calls (a counter, a table the body fills). An audit file is
/// evaluated once per interpreter, so such a body renders one SQL for the uses a load happens
/// to render first and another for the later ones: whether a model's audit checks anything
/// would depend on which model files the load evaluated before it, on the loader threads and on
/// the load cache (a comment edit re-evaluating one file alone flips it). Refused when
/// - the two calls with the use's arguments answer differently (a counter);
/// - for a remembered definition ([`Answers`]): an earlier use with the same arguments got
///   another answer (such a use calls the body once: that call is compared with the recorded
///   answer), or the body now answers otherwise for the arguments of the definition's first
///   use (state two calls in a row do not reveal: a counter compared with 3).
///
/// A built-in audit (efmesh's own) is not checked: its one call is [`finish`]ed.
///
/// Answers are compared with each `ref()` marker read as the model it names (every `ref()`
/// call gets a marker of its own). State none of these comparisons reveals is not detected.
///
/// # Errors
/// A load error at the use (`location`) naming the audit, where it is defined and both
/// answers; or [`finish`]'s.
pub fn finish_pure(def: &AuditDef, bound: Bound, calls: Calls, sites: &Sites, answers: &mut Answers, location: &Location) -> Result<Audit, LoadError> {
    if builtin(def) {
        return finish(def, bound, &calls.first, sites, location);
    }
    let key = use_key(def, &bound.args);
    let audit = finish(def, bound.clone(), &calls.first, sites, location)?;
    let answer = canonical(&audit.sql);
    let second = match &calls.again {
        Some(again) if *again != calls.first => Some(answer_of(def, bound, again, sites, location)).filter(|s| *s != answer),
        _ => None,
    };
    if answers.remembers(def) {
        // The first answer is remembered even when refused: every later use of a stateful
        // body with these arguments is refused too, not only the first one rendered.
        match answers.seen.entry(key) {
            Entry::Occupied(e) => {
                let (earlier, at) = e.get();
                if *earlier != answer {
                    return Err(stateful(
                        def,
                        format!("`{}` for its use at {at} and then `{}` here for the same arguments", shown(earlier), shown(&answer)),
                        location,
                    ));
                }
            }
            Entry::Vacant(e) => {
                e.insert((answer.clone(), location.clone()));
            }
        }
        answers.first.entry(def_key(def)).or_insert_with(|| audit.args.clone());
        if let Some((args, text)) = calls.earlier {
            let earlier_key = use_key(def, &args);
            let now = answer_of(def, Bound { args, blocking: audit.blocking, scope: audit.scope }, &text, sites, location);
            if let Some((earlier, at)) = answers.seen.get(&earlier_key)
                && *earlier != now
            {
                return Err(stateful(
                    def,
                    format!("`{}` for its use at {at} and then `{}` for that use's arguments when called again for this use", shown(earlier), shown(&now)),
                    location,
                ));
            }
        }
    }
    match second {
        Some(second) => Err(stateful(def, format!("`{}` and then `{}` for the same arguments", shown(&answer), shown(&second)), location)),
        None => Ok(audit),
    }
}

/// The key of a definition in [`Answers`]: where it is defined and its name.
fn def_key(def: &AuditDef) -> String {
    format!("{}\u{0}{}", def.location, def.name)
}

/// The key of a definition's use with `args` in [`Answers`].
fn use_key(def: &AuditDef, args: &Map<String, Value>) -> String {
    format!("{}\u{0}{}", def_key(def), serde_json::to_string(args).unwrap_or_default())
}

/// An audit's SQL as two answers are compared: the relation under audit and each model it
/// references as markers naming them.
fn canonical(sql: &AuditSql) -> String {
    sql.render(THIS, &|m: &ModelName| format!("\u{1}ref {m}\u{2}"))
}

/// The answer a body's `text` gives, as [`finish_pure`] compares it: [`canonical`], or the
/// text itself when it is no audit SQL.
fn answer_of(def: &AuditDef, bound: Bound, text: &str, sites: &Sites, location: &Location) -> String {
    finish(def, bound, text, sites, location).map(|a| canonical(&a.sql)).unwrap_or_else(|_| text.to_string())
}

/// An answer as a message shows it: on one line, the relation under audit as `<relation>`, a
/// referenced model as `ref(name)`.
fn shown(answer: &str) -> String {
    let text = answer.replace(THIS, "<relation>").replace("\u{1}ref ", "ref(").replace('\u{2}', ")").replace('\u{1}', "");
    crate::script::foreign::one_line(&text)
}

/// The load error at a use (`location`) of an audit whose body answered otherwise for the
/// same arguments: `said` shows both answers and the uses that got them.
fn stateful(def: &AuditDef, said: String, location: &Location) -> LoadError {
    LoadError::new(
        Some(location.clone()),
        None,
        format!(
            "audit `{}` ({}) returned {said}: an audit body must depend on its arguments alone (no state kept between calls), or whether the audit checks anything would depend on which model files efmesh evaluated before this one",
            def.name, def.location
        ),
    )
    .with_hint("keep no state the body changes in the audit's file (a counter, a table it fills): build the SQL from the relation and the arguments alone (tables built at the top of the file and only read are fine)")
}

/// The load error at a use (`location`) of an audit whose body returned SQL holding `word`
/// (`@name` or `@name(…)`, [`AuditSql::at_words`]): macros are not expanded in audit bodies and
/// a body's SQL has no markers, so the engine would read it as `abs(…)` and the audit pass
/// falsely.
fn at_word(def: &AuditDef, word: &str, location: &Location) -> LoadError {
    let name = word.trim_start_matches('@');
    let (what, hint) = match name.strip_suffix("(…)") {
        Some(call) => (
            format!("the macro call `{word}`, but macros are not expanded in audit bodies: DuckDB would read it as `abs({call}(…))`"),
            "build that SQL in the body itself (a function of the audit's file), or write an SQL function call without `@`",
        ),
        None => (
            format!(
                "`{word}`, but an audit body's SQL has no `@` markers (the relation under audit is the body's first argument): DuckDB would read it as `abs({name})`"
            ),
            "put the argument's text in the SQL as it is (write `abs(…)` if that was meant)",
        ),
    };
    LoadError::new(Some(location.clone()), None, format!("audit `{}` ({}) returned SQL holding {what}", def.name, def.location)).with_hint(hint)
}

/// The load error for a body that failed.
pub fn body_failed(def: &AuditDef, location: &Location, message: &str) -> LoadError {
    LoadError::new(Some(location.clone()), None, format!("audit `{}` failed to render its SQL: {}", def.name, message.trim_end()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn at(file: &str, line: u32) -> Location {
        Location { file: PathBuf::from(file), line }
    }

    /// `no_nulls(column)`, defined at `audits/no_nulls.lua:2`.
    fn def() -> AuditDef {
        let spec = serde_json::json!({ "name": "no_nulls", "params": ["column"] });
        let Value::Object(spec) = spec else { panic!("an object") };
        AuditDef::from_spec(&spec, at("audits/no_nulls.lua", 2)).expect("a definition")
    }

    /// Answers remembering those of [`def`] (defined in an audit file).
    fn answers() -> Answers {
        let mut registry: Registry<()> = Registry::default();
        registry.define(def(), ()).expect("defined");
        let mut answers = Answers::default();
        answers.share(&registry);
        answers
    }

    fn bound(column: &str) -> Bound {
        def().bind(vec![Value::from(column)], Map::new()).expect("bound")
    }

    fn sql(column: &str, tail: &str) -> String {
        format!("SELECT * FROM {THIS} WHERE {column} IS NULL{tail}")
    }

    /// A use of [`def`] with `column` at `file:line`, its body answering `first`, then `again`
    /// and `earlier` (for the first use's arguments) when [`Answers::checks`] asks for them.
    fn use_(
        answers: &mut Answers,
        sites: &Sites,
        column: &str,
        (first, again, earlier): (&str, &str, &str),
        file: &str,
        line: u32,
    ) -> Result<Audit, LoadError> {
        let bound = bound(column);
        let checks = answers.checks(&def(), &bound.args);
        let again = checks.again.then(|| again.to_string());
        let earlier = checks.earlier.map(|args| (args, earlier.to_string()));
        finish_pure(&def(), bound, Calls { first: first.to_string(), again, earlier }, sites, answers, &at(file, line))
    }

    #[test]
    fn a_body_answering_otherwise_when_called_again_is_refused_naming_the_audit_and_both_answers() {
        let (mut answers, sites) = (answers(), Sites::default());
        let (real, none) = (sql("v", ""), sql("v", " AND false"));
        let e = use_(&mut answers, &sites, "v", (&real, &none, ""), "models/a.lua", 2).expect_err("a counter's answers differ");
        let said = e.to_string();
        assert!(
            said.starts_with(
                "models/a.lua:2: audit `no_nulls` (audits/no_nulls.lua:2) returned `SELECT * FROM <relation> WHERE v IS NULL` and then `SELECT * FROM <relation> WHERE v IS NULL AND false` for the same arguments: an audit body must depend on its arguments alone"
            ),
            "{said}"
        );
        // The refused first answer is remembered: a later use answering as the second call
        // did is refused too.
        let e = use_(&mut answers, &sites, "v", (&none, &none, ""), "models/b.lua", 2).expect_err("differs from the first use's answer");
        assert!(e.to_string().contains("returned `SELECT * FROM <relation> WHERE v IS NULL` for its use at models/a.lua:2 and then `SELECT * FROM <relation> WHERE v IS NULL AND false` here"), "{e}");
    }

    #[test]
    fn a_later_use_answering_otherwise_for_the_same_arguments_is_refused_naming_the_earlier_use() {
        let (mut answers, sites) = (answers(), Sites::default());
        let (real, none) = (sql("v", ""), sql("v", " AND false"));
        assert!(use_(&mut answers, &sites, "v", (&real, &real, ""), "models/a.lua", 2).is_ok());
        assert!(use_(&mut answers, &sites, "v", (&real, &real, ""), "models/c.lua", 1).is_ok());
        let e = use_(&mut answers, &sites, "v", (&none, &none, ""), "models/b.lua", 2).expect_err("another answer for the same arguments");
        assert!(
            e.to_string().starts_with(
                "models/b.lua:2: audit `no_nulls` (audits/no_nulls.lua:2) returned `SELECT * FROM <relation> WHERE v IS NULL` for its use at models/a.lua:2 and then `SELECT * FROM <relation> WHERE v IS NULL AND false` here for the same arguments"
            ),
            "{e}"
        );
    }

    #[test]
    fn a_body_answering_otherwise_for_the_first_uses_arguments_at_a_later_use_is_refused() {
        // A counter compared with 3, uses with other arguments: the calls of each use agree,
        // but the first use's arguments get another answer by the second use.
        let (mut answers, sites) = (answers(), Sites::default());
        assert!(use_(&mut answers, &sites, "v", (&sql("v", ""), &sql("v", ""), ""), "models/a.lua", 2).is_ok());
        let e = use_(&mut answers, &sites, "w", (&sql("w", " AND false"), &sql("w", " AND false"), &sql("v", " AND false")), "models/b.lua", 2)
            .expect_err("the first use's arguments answered otherwise");
        assert!(
            e.to_string().starts_with(
                "models/b.lua:2: audit `no_nulls` (audits/no_nulls.lua:2) returned `SELECT * FROM <relation> WHERE v IS NULL` for its use at models/a.lua:2 and then `SELECT * FROM <relation> WHERE v IS NULL AND false` for that use's arguments when called again for this use"
            ),
            "{e}"
        );
        // A pure body: other arguments, another answer, the first use's answer unchanged.
        assert!(use_(&mut answers, &sites, "x", (&sql("x", ""), &sql("x", ""), &sql("v", "")), "models/c.lua", 2).is_ok());
    }

    #[test]
    fn two_calls_referencing_one_model_through_two_markers_give_one_answer() {
        // Every `ref()` call records a marker of its own: the texts differ, the SQL does not.
        let (mut answers, mut sites) = (answers(), Sites::default());
        let target = ModelName::parse("s.customers").expect("a name");
        let site = || Site::Ref(RefSite { target: target.clone(), location: at("audits/no_nulls.lua", 4) });
        let (m1, m2) = (sites.record(site()), sites.record(site()));
        assert_ne!(m1, m2);
        let text = |m: &str| format!("SELECT * FROM {THIS} WHERE v NOT IN (SELECT id FROM {m})");
        let audit = use_(&mut answers, &sites, "v", (&text(&m1), &text(&m2), ""), "models/a.lua", 2).expect("one answer");
        assert_eq!(audit.sql.refs().map(|r| r.target.to_string()).collect::<Vec<_>>(), ["s.customers"]);
        // Another model referenced: another answer (in an interpreter where `v` is new, so
        // that the body is called again).
        let other = ModelName::parse("s.vendors").expect("a name");
        let m3 = sites.record(Site::Ref(RefSite { target: other, location: at("audits/no_nulls.lua", 4) }));
        let mut fresh = self::answers();
        let e = use_(&mut fresh, &sites, "v", (&text(&m1), &text(&m3), ""), "models/b.lua", 2).expect_err("another model");
        assert!(e.to_string().contains("ref(s.customers)") && e.to_string().contains("ref(s.vendors)"), "{e}");
    }

    #[test]
    fn the_answers_of_a_definition_evaluated_again_for_each_model_file_are_not_remembered() {
        // Defined by a module a model file requires: defined again, with a body of its own,
        // for each file evaluated (a helper defining one name with another threshold per file).
        let (mut answers, sites) = (Answers::default(), Sites::default());
        for (tail, file) in [("", "models/a.lua"), (" AND v > 1", "models/b.lua")] {
            let text = sql("v", tail);
            let r = use_(&mut answers, &sites, "v", (&text, &text, ""), file, 2);
            assert!(r.is_ok(), "{r:?}");
        }
        assert_eq!(answers.checks(&def(), &bound("w").args), Checks { again: true, earlier: None });
    }

    #[test]
    fn a_use_with_arguments_already_rendered_calls_the_body_once_and_a_built_in_is_never_called_again() {
        let (mut answers, sites) = (answers(), Sites::default());
        let real = sql("v", "");
        // The first use with `v`: called again; with `w`: also with `v`, the first use's.
        assert_eq!(answers.checks(&def(), &bound("v").args), Checks { again: true, earlier: None });
        assert!(use_(&mut answers, &sites, "v", (&real, &real, ""), "models/a.lua", 2).is_ok());
        assert_eq!(answers.checks(&def(), &bound("w").args), Checks { again: true, earlier: Some(bound("v").args) });
        // `v` again: no verification call; its one call is compared with the recorded answer
        // (a counter's later answer is refused, naming the first use).
        assert_eq!(answers.checks(&def(), &bound("v").args), Checks { again: false, earlier: None });
        assert!(use_(&mut answers, &sites, "v", (&real, "not called", "not called"), "models/b.lua", 2).is_ok());
        let e = use_(&mut answers, &sites, "v", (&sql("v", " AND false"), "", ""), "models/c.lua", 2).expect_err("another answer for `v`");
        assert!(e.to_string().contains("for its use at models/a.lua:2 and then `SELECT * FROM <relation> WHERE v IS NULL AND false` here"), "{e}");
        // A built-in (efmesh's own audits): never called again, its answer not compared.
        let spec = serde_json::json!({ "name": "not_null", "params": ["column"] });
        let Value::Object(spec) = spec else { panic!("an object") };
        let builtin = AuditDef::from_spec(&spec, at(LUA_BUILTINS, 3)).expect("a definition");
        let b = builtin.bind(vec![Value::from("v")], Map::new()).expect("bound");
        assert_eq!(answers.checks(&builtin, &b.args), Checks { again: false, earlier: None });
        let calls = Calls { first: real.clone(), again: None, earlier: None };
        assert!(finish_pure(&builtin, b, calls, &sites, &mut answers, &at("models/a.lua", 3)).is_ok());
    }
}
