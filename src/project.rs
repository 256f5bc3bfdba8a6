//! A loaded project: its configuration and its validated model DAG.

use crate::config::Config;
use crate::core::{Dag, LoadError, LoadErrors, Model};
use crate::script::loader::{self, Discovered, LoadCache, LoadReport};
use std::collections::BTreeMap;

pub mod cache;

/// Configuration plus the validated DAG of every model.
#[derive(Debug, Clone)]
pub struct Project {
    /// The configuration the project was loaded with.
    pub config: Config,
    /// Every model, validated and topologically ordered.
    pub dag: Dag,
}

impl Project {
    /// Discovers, evaluates and validates every model file of `config`'s project: restored from
    /// the project cache ([`cache`]) when no input changed since the last load, else through the
    /// project's persistent load cache ([`LoadCache`]), where files whose inputs did not change
    /// since the last load are not evaluated again (then the project cache is stored).
    ///
    /// Pure with respect to the databases: reads only the project's files (and writes the load
    /// cache).
    ///
    /// # Errors
    /// [`LoadErrors`]: every problem found, each with file:line, model and culprit.
    pub fn load(config: &Config) -> Result<Project, LoadErrors> {
        if let Some(restored) = cache::restore(config) {
            return Ok(restored.project);
        }
        let mut load_cache = LoadCache::open(config);
        let (project, report) = Self::load_with(config, &mut load_cache);
        load_cache.save();
        if let Ok(p) = &project
            && let Some(key) = cache::key_of(config, p, &report)
        {
            cache::store(config, &key, p);
        }
        project
    }

    /// Like [`Project::load`], with the cache `cache` (not saved); also returns what the load
    /// read and evaluated, filled as far as the load got when it fails.
    pub fn load_with(config: &Config, cache: &mut LoadCache) -> (Result<Project, LoadErrors>, LoadReport) {
        match Discovered::of(config) {
            Ok(files) => Self::load_files(config, files, cache),
            Err(e) => (Err(e), LoadReport::default()),
        }
    }

    /// [`Project::load_with`] of the audit and model files `files` (as [`Discovered::of`] gave
    /// them), without walking the discovery globs.
    pub fn load_files(config: &Config, files: Discovered, cache: &mut LoadCache) -> (Result<Project, LoadErrors>, LoadReport) {
        // Globs that match no model file are a mistake, never an empty project: planned as one,
        // every model of an applied environment would be removed.
        if files.models.is_empty() {
            let globs = config.project.models.iter().map(|g| format!("`{g}`")).collect::<Vec<_>>().join(", ");
            let error = LoadError::new(None, None, format!("no model file matches `[project] models` ({globs}) under {}", config.root.display()))
                .with_hint(format!("the globs are relative to the directory of `{}`; fix them or add a model file", config.path.display()));
            return (Err(LoadErrors(vec![error])), LoadReport::default());
        }
        let (models, report) = loader::load_project(config, &files, cache);
        let project = models.and_then(|models| {
            prefetch_canonical(config, &models);
            let dag = Dag::build(models)?;
            let errors = model_checks(config, &dag, &dag.models().collect::<Vec<_>>());
            if !errors.is_empty() {
                return Err(LoadErrors(errors));
            }
            Ok(Project { config: config.clone(), dag })
        });
        (project, report)
    }

    /// The files a project loads, in evaluation order: audit definitions first (so every model
    /// file can attach them), then model files.
    ///
    /// # Errors
    /// [`LoadErrors`] for an invalid glob or a file outside the project.
    pub fn files(config: &Config) -> Result<Vec<std::path::PathBuf>, LoadErrors> {
        Ok(Discovered::of(config)?.all().cloned().collect())
    }
}

/// The load's checks of models against the configuration and the model names of `dag`, run
/// after the DAG is built, in this order, the first that finds anything giving the errors:
/// schemas the engine reserves ([`reserved_schemas`]), pre/post statements
/// ([`check_statements`]), operators DuckDB reads as one it does not have ([`glued_operators`]),
/// queries reading a model by its name ([`bare_model_reads`]), storage
/// targets (their section of efmesh.toml, their column types, a lake directory name too long
/// for a file system), `accepted_values` lists of the wrong type for their column
/// ([`crate::core::audit::mistyped_values`]) and, on Postgres, columns a kind compares of a
/// type without an equality operator (`json`, `xml`, the geometric types:
/// [`uncomparable_columns`]). The full load runs them on
/// every model; a reload in place ([`crate::session::Session::reload`]) on the models it
/// replaces, against the DAG before (same names): each finding concerns one model's own
/// definition, so the others' are unchanged (but for an external's relation, which decides
/// the names no query may read: that reload loads in full when one changes).
pub fn model_checks(config: &Config, dag: &Dag, checked: &[&Model]) -> Vec<LoadError> {
    let reserved = reserved_schemas(config, checked.iter().copied());
    if !reserved.is_empty() {
        return reserved;
    }
    let bad_statements = check_statements(config, checked.iter().copied());
    if !bad_statements.is_empty() {
        return bad_statements;
    }
    let glued = glued_operators(config, checked.iter().copied());
    if !glued.is_empty() {
        return glued;
    }
    let bare = bare_model_reads(config, dag, checked.iter().copied());
    if !bare.is_empty() {
        return bare;
    }
    // A storage target needs its section of efmesh.toml: say so at load, not mid-apply.
    let mut unconfigured = crate::core::target::unconfigured(checked.iter().copied(), config.lake.is_some(), config.ducklake.is_some());
    unconfigured.extend(crate::core::target::unstorable(checked.iter().copied()));
    unconfigured.extend(crate::core::target::unnameable(checked.iter().copied()));
    // `accepted_values` lists whose values the engine would compare with the column by a
    // widening cast (numbers on a text column, strings on a numeric one).
    unconfigured.extend(crate::core::audit::mistyped_values_of(checked.iter().copied()));
    // Key, watched and partition columns of a type Postgres cannot compare (`json`, `xml`, …).
    unconfigured.extend(uncomparable_columns(config, checked.iter().copied()));
    unconfigured
}

