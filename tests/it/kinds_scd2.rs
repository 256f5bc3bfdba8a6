//! `scd_type2`: history by key. A changed watched column closes the open version and opens a new
//! one at the run's instant; a key missing from the source is closed (unless
//! `invalidate_hard_deletes = false`); a key that comes back opens a new version; unchanged keys
//! keep their `valid_from` across refreshes; duplicate source keys are refused with the table
//! unchanged; a run at an instant before a recorded `valid_from` or `valid_to` is refused;
//! history survives a non-breaking parent edit (the physical table is reused). The managed
//! columns are exposed by the environment view and readable by children, never declared.
//! History is never discarded without an explicit choice: a new version that would start it over
//! is named by the plan and refused by `apply --yes` unless `--reset-history` names the model; a
//! declared `renamed` (Lua, Rhai, SQL) carries every version over, refused when the type the
//! query now returns would change a recorded value; `--forward-only` adds columns to the kept
//! table. Below a unique-key parent built anew from its query alone (the keys its refreshes kept
//! gone), the history is not reused as if its input were the same (its next run would close
//! those keys as deleted): the plan rebuilds it, `apply` refuses, and `--forward-only` on the
//! parent keeps both tables. A history `prod`'s `--forward-only` keeps below a parent it changed
//! is `prod`'s to reconcile: `dev`, left on the older version, serves it, and its plan and status
//! say so.

use crate::common::*;

crate::on_every_engine!(
    changes_hard_deletes_and_returning_keys_build_the_history,
    unchanged_rows_keep_their_valid_from_across_three_refreshes,
    duplicate_source_keys_are_refused_naming_the_key_and_the_table_is_unchanged,
    a_run_at_an_instant_before_the_history_is_refused_and_changes_nothing,
    a_run_at_an_instant_before_a_hard_delete_close_is_refused_and_changes_nothing,
    without_invalidate_hard_deletes_a_missing_key_stays_open,
    only_watched_columns_open_versions,
    one_instant_per_apply_for_every_row_and_model_and_views_expose_the_managed_columns,
    history_survives_a_non_breaking_parent_edit,
    the_contract_checks_the_query_against_the_declared_columns_only,
    renaming_a_tracked_column_is_refused_unless_history_is_reset_explicitly,
    a_declared_rename_carries_every_version_over_in_lua_rhai_and_sql,
    forward_only_adds_a_column_keeping_history_with_null_in_earlier_versions,
    a_new_column_left_out_of_the_watch_list_opens_no_version,
    a_declared_rename_of_the_key_carries_the_history_over,
    a_version_a_new_environment_built_empty_does_not_replace_prods_history,
    a_carried_version_does_not_replace_a_history_that_recorded_more_since,
    a_revert_to_a_version_the_environment_built_earlier_says_so_when_its_history_starts_over,
    a_leftover_table_of_an_interrupted_apply_is_replaced_by_the_carried_history,
    a_carry_over_whose_source_table_is_gone_fails_before_building_anything,
    a_changed_key_is_never_offered_forward_only,
    a_forward_only_column_declared_narrower_than_the_query_keeps_its_values_and_opens_nothing_more,
    a_carried_column_declared_narrower_than_the_query_keeps_its_values_and_opens_nothing_more,
    a_carry_over_that_would_change_recorded_values_is_refused_and_changes_nothing,
    a_watched_json_column_is_refused_at_load_on_postgres_and_applies_on_duckdb,
    a_history_below_a_unique_key_parent_built_anew_is_refused_instead_of_recording_the_lost_keys_as_deleted,
    a_history_reading_a_rebuilt_unique_key_parent_through_a_full_model_or_view_is_refused_too,
    a_history_prods_forward_only_change_keeps_below_a_changed_seed_is_said_to_be_prods_in_dev,
);

const T1: &str = "2026-02-10T00:00:00Z";
const T2: &str = "2026-02-11T08:30:00Z";
const T3: &str = "2026-02-12T00:00:00Z";
const T4: &str = "2026-02-13T00:00:00Z";
const T5: &str = "2026-02-14T00:00:00Z";

/// How the SQL renders those instants.
fn ts(iso: &str) -> String {
    iso.trim_end_matches('Z').replace('T', " ")
}

/// `raw.assign` (the engine table `land.assign`, see [`set_assign`]) → `m.src` (full, reads it)
/// → `m.assign` (scd_type2 by patient, `opts` spliced into the kind's options).
fn models(opts: &str) -> String {
    format!(
        r#"
local raw = define_model {{
  name = "raw.assign", kind = kind.external {{ table = "land.assign" }},
  schema = {{ {{ "patient", "bigint" }}, {{ "dept", "varchar" }}, {{ "doctor", "varchar" }} }},
}}
local src = define_model {{
  name = "m.src", kind = kind.full(),
  schema = {{ {{ "patient", "bigint" }}, {{ "dept", "varchar" }}, {{ "doctor", "varchar" }} }},
  query = "SELECT patient, dept, doctor FROM " .. ref(raw),
}}
define_model {{
  name = "m.assign", kind = kind.scd_type2 {{ key = "patient"{opts} }},
  schema = {{ {{ "patient", "bigint" }}, {{ "dept", "varchar" }}, {{ "doctor", "varchar" }} }},
  query = "SELECT patient, dept, doctor FROM " .. ref(src),
}}
"#
    )
}

fn project(engine: EngineBackend, opts: &str, csv: &str) -> Project {
    let mut p = Project::on_engine(engine);
    p.now = T1.into();
    set_assign(&p, csv);
    p.write("models/m.lua", &models(opts));
    p
}

/// Replaces the rows of the engine table `land.assign` (created on first use) by those of `csv`:
/// a header line, then one row a line, an empty field NULL.
fn set_assign(p: &Project, csv: &str) {
    p.execute_on_engine("CREATE SCHEMA IF NOT EXISTS land");
    p.execute_on_engine("CREATE TABLE IF NOT EXISTS land.assign (patient BIGINT, dept VARCHAR, doctor VARCHAR)");
    p.execute_on_engine("DELETE FROM land.assign");
    let values: Vec<String> = csv
        .lines()
        .skip(1)
        .map(|line| {
            let fields: Vec<String> = line.split(',').map(|f| if f.is_empty() { "NULL".to_string() } else { format!("'{f}'") }).collect();
            format!("({})", fields.join(", "))
        })
        .collect();
    p.execute_on_engine(&format!("INSERT INTO land.assign VALUES {}", values.join(", ")));
}

/// [`project`] with `m.src` a view, so every `run` reads the source table as it is now.
fn view_project(engine: EngineBackend, opts: &str, csv: &str) -> Project {
    let p = project(engine, opts, csv);
    p.write("models/m.lua", &models(opts).replace("kind = kind.full()", "kind = kind.view()"));
    p
}

/// Rows of the dev view of `m.assign`, ordered by patient then valid_from.
fn history(p: &Project) -> Rows {
    p.query(&format!(
        "SELECT CAST(patient AS VARCHAR), dept, doctor, CAST(valid_from AS VARCHAR), CAST(valid_to AS VARCHAR) FROM {} ORDER BY patient, valid_from",
        env_view("dev", "m.assign")
    ))
}

fn r(patient: &str, dept: &str, doctor: &str, from: &str, to: Option<&str>) -> Vec<Option<String>> {
    vec![Some(patient.into()), Some(dept.into()), Some(doctor.into()), Some(ts(from)), to.map(ts)]
}

fn changes_hard_deletes_and_returning_keys_build_the_history(engine: EngineBackend) {
    let mut p = view_project(engine, "", "patient,dept,doctor\n1,cardio,house\n2,neuro,grey\n3,ortho,yang\n");
    let applied = p.apply("dev");
    assert_eq!(applied["built"], serde_json::json!(["m.src", "m.assign"]));
    assert_eq!(history(&p), vec![r("1", "cardio", "house", T1, None), r("2", "neuro", "grey", T1, None), r("3", "ortho", "yang", T1, None)]);

    // T2: patient 1 moves, patient 2 leaves, patient 3 stays, patient 4 arrives.
    p.now = T2.into();
    set_assign(&p, "patient,dept,doctor\n1,icu,house\n3,ortho,yang\n4,neuro,grey\n");
    let ran = p.run(&["run", "dev", "--json"]).expect_code(0).json();
    assert_eq!(ran["processed"], serde_json::json!(["m.assign"]));
    assert_eq!(
        history(&p),
        vec![
            r("1", "cardio", "house", T1, Some(T2)),
            r("1", "icu", "house", T2, None),
            r("2", "neuro", "grey", T1, Some(T2)),
            r("3", "ortho", "yang", T1, None),
            r("4", "neuro", "grey", T2, None),
        ]
    );

    // T3: patient 2 comes back (a new version; the closed one stays closed).
    p.now = T3.into();
    set_assign(&p, "patient,dept,doctor\n1,icu,house\n2,neuro,shepherd\n3,ortho,yang\n4,neuro,grey\n");
    p.run(&["run", "dev"]).expect_code(0);
    let h = history(&p);
    assert!(h.contains(&r("2", "neuro", "grey", T1, Some(T2))), "{h:?}");
    assert!(h.contains(&r("2", "neuro", "shepherd", T3, None)), "{h:?}");
    assert_eq!(h.len(), 6);
    // Exactly one open version per key.
    let open = p.query(&format!("SELECT patient, count(*) FROM {} WHERE valid_to IS NULL GROUP BY patient HAVING count(*) <> 1", env_view("dev", "m.assign")));
    assert!(open.is_empty(), "{open:?}");
}

fn unchanged_rows_keep_their_valid_from_across_three_refreshes(engine: EngineBackend) {
    let mut p = view_project(engine, "", "patient,dept,doctor\n1,cardio,house\n2,neuro,grey\n");
    p.apply("dev");
    for (i, now) in [T2, T3, T4].into_iter().enumerate() {
        p.now = now.into();
        // Patient 2 changes doctor every time; patient 1 never changes.
        set_assign(&p, &format!("patient,dept,doctor\n1,cardio,house\n2,neuro,doc{i}\n"));
        p.run(&["run", "dev"]).expect_code(0);
        let h = history(&p);
        assert_eq!(h[0], r("1", "cardio", "house", T1, None), "after refresh {}: {h:?}", i + 1);
        assert_eq!(h.len(), 2 + i + 1, "patient 2 gains one version per refresh: {h:?}");
    }
}

