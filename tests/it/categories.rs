//! Change categories end to end (issue #4): non-breaking edits rebuild only the edited model and
//! the children serve the new parent through their unchanged physical tables; forward-only adds a
//! column without replaying history and is refused when it cannot keep the table; `--reclassify`
//! is refused when it contradicts the AST and is journaled with `applied_by`; `--explain` says
//! why. The project is the corpus's (see `categories_corpus`).

use crate::categories_corpus::{BASE, Db, EVENTS_CSV, REGIONS_CSV, assert_views_match_queries, base_project, render_all, sub};
use crate::common::*;
use crate::on_every_engine;
use serde_json::{Value, json};
use std::collections::BTreeSet;

const PARENT_FILE: &str = "models/parent.sql";
const CHILD_FILE: &str = "models/child.sql";
const DAILY_FILE: &str = "models/daily.sql";

const P_SCHEMA: &str = "-- schema: id bigint, region varchar, zone varchar, amount bigint, currency varchar\n";
const P_SELECT: &str = "SELECT e.id, e.region, r.zone, e.amount, 'eur' AS currency\n";

/// `s.parent` with an added `score` column (non-breaking).
fn parent_with_score() -> String {
    sub(
        crate::categories_corpus::PARENT,
        &[
            (P_SCHEMA, "-- schema: id bigint, region varchar, zone varchar, amount bigint, currency varchar, score bigint\n"),
            (P_SELECT, "SELECT e.id, e.region, r.zone, e.amount, 'eur' AS currency, e.id * 10 AS score\n"),
        ],
    )
}

/// `s.parent` without its `zone` column (breaking, drops a column).
fn parent_without_zone() -> String {
    sub(
        crate::categories_corpus::PARENT,
        &[
            (P_SCHEMA, "-- schema: id bigint, region varchar, amount bigint, currency varchar\n"),
            (P_SELECT, "SELECT e.id, e.region, e.amount, 'eur' AS currency\n"),
        ],
    )
}

/// `s.daily` with `n` (the day's event count) inserted after `region`.
fn daily_with_count() -> String {
    sub(
        crate::categories_corpus::DAILY,
        &[
            ("-- schema: day timestamp, region varchar, revenue bigint", "-- schema: day timestamp, region varchar, n bigint, revenue bigint"),
            ("AS day, region,\n", "AS day, region, count(*) AS n,\n"),
        ],
    )
}

/// The corpus's base project on `engine` (`categories_corpus::base_project` on DuckDB). Postgres
/// reads no files: there the CSVs are loaded into tables `src_data.<name>` that the externals
/// name, and the models are written in Postgres's spelling ([`write`]).
fn project(engine: EngineBackend) -> Project {
    if !matches!(engine, EngineBackend::Postgres(_)) {
        return base_project();
    }
    let p = Project::on_engine(engine);
    p.write("efmesh.toml", &p.config_with("").replace("models/**/*.lua", "models/**/*.{lua,sql}"));
    source_table(&p, "events", EVENTS_CSV);
    source_table(&p, "regions", REGIONS_CSV);
    for (f, t) in BASE {
        write(&p, f, t);
    }
    p
}

/// On Postgres, the table `src_data.<name>` holding the rows of `csv` (the corpus's CSV files).
fn source_table(p: &Project, name: &str, csv: &str) {
    let columns = if csv.starts_with("id,") { "id bigint, event_at timestamp, region varchar, amount bigint" } else { "region varchar, zone varchar" };
    p.query("CREATE SCHEMA IF NOT EXISTS src_data");
    p.query(&format!("CREATE TABLE src_data.{name} ({columns})"));
    let rows: Vec<String> = csv.lines().skip(1).map(|l| format!("({})", l.split(',').map(|v| format!("'{v}'")).collect::<Vec<_>>().join(", "))).collect();
    p.query(&format!("INSERT INTO src_data.{name} VALUES {}", rows.join(", ")));
}

/// Writes the model file `rel`; on Postgres in its spelling: an external CSV `data/<name>.csv`
/// as the table `src_data.<name>`, `GROUP BY ALL` spelled out (by name: a positional reference
/// would make inserting a column breaking), `range(3)` as `generate_series`,
/// `double` as `float8` (and the share computed in it: `bigint / numeric` is `numeric` there).
fn write(p: &Project, rel: &str, text: &str) {
    if !p.on_postgres() {
        p.write(rel, text);
        return;
    }
    let mut text = text
        .replace("GROUP BY ALL", "GROUP BY day, region")
        .replace("FROM range(3)", "FROM generate_series(0, 2) AS g(range)")
        .replace("share double", "share float8")
        .replace("total / sum(total) OVER () AS share", "CAST(total AS float8) / sum(total) OVER () AS share")
        .replace("revenue double", "revenue float8")
        .replace("AS DOUBLE) AS revenue", "AS float8) AS revenue");
    while let Some(i) = text.find("external(path = data/") {
        let end = i + text[i..].find(".csv)").expect("a CSV external");
        let name = text[i + "external(path = data/".len()..end].to_string();
        text.replace_range(i..end + ".csv)".len(), &format!("external(table = src_data.{name})"));
    }
    p.write(rel, &text);
}

/// [`assert_views_match_queries`] on either engine.
#[track_caller]
fn assert_views_match(p: &Project, env: &str, plan: &Value, stale: &[&str]) {
    if !p.on_postgres() {
        return assert_views_match_queries(p, env, plan, stale);
    }
    let models: Vec<String> = served_models(plan).into_iter().filter(|m| !stale.contains(&m.as_str())).collect();
    let sqls = render_all(p, env, &models);
    for m in &models {
        let served = p.rows(&env_view(env, m));
        assert!(!served.is_empty(), "`{m}` serves no rows in `{env}`: the comparison would prove nothing");
        let sql = sqls[m].replace("$start", "TIMESTAMP '2026-01-01 00:00:00'").replace("$end", "TIMESTAMP '2026-02-10 00:00:00'");
        let cols: Vec<String> = columns_of(p, env, m).iter().map(|c| format!("\"{c}\"")).collect();
        let want = p.rows(&format!("(SELECT {} FROM (\n{sql}\n) AS _q) AS _r", cols.join(", ")));
        assert_eq!(served, want, "`{m}` in `{env}` serves rows (left) that its query no longer returns (right)");
    }
}

/// The served (env view) columns of `model` in `env`, in order.
fn columns_of(p: &Project, env: &str, model: &str) -> Vec<String> {
    if !p.on_postgres() {
        return Db::open(p).view_columns(env, model);
    }
    let (schema, table) = model.split_once('.').expect("schema.table");
    let schema = if env == "prod" { schema.to_string() } else { format!("{env}__{schema}") };
    p.query(&format!("SELECT column_name FROM information_schema.columns WHERE table_schema = '{schema}' AND table_name = '{table}' ORDER BY ordinal_position"))
        .into_iter()
        .map(|r| r[0].clone().expect("name"))
        .collect()
}

fn names(v: &Value) -> BTreeSet<String> {
    string_set(v)
}

/// Runs `args` with `EFMESH_APPLIED_BY` set to `who`.
fn run_as(p: &Project, who: &str, args: &[&str]) -> Run {
    let out = p.command(args).env("EFMESH_APPLIED_BY", who).output().expect("spawn efmesh");
    Run::from_output(out, args.join(" "))
}