/// On the Postgres engine, every column a kind compares row against row — an
/// `incremental_by_unique_key` or `scd_type2` model's key (`=`), an `scd_type2` model's watched
/// columns (`IS DISTINCT FROM`), an `incremental_by_partition` model's partition columns (`IS NOT
/// DISTINCT FROM`) — declared a type the Postgres dialect has no equality operator for
/// ([`crate::engine::dialect::Dialect::lacks_equality`]: `json`, `xml`, the geometric types, a
/// list of one), as load errors at the model's file:line naming the column. `check` and `plan`
/// would pass and the apply fail mid-build with the server's `operator does not exist: json =
/// json` (or `could not identify an equality operator for type point`) on efmesh's own
/// statement. A `json` column is told to become `jsonb` (which has one); another, to be declared
/// a comparable type or left out. DuckDB compares `json` as text: nothing is refused there.
pub fn uncomparable_columns<'m>(config: &Config, models: impl IntoIterator<Item = &'m Model>) -> Vec<LoadError> {
    use crate::core::Kind;
    use crate::engine::dialect::Dialect as _;
    if config.engine.url_env.is_none() {
        return Vec::new();
    }
    let dialect = crate::engine::dialect::Standard;
    let mut errors = Vec::new();
    for m in models {
        let compared: Vec<(&str, &str)> = match &m.kind {
            Kind::ScdType2(scd) => {
                let watched = scd.watched(&m.schema).into_iter().filter(|c| !scd.key.iter().any(|k| k.as_str() == *c));
                scd.key.iter().map(|k| (k.as_str(), "a key column")).chain(watched.map(|c| (c, "a watched column"))).collect()
            }
            Kind::IncrementalByUniqueKey(u) => u.key.iter().map(|k| (k.as_str(), "a key column")).collect(),
            Kind::IncrementalByPartition(p) => p.partitioned_by.iter().map(|c| (c.as_str(), "a partition column")).collect(),
            _ => continue,
        };
        for (column, role) in compared {
            let Some(declared) = m.schema.0.iter().find(|c| c.name == column) else { continue };
            if !dialect.lacks_equality(&declared.ty) {
                continue;
            }
            let how = if role == "a watched column" {
                "or leave it out of the watched columns (`columns = { … }` lists the others)"
            } else {
                "or use other columns"
            };
            let (why, hint) = if is_json_type(&declared.ty) {
                (
                    "`json` has no equality operator: the apply would fail with `operator does not exist: json = json`".to_string(),
                    format!("declare `{column}` as `jsonb` (and make the query return it so: `CAST({column} AS jsonb)`), {how}"),
                )
            } else {
                (
                    format!("`{}` has no equality operator: the apply would fail mid-build", declared.ty.trim()),
                    format!(
                        "declare `{column}` as a type with an equality operator (`text`, say, and make the query return it so: `CAST({column} AS text)`), {how}"
                    ),
                )
            };
            errors.push(
                LoadError::new(
                    Some(m.location.clone()),
                    Some(m.name.clone()),
                    format!(
                        "column `{column}` is {role} of this `{}` model and is declared `{}`, which the Postgres engine cannot compare ({why})",
                        m.kind.tag(),
                        declared.ty
                    ),
                )
                .with_hint(hint),
            );
        }
    }
    errors
}

/// True for the type `json` and a list of it (`json[]`), in any case; not `jsonb`.
fn is_json_type(ty: &str) -> bool {
    let t = ty.trim().to_ascii_lowercase();
    let element = crate::core::schema::innermost_element(&t).unwrap_or(t.as_str());
    element.trim() == "json"
}

