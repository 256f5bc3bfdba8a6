//! External sources end to end: globs read with `union_by_name`, hive-partitioned parquet
//! directories, CSV reader options, a glob that matches nothing (a contract error naming the model
//! and the pattern), and declaration changes (path, options, schema) that re-version every
//! consumer while externals themselves are never built.
//! Every test here reads files (or URLs) through DuckDB's readers, so they run on DuckDB only:
//! the Postgres engine refuses externals read from files at plan time (`tests/it/engines.rs`).

use crate::common::{Project, action, query_in_memory};

fn s(v: &str) -> Option<String> {
    Some(v.to_string())
}

/// Writes a parquet file at `rel` in the project from a DuckDB query.
fn parquet(p: &Project, rel: &str, select: &str) {
    let path = p.root().join(rel);
    fs_err::create_dir_all(path.parent().unwrap()).unwrap();
    query_in_memory(&format!("COPY ({select}) TO '{}' (FORMAT parquet)", path.display()));
}

/// `raw.parts` over `options` with `schema`, and `m.sum` (full) reading every declared column.
fn write_models(p: &Project, options: &str, schema: &str, consumer: &str) {
    p.write(
        "models/raw.lua",
        &format!("return {{ parts = define_model {{ name = \"raw.parts\", kind = kind.external {{ {options} }}, schema = {schema} }} }}\n"),
    );
    p.write(
        "models/sum.lua",
        &format!("define_model {{ name = \"m.sum\", kind = kind.full(), schema = {{ {{ \"k\", \"varchar\" }}, {{ \"n\", \"bigint\" }} }},\n  query = [[{consumer}]] }}\n"),
    );
}

#[test]
fn a_glob_of_csv_files_with_different_columns_reads_by_name() {
    let p = Project::new();
    p.write("data/parts/2024.csv", "id,region\n1,north\n2,south\n");
    p.write("data/parts/2025.csv", "id,amount\n3,30\n4,40\n");
    write_models(
        &p,
        r#"path = "data/parts/*.csv", union_by_name = true"#,
        r#"{ { "id", "bigint" }, { "region", "varchar" }, { "amount", "bigint" } }"#,
        "SELECT coalesce(region, 'none') AS k, CAST(count(*) + coalesce(sum(amount), 0) AS BIGINT) AS n FROM ]] .. ref(\"raw.parts\") .. [[ GROUP BY ALL",
    );
    let applied = p.apply("dev");
    assert_eq!(applied["built"], serde_json::json!(["m.sum"]), "externals are never built");
    assert_eq!(p.rows("\"dev__m\".\"sum\""), vec![vec![s("none"), s("72")], vec![s("north"), s("1")], vec![s("south"), s("1")]]);
    assert!(!p.all_relations().iter().any(|r| r.ends_with(".parts")), "an external has no view: {:?}", p.all_relations());

    // Without `union_by_name` the files are unioned by position: `amount` would not exist.
    write_models(
        &p,
        r#"path = "data/parts/*.csv""#,
        r#"{ { "id", "bigint" }, { "region", "varchar" }, { "amount", "bigint" } }"#,
        "SELECT coalesce(region, 'none') AS k, CAST(count(*) + coalesce(sum(amount), 0) AS BIGINT) AS n FROM ]] .. ref(\"raw.parts\") .. [[ GROUP BY ALL",
    );
    let run = p.run(&["apply", "dev", "--yes"]);
    run.expect_code(1);
    let line = run.stderr.lines().find(|l| l.contains("model `raw.parts`")).unwrap_or_else(|| panic!("{}", run.stderr));
    assert!(line.contains("cannot read the source") && line.contains("amount"), "{line}");
}

#[test]
fn hive_partitioned_parquet_directories_become_columns() {
    let p = Project::new();
    parquet(&p, "lake/year=2024/part-0.parquet", "SELECT 'a' AS k, 1 AS v UNION ALL SELECT 'b', 2");
    parquet(&p, "lake/year=2025/part-0.parquet", "SELECT 'a' AS k, 10 AS v");
    write_models(
        &p,
        r#"path = "lake/*/*.parquet", hive_partitioning = true"#,
        r#"{ { "k", "varchar" }, { "v", "integer" }, { "year", "bigint" } }"#,
        "SELECT k || '/' || year AS k, CAST(sum(v) AS BIGINT) AS n FROM ]] .. ref(\"raw.parts\") .. [[ GROUP BY ALL",
    );
    p.apply("dev");
    assert_eq!(p.rows("\"dev__m\".\"sum\""), vec![vec![s("a/2024"), s("1")], vec![s("a/2025"), s("10")], vec![s("b/2024"), s("2")]]);

    // Without hive partitioning there is no `year` column: the contract says so, naming it.
    write_models(
        &p,
        r#"path = "lake/*/*.parquet", hive_partitioning = false"#,
        r#"{ { "k", "varchar" }, { "v", "integer" }, { "year", "bigint" } }"#,
        "SELECT k || '/' || year AS k, CAST(sum(v) AS BIGINT) AS n FROM ]] .. ref(\"raw.parts\") .. [[ GROUP BY ALL",
    );
    let run = p.run(&["apply", "dev", "--yes"]);
    run.expect_code(1);
    assert!(run.stderr.contains("declared column `year` is not in the source"), "{}", run.stderr);
}