fn physical_of(v: &Value, model: &str) -> String {
    action(v, model)["physical"].as_str().unwrap_or_else(|| panic!("no physical for {model}")).to_string()
}

fn strs(rows: &[&[&str]]) -> Rows {
    let mut r: Rows = rows.iter().map(|row| row.iter().map(|c| if *c == "NULL" { None } else { Some(c.to_string()) }).collect()).collect();
    r.sort();
    r
}

/// Asserts a command was refused (exit 1, nothing applied) with every needle in its message.
#[track_caller]
fn assert_refused(run: &Run, needles: &[&str]) {
    assert_eq!(run.code, 1, "`{}` must be refused\n--- stdout\n{}\n--- stderr\n{}", run.cmd, run.stdout, run.stderr);
    for n in needles {
        assert!(run.stderr.contains(n), "stderr of `{}` lacks `{n}`:\n{}", run.cmd, run.stderr);
    }
    assert!(!run.stdout.contains("\"applied\": true"), "{}", run.stdout);
}

on_every_engine!(
    forward_only_adds_a_column_without_replaying_history,
    a_version_a_forward_only_change_in_prod_took_the_table_of_never_writes_into_it,
    an_older_version_never_backfills_into_a_table_a_newer_forward_only_version_took_over,
    forward_only_in_dev_cannot_change_what_prod_serves,
    non_breaking_parent_edit_rebuilds_the_parent_only_and_children_serve_it_from_their_tables,
    chain_of_three_non_breaking_edits_across_two_applies_builds_only_the_edited_models,
    forward_only_on_an_indirect_change_keeps_the_table_while_siblings_rebuild,
    forward_only_is_refused_when_the_table_cannot_be_kept,
    promoting_a_forward_only_version_from_another_table_is_breaking_for_that_environment,
    reclassify_contradicting_the_ast_is_refused,
    reclassify_non_breaking_as_breaking_rebuilds_children_and_is_journaled_with_applied_by,
    explain_shows_why_and_the_diverged_paths_and_json_always_has_explain,
    star_reader_of_a_non_breaking_parent_gets_the_same_verdict_as_a_fresh_build,
    readers_a_parents_new_column_reaches_without_a_star_are_rebuilt,
);

// ---------------------------------------------------------------------------------------------
// Non-breaking: the parent alone is rebuilt

fn non_breaking_parent_edit_rebuilds_the_parent_only_and_children_serve_it_from_their_tables(engine: EngineBackend) {
    let p = project(engine);
    let first = p.apply("dev");
    let tables_before: BTreeSet<String> = p.physical_tables().into_iter().collect();
    let child_rows = p.rows(&env_view("dev", "s.child"));
    let grandchild_rows = p.rows(&env_view("dev", "s.grandchild"));
    assert_eq!(child_rows, strs(&[&["east", "75", "1"], &["north", "370", "3"], &["south", "110", "2"], &["west", "1042", "2"]]));

    write(&p, PARENT_FILE, &parent_with_score());
    let plan = p.plan("dev");
    let parent = action(&plan, "s.parent");
    assert_eq!(parent["change"], "non-breaking", "{parent:#}");
    assert_eq!(parent["build"], Value::Bool(true));
    assert_eq!(parent["previous"], action(&first, "s.parent")["fingerprint"]);
    for m in ["s.child", "s.grandchild"] {
        let a = action(&plan, m);
        assert_eq!(a["change"], "indirect", "{a:#}");
        assert_eq!(a["build"], Value::Bool(false), "{a:#}");
        // A new version (its parent's fingerprint changed) that inherits the old storage.
        assert_ne!(a["fingerprint"], action(&first, m)["fingerprint"], "{a:#}");
        assert_eq!(a["reusedFrom"], action(&first, m)["fingerprint"], "{a:#}");
        assert_eq!(a["physical"], action(&first, m)["physical"], "{a:#}");
        assert_eq!(a["explain"]["cascadeFrom"], json!([if m == "s.child" { "s.parent" } else { "s.child" }]), "{a:#}");
    }
    for a in actions(&plan).iter().filter(|a| !["s.parent", "s.child", "s.grandchild"].contains(&a["name"].as_str().unwrap())) {
        assert_eq!(a["change"], "unchanged", "{a:#}");
    }

    let applied = p.apply("dev");
    assert_eq!(applied["built"], json!(["s.parent"]));
    let tables_after: BTreeSet<String> = p.physical_tables().into_iter().collect();
    let gained: Vec<&String> = tables_after.difference(&tables_before).collect();
    assert_eq!(gained.len(), 1, "exactly one new physical table: {gained:?}");
    assert!(physical_of(&applied, "s.parent").contains(gained[0].as_str()), "{gained:?}");
    assert!(tables_before.is_subset(&tables_after), "nothing dropped");

    // The parent serves its new column; the children serve the same rows as before, which are
    // what their queries return over the new parent.
    let parent_rows = p.rows(&format!("(SELECT id, score FROM {}) AS q", env_view("dev", "s.parent")));
    assert_eq!(parent_rows, strs(&[&["1", "10"], &["2", "20"], &["3", "30"], &["4", "40"], &["5", "50"], &["6", "60"], &["8", "80"], &["9", "90"]]));
    assert_eq!(p.rows(&env_view("dev", "s.child")), child_rows);
    assert_eq!(p.rows(&env_view("dev", "s.grandchild")), grandchild_rows);
    assert_views_match(&p, "dev", &applied, &[]);

    // Promoting the same versions to prod builds nothing and serves the same rows.
    let prod = p.apply("prod");
    assert_eq!(prod["built"], json!([]), "{prod:#}");
    assert_eq!(p.physical_tables().into_iter().collect::<BTreeSet<_>>(), tables_after);
    for m in served_models(&prod) {
        assert_eq!(p.rows(&env_view("prod", &m)), p.rows(&env_view("dev", &m)), "{m}");
    }
    assert_eq!(p.plan("dev")["hasChanges"], Value::Bool(false));
}

