//! `efmesh graph` (issue #15 item 3): the DAG as text, as JSON, with `--select` and `--env`, and
//! as an HTML page opened in headless Chromium (every model drawn as a node; a click on a node
//! shows its SQL in the side panel).

use crate::common::{Project, action, actions};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The models of the test project, each `define_model` on its own first line: (name, text).
fn models(changed: bool) -> Vec<(&'static str, String)> {
    let mut m = vec![
        (
            "ref.wards",
            "local wards = define_model { name = \"ref.wards\", kind = kind.seed { path = \"seeds/wards.csv\" },\n  schema = { { \"ward\", \"varchar\" }, { \"beds\", \"integer\" } } }\n".to_string(),
        ),
        (
            "raw.events",
            "local raw = define_model { name = \"raw.events\", kind = kind.external { path = \"data/events.csv\" },\n  schema = { { \"id\", \"bigint\" }, { \"ward\", \"varchar\" }, { \"t\", \"timestamp\" } } }\n".to_string(),
        ),
        (
            "stg.events",
            format!(
                "define_model {{ name = \"stg.events\", kind = kind.view(),\n  schema = {{ {{ \"id\", \"bigint\" }}, {{ \"ward\", \"varchar\" }}, {{ \"t\", \"timestamp\" }} }},\n  query = \"SELECT id, ward, t FROM \" .. ref(raw){} }}\n",
                if changed { " .. \" WHERE id > 1\"" } else { "" }
            ),
        ),
        (
            "core.wards",
            "define_model { name = \"core.wards\", kind = kind.embedded(), description = \"Beds per ward <b>&amp;</b> \\\"quoted\\\"\",\n  schema = { { \"ward\", \"varchar\" }, { \"beds\", \"integer\" } },\n  query = \"SELECT ward, beds FROM \" .. ref(wards) }\n".to_string(),
        ),
        (
            "mart.daily",
            "define_model { name = \"mart.daily\", kind = kind.incremental_by_time_range { time_column = \"day\", start = \"2026-02-01\" },\n  owner = \"ward-ops\", tags = { \"care\", \"daily\" }, column_descriptions = { n = \"Events that day\" },\n  schema = { { \"day\", \"timestamp\" }, { \"ward\", \"varchar\" }, { \"n\", \"bigint\" }, { \"beds\", \"integer\" } },\n  query = \"SELECT date_trunc('day', e.t) AS day, e.ward, count(*) AS n, max(w.beds) AS beds FROM \" .. ref(\"stg.events\") .. \" AS e JOIN \" .. ref(\"core.wards\") .. \" AS w ON w.ward = e.ward WHERE e.t >= @start AND e.t < @end GROUP BY 1, 2\" }\n".to_string(),
        ),
        (
            "mart.summary",
            "define_model { name = \"mart.summary\", kind = kind.full(),\n  schema = { { \"ward\", \"varchar\" }, { \"total\", \"bigint\" } },\n  query = \"SELECT ward, sum(n) AS total FROM \" .. ref(\"mart.daily\") .. \" GROUP BY ward\" }\n".to_string(),
        ),
        (
            "mart.beds",
            format!(
                "define_model {{ name = \"mart.beds\", kind = kind.full(),\n  schema = {{ {{ \"ward\", \"varchar\" }}{} }},\n  query = \"SELECT ward{} FROM \" .. ref(wards) }}\n",
                if changed { ", { \"beds\", \"integer\" }" } else { "" },
                if changed { ", beds" } else { "" }
            ),
        ),
    ];
    if changed {
        m.push((
            "mart.fresh",
            "define_model { name = \"mart.fresh\", kind = kind.full(),\n  schema = { { \"x\", \"integer\" } },\n  query = \"SELECT 1 AS x\" }\n".to_string(),
        ));
    } else {
        m.push((
            "mart.old",
            "define_model { name = \"mart.old\", kind = kind.full(),\n  schema = { { \"x\", \"integer\" } },\n  query = \"SELECT 2 AS x\" }\n".to_string(),
        ));
    }
    m
}