/// Schemas the engine already names as catalogs or system schemas, and so cannot hold a model:
/// DuckDB's `temp` and `system` catalogs and the database's own (the file's name up to its first
/// dot: `efmesh` for `efmesh.duckdb`, `main_db` for `main.duckdb`), and the `information_schema` / `pg_catalog` schemas. DuckDB refuses a
/// reference to such a schema as ambiguous — at the first promotion to `prod`, whose views live
/// in the models' own schemas — so it is refused at load, at the model's file:line.
///
/// On the Postgres engine also the schemas Postgres itself refuses or cannot read unquoted:
/// any name starting with `pg_` (reserved for system schemas: `CREATE SCHEMA` refuses it, at the
/// first promotion to `prod`), and a reserved word (`order`, `user`, `select`), which a
/// reference renders unquoted (`FROM order.items`, the text fingerprinted) and Postgres's
/// grammar cannot read as a schema name ([`is_postgres_keyword_schema`]).
pub fn reserved_schemas<'m>(config: &Config, models: impl IntoIterator<Item = &'m Model>) -> Vec<crate::core::LoadError> {
    // DuckDB names a file's catalog by its file name up to the first dot (`shop.prod.duckdb`:
    // `shop`; `main.duckdb`: `main_db`).
    let database = config.duckdb_database_name();
    let postgres = config.engine.url_env.is_some();
    let mut errors = Vec::new();
    for m in models {
        let schema = m.name.schema().to_lowercase();
        let (why, hint) = match schema.as_str() {
            "temp" | "system" => (format!("`{schema}` is one of DuckDB's built-in catalogs"), None),
            "information_schema" | "pg_catalog" => (format!("`{schema}` is a system schema"), None),
            s if postgres && s.starts_with("pg_") => (
                format!("Postgres reserves schema names starting with `pg_` for its system schemas (`CREATE SCHEMA {schema}` fails)"),
                Some("rename the model's schema (one not starting with `pg_`)"),
            ),
            s if postgres && is_postgres_keyword_schema(s) => (
                format!("`{schema}` is a reserved word of Postgres's SQL, so a query naming the model (`FROM {}`) cannot be parsed", m.name),
                Some("rename the model's schema (one that is not an SQL keyword)"),
            ),
            s if database.as_deref() == Some(s) => {
                (format!("`{schema}` is the name of the DuckDB database (its file `{}`)", config.engine_path().display()), None)
            }
            _ => continue,
        };
        let message = if hint.is_some() {
            format!("the schema `{}` of model `{}` cannot hold models on the Postgres engine: {why}", m.name.schema(), m.name)
        } else {
            format!("the schema `{}` of model `{}` cannot hold models: {why}, so the engine cannot tell which one a name means", m.name.schema(), m.name)
        };
        errors.push(
            crate::core::LoadError::new(Some(m.location.clone()), Some(m.name.clone()), message)
                .with_hint(hint.unwrap_or("rename the model's schema (or, for the database's name, the file in `[engine] path`)")),
        );
    }
    errors
}

/// True when Postgres's grammar cannot read `schema` (lower case) unquoted as the schema of a
/// qualified relation name (`FROM <schema>.t`): a reserved keyword or a type/function-name
/// keyword (`order`, `user`, `select`, `left`). Asked of libpg_query itself, so the keyword list
/// is the grammar's own.
fn is_postgres_keyword_schema(schema: &str) -> bool {
    pg_query::parse(&format!("SELECT 1 FROM {schema}.t"), 0).is_err()
}

/// Every pre/post statement that is not exactly one statement of the engine's grammar
/// (sqlparser's DuckDB dialect, or libpg_query with `[engine] url_env`), as load errors at the
/// statement's file:line naming the model and which statement, for `models`.
pub fn check_statements<'m>(config: &Config, models: impl IntoIterator<Item = &'m Model>) -> Vec<crate::core::LoadError> {
    use crate::sql::statements::{CheckResolver, Grammar, check};
    let grammar = if config.engine.url_env.is_some() { Grammar::Postgres } else { Grammar::Embedded };
    let mut errors = Vec::new();
    for m in models {
        for (when, i, st) in m.statements.each() {
            if let Err(e) = check(&st.sql.render(&CheckResolver), grammar) {
                errors.push(crate::core::LoadError::new(Some(st.location.clone()), Some(m.name.clone()), format!("{when}-statement {i}: {e}")));
            }
        }
    }
    errors
}

/// On the DuckDB engine, every operator of a model's query that DuckDB reads as one operator
/// it does not have where sqlparser reads two ([`crate::sql::operator_runs::glued_operators`]:
/// `3^-2` is DuckDB's `^-`, `x!=-1` its `!=-`, `a&~b` its `&~`), or as an operator ranked
/// otherwise than sqlparser reads it (`1 + 7//-2`, `j->>-1`: `//` and `->>` cut from their
/// signs are generic operators to DuckDB), as load errors at the operator's line (the line of
/// its file, [`Model::query_location`]; the model's own line otherwise, naming the line of the
/// query), with the spelling to write. The model would fail when built, or compute something
/// else than the spelling with a space, and its fingerprint (sqlparser's tree) is the one of
/// that spelling, so an edit between the two would be no change to `plan`. Postgres's grammar
/// (libpg_query, the fingerprint's parser there) reads the operator as the server does, which
/// has some of them (`#-`, `-|-`): nothing is refused on Postgres.
pub fn glued_operators<'m>(config: &Config, models: impl IntoIterator<Item = &'m Model>) -> Vec<LoadError> {
    if config.engine.url_env.is_some() {
        return Vec::new();
    }
    let mut errors = Vec::new();
    for m in models {
        let Some(body) = &m.body else { continue };
        for g in crate::sql::operator_runs::glued_operators(&body.render(&crate::core::fragment::CanonicalResolver)) {
            let (location, at) = match m.query_location(g.line) {
                Some(line) => (line, String::new()),
                None => (m.location.clone(), format!(" (line {} of its query)", g.line)),
            };
            let (operator, apart) = (&g.operator, &g.apart);
            let message = if g.ranked_otherwise {
                let head = operator.trim_end_matches(['+', '-']);
                let signs = &operator[head.len()..];
                format!(
                    "the query's `{operator}`{at} is `{head}` and `{signs}` to DuckDB, which reads a `{head}` it cut from the signs after it as a generic operator, ranked otherwise than `{head}` written apart (DuckDB, like Postgres, sheds the trailing `+` and `-` of a run of operator characters), while efmesh's SQL parser reads `{apart}` either way: the model would compute something else than the spelling apart, whose fingerprint it has, or fail when built"
                )
            } else {
                let ending = if operator.ends_with(['+', '-']) { ", one ending in `+` or `-` only if it holds one of `~ ! @ % ^ & |`" } else { "" };
                format!(
                    "the query's `{operator}`{at} is one operator to DuckDB, which has none of that name (DuckDB, like Postgres, reads a run of operator characters as one operator{ending}), while efmesh's SQL parser reads `{apart}`: the model would fail when built"
                )
            };
            // Apart, the operator takes its own rank, which may group the query otherwise.
            let grouping = if g.ranked_otherwise { ", with parentheses for the grouping the query means" } else { "" };
            errors.push(LoadError::new(Some(location), Some(m.name.clone()), message).with_hint(format!("write `{apart}` (with a space){grouping}")));
        }
    }
    errors
}