fn chain_of_three_non_breaking_edits_across_two_applies_builds_only_the_edited_models(engine: EngineBackend) {
    let p = project(engine);
    let first = p.apply("dev");
    let mut tables: BTreeSet<String> = p.physical_tables().into_iter().collect();

    // Apply 1: the parent gains `score`, the child gains `top_score` (reading it).
    write(&p, PARENT_FILE, &parent_with_score());
    write(
        &p,
        CHILD_FILE,
        &sub(
            crate::categories_corpus::CHILD,
            &[
                ("-- schema: region varchar, total bigint, n bigint\n", "-- schema: region varchar, total bigint, n bigint, top_score bigint\n"),
                ("count(*) AS n\n", "count(*) AS n, max(score) AS top_score\n"),
            ],
        ),
    );
    let a1 = p.apply("dev");
    assert_eq!(action(&a1, "s.parent")["change"], "non-breaking");
    assert_eq!(action(&a1, "s.child")["change"], "non-breaking");
    assert_eq!(action(&a1, "s.grandchild")["change"], "indirect");
    // The grandchild view named the child's old table: it gets a new view over the new one
    // (SPEC §4, invariant 18).
    assert_eq!(names(&a1["built"]), set(&["s.parent", "s.child", "s.grandchild"]));
    assert_ne!(action(&a1, "s.grandchild")["physical"], action(&first, "s.grandchild")["physical"]);
    let now: BTreeSet<String> = p.physical_tables().into_iter().collect();
    assert_eq!(now.difference(&tables).count(), 3, "{now:?}");
    tables = now;
    assert_views_match(&p, "dev", &a1, &[]);
    assert_eq!(
        p.rows(&format!("(SELECT region, top_score FROM {}) AS q", env_view("dev", "s.child"))),
        strs(&[&["east", "60"], &["north", "50"], &["south", "40"], &["west", "90"]])
    );

    // Apply 2: the parent gains `big`. Only the parent builds; the child is reused from apply 1,
    // so the grandchild view, which names the child's table, is reused from apply 1 too.
    write(
        &p,
        PARENT_FILE,
        &sub(&parent_with_score(), &[("score bigint\n", "score bigint, big boolean\n"), ("AS score\n", "AS score, e.amount > 100 AS big\n")]),
    );
    let a2 = p.apply("dev");
    assert_eq!(action(&a2, "s.parent")["change"], "non-breaking");
    assert_eq!(action(&a2, "s.child")["change"], "indirect");
    assert_eq!(action(&a2, "s.grandchild")["change"], "indirect");
    assert_eq!(a2["built"], json!(["s.parent"]));
    assert_eq!(action(&a2, "s.child")["physical"], action(&a1, "s.child")["physical"]);
    assert_eq!(action(&a2, "s.child")["reusedFrom"], action(&a1, "s.child")["fingerprint"]);
    assert_eq!(action(&a2, "s.grandchild")["physical"], action(&a1, "s.grandchild")["physical"]);
    assert_eq!(action(&a2, "s.grandchild")["reusedFrom"], action(&a1, "s.grandchild")["fingerprint"]);
    let now: BTreeSet<String> = p.physical_tables().into_iter().collect();
    assert_eq!(now.difference(&tables).count(), 1, "{now:?}");
    assert_views_match(&p, "dev", &a2, &[]);
    assert_eq!(p.plan("dev")["hasChanges"], Value::Bool(false));

    // A fresh environment gets the same versions without building anything.
    let prod = p.apply("prod");
    assert_eq!(prod["built"], json!([]));
    for m in served_models(&prod) {
        assert_eq!(p.rows(&env_view("prod", &m)), p.rows(&env_view("dev", &m)), "{m}");
    }
}

// ---------------------------------------------------------------------------------------------
// Forward-only

fn forward_only_adds_a_column_without_replaying_history(engine: EngineBackend) {
    let mut p = project(engine);
    let first = p.apply("dev");
    assert_eq!(action(&first, "s.daily")["intervals"], json!(40));
    let old_fp = action(&first, "s.daily")["fingerprint"].as_str().unwrap().to_string();
    let table = physical_of(&first, "s.daily");
    let tables_before = p.physical_tables();
    let daily_before = p.rows(&env_view("dev", "s.daily"));

    write(&p, DAILY_FILE, &daily_with_count());
    let plan = p.run(&["plan", "dev", "--json", "--forward-only", "s.daily"]).expect_code(0).json();
    let daily = action(&plan, "s.daily");
    assert_eq!(daily["change"], "forward-only", "{daily:#}");
    assert_eq!(daily["build"], Value::Bool(false), "{daily:#}");
    assert_eq!(daily["reusedFrom"], json!(old_fp));
    assert_eq!(daily["physical"], json!(table));
    assert_eq!(daily["intervals"], json!(0), "done intervals are inherited: {daily:#}");
    assert_eq!(daily["backfill"], json!([]));
    assert!(daily["explain"]["reason"].as_str().unwrap().contains("forward-only"), "{daily:#}");
    let total = action(&plan, "s.daily_total");
    assert_eq!((total["change"].as_str(), total["build"].as_bool()), (Some("indirect"), Some(false)), "{total:#}");

    let applied = p.run(&["apply", "dev", "--yes", "--json", "--forward-only", "s.daily"]).expect_code(0).json();
    assert_eq!(applied["intervals"], json!(0), "no batch recomputed: {applied:#}");
    assert_eq!(applied["built"], json!([]));
    assert_eq!(p.physical_tables(), tables_before, "the old table is kept, no new one");
    let new_fp = action(&applied, "s.daily")["fingerprint"].as_str().unwrap().to_string();
    assert_ne!(new_fp, old_fp);
    let s = p.state();
    assert_eq!(s.done_intervals("s.daily", &new_fp).unwrap(), s.done_intervals("s.daily", &old_fp).unwrap(), "done intervals kept");
    assert_eq!(s.done_intervals("s.daily", &new_fp).unwrap().len(), 40);
    drop(s);

    // History as it was, with NULL in the new column.
    let served = p.rows(&format!("(SELECT day, region, revenue, first_at FROM {}) AS q", env_view("dev", "s.daily")));
    assert_eq!(served, daily_before);
    let n = p.rows(&format!("(SELECT DISTINCT n FROM {}) AS q", env_view("dev", "s.daily")));
    assert_eq!(n, vec![vec![None]], "old rows have NULL in the new column");
    assert_eq!(view_columns(&p, "s.daily"), ["day", "region", "n", "revenue", "first_at"], "served in declared order");
    assert_eq!(p.plan("dev")["hasChanges"], Value::Bool(false));

    // A day later: exactly one new interval, computed with the new column filled.
    p.now = "2026-02-11T00:00:00Z".into();
    let later = p.apply("dev");
    assert_eq!(later["intervals"], json!(1), "{later:#}");
    // The model downstream of the new interval is rebuilt with it (SPEC invariant 33).
    assert_eq!(later["built"], json!(["s.daily", "s.daily_total"]));
    assert_eq!(physical_of(&later, "s.daily"), table, "still the inherited table");
    let rows = p.rows(&format!("(SELECT CAST(day AS DATE), region, n, revenue FROM {} WHERE day >= TIMESTAMP '2026-02-09') AS q", env_view("dev", "s.daily")));
    assert_eq!(rows, strs(&[&["2026-02-09", "west", "NULL", "42"], &["2026-02-10", "west", "1", "1000"]]));
    let filled = p.rows(&format!("(SELECT count(*) FROM {} WHERE n IS NOT NULL) AS q", env_view("dev", "s.daily")));
    assert_eq!(filled, strs(&[&["1"]]), "only the interval computed after the change has `n`");
    assert_eq!(p.rows(&format!("(SELECT revenue FROM {} WHERE region = 'west') AS q", env_view("dev", "s.daily_total"))), strs(&[&["1042"]]));
}