/// Writes the models into `models/m.lua`; returns each model's `file:line`.
fn write_project(p: &Project, changed: bool) -> BTreeMap<String, String> {
    p.write("seeds/wards.csv", "ward,beds\nICU,12\nER,30\n");
    p.write("data/events.csv", "id,ward,t\n1,ICU,2026-02-01 10:00:00\n2,ER,2026-02-02 11:00:00\n3,ICU,2026-02-03 12:00:00\n");
    let mut text = String::new();
    let mut at = BTreeMap::new();
    for (name, m) in models(changed) {
        at.insert(name.to_string(), format!("models/m.lua:{}", text.lines().count() + 1));
        text.push_str(&m);
    }
    p.write("models/m.lua", &text);
    at
}

fn names(v: &Value) -> BTreeSet<String> {
    v.as_array().expect("an array").iter().map(|n| n["name"].as_str().expect("a name").to_string()).collect()
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(ToString::to_string).collect()
}

#[test]
fn graph_prints_nodes_edges_and_layers_as_json_and_text() {
    let p = Project::new();
    let at = write_project(&p, false);
    let run = p.run(&["graph", "--json"]);
    run.expect_code(0);
    assert!(run.stdout.starts_with("{\n  \"apiVersion\": 1,"), "{}", run.stdout);
    let v = run.json();
    let nodes = v["nodes"].as_array().unwrap();
    assert_eq!(names(&v["nodes"]), at.keys().cloned().collect::<BTreeSet<_>>(), "{v:#}");
    let node = |name: &str| nodes.iter().find(|n| n["name"] == name).unwrap_or_else(|| panic!("{name} in {v:#}"));
    // Kind, file:line and layer (the longest path from a root) of each model.
    for (name, kind, layer) in [
        ("ref.wards", "seed", 0),
        ("raw.events", "external", 0),
        ("stg.events", "view", 1),
        ("core.wards", "embedded", 1),
        ("mart.daily", "incremental_by_time_range", 2),
        ("mart.summary", "full", 3),
        ("mart.beds", "full", 1),
        ("mart.old", "full", 0),
    ] {
        let n = node(name);
        assert_eq!((n["kind"].as_str(), n["layer"].as_u64()), (Some(kind), Some(layer)), "{name}: {n:#}");
        assert_eq!(n["location"], at[name].as_str(), "{name}");
        assert!(n.get("state").is_none(), "no state without --env: {n:#}");
    }
    // Topological order: every parent listed before its children.
    let pos = |name: &str| nodes.iter().position(|n| n["name"] == name).unwrap();
    let edges: BTreeSet<(String, String)> =
        v["edges"].as_array().unwrap().iter().map(|e| (e["from"].as_str().unwrap().to_string(), e["to"].as_str().unwrap().to_string())).collect();
    let expected: BTreeSet<(String, String)> = [
        ("raw.events", "stg.events"),
        ("stg.events", "mart.daily"),
        ("ref.wards", "core.wards"),
        ("core.wards", "mart.daily"),
        ("mart.daily", "mart.summary"),
        ("ref.wards", "mart.beds"),
    ]
    .iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect();
    assert_eq!(edges, expected, "{v:#}");
    for (from, to) in &edges {
        assert!(pos(from) < pos(to), "{from} before {to}");
    }
    assert_eq!((v["models"].as_u64(), v["layers"].as_u64()), (Some(8), Some(4)));

    // The text: a summary, then each layer's models with kind, file:line and parents.
    let text = p.run(&["graph"]).expect_code(0).stdout.clone();
    assert!(text.starts_with("8 models in 4 layers\nlayer 0\n"), "{text}");
    let line = |name: &str| text.lines().find(|l| l.trim_start().starts_with(&format!("{name} "))).unwrap_or_else(|| panic!("{name} in {text}")).to_string();
    let daily = line("mart.daily");
    assert!(daily.contains("incremental_by_time_range") && daily.contains(&at["mart.daily"]) && daily.ends_with("← core.wards, stg.events"), "{daily}");
    assert!(line("raw.events").ends_with(&at["raw.events"]), "roots have no arrow: {text}");
    let layer2 = text.find("layer 2\n").unwrap();
    assert!(text.find("mart.daily").unwrap() > layer2 && text.find("stg.events").unwrap() < layer2, "{text}");
}

