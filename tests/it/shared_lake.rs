//! The shared lake (issue #14 part 5, docs/scaling.md): two checkouts of one project on two
//! "machines" (two directories, each with its own DuckDB file), sharing the state store (a
//! Postgres schema), a DuckLake catalog in Postgres and the lake's data in S3 (moto). What one
//! builds the other serves without rebuilding; the environment lock keeps them from colliding.

use crate::common::{Project, Run, StateBackend, action};
use crate::{pg, s3};
use std::process::Stdio;

/// The variable naming the DuckLake catalog's Postgres URL in the test projects.
const DL_URL_ENV: &str = "EFMESH_IT_DUCKLAKE_URL";

fn models(factor: i64) -> String {
    format!(
        r#"local daily = define_model {{
  name = "m.daily",
  kind = kind.incremental_by_time_range {{ time_column = "day", start = "2026-01-01", ["end"] = "2026-01-08", grain = "day", batch_size = 4 }},
  target = "ducklake",
  schema = {{ {{ "day", "timestamp" }}, {{ "n", "bigint" }} }},
  query = "SELECT CAST(d.range AS TIMESTAMP) AS day, (CAST(epoch(d.range) / 86400 AS BIGINT) + r.range) * {factor} AS n FROM range(CAST(@start AS TIMESTAMP), CAST(@end AS TIMESTAMP), INTERVAL 1 DAY) AS d, range(20) AS r",
}}
define_model {{
  name = "m.total",
  kind = kind.full(),
  target = "ducklake",
  schema = {{ {{ "days", "bigint" }}, {{ "n", "bigint" }} }},
  query = "SELECT count(*) AS days, CAST(sum(n) AS BIGINT) AS n FROM " .. ref(daily),
}}
"#
    )
}

/// One machine's checkout.
struct Machine {
    p: Project,
    dl_url: String,
    moto_port: u16,
}

impl Machine {
    fn new(state: &pg::PgTarget, dl: &pg::PgTarget, moto: &s3::Moto) -> Machine {
        let mut p = Project::on(StateBackend::Postgres(state.clone()));
        p.now = "2026-01-10T06:00:00Z".to_string();
        let extra = format!(
            "\n[ducklake]\ncatalog_url_env = \"{DL_URL_ENV}\"\ndata_path = \"s3://shared/lake\"\ns3_endpoint = \"{}\"\ns3_url_style = \"path\"\ns3_use_ssl = false\n",
            moto.endpoint()
        );
        p.write("efmesh.toml", &p.config_with(&extra));
        p.write("models/m.lua", &models(1));
        Machine { p, dl_url: dl.url.clone(), moto_port: moto.port }
    }

    fn command(&self, args: &[&str]) -> std::process::Command {
        let mut c = self.p.command(args);
        c.env(DL_URL_ENV, &self.dl_url).env("AWS_ACCESS_KEY_ID", s3::KEY_ID).env("AWS_SECRET_ACCESS_KEY", s3::SECRET).env_remove("AWS_SESSION_TOKEN");
        c
    }

    fn run(&self, args: &[&str]) -> Run {
        Run::from_output(self.command(args).output().expect("run efmesh"), args.join(" "))
    }

    /// Rows of `relation` as this machine's DuckDB file serves them, the lake attached as an
    /// outside reader attaches it (`docs/scaling.md`).
    fn rows(&self, relation: &str) -> Vec<Vec<Option<String>>> {
        use efmesh::engine::Engine;
        let settings = efmesh::config::EngineSection {
            extension_directory: std::env::var_os("EFMESH_EXTENSION_DIRECTORY").map(Into::into),
            ..efmesh::config::EngineSection::default()
        };
        let mut db = efmesh::engine::duckdb::DuckDb::open(&self.p.engine_path(), &settings).expect("open duckdb");
        for ext in ["ducklake", "postgres_scanner", "httpfs"] {
            db.load_extension(ext).expect("extension");
        }
        db.execute(&format!(
            "CREATE SECRET (TYPE s3, KEY_ID '{}', SECRET '{}', REGION 'us-east-1', ENDPOINT '127.0.0.1:{}', URL_STYLE 'path', USE_SSL false)",
            s3::KEY_ID,
            s3::SECRET,
            self.moto_port
        ))
        .expect("secret");
        db.execute(&format!("ATTACH 'ducklake:postgres:{}' AS \"_efmesh_ducklake\" (READ_ONLY)", self.dl_url)).expect("attach");
        let mut r = db.query(&format!("SELECT CAST(COLUMNS(*) AS VARCHAR) FROM {relation}")).unwrap_or_else(|e| panic!("{e}"));
        r.sort();
        r
    }
}