/// `prod` goes forward-only while `dev` still serves the version whose table it kept: the rows
/// `prod`'s run writes there are `prod`'s, so `dev` (its project back at the old version) never
/// writes into that table — its run and apply are refused before any write, naming the model and
/// `prod` — and `prod` goes on computing with its own version.
fn a_version_a_forward_only_change_in_prod_took_the_table_of_never_writes_into_it(engine: EngineBackend) {
    let mut p = project(engine);
    p.apply("prod");
    p.apply("dev");
    write(&p, DAILY_FILE, &daily_with_count());
    p.run(&["apply", "prod", "--yes", "--forward-only", "s.daily"]).expect_code(0);
    p.now = "2026-02-11T00:00:00Z".into();
    let ran = p.run(&["run", "prod", "--json"]).expect_code(0).json();
    assert_eq!(ran["intervals"], json!(1), "{ran:#}");
    let new_day = |p: &Project| p.rows("(SELECT CAST(day AS DATE), region, n, revenue FROM s.daily WHERE day >= TIMESTAMP '2026-02-10') AS q");
    assert_eq!(new_day(&p), strs(&[&["2026-02-10", "west", "1", "1000"]]));
    let state_before = p.state_summary();

    // `dev`, at the old version: its ledger lacks the new day, which is `prod`'s row in the table.
    write(&p, DAILY_FILE, crate::categories_corpus::DAILY);
    for args in [&["run", "dev"][..], &["apply", "dev", "--yes"]] {
        let refused = p.run(args);
        refused.expect_code(1);
        let text = &refused.stderr;
        assert!(
            text.contains("model `s.daily`") && text.contains("that `prod` serves (a forward-only change") && text.contains("nothing was done"),
            "{args:?}: {text}"
        );
        assert!(text.contains(DAILY_FILE), "names the model's file: {text}");
    }
    assert_eq!(new_day(&p), strs(&[&["2026-02-10", "west", "1", "1000"]]), "prod's rows are prod's");
    assert_eq!(p.state_summary(), state_before, "nothing recorded");

    // `prod` restates and recomputes with its own version.
    write(&p, DAILY_FILE, &daily_with_count());
    p.run(&["restate", "prod", "--model", "s.daily", "--from", "2026-02-10", "--to", "2026-02-11"]).expect_code(0);
    let again = p.run(&["run", "prod", "--json"]).expect_code(0).json();
    assert_eq!(again["intervals"], json!(1), "{again:#}");
    assert_eq!(new_day(&p), strs(&[&["2026-02-10", "west", "1", "1000"]]));
}

/// The other way round: `dev` went forward-only while nobody else served the table; `prod`, on
/// the older version, would then backfill its query into the table `dev`'s newer version took
/// over: refused before any write, naming `dev`.
fn an_older_version_never_backfills_into_a_table_a_newer_forward_only_version_took_over(engine: EngineBackend) {
    let mut p = project(engine);
    p.apply("dev");
    write(&p, DAILY_FILE, &daily_with_count());
    p.run(&["apply", "dev", "--yes", "--forward-only", "s.daily"]).expect_code(0);
    p.now = "2026-02-11T00:00:00Z".into();
    p.run(&["run", "dev"]).expect_code(0);
    let dev_day = |p: &Project| {
        p.rows(&format!("(SELECT CAST(day AS DATE), region, n, revenue FROM {} WHERE day >= TIMESTAMP '2026-02-10') AS q", env_view("dev", "s.daily")))
    };
    assert_eq!(dev_day(&p), strs(&[&["2026-02-10", "west", "1", "1000"]]));
    let state_before = p.state_summary();
    write(&p, DAILY_FILE, crate::categories_corpus::DAILY);
    let refused = p.run(&["apply", "prod", "--yes"]);
    refused.expect_code(1);
    let text = &refused.stderr;
    assert!(text.contains("model `s.daily`") && text.contains("that `dev` serves (a forward-only change") && text.contains("nothing was done"), "{text}");
    assert_eq!(dev_day(&p), strs(&[&["2026-02-10", "west", "1", "1000"]]), "dev's rows are dev's");
    assert_eq!(p.state_summary(), state_before, "nothing recorded");
}

fn forward_only_on_an_indirect_change_keeps_the_table_while_siblings_rebuild(engine: EngineBackend) {
    // The external behind s.daily and s.parent changes source: s.parent's chain rebuilds, s.daily
    // keeps its table and history because the operator said so.
    let p = project(engine);
    if p.on_postgres() {
        source_table(&p, "events_copy", EVENTS_CSV);
    } else {
        p.write("data/events_copy.csv", EVENTS_CSV);
    }
    let first = p.apply("dev");
    write(&p, "models/events.sql", &sub(crate::categories_corpus::EVENTS, &[("data/events.csv", "data/events_copy.csv")]));
    let applied = p.run(&["apply", "dev", "--yes", "--json", "--forward-only", "s.daily"]).expect_code(0).json();
    let daily = action(&applied, "s.daily");
    assert_eq!(daily["change"], "forward-only", "{daily:#}");
    assert_eq!(daily["physical"], action(&first, "s.daily")["physical"]);
    assert_eq!(daily["intervals"], json!(0));
    assert_eq!(action(&applied, "s.daily_total")["build"], Value::Bool(false));
    assert_eq!(names(&applied["built"]), set(&["s.parent", "s.child", "s.grandchild"]));
    assert_eq!(applied["intervals"], json!(0));
}

fn forward_only_is_refused_when_the_table_cannot_be_kept(engine: EngineBackend) {
    let p = project(engine);
    p.apply("dev");
    let state = p.state_summary();
    let tables = p.physical_tables();
    let daily_rows = p.rows(&env_view("dev", "s.daily"));

    let try_both = |what: &str, needles: &[&str], args_model: &str, hint: bool| {
        for cmd in [vec!["plan", "dev", "--json"], vec!["apply", "dev", "--yes", "--json"]] {
            let mut args = cmd.clone();
            args.extend(["--forward-only", args_model]);
            let r = p.run(&args);
            assert_refused(&r, needles);
            assert!(!hint || r.stderr.contains("hint:"), "{what}: says what to do instead:\n{}", r.stderr);
        }
        assert_eq!(p.state_summary(), state, "{what}: state changed");
        assert_eq!(p.physical_tables(), tables, "{what}: relations changed");
        assert_eq!(p.rows(&env_view("dev", "s.daily")), daily_rows, "{what}: rows changed");
    };

    // A dropped column.
    write(
        &p,
        DAILY_FILE,
        &sub(crate::categories_corpus::DAILY, &[(", first_at timestamp\n", "\n"), (", CAST(min(event_at) AS TIMESTAMP) AS first_at\n", "\n")]),
    );
    try_both("dropped column", &["--forward-only s.daily", "first_at", "dropped"], "s.daily", true);
    // A retyped column.
    write(
        &p,
        DAILY_FILE,
        &sub(
            crate::categories_corpus::DAILY,
            &[("revenue bigint", "revenue double"), ("CAST(sum(amount) AS BIGINT) AS revenue", "CAST(sum(amount) AS DOUBLE) AS revenue")],
        ),
    );
    try_both("retyped column", &["--forward-only s.daily", "revenue", "type"], "s.daily", true);
    // A kind change within time ranges (time column).
    write(&p, DAILY_FILE, &sub(crate::categories_corpus::DAILY, &[("time_column = day", "time_column = first_at")]));
    try_both("time column", &["--forward-only s.daily", "kind changed"], "s.daily", true);
    // A kind change away from time ranges.
    write(
        &p,
        DAILY_FILE,
        &sub(
            crate::categories_corpus::DAILY,
            &[
                ("incremental_by_time_range(time_column = day, start = '2026-01-01', grain = day, batch_size = 50, lookback = 0)", "full"),
                ("WHERE event_at >= @start AND event_at < @end\n", ""),
            ],
        ),
    );
    try_both("kind change to full", &["--forward-only s.daily", "incremental_by_time_range"], "s.daily", true);
    write(&p, DAILY_FILE, crate::categories_corpus::DAILY);

    // A full model.
    write(&p, PARENT_FILE, &parent_with_score());
    try_both("full model", &["--forward-only s.parent", "only `incremental_by_time_range`"], "s.parent", true);
    // An unknown model.
    try_both("unknown model", &["unknown model `s.parnet`", "did you mean"], "s.parnet", false);

    // A version of the new query that already exists on a table of its own (applied to
    // another environment as a breaking change, every interval computed with the new query):
    // served as it is, the old history would not be kept.
    let doubled = sub(crate::categories_corpus::DAILY, &[("CAST(sum(amount) AS BIGINT) AS revenue", "CAST(sum(amount) * 2 AS BIGINT) AS revenue")]);
    write(&p, DAILY_FILE, &doubled);
    p.apply("staging");
    let state = p.state_summary();
    let tables = p.physical_tables();
    for cmd in [vec!["plan", "dev", "--json"], vec!["apply", "dev", "--yes", "--json"]] {
        let mut args = cmd.clone();
        args.extend(["--forward-only", "s.daily"]);
        let r = p.run(&args);
        assert_refused(&r, &["--forward-only s.daily", "already exists on another table", "hint:"]);
    }
    assert_eq!(p.state_summary(), state, "existing version: state changed");
    assert_eq!(p.physical_tables(), tables, "existing version: relations changed");
    assert_eq!(p.rows(&env_view("dev", "s.daily")), daily_rows, "existing version: dev's rows changed");
}