#[test]
fn graph_select_takes_ancestors_descendants_and_names_unknown_models() {
    let p = Project::new();
    write_project(&p, false);
    let pick = |expr: &str| names(&p.run(&["graph", "--select", expr, "--json"]).expect_code(0).json()["nodes"]);
    assert_eq!(pick("+mart.daily"), set(&["raw.events", "stg.events", "ref.wards", "core.wards", "mart.daily"]));
    assert_eq!(pick("stg.events+"), set(&["stg.events", "mart.daily", "mart.summary"]));
    assert_eq!(pick("1+mart.daily"), set(&["stg.events", "core.wards", "mart.daily"]));
    assert_eq!(pick("ref.wards+1, mart.old"), set(&["ref.wards", "core.wards", "mart.beds", "mart.old"]));
    assert_eq!(pick("kind:full"), set(&["mart.summary", "mart.beds", "mart.old"]));
    // Edges stay among the selected models, layers are those of the selection.
    let v = p.run(&["graph", "--select", "stg.events+", "--json"]).expect_code(0).json();
    assert_eq!(v["edges"].as_array().unwrap().len(), 2, "{v:#}");
    assert_eq!(v["nodes"][0]["layer"], 0);
    let text = p.run(&["graph", "--select", "stg.events+"]).expect_code(0).stdout.clone();
    assert!(text.starts_with("3 of 8 models selected by `stg.events+` in 3 layers\n"), "{text}");

    let r = p.run(&["graph", "--select", "+mart.dialy"]);
    r.expect_code(1);
    assert!(r.stderr.contains("unknown model `mart.dialy`") && r.stderr.contains("did you mean `mart.daily`?"), "{}", r.stderr);
    // A name cut short is completed when one model begins with it.
    let r = p.run(&["graph", "--select", "+mart.su"]);
    r.expect_code(1);
    assert!(r.stderr.contains("did you mean `mart.summary`?"), "{}", r.stderr);
    let r = p.run(&["graph", "--select", "mart.dialy+", "--json"]);
    r.expect_code(1);
    let e = r.json();
    assert_eq!((e["apiVersion"].as_u64(), e["error"]["kind"].as_str()), (Some(1), Some("usage")), "{e:#}");
    assert!(e["error"]["message"].as_str().unwrap().contains("unknown model `mart.dialy`"), "{e:#}");
    let r = p.run(&["graph", "--select", "tag:nightly"]);
    r.expect_code(1);
    assert!(r.stderr.contains("no model is tagged `nightly`"), "{}", r.stderr);
}