fn duplicate_source_keys_are_refused_naming_the_key_and_the_table_is_unchanged(engine: EngineBackend) {
    let mut p = view_project(engine, "", "patient,dept,doctor\n1,cardio,house\n");
    p.apply("dev");
    let before = history(&p);
    p.now = T2.into();
    set_assign(&p, "patient,dept,doctor\n1,icu,house\n7,a,b\n7,c,d\n");
    let r = p.run(&["run", "dev"]);
    r.expect_code(1);
    assert!(r.stderr.contains("model `m.assign`"), "{}", r.stderr);
    assert!(r.stderr.contains("(patient = '7') appears 2 times"), "{}", r.stderr);
    assert_eq!(history(&p), before, "patient 1's change must not be half-applied");

    // A NULL key is refused the same way.
    set_assign(&p, "patient,dept,doctor\n1,icu,house\n,a,b\n");
    let r = p.run(&["run", "dev"]);
    r.expect_code(1);
    assert!(r.stderr.contains("1 row of the query has a NULL key (`patient`)"), "{}", r.stderr);
    assert_eq!(history(&p), before);
}

fn a_run_at_an_instant_before_the_history_is_refused_and_changes_nothing(engine: EngineBackend) {
    let mut p = view_project(engine, "", "patient,dept,doctor\n1,cardio,house\n");
    p.now = T2.into();
    p.apply("dev");
    let before = history(&p);
    // The clock stepped back (or `--now` in the past): closing at T1 would end T2's version before it began.
    p.now = T1.into();
    set_assign(&p, "patient,dept,doctor\n1,icu,house\n");
    let refused = p.run(&["run", "dev"]);
    refused.expect_code(1);
    let text = &refused.stderr;
    assert!(text.contains("model `m.assign`") && text.contains("after this run's instant") && text.contains("nothing was done"), "{text}");
    assert_eq!(history(&p), before);
    // At a later instant it goes on.
    p.now = T3.into();
    p.run(&["run", "dev"]).expect_code(0);
    assert_eq!(history(&p), vec![r("1", "cardio", "house", T2, Some(T3)), r("1", "icu", "house", T3, None)]);
}

fn a_run_at_an_instant_before_a_hard_delete_close_is_refused_and_changes_nothing(engine: EngineBackend) {
    let mut p = view_project(engine, "", "patient,dept,doctor\n1,cardio,house\n2,neuro,grey\n");
    p.apply("dev");
    // T3: patient 2 is deleted at the source, its version closes at T3 (later than every valid_from).
    p.now = T3.into();
    set_assign(&p, "patient,dept,doctor\n1,cardio,house\n");
    p.run(&["run", "dev"]).expect_code(0);
    let before = history(&p);
    assert_eq!(before, vec![r("1", "cardio", "house", T1, None), r("2", "neuro", "grey", T1, Some(T3))]);
    // Patient 2 comes back and the clock stepped back to T2: opening it at T2 would make it valid
    // twice between T2 and T3.
    p.now = T2.into();
    set_assign(&p, "patient,dept,doctor\n1,cardio,house\n2,neuro,grey\n");
    let refused = p.run(&["run", "dev"]);
    refused.expect_code(1);
    let text = &refused.stderr;
    assert!(text.contains("model `m.assign`") && text.contains("after this run's instant") && text.contains("nothing was done"), "{text}");
    assert!(text.contains(&format!("`valid_to` {}", ts(T3))), "the refusal names the close after the instant: {text}");
    assert_eq!(history(&p), before, "no overlapping version was written");
    // At a later instant it goes on: patient 2 opens again after its close.
    p.now = T4.into();
    p.run(&["run", "dev"]).expect_code(0);
    assert_eq!(history(&p), vec![r("1", "cardio", "house", T1, None), r("2", "neuro", "grey", T1, Some(T3)), r("2", "neuro", "grey", T4, None)]);
}

fn without_invalidate_hard_deletes_a_missing_key_stays_open(engine: EngineBackend) {
    let mut p = view_project(engine, ", invalidate_hard_deletes = false", "patient,dept,doctor\n1,cardio,house\n2,neuro,grey\n");
    p.apply("dev");
    p.now = T2.into();
    set_assign(&p, "patient,dept,doctor\n1,cardio,house\n");
    p.run(&["run", "dev"]).expect_code(0);
    assert_eq!(history(&p), vec![r("1", "cardio", "house", T1, None), r("2", "neuro", "grey", T1, None)]);
}

fn only_watched_columns_open_versions(engine: EngineBackend) {
    let opts = r#", columns = { "dept" }"#;
    let mut p = view_project(engine, opts, "patient,dept,doctor\n1,cardio,house\n");
    p.apply("dev");
    p.now = T2.into();
    set_assign(&p, "patient,dept,doctor\n1,cardio,wilson\n");
    p.run(&["run", "dev"]).expect_code(0);
    assert_eq!(history(&p), vec![r("1", "cardio", "house", T1, None)], "a doctor change alone is not watched");
    p.now = T3.into();
    set_assign(&p, "patient,dept,doctor\n1,icu,wilson\n");
    p.run(&["run", "dev"]).expect_code(0);
    assert_eq!(history(&p), vec![r("1", "cardio", "house", T1, Some(T3)), r("1", "icu", "wilson", T3, None)]);
}

fn one_instant_per_apply_for_every_row_and_model_and_views_expose_the_managed_columns(engine: EngineBackend) {
    let mut p = project(engine, "", "patient,dept,doctor\n1,cardio,house\n2,neuro,grey\n");
    p.now = "2026-02-10T13:14:15.678Z".into();
    p.write(
        "models/twin.lua",
        r#"define_model {
  name = "m.twin", kind = kind.scd_type2 { key = { "patient", "dept" }, valid_from = "since", valid_to = "until" },
  schema = { { "patient", "bigint" }, { "dept", "varchar" } },
  query = "SELECT patient, dept FROM " .. ref("m.src"),
}
define_model {
  name = "m.current", kind = kind.view(),
  schema = { { "patient", "bigint" }, { "dept", "varchar" }, { "since", "timestamp" } },
  query = "SELECT patient, dept, since FROM " .. ref("m.twin") .. " WHERE " .. cols("m.twin", "until") .. " IS NULL",
}
"#,
    );
    p.run(&["check"]).expect_code(0);
    p.apply("dev");
    let instants = p.query(&format!(
        "SELECT DISTINCT CAST(valid_from AS VARCHAR) FROM {} UNION ALL SELECT DISTINCT CAST(since AS VARCHAR) FROM {}",
        env_view("dev", "m.assign"),
        env_view("dev", "m.twin")
    ));
    assert_eq!(instants, vec![vec![Some("2026-02-10 13:14:15.678".to_string())]; 2]);
    let cols = |env: &str, model: &str| -> Vec<String> {
        let (schema, table) = model.split_once('.').unwrap();
        let schema = if env == "prod" { schema.to_string() } else { format!("{env}__{schema}") };
        p.query(&format!(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = '{schema}' AND table_name = '{table}' ORDER BY ordinal_position"
        ))
        .into_iter()
        .map(|r| r[0].clone().unwrap())
        .collect()
    };
    assert_eq!(cols("dev", "m.assign"), ["patient", "dept", "doctor", "valid_from", "valid_to"]);
    assert_eq!(cols("dev", "m.twin"), ["patient", "dept", "since", "until"]);
    assert_eq!(p.rows(&env_view("dev", "m.current")).len(), 2);
    // Promotion to prod is a view swap exposing the same columns.
    let prod = p.apply("prod");
    assert_eq!(prod["built"], serde_json::json!([]));
    assert_eq!(cols("prod", "m.assign"), ["patient", "dept", "doctor", "valid_from", "valid_to"]);
}

fn history_survives_a_non_breaking_parent_edit(engine: EngineBackend) {
    let mut p = project(engine, "", "patient,dept,doctor\n1,cardio,house\n2,neuro,grey\n");
    p.apply("dev");
    let tables_before = p.physical_tables().into_iter().filter(|t| t.starts_with("m__assign")).collect::<Vec<_>>();

    // T2: patient 1 moves in the source, and `m.src` (a full model, so it reads the CSV only
    // when built) gains a column `m.assign` does not read: a non-breaking edit.
    p.now = T2.into();
    set_assign(&p, "patient,dept,doctor\n1,icu,house\n2,neuro,grey\n");
    let edited = models("").replace(
        r#"{ "doctor", "varchar" } },
  query = "SELECT patient, dept, doctor FROM " .. ref(raw),"#,
        r#"{ "doctor", "varchar" }, { "doctor_uc", "varchar" } },
  query = "SELECT patient, dept, doctor, upper(doctor) AS doctor_uc FROM " .. ref(raw),"#,
    );
    assert_ne!(edited, models(""));
    p.write("models/m.lua", &edited);
    let plan = p.plan("dev");
    assert_eq!(action(&plan, "m.src")["change"], "non-breaking", "{plan:#}");
    let scd = action(&plan, "m.assign");
    assert_eq!(scd["change"], "indirect", "{plan:#}");
    assert_eq!(scd["build"], false, "{plan:#}");
    assert!(scd.get("reusedFrom").is_some(), "{plan:#}");

    let before = history(&p);
    let applied = p.apply("dev");
    assert_eq!(applied["built"], serde_json::json!(["m.src"]), "the scd table is reused, not rebuilt");
    assert_eq!(history(&p), before, "history intact after the reuse");
    let tables_after = p.physical_tables().into_iter().filter(|t| t.starts_with("m__assign")).collect::<Vec<_>>();
    assert_eq!(tables_after, tables_before, "no new physical table for the scd model");

    // The reused table keeps recording history: patient 1's move reaches it on the next run.
    p.run(&["run", "dev"]).expect_code(0);
    assert_eq!(history(&p), vec![r("1", "cardio", "house", T1, Some(T2)), r("1", "icu", "house", T2, None), r("2", "neuro", "grey", T1, None)]);
}