// Forward-only writes new intervals into an older version's table, so it is refused while
// another environment serves that version: `prod` keeps serving what it computed, and the
// forward-only change is applied to `prod` itself.
fn forward_only_in_dev_cannot_change_what_prod_serves(engine: EngineBackend) {
    let mut p = project(engine);
    p.apply("dev");
    p.apply("prod");
    let revenue = "SELECT CAST(day AS VARCHAR), region, CAST(revenue AS VARCHAR) FROM s.daily ORDER BY 1, 2";
    let prod_before = p.query(revenue);
    let dev_before = p.rows(&env_view("dev", "s.daily"));
    let tables = p.physical_tables();

    write(&p, DAILY_FILE, &sub(&daily_with_count(), &[("CAST(sum(amount) AS BIGINT) AS revenue", "CAST(sum(amount) * 2 AS BIGINT) AS revenue")]));
    let refused = p.run(&["apply", "dev", "--yes", "--json", "--forward-only", "s.daily"]);
    refused.expect_code(1);
    assert!(refused.stderr.contains("`prod` serves the table that would be kept"), "{}", refused.stderr);
    assert!(refused.stderr.contains("hint:"), "{}", refused.stderr);
    assert_eq!(p.physical_tables(), tables);
    assert_eq!(p.rows(&env_view("dev", "s.daily")), dev_before);

    // Applied to prod itself, the history is kept and only new intervals see the change.
    p.now = "2026-02-11T00:00:00Z".into();
    let prod = p.run(&["apply", "prod", "--yes", "--json", "--forward-only", "s.daily"]).expect_code(0).json();
    assert_eq!(action(&prod, "s.daily")["change"], "forward-only");
    assert_eq!(prod["intervals"], json!(1), "only the new day is computed");
    let after = p.query(revenue);
    assert_eq!(after.len(), prod_before.len() + 1, "exactly the new day's row was added");
    for old in &prod_before {
        assert!(after.contains(old), "history keeps the old definition's revenue: {old:?} missing from {after:?}");
    }
    let new_row = vec![Some("2026-02-10 00:00:00".to_string()), Some("west".to_string()), Some("2000".to_string())];
    assert!(after.contains(&new_row), "{after:?}");
}

// A version applied forward-only in one environment keeps an older version's table: another
// environment promoting it from a version on another table (its own) sees its data change — a
// `breaking` change onto that existing table, nothing built — and its descendants take the
// versions over that table (dev's, existing), never keeping rows computed from its old table.
fn promoting_a_forward_only_version_from_another_table_is_breaking_for_that_environment(engine: EngineBackend) {
    let p = project(engine);
    p.apply("dev");
    p.apply("prod");
    // dev moves on with a normal (breaking) change: its own new table.
    write(&p, DAILY_FILE, &sub(crate::categories_corpus::DAILY, &[("CAST(sum(amount) AS BIGINT) AS revenue", "CAST(sum(amount) * 2 AS BIGINT) AS revenue")]));
    let breaking = p.apply("dev");
    assert_eq!(action(&breaking, "s.daily")["change"], "breaking");
    let dev_table = action(&breaking, "s.daily")["physical"].clone();
    // Then adds a column forward-only: prod does not serve that version, so it is allowed.
    write(&p, DAILY_FILE, &sub(&daily_with_count(), &[("CAST(sum(amount) AS BIGINT) AS revenue", "CAST(sum(amount) * 2 AS BIGINT) AS revenue")]));
    let fo = p.run(&["apply", "dev", "--yes", "--json", "--forward-only", "s.daily"]).expect_code(0).json();
    assert_eq!(action(&fo, "s.daily")["physical"], dev_table);
    let plan = p.plan("prod");
    let daily = action(&plan, "s.daily");
    assert_eq!(daily["build"], Value::Bool(false), "{daily:#}");
    assert_eq!(daily["physical"], dev_table, "{daily:#}");
    assert_eq!(daily["change"], "breaking", "{daily:#}");
    let total = action(&plan, "s.daily_total");
    assert_eq!(total["build"], Value::Bool(false), "{total:#}");
    let dev_total = action(&p.plan("dev"), "s.daily_total")["physical"].clone();
    assert_eq!(total["physical"], dev_total, "dev's version over that table, not prod's old one: {total:#}");
}

// ---------------------------------------------------------------------------------------------
// --reclassify

fn reclassify_contradicting_the_ast_is_refused(engine: EngineBackend) {
    let p = project(engine);
    p.apply("dev");
    let state = p.state_summary();
    let tables = p.physical_tables();
    for (what, text) in [
        ("dropped", parent_without_zone()),
        (
            "renamed",
            sub(
                crate::categories_corpus::PARENT,
                &[
                    (P_SCHEMA, "-- schema: id bigint, region varchar, area varchar, amount bigint, currency varchar\n"),
                    (P_SELECT, "SELECT e.id, e.region, r.zone AS area, e.amount, 'eur' AS currency\n"),
                ],
            ),
        ),
    ] {
        write(&p, PARENT_FILE, &text);
        // Without the override it is simply breaking.
        assert_eq!(action(&p.plan("dev"), "s.parent")["change"], "breaking", "{what}");
        for cmd in [vec!["plan", "dev"], vec!["apply", "dev", "--yes", "--json"]] {
            let mut args = cmd.clone();
            args.extend(["--reclassify", "s.parent=non-breaking"]);
            let r = p.run(&args);
            assert_refused(&r, &["cannot reclassify `s.parent` as non-breaking", "dropped or renamed column"]);
        }
        assert_eq!(p.state_summary(), state, "{what}");
        assert_eq!(p.physical_tables(), tables, "{what}");
    }
    // Malformed overrides are refused too.
    for bad in ["s.parent=forward-only", "s.parent", "s.nope=breaking"] {
        let r = p.run(&["plan", "dev", "--reclassify", bad]);
        assert_eq!(r.code, 1, "`--reclassify {bad}`\n{}", r.stderr);
        assert!(r.stderr.contains("reclassify") || r.stderr.contains("unknown model"), "{}", r.stderr);
    }
}

