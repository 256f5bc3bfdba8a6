//! A forward-only apply that promotes nothing leaves every environment serving exactly what its
//! version's ledger records (SPEC §4 invariant 65). The forward-only version computes its
//! intervals in the table it keeps, which `prod` serves through the old version: refused (a
//! blocking audit of the version or of a model below it), the apply takes back what it wrote
//! there, so `prod` never serves the new query's rows for intervals its ledger does not hold;
//! stopped (`kill -9`) after rewriting intervals the old version had done, their rows are the
//! new query's and the old version's ledger no longer calls them done, so the next `run`
//! recomputes them with the old query. A unique-key, partition or SCD type 2 table below it that
//! the refused apply refreshed in place (the table `prod` serves) from the rows it then took back
//! gets back what it held before the apply: no later refresh would delete a key only the refused
//! query produced, nor reopen a version its refresh closed.

use crate::common::*;
use std::collections::BTreeSet;

/// A project whose engine holds `landing.events`: 50 on the 1st, 70 on the 2nd, 10 on the 3rd
/// (at 03:00), planned at midnight on the 3rd.
fn landed() -> Project {
    landed_on(EngineBackend::DuckDb)
}

/// [`landed`] on `engine`.
fn landed_on(engine: EngineBackend) -> Project {
    let mut p = Project::on_engine(engine);
    p.execute_on_engine("CREATE SCHEMA landing");
    p.execute_on_engine("CREATE TABLE landing.events (ts timestamp, v integer)");
    p.execute_on_engine(
        "INSERT INTO landing.events VALUES (TIMESTAMP '2026-01-01 03:00', 50), (TIMESTAMP '2026-01-02 03:00', 70), (TIMESTAMP '2026-01-03 03:00', 10)",
    );
    p.now = "2026-01-03T00:00:00Z".into();
    p
}

/// `t.daily` sums `landing.events` per day times `factor` (`""`, or `" * 2"`: another query),
/// with `kind_extra` added to its kind's arguments and `audits` as its audits (none when empty);
/// `below`: models reading it (`daily`).
fn models(factor: &str, kind_extra: &str, audits: &str, below: &str) -> String {
    let audits = if audits.is_empty() { String::new() } else { format!("  audits = {{ {audits} }},\n") };
    format!(
        r#"
local raw = define_model {{ name = "raw.events", kind = kind.external {{ table = "landing.events" }}, schema = {{ {{ "ts", "timestamp" }}, {{ "v", "integer" }} }} }}
local daily = define_model {{
  name = "t.daily", kind = kind.incremental_by_time_range {{ time_column = "day", start = "2026-01-01"{kind_extra} }},
  schema = {{ {{ "day", "timestamp" }}, {{ "total", "bigint" }} }},
{audits}  query = "SELECT CAST(date_trunc('day', ts) AS TIMESTAMP) AS day, CAST(sum(v){factor} AS BIGINT) AS total FROM " .. ref(raw) .. " WHERE ts >= @start AND ts < @end GROUP BY 1",
}}
{below}
"#
    )
}

/// `a.chk`: how many days of `t.daily` exceed 15, a `full` model whose blocking audit wants
/// fewer than 3.
const CHECK: &str = r#"
define_model {
  name = "a.chk", kind = kind.full(),
  schema = { { "n", "bigint" } },
  audits = { audit.expression("n < 3") },
  query = "SELECT CAST(count(*) FILTER (WHERE total > 15) AS BIGINT) AS n FROM " .. ref(daily),
}
"#;

/// Days served by `t.daily` in `prod`, as `day=total` joined by `,`.
fn days(p: &Project) -> String {
    let rows = p.query(&format!(
        "SELECT coalesce(string_agg(strftime(day, '%d') || '=' || CAST(total AS VARCHAR), ',' ORDER BY day), '') FROM {}",
        env_view("prod", "t.daily")
    ));
    rows.first().and_then(|r| r.first().cloned().flatten()).unwrap_or_default()
}

/// The version of `t.daily` `prod` serves.
fn served(p: &Project) -> String {
    p.state().env_pointers("prod").expect("pointers")["t.daily"].clone()
}

/// The done interval starts of version `fp` of `t.daily`.
fn done(p: &Project, fp: &str) -> BTreeSet<i64> {
    p.state().done_intervals("t.daily", fp).expect("ledger")
}

/// The start of day `d` of January 2026, as the ledger records it.
fn day(d: u32) -> i64 {
    efmesh::core::interval::parse_instant(&format!("2026-01-{d:02}T00:00:00Z")).expect("instant")
}