#[test]
fn two_checkouts_share_one_lake_through_postgres_and_s3() {
    let (Some(state), Some(dl)) = (pg::fresh(), pg::fresh_database()) else { return };
    let moto = s3::Moto::start();
    moto.create_bucket("shared");
    let a = Machine::new(&state, &dl, &moto);
    let b = Machine::new(&state, &dl, &moto);

    // A builds dev: the tables land in the shared catalog, their data in S3 (20 rows a day: more
    // than DuckLake inlines into the catalog).
    let v = a.run(&["apply", "dev", "--yes", "--json"]).expect_code(0).json();
    assert_eq!(v["built"].as_array().map(Vec::len), Some(2), "{v:#}");
    assert!(moto.keys("shared").iter().any(|k| k.starts_with("lake/") && k.ends_with(".parquet")), "{:?}", moto.keys("shared"));
    let served_a = a.rows("dev__m.total");
    assert_eq!(served_a.len(), 1);

    // B, another checkout with its own (empty) DuckDB file, finds dev's versions in the shared
    // state and the shared lake: it builds nothing, it only creates its own views.
    let plan = b.run(&["plan", "dev", "--json"]).expect_code(0).json();
    for m in ["m.daily", "m.total"] {
        assert_eq!(action(&plan, m)["build"], false, "{m} is served from the lake, not rebuilt: {plan:#}");
    }
    let v = b.run(&["apply", "dev", "--yes", "--json"]).expect_code(0).json();
    assert_eq!(v["built"].as_array().map(Vec::len), Some(0), "{v:#}");
    assert_eq!(b.rows("dev__m.total"), served_a, "both machines serve the same rows");

    // A changes a model and applies; B pulls the same change: the new version is in the lake
    // already, so B's apply is a view swap.
    a.p.write("models/m.lua", &models(2));
    let v = a.run(&["apply", "dev", "--yes", "--json"]).expect_code(0).json();
    assert_eq!(v["built"].as_array().map(Vec::len), Some(2), "{v:#}");
    b.p.write("models/m.lua", &models(2));
    let v = b.run(&["apply", "dev", "--yes", "--json"]).expect_code(0).json();
    assert_eq!(v["built"].as_array().map(Vec::len), Some(0), "{v:#}");
    assert_eq!(b.rows("dev__m.total"), a.rows("dev__m.total"));
    assert_ne!(b.rows("dev__m.total"), served_a, "the new version's rows");

    // Both apply prod at once: the environment lock lets one through and names the holder to
    // the other.
    let spawn = |m: &Machine| {
        let mut c = m.command(&["apply", "prod", "--yes", "--json"]);
        c.env("EFMESH_TEST_HOLD_LEASE_MS", "1500").stdout(Stdio::piped()).stderr(Stdio::piped());
        c.spawn().expect("spawn")
    };
    let (ca, cb) = (spawn(&a), spawn(&b));
    let runs = [Run::from_output(ca.wait_with_output().unwrap(), "a".into()), Run::from_output(cb.wait_with_output().unwrap(), "b".into())];
    let mut codes: Vec<i32> = runs.iter().map(|r| r.code).collect();
    codes.sort();
    assert_eq!(codes, [0, 1], "{runs:#?}");
    let loser = runs.iter().find(|r| r.code == 1).unwrap();
    assert_eq!(loser.json()["error"]["kind"], "lock-held", "{loser:#?}");
    // The loser applies after: a view swap in its own DuckDB file.
    let late = if runs[0].code == 1 { &a } else { &b };
    let v = late.run(&["apply", "prod", "--yes", "--json"]).expect_code(0).json();
    assert_eq!(v["built"].as_array().map(Vec::len), Some(0), "{v:#}");
    assert_eq!(a.rows("m.total"), b.rows("m.total"));

    // Two machines apply two *different* environments needing the same new versions at once:
    // a project with a lake has one writer lock for every environment, so one builds the
    // versions and the other is refused, naming it, and then only swaps views.
    a.p.write("models/m.lua", &models(4));
    b.p.write("models/m.lua", &models(4));
    let spawn_env = |m: &Machine, env: &str| {
        let mut c = m.command(&["apply", env, "--yes", "--json"]);
        c.env("EFMESH_TEST_HOLD_LEASE_MS", "1500").stdout(Stdio::piped()).stderr(Stdio::piped());
        c.spawn().expect("spawn")
    };
    let (ca, cb) = (spawn_env(&a, "qa"), spawn_env(&b, "staging"));
    let runs = [Run::from_output(ca.wait_with_output().unwrap(), "a qa".into()), Run::from_output(cb.wait_with_output().unwrap(), "b staging".into())];
    let mut codes: Vec<i32> = runs.iter().map(|r| r.code).collect();
    codes.sort();
    assert_eq!(codes, [0, 1], "{runs:#?}");
    let (winner, loser) = if runs[0].code == 0 { (&runs[0], &runs[1]) } else { (&runs[1], &runs[0]) };
    assert_eq!(winner.json()["built"].as_array().map(Vec::len), Some(2), "{winner:#?}");
    assert_eq!(loser.json()["error"]["kind"], "lock-held", "{loser:#?}");
    assert!(loser.stderr.contains("`lake` (the lake's one writer lock, for every environment) is held by"), "{}", loser.stderr);
    let (late, env) = if runs[0].code == 1 { (&a, "qa") } else { (&b, "staging") };
    let v = late.run(&["apply", env, "--yes", "--json"]).expect_code(0).json();
    assert_eq!(v["built"].as_array().map(Vec::len), Some(0), "the versions the other machine built are served: {v:#}");

    // No secret leaves in a message: an unreachable catalog fails the apply, named without its
    // URL's password, and nothing is promoted.
    b.p.write("models/m.lua", &models(3));
    let bad = b.command(&["apply", "dev", "--yes"]).env(DL_URL_ENV, "postgres://efmesh:hunter2-secret@127.0.0.1:1/none").output().unwrap();
    let err = String::from_utf8_lossy(&bad.stderr);
    assert_eq!(bad.status.code(), Some(1), "{err}");
    assert!(err.contains("DuckLake catalog") && !err.contains("hunter2-secret"), "{err}");
    assert_eq!(b.rows("dev__m.total"), a.rows("dev__m.total"));
}