/// A misspelt `--reclassify` category names the categories and the one meant, on `plan` and
/// `apply` alike, as a `usage` error in `--json` (it was kind `error`, with no "did you mean");
/// nothing is planned or written.
#[test]
fn a_misspelt_reclassify_category_names_the_one_meant_as_a_usage_error() {
    let p = project(EngineBackend::DuckDb);
    for cmd in [vec!["plan", "dev"], vec!["apply", "dev", "--yes"]] {
        let mut args = cmd.clone();
        args.extend(["--reclassify", "s.parent=nonbreaking"]);
        let r = p.run(&args);
        assert_refused(&r, &["--reclassify: `nonbreaking` is not `breaking` or `non-breaking` (did you mean `non-breaking`?)"]);
        args.push("--json");
        let v = p.run(&args).expect_code(1).json();
        assert_eq!(v["error"]["kind"], "usage", "{v:#}");
        assert!(v["error"]["message"].as_str().is_some_and(|m| m.ends_with("(did you mean `non-breaking`?)")), "{v:#}");
    }
    let r = p.run(&["plan", "dev", "--reclassify", "breaking=s.parent"]);
    assert_refused(&r, &["`s.parent` is not `breaking` or `non-breaking` (the model goes first: `s.parent=breaking`)"]);
    // Refused before the project or the state store is read.
    assert!(!p.state_path().exists() && !p.engine_path().exists(), "nothing was written");
}

fn reclassify_non_breaking_as_breaking_rebuilds_children_and_is_journaled_with_applied_by(engine: EngineBackend) {
    let p = project(engine);
    p.apply("dev");
    let tables_before: BTreeSet<String> = p.physical_tables().into_iter().collect();
    write(&p, PARENT_FILE, &parent_with_score());
    assert_eq!(action(&p.plan("dev"), "s.parent")["change"], "non-breaking");

    let text = p.run(&["plan", "dev", "--reclassify", "s.parent=breaking"]).expect_code(0).stdout.clone();
    assert!(text.contains("reclassified, was non-breaking"), "{text}");

    let r = run_as(&p, "tester", &["apply", "dev", "--yes", "--json", "--reclassify", "s.parent=breaking"]);
    let applied = r.expect_code(0).json();
    let parent = action(&applied, "s.parent");
    assert_eq!(parent["change"], "breaking", "{parent:#}");
    assert_eq!(parent["reclassifiedFrom"], "non-breaking", "{parent:#}");
    for m in ["s.child", "s.grandchild"] {
        let a = action(&applied, m);
        assert_eq!((a["change"].as_str(), a["build"].as_bool()), (Some("indirect"), Some(true)), "{a:#}");
        assert!(a.get("reusedFrom").is_none(), "{a:#}");
        assert!(a.get("reclassifiedFrom").is_none(), "{a:#}");
    }
    assert_eq!(names(&applied["built"]), set(&["s.parent", "s.child", "s.grandchild"]));
    let tables_after: BTreeSet<String> = p.physical_tables().into_iter().collect();
    assert_eq!(tables_after.difference(&tables_before).count(), 3);
    assert_views_match(&p, "dev", &applied, &[]);

    let journal = p.state().journal("dev").unwrap();
    assert_eq!(journal.len(), 2);
    let last = journal.last().unwrap();
    assert_eq!(last.applied_by, "tester");
    let logged: Vec<&Value> = last.summary["actions"].as_array().expect("actions").iter().collect();
    let parent = logged.iter().find(|a| a["name"] == "s.parent").expect("s.parent journaled");
    assert_eq!(parent["change"], "breaking");
    assert_eq!(parent["reclassifiedFrom"], "non-breaking");
    let child = logged.iter().find(|a| a["name"] == "s.child").expect("s.child journaled");
    assert_eq!(child["change"], "indirect");
    assert!(child["reclassifiedFrom"].is_null(), "{child}");
    assert_eq!(journal[0].applied_by, "it");
}

// ---------------------------------------------------------------------------------------------
// --explain

fn explain_shows_why_and_the_diverged_paths_and_json_always_has_explain(engine: EngineBackend) {
    let p = project(engine);
    p.apply("dev");
    write(&p, PARENT_FILE, &sub(crate::categories_corpus::PARENT, &[("WHERE e.amount > 10\n", "WHERE e.amount > 50\n")]));
    write(&p, DAILY_FILE, &daily_with_count());
    write(&p, "models/other.lua", &sub(crate::categories_corpus::OTHER, &[("  kind = kind.full(),\n", "  kind = kind.full(),\n  description = \"three\",\n")]));

    let text = p.run(&["plan", "dev", "--explain"]).expect_code(0).stdout.clone();
    let block = |model: &str| -> String {
        let lines: Vec<&str> = text.lines().collect();
        let i = lines.iter().position(|l| l.split_whitespace().nth(1) == Some(model)).unwrap_or_else(|| panic!("no line for {model}:\n{text}"));
        lines[i..].iter().skip(1).take_while(|l| l.starts_with("      ")).map(|l| l.trim()).collect::<Vec<_>>().join("\n")
    };
    let parent = block("s.parent");
    assert!(parent.contains("why: the query changed beyond adding output columns"), "{text}");
    assert!(parent.lines().any(|l| l == "diverged: where"), "{text}");
    let daily = block("s.daily");
    assert!(daily.contains("why: only added output column: `n`"), "{text}");
    assert!(daily.lines().any(|l| l == "diverged: projection[2] (added)"), "{text}");
    let child = block("s.child");
    assert!(child.contains("why: unchanged itself; rebuilt because of breaking parent `s.parent`"), "{text}");
    assert!(child.contains("from: `s.parent`"), "{text}");
    let total = block("s.daily_total");
    // A view over a parent's new table is a new view (SPEC §4, invariant 18).
    assert!(total.contains("why: unchanged itself;") && total.contains("a new view is created"), "{text}");
    let other = block("u.other");
    assert!(other.contains("why: only fields that do not shape data changed"), "{text}");
    assert!(other.lines().any(|l| l == "diverged: description"), "{text}");
    assert!(block("s.grandchild").contains("from: `s.child`"), "{text}");
    // A parent rebuilt for a change above it is named as what it is (`indirect`), not "breaking".
    assert!(block("s.grandchild").contains("why: unchanged itself; rebuilt because of indirectly changed parent `s.child`"), "{text}");
    assert!(block("src.events").is_empty(), "unchanged models have no explanation:\n{text}");

    // Without --explain: the categories, no reasons.
    let plain = p.run(&["plan", "dev"]).expect_code(0).stdout.clone();
    assert!(!plain.contains("why:") && !plain.contains("diverged:"), "{plain}");
    assert!(plain.contains("breaking") && plain.contains("non-breaking") && plain.contains("metadata"), "{plain}");
    // apply prints the explained plan.
    let r = p.run(&["apply", "dev"]);
    assert_eq!(r.code, 2, "no --yes and no TTY: awaiting a human\n{}", r.stderr);
    assert!(r.stdout.contains("diverged: where"), "{}", r.stdout);

    // JSON: explain on every change, with or without --explain.
    let json = p.plan("dev");
    assert_eq!(p.run(&["plan", "dev", "--json", "--explain"]).expect_code(0).json(), json);
    for a in actions(&json) {
        let change = a["change"].as_str().unwrap();
        let explain = a.get("explain");
        if matches!(change, "added" | "unchanged") {
            assert!(explain.is_none(), "{a:#}");
        } else {
            let e = explain.unwrap_or_else(|| panic!("no explain: {a:#}"));
            assert!(e["reason"].as_str().is_some_and(|r| !r.is_empty()), "{a:#}");
            assert!(e["diverged"].is_array(), "{a:#}");
        }
    }
    assert_eq!(action(&json, "s.parent")["explain"]["diverged"], json!(["where"]));
    assert_eq!(action(&json, "s.daily")["explain"]["diverged"], json!(["projection[2] (added)"]));
    assert_eq!(action(&json, "s.child")["explain"]["cascadeFrom"], json!(["s.parent"]));
    assert_eq!(action(&json, "u.other")["explain"]["diverged"], json!(["description"]));
}