/// `raw.assign` → `m.base` (unique-key by patient: it keeps the patients the source drops;
/// `with_ward` adds a column, a non-breaking edit) → `m.assign` (scd_type2 by patient) and `m.cur`
/// (unique-key by patient, a sibling of the history over the same parent).
fn keyed_parent_models(with_ward: bool) -> String {
    let (col, sel) = if with_ward { (r#", { "ward", "varchar" }"#, ", upper(dept) AS ward") } else { ("", "") };
    format!(
        r#"
local raw = define_model {{
  name = "raw.assign", kind = kind.external {{ table = "land.assign" }},
  schema = {{ {{ "patient", "bigint" }}, {{ "dept", "varchar" }}, {{ "doctor", "varchar" }} }},
}}
local base = define_model {{
  name = "m.base", kind = kind.incremental_by_unique_key {{ key = "patient" }},
  schema = {{ {{ "patient", "bigint" }}, {{ "dept", "varchar" }}, {{ "doctor", "varchar" }}{col} }},
  query = "SELECT patient, dept, doctor{sel} FROM " .. ref(raw),
}}
define_model {{
  name = "m.assign", kind = kind.scd_type2 {{ key = "patient" }},
  schema = {{ {{ "patient", "bigint" }}, {{ "dept", "varchar" }}, {{ "doctor", "varchar" }} }},
  query = "SELECT patient, dept, doctor FROM " .. ref(base),
}}
define_model {{
  name = "m.cur", kind = kind.incremental_by_unique_key {{ key = "patient" }},
  schema = {{ {{ "patient", "bigint" }} }},
  query = "SELECT patient FROM " .. ref(base),
}}
"#
    )
}

fn a_history_below_a_unique_key_parent_built_anew_is_refused_instead_of_recording_the_lost_keys_as_deleted(engine: EngineBackend) {
    let mut p = Project::on_engine(engine);
    p.now = T1.into();
    set_assign(&p, "patient,dept,doctor\n1,cardio,house\n2,neuro,grey\n");
    p.write("models/m.lua", &keyed_parent_models(false));
    p.apply("dev");
    // T2: patient 2 leaves the source. `m.base` keeps it (an upsert never deletes), so the
    // history keeps it open and `m.cur` keeps it too.
    p.now = T2.into();
    set_assign(&p, "patient,dept,doctor\n1,cardio,house\n");
    p.run(&["run", "dev"]).expect_code(0);
    let both_open = vec![r("1", "cardio", "house", T1, None), r("2", "neuro", "grey", T1, None)];
    assert_eq!(history(&p), both_open);
    let cur = |p: &Project| p.rows(&env_view("dev", "m.cur"));
    assert_eq!(cur(&p), vec![vec![Some("1".to_string())], vec![Some("2".to_string())]]);

    // T3: `m.base` gains a column. Its new version, built from its query alone, lacks patient 2:
    // the history below it is not reused as if its input were the same.
    p.now = T3.into();
    p.write("models/m.lua", &keyed_parent_models(true));
    let plan = p.plan("dev");
    let base = action(&plan, "m.base");
    assert_eq!((base["change"].as_str(), base["dropsKept"]["built"].as_bool()), (Some("non-breaking"), Some(true)), "{plan:#}");
    let scd = action(&plan, "m.assign");
    assert_eq!((scd["change"].as_str(), scd["build"].as_bool()), (Some("indirect"), Some(true)), "{plan:#}");
    assert!(scd.get("reusedFrom").is_none(), "{plan:#}");
    assert_eq!(scd["history"]["fate"], "starts-over", "{plan:#}");
    assert_eq!(scd["history"]["upstreamDropsKept"], serde_json::json!(["m.base"]), "{plan:#}");
    assert!(scd["explain"]["reason"].as_str().unwrap_or_default().contains("parent `m.base`, built anew from its query alone"), "{plan:#}");
    // A unique-key sibling keeps its table: it never deletes by absence, and keeps its rows.
    let sibling = action(&plan, "m.cur");
    assert_eq!(sibling["build"], false, "{plan:#}");
    let text = p.run(&["plan", "dev"]).expect_code(0).stdout.clone();
    assert!(text.contains("apply refuses this: ") && text.contains("keep the rows kept upstream (and this table) with `--forward-only m.base`"), "{text}");
    // No column of `m.assign` was dropped or added: declaring `renamed` is no way forward.
    assert!(!text.contains("renamed = {"), "{text}");
    // `apply --yes` refuses: the history would start over.
    let refused = p.run(&["apply", "dev", "--yes"]);
    refused.expect_code(1);
    let why = &refused.stderr;
    assert!(why.contains("scd_type2 model `m.assign`") && why.contains("`--forward-only m.base`") && why.contains("`--reset-history m.assign`"), "{why}");
    assert!(!why.contains("renamed = {"), "{why}");
    assert_eq!(history(&p), both_open, "nothing was done");

    // Forward-only on the parent keeps its table and patient 2: the history and the sibling keep
    // their tables, and the next run closes nothing.
    let applied = p.run(&["apply", "dev", "--yes", "--json", "--forward-only", "m.base"]).expect_code(0).json();
    assert_eq!(action(&applied, "m.base")["change"], "forward-only", "{applied:#}");
    let scd = action(&applied, "m.assign");
    assert!(scd.get("reusedFrom").is_some() && scd["history"]["fate"] == "kept", "{applied:#}");
    assert!(action(&applied, "m.cur").get("reusedFrom").is_some(), "{applied:#}");
    p.now = T4.into();
    p.run(&["run", "dev"]).expect_code(0);
    assert_eq!(history(&p), both_open, "patient 2 was dropped by no one: its version stays open");
    assert_eq!(cur(&p), vec![vec![Some("1".to_string())], vec![Some("2".to_string())]]);
}

// ---------------------------------------------------------------------------------------------
// Languages, fingerprints, load errors

const PARENT: &str = r#"define_model { name = "raw.src", kind = kind.external { table = "main.src" },
  schema = { { "id", "bigint" }, { "k", "varchar" }, { "v", "double" } } }"#;
const LUA: &str = r#"define_model { name = "m.x",
  kind = kind.scd_type2 { key = "id", valid_from = "vf", valid_to = "vt", columns = { "v" }, invalidate_hard_deletes = false },
  schema = { { "id", "bigint" }, { "k", "varchar" }, { "v", "double" } },
  query = "SELECT id, k, v FROM " .. ref("raw.src") }"#;
const RHAI: &str = r#"define_model(#{ name: "m.x",
  kind: kind::scd_type2(#{ key: "id", valid_from: "vf", valid_to: "vt", columns: ["v"], invalidate_hard_deletes: false }),
  schema: [["id", "bigint"], ["k", "varchar"], ["v", "double"]],
  query: `SELECT id, k, v FROM ${ref("raw.src")}` });"#;
const SQL: &str = "-- name: m.x\n-- kind: scd_type2(key = id, valid_from = vf, valid_to = vt, columns = [v], invalidate_hard_deletes = false)\n-- schema: id bigint, k varchar, v double\n-- refs: raw.src\nSELECT id, k, v FROM @ref(raw.src)\n";