#[test]
fn graph_env_shows_each_models_state_from_the_plan() {
    let p = Project::new();
    write_project(&p, false);
    p.apply("dev");
    let v = p.run(&["graph", "--env", "dev", "--json"]).expect_code(0).json();
    assert!(v["nodes"].as_array().unwrap().iter().all(|n| n["state"] == "unchanged" && n["served"] == n["fingerprint"]), "{v:#}");
    assert_eq!(v["removed"].as_array().map(Vec::len), Some(0));

    // stg.events changes its rows (breaking: mart.daily and mart.summary indirect), mart.beds adds
    // a column (non-breaking), mart.fresh is new and mart.old is gone.
    write_project(&p, true);
    let plan = p.plan("dev");
    let v = p.run(&["graph", "--env", "dev", "--json"]).expect_code(0).json();
    let node = |name: &str| v["nodes"].as_array().unwrap().iter().find(|n| n["name"] == name).unwrap_or_else(|| panic!("{name}: {v:#}")).clone();
    for (name, state, category) in [
        ("stg.events", "changed", "breaking"),
        ("mart.daily", "indirect", "indirect"),
        ("mart.summary", "indirect", "indirect"),
        ("mart.beds", "changed", "non-breaking"),
        ("mart.fresh", "added", "added"),
        ("raw.events", "unchanged", "unchanged"),
        ("ref.wards", "unchanged", "unchanged"),
        ("core.wards", "unchanged", "unchanged"),
    ] {
        let n = node(name);
        assert_eq!((n["state"].as_str(), n["category"].as_str()), (Some(state), Some(category)), "{name}: {n:#}");
    }
    // The very categories and versions of `efmesh plan dev`.
    for a in actions(&plan).iter().filter(|a| a["change"] != "removed") {
        let n = node(a["name"].as_str().unwrap());
        assert_eq!((&n["category"], &n["fingerprint"]), (&a["change"], &a["fingerprint"]), "{n:#} vs {a:#}");
    }
    assert_eq!(node("mart.fresh")["served"], Value::Null);
    assert_eq!(node("stg.events")["served"], action(&plan, "stg.events")["previous"]);
    let removed = v["removed"].as_array().unwrap();
    assert_eq!(removed.iter().map(|r| r["name"].as_str().unwrap()).collect::<Vec<_>>(), ["mart.old"], "{v:#}");

    let text = p.run(&["graph", "--env", "dev"]).expect_code(0).stdout.clone();
    assert!(
        text.starts_with("8 models in 4 layers, against environment `dev`: 1 added, 1 breaking, 1 non-breaking, 2 indirect, 3 unchanged, 1 removed\n"),
        "{text}"
    );
    assert!(text.lines().any(|l| l.starts_with("  ! breaking      stg.events ")), "{text}");
    assert!(text.lines().any(|l| l.starts_with("  ↻ indirect      mart.daily ")), "{text}");
    let old = removed[0]["served"].as_str().unwrap();
    assert_eq!(action(&plan, "mart.old")["fingerprint"], old, "the version dev serves");
    assert!(text.contains(&format!("removed (served by `dev`, no longer in the project)\n  - mart.old  @{}\n", &old[..12])), "{text}");
    // A selection shows part of the project: what the project no longer has is not listed.
    let v = p.run(&["graph", "--env", "dev", "--select", "mart.daily", "--json"]).expect_code(0).json();
    assert!(v.get("removed").is_none(), "{v:#}");
    let r = p.run(&["graph", "--env", "Dev"]);
    r.expect_code(1);
    assert!(r.stderr.contains("invalid environment name `Dev`"), "{}", r.stderr);
}

/// Debian's Chromium, which `.ci/run` installs. Its absence fails the test: the page is tested
/// in a real browser or not at all.
fn chromium() -> PathBuf {
    for candidate in ["chromium", "chromium-browser"] {
        if let Some(path) = std::env::var_os("PATH").and_then(|paths| std::env::split_paths(&paths).map(|d| d.join(candidate)).find(|p| p.is_file())) {
            return path;
        }
    }
    panic!("headless Chromium is needed to test the graph page and none was found on PATH: install it (`apt-get install chromium`, as .ci/run does)");
}

/// Chromium's DOM of `url` after the page's scripts ran.
fn dump_dom(profile: &Path, url: &str) -> String {
    let mut child = Command::new(chromium())
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions"])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(["--dump-dom", url])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start chromium");
    let mut stdout = child.stdout.take().expect("stdout");
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut stdout, &mut s).map(|_| s)
    });
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(status) = child.try_wait().expect("wait for chromium") {
            assert!(status.success(), "chromium --dump-dom {url}: {status}");
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("chromium --dump-dom {url} took more than 2 minutes");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    reader.join().expect("reader").expect("chromium's output")
}

/// The text of the element with `id` in a serialised DOM: tags dropped, entities decoded.
fn text_of(dom: &str, tag: &str, id: &str) -> String {
    let open = format!("<{tag} ");
    let start = dom
        .match_indices(&open)
        .map(|(i, _)| i)
        .find(|&i| dom[i..].split('>').next().unwrap_or("").contains(&format!("id=\"{id}\"")))
        .unwrap_or_else(|| panic!("no <{tag} id={id}> in the DOM"));
    let inner_start = start + dom[start..].find('>').unwrap() + 1;
    let inner_end = inner_start + dom[inner_start..].find(&format!("</{tag}>")).unwrap();
    let mut text = String::new();
    let mut in_tag = false;
    for c in dom[inner_start..inner_end].chars() {
        match c {
            '<' => in_tag = true,
            '>' if in_tag => in_tag = false,
            c if !in_tag => text.push(c),
            _ => {}
        }
    }
    text.replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", "\"").replace("&#39;", "'").replace("&nbsp;", "\u{a0}").replace("&amp;", "&")
}