/// Every query (a model's, or an audit's) that reads a model of the project by its name —
/// `FROM s.b`, written by hand or produced by a macro, or an environment's view of it
/// (`dev__s.b`) — instead of through `ref`, as load errors at the name's line (the line of its
/// file, [`Model::query_location`]; the model's or the audit's own line otherwise). Such a read
/// records no dependency, and the bare name is `prod`'s view: in any other environment the
/// query would silently read `prod`'s rows. The names come from the query's AST
/// ([`crate::sql::relations`]): a string literal, a column or a CTE named like a model is not a
/// read of it. An external reading the relation of its own name may be named (the name reads
/// what its `ref` reads); a query sqlparser cannot parse is read from its tokens
/// ([`crate::sql::relations::named_relations_by_tokens`]).
/// A relation of efmesh's own storage (schema `_efmesh`, Postgres's `_efmesh_meta`, the DuckLake
/// catalog `_efmesh_ducklake`: `efmesh_storage_named`) is refused the same way, whatever its
/// name: a physical table is one version of a model, so reading it by name records no dependency
/// and keeps reading that version after the model changes.
pub fn bare_model_names(config: &Config, dag: &Dag) -> Vec<crate::core::LoadError> {
    bare_model_reads(config, dag, dag.models())
}

/// [`bare_model_names`] of the queries of `checked` only, against the models of `dag` (a reload
/// in place checks the models it replaces: the names, hence the others' findings, are unchanged).
pub fn bare_model_reads<'m>(config: &Config, dag: &Dag, checked: impl IntoIterator<Item = &'m crate::core::Model>) -> Vec<crate::core::LoadError> {
    use crate::core::fragment::Resolver;
    use crate::core::{External, Kind, ModelName};
    use std::collections::BTreeSet;

    /// Refs as a name no model can have, bounds as their placeholders.
    struct Refless;
    impl Resolver for Refless {
        fn relation(&self, _model: &ModelName) -> String {
            "\"@ref\"".into()
        }
        fn start(&self) -> String {
            "$start".into()
        }
        fn end(&self) -> String {
            "$end".into()
        }
    }

    let postgres = config.engine.url_env.is_some();
    let default_schema = if postgres { "public" } else { "main" };
    // The engine's own catalog: a DuckDB file's is its name up to the first dot (as DuckDB
    // names it: `my.data.duckdb` is `my`); a Postgres engine's, the database its URL names.
    let catalog: Option<String> = if postgres {
        config
            .engine
            .url_env
            .as_deref()
            .and_then(|v| std::env::var(v).ok())
            .and_then(|u| u.parse::<postgres::Config>().ok())
            .and_then(|c| c.get_dbname().map(str::to_ascii_lowercase))
    } else {
        config.duckdb_database_name()
    };
    // Lower-case `schema.table` → the model it names.
    let mut models: BTreeMap<String, &ModelName> = BTreeMap::new();
    for m in dag.models() {
        let name = m.name.to_string().to_ascii_lowercase();
        if let Kind::External(External::Table { name: relation }) = &m.kind {
            let relation = relation.replace('"', "").to_ascii_lowercase();
            let relation = if relation.contains('.') { relation } else { format!("{default_schema}.{relation}") };
            if relation == name {
                continue;
            }
        }
        models.insert(name, &m.name);
    }
    let storage = efmesh_storage(config);
    // The tables' names and efmesh's storage names: a query none of whose words is one is not
    // parsed.
    let tables: BTreeSet<String> = models.values().map(|n| n.table().to_ascii_lowercase()).chain(storage.iter().map(|s| (*s).to_string())).collect();
    let mentions =
        |text: &str| text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).any(|w| !w.is_empty() && tables.contains(&w.to_ascii_lowercase()));
    let mut errors = Vec::new();
    for m in checked {
        let sql_file = m.location.file.extension().is_some_and(|e| e == "sql");
        // An external over a relation of efmesh's storage reads one version of a model by name,
        // as a query would.
        if let Kind::External(External::Table { name: relation }) = &m.kind {
            let parts: Vec<String> = relation.split('.').map(str::to_string).collect();
            if let Some(schema) = efmesh_storage_named(&storage, &parts) {
                let written = parts.join(".");
                let message = format!(
                    "external `{}` reads `{written}`, a relation of efmesh's own storage (`{schema}`), by its name: efmesh builds, replaces and drops these relations itself (a physical table is one version of a model), so no dependency is recorded and the external keeps reading that version after the model changes",
                    m.name
                );
                let hint = match version_owner(&models, &parts) {
                    Some(target) => format!(
                        "drop this external and read model `{target}` through a reference where it is read (`ref(\"{target}\")`, `@ref({target})` in a `.sql` file): `{written}` is a version of it"
                    ),
                    None => "an external names a relation outside efmesh's storage: to read a model, reference it (`ref`, `@ref` in a `.sql` file)".to_string(),
                };
                errors.push(crate::core::LoadError::new(Some(m.location.clone()), Some(m.name.clone()), message).with_hint(hint));
            }
        }
        // The model's query, then each audit's (with the relation under audit a placeholder).
        let mut queries: Vec<(Option<&crate::core::audit::Audit>, String)> = Vec::new();
        if let Some(body) = &m.body
            && body.nodes.iter().any(|n| matches!(n, crate::core::Node::Text(t) if mentions(t)))
        {
            queries.push((None, body.render(&Refless)));
        }
        for a in &m.audits {
            let sql = a.sql.render(crate::core::fragment::THIS_PLACEHOLDER, &|_: &ModelName| "\"@ref\"".to_string());
            if mentions(&sql) {
                queries.push((Some(a), sql));
            }
        }
        for (audit, sql) in queries {
            let Some(found) =
                crate::sql::relations::named_relations(&sql, postgres).or_else(|| crate::sql::relations::named_relations_by_tokens(&sql, postgres))
            else {
                continue;
            };
            let mut seen = BTreeSet::new();
            let whose = match audit {
                Some(a) => format!("the query of audit `{}`", a.label()),
                None => "the query".to_string(),
            };
            // How to read `target` instead (`itself`: the model's own table).
            let hint_for = |target: &ModelName, itself: bool| match (itself, audit.is_some(), sql_file) {
                (true, false, _) => "write `@this` for the model's own table".to_string(),
                (true, true, _) => "read the relation under audit (the audit body's first argument)".to_string(),
                (false, true, _) => format!("use `ref(\"{target}\")` in the audit's body"),
                (false, false, true) => format!("use `@ref({target})` (and list `{target}` in `-- refs:`)"),
                (false, false, false) => format!("use `ref(\"{target}\")`"),
            };
            for r in found {
                let written = r.parts.join(".");
                let (location, at) = match (audit, r.line) {
                    (Some(a), _) => (a.location.clone(), String::new()),
                    (None, Some(n)) => match m.query_location(n) {
                        Some(line) => (line, String::new()),
                        None => (m.location.clone(), format!(" (line {n} of its query)")),
                    },
                    (None, None) => (m.location.clone(), String::new()),
                };
                if let Some(storage) = efmesh_storage_named(&storage, &r.parts) {
                    if !seen.insert(written.clone()) {
                        continue;
                    }
                    let owner = version_owner(&models, &r.parts);
                    let message = format!(
                        "{whose} reads `{written}`{at}, a relation of efmesh's own storage (`{storage}`), by its name instead of through a reference: efmesh builds, replaces and drops these relations itself (a physical table is one version of a model), so no dependency is recorded and the query keeps reading that version after the model changes"
                    );
                    let hint = match owner {
                        Some(target) => format!("{} (`{written}` is a version of model `{target}`)", hint_for(target, *target == m.name)),
                        None => {
                            "read a model through a reference (`ref`, `@ref` in a `.sql` file), never a relation of efmesh's storage by its name".to_string()
                        }
                    };
                    errors.push(crate::core::LoadError::new(Some(location), Some(m.name.clone()), message).with_hint(hint));
                    continue;
                }
                let Some((target, env)) = model_named(&models, default_schema, catalog.as_deref(), &r.parts) else { continue };
                if !seen.insert(written.clone()) {
                    continue;
                }
                let why = match (&env, dag.get(target).map(|t| &t.kind)) {
                    (_, Some(Kind::Embedded)) => "an `embedded` model has no relation of its own (`ref` inlines its query)".to_string(),
                    (_, Some(Kind::External(_))) => "the name is not the relation the external reads (`ref` reads that)".to_string(),
                    (Some(env), _) => format!("`{written}` is environment `{env}`'s view of it, whichever environment the query runs in"),
                    (None, _) => format!("the name `{written}` is `prod`'s view, so in any other environment the query would read `prod`'s rows"),
                };
                let itself = *target == m.name;
                let what = if itself { format!("its own model `{target}`") } else { format!("model `{target}`") };
                let message =
                    format!("{whose} reads {what} by the name `{written}`{at} instead of through a reference: {why}, and no dependency on it is recorded");
                let hint = hint_for(target, itself);
                errors.push(crate::core::LoadError::new(Some(location), Some(m.name.clone()), message).with_hint(hint));
            }
        }
    }
    errors.sort_by(|a, b| a.location.cmp(&b.location));
    errors
}