// ---------------------------------------------------------------------------------------------
// A `SELECT *` reader of a non-breaking parent

// s.grandchild reads `SELECT * FROM s.child` and declares (region, total, n). s.child gains a
// column (non-breaking): a `*` reader's shape would change, so it is rebuilt rather than reused,
// and the incremental apply reaches the same verdict as a build from scratch (the contract error
// naming s.grandchild).
fn star_reader_of_a_non_breaking_parent_gets_the_same_verdict_as_a_fresh_build(engine: EngineBackend) {
    const STAR: &str =
        "-- name: s.grandchild\n-- kind: view\n-- schema: region varchar, total bigint, n bigint\n-- refs: s.child\nSELECT * FROM @ref(s.child)\n";
    let child = sub(
        crate::categories_corpus::CHILD,
        &[
            ("-- schema: region varchar, total bigint, n bigint\n", "-- schema: region varchar, total bigint, n bigint, top bigint\n"),
            ("count(*) AS n\n", "count(*) AS n, max(amount) AS top\n"),
        ],
    );
    let incremental = project(engine.another());
    write(&incremental, "models/grandchild.sql", STAR);
    incremental.apply("dev");
    write(&incremental, CHILD_FILE, &child);
    let inc = incremental.run(&["apply", "dev", "--yes", "--json"]);

    let fresh = project(engine);
    write(&fresh, "models/grandchild.sql", STAR);
    write(&fresh, CHILD_FILE, &child);
    let scratch = fresh.run(&["apply", "dev", "--yes", "--json"]);
    assert_eq!(scratch.code, 1, "{}", scratch.stderr);
    assert!(scratch.stderr.contains("s.grandchild") && scratch.stderr.contains("`top`"), "{}", scratch.stderr);

    assert_eq!(inc.code, scratch.code, "incremental apply:\n{}\n{}\nfrom scratch:\n{}", inc.stdout, inc.stderr, scratch.stderr);
}

/// `s.a` gains `amount` (non-breaking). Its readers that may bind the new column although they
/// select no `*` — a `NATURAL JOIN`, an unqualified `amount` a correlated subquery took from the
/// outer query, DuckDB's bare `FROM` — are rebuilt and serve what a fresh build serves; one
/// naming only `a.id` keeps its table.
fn readers_a_parents_new_column_reaches_without_a_star_are_rebuilt(engine: EngineBackend) {
    let pg = matches!(engine, EngineBackend::Postgres(_));
    let models = |with_amount: bool| {
        let (schema, amount) = if with_amount { (", amount integer", ", amount - 100 AS amount") } else { ("", "") };
        let mut files = vec![
            ("models/t.sql", "-- name: raw.t\n-- kind: external(table = src_data.t)\n-- schema: id integer, amount integer\n".to_string()),
            ("models/a.sql", format!("-- name: s.a\n-- kind: full\n-- schema: id integer{schema}\n-- refs: raw.t\nSELECT id{amount} FROM @ref(raw.t)\n")),
            (
                "models/nat.sql",
                "-- name: s.nat\n-- kind: full\n-- schema: n bigint\n-- refs: s.a, raw.t\nSELECT count(*) AS n FROM @ref(s.a) AS a NATURAL JOIN @ref(raw.t) AS t\n".into(),
            ),
            (
                "models/capture.sql",
                "-- name: s.capture\n-- kind: full\n-- schema: id integer, n bigint\n-- refs: s.a, raw.t\n\
                 SELECT o.id, (SELECT count(*) FROM @ref(s.a) AS i WHERE i.id = o.id AND amount > 6) AS n FROM @ref(raw.t) AS o\n"
                    .into(),
            ),
            ("models/plain.sql", "-- name: s.plain\n-- kind: full\n-- schema: id integer\n-- refs: s.a\nSELECT a.id FROM @ref(s.a) AS a\n".into()),
        ];
        if !pg {
            files.push(("models/bare.sql", "-- name: s.bare\n-- kind: view\n-- schema: id integer\n-- refs: s.a\nFROM @ref(s.a)\n".into()));
        }
        files
    };
    let setup = |p: &Project, with_amount: bool| {
        p.write("efmesh.toml", &p.config_with("").replace("models/**/*.lua", "models/**/*.sql"));
        p.execute_on_engine(
            "CREATE SCHEMA src_data; CREATE TABLE src_data.t (id integer, amount integer); INSERT INTO src_data.t VALUES (1, 5), (2, 10), (3, 7)",
        );
        for (f, t) in models(with_amount) {
            p.write(f, &t);
        }
    };
    let p = Project::on_engine(engine.another());
    setup(&p, false);
    p.apply("dev");
    for (f, t) in models(true) {
        p.write(f, &t);
    }
    let plan = p.run(&["plan", "dev", "--json"]).expect_code(0).json();
    let action = |m: &str| plan["actions"].as_array().unwrap().iter().find(|a| a["name"] == m).cloned().unwrap_or_default();
    assert_eq!(action("s.a")["change"], "non-breaking", "{plan:#}");
    for m in ["s.nat", "s.capture"] {
        assert_eq!(action(m)["build"], true, "{m} must be rebuilt: {:#}", action(m));
    }
    assert_eq!(action("s.plain")["build"], false, "a reader naming `a.id` only keeps its table: {:#}", action("s.plain"));
    // Bare `FROM` selects every column: its contract now fails, as a fresh build's does.
    if !pg {
        let run = p.run(&["apply", "dev", "--yes"]);
        run.expect_code(1);
        assert!(run.stderr.contains("s.bare") && run.stderr.contains("`amount`"), "{}", run.stderr);
        p.write("models/bare.sql", "-- name: s.bare\n-- kind: view\n-- schema: id integer, amount integer\n-- refs: s.a\nFROM @ref(s.a)\n");
    }
    p.apply("dev");
    let fresh = Project::on_engine(engine);
    setup(&fresh, true);
    if !pg {
        fresh.write("models/bare.sql", "-- name: s.bare\n-- kind: view\n-- schema: id integer, amount integer\n-- refs: s.a\nFROM @ref(s.a)\n");
    }
    fresh.apply("dev");
    for m in ["nat", "capture", "plain"] {
        let rel = format!("\"dev__s\".\"{m}\"");
        assert_eq!(p.rows(&rel), fresh.rows(&rel), "{m}");
    }
}

// ---------------------------------------------------------------------------------------------
// DuckDB's dot call `d.abs()` reads the name before the dot