#[test]
fn the_same_scd_model_has_one_fingerprint_in_lua_rhai_and_sql_and_every_option_is_hashed() {
    let lua = fingerprint_of(PARENT, "x.lua", LUA);
    assert_eq!(lua, fingerprint_of(PARENT, "x.rhai", RHAI), "Lua vs Rhai");
    assert_eq!(lua, fingerprint_of(PARENT, "x.sql", SQL), "Lua vs SQL");
    let edits = [
        (r#"key = "id""#, r#"key = { "id", "k" }"#),
        (r#"valid_from = "vf""#, r#"valid_from = "since""#),
        (r#"valid_to = "vt""#, r#"valid_to = "until""#),
        (r#"columns = { "v" }"#, r#"columns = { "v", "k" }"#),
        (r#"invalidate_hard_deletes = false"#, r#"invalidate_hard_deletes = true"#),
    ];
    let mut seen = std::collections::BTreeSet::from([lua.clone()]);
    for (from, to) in edits {
        let edited = LUA.replace(from, to);
        assert_ne!(edited, LUA, "{from}");
        assert!(seen.insert(fingerprint_of(PARENT, "x.lua", &edited)), "editing `{from}` → `{to}` must change the fingerprint");
    }
    // Defaults written out are the same model as defaults omitted.
    let explicit = SQL.replace("valid_from = vf, valid_to = vt", "valid_from = valid_from, valid_to = valid_to");
    let implicit = SQL.replace("valid_from = vf, valid_to = vt, ", "");
    assert_eq!(fingerprint_of(PARENT, "x.sql", &explicit), fingerprint_of(PARENT, "x.sql", &implicit));
}

#[test]
fn load_errors_name_the_column_the_model_and_the_line() {
    let p = Project::new();
    p.write("efmesh.toml", "# defaults\n");
    p.write("models/parent.lua", PARENT);
    for (text, wanted) in [
        (SQL.replace("key = id,", "key = ident,"), "key column `ident` of kind `scd_type2` is not declared in the schema"),
        (SQL.replace("columns = [v]", "columns = [w]"), "watched column `w` of kind `scd_type2` is not declared in the schema"),
        (SQL.replace("columns = [v]", "columns = [id]"), "watched column `id` of kind `scd_type2` is a key column"),
        (SQL.replace("valid_to = vt", "valid_to = vf"), "`valid_from` and `valid_to` of kind `scd_type2` must differ"),
        (SQL.replace("key = id", "key = []"), "`key` of kind `scd_type2` is empty"),
        (SQL.replace("columns = [v]", "watch = [v]"), "unknown option `watch` for kind `scd_type2`"),
        (
            SQL.replace("invalidate_hard_deletes = false", "invalidate_hard_deletes = false, renamed = {v = w}"),
            "column `w` renamed from `v` (kind `scd_type2`, `renamed`) is not declared in the schema",
        ),
        (
            SQL.replace("invalidate_hard_deletes = false", "invalidate_hard_deletes = false, renamed = {v = w}"),
            "column `v` is declared renamed to `w` (kind `scd_type2`, `renamed`) but is still declared in the schema",
        ),
        (
            SQL.replace("invalidate_hard_deletes = false", "invalidate_hard_deletes = false, renamed = [v]"),
            "`renamed` of kind `scd_type2` must map old column names to new ones",
        ),
        (
            SQL.replace("v double\n", "v double, vf timestamp\n").replace("SELECT id, k, v", "SELECT id, k, v, now()::timestamp AS vf"),
            "column `vf` is managed by kind `scd_type2` and cannot be declared",
        ),
    ] {
        p.write("models/x.sql", &text);
        let r = p.run(&["check"]);
        r.expect_code(1);
        let out = format!("{}{}", r.stdout, r.stderr);
        assert!(
            out.contains(&format!("models/x.sql:1: model `m.x`: {wanted}")) || (out.contains(wanted) && out.contains("models/x.sql:")),
            "wanted `{wanted}`:\n{}",
            out
        );
    }
    // The default managed names are reserved too, in Lua.
    p.remove("models/x.sql");
    p.write(
        "models/x.lua",
        r#"define_model { name = "m.x", kind = kind.scd_type2 { key = "id" },
  schema = { { "id", "bigint" }, { "valid_to", "timestamp" } },
  query = "SELECT id, NULL::timestamp AS valid_to FROM " .. ref("raw.src") }"#,
    );
    let r = p.run(&["check"]);
    r.expect_code(1);
    let out = format!("{}{}", r.stdout, r.stderr);
    assert!(out.contains("models/x.lua:1: model `m.x`: column `valid_to` is managed by kind `scd_type2` and cannot be declared"), "{}", out);
}

/// A column name with a space, double-quoted in `-- kind:` as it is in `-- schema:`, keeps its
/// quotes there (values are bare words or `'quoted strings'`): the load error's hint says to
/// single-quote it (it said "did you mean `order id`?", a spelling the header has no way to
/// write with double quotes), and single-quoted it loads.
#[test]
fn a_double_quoted_key_in_a_sql_header_is_hinted_in_single_quotes() {
    let p = Project::new();
    p.write("efmesh.toml", "# defaults\n");
    let schema = "-- schema: \"order id\" bigint, b varchar, v integer\n";
    let model = |key: &str| format!("-- name: m.k\n-- kind: scd_type2(key = {key})\n{schema}SELECT 1 AS \"order id\", 'x' AS b, 2 AS v\n");
    p.write("models/k.sql", &model(r#"["order id", b]"#));
    let r = p.run(&["check"]);
    r.expect_code(1);
    let out = format!("{}{}", r.stdout, r.stderr);
    for needle in [
        "models/k.sql:1: model `m.k`: key column `\"order id\"` of kind `scd_type2` is not declared in the schema",
        "hint: in `-- kind:` double quotes are part of the name: quote a column name with single quotes there, `'order id'`",
    ] {
        assert!(out.contains(needle), "{needle:?} missing:\n{out}");
    }
    assert!(!out.contains("did you mean"), "{out}");
    p.write("models/k.sql", &model("['order id', b]"));
    p.run(&["check"]).expect_code(0);
}

fn the_contract_checks_the_query_against_the_declared_columns_only(engine: EngineBackend) {
    // A query that produces a managed column itself returns a column the schema does not declare.
    let p = project(engine, "", "patient,dept,doctor\n1,cardio,house\n");
    p.write(
        "models/m.lua",
        &models("").replace(
            r#"query = "SELECT patient, dept, doctor FROM " .. ref(src),"#,
            r#"query = "SELECT patient, dept, doctor, now()::timestamp AS valid_from FROM " .. ref(src),"#,
        ),
    );
    let r = p.run(&["apply", "dev", "--yes"]);
    r.expect_code(1);
    assert!(r.stderr.contains("schema contract failed, nothing was built"), "{}", r.stderr);
    assert!(r.stderr.contains("model `m.assign`: the query returns column `valid_from`"), "{}", r.stderr);
    assert!(p.physical_tables().is_empty(), "{:?}", p.physical_tables());
}

// ---------------------------------------------------------------------------------------------
// History is never discarded without an explicit choice

/// Every relation and the state store, to compare before and after a refused command.
fn snapshot_of(p: &Project) -> (Rows, Vec<String>, StateSummary) {
    (history_in(p, "dev", "doctor"), p.physical_tables(), p.state_summary())
}

/// Rows of `env`'s view of `m.assign`, its third column read as `third`, ordered by patient then
/// valid_from.
fn history_in(p: &Project, env: &str, third: &str) -> Rows {
    p.query(&format!(
        "SELECT CAST(patient AS VARCHAR), dept, {third}, CAST(valid_from AS VARCHAR), CAST(valid_to AS VARCHAR) FROM {} ORDER BY patient, valid_from",
        env_view(env, "m.assign")
    ))
}

/// A history with a closed version: applied to dev (and prod with `with_prod`) at T1 (two
/// patients), then patient 1 moves at T2 (`run` of each).
fn project_with_history(p: &mut Project, with_prod: bool) {
    let envs: &[&str] = if with_prod { &["dev", "prod"] } else { &["dev"] };
    for env in envs {
        p.apply(env);
    }
    p.now = T2.into();
    set_assign(p, "patient,dept,doctor\n1,icu,house\n2,neuro,grey\n");
    let expected = vec![r("1", "cardio", "house", T1, Some(T2)), r("1", "icu", "house", T2, None), r("2", "neuro", "grey", T1, None)];
    for env in envs {
        p.run(&["run", env]).expect_code(0);
        assert_eq!(history_in(p, env, "doctor"), expected);
    }
}

/// `models(..)` with `m.src` a view, the scd model's `doctor` renamed `physician` (query and
/// schema), `opts` spliced into its kind options.
fn renamed_models(opts: &str) -> String {
    models(opts).replace("kind = kind.full()", "kind = kind.view()").replace(
        r#"{ "doctor", "varchar" } },
  query = "SELECT patient, dept, doctor FROM " .. ref(src),"#,
        r#"{ "physician", "varchar" } },
  query = "SELECT patient, dept, doctor AS physician FROM " .. ref(src),"#,
    )
}

fn renaming_a_tracked_column_is_refused_unless_history_is_reset_explicitly(engine: EngineBackend) {
    let mut p = view_project(engine, "", "patient,dept,doctor\n1,cardio,house\n2,neuro,grey\n");
    project_with_history(&mut p, true);
    let prod_before = history_in(&p, "prod", "doctor");

    p.now = T3.into();
    let edited = renamed_models("");
    assert!(edited.contains("doctor AS physician"));
    p.write("models/m.lua", &edited);

    // The plan names the columns and says the history starts over, in text and JSON.
    let text = p.run(&["plan", "dev"]).expect_code(0).stdout.clone();
    assert!(text.contains("history starts over"), "{text}");
    assert!(text.contains("dropped `doctor`; added `physician`"), "{text}");
    assert!(text.contains("closed versions of @"), "{text}");
    let plan = p.plan("dev");
    let h = &action(&plan, "m.assign")["history"];
    assert_eq!(h["fate"], "starts-over", "{plan:#}");
    assert_eq!(h["dropped"], serde_json::json!(["doctor"]), "{plan:#}");
    assert_eq!(h["added"], serde_json::json!(["physician"]), "{plan:#}");
    assert_eq!(h["resetAccepted"], false, "{plan:#}");

    // `--yes` alone discards nothing: refused before anything is written, naming the choices.
    let before = snapshot_of(&p);
    for args in [vec!["apply", "dev", "--yes"], vec!["apply", "dev", "--yes", "--json"]] {
        let r = p.run(&args);
        r.expect_code(1);
        assert!(r.stderr.contains("the history of scd_type2 model `m.assign` would start over"), "{}", r.stderr);
        assert!(r.stderr.contains("nothing was done"), "{}", r.stderr);
        assert!(r.stderr.contains(r#"renamed = { doctor = "physician" }"#), "{}", r.stderr);
        assert!(r.stderr.contains("--reset-history m.assign"), "{}", r.stderr);
        assert_eq!(snapshot_of(&p), before, "a refused apply changed the table or the state");
    }

    // `--reset-history` accepts it: the new version's history starts at T3.
    let applied = p.run(&["apply", "dev", "--yes", "--json", "--reset-history", "m.assign"]).expect_code(0).json();
    assert_eq!(action(&applied, "m.assign")["history"]["resetAccepted"], true, "{applied:#}");
    assert_eq!(history_in(&p, "dev", "physician"), vec![r("1", "icu", "house", T3, None), r("2", "neuro", "grey", T3, None)], "dev's history started over");

    // prod still serves the old history; promoting the version dev built would replace it by
    // dev's fresh table: refused too until prod's operator says so.
    let r = p.run(&["apply", "prod", "--yes"]);
    r.expect_code(1);
    assert!(r.stderr.contains("--reset-history m.assign"), "{}", r.stderr);
    assert_eq!(history_in(&p, "prod", "doctor"), prod_before);
    p.run(&["apply", "prod", "--yes", "--reset-history", "m.assign"]).expect_code(0);
    assert_eq!(history_in(&p, "prod", "physician"), history_in(&p, "dev", "physician"));

    // A model that stops being scd_type2 stops serving its history: refused the same way.
    p.write("models/m.lua", &edited.replace("kind = kind.scd_type2 { key = \"patient\" }", "kind = kind.full()"));
    let r = p.run(&["apply", "dev", "--yes"]);
    r.expect_code(1);
    assert!(r.stderr.contains("the model is no longer `scd_type2`"), "{}", r.stderr);
    assert_eq!(history_in(&p, "dev", "physician").len(), 2, "dev still serves its history");

    // Only scd_type2 models have a history to reset.
    let r = p.run(&["plan", "dev", "--reset-history", "m.src"]);
    r.expect_code(1);
    assert!(r.stderr.contains("only `scd_type2` models have a history to reset"), "{}", r.stderr);
}

/// The scd model after the rename, in each language (`m.src` stays in Lua).
const RENAMED_LUA: &str = r#"define_model { name = "m.assign", kind = kind.scd_type2 { key = "patient", renamed = { doctor = "physician" } },
  schema = { { "patient", "bigint" }, { "dept", "varchar" }, { "physician", "varchar" } },
  query = "SELECT patient, dept, doctor AS physician FROM " .. ref("m.src") }
"#;
const RENAMED_RHAI: &str = r#"define_model(#{ name: "m.assign", kind: kind::scd_type2(#{ key: "patient", renamed: #{ doctor: "physician" } }),
  schema: [["patient", "bigint"], ["dept", "varchar"], ["physician", "varchar"]],
  query: `SELECT patient, dept, doctor AS physician FROM ${ref("m.src")}` });
"#;
const RENAMED_SQL: &str = "-- name: m.assign\n-- kind: scd_type2(key = patient, renamed = {doctor = physician})\n-- schema: patient bigint, dept varchar, physician varchar\n-- refs: m.src\nSELECT patient, dept, doctor AS physician FROM @ref(m.src)\n";

fn a_declared_rename_carries_every_version_over_in_lua_rhai_and_sql(engine: EngineBackend) {
    for (i, (file, text)) in [("assign.lua", RENAMED_LUA), ("assign.rhai", RENAMED_RHAI), ("assign.sql", RENAMED_SQL)].into_iter().enumerate() {
        // One project per language, each on its own database.
        let engine = if i == 0 { engine.clone() } else { engine.another() };
        let mut p = view_project(engine, "", "patient,dept,doctor\n1,cardio,house\n2,neuro,grey\n");
        p.write("efmesh.toml", &p.config_with("").replace("models/**/*.lua", "models/**/*.{lua,rhai,sql}"));
        project_with_history(&mut p, true);

        // T3: the rename, in `file`'s language; patient 2 also changes doctor in the source.
        p.now = T3.into();
        let without_scd = models("").replace("kind = kind.full()", "kind = kind.view()");
        let cut = without_scd.find("define_model {\n  name = \"m.assign\"").expect("the scd model");
        p.write("models/m.lua", &without_scd[..cut]);
        p.write(&format!("models/{file}"), text);
        set_assign(&p, "patient,dept,doctor\n1,icu,house\n2,neuro,shepherd\n");
        let plan = p.plan("dev");
        let h = &action(&plan, "m.assign")["history"];
        assert_eq!(h["fate"], "carried", "{file}: {plan:#}");
        assert_eq!(h["renamed"], serde_json::json!({"doctor": "physician"}), "{file}: {plan:#}");
        let text = p.run(&["plan", "dev"]).expect_code(0).stdout.clone();
        assert!(text.contains("history carried over") && text.contains("renamed `doctor` → `physician`"), "{file}: {text}");

        // `--yes` alone: every version kept (valid_from, closed rows), then reconciled at T3.
        p.apply("dev");
        assert_eq!(
            history_in(&p, "dev", "physician"),
            vec![
                r("1", "cardio", "house", T1, Some(T2)),
                r("1", "icu", "house", T2, None),
                r("2", "neuro", "grey", T1, Some(T3)),
                r("2", "neuro", "shepherd", T3, None),
            ],
            "{file}: history carried over under the new column name"
        );
        // prod promotes the carried version as it stands.
        let prod = p.apply("prod");
        assert_eq!(action(&prod, "m.assign")["history"]["fate"], "carried", "{file}: {prod:#}");
        assert_eq!(history_in(&p, "prod", "physician"), history_in(&p, "dev", "physician"), "{file}");
        // Once applied, the declaration no longer applies (the old column is gone): no change.
        assert_eq!(p.plan("dev")["hasChanges"], false, "{file}");
    }
}

fn forward_only_adds_a_column_keeping_history_with_null_in_earlier_versions(engine: EngineBackend) {
    // dev only: a forward-only change is refused outside prod while another environment serves
    // the table it keeps (its history would change under it).
    let mut p = view_project(engine, "", "patient,dept,doctor\n1,cardio,house\n2,neuro,grey\n");
    project_with_history(&mut p, false);
    let tables = p.physical_tables();

    // T3: `m.assign` gains a watched column. Without a choice, its history would start over.
    p.now = T3.into();
    let edited = models("").replace("kind = kind.full()", "kind = kind.view()").replace(
        r#"{ "doctor", "varchar" } },
  query = "SELECT patient, dept, doctor FROM " .. ref(src),"#,
        r#"{ "doctor", "varchar" }, { "ward", "varchar" } },
  query = "SELECT patient, dept, doctor, upper(dept) AS ward FROM " .. ref(src),"#,
    );
    p.write("models/m.lua", &edited);
    let r = p.run(&["apply", "dev", "--yes"]);
    r.expect_code(1);
    assert!(r.stderr.contains("--forward-only m.assign"), "{}", r.stderr);
    assert!(r.stdout.contains("added `ward`"), "{}", r.stdout);

    let applied = p.run(&["apply", "dev", "--yes", "--json", "--forward-only", "m.assign"]).expect_code(0).json();
    let a = action(&applied, "m.assign");
    assert_eq!(a["change"], "forward-only", "{applied:#}");
    assert_eq!(a["history"]["fate"], "kept", "{applied:#}");
    assert_eq!(p.physical_tables(), tables, "the old table is kept, no new one");
    let with_ward = |p: &Project| {
        p.query(&format!(
            "SELECT CAST(patient AS VARCHAR), dept, ward, CAST(valid_from AS VARCHAR), CAST(valid_to AS VARCHAR) FROM {} ORDER BY patient, valid_from",
            env_view("dev", "m.assign")
        ))
    };
    let row = |patient: &str, dept: &str, ward: Option<&str>, from: &str, to: Option<&str>| {
        vec![Some(patient.to_string()), Some(dept.to_string()), ward.map(str::to_string), Some(ts(from)), to.map(ts)]
    };
    assert_eq!(
        with_ward(&p),
        vec![row("1", "cardio", None, T1, Some(T2)), row("1", "icu", None, T2, None), row("2", "neuro", None, T1, None)],
        "history kept, the new column NULL in the versions recorded so far"
    );

    // The next reconcile records the column's values as a change of every open version (as dbt
    // snapshots do); closed versions keep NULL.
    p.now = T4.into();
    p.run(&["run", "dev"]).expect_code(0);
    assert_eq!(
        with_ward(&p),
        vec![
            row("1", "cardio", None, T1, Some(T2)),
            row("1", "icu", None, T2, Some(T4)),
            row("1", "icu", Some("ICU"), T4, None),
            row("2", "neuro", None, T1, Some(T4)),
            row("2", "neuro", Some("NEURO"), T4, None),
        ]
    );
}

fn a_new_column_left_out_of_the_watch_list_opens_no_version(engine: EngineBackend) {
    // `columns` lists the watched ones: a forward-only column outside it is stored as versions
    // open, and never opens one by itself.
    let opts = r#", columns = { "dept", "doctor" }"#;
    let mut p = view_project(engine, opts, "patient,dept,doctor\n1,cardio,house\n2,neuro,grey\n");
    p.apply("dev");
    p.now = T2.into();
    let edited = models(opts).replace("kind = kind.full()", "kind = kind.view()").replace(
        r#"{ "doctor", "varchar" } },
  query = "SELECT patient, dept, doctor FROM " .. ref(src),"#,
        r#"{ "doctor", "varchar" }, { "ward", "varchar" } },
  query = "SELECT patient, dept, doctor, upper(dept) AS ward FROM " .. ref(src),"#,
    );
    p.write("models/m.lua", &edited);
    p.run(&["apply", "dev", "--yes", "--forward-only", "m.assign"]).expect_code(0);
    p.now = T3.into();
    set_assign(&p, "patient,dept,doctor\n1,icu,house\n2,neuro,grey\n");
    p.run(&["run", "dev"]).expect_code(0);
    let rows = p.query(&format!(
        "SELECT CAST(patient AS VARCHAR), dept, ward, CAST(valid_from AS VARCHAR), CAST(valid_to AS VARCHAR) FROM {} ORDER BY patient, valid_from",
        env_view("dev", "m.assign")
    ));
    let row = |patient: &str, dept: &str, ward: Option<&str>, from: &str, to: Option<&str>| {
        vec![Some(patient.to_string()), Some(dept.to_string()), ward.map(str::to_string), Some(ts(from)), to.map(ts)]
    };
    assert_eq!(
        rows,
        vec![row("1", "cardio", None, T1, Some(T3)), row("1", "icu", Some("ICU"), T3, None), row("2", "neuro", None, T1, None)],
        "only patient 1's watched change opens a version, which stores the new column"
    );
}

fn a_declared_rename_of_the_key_carries_the_history_over(engine: EngineBackend) {
    let mut p = view_project(engine, "", "patient,dept,doctor\n1,cardio,house\n2,neuro,grey\n");
    project_with_history(&mut p, false);
    p.now = T3.into();
    let edited = models(r#", renamed = { patient = "patient_id" }"#)
        .replace("kind = kind.full()", "kind = kind.view()")
        .replace(r#"key = "patient""#, r#"key = "patient_id""#)
        .replace(
            r#"schema = { { "patient", "bigint" }, { "dept", "varchar" }, { "doctor", "varchar" } },
  query = "SELECT patient, dept, doctor FROM " .. ref(src),"#,
            r#"schema = { { "patient_id", "bigint" }, { "dept", "varchar" }, { "doctor", "varchar" } },
  query = "SELECT patient AS patient_id, dept, doctor FROM " .. ref(src),"#,
        );
    assert!(edited.contains("patient AS patient_id"), "{edited}");
    p.write("models/m.lua", &edited);
    let applied = p.apply("dev");
    assert_eq!(action(&applied, "m.assign")["history"]["fate"], "carried", "{applied:#}");
    let rows = p.query(&format!(
        "SELECT CAST(patient_id AS VARCHAR), dept, doctor, CAST(valid_from AS VARCHAR), CAST(valid_to AS VARCHAR) FROM {} ORDER BY patient_id, valid_from",
        env_view("dev", "m.assign")
    ));
    assert_eq!(rows, vec![r("1", "cardio", "house", T1, Some(T2)), r("1", "icu", "house", T2, None), r("2", "neuro", "grey", T1, None)]);
}

/// prod serves a history (applied at T1, patient 1 moved at T2); dev does not exist yet.
fn prod_with_history(engine: EngineBackend) -> Project {
    let mut p = view_project(engine, "", "patient,dept,doctor\n1,cardio,house\n2,neuro,grey\n");
    p.apply("prod");
    p.now = T2.into();
    set_assign(&p, "patient,dept,doctor\n1,icu,house\n2,neuro,grey\n");
    p.run(&["run", "prod"]).expect_code(0);
    assert_eq!(history_in(&p, "prod", "doctor").len(), 3);
    p
}

/// [`renamed_models`] with the rename declared.
fn declared_rename() -> String {
    renamed_models("").replace(r#"key = "patient""#, r#"key = "patient", renamed = { doctor = "physician" }"#)
}

fn a_version_a_new_environment_built_empty_does_not_replace_prods_history(engine: EngineBackend) {
    let mut p = prod_with_history(engine);
    let prod_before = history_in(&p, "prod", "doctor");
    // T3: the rename, declared; a new environment `dev` has no history, so it builds the new
    // version empty (nothing to carry).
    p.now = T3.into();
    p.write("models/m.lua", &declared_rename());
    p.apply("dev");
    assert_eq!(history_in(&p, "dev", "physician").len(), 2, "dev's table started at T3");

    // prod's history is not in that table: promoting it would discard prod's history.
    let plan = p.plan("prod");
    assert_eq!(action(&plan, "m.assign")["history"]["fate"], "starts-over", "{plan:#}");
    // The plan's one way forward is one sentence (it read "apply refuses this: or `--reset-history …`").
    let text = p.run(&["plan", "prod"]).expect_code(0).stdout.clone();
    assert!(text.contains("      apply refuses this: start it over with `--reset-history m.assign`\n"), "{text}");
    let before = (history_in(&p, "prod", "doctor"), p.physical_tables(), p.state_summary());
    let r = p.run(&["apply", "prod", "--yes"]);
    r.expect_code(1);
    assert!(r.stderr.contains("the history of scd_type2 model `m.assign` would start over"), "{}", r.stderr);
    assert!(r.stderr.contains("--reset-history m.assign"), "{}", r.stderr);
    assert!(!r.stderr.contains("renamed = {"), "declaring the rename cannot help a version that exists: {}", r.stderr);
    assert_eq!((history_in(&p, "prod", "doctor"), p.physical_tables(), p.state_summary()), before);
    assert_eq!(history_in(&p, "prod", "doctor"), prod_before);

    // Said explicitly, prod serves dev's table.
    p.run(&["apply", "prod", "--yes", "--reset-history", "m.assign"]).expect_code(0);
    assert_eq!(history_in(&p, "prod", "physician"), history_in(&p, "dev", "physician"));
}

fn a_carried_version_does_not_replace_a_history_that_recorded_more_since(engine: EngineBackend) {
    let mut p = view_project(engine, "", "patient,dept,doctor\n1,cardio,house\n2,neuro,grey\n");
    project_with_history(&mut p, true);
    // T3: dev carries the history over the declared rename.
    p.now = T3.into();
    p.write("models/m.lua", &declared_rename());
    assert_eq!(action(&p.apply("dev"), "m.assign")["history"]["fate"], "carried");
    // T4: prod, still on the old version, records a change dev's copy does not have.
    p.now = T4.into();
    p.write("models/m.lua", &models("").replace("kind = kind.full()", "kind = kind.view()"));
    set_assign(&p, "patient,dept,doctor\n1,icu,house\n2,ortho,grey\n");
    p.run(&["run", "prod"]).expect_code(0);
    let prod_before = history_in(&p, "prod", "doctor");
    assert_eq!(prod_before.len(), 4, "{prod_before:?}");

    p.write("models/m.lua", &declared_rename());
    let before = (p.physical_tables(), p.state_summary());
    let r = p.run(&["apply", "prod", "--yes"]);
    r.expect_code(1);
    assert!(r.stderr.contains("scd_type2 model `m.assign`"), "{}", r.stderr);
    assert!(r.stderr.contains("recorded more since"), "{}", r.stderr);
    assert!(r.stderr.contains("--reset-history m.assign"), "{}", r.stderr);
    assert_eq!(history_in(&p, "prod", "doctor"), prod_before);
    assert_eq!((p.physical_tables(), p.state_summary()), before);

    p.run(&["apply", "prod", "--yes", "--reset-history", "m.assign"]).expect_code(0);
    assert_eq!(history_in(&p, "prod", "physician"), history_in(&p, "dev", "physician"));
}

fn a_revert_to_a_version_the_environment_built_earlier_says_so_when_its_history_starts_over(engine: EngineBackend) {
    let mut p = prod_with_history(engine);
    let v1 = models("").replace("kind = kind.full()", "kind = kind.view()");
    let v2 = v1.replace(r#""SELECT patient, dept, doctor FROM " .. ref(src)"#, r#""SELECT patient, dept, trim(doctor) AS doctor FROM " .. ref(src)"#);
    assert_ne!(v1, v2);
    // T3: prod moves to v2, its history started over (said explicitly), and records a change.
    p.now = T3.into();
    p.write("models/m.lua", &v2);
    p.run(&["apply", "prod", "--yes", "--reset-history", "m.assign"]).expect_code(0);
    p.now = T4.into();
    set_assign(&p, "patient,dept,doctor\n1,ortho,house\n2,neuro,grey\n");
    p.run(&["run", "prod"]).expect_code(0);
    let prod_before = history_in(&p, "prod", "doctor");

    // T5: back to v1, which prod itself built at T1: its table does not hold what v2 recorded.
    p.now = T5.into();
    p.write("models/m.lua", &v1);
    let r = p.run(&["apply", "prod", "--yes"]);
    r.expect_code(1);
    assert!(r.stderr.contains("the history of scd_type2 model `m.assign` would start over"), "{}", r.stderr);
    assert!(r.stderr.contains("the new version exists already (built earlier"), "{}", r.stderr);
    assert!(!r.stderr.contains("built for another environment"), "prod built it itself: {}", r.stderr);
    assert_eq!(history_in(&p, "prod", "doctor"), prod_before);
}

fn a_leftover_table_of_an_interrupted_apply_is_replaced_by_the_carried_history(engine: EngineBackend) {
    let mut p = view_project(engine, "", "patient,dept,doctor\n1,cardio,house\n2,neuro,grey\n");
    project_with_history(&mut p, false);
    let carried = history_in(&p, "dev", "doctor");
    p.now = T3.into();
    p.write("models/m.lua", &declared_rename());
    // An interrupted `--reset-history` attempt left the new version's table, empty, with no
    // snapshot recording it.
    let physical = action(&p.plan("dev"), "m.assign")["physical"].as_str().expect("physical").to_string();
    p.execute_on_engine(&format!("CREATE TABLE {physical} (patient BIGINT, dept VARCHAR, physician VARCHAR, valid_from TIMESTAMP, valid_to TIMESTAMP)"));
    p.apply("dev");
    assert_eq!(history_in(&p, "dev", "physician"), carried, "every version carried over, none from the leftover");
}

fn a_carry_over_whose_source_table_is_gone_fails_before_building_anything(engine: EngineBackend) {
    let mut p = view_project(engine, "", "patient,dept,doctor\n1,cardio,house\n2,neuro,grey\n");
    project_with_history(&mut p, false);
    p.now = T3.into();
    // `m.src` changes too: its new view would be built first.
    p.write("models/m.lua", &declared_rename().replace("doctor FROM \" .. ref(raw)", "doctor FROM \" .. ref(raw) .. \" WHERE patient > 0\""));
    let plan = p.plan("dev");
    assert_eq!(action(&plan, "m.src")["build"], true, "{plan:#}");
    let old = p.physical_tables().into_iter().find(|t| t.starts_with("m__assign__")).expect("the old table");
    // Postgres refuses to drop a table a view reads: dev's view of it goes too.
    let cascade = if p.on_postgres() { " CASCADE" } else { "" };
    p.execute_on_engine(&format!("DROP TABLE \"_efmesh\".\"{old}\"{cascade}"));
    let before = (p.physical_tables(), p.state_summary());
    let r = p.run(&["apply", "dev", "--yes"]);
    r.expect_code(1);
    assert!(r.stderr.contains("scd_type2 model `m.assign`"), "{}", r.stderr);
    assert!(r.stderr.contains(&old), "names the relation: {}", r.stderr);
    assert_eq!((p.physical_tables(), p.state_summary()), before, "nothing built");
}

fn a_changed_key_is_never_offered_forward_only(engine: EngineBackend) {
    let mut p = view_project(engine, "", "patient,dept,doctor\n1,cardio,house\n2,neuro,grey\n");
    project_with_history(&mut p, false);
    p.now = T3.into();
    p.write("models/m.lua", &models("").replace("kind = kind.full()", "kind = kind.view()").replace(r#"key = "patient""#, r#"key = { "patient", "dept" }"#));
    let text = p.run(&["plan", "dev"]).expect_code(0).stdout.clone();
    assert!(text.contains("`key` changed"), "{text}");
    assert!(!text.contains("--forward-only"), "{text}");
    let r = p.run(&["apply", "dev", "--yes"]);
    r.expect_code(1);
    assert!(r.stderr.contains("--reset-history m.assign"), "{}", r.stderr);
    assert!(!r.stderr.contains("--forward-only"), "offered although it would be refused: {}", r.stderr);
    let r = p.run(&["apply", "dev", "--yes", "--forward-only", "m.assign"]);
    r.expect_code(1);
    assert!(r.stderr.contains("its kind changed"), "{}", r.stderr);
}

/// Rows of `env`'s view of `m.assign` and those whose `share` is exactly a quarter of the patient
/// (what the query gives, not rounded to the declared `decimal(10,1)`), and the versions recorded.
fn shares(p: &Project, env: &str, column: &str) -> (String, String) {
    let view = env_view(env, "m.assign");
    let rows = p.query(&format!("SELECT CAST(count(*) AS VARCHAR), CAST(count(*) FILTER (WHERE {column} * 4 = patient) AS VARCHAR) FROM {view}"));
    (rows[0][0].clone().unwrap_or_default(), rows[0][1].clone().unwrap_or_default())
}

fn a_forward_only_column_declared_narrower_than_the_query_keeps_its_values_and_opens_nothing_more(engine: EngineBackend) {
    // The table a build creates has the query's types (the contract compares families): a column
    // added with the declared `decimal(10,1)` stored 0.25 as 0.3, and every later reconcile saw
    // 0.25 ≠ 0.3 — a new version of every key at every run.
    let mut p = view_project(engine, "", "patient,dept,doctor\n1,cardio,house\n2,neuro,grey\n");
    project_with_history(&mut p, false);
    p.now = T3.into();
    let edited = models("").replace("kind = kind.full()", "kind = kind.view()").replace(
        r#"{ "doctor", "varchar" } },
  query = "SELECT patient, dept, doctor FROM " .. ref(src),"#,
        r#"{ "doctor", "varchar" }, { "share", "decimal(10,1)" } },
  query = "SELECT patient, dept, doctor, CAST(patient AS DECIMAL(10,2)) / 4 AS share FROM " .. ref(src),"#,
    );
    p.write("models/m.lua", &edited);
    p.run(&["apply", "dev", "--yes", "--forward-only", "m.assign"]).expect_code(0);
    // 3 rows (patient 1's closed and open versions, patient 2's), share NULL.
    assert_eq!(shares(&p, "dev", "share"), ("3".to_string(), "0".to_string()));
    // T4: the new column's values are a change of each open version (recorded once).
    p.now = T4.into();
    p.run(&["run", "dev"]).expect_code(0);
    assert_eq!(shares(&p, "dev", "share"), ("5".to_string(), "2".to_string()), "the values as the query gives them (0.25, 0.5)");
    // T5: nothing changed in the source: nothing recorded.
    p.now = T5.into();
    p.run(&["run", "dev"]).expect_code(0);
    assert_eq!(shares(&p, "dev", "share"), ("5".to_string(), "2".to_string()), "a run over unchanged rows opened versions");
}

fn a_carried_column_declared_narrower_than_the_query_keeps_its_values_and_opens_nothing_more(engine: EngineBackend) {
    // A declared rename carries every row over, each value cast: to the query's type, so 0.25
    // stays 0.25 (cast to the declared `decimal(10,1)` it became 0.3, and every run then
    // recorded a change).
    let mut p = view_project(engine, "", "patient,dept,doctor\n1,cardio,house\n2,neuro,grey\n");
    let with = |column: &str, renamed: &str| {
        models(renamed).replace("kind = kind.full()", "kind = kind.view()").replace(
            r#"{ "doctor", "varchar" } },
  query = "SELECT patient, dept, doctor FROM " .. ref(src),"#,
            &format!(
                r#"{{ "doctor", "varchar" }}, {{ "{column}", "decimal(10,1)" }} }},
  query = "SELECT patient, dept, doctor, CAST(patient AS DECIMAL(10,2)) / 4 AS {column} FROM " .. ref(src),"#
            ),
        )
    };
    p.write("models/m.lua", &with("share", ""));
    p.apply("dev");
    assert_eq!(shares(&p, "dev", "share"), ("2".to_string(), "2".to_string()));
    p.now = T2.into();
    p.write("models/m.lua", &with("quarter", r#", renamed = { share = "quarter" }"#));
    p.apply("dev");
    assert_eq!(shares(&p, "dev", "quarter"), ("2".to_string(), "2".to_string()), "carried over with the query's values");
    p.now = T3.into();
    p.run(&["run", "dev"]).expect_code(0);
    p.now = T4.into();
    p.run(&["run", "dev"]).expect_code(0);
    assert_eq!(shares(&p, "dev", "quarter"), ("2".to_string(), "2".to_string()), "runs over unchanged rows opened versions");
}

/// `.sql` models over the engine table `land.vals` (id, name, v `decimal(18,4)`): `raw.vals` and
/// `m.hist` (scd_type2 by id), whose `-- kind:` options are `opts` and whose query selects
/// `select` from it.
fn vals_models(p: &Project, opts: &str, schema: &str, select: &str) {
    p.write("models/vals.sql", "-- name: raw.vals\n-- kind: external(table = land.vals)\n-- schema: id bigint, name varchar, v decimal(18,4)\n");
    let hist = format!("-- name: m.hist\n-- kind: scd_type2(key = id{opts})\n-- schema: {schema}\n-- refs: raw.vals\nSELECT {select} FROM @ref(raw.vals)\n");
    p.write("models/hist.sql", &hist);
}

/// Rows of dev's view of `m.hist`, its second column read as `second`, as text, by id then
/// valid_from.
fn vals_history(p: &Project, second: &str) -> Rows {
    p.query(&format!(
        "SELECT CAST(id AS VARCHAR), {second}, CAST(v AS VARCHAR), CAST(valid_from AS VARCHAR), CAST(valid_to AS VARCHAR) FROM {} ORDER BY id, valid_from",
        env_view("dev", "m.hist")
    ))
}

/// A carried history is copied with the types the query now returns: a query that narrows a
/// column (`CAST(v AS decimal(10,2))` over a history of `decimal(18,4)`) rewrote recorded values
/// (`1.2345` became `1.23` in a closed version), apply exiting 0 with `history carried over`. It
/// is refused before anything is copied (exit 1, the model's file:line, the column, both types,
/// an example, the ways forward; views, tables and state unchanged), as a staged value the table
/// cannot hold is; returning the type the history stores carries every value over unchanged.
/// On Postgres a cast to `varchar(1)` cuts text silently: refused the same way.
fn a_carry_over_that_would_change_recorded_values_is_refused_and_changes_nothing(engine: EngineBackend) {
    let mut p = Project::on_engine(engine);
    p.write("efmesh.toml", &p.config_with("").replace("models/**/*.lua", "models/**/*.{lua,rhai,sql}"));
    p.now = T1.into();
    p.execute_on_engine("CREATE SCHEMA IF NOT EXISTS land");
    p.execute_on_engine("CREATE TABLE land.vals (id BIGINT, name VARCHAR, v DECIMAL(18,4))");
    p.execute_on_engine("INSERT INTO land.vals VALUES (1, 'a', 1.2345), (2, 'bo', 2.5)");
    vals_models(&p, "", "id bigint, name varchar, v decimal(18,4)", "id, name, v");
    p.apply("dev");
    // T2: id 1 changes to a value `decimal(10,2)` holds: only the closed version's 1.2345 does not fit.
    p.now = T2.into();
    p.execute_on_engine("UPDATE land.vals SET v = 1.25 WHERE id = 1");
    p.run(&["run", "dev"]).expect_code(0);
    let before = vals_history(&p, "name");
    assert_eq!(before.len(), 3, "{before:?}");
    assert_eq!(before[0][2].as_deref(), Some("1.2345"), "{before:?}");

    // T3: `name` renamed `label` (declared), and the query narrows `v`.
    p.now = T3.into();
    let renamed = ", renamed = {name = label}";
    let schema = "id bigint, label varchar, v decimal(18,4)";
    vals_models(&p, renamed, schema, "id, name AS label, CAST(v AS decimal(10,2)) AS v");
    assert_eq!(action(&p.plan("dev"), "m.hist")["history"]["fate"], "carried");
    let state = (p.physical_tables(), p.state_summary());
    let (wide, narrow) = if p.on_postgres() { ("NUMERIC(18,4)", "NUMERIC(10,2)") } else { ("DECIMAL(18,4)", "DECIMAL(10,2)") };
    let r = p.run(&["apply", "dev", "--yes"]);
    r.expect_code(1);
    for needle in [
        "models/hist.sql:1: model `m.hist`: cannot carry the history of @".to_string(),
        format!("column `v` is stored there as `{wide}`, but the new version's table would store it as `{narrow}`"),
        "which would change 1 of its recorded values (e.g. 1.2345 → 1.23)".to_string(),
        "nothing of this model was written".to_string(),
        format!("hint: have the query return the column as `{wide}`"),
        "remove `renamed` from the kind and apply with `--reset-history m.hist`".to_string(),
    ] {
        assert!(r.stderr.contains(&needle), "{needle:?} missing:\n{}", r.stderr);
    }
    assert_eq!(vals_history(&p, "name"), before, "dev still serves the old version, values unchanged");
    assert_eq!((p.physical_tables(), p.state_summary()), state, "nothing built, nothing recorded");

    if p.on_postgres() {
        // `varchar(1)` cuts `bo` to `b` on Postgres (DuckDB's `VARCHAR(1)` is a `VARCHAR`).
        vals_models(&p, renamed, schema, "id, CAST(name AS varchar(1)) AS label, v");
        let r = p.run(&["apply", "dev", "--yes"]);
        r.expect_code(1);
        for needle in ["column `label` (`name` in @", "as `VARCHAR(1)`", "which would change 1 of its recorded values (e.g. bo → b)"] {
            assert!(r.stderr.contains(needle), "{needle:?} missing:\n{}", r.stderr);
        }
        assert_eq!(vals_history(&p, "name"), before);
    }

    // Returned as the history stores it, every value is carried over unchanged.
    vals_models(&p, renamed, schema, "id, name AS label, CAST(CAST(v AS decimal(10,2)) AS decimal(18,4)) AS v");
    let applied = p.apply("dev");
    assert_eq!(action(&applied, "m.hist")["history"]["fate"], "carried", "{applied:#}");
    assert_eq!(vals_history(&p, "label"), before, "every version carried over with its recorded values");
}

/// Postgres's `json` type has no equality operator: an `scd_type2` model watching a `json`
/// column passed `check` and `plan` and failed mid-apply on efmesh's own `UPDATE` (`operator does
/// not exist: json = json`). On Postgres it is refused at load (`check`, `plan`, `apply`: exit 1,
/// nothing built), naming the model's file:line and the column, hinting at `jsonb` or the watch
/// list; declared and returned as `jsonb` it applies. DuckDB compares `json` as text: it applies.
fn a_watched_json_column_is_refused_at_load_on_postgres_and_applies_on_duckdb(engine: EngineBackend) {
    let p = Project::on_engine(engine);
    let write = |ty: &str| {
        p.write(
            "models/hist.lua",
            &format!(
                r#"define_model {{
  name = "j.src", kind = kind.full(), schema = {{ {{ "id", "bigint" }}, {{ "doc", "{ty}" }} }},
  query = [[SELECT CAST(1 AS BIGINT) AS id, CAST('{{"a": 1}}' AS {ty}) AS doc]],
}}
define_model {{
  name = "j.hist", kind = kind.scd_type2 {{ key = "id" }}, schema = {{ {{ "id", "bigint" }}, {{ "doc", "{ty}" }} }},
  query = "SELECT id, doc FROM " .. ref("j.src"),
}}
"#
            ),
        );
    };
    write("json");
    if !p.on_postgres() {
        p.apply("dev");
        assert_eq!(p.rows("\"dev__j\".\"hist\"").len(), 1);
        return;
    }
    for args in [&["check"][..], &["plan", "dev"][..], &["apply", "dev", "--yes"][..]] {
        let run = p.run(args);
        run.expect_code(1);
        let out = format!("{}{}", run.stdout, run.stderr);
        for needle in
            ["models/hist.lua:5", "model `j.hist`", "column `doc` is a watched column", "declared `json`", "json = json", "hint:", "`jsonb`", "watched columns"]
        {
            assert!(out.contains(needle), "{needle:?} missing from `{}`:\n{out}", args.join(" "));
        }
    }
    assert!(p.physical_tables().is_empty(), "something was built");
    write("jsonb");
    p.apply("dev");
    assert_eq!(p.rows("\"dev__j\".\"hist\"").len(), 1);
}

/// As [`a_history_below_a_unique_key_parent_built_anew_is_refused_instead_of_recording_the_lost_keys_as_deleted`],
/// with a `full` model or a `view` between the unique-key parent and the history: the model in
/// between keeps its columns' data (it does not read the new column) but not the rows the old
/// parent table kept, so the history is refused the same way, naming `--forward-only m.base`;
/// with it, the next run closes nothing.
fn a_history_reading_a_rebuilt_unique_key_parent_through_a_full_model_or_view_is_refused_too(engine: EngineBackend) {
    for middle in ["full", "view"] {
        let mut p = Project::on_engine(if middle == "full" { engine.clone() } else { engine.another() });
        let models = |ward: bool| {
            let mid = r#"local mid = define_model {
  name = "m.mid", kind = kind.MIDDLE(),
  schema = { { "patient", "bigint" }, { "dept", "varchar" }, { "doctor", "varchar" } },
  query = "SELECT patient, dept, doctor FROM " .. ref(base),
}
define_model {
  name = "m.assign""#;
            keyed_parent_models(ward)
                .replacen(r#"SELECT patient, dept, doctor FROM " .. ref(base)"#, r#"SELECT patient, dept, doctor FROM " .. ref(mid)"#, 1)
                .replacen("define_model {\n  name = \"m.assign\"", &mid.replace("MIDDLE", middle), 1)
        };
        let text = models(false);
        assert!(text.contains("ref(mid)") && text.contains(&format!("kind.{middle}()")), "{text}");
        p.now = T1.into();
        set_assign(&p, "patient,dept,doctor\n1,cardio,house\n2,neuro,grey\n");
        p.write("models/m.lua", &text);
        p.apply("dev");
        p.now = T2.into();
        set_assign(&p, "patient,dept,doctor\n1,cardio,house\n");
        p.run(&["run", "dev"]).expect_code(0);
        let both_open = vec![r("1", "cardio", "house", T1, None), r("2", "neuro", "grey", T1, None)];
        assert_eq!(history(&p), both_open, "{middle}");

        p.now = T3.into();
        p.write("models/m.lua", &models(true));
        let plan = p.plan("dev");
        let scd = action(&plan, "m.assign");
        assert_eq!((scd["build"].as_bool(), scd["history"]["fate"].as_str()), (Some(true), Some("starts-over")), "{middle}: {plan:#}");
        assert_eq!(scd["history"]["upstreamDropsKept"], serde_json::json!(["m.base"]), "{middle}: {plan:#}");
        let reason = scd["explain"]["reason"].as_str().unwrap_or_default();
        assert!(reason.contains("parent `m.mid`, which no longer holds the rows earlier refreshes of `m.base` kept"), "{middle}: {plan:#}");
        let refused = p.run(&["apply", "dev", "--yes"]);
        refused.expect_code(1);
        assert!(refused.stderr.contains("scd_type2 model `m.assign`") && refused.stderr.contains("`--forward-only m.base`"), "{middle}: {}", refused.stderr);
        assert_eq!(history(&p), both_open, "{middle}: nothing was done");

        p.run(&["apply", "dev", "--yes", "--forward-only", "m.base"]).expect_code(0);
        p.now = T4.into();
        p.run(&["run", "dev"]).expect_code(0);
        assert_eq!(history(&p), both_open, "{middle}: patient 2 was dropped by no one: its version stays open");
    }
}

/// `ref.regions` (a seed) → `s.zones` (scd_type2 by region).
const ZONES: &str = r#"local regions = define_model {
  name = "ref.regions", kind = kind.seed { path = "seeds/regions.csv" },
  schema = { { "region", "varchar" }, { "zone", "varchar" } },
}
define_model {
  name = "s.zones", kind = kind.scd_type2 { key = "region" },
  schema = { { "region", "varchar" }, { "zone", "varchar" } },
  query = "SELECT region, zone FROM " .. ref(regions),
}
"#;

/// The seed of [`ZONES`]: `north` in zone `N`, `east` in `east`.
fn set_regions(p: &Project, east: &str) {
    p.write("seeds/regions.csv", &format!("region,zone\nnorth,N\neast,{east}\n"));
}

/// `env`'s `s.zones`: region, zone, whether the version is open; by region and `valid_from`.
fn zones(p: &Project, env: &str) -> Rows {
    p.query(&format!(
        "SELECT region, zone, CASE WHEN valid_to IS NULL THEN 'open' ELSE 'closed' END FROM {} ORDER BY region, valid_from",
        env_view(env, "s.zones")
    ))
}

/// `prod` and `dev` serve one history; `prod` changes the seed (`east` E → X) and applies the
/// history `--forward-only`: its new version (the same query, over `prod`'s new seed table) keeps
/// the table `dev`'s version serves, and `prod`'s run reconciles it from `prod`'s seed. An SCD
/// history is one table, which cannot hold two parents' data: `dev` never reconciles it (nothing
/// is refused: the query is the same) and serves `prod`'s history while its own seed still says
/// `E`. Not silently: `plan dev`, with nothing to do, says "not refreshed here" (it said only "no
/// changes"), the run warns, and `status dev` lists it (healthy, as a time-range model left to
/// `prod`); once `dev` serves `prod`'s version, none of them does.
fn a_history_prods_forward_only_change_keeps_below_a_changed_seed_is_said_to_be_prods_in_dev(engine: EngineBackend) {
    let mut p = Project::on_engine(engine);
    p.write("models/m.lua", ZONES);
    set_regions(&p, "E");
    p.now = T1.into();
    p.apply("prod");
    p.apply("dev");
    set_regions(&p, "X");
    p.now = T2.into();
    p.run(&["apply", "prod", "--yes", "--forward-only", "s.zones"]).expect_code(0);
    p.now = T3.into();
    p.run(&["run", "prod"]).expect_code(0);
    let prods = vec![
        vec![Some("east".to_string()), Some("E".to_string()), Some("closed".to_string())],
        vec![Some("east".to_string()), Some("X".to_string()), Some("open".to_string())],
        vec![Some("north".to_string()), Some("N".to_string()), Some("open".to_string())],
    ];
    assert_eq!(zones(&p, "prod"), prods);

    // `dev`'s project: its seed as `dev` serves it.
    set_regions(&p, "E");
    p.now = T4.into();
    let plan = p.plan("dev");
    assert_eq!(plan["hasChanges"], false, "{plan:#}");
    let also = plan["alsoWrites"].as_array().cloned().unwrap_or_default();
    let note = also.iter().find(|a| a["model"] == "s.zones").and_then(|a| a["note"].as_str()).unwrap_or_default().to_string();
    assert!(
        note.starts_with("not refreshed here: its table is also what `prod` serves (another version, over other parent tables)")
            && note.contains("refreshed from `prod`'s parents"),
        "the plan says whose history `dev` serves: {plan:#}"
    );
    let text = p.run(&["plan", "dev"]).expect_code(0).stdout.clone();
    assert!(text.contains("not refreshed here") && text.contains("no changes"), "{text}");
    let ran = p.run(&["run", "dev"]);
    ran.expect_code(0);
    assert!(ran.stderr.contains("not refreshed here") && ran.stderr.contains("s.zones"), "{}", ran.stderr);
    assert_eq!(zones(&p, "dev"), prods, "`dev` serves the history `prod` reconciled from its own seed");

    let status = p.run(&["status", "dev", "--json", "--check"]).expect_code(0).json();
    let listed = status["notRefreshedHere"].as_array().cloned().unwrap_or_default();
    assert_eq!(listed.len(), 1, "{status:#}");
    assert_eq!(
        (listed[0]["model"].as_str(), listed[0]["kind"].as_str(), listed[0]["leftTo"].as_str()),
        (Some("s.zones"), Some("scd_type2"), Some("prod")),
        "{status:#}"
    );
    assert!(listed[0]["rowsUpTo"].as_str().is_some_and(|t| t.starts_with("2026-02-12T00:00:00")), "prod's run at T3: {status:#}");
    assert_eq!(status["healthy"], true, "{status:#}");
    let text = p.run(&["status", "dev"]).expect_code(0).stdout.clone();
    assert!(text.contains("s.zones  not refreshed here") && text.contains("`dev` serves `prod`'s history"), "{text}");
    assert_eq!(p.run(&["status", "prod", "--json"]).expect_code(0).json()["notRefreshedHere"], serde_json::json!([]));

    // `dev` applied from the project `prod` serves: one version, nothing left to `prod`.
    set_regions(&p, "X");
    p.apply("dev");
    let plan = p.plan("dev");
    assert!(plan["alsoWrites"].as_array().is_none_or(|a| a.iter().all(|w| w["model"] != "s.zones")), "{plan:#}");
    assert_eq!(p.run(&["status", "dev", "--json"]).expect_code(0).json()["notRefreshedHere"], serde_json::json!([]));
}