/// The schemas and catalog of efmesh's own storage under `config`, lower case: the engine
/// database's schema of physical relations (`_efmesh`), a Postgres engine's bookkeeping schema
/// (`_efmesh_meta`, only with `[engine] url_env`: on DuckDB it is a schema like any other) and
/// the alias the DuckLake catalog is attached under (`_efmesh_ducklake`, only with a
/// `[ducklake]` section: without one nothing is attached under it).
fn efmesh_storage(config: &Config) -> Vec<&'static str> {
    let mut storage = vec![crate::engine::STORAGE_SCHEMA];
    if config.engine.url_env.is_some() {
        storage.push(crate::engine::postgres::META_SCHEMA);
    }
    if config.ducklake.is_some() {
        storage.push(crate::core::target::DUCKLAKE_ALIAS);
    }
    storage
}

/// The schema or catalog of efmesh's own storage (`storage`: [`efmesh_storage`]) a relation
/// name read in a query (`parts` as written) is in, if any: one of its qualifiers (every part
/// but the last) is one, whatever the others (`_efmesh.t`, `efmesh._efmesh.t`,
/// `_efmesh_ducklake.main.t`, and `_efmesh_ducklake.t`, which DuckDB reads as the catalog's
/// default schema).
fn efmesh_storage_named(storage: &[&'static str], parts: &[String]) -> Option<&'static str> {
    let (_, qualifiers) = parts.split_last()?;
    qualifiers.iter().find_map(|q| storage.iter().find(|s| q.eq_ignore_ascii_case(s)).copied())
}

/// The model among `models` (lower case `schema.table` → model) whose version a physical name
/// (`<schema>__<table>__<fp>`, the last of `parts`) is, if any.
fn version_owner<'a>(models: &BTreeMap<String, &'a crate::core::ModelName>, parts: &[String]) -> Option<&'a crate::core::ModelName> {
    parts
        .last()
        .and_then(|t| t.rsplit_once("__"))
        .and_then(|(st, _)| st.split_once("__"))
        .and_then(|(schema, table)| models.get(&format!("{schema}.{table}").to_ascii_lowercase()).copied())
}