/// `prod`'s lag of `t.daily` in `status prod --check --json`, which must exit 0.
fn behind(p: &Project) -> i64 {
    let status = p.run(&["status", "prod", "--check", "--json"]).expect_code(0).json();
    let lag = status["lag"].as_array().and_then(|l| l.iter().find(|l| l["model"] == "t.daily")).cloned().unwrap_or_else(|| panic!("{status:#}"));
    lag["behind"].as_i64().unwrap_or_else(|| panic!("{status:#}"))
}

/// What every refusal below leaves: `prod` serves the rows and the ledger it served before, and no
/// ledger of any version of `t.daily` holds the 3rd, whose row the refused version wrote into
/// the table `prod` serves; `status` counts the 3rd as not done yet, the plan of the project
/// `prod` serves computes it, and the forward-only change applied again computes it too (its
/// version's ledger lost it with the row).
#[track_caller]
fn assert_taken_back(p: &Project, old: &str, before: &BTreeSet<i64>, below: &str) {
    assert_eq!(served(p), old, "nothing was promoted");
    assert_eq!(days(p), "01=50,02=70", "prod serves what it served: the refused version's row for the 3rd is gone");
    assert_eq!(&done(p, old), before, "prod's ledger as it was");
    for ((name, fp), starts) in p.state().all_done_intervals().expect("ledgers") {
        assert!(name != "t.daily" || !starts.contains(&day(3)), "version {fp} of t.daily still calls the 3rd done");
    }
    // The project `prod` serves.
    p.write("models/m.lua", &models("", "", "", below));
    assert_eq!(behind(p), 1, "the 3rd is not done for the version prod serves");
    let plan = p.plan("prod");
    let daily = action(&plan, "t.daily");
    assert_eq!((daily["change"].as_str(), daily["intervals"].as_i64()), (Some("unchanged"), Some(1)), "{plan:#}");
    // Applied again without what refused it: the 3rd is computed by the forward-only query.
    p.write("models/m.lua", &models(" * 2", "", "", ""));
    let applied = p.run(&["apply", "prod", "--yes", "--json", "--forward-only", "t.daily"]).expect_code(0).json();
    assert_eq!(action(&applied["plan"], "t.daily")["intervals"].as_i64(), Some(1), "{applied:#}");
    assert_eq!(days(p), "01=50,02=70,03=20");
}