/// Without a declared delimiter a CSV external is read with `,` (a tab for `.tsv`), never the
/// sniffer's guess: a field holding `;` stays whole, a `.tsv` whose values hold `, ` reads by
/// its tabs; and no line but the header is skipped: a file whose first record is short is an
/// error naming the model, never a record dropped as a preamble.
#[test]
fn csv_externals_are_read_with_the_default_delimiter_and_skip_no_record() {
    let p = Project::new();
    p.write("data/names.csv", "Smith; John\nDoe; Jane\nRoe; Rick\n");
    write_models(&p, r#"path = "data/names.csv", header = false"#, r#"{ { "k", "varchar" } }"#, "SELECT k, 1 AS n FROM ]] .. ref(\"raw.parts\") .. [[");
    p.apply("dev");
    assert_eq!(p.rows("\"dev__m\".\"sum\" ORDER BY k"), vec![vec![s("Doe; Jane"), s("1")], vec![s("Roe; Rick"), s("1")], vec![s("Smith; John"), s("1")]]);
    p.write("data/cities.tsv", "k\tn\nParis, FR\t1\nRome, IT\t2\n");
    write_models(&p, r#"path = "data/cities.tsv""#, r#"{ { "k", "varchar" }, { "n", "bigint" } }"#, "SELECT k, n FROM ]] .. ref(\"raw.parts\") .. [[");
    p.apply("dev");
    assert_eq!(p.rows("\"dev__m\".\"sum\" ORDER BY k"), vec![vec![s("Paris, FR"), s("1")], vec![s("Rome, IT"), s("2")]]);
    p.write("data/short.csv", "1,A\n2,B,7\n3,C,8\n");
    write_models(
        &p,
        r#"path = "data/short.csv", header = false"#,
        r#"{ { "id", "bigint" }, { "k", "varchar" }, { "v", "bigint" } }"#,
        "SELECT k, v AS n FROM ]] .. ref(\"raw.parts\") .. [[",
    );
    let r = p.run(&["apply", "dev", "--yes"]);
    r.expect_code(1);
    assert!(r.stderr.contains("m.sum") || r.stderr.contains("raw.parts"), "{}", r.stderr);
}

/// A CSV external whose file lacks columns its schema declares is refused by the contract in
/// efmesh's words, never the reader's (`Binder Error: COLUMN_TYPES error: …`): the external's
/// file:line, the CSV file, the missing columns and those the header names, with no hint about
/// the delimiter when the header was split into several columns; a file separated by `;` (read
/// with `,`: one column named like the whole header) keeps that hint.
#[test]
fn a_csv_external_lacking_declared_columns_names_the_file_and_its_columns() {
    let p = Project::new();
    p.write("data/e.csv", "k,w\n1,10\n");
    let schema = r#"{ { "k", "varchar" }, { "v", "bigint" }, { "x", "bigint" } }"#;
    write_models(&p, r#"path = "data/e.csv""#, schema, "SELECT k, v AS n FROM ]] .. ref(\"raw.parts\") .. [[");
    let r = p.run(&["apply", "dev", "--yes"]);
    r.expect_code(1);
    let line = r.stderr.lines().find(|l| l.contains("model `raw.parts`")).unwrap_or_else(|| panic!("{}", r.stderr));
    assert!(
        line.contains(
            "models/raw.lua:1: model `raw.parts`: cannot read the source: the CSV file `data/e.csv` has no columns `v`, `x`, which the schema declares (its header names `k`, `w`)"
        ),
        "{line}"
    );
    assert!(!r.stderr.contains("COLUMN_TYPES") && !r.stderr.contains("Binder Error"), "the reader's words: {}", r.stderr);
    assert!(!r.stderr.contains("declare `delimiter`"), "the header was split into columns: the delimiter is right: {}", r.stderr);
    assert!(r.stderr.contains("hint: declare the columns as the file's header names them"), "{}", r.stderr);

    p.write("data/e.csv", "k;v;x\n1;2;3\n");
    let r = p.run(&["apply", "dev", "--yes"]);
    r.expect_code(1);
    assert!(r.stderr.contains("has no columns `k`, `v`, `x`, which the schema declares (its header names `k;v;x`)"), "{}", r.stderr);
    assert!(r.stderr.contains("declare `delimiter`"), "{}", r.stderr);
}

/// The quote is RFC 4180's whatever the first rows hold: a file quoting nothing in the rows
/// DuckDB samples (20 480) and quoting fields after them is read with `"` as the quote, so
/// `"q"` is `q` and a quoted empty field is NULL (it was read with no quote at all: the quotes
/// served as part of the values).
#[test]
fn a_csv_external_quoting_only_late_rows_is_read_with_the_rfc_quote() {
    let p = Project::new();
    let mut csv = String::from("k,n\n");
    for i in 0..30_000 {
        csv.push_str(&format!("r{i},{i}\n"));
    }
    csv.push_str("\"q, with a comma\",30000\n\"\",30001\n\"say \"\"hi\"\"\",30002\n");
    p.write("data/late.csv", &csv);
    write_models(&p, r#"path = "data/late.csv""#, r#"{ { "k", "varchar" }, { "n", "bigint" } }"#, "SELECT k, n FROM ]] .. ref(\"raw.parts\") .. [[");
    p.apply("dev");
    assert_eq!(
        p.rows("\"dev__m\".\"sum\" WHERE n >= 30000 ORDER BY n"),
        vec![vec![None, s("30001")], vec![s("q, with a comma"), s("30000")], vec![s("say \"hi\""), s("30002")]],
        "(rows sorted: NULL first)"
    );
}

/// A value of a CSV external that its declared type refuses fails the build of the model reading
/// it, and the error names the external (its definition, the data file, the CSV record and the
/// value) with a hint in efmesh's terms: the kind's `null_markers` for a spelling of NULL, the
/// declared type for another value; never DuckDB's `nullstr` nor its dump of reader settings.
/// The failing statement comes before the hint, which ends the error in text and is the `hint`
/// of `--json` (the statement staying in its `message`). The hinted option is the fix.
#[test]
fn a_csv_value_the_declared_type_refuses_names_the_external_its_file_line_and_a_hint() {
    let p = Project::new();
    p.write("data/parts.csv", "k,n\na,1\nb,NA\n");
    let schema = r#"{ { "k", "varchar" }, { "n", "bigint" } }"#;
    let consumer = "SELECT k, n FROM ]] .. ref(\"raw.parts\") .. [[";
    write_models(&p, r#"path = "data/parts.csv""#, schema, consumer);
    let run = p.run(&["apply", "dev", "--yes"]);
    run.expect_code(1);
    let err = &run.stderr;
    assert!(err.contains("models/sum.lua:1: building model `m.sum`: engine error: Conversion Error: CSV Error on Line: 3: "), "{err}");
    assert!(err.contains("Could not convert string \"NA\""), "DuckDB's conversion message stays: {err}");
    assert!(err.contains("\n  in the file of external `raw.parts` (models/raw.lua:1): ") && err.contains("data/parts.csv, CSV record 3: b,NA\n"), "{err}");
    assert!(
        err.contains("\n  hint: `NA` spells NULL in this file: declare it in the kind of `raw.parts` (models/raw.lua:1), `null_markers = { \"NA\" }`"),
        "{err}"
    );
    for dump in ["nullstr", "sample_size", "Set By User"] {
        assert!(!err.contains(dump), "DuckDB's reader options are not printed ({dump}): {err}");
    }
    let hint_at = err.find("\n  hint: ").unwrap_or_else(|| panic!("no hint: {err}"));
    assert!(err.find("\n  while running: ").is_some_and(|at| at < hint_at), "the statement comes before the hint: {err}");
    let v = p.run(&["apply", "dev", "--yes", "--json"]).expect_code(1).json();
    let (message, hint) = (v["error"]["message"].as_str().unwrap_or_default(), v["error"]["hint"].as_str().unwrap_or_default());
    assert!(hint.starts_with("`NA` spells NULL in this file") && !hint.contains("while running"), "the hint is the null_markers one, alone: {v:#}");
    assert!(message.contains("CSV record 3: b,NA") && message.contains("\n  while running: ") && !message.contains("hint:"), "{v:#}");
    // The hint is the fix.
    write_models(&p, r#"path = "data/parts.csv", null_markers = { "NA" }"#, schema, consumer);
    p.apply("dev");
    assert_eq!(p.rows("\"dev__m\".\"sum\" ORDER BY k"), vec![vec![s("a"), s("1")], vec![s("b"), None]]);

    // Another value, in a file of a glob: the file is named, and the hint is the declared type.
    p.write("data/more/2024.csv", "k,n\nc,3\n");
    p.write("data/more/2025.csv", "k,n\nd,4\ne,x y\n");
    write_models(&p, r#"path = "data/more/*.csv""#, schema, consumer);
    let run = p.run(&["apply", "dev", "--yes"]);
    run.expect_code(1);
    let err = &run.stderr;
    assert!(err.contains("\n  in the file of external `raw.parts` (models/raw.lua:1): ") && err.contains("data/more/2025.csv, CSV record 3: e,x y\n"), "{err}");
    assert!(err.contains("\n  hint: column `n` of `raw.parts` (models/raw.lua:1) is declared `bigint`, which `x y` is not"), "{err}");
}

/// DuckDB 1.5.5's CSV reader reads a value it cannot convert to a zoned time (`timestamptz`,
/// `timetz`) as NULL where every other type fails (duckdb/duckdb#24820): such a column is read as
/// text and cast for the consumers, so `NA` or `1` fails the build naming the external, its file,
/// the column and the value, and the valid values (with and without an offset) read as before.
#[test]
fn a_csv_value_that_is_no_zoned_time_fails_the_build_instead_of_reading_as_null() {
    let p = Project::new();
    p.write("data/parts.csv", "k,t,w\na,2026-01-01 00:00:00+02,12:00:00+02\nb,2026-01-01 08:30:00,\nc,NA,13:00:00\n");
    let schema = r#"{ { "k", "varchar" }, { "t", "timestamptz" }, { "w", "time with time zone" } }"#;
    let consumer = "SELECT k, count(t) AS n FROM ]] .. ref(\"raw.parts\") .. [[ GROUP BY k";
    write_models(&p, r#"path = "data/parts.csv""#, schema, consumer);
    let run = p.run(&["apply", "dev", "--yes"]);
    run.expect_code(1);
    let err = &run.stderr;
    assert!(err.contains("models/sum.lua:1: building model `m.sum`"), "{err}");
    assert!(
        err.contains("external `raw.parts` (models/raw.lua:1) reading data/parts.csv: column `t` holds `NA`, which is no `timestamptz`"),
        "the value is refused, not read as NULL: {err}"
    );
    assert!(err.contains("`null_markers`"), "{err}");
    assert!(!err.contains("`null_markers`) (in "), "a single file is named by its path as written: {err}");
    // Declared a marker, it is NULL; the other values are the instants they spell.
    write_models(&p, r#"path = "data/parts.csv", null_markers = { "NA" }"#, schema, consumer);
    p.apply("dev");
    assert_eq!(p.rows("\"dev__m\".\"sum\" ORDER BY k"), vec![vec![s("a"), s("1")], vec![s("b"), s("1")], vec![s("c"), s("0")]]);
    let consumer = "SELECT k, epoch(t)::bigint AS n FROM ]] .. ref(\"raw.parts\") .. [[ WHERE t IS NOT NULL";
    write_models(&p, r#"path = "data/parts.csv", null_markers = { "NA" }"#, schema, consumer);
    p.apply("dev");
    assert_eq!(p.rows("\"dev__m\".\"sum\" ORDER BY k"), vec![vec![s("a"), s("1767218400")], vec![s("b"), s("1767256200")]]);
    // A time with a time zone that is none is refused the same way.
    p.write("data/parts.csv", "k,t,w\na,2026-01-01 00:00:00+02,1\n");
    let consumer = "SELECT k, count(w) AS n FROM ]] .. ref(\"raw.parts\") .. [[ GROUP BY k";
    write_models(&p, r#"path = "data/parts.csv", null_markers = { "NA" }"#, schema, consumer);
    let run = p.run(&["apply", "dev", "--yes"]);
    run.expect_code(1);
    assert!(run.stderr.contains("column `w` holds `1`, which is no `time with time zone`"), "{}", run.stderr);
}

/// The message of a zoned-time guard reading a CSV glob ends naming the matched file holding the
/// value (the pattern alone would leave the reader to search every file), and the relation the
/// consumers read keeps only the declared columns (the file is read as an extra one).
#[test]
fn a_csv_value_that_is_no_zoned_time_in_a_glob_names_the_file_holding_it() {
    let p = Project::new();
    p.write("data/two/a.csv", "k,t\na,2026-01-01 00:00:00+02\n");
    p.write("data/two/b.csv", "k,t\nb,2026-01-02 00:00:00Z\nc,NA\n");
    let schema = r#"{ { "k", "varchar" }, { "t", "timestamptz" } }"#;
    // `UNION ALL` with two columns: the relation of `raw.parts` has no third one.
    let consumer = "SELECT k, count(t) AS n FROM (SELECT * FROM ]] .. ref(\"raw.parts\") .. [[ UNION ALL SELECT 'z', NULL) GROUP BY k";
    write_models(&p, r#"path = "data/two/*.csv""#, schema, consumer);
    let run = p.run(&["apply", "dev", "--yes"]);
    run.expect_code(1);
    let err = &run.stderr;
    let head = "external `raw.parts` (models/raw.lua:1) reading data/two/*.csv: column `t` holds `NA`, which is no `timestamptz` \
                (a value meaning no value belongs in the model's `null_markers`) (in ";
    let file = err.split(head).nth(1).and_then(|rest| rest.split(')').next()).unwrap_or_default();
    assert!(file.ends_with("/data/two/b.csv"), "the second file, which holds `NA`, is named: {err}");
    // Declared a marker, the rows read as before.
    write_models(&p, r#"path = "data/two/*.csv", null_markers = { "NA" }"#, schema, consumer);
    p.apply("dev");
    assert_eq!(p.rows("\"dev__m\".\"sum\" ORDER BY k"), vec![vec![s("a"), s("1")], vec![s("b"), s("1")], vec![s("c"), s("0")], vec![s("z"), s("0")]]);
}

/// A CSV glob read with `union_by_name` takes no declared types: its zoned time column is
/// sniffed, never as a zoned time (DuckDB's sniffer would pick `TIMESTAMPTZ` from the first rows
/// and its reader turn a later `NA` into NULL), and cast with the same failing guard.
#[test]
fn a_zoned_time_of_a_union_by_name_glob_past_the_sniffed_rows_is_refused_not_read_as_null() {
    let p = Project::new();
    let mut rows = String::from("k,t\n");
    for i in 0..21_000 {
        rows.push_str(&format!("{i},2026-01-01 00:00:00+02\n"));
    }
    rows.push_str("x,NA\n");
    p.write("data/g/a.csv", &rows);
    p.write("data/g/b.csv", "t,k\n2026-01-02 00:00:00Z,y\n");
    let schema = r#"{ { "k", "varchar" }, { "t", "timestamptz" } }"#;
    let consumer = "SELECT k, count(t) AS n FROM ]] .. ref(\"raw.parts\") .. [[ GROUP BY k";
    write_models(&p, r#"path = "data/g/*.csv", union_by_name = true"#, schema, consumer);
    let run = p.run(&["apply", "dev", "--yes"]);
    run.expect_code(1);
    assert!(run.stderr.contains("column `t` holds `NA`, which is no `timestamptz`"), "{}", run.stderr);
    assert!(run.stderr.contains("/data/g/a.csv)"), "the file holding `NA` is named: {}", run.stderr);
    write_models(&p, r#"path = "data/g/*.csv", union_by_name = true, null_markers = { "NA" }"#, schema, consumer);
    p.apply("dev");
    assert_eq!(p.rows("\"dev__m\".\"sum\" WHERE k IN ('0', 'x', 'y') ORDER BY k"), vec![vec![s("0"), s("1")], vec![s("x"), s("0")], vec![s("y"), s("1")]]);
}

/// Writes `models/raw.lua` with the CSV externals `raw.a` (line 1) and `raw.b` (line 2) reading
/// `data/f.csv` with the kind options and types given, and `m.both` reading both.
fn write_two_readers(p: &Project, a: (&str, &str), b: (&str, &str)) {
    let external = |name: &str, (options, ty): (&str, &str)| {
        format!(
            "define_model {{ name = \"{name}\", kind = kind.external {{ path = \"data/f.csv\"{options} }}, schema = {{ {{ \"k\", \"varchar\" }}, {{ \"n\", \"{ty}\" }} }} }}\n"
        )
    };
    p.write("models/raw.lua", &format!("{}{}", external("raw.a", a), external("raw.b", b)));
    p.write(
        "models/both.lua",
        "define_model { name = \"m.both\", kind = kind.full(), schema = { { \"k\", \"varchar\" }, { \"n\", \"varchar\" } },\n  \
         query = [[SELECT a.k, CAST(a.n AS VARCHAR) || CAST(b.n AS VARCHAR) AS n FROM ]] .. ref(\"raw.a\") .. [[ AS a JOIN ]] .. ref(\"raw.b\") .. [[ AS b USING (k)]] }\n",
    );
}

/// The lines of an error that name the externals blamed and the hint.
fn blamed(stderr: &str) -> String {
    stderr.lines().filter(|l| l.starts_with("  in the file of ") || l.starts_with("  hint: ")).collect::<Vec<_>>().join("\n")
}

/// Of several CSV externals reading the failing file, the error blames only those that could
/// have failed so: the one declaring the column with the type the reader converted to, not one
/// reading the column as text nor one whose `null_markers` already hold the value; each blamed
/// external's `null_markers` hint starts from its own markers.
#[test]
fn a_csv_value_error_blames_only_the_externals_that_could_have_failed_so() {
    let p = Project::new();
    p.write("data/f.csv", "k,n\na,1\nb,x\n");
    write_two_readers(&p, ("", "varchar"), ("", "bigint"));
    let run = p.run(&["apply", "dev", "--yes"]);
    run.expect_code(1);
    let err = &run.stderr;
    assert!(err.contains("\n  in the file of external `raw.b` (models/raw.lua:2): ") && !blamed(err).contains("raw.a"), "raw.a reads `n` as text: {err}");
    assert!(err.contains("\n  hint: column `n` of `raw.b` (models/raw.lua:2) is declared `bigint`, which `x` is not"), "{err}");

    // `raw.a` already reads NA as NULL: only `raw.b` is told to.
    p.write("data/f.csv", "k,n\na,1\nb,NA\n");
    write_two_readers(&p, (", null_markers = { \"NA\" }", "bigint"), ("", "bigint"));
    let run = p.run(&["apply", "dev", "--yes"]);
    run.expect_code(1);
    let err = &run.stderr;
    assert!(err.contains("\n  in the file of external `raw.b` (models/raw.lua:2): ") && !blamed(err).contains("raw.a"), "{err}");
    assert!(err.contains("declare it in the kind of `raw.b` (models/raw.lua:2), `null_markers = { \"NA\" }`, so its column `n`"), "{err}");

    // Both could have: each one's option keeps its own markers.
    write_two_readers(&p, (", null_markers = { \"-\" }", "bigint"), ("", "bigint"));
    let run = p.run(&["apply", "dev", "--yes"]);
    run.expect_code(1);
    let err = &run.stderr;
    assert!(err.contains("\n  in the file of externals ") && err.contains("`raw.a` (models/raw.lua:1)"), "{err}");
    assert!(err.contains("`raw.a` (models/raw.lua:1), `null_markers = { \"-\", \"NA\" }`"), "raw.a keeps its `-`: {err}");
    assert!(err.contains("`raw.b` (models/raw.lua:2), `null_markers = { \"NA\" }`") && err.contains("so their column `n` reads it as NULL"), "{err}");
}

/// A model's own `read_csv` failing on a file an external also reads (already reading the value
/// as NULL) is not blamed on the external: the engine's message stays as it is.
#[test]
fn a_models_own_read_csv_failing_is_not_blamed_on_an_external() {
    let p = Project::new();
    p.write("data/parts.csv", "k,n\na,1\nb,NA\n");
    let file = p.root().join("data/parts.csv");
    let consumer = format!(
        "SELECT a.k, b.n FROM ]] .. ref(\"raw.parts\") .. [[ AS a JOIN read_csv('{}', header = true, types = {{'n': 'bigint'}}) AS b USING (k)",
        file.display()
    );
    write_models(&p, r#"path = "data/parts.csv", null_markers = { "NA" }"#, r#"{ { "k", "varchar" }, { "n", "bigint" } }"#, &consumer);
    let run = p.run(&["apply", "dev", "--yes"]);
    run.expect_code(1);
    let err = &run.stderr;
    assert!(err.contains("CSV Error on Line: 3"), "the engine's error: {err}");
    assert!(!err.contains("in the file of external") && !err.contains("spells NULL") && !err.contains("null_markers ="), "raw.parts reads NA as NULL: {err}");
}

/// DuckDB numbers CSV records, not lines: after a quoted field spanning three lines, the failing
/// record 3 is the file's line 5, and the error and its hint say "CSV record 3", never "line 3".
#[test]
fn a_csv_error_names_the_record_not_a_line_of_the_file() {
    let p = Project::new();
    p.write("data/parts.csv", "k,n,s\na,1,\"x\ny\nz\"\nb,q,w\n");
    let consumer = "SELECT k, n FROM ]] .. ref(\"raw.parts\") .. [[";
    write_models(&p, r#"path = "data/parts.csv""#, r#"{ { "k", "varchar" }, { "n", "bigint" }, { "s", "varchar" } }"#, consumer);
    let run = p.run(&["apply", "dev", "--yes"]);
    run.expect_code(1);
    let err = &run.stderr;
    assert!(err.contains("data/parts.csv, CSV record 3: b,q,w"), "{err}");
    assert!(err.contains("or correct CSV record 3 of the file") && !err.contains(", line 3") && !err.contains("correct line"), "{err}");
}

#[test]
fn csv_options_delimiter_and_headerless_files() {
    let p = Project::new();
    p.write("data/x.txt", "a|1\nb|2\nc|NA\n");
    write_models(
        &p,
        r#"path = "data/x.txt", format = "csv", delimiter = "|", header = false, null_markers = { "NA" }"#,
        r#"{ { "k", "varchar" }, { "v", "bigint" } }"#,
        "SELECT k, coalesce(v, -1) AS n FROM ]] .. ref(\"raw.parts\") .. [[",
    );
    p.apply("dev");
    assert_eq!(p.rows("\"dev__m\".\"sum\""), vec![vec![s("a"), s("1")], vec![s("b"), s("2")], vec![s("c"), s("-1")]]);
    let run = p.run(&["check"]);
    run.expect_code(0);
    // CSV options are refused on other formats.
    write_models(&p, r#"path = "lake/x.parquet", delimiter = ";""#, r#"{ { "k", "varchar" } }"#, "SELECT k, 1 AS n FROM ]] .. ref(\"raw.parts\") .. [[");
    let run = p.run(&["check"]);
    run.expect_code(1);
    assert!(format!("{}{}", run.stdout, run.stderr).contains("`delimiter` applies to CSV files only"), "{run:?}");
}

#[test]
fn a_glob_that_matches_nothing_names_the_model_and_the_pattern_and_builds_nothing() {
    let p = Project::new();
    p.write("data/parts/a.csv", "id\n1\n");
    write_models(&p, r#"path = "data/partz/*.csv""#, r#"{ { "id", "bigint" } }"#, "SELECT 'x' AS k, count(*) AS n FROM ]] .. ref(\"raw.parts\") .. [[");
    p.write("models/fine.lua", "define_model { name = \"z.fine\", kind = kind.full(), schema = { { \"x\", \"integer\" } }, query = \"SELECT 1 AS x\" }\n");
    // Planning reads no data: the plan is computed.
    assert_eq!(action(&p.plan("dev"), "raw.parts")["change"], "added");
    let run = p.run(&["apply", "dev", "--yes"]);
    run.expect_code(1);
    assert!(run.stderr.contains("models/raw.lua:1: model `raw.parts`: no file matches the pattern `data/partz/*.csv`"), "{}", run.stderr);
    assert!(p.physical_tables().is_empty(), "{:?}", p.physical_tables());
    assert!(p.state_summary().envs.is_empty());
    // `check` warned of it beforehand, in the same words (`missing_source_file`, tests/it/lints.rs).
    let said = run.stderr.lines().find(|l| l.contains("no file matches the pattern")).unwrap().trim_start().to_string();
    let check = p.run(&["check"]);
    check.expect_code(0);
    assert!(check.stdout.contains(&format!("warning[missing_source_file]: {said}\n")), "{said}\n{}", check.stdout);

    // A single missing file is named as such.
    write_models(&p, r#"path = "data/parts/b.csv""#, r#"{ { "id", "bigint" } }"#, "SELECT 'x' AS k, count(*) AS n FROM ]] .. ref(\"raw.parts\") .. [[");
    let run = p.run(&["apply", "dev", "--yes"]);
    run.expect_code(1);
    assert!(run.stderr.contains("file `data/parts/b.csv` does not exist"), "{}", run.stderr);
}

#[test]
fn changing_an_externals_declaration_re_versions_its_consumers() {
    let p = Project::new();
    p.write("data/parts/a.csv", "id,region\n1,north\n");
    p.write("data/parts/b.csv", "id,region\n2,south\n");
    p.write("data/other.csv", "id,region\n3,east\n");
    let consumer = "SELECT region AS k, count(*) AS n FROM ]] .. ref(\"raw.parts\") .. [[ GROUP BY ALL";
    let base_schema = r#"{ { "id", "bigint" }, { "region", "varchar" } }"#;
    write_models(&p, r#"path = "data/parts/*.csv""#, base_schema, consumer);
    let first = p.apply("dev");
    let (ext0, sum0) = (action(&first, "raw.parts")["fingerprint"].clone(), action(&first, "m.sum")["fingerprint"].clone());

    let declarations = [
        ("path", r#"path = "data/other.csv""#, base_schema),
        ("an option", r#"path = "data/parts/*.csv", union_by_name = true"#, base_schema),
        ("a CSV option", r#"path = "data/parts/*.csv", delimiter = ",""#, base_schema),
        ("the schema", r#"path = "data/parts/*.csv""#, r#"{ { "id", "integer" }, { "region", "varchar" } }"#),
    ];
    for (what, options, schema) in declarations {
        write_models(&p, options, schema, consumer);
        let plan = p.plan("dev");
        let (ext, sum) = (action(&plan, "raw.parts"), action(&plan, "m.sum"));
        assert_ne!(ext["fingerprint"], ext0, "{what}: the external's version");
        assert_eq!(ext["change"], "breaking", "{what}: {plan:#}");
        assert_eq!(ext["build"], false, "{what}: an external is never built");
        assert_ne!(sum["fingerprint"], sum0, "{what}: the consumer's version");
        assert_eq!((sum["change"].as_str(), sum["build"].as_bool()), (Some("indirect"), Some(true)), "{what}: {plan:#}");
    }
    // Applying the path change rebuilds the consumer over the new file.
    write_models(&p, r#"path = "data/other.csv""#, base_schema, consumer);
    let applied = p.apply("dev");
    assert_eq!(applied["built"], serde_json::json!(["m.sum"]));
    assert_eq!(p.rows("\"dev__m\".\"sum\""), vec![vec![s("east"), s("1")]]);
    // Back to the first declaration: the first versions again, nothing to build.
    write_models(&p, r#"path = "data/parts/*.csv""#, base_schema, consumer);
    let plan = p.plan("dev");
    assert_eq!(action(&plan, "m.sum")["fingerprint"], sum0);
    assert_eq!(action(&plan, "m.sum")["build"], false);
}

/// A `python3 -m http.server` bound to 127.0.0.1 on a free port, serving `dir`; killed on drop.
struct HttpServer {
    child: std::process::Child,
    port: u16,
}

impl HttpServer {
    fn serve(dir: &std::path::Path) -> HttpServer {
        use std::io::BufRead;
        let mut child = std::process::Command::new("python3")
            .args(["-u", "-m", "http.server", "0", "--bind", "127.0.0.1", "--directory"])
            .arg(dir)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("python3 -m http.server");
        // "Serving HTTP on 127.0.0.1 port 40123 (http://127.0.0.1:40123/) ...", printed once listening.
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line).expect("server banner");
        let port = line.split(" port ").nth(1).and_then(|r| r.split_whitespace().next()).and_then(|p| p.parse().ok());
        let Some(port) = port else {
            let _ = child.kill();
            panic!("unexpected http.server banner: {line:?}");
        };
        HttpServer { child, port }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The provisioned offline extension directory holding `httpfs`, or `None` (with a message)
/// when the suite runs without one (`scripts/test` and CI always provision it).
fn httpfs_directory() -> Option<std::path::PathBuf> {
    let dir = std::env::var_os("EFMESH_EXTENSION_DIRECTORY").map(std::path::PathBuf::from);
    match dir {
        Some(d) if d.join("v1.5.5/linux_amd64/httpfs.duckdb_extension").is_file() => Some(d),
        _ => {
            eprintln!("SKIPPED: no httpfs in EFMESH_EXTENSION_DIRECTORY; run the suite with scripts/test (it runs scripts/provision-extensions)");
            None
        }
    }
}

#[test]
fn http_urls_are_read_through_httpfs_from_the_offline_extension_directory() {
    let Some(ext) = httpfs_directory() else { return };
    let served = tempfile::tempdir().unwrap();
    query_in_memory(&format!(
        "COPY (SELECT range AS id, 'r' || (range % 2) AS region FROM range(5)) TO '{}' (FORMAT parquet)",
        served.path().join("events.parquet").display()
    ));
    fs_err::write(served.path().join("regions.csv"), "region,label\nr0,even\nr1,odd\n").unwrap();
    let server = HttpServer::serve(served.path());
    let base = format!("http://127.0.0.1:{}", server.port);

    let p = Project::new();
    p.write(
        "efmesh.toml",
        &format!("[project]\nmodels = [\"models/**/*.lua\"]\n\n[engine]\npath = \"efmesh.duckdb\"\nextension_directory = {:?}\n", ext.to_string_lossy()),
    );
    p.write(
        "models/raw.lua",
        &format!(
            r#"define_model {{ name = "raw.events", kind = kind.external {{ path = "{base}/events.parquet" }}, schema = {{ {{ "id", "bigint" }}, {{ "region", "varchar" }} }} }}
define_model {{ name = "raw.regions", kind = kind.external {{ path = "{base}/regions.csv" }}, schema = {{ {{ "region", "varchar" }}, {{ "label", "varchar" }} }} }}
define_model {{ name = "m.sum", kind = kind.full(), schema = {{ {{ "k", "varchar" }}, {{ "n", "bigint" }} }},
  query = "SELECT r.label AS k, CAST(sum(e.id) AS BIGINT) AS n FROM " .. ref("raw.events") .. " AS e JOIN " .. ref("raw.regions") .. " AS r USING (region) GROUP BY ALL" }}
"#
        ),
    );
    let applied = p.apply("dev");
    assert_eq!(applied["built"], serde_json::json!(["m.sum"]));
    assert_eq!(p.rows("\"dev__m\".\"sum\""), vec![vec![s("even"), s("6")], vec![s("odd"), s("4")]]);

    // A URL that does not resolve is a contract error naming the model; nothing is built.
    p.write("models/raw.lua", &p.read("models/raw.lua").replace("/events.parquet", "/missing.parquet"));
    let tables = p.physical_tables();
    let run = p.run(&["apply", "dev", "--yes"]);
    run.expect_code(1);
    assert!(run.stderr.contains("model `raw.events`: cannot read the source") && run.stderr.contains("missing.parquet"), "{}", run.stderr);
    assert_eq!(p.physical_tables(), tables);
    drop(server);
}

/// `raw.parts`: an external reading the CSV file at `path`, with a blocking `not_null(id)`.
fn audited_source(path: &str) -> String {
    format!(
        "return {{ parts = define_model {{ name = \"raw.parts\", kind = kind.external {{ path = \"{path}\" }},\n  \
         schema = {{ {{ \"id\", \"bigint\" }}, {{ \"region\", \"varchar\" }} }},\n  audits = {{ audit.not_null(\"id\") }} }} }}\n"
    )
}

/// `m.sum`: rows of `raw.parts` per region (`post`: extra fields, `order`: a query tail).
fn region_counts(post: &str, order: &str) -> String {
    format!(
        "define_model {{ name = \"m.sum\", kind = kind.full(), schema = {{ {{ \"k\", \"varchar\" }}, {{ \"n\", \"bigint\" }} }},{post}\n  \
         query = [[SELECT region AS k, count(*) AS n FROM ]] .. ref(\"raw.parts\") .. [[ GROUP BY ALL{order}]] }}\n"
    )
}

/// With more than one job, the audits of a file source run on a connection of their own while
/// the models are built; the promotion takes their results: a blocking violation fails the apply
/// naming the source and its audit and promotes nothing, exactly as with `--jobs 1` (where they
/// run after the builds), and once the file is fixed they pass and are reported.
#[test]
fn audits_of_a_file_source_run_while_the_models_build_and_decide_the_promotion_as_after() {
    let p = Project::new();
    p.write("data/parts.csv", "id,region\n1,north\n,south\n3,east\n");
    p.write("models/raw.lua", &audited_source("data/parts.csv"));
    p.write("models/sum.lua", &region_counts("", ""));
    const EARLY: &str = "audits of file sources run while the models are built";
    for jobs in ["1", "2"] {
        let run = p.run(&["apply", "dev", "--yes", "--jobs", jobs, "--log-level", "debug"]);
        run.expect_code(1);
        assert_eq!(run.stderr.contains(EARLY), jobs == "2", "--jobs {jobs}:\n{}", run.stderr);
        let line = run.stderr.lines().find(|l| l.contains("not_null(id)") && l.contains("raw.parts")).unwrap_or_else(|| panic!("{}", run.stderr));
        assert!(line.contains("1 violating row"), "--jobs {jobs}: {line}");
        assert!(!p.all_relations().iter().any(|r| r.starts_with("\"dev__m\"")), "--jobs {jobs}: nothing promoted: {:?}", p.all_relations());
    }
    p.write("data/parts.csv", "id,region\n1,north\n2,south\n3,east\n");
    let run = p.run(&["apply", "dev", "--yes", "--jobs", "2", "--json", "--log-level", "debug"]);
    run.expect_code(0);
    assert!(run.stderr.contains(EARLY), "{}", run.stderr);
    let v = run.json();
    let audits = v["audits"].as_array().unwrap_or_else(|| panic!("{v:#}"));
    assert!(
        audits.iter().any(|a| a["model"] == "raw.parts" && a["audit"].as_str().is_some_and(|s| s.starts_with("not_null")) && a["violations"] == 0),
        "{v:#}"
    );
    assert_eq!(p.rows("\"dev__m\".\"sum\"").len(), 3);

    // A model built with post-statements could write the file (`COPY … TO`) or `SET` what the
    // audits see: the source's audits (a new version, so they run) then wait for the builds; without
    // them, the same kind of change runs them early again.
    // (The path is declared text: another spelling of it is a new version of the source.)
    for (path, post, order, early) in
        [("./data/parts.csv", " post_statements = { \"SET enable_progress_bar = false\" },", " ORDER BY k", false), ("data/parts.csv", "", "", true)]
    {
        p.write("models/raw.lua", &audited_source(path));
        p.write("models/sum.lua", &region_counts(post, order));
        let run = p.run(&["apply", "dev", "--yes", "--jobs", "2", "--json", "--log-level", "debug"]);
        run.expect_code(0);
        assert_eq!(run.stderr.contains(EARLY), early, "post statements {post:?}:\n{}", run.stderr);
        let v = run.json();
        assert!(v["audits"].as_array().is_some_and(|a| a.iter().any(|a| a["model"] == "raw.parts")), "the source's audits ran: {v:#}");
    }
}

/// An apply that fails while a file source's audits run on their own connection stops them
/// (their results would never be used) and reports its own failure.
#[test]
fn a_failed_apply_stops_the_audits_of_file_sources_under_way() {
    let p = Project::new();
    p.write("data/parts.csv", "id,region\n1,north\n2,south\n");
    p.write("models/raw.lua", &audited_source("data/parts.csv"));
    p.write(
        "models/bad.lua",
        "define_model { name = \"m.bad\", kind = kind.full(), schema = { { \"k\", \"varchar\" } },\n  \
         query = [[SELECT CAST(error('boom at build') AS VARCHAR) AS k FROM ]] .. ref(\"raw.parts\") }\n",
    );
    let run = p.run(&["apply", "dev", "--yes", "--jobs", "2", "--log-level", "debug"]);
    run.expect_code(1);
    assert!(run.stderr.contains("audits of file sources run while the models are built"), "{}", run.stderr);
    assert!(run.stderr.contains("the audits of file sources under way are interrupted"), "{}", run.stderr);
    assert!(run.stderr.lines().any(|l| l.contains("m.bad") && l.contains("boom at build")), "{}", run.stderr);
    assert!(!p.all_relations().iter().any(|r| r.starts_with("\"dev__")), "nothing promoted: {:?}", p.all_relations());
}

/// An audit added to an external source (or edited) is a `metadata` change, as for any model:
/// the plan says so, and apply runs the source's audits before recording it — a blocking
/// violation fails the apply naming the audit and records nothing; once the audit is a warning,
/// apply records it and reports the rows; the plan after that has no change.
#[test]
fn an_audit_added_to_an_external_is_a_metadata_change_that_apply_runs() {
    let p = Project::new();
    p.write("data/parts.csv", "id,region\n1,north\n2,\n3,east\n");
    p.write("models/raw.lua", &audited_source("data/parts.csv"));
    p.write("models/sum.lua", &region_counts("", ""));
    p.apply("dev");
    let with = |audit: &str| audited_source("data/parts.csv").replace("audit.not_null(\"id\")", &format!("audit.not_null(\"id\"), {audit}"));
    p.write("models/raw.lua", &with("audit.not_null(\"region\")"));
    let plan = p.plan("dev");
    assert_eq!(action(&plan, "raw.parts")["change"], "metadata", "{plan:#}");
    assert_eq!(action(&plan, "m.sum")["change"], "unchanged", "{plan:#}");
    let r = p.run(&["apply", "dev", "--yes"]);
    r.expect_code(1);
    assert!(r.stderr.contains("not_null(region)") && r.stderr.contains("raw.parts") && r.stderr.contains("1 violating row"), "{}", r.stderr);
    assert_eq!(action(&p.plan("dev"), "raw.parts")["change"], "metadata", "nothing recorded");
    p.write("models/raw.lua", &with("audit.not_null { \"region\", blocking = false }"));
    let v = p.apply("dev");
    let audits = v["audits"].as_array().unwrap_or_else(|| panic!("{v:#}"));
    assert!(audits.iter().any(|a| a["model"] == "raw.parts" && a["violations"] == 1), "{v:#}");
    assert_eq!(p.plan("dev")["hasChanges"], false);
}

/// A file source's rows change outside efmesh: its audits run whenever an apply or run reads it
/// into a write, not only when an environment points at it anew. A `run` refreshing a unique-key
/// model over it (a table `prod` serves) is stopped before writing anything; an apply building a
/// new version of a model over it, unchanged itself, is not promoted.
#[test]
fn a_source_failing_its_blocking_audit_is_never_read_into_what_an_environment_serves() {
    let p = Project::new();
    p.write("data/parts.csv", "id,region\n1,north\n2,south\n");
    p.write("models/raw.lua", &audited_source("data/parts.csv"));
    p.write("models/sum.lua", &region_counts("", ""));
    p.write(
        "models/keyed.lua",
        "define_model { name = \"m.keyed\", kind = kind.incremental_by_unique_key { key = \"region\" },\n  \
         schema = { { \"region\", \"varchar\" }, { \"id\", \"bigint\" } },\n  query = [[SELECT region, max(id) AS id FROM ]] .. ref(\"raw.parts\") .. [[ GROUP BY region]] }\n",
    );
    p.apply("prod");
    let keyed = p.rows("\"m\".\"keyed\"");
    let sum = p.rows("\"m\".\"sum\"");
    p.write("data/parts.csv", "id,region\n1,north\n2,south\n,west\n");
    let run = p.run(&["run", "prod"]);
    run.expect_code(1);
    assert!(run.stderr.contains("not_null(id)") && run.stderr.contains("raw.parts") && run.stderr.contains("1 violating row"), "{}", run.stderr);
    assert_eq!(p.rows("\"m\".\"keyed\""), keyed, "nothing was upserted");
    // A new version of `m.sum` over the unchanged source: built, never promoted.
    p.write("models/sum.lua", &region_counts("", " ORDER BY k"));
    for jobs in ["1", "2"] {
        let r = p.run(&["apply", "prod", "--yes", "--jobs", jobs]);
        r.expect_code(1);
        assert!(r.stderr.contains("not_null(id)") && r.stderr.contains("raw.parts"), "--jobs {jobs}: {}", r.stderr);
        assert_eq!(p.rows("\"m\".\"sum\""), sum, "--jobs {jobs}: prod serves what it served");
    }
    // Fixed, both go through.
    p.write("data/parts.csv", "id,region\n1,north\n2,south\n3,west\n");
    p.apply("prod");
    assert_eq!(p.rows("\"m\".\"sum\"").len(), 3);
}

/// A source audit that `ref`s another model reads it as the apply or run leaves it: it runs
/// after the writes (with the audits of what was written), never before the model it reads is
/// rebuilt — a `run` rebuilding `m.customers` on its cron goes through when a new customer
/// arrives in both sources, and an orphan order still fails it.
#[test]
fn a_source_audit_reading_another_model_runs_after_that_model_is_written() {
    source_audit_reading_another_model(false);
}

/// The same, the audit reading the customers through an `embedded` model (which stores nothing:
/// it reads the customers' new table).
#[test]
fn a_source_audit_reading_an_embedded_model_over_a_model_written_here_runs_after_it() {
    source_audit_reading_another_model(true);
}

fn source_audit_reading_another_model(through_embedded: bool) {
    let mut p = Project::new();
    p.write("data/customers.csv", "id\n1\n2\n");
    p.write("data/orders.csv", "ts,customer\n2026-01-01 10:00:00,1\n2026-01-02 10:00:00,2\n");
    p.write(
        "models/m.lua",
        r#"local cust_raw = define_model { name = "raw.customers", kind = kind.external { path = "data/customers.csv" }, schema = { { "id", "bigint" } } }
local customers = define_model { name = "m.customers", kind = kind.full(), cron = "@daily", schema = { { "id", "bigint" } },
  query = "SELECT id FROM " .. ref(cust_raw) }
local orders = define_model { name = "raw.orders", kind = kind.external { path = "data/orders.csv" },
  schema = { { "ts", "timestamp" }, { "customer", "bigint" } },
  audits = { audit.relationships { "customer", "m.customers", field = "id" } } }
define_model { name = "m.daily", kind = kind.incremental_by_time_range { time_column = "day", start = "2026-01-01" },
  schema = { { "day", "timestamp" }, { "n", "bigint" } },
  query = "SELECT CAST(date_trunc('day', ts) AS TIMESTAMP) AS day, count(*) AS n FROM " .. ref(orders) .. " WHERE ts >= @start AND ts < @end GROUP BY 1" }
define_model { name = "m.known", kind = kind.embedded(), schema = { { "id", "bigint" } }, query = "SELECT id FROM " .. ref(customers) }
"#,
    );
    if through_embedded {
        let text = fs_err::read_to_string(p.root().join("models/m.lua")).unwrap();
        p.write(
            "models/m.lua",
            &text.replace(
                r#"audit.relationships { "customer", "m.customers", field = "id" }"#,
                r#"audit.relationships { "customer", "m.known", field = "id" }"#,
            ),
        );
    }
    p.now = "2026-01-03T01:00:00Z".into();
    p.apply("prod");
    p.write("data/customers.csv", "id\n1\n2\n3\n");
    p.write("data/orders.csv", "ts,customer\n2026-01-01 10:00:00,1\n2026-01-02 10:00:00,2\n2026-01-03 10:00:00,3\n");
    p.now = "2026-01-04T01:00:00Z".into();
    p.run(&["run", "prod"]).expect_code(0);
    assert_eq!(p.rows("\"m\".\"customers\"").len(), 3, "the cron rebuilt the customers");
    // An order of a customer nobody knows: the run fails on it (after writing, as `run` does
    // for an audit reading what it wrote).
    p.write("data/orders.csv", "ts,customer\n2026-01-01 10:00:00,1\n2026-01-02 10:00:00,2\n2026-01-03 10:00:00,3\n2026-01-04 10:00:00,9\n");
    p.now = "2026-01-05T01:00:00Z".into();
    let r = p.run(&["run", "prod"]);
    r.expect_code(1);
    assert!(r.stderr.contains("relationships") && r.stderr.contains("raw.orders"), "{}", r.stderr);
}

/// A source audit that `ref`s a model this run does not write runs before the writes like any
/// other: an orphan order against customers no run refreshes stops the run with nothing written.
#[test]
fn a_source_audit_reading_a_model_the_run_leaves_as_it_is_still_gates_the_writes() {
    let mut p = Project::new();
    p.write("data/orders.csv", "ts,customer\n2026-01-01 10:00:00,1\n");
    p.write(
        "models/m.lua",
        r#"local customers = define_model { name = "m.customers", kind = kind.full(), schema = { { "id", "bigint" } }, query = "SELECT 1::BIGINT AS id" }
local orders = define_model { name = "raw.orders", kind = kind.external { path = "data/orders.csv" },
  schema = { { "ts", "timestamp" }, { "customer", "bigint" } },
  audits = { audit.relationships { "customer", customers, field = "id" }, audit.not_null { "ts", blocking = false } } }
define_model { name = "m.daily", kind = kind.incremental_by_time_range { time_column = "day", start = "2026-01-01" },
  schema = { { "day", "timestamp" }, { "n", "bigint" } },
  query = "SELECT CAST(date_trunc('day', ts) AS TIMESTAMP) AS day, count(*) AS n FROM " .. ref(orders) .. " WHERE ts >= @start AND ts < @end GROUP BY 1" }
"#,
    );
    p.now = "2026-01-02T01:00:00Z".into();
    p.apply("prod");
    let daily = p.rows("\"m\".\"daily\"");
    p.write("data/orders.csv", "ts,customer\n2026-01-01 10:00:00,1\n2026-01-02 10:00:00,9\n");
    p.now = "2026-01-03T01:00:00Z".into();
    let r = p.run(&["run", "prod"]);
    r.expect_code(1);
    assert!(r.stderr.contains("relationships") && r.stderr.contains("nothing was written"), "{}", r.stderr);
    // Every failure is the source's: the hint says to fix the source.
    assert!(r.stderr.contains("1 blocking audit of the sources this run reads failed"), "{}", r.stderr);
    assert!(r.stderr.contains("hint: fix the source (or the audit), then run again"), "{}", r.stderr);
    assert_eq!(p.rows("\"m\".\"daily\""), daily, "no interval was computed over the orphan");
}

/// A source's warn audit is run once per apply, though another of its audits (reading a model
/// the apply builds) waits for that model: its warning is not printed twice, whether the apply
/// reads the source into a table `prod` serves (a due day) or into a new version's.
#[test]
fn a_source_warning_is_printed_once_when_its_other_audit_waits_for_a_model_built_here() {
    let mut p = Project::new();
    p.write("data/orders.csv", "ts,customer\n2026-01-01 10:00:00,1\n,1\n");
    let models = |customers: &str, other: bool| {
        let other = if other {
            r#"define_model { name = "m.other", kind = kind.full(), schema = { { "n", "bigint" } }, query = "SELECT count(*) AS n FROM " .. ref(orders) }"#
        } else {
            ""
        };
        format!(
            r#"local customers = define_model {{ name = "m.customers", kind = kind.full(), schema = {{ {{ "id", "bigint" }} }}, query = "{customers}" }}
local orders = define_model {{ name = "raw.orders", kind = kind.external {{ path = "data/orders.csv" }},
  schema = {{ {{ "ts", "timestamp" }}, {{ "customer", "bigint" }} }},
  audits = {{ audit.relationships {{ "customer", customers, field = "id" }}, audit.not_null {{ "ts", blocking = false }} }} }}
define_model {{ name = "m.daily", kind = kind.incremental_by_time_range {{ time_column = "day", start = "2026-01-01" }},
  schema = {{ {{ "day", "timestamp" }}, {{ "n", "bigint" }} }},
  query = "SELECT CAST(date_trunc('day', ts) AS TIMESTAMP) AS day, count(*) AS n FROM " .. ref(orders) .. " WHERE ts >= @start AND ts < @end GROUP BY 1" }}
{other}
"#
        )
    };
    p.write("models/m.lua", &models("SELECT 1::BIGINT AS id", false));
    p.now = "2026-01-02T01:00:00Z".into();
    p.apply("prod");
    // The customers' query changes (a new version built here), a day is due and a new model reads
    // the source.
    p.write("models/m.lua", &models("SELECT 1::BIGINT AS id UNION ALL SELECT 2", true));
    p.now = "2026-01-03T01:00:00Z".into();
    let r = p.run(&["apply", "prod", "--yes"]);
    r.expect_code(0);
    let warnings = r.stderr.lines().filter(|l| l.contains("not_null(ts)") && l.contains("raw.orders")).count();
    assert_eq!(warnings, 1, "{}", r.stderr);
}

/// A JSON file's columns are cast to their declared types: a field null in every row (which
/// DuckDB's reader leaves `JSON`) reads as the declared `bigint`; a value that is no number fails
/// the build naming the model.
#[test]
fn json_sources_are_cast_to_their_declared_types() {
    let p = Project::new();
    p.write("data/e.jsonl", "{\"id\": null, \"k\": \"a\"}\n{\"id\": null, \"k\": \"b\"}\n");
    write_models(
        &p,
        r#"path = "data/e.jsonl""#,
        r#"{ { "id", "bigint" }, { "k", "varchar" } }"#,
        "SELECT k, coalesce(id, 0) AS n FROM ]] .. ref(\"raw.parts\") .. [[",
    );
    p.apply("dev");
    let types = p.query("SELECT data_type FROM information_schema.columns WHERE table_schema = 'dev__m' AND table_name = 'sum' ORDER BY ordinal_position");
    assert_eq!(types, vec![vec![s("VARCHAR")], vec![s("BIGINT")]]);
    p.write("data/e.jsonl", "{\"id\": 1, \"k\": \"a\"}\n{\"id\": {\"x\": 3}, \"k\": \"c\"}\n");
    write_models(&p, r#"path = "data/e.jsonl""#, r#"{ { "id", "bigint" }, { "k", "varchar" } }"#, "SELECT k, id AS n FROM ]] .. ref(\"raw.parts\") .. [[");
    let r = p.run(&["apply", "dev", "--yes"]);
    r.expect_code(1);
    assert!(r.stderr.contains("m.sum") || r.stderr.contains("models/sum.lua"), "{}", r.stderr);
}