/// The model a relation name read in a query (`parts` as written) means among `models` (lower
/// case `schema.table` → model): `schema.table`, a one-part name in the engine's default schema,
/// or an environment's view `<env>__schema.table` (with that environment).
fn model_named<'a>(
    models: &BTreeMap<String, &'a crate::core::ModelName>,
    default_schema: &str,
    catalog_name: Option<&str>,
    parts: &[String],
) -> Option<(&'a crate::core::ModelName, Option<String>)> {
    let lower: Vec<String> = parts.iter().map(|p| p.to_ascii_lowercase()).collect();
    match lower.as_slice() {
        [table] => models.get(&format!("{default_schema}.{table}")).map(|m| (*m, None)),
        // Qualified by the engine's own catalog (`efmesh.s.b`: the DuckDB file's database, named
        // after the file), the same; another catalog (an attached database) is not the model's.
        [catalog, schema, table] if catalog_name.is_some_and(|c| c.eq_ignore_ascii_case(catalog)) => {
            models.get(&format!("{schema}.{table}")).map(|m| (*m, None))
        }
        [schema, table] => {
            if let Some(m) = models.get(&format!("{schema}.{table}")) {
                return Some((*m, None));
            }
            // `<env>__<schema>`: the first `__` ends the environment (crate::core::name).
            let (env, schema) = schema.split_once("__")?;
            crate::core::name::validate_env(env).ok()?;
            models.get(&format!("{schema}.{table}")).map(|m| (*m, Some(env.to_string())))
        }
        _ => None,
    }
}