#[test]
fn a_forward_only_apply_refused_by_its_own_audit_takes_back_the_rows_it_wrote_into_the_table_prod_serves() {
    let mut p = landed();
    p.write("models/m.lua", &models("", "", "", ""));
    p.apply("prod");
    let (old, before) = (served(&p), done(&p, &served(&p)));
    assert_eq!(days(&p), "01=50,02=70");
    // The new query's row for the 3rd (20) passes; the 2nd it keeps (70) fails the audit it adds,
    // run over the whole table before the view swap: after the 3rd was written there.
    p.write("models/m.lua", &models(" * 2", "", r#"audit.accepted_range { column = "total", max = 60 }"#, ""));
    p.now = "2026-01-04T00:00:00Z".into();
    let refused = p.run(&["apply", "prod", "--yes", "--forward-only", "t.daily"]);
    refused.expect_code(1);
    assert!(refused.stderr.contains("blocking audit") && refused.stderr.contains("nothing was promoted"), "{}", refused.stderr);
    assert!(refused.stderr.contains("t.daily") && refused.stderr.contains("were taken back"), "the warning says so: {}", refused.stderr);
    assert_taken_back(&p, &old, &before, "");
}

#[test]
fn a_forward_only_apply_refused_by_the_audit_of_a_full_model_below_takes_back_the_rows_it_wrote() {
    let mut p = landed();
    p.write("models/m.lua", &models("", "", "", CHECK));
    p.apply("prod");
    let (old, before) = (served(&p), done(&p, &served(&p)));
    let checked = p.rows(&env_view("prod", "a.chk"));
    assert_eq!(checked, vec![vec![Some("2".to_string())]]);
    // The 3rd (20) makes three days above 15: `a.chk`'s rebuild, over the table `prod` serves,
    // fails its audit (rolled back), after `t.daily` wrote the 3rd there.
    p.write("models/m.lua", &models(" * 2", "", "", CHECK));
    p.now = "2026-01-04T00:00:00Z".into();
    let refused = p.run(&["apply", "prod", "--yes", "--forward-only", "t.daily"]);
    refused.expect_code(1);
    assert!(refused.stderr.contains("a.chk"), "{}", refused.stderr);
    assert_eq!(p.rows(&env_view("prod", "a.chk")), checked, "a.chk as it was");
    assert_taken_back(&p, &old, &before, CHECK);
}

/// `k.top`: a unique-key model summing `t.daily`; `a.top`: a `full` model over it whose
/// blocking audit wants its total under 135.
const KEYED: &str = r#"
local top = define_model {
  name = "k.top", kind = kind.incremental_by_unique_key { key = "k" },
  schema = { { "k", "varchar" }, { "total", "bigint" } },
  query = "SELECT 'all' AS k, CAST(sum(total) AS BIGINT) AS total FROM " .. ref(daily),
}
define_model {
  name = "a.top", kind = kind.full(),
  schema = { { "n", "bigint" } },
  audits = { audit.expression("n < 135") },
  query = "SELECT CAST(max(total) AS BIGINT) AS n FROM " .. ref(top),
}
"#;

/// The models pending a refresh or rebuild in `status prod --json` (which must exit 0).
fn pending(p: &Project) -> Vec<String> {
    let status = p.run(&["status", "prod", "--json"]).expect_code(0).json();
    let list = status["pendingRebuilds"].as_array().unwrap_or_else(|| panic!("{status:#}"));
    list.iter().filter_map(|r| r["name"].as_str().map(str::to_string)).collect()
}

/// True when a line of `stderr` says the table of `model` was put back as it was before the apply.
fn put_back(stderr: &str, model: &str) -> bool {
    stderr.lines().any(|l| l.contains(model) && l.contains("holds what it held before the apply again"))
}

/// A unique-key model refreshed in place by the refused apply (in the table `prod` serves) from
/// the rows it then took back (the refused query's 20 for the 3rd: 140, where what `prod` serves
/// sums to 120) gets back what it held: 120, and nothing pending. The next apply of the project
/// `prod` serves computes the 3rd and refreshes it from what `prod` serves.
#[test]
fn a_unique_key_model_refreshed_from_rows_a_refused_forward_only_apply_took_back_gets_its_rows_back() {
    let mut p = landed();
    p.write("models/m.lua", &models("", "", "", KEYED));
    p.apply("prod");
    let total = |p: &Project| p.rows(&env_view("prod", "k.top"))[0][1].clone().unwrap_or_default();
    assert_eq!(total(&p), "120");
    p.write("models/m.lua", &models(" * 2", "", "", KEYED));
    p.now = "2026-01-04T00:00:00Z".into();
    let refused = p.run(&["apply", "prod", "--yes", "--forward-only", "t.daily"]);
    refused.expect_code(1);
    assert!(refused.stderr.contains("a.top") && refused.stderr.contains("were taken back"), "{}", refused.stderr);
    assert!(put_back(&refused.stderr, "k.top"), "the warning says so: {}", refused.stderr);
    assert_eq!(days(&p), "01=50,02=70");
    assert_eq!(total(&p), "120", "k.top's refresh from the refused row, put back as it was");
    assert!(!pending(&p).contains(&"k.top".to_string()), "nothing left to refresh: it holds what it held");
    assert!(p.state().pending_rebuilds().expect("pending").iter().all(|r| r.name != "k.top"));
    // The project `prod` serves: its next apply computes the 3rd and refreshes k.top.
    p.write("models/m.lua", &models("", "", "", KEYED));
    p.apply("prod");
    assert_eq!(days(&p), "01=50,02=70,03=10");
    assert_eq!(total(&p), "130");
    let status = p.run(&["status", "prod", "--check", "--json"]).expect_code(0).json();
    assert_eq!(status["pendingRebuilds"], serde_json::json!([]), "{status:#}");
}

/// `k.vals`: a unique-key model keyed by each day's total of `t.daily` as text (a total only the
/// refused query produces is a key no later refresh deletes); `s.hist`: an SCD type 2 history of
/// their sum (a version a refresh closed stays closed); `a.chk`: a `full` model below both whose
/// blocking audit wants the open version's sum under 135.
const BELOW: &str = r#"
local vals = define_model {
  name = "k.vals", kind = kind.incremental_by_unique_key { key = "k" },
  schema = { { "k", "varchar" }, { "day", "timestamp" } },
  query = "SELECT CAST(total AS VARCHAR) AS k, day FROM " .. ref(daily),
}
local hist = define_model {
  name = "s.hist", kind = kind.scd_type2 { key = "id" },
  schema = { { "id", "varchar" }, { "top", "bigint" } },
  query = "SELECT 'x' AS id, CAST(sum(total) AS BIGINT) AS top FROM " .. ref(daily),
}
define_model {
  name = "a.chk", kind = kind.full(),
  schema = { { "n", "bigint" }, { "n_keys", "bigint" } },
  audits = { audit.expression("n < 135") },
  query = "SELECT CAST((SELECT max(top) FROM " .. ref(hist) .. " WHERE valid_to IS NULL) AS BIGINT) AS n, CAST((SELECT count(*) FROM " .. ref(vals) .. ") AS BIGINT) AS n_keys",
}
"#;

/// The one value `sql` returns, as text (`""` for NULL or no row), on either engine.
fn scalar(p: &Project, sql: &str) -> String {
    p.query(sql).first().and_then(|r| r.first().cloned().flatten()).unwrap_or_default()
}

/// The day of the month of the timestamp `column`, as text (`3`), on either engine.
fn day_of(column: &str) -> String {
    format!("CAST(CAST(EXTRACT(day FROM {column}) AS INTEGER) AS VARCHAR)")
}

/// What `prod` serves of `t.daily` (`1=50,2=70`), `k.vals` (its keys, `50,70`) and `s.hist`
/// (each version as `sum:from-to`, `120:3-` open since the 3rd), on either engine.
fn served_below(p: &Project) -> [String; 3] {
    let daily = format!("SELECT string_agg({} || '=' || CAST(total AS VARCHAR), ',' ORDER BY day) FROM {}", day_of("day"), env_view("prod", "t.daily"));
    let keys = format!("SELECT string_agg(k, ',' ORDER BY k) FROM {}", env_view("prod", "k.vals"));
    let history = format!(
        "SELECT string_agg(CAST(top AS VARCHAR) || ':' || {} || '-' || coalesce({}, ''), ',' ORDER BY valid_from, top) FROM {}",
        day_of("valid_from"),
        day_of("valid_to"),
        env_view("prod", "s.hist")
    );
    [scalar(p, &daily), scalar(p, &keys), scalar(p, &history)]
}

/// The reviewer's case: below the forward-only `t.daily`, the refused apply refreshes in place,
/// in the tables `prod` serves, a unique-key model (adding the key `20`, which only the refused
/// query's total for the 3rd gives) and an SCD type 2 history (closing `120` and opening `140`),
/// before the audit of `a.chk` below both refuses it. Both tables get back what they held (before,
/// the key `20` and the closed version `140` stayed for good: an upsert never deletes a key its
/// query no longer returns, a reconciliation never reopens what it closed, and `status --check`
/// said ok), nothing is left pending, and the next apply of the project `prod` serves refreshes
/// them from what `prod` serves: the key `10`, the version `130`.
fn keyed_tables_refreshed_in_place_by_a_refused_forward_only_apply_hold_what_they_held_before(engine: EngineBackend) {
    let mut p = landed_on(engine);
    p.write("models/m.lua", &models("", "", "", BELOW));
    p.apply("prod");
    let before = served_below(&p);
    assert_eq!(before, ["1=50,2=70", "50,70", "120:3-"]);
    p.write("models/m.lua", &models(" * 2", "", "", BELOW));
    p.now = "2026-01-04T00:00:00Z".into();
    let refused = p.run(&["apply", "prod", "--yes", "--forward-only", "t.daily"]);
    refused.expect_code(1);
    assert!(refused.stderr.contains("a.chk") && refused.stderr.contains("nothing was promoted"), "{}", refused.stderr);
    assert!(put_back(&refused.stderr, "k.vals") && put_back(&refused.stderr, "s.hist"), "{}", refused.stderr);
    assert_eq!(served_below(&p), before, "the refused rows taken back, the tables refreshed from them as they were");
    let left = pending(&p);
    assert!(!left.contains(&"k.vals".to_string()) && !left.contains(&"s.hist".to_string()), "nothing left to refresh: {left:?}");
    p.run(&["status", "prod", "--check"]).expect_code(0);
    // The project `prod` serves: the 3rd computed with its query, both tables refreshed from it.
    p.write("models/m.lua", &models("", "", "", BELOW));
    p.apply("prod");
    assert_eq!(served_below(&p), ["1=50,2=70,3=10", "10,50,70", "120:3-4,130:4-"], "no key nor version only the refused query gave");
    let status = p.run(&["status", "prod", "--check", "--json"]).expect_code(0).json();
    assert_eq!(status["pendingRebuilds"], serde_json::json!([]), "{status:#}");
}

crate::on_every_engine!(keyed_tables_refreshed_in_place_by_a_refused_forward_only_apply_hold_what_they_held_before);

/// The same, with both keyed tables lost (dropped by hand) before the refused apply, which
/// rebuilds them from the rows it then takes back: they are emptied (they held nothing before),
/// left pending, and filled by the next apply of the project `prod` serves — never the key `20`
/// nor the version `140` only the refused query gave (kept for good before: a repair was never
/// put back, and its pending refresh upserts and reconciles on top of them).
#[test]
fn lost_keyed_tables_rebuilt_by_a_refused_forward_only_apply_keep_nothing_of_the_refused_rows() {
    let mut p = landed();
    p.write("models/m.lua", &models("", "", "", BELOW));
    let applied = p.apply("prod");
    assert_eq!(served_below(&p), ["1=50,2=70", "50,70", "120:3-"]);
    for model in ["k.vals", "s.hist"] {
        let physical = action(&applied, model)["physical"].as_str().expect("physical").to_string();
        p.execute_on_engine(&format!("DROP TABLE {physical}"));
    }
    p.write("models/m.lua", &models(" * 2", "", "", BELOW));
    p.now = "2026-01-04T00:00:00Z".into();
    let refused = p.run(&["apply", "prod", "--yes", "--forward-only", "t.daily"]);
    refused.expect_code(1);
    assert!(refused.stderr.contains("a.chk") && refused.stderr.contains("nothing was promoted"), "{}", refused.stderr);
    assert!(refused.stderr.contains("was emptied"), "the warning says so: {}", refused.stderr);
    assert_eq!(served_below(&p), ["1=50,2=70", "", ""], "nothing of the refused rows");
    let left = pending(&p);
    assert!(left.contains(&"k.vals".to_string()) && left.contains(&"s.hist".to_string()), "both left to refresh: {left:?}");
    p.write("models/m.lua", &models("", "", "", BELOW));
    p.apply("prod");
    assert_eq!(served_below(&p), ["1=50,2=70,3=10", "10,50,70", "130:4-"], "no key nor version only the refused query gave");
    let status = p.run(&["status", "prod", "--check", "--json"]).expect_code(0).json();
    assert_eq!(status["pendingRebuilds"], serde_json::json!([]), "{status:#}");
}

#[test]
fn a_forward_only_apply_refused_before_rewriting_the_days_its_lookback_covers_leaves_them_done_for_the_version_prod_serves() {
    // The forward-only version's lookback (2, prod's version has none) rewrites the 1st and 2nd
    // too: they are taken from the old version's ledger before any batch, and given back when
    // no batch wrote them (its first batch fails its own audit, rolled back).
    let mut p = landed();
    p.write("models/m.lua", &models("", "", "", ""));
    p.apply("prod");
    let (old, before) = (served(&p), done(&p, &served(&p)));
    p.write("models/m.lua", &models(" * 2", ", lookback = 2", r#"audit.accepted_range { column = "total", max = 60 }"#, ""));
    p.now = "2026-01-04T00:00:00Z".into();
    let planned = p.run(&["plan", "prod", "--json", "--forward-only", "t.daily"]).expect_code(0).json();
    assert_eq!(action(&planned, "t.daily")["intervals"].as_i64(), Some(3), "the 3rd and, for the lookback, the 1st and 2nd: {planned:#}");
    p.run(&["apply", "prod", "--yes", "--forward-only", "t.daily"]).expect_code(1);
    assert_eq!(served(&p), old);
    assert_eq!(days(&p), "01=50,02=70");
    assert_eq!(done(&p, &old), before, "the days the refused version did not rewrite are done again");
    p.write("models/m.lua", &models("", "", "", ""));
    assert_eq!(behind(&p), 1);
    assert_eq!(action(&p.plan("prod"), "t.daily")["intervals"].as_i64(), Some(1), "only the 3rd");
}

#[test]
fn a_forward_only_apply_killed_after_rewriting_done_days_leaves_them_to_the_next_run_of_prod() {
    // The forward-only version's lookback (2) rewrites the 1st and 2nd in the table prod serves;
    // the process is killed right after. prod's own version (no lookback) never recomputes days
    // its ledger calls done: those were taken out of it before the batches, so prod's next run
    // computes them again with prod's query instead of serving the other query's rows for good.
    let mut p = landed();
    p.write("models/m.lua", &models("", "", "", ""));
    p.apply("prod");
    let old = served(&p);
    p.write("models/m.lua", &models(" * 2", ", lookback = 2", "", ""));
    p.now = "2026-01-04T00:00:00Z".into();
    let out = p.command(&["apply", "prod", "--yes", "--forward-only", "t.daily"]).env("EFMESH_FAULT", "after-build:t.daily").output().expect("spawn efmesh");
    assert!(!out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(served(&p), old, "killed before its promotion");
    assert_eq!(days(&p), "01=100,02=140,03=20", "the rows the killed apply wrote");
    assert!(done(&p, &old).is_empty(), "the days another query rewrote are not done for prod's version");
    p.write("models/m.lua", &models("", "", "", ""));
    assert_eq!(action(&p.plan("prod"), "t.daily")["intervals"].as_i64(), Some(3), "the 1st, 2nd and 3rd");
    p.run(&["run", "prod"]).expect_code(0);
    assert_eq!(days(&p), "01=50,02=70,03=10", "prod's query's rows again");
    assert_eq!(done(&p, &old), [day(1), day(2), day(3)].into_iter().collect::<BTreeSet<i64>>());
}

/// Killed right after it upserted, in the table `prod` serves, a key only the refused query
/// gives (`20`): the copy it took before (a table of the database, marked among `prod`'s
/// intents) outlives the process, and the next run of `prod` puts it back before anything else,
/// then refreshes the table from what `prod` serves — never the key `20` (kept for good before:
/// the copy was a temporary table, gone with the killed process).
#[test]
fn a_keyed_table_refreshed_by_a_forward_only_apply_killed_before_its_promotion_is_put_back_by_the_next_run() {
    let mut p = landed();
    p.write("models/m.lua", &models("", "", "", BELOW));
    p.apply("prod");
    assert_eq!(served_below(&p)[..2], ["1=50,2=70", "50,70"]);
    p.write("models/m.lua", &models(" * 2", "", "", BELOW));
    p.now = "2026-01-04T00:00:00Z".into();
    let out = p.command(&["apply", "prod", "--yes", "--forward-only", "t.daily"]).env("EFMESH_FAULT", "after-upsert:k.vals").output().expect("spawn efmesh");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("aborting at `after-upsert:k.vals`"), "{stderr}");
    assert_eq!(served_below(&p)[1], "20,50,70", "the killed apply's upsert committed");
    assert!(p.physical_tables().iter().any(|t| t.starts_with(efmesh::engine::KEPT_COPY_PREFIX)), "the copy outlives the process");
    p.write("models/m.lua", &models("", "", "", BELOW));
    let run = p.run(&["run", "prod"]);
    run.expect_code(0);
    assert!(run.stderr.contains("holds what it held before that apply again"), "{}", run.stderr);
    assert_eq!(served_below(&p)[..2], ["1=50,2=70,3=10", "10,50,70"], "no key only the refused query gave");
    assert!(!p.physical_tables().iter().any(|t| t.starts_with(efmesh::engine::KEPT_COPY_PREFIX)), "the copy was dropped with the put-back");
    assert!(p.state().kept_copies("prod").expect("marks").is_empty());
    assert_eq!(p.plan("prod")["hasChanges"], false);
}

/// A copy an earlier apply left (here one made by hand, holding a key `99`) is dropped before
/// the mark: killed between the mark and its own copy, the apply leaves a mark without a copy,
/// and the next run puts nothing back (it put the stale copy back over the table).
#[test]
fn a_copy_left_by_an_earlier_apply_is_never_put_back_for_a_later_mark() {
    let mut p = landed();
    p.write("models/m.lua", &models("", "", "", BELOW));
    let applied = p.apply("prod");
    let physical = action(&applied, "k.vals")["physical"].as_str().expect("physical").to_string();
    let copy = efmesh::engine::kept_copy_relation(&physical);
    p.execute_on_engine(&format!("CREATE TABLE {copy} AS SELECT '99' AS k, CAST(NULL AS TIMESTAMP) AS day"));
    p.write("models/m.lua", &models(" * 2", "", "", BELOW));
    p.now = "2026-01-04T00:00:00Z".into();
    let out = p.command(&["apply", "prod", "--yes", "--forward-only", "t.daily"]).env("EFMESH_FAULT", "after-kept-mark:k.vals").output().expect("spawn efmesh");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("aborting at `after-kept-mark:k.vals`"), "{stderr}");
    assert_eq!(p.state().kept_copies("prod").expect("marks").len(), 1, "the mark outlives the process");
    p.write("models/m.lua", &models("", "", "", BELOW));
    let run = p.run(&["run", "prod"]);
    run.expect_code(0);
    assert!(!run.stderr.contains("holds what it held before that apply again"), "{}", run.stderr);
    assert_eq!(served_below(&p)[..2], ["1=50,2=70,3=10", "10,50,70"], "never the stale copy's key");
    assert!(p.state().kept_copies("prod").expect("marks").is_empty());
}

/// Back to the version whose table it is, `--forward-only` again: the days the other query
/// wrote there (kept by its forward-only change) are computed again with this version's query,
/// never taken for this version's (its ledger never held them).
#[test]
fn a_forward_only_return_to_the_tables_own_version_recomputes_the_days_the_other_query_wrote() {
    let mut p = landed();
    p.now = "2026-01-02T12:00:00Z".into();
    p.write("models/m.lua", &models(" * 2", ", lookback = 2", "", ""));
    p.apply("prod");
    let own = served(&p);
    assert_eq!(days(&p), "01=100");
    p.now = "2026-01-04T00:00:00Z".into();
    p.write("models/m.lua", &models("", "", "", ""));
    p.run(&["apply", "prod", "--yes", "--forward-only", "t.daily"]).expect_code(0);
    assert_eq!(days(&p), "01=100,02=70,03=10", "the old days kept, the new ones with the new query");
    p.write("models/m.lua", &models(" * 2", ", lookback = 2", "", ""));
    p.run(&["apply", "prod", "--yes", "--forward-only", "t.daily"]).expect_code(0);
    assert_eq!(served(&p), own);
    assert_eq!(days(&p), "01=100,02=140,03=20", "the days the other query wrote, computed again");
    assert_eq!(p.plan("prod")["hasChanges"], false);
    p.run(&["status", "prod", "--check"]).expect_code(0);
    // And back to the other version, stored in this table and served before: its ledger is its
    // own, never the table's: the days the other query rewrote since (its lookback reached the
    // 1st) are not done for it.
    p.write("models/m.lua", &models("", "", "", ""));
    let planned = p.run(&["plan", "prod", "--json", "--forward-only", "t.daily"]).expect_code(0).json();
    assert!(action(&planned, "t.daily")["reusedFrom"].is_null(), "a version served before keeps its own ledger: {planned:#}");
    p.run(&["apply", "prod", "--yes", "--forward-only", "t.daily"]).expect_code(0);
    assert_eq!(days(&p), "01=50,02=70,03=10", "the days the other query wrote, computed again with this one");
    assert_eq!(p.plan("prod")["hasChanges"], false);
    p.run(&["status", "prod", "--check"]).expect_code(0);
}

/// A refused forward-only return to a version served before: `prod` went from `V1` to `V2`
/// (forward-only, on `V1`'s table) and back to `V1`, which recomputed the 3rd (not done for
/// `V2` any more); `V2` again, refused by the audit of `a.chk`, writes the days its ledger
/// lacks into the table `prod` serves through `V1`. An existing version, it inherits nothing,
/// yet its writes are taken back as any version's writing into a table other versions are
/// stored in (they stayed: `prod` served `V2`'s 20 for the 3rd, which `V1`'s ledger called
/// done, for good, with `status --check` ok).
#[test]
fn a_refused_forward_only_return_to_a_version_served_before_takes_back_what_it_wrote() {
    let mut p = landed();
    let chk = |audits: &str| {
        format!(
            r#"define_model {{
  name = "a.chk", kind = kind.full(), schema = {{ {{ "n", "bigint" }} }},{audits}
  query = "SELECT CAST(count(*) AS BIGINT) AS n FROM " .. ref(daily),
}}"#
        )
    };
    p.write("models/m.lua", &models("", "", "", &chk("")));
    p.apply("prod");
    let v1 = served(&p);
    p.now = "2026-01-04T00:00:00Z".into();
    p.write("models/m.lua", &models(" * 2", "", "", &chk("")));
    p.run(&["apply", "prod", "--yes", "--forward-only", "t.daily"]).expect_code(0);
    assert_eq!(days(&p), "01=50,02=70,03=20");
    p.now = "2026-01-05T00:00:00Z".into();
    p.write("models/m.lua", &models("", "", "", &chk("")));
    p.run(&["apply", "prod", "--yes", "--forward-only", "t.daily"]).expect_code(0);
    assert_eq!(served(&p), v1, "back to the first version");
    assert_eq!(days(&p), "01=50,02=70,03=10", "the 3rd recomputed with its query");
    // `V2` again (served before: an existing version), refused below.
    p.execute_on_engine("INSERT INTO landing.events VALUES (TIMESTAMP '2026-01-05 03:00', 40)");
    p.now = "2026-01-06T00:00:00Z".into();
    p.write("models/m.lua", &models(" * 2", "", "", &chk("\n  audits = { audit.expression(\"n < 0\") },")));
    let refused = p.run(&["apply", "prod", "--yes", "--forward-only", "t.daily"]);
    refused.expect_code(1);
    assert_eq!(served(&p), v1, "nothing was promoted");
    let held: Vec<String> = done(&p, &v1).iter().map(|d| format!("{:02}", (d - day(1)) / 86_400_000 + 1)).collect();
    let value = |d: &str| match d {
        "01" => 50,
        "02" => 70,
        "03" => 10,
        _ => 40,
    };
    let expected: Vec<String> = held.iter().filter(|d| *d != "04").map(|d| format!("{d}={}", value(d))).collect();
    assert_eq!(days(&p), expected.join(","), "prod serves what its ledger holds, nothing of the refused query");
    p.write("models/m.lua", &models("", "", "", &chk("")));
    p.run(&["run", "prod"]).expect_code(0);
    assert_eq!(days(&p), "01=50,02=70,03=10,05=40");
    p.run(&["status", "prod", "--check"]).expect_code(0);
}

/// A second refused attempt of the same forward-only change: the first one recorded the new
/// version on the kept table, and no environment serves it or ever did. It inherits the table as
/// on the first attempt (the kept version's done intervals, its lookback over them), so what it
/// writes there is taken back too: `prod` never serves the refused query's rows, for the days
/// its ledger holds or any other (as a recorded version it computed its whole history with the
/// new query into the table `prod` serves, none of it taken back).
#[test]
fn a_forward_only_apply_refused_twice_takes_back_what_each_attempt_wrote() {
    let mut p = landed();
    p.write("models/m.lua", &models("", "", "", KEYED));
    p.apply("prod");
    let old = served(&p);
    p.write("models/m.lua", &models(" * 2", ", lookback = 1", "", KEYED));
    p.now = "2026-01-04T00:00:00Z".into();
    for attempt in 1..=2 {
        let planned = p.run(&["plan", "prod", "--json", "--forward-only", "t.daily"]).expect_code(0).json();
        let daily = action(&planned, "t.daily");
        assert!(daily["reusedFrom"].is_string(), "attempt {attempt} inherits the kept table: {planned:#}");
        let refused = p.run(&["apply", "prod", "--yes", "--forward-only", "t.daily"]);
        refused.expect_code(1);
        assert!(refused.stderr.contains("a.top") && refused.stderr.contains("were taken back"), "attempt {attempt}: {}", refused.stderr);
        assert_eq!(served(&p), old, "nothing was promoted");
        // Every day `prod` serves is one its ledger holds, with `prod`'s query's total.
        let held: Vec<String> = done(&p, &old).iter().map(|d| format!("{:02}", (d - day(1)) / 86_400_000 + 1)).collect();
        let expected: Vec<String> = held.iter().map(|d| format!("{d}={}", if d == "01" { 50 } else { 70 })).collect();
        assert_eq!(days(&p), expected.join(","), "attempt {attempt}: prod serves what its ledger holds, nothing of the refused query");
    }
    // The project `prod` serves: its next apply computes what the ledger lacks with its query.
    p.write("models/m.lua", &models("", "", "", KEYED));
    p.apply("prod");
    assert_eq!(days(&p), "01=50,02=70,03=10");
    p.run(&["status", "prod", "--check"]).expect_code(0);
}

/// Under `--retries`, an attempt whose promotion failed transiently is taken back, and the next
/// attempt plans again: the lookback now reaches the day the take-back left undone, a day the
/// approved plan never computed. Refused (another plan), never applied: `prod` keeps the 1st it
/// served, which the forward-only change keeps.
#[test]
fn a_retry_whose_plan_computes_a_day_the_approved_plan_did_not_is_refused() {
    let mut p = landed();
    p.write("models/m.lua", &models("", "", "", ""));
    p.apply("prod");
    let old = served(&p);
    p.write("models/m.lua", &models(" * 2", ", lookback = 1", "", ""));
    p.now = "2026-01-04T00:00:00Z".into();
    let out = p
        .command(&["apply", "prod", "--yes", "--retries", "2", "--forward-only", "t.daily"])
        .env("EFMESH_STATE_FAIL", "promote:refused-once")
        .output()
        .expect("spawn efmesh");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("changed while retrying") && stderr.contains("t.daily") && stderr.contains("2026-01-01"), "{stderr}");
    assert_eq!(served(&p), old);
    assert_eq!(days(&p), "01=50", "the 1st as prod's query computed it; the 2nd, rewritten and taken back, is not done");
    assert_eq!(done(&p, &old), [day(1)].into_iter().collect::<BTreeSet<i64>>());
}