/// `m.p`, with its column `d` when `with_d`; `m.c` filters on its own select alias `d` through
/// DuckDB's dot call `d.abs()` (`abs(d)`), `m.plain` reads `v` the same way.
fn dot_call_models(with_d: bool) -> String {
    let (schema, item) = if with_d { (r#", { "d", "bigint" }"#, ", CAST(0 AS BIGINT) AS d") } else { ("", "") };
    format!(
        r#"local p = define_model {{ name = "m.p", kind = kind.full(), schema = {{ {{ "id", "bigint" }}, {{ "v", "bigint" }}{schema} }},
  query = "SELECT CAST(i AS BIGINT) AS id, CAST(CASE WHEN i = 1 THEN 10 ELSE -30 END AS BIGINT) AS v{item} FROM generate_series(1, 2) AS t(i)" }}
define_model {{ name = "m.c", kind = kind.full(), schema = {{ {{ "id", "bigint" }}, {{ "d", "bigint" }} }},
  query = "SELECT id, v * 2 AS d FROM " .. ref(p) .. " WHERE d.abs() > 30" }}
define_model {{ name = "m.plain", kind = kind.full(), schema = {{ {{ "id", "bigint" }}, {{ "w", "bigint" }} }},
  query = "SELECT id, v.abs() AS w FROM " .. ref(p) }}
"#
    )
}

/// `m.p` gains a column `d` (non-breaking). DuckDB binds the `d` of `m.c`'s `WHERE d.abs() > 30`
/// to the parent's new column before `m.c`'s own select alias, so `m.c` returns other rows: it
/// is rebuilt and serves what a fresh build serves (no row); `m.plain`, whose dot call reads
/// `v`, keeps its table. DuckDB's syntax: not on Postgres.
#[test]
fn a_dot_call_on_a_name_a_parent_adds_reads_the_new_column_and_its_reader_is_rebuilt() {
    let p = Project::new();
    p.write("models/m.lua", &dot_call_models(false));
    p.apply("dev");
    assert_eq!(p.rows(&env_view("dev", "m.c")), strs(&[&["2", "-60"]]));
    p.write("models/m.lua", &dot_call_models(true));
    let plan = p.plan("dev");
    assert_eq!(action(&plan, "m.p")["change"], "non-breaking", "{plan:#}");
    assert_eq!(action(&plan, "m.c")["build"], Value::Bool(true), "{:#}", action(&plan, "m.c"));
    assert_eq!(action(&plan, "m.plain")["build"], Value::Bool(false), "{:#}", action(&plan, "m.plain"));
    p.apply("dev");
    assert_eq!(p.rows(&env_view("dev", "m.c")), Rows::new(), "`d` is the parent's 0 now");
    let fresh = Project::new();
    fresh.write("models/m.lua", &dot_call_models(true));
    fresh.apply("dev");
    for m in ["m.p", "m.c", "m.plain"] {
        assert_eq!(p.rows(&env_view("dev", m)), fresh.rows(&env_view("dev", m)), "{m} differs from a fresh build");
    }
}

/// A SQL project: `m.p` over `src.t` (`id`, `k`, `zone`, `a`), gaining a struct column `z`, a
/// column `current_date` and a column `a` when `added`; `m.exists` keeps the rows of `src.t` as
/// `z` whose `k` a subquery over `m.p` finds by `z.k`, `m.today` reads `current_date` over `m.p`,
/// `m.counted` counts `m.p`'s rows per row of `src.t` as `o` where `if(a = 1, true, false)`, and
/// `m.plain` reads `p.id` only.
fn captured_name_project(added: bool) -> Project {
    let p = Project::new();
    p.write("efmesh.toml", &p.config_with("").replace("models/**/*.lua", "models/**/*.sql"));
    p.write("data/t.csv", "id,k,zone,a\n1,a,cold,1\n2,b,warm,1\n");
    let (schema, items) = if added {
        (", z struct(k varchar), \"current_date\" date, a integer", ", {'k': 'none'} AS z, DATE '2000-01-01' AS \"current_date\", 7 AS a")
    } else {
        ("", "")
    };
    let model = |name: &str, schema: &str, refs: &str, query: &str| {
        p.write(&format!("models/{}.sql", name.replace('.', "_")), &format!("-- name: {name}\n-- kind: full\n-- schema: {schema}\n-- refs: {refs}\n{query}\n"));
    };
    p.write("models/src_t.sql", "-- name: src.t\n-- kind: external(path = data/t.csv)\n-- schema: id integer, k varchar, zone varchar, a integer\n");
    model("m.p", &format!("id integer, k varchar{schema}"), "src.t", &format!("SELECT id, k{items} FROM @ref(src.t)"));
    model(
        "m.exists",
        "k varchar, zone varchar",
        "m.p, src.t",
        "SELECT z.k, z.zone FROM @ref(src.t) AS z WHERE EXISTS (SELECT 1 FROM @ref(m.p) AS p WHERE p.k = z.k)",
    );
    model("m.today", "id integer, d date", "m.p", "SELECT id, current_date AS d FROM @ref(m.p)");
    model(
        "m.counted",
        "id integer, n bigint",
        "m.p, src.t",
        "SELECT o.id, (SELECT count(*) FROM @ref(m.p) AS i WHERE i.id = o.id AND if(a = 1, true, false)) AS n FROM @ref(src.t) AS o",
    );
    model("m.plain", "id integer", "m.p", "SELECT p.id FROM @ref(m.p) AS p");
    p
}

/// `m.p` gains columns (non-breaking) that names of its readers bind to though they select no
/// `*`: a struct column `z`, which DuckDB binds a subquery's `z.k` to before the outer relation
/// `z`; a column `current_date`, which DuckDB binds the keyword to; a column `a`, which the
/// comparison in `if(a = 1, …)` (sqlparser's argument named `a`) of a subquery over `m.p` took
/// from the outer query. Each reader is rebuilt and serves what a fresh build serves;
/// `m.plain` keeps its table. DuckDB's syntax: not on Postgres.
#[test]
fn a_struct_a_keyword_named_or_a_compared_column_a_parent_adds_captures_its_readers_names_and_they_are_rebuilt() {
    let p = captured_name_project(false);
    p.apply("dev");
    assert_eq!(p.rows(&env_view("dev", "m.exists")), strs(&[&["a", "cold"], &["b", "warm"]]));
    assert_eq!(p.rows(&env_view("dev", "m.counted")), strs(&[&["1", "1"], &["2", "1"]]));
    let added = captured_name_project(true);
    for m in ["m_p", "m_exists", "m_today", "m_counted", "m_plain"] {
        let file = format!("models/{m}.sql");
        p.write(&file, &added.read(&file));
    }
    let plan = p.plan("dev");
    assert_eq!(action(&plan, "m.p")["change"], "non-breaking", "{plan:#}");
    for m in ["m.exists", "m.today", "m.counted"] {
        assert_eq!(action(&plan, m)["build"], Value::Bool(true), "{m} must be rebuilt: {:#}", action(&plan, m));
    }
    assert_eq!(action(&plan, "m.plain")["build"], Value::Bool(false), "{:#}", action(&plan, "m.plain"));
    p.apply("dev");
    added.apply("dev");
    for m in ["m.p", "m.exists", "m.today", "m.counted", "m.plain"] {
        assert_eq!(p.rows(&env_view("dev", m)), added.rows(&env_view("dev", m)), "{m} differs from a fresh build");
    }
    assert_eq!(p.rows(&env_view("dev", "m.exists")), Rows::new(), "`z.k` is `m.p`'s `z`'s `none`");
    assert_eq!(p.rows(&env_view("dev", "m.today")), strs(&[&["1", "2000-01-01"], &["2", "2000-01-01"]]));
    assert_eq!(p.rows(&env_view("dev", "m.counted")), strs(&[&["1", "0"], &["2", "0"]]), "`a` is `m.p`'s 7");
}

/// The served columns of `model` in `dev`.
fn view_columns(p: &Project, model: &str) -> Vec<String> {
    columns_of(p, "dev", model)
}