/// For a command about to plan with no state store on disk (so no canonicalisation cache: the
/// plan canonicalises every body), starts canonicalising every body in the background
/// (`sql::prefetch`) on all cores but this one, which goes on with the serial rest of the load
/// and the plan's reads.
fn prefetch_canonical(config: &Config, models: &[crate::core::Model]) {
    // A Postgres store (`url_env`) is taken to exist: it has a canonicalisation cache.
    // The prefetch is sqlparser's digest: the embedded engine's grammar only (no `[engine] url_env`).
    if !crate::sql::prefetch::wanted() || config.engine.url_env.is_some() || config.state.url_env.is_some() || config.state_path().exists() {
        return;
    }
    let bodies: Vec<String> = models.iter().filter_map(|m| m.body.as_ref().map(|b| b.render(&crate::core::fragment::CanonicalResolver))).collect();
    if bodies.is_empty() {
        return;
    }
    let threads = std::thread::available_parallelism().map_or(1, std::num::NonZero::get).min(8);
    crate::sql::prefetch::start(bodies, threads.saturating_sub(1).max(1));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::{Column, Kind, Location, ModelName, Partitioned, ScdType2, Schema, UniqueKey};

    fn model(kind: Kind, columns: &[(&str, &str)]) -> Model {
        let schema = Schema(columns.iter().map(|(name, ty)| Column { name: (*name).into(), ty: (*ty).into() }).collect());
        Model::new(ModelName::parse("j.hist").expect("name"), kind, schema, None, Location { file: "models/hist.sql".into(), line: 1 })
    }

    fn scd(key: &str, columns: Option<&[&str]>) -> Kind {
        Kind::ScdType2(ScdType2 {
            key: vec![key.into()],
            valid_from: "valid_from".into(),
            valid_to: "valid_to".into(),
            columns: columns.map(|c| c.iter().map(|s| (*s).to_string()).collect()),
            invalidate_hard_deletes: true,
            renamed: Vec::new(),
        })
    }

    fn config(engine: &str) -> Config {
        Config::parse(std::path::Path::new("/p/efmesh.toml"), &format!("[project]\nmodels = [\"models/*.sql\"]\n{engine}")).expect("config")
    }

    #[test]
    fn json_columns_a_kind_compares_are_refused_on_postgres_only() {
        let pg = config("[engine]\nurl_env = \"PG_ENGINE_URL\"\n");
        let watched = model(scd("id", None), &[("id", "bigint"), ("doc", "json")]);
        let errors = uncomparable_columns(&pg, [&watched]);
        assert_eq!(errors.len(), 1, "{errors:?}");
        let text = errors[0].to_string();
        for needle in ["models/hist.sql:1", "model `j.hist`", "column `doc` is a watched column", "`scd_type2`", "json = json", "`jsonb`", "watched columns"] {
            assert!(text.contains(needle), "{needle:?} missing from {text}");
        }
        // DuckDB compares `json` as text.
        assert!(uncomparable_columns(&config(""), [&watched]).is_empty());
        // Left out of the watched columns, or declared `jsonb`: nothing to refuse.
        let unwatched = model(scd("id", Some(&["name"][..])), &[("id", "bigint"), ("name", "varchar"), ("doc", "json")]);
        let jsonb = model(scd("id", None), &[("id", "bigint"), ("doc", "JSONB")]);
        assert!(uncomparable_columns(&pg, [&unwatched, &jsonb]).is_empty());
        // A key (also a list of `json`), a unique key, a partition column.
        let key = model(scd("doc", Some(&["id"][..])), &[("id", "bigint"), ("doc", "JSON[]")]);
        let unique = model(Kind::IncrementalByUniqueKey(UniqueKey { key: vec!["doc".into()] }), &[("doc", " Json ")]);
        let partition = model(Kind::IncrementalByPartition(Partitioned { partitioned_by: vec!["doc".into()] }), &[("doc", "json")]);
        let full = model(Kind::Full, &[("doc", "json")]);
        let errors: Vec<String> = uncomparable_columns(&pg, [&key, &unique, &partition, &full]).iter().map(ToString::to_string).collect();
        assert_eq!(errors.len(), 3, "{errors:?}");
        assert!(errors[0].contains("is a key column of this `scd_type2` model"), "{errors:?}");
        assert!(errors[1].contains("is a key column of this `incremental_by_unique_key` model"), "{errors:?}");
        assert!(errors[2].contains("is a partition column of this `incremental_by_partition` model"), "{errors:?}");
    }

    /// Every type the Postgres dialect has no equality operator for (`xml`, the geometric types,
    /// a list of one) is refused like `json`, with a hint naming no `jsonb`; comparable types are not.
    #[test]
    fn xml_and_geometric_columns_a_kind_compares_are_refused_on_postgres() {
        let pg = config("[engine]\nurl_env = \"PG_ENGINE_URL\"\n");
        let key = model(scd("at", Some(&["id"][..])), &[("id", "bigint"), ("at", "POINT")]);
        let watched = model(scd("id", None), &[("id", "bigint"), ("doc", "xml")]);
        let unique = model(Kind::IncrementalByUniqueKey(UniqueKey { key: vec!["area".into()] }), &[("area", "box[]")]);
        let partition = model(Kind::IncrementalByPartition(Partitioned { partitioned_by: vec!["c".into()] }), &[("c", "circle")]);
        let errors: Vec<String> = uncomparable_columns(&pg, [&key, &watched, &unique, &partition]).iter().map(ToString::to_string).collect();
        assert_eq!(errors.len(), 4, "{errors:?}");
        for (error, needles) in errors.iter().zip([
            ["column `at` is a key column", "declared `POINT`", "`POINT` has no equality operator"],
            ["column `doc` is a watched column", "declared `xml`", "leave it out of the watched columns"],
            ["column `area` is a key column", "declared `box[]`", "`box[]` has no equality operator"],
            ["column `c` is a partition column", "declared `circle`", "a type with an equality operator"],
        ]) {
            for needle in needles {
                assert!(error.contains(needle), "{needle:?} missing from {error}");
            }
            assert!(!error.contains("jsonb"), "{error}");
        }
        // DuckDB has none of these types' troubles to refuse; comparable types pass on Postgres.
        assert!(uncomparable_columns(&config(""), [&key, &watched]).is_empty());
        let fine = model(scd("id", None), &[("id", "bigint"), ("p", "text"), ("q", "pointer")]);
        assert!(uncomparable_columns(&pg, [&fine]).is_empty());
    }

    /// An operator DuckDB reads as one it does not have (`^-`, `!=-`) is a load error on the
    /// DuckDB engine, at the model's line naming the line of its query (a Lua model whose query
    /// is not in its file as it is), at the line of the file where that is known; never on
    /// Postgres, whose parser reads operators as the server does (and has `#-`, `-|-`).
    #[test]
    fn glued_operators_are_refused_on_duckdb_only() {
        let mut m = Model::fixture("z.g", Kind::Full, &[]);
        let mut body = crate::core::Fragment::default();
        body.push_text("SELECT 3 * -2 AS x, 'a^-b' AS y\nWHERE 3^-2 > 0 AND 1!=-2");
        m.body = Some(body);
        let errors: Vec<String> = glued_operators(&config(""), [&m]).iter().map(ToString::to_string).collect();
        assert_eq!(errors.len(), 2, "{errors:?}");
        for (error, needles) in errors.iter().zip([
            ["m.lua:1", "model `z.g`", "the query's `^-` (line 2 of its query) is one operator to DuckDB", "hint: write `^ -`"],
            ["m.lua:1", "model `z.g`", "the query's `!=-` (line 2 of its query)", "hint: write `!= -`"],
        ]) {
            for needle in needles {
                assert!(error.contains(needle), "{needle:?} missing from {error}");
            }
        }
        // Where the query's lines are known (a `.sql` file, a Lua query written in its file as it
        // is): at the line of the file, which says it all.
        m.query_lines = vec![7, 8];
        let errors: Vec<String> = glued_operators(&config(""), [&m]).iter().map(ToString::to_string).collect();
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(errors.iter().all(|e| e.starts_with("m.lua:8: model `z.g`: the query's `") && !e.contains("of its query")), "{errors:?}");
        assert!(glued_operators(&config("[engine]\nurl_env = \"PG_ENGINE_URL\"\n"), [&m]).is_empty());
    }

    /// `//` cut from the sign after it (`7//-2`) is an operator DuckDB has, ranked otherwise than
    /// written apart: refused too, in words saying so rather than "none of that name".
    #[test]
    fn operators_duckdb_ranks_otherwise_are_refused_in_their_own_words() {
        let mut m = Model::fixture("z.g", Kind::Full, &[]);
        let mut body = crate::core::Fragment::default();
        body.push_text("SELECT 1 + 7 // -2 AS x,\n  1 + 7//-2 AS y");
        m.body = Some(body);
        let errors: Vec<String> = glued_operators(&config(""), [&m]).iter().map(ToString::to_string).collect();
        assert_eq!(errors.len(), 1, "{errors:?}");
        for needle in [
            "model `z.g`",
            "the query's `//-` (line 2 of its query) is `//` and `-` to DuckDB",
            "generic operator",
            "reads `// -` either way",
            "hint: write `// -` (with a space), with parentheses for the grouping the query means",
        ] {
            assert!(errors[0].contains(needle), "{needle:?} missing from {}", errors[0]);
        }
        assert!(!errors[0].contains("none of that name"), "{}", errors[0]);
    }

    /// A name qualified by efmesh's storage schema or catalog, in any position but the last, is
    /// in efmesh's storage; a table merely named like it, or another schema, is not.
    #[test]
    fn names_in_efmesh_storage_are_told_apart() {
        // `_efmesh_meta` is the Postgres engine's, `_efmesh_ducklake` a DuckLake target's (a
        // DuckDB feature): two configurations.
        let pg = efmesh_storage(&config("[engine]\nurl_env = \"PG_ENGINE_URL\"\n"));
        let lake = efmesh_storage(&config("[ducklake]\ncatalog = \"lake.ducklake\"\n"));
        let parts = |s: &str| s.split('.').map(str::to_string).collect::<Vec<_>>();
        let named = |s: &str| efmesh_storage_named(&pg, &parts(s));
        assert_eq!(named("_efmesh.s__a__00"), Some("_efmesh"));
        assert_eq!(named("efmesh._EFMESH.s__a__00"), Some("_efmesh"));
        assert_eq!(named("_efmesh_meta.owners"), Some("_efmesh_meta"));
        assert_eq!(efmesh_storage_named(&lake, &parts("_efmesh_ducklake.main.m__t__00")), Some("_efmesh_ducklake"));
        assert_eq!(efmesh_storage_named(&lake, &parts("_efmesh_ducklake.m__t__00")), Some("_efmesh_ducklake"));
        assert_eq!(named("_efmesh"), None);
        assert_eq!(named("s._efmesh"), None);
        assert_eq!(named("s.b"), None);
    }

    /// `_efmesh_meta` is efmesh's storage only on the Postgres engine, `_efmesh_ducklake` only
    /// with a `[ducklake]` section: on a DuckDB engine without one, both are schemas like any other.
    #[test]
    fn meta_and_ducklake_names_are_storage_only_where_efmesh_makes_them() {
        let parts = |s: &str| s.split('.').map(str::to_string).collect::<Vec<_>>();
        let duckdb = efmesh_storage(&config(""));
        assert_eq!(duckdb, vec!["_efmesh"]);
        assert_eq!(efmesh_storage_named(&duckdb, &parts("_efmesh_meta.owners")), None);
        assert_eq!(efmesh_storage_named(&duckdb, &parts("_efmesh_ducklake.main.t")), None);
        assert_eq!(efmesh_storage_named(&duckdb, &parts("_efmesh.s__a__00")), Some("_efmesh"));
        let pg = efmesh_storage(&config("[engine]\nurl_env = \"PG_ENGINE_URL\"\n"));
        assert_eq!(efmesh_storage_named(&pg, &parts("_efmesh_meta.owners")), Some("_efmesh_meta"));
        assert_eq!(efmesh_storage_named(&pg, &parts("_efmesh_ducklake.main.t")), None);
        let lake = efmesh_storage(&config("[ducklake]\ncatalog = \"lake.ducklake\"\n"));
        assert_eq!(efmesh_storage_named(&lake, &parts("_efmesh_ducklake.main.t")), Some("_efmesh_ducklake"));
        assert_eq!(efmesh_storage_named(&lake, &parts("_efmesh_meta.owners")), None);
    }
}