/// The `class` of the SVG group drawing `name`.
fn node_class(dom: &str, name: &str) -> String {
    let at = dom.find(&format!("data-name=\"{name}\"")).unwrap_or_else(|| panic!("{name} is not in the DOM"));
    let open = dom[..at].rfind("<g class=\"").unwrap_or_else(|| panic!("{name} is not a <g> node"));
    dom[open + 10..at].trim_end().trim_end_matches('"').to_string()
}

#[test]
fn graph_html_page_draws_every_model_and_a_click_shows_its_sql_in_chromium() {
    let p = Project::new();
    let at = write_project(&p, false);
    p.apply("dev");
    let run = p.run(&["graph", "--html", "dag.html", "--env", "dev"]);
    run.expect_code(0);
    assert_eq!(run.stdout, "DAG written: dag.html\n");
    let page = p.read("dag.html");
    // Self-contained: nothing is fetched.
    for banned in ["<link", "src=", "@import", "http://", "https://"] {
        let outside_svg_namespace = page.replace("xmlns=\"http://www.w3.org/2000/svg\"", "");
        assert!(!outside_svg_namespace.contains(banned), "the page contains `{banned}`");
    }
    // Text is escaped: the description's markup never reaches the page as markup.
    assert!(!page.contains("<b>&amp;</b>") && !page.contains("<b>"), "unescaped description");
    assert!(page.contains("Beds per ward &lt;b&gt;&amp;amp;&lt;/b&gt; &quot;quoted&quot;"), "escaped tooltip");

    let profile = tempfile::tempdir().expect("profile dir");
    let url = format!("file://{}", p.root().join("dag.html").display());
    let dom = dump_dom(profile.path(), &url);
    for name in at.keys() {
        assert_eq!(dom.matches(&format!("data-name=\"{name}\"")).count(), 1, "{name} is drawn once as a node");
        assert_eq!(node_class(&dom, name), "node st-unchanged", "{name} is a node of the SVG");
    }
    assert_eq!(dom.matches("<path class=\"edge\"").count(), 6, "one path per edge");
    assert!(dom.contains("<aside id=\"panel\" class=\"panel\" aria-live=\"polite\" hidden=\"\">"), "no panel before a click");

    // `#select=` dispatches a click on the node: the panel shows the model's SQL as render prints it.
    for name in ["mart.daily", "core.wards", "raw.events"] {
        let dom = dump_dom(profile.path(), &format!("{url}#select={name}"));
        assert!(dom.contains("<aside id=\"panel\" class=\"panel\" aria-live=\"polite\">"), "the panel opened for {name}");
        assert!(node_class(&dom, name).split(' ').any(|c| c == "selected"), "{name} is selected");
        let render = p.run(&["render", name]).expect_code(0).stdout.trim_end().to_string();
        assert_eq!(text_of(&dom, "pre", "panel-sql"), render, "{name}'s SQL in the panel");
        assert_eq!(text_of(&dom, "h2", "panel-name"), name);
        assert_eq!(text_of(&dom, "dd", "panel-location"), at[name]);
        let served = action(&p.plan("dev"), name)["fingerprint"].as_str().unwrap()[..12].to_string();
        assert!(text_of(&dom, "dd", "panel-version").contains(&format!("@{served}")), "{name}: the version dev serves");
    }
    let dom = dump_dom(profile.path(), &format!("{url}#select=mart.daily"));
    // The declared columns, each with the parents' columns it reads (its lineage).
    let columns = text_of(&dom, "table", "panel-columns");
    assert_eq!(
        columns,
        "columntypereadsdaytimestampstg.events.twardvarcharstg.events.wardnEvents that daybigintno parent column: a constant or a row countbedsintegercore.wards.beds",
        "mart.daily's columns and their lineage"
    );
    // Its properties: owner and tags among the facts, the column description under its name.
    assert_eq!(text_of(&dom, "dd", "panel-owner"), "ward-ops");
    assert_eq!(text_of(&dom, "dd", "panel-tags"), "care, daily");
    let dom = dump_dom(profile.path(), &format!("{url}#select=raw.events"));
    assert!(
        text_of(&dom, "table", "panel-columns").starts_with("columntypereadsidbiginta source: its values enter the project here (external)"),
        "a source's columns"
    );
}
