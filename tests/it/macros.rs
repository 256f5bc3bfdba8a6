//! Macros (issue #16, part 1) and audits usable from every language (part 2): functions
//! defined in Lua or Rhai macro files, called as `@name(…)` from `.sql`, Lua and Rhai models;
//! audits defined once (Lua, Rhai, `.sql` audit files) used from models of every language.

use crate::common::*;
use serde_json::Value;
use std::collections::BTreeSet;

/// A project whose models may be Lua, Rhai or SQL files.
fn project() -> Project {
    let p = Project::new();
    p.write("efmesh.toml", &p.config_with("").replace("models/**/*.lua", "models/**/*.{lua,rhai,sql}"));
    p
}

const LUA_MACROS: &str = r#"-- money macros
define_macro("cents_to_dollars", function(column, ...)
  local scale = select(1, ...) or "2"
  return ("round(%s / 100.0, %s)"):format(column, scale)
end)
"#;

const RHAI_MACROS: &str = r#"// text macros
define_macro("clean_text", |column| `upper(trim(${column}))`);
"#;

#[test]
fn a_sql_model_uses_a_lua_macro_and_a_rhai_macro_and_so_do_lua_and_rhai_models() {
    let p = project();
    p.write("macros/money.lua", LUA_MACROS);
    p.write("macros/text.rhai", RHAI_MACROS);
    p.write(
        "models/orders.sql",
        "-- name: s.orders\n-- kind: full\n-- schema: id integer, amount decimal(10, 2), status varchar\n\
         SELECT id, CAST(@cents_to_dollars(amount_cents) AS decimal(10, 2)) AS amount, @clean_text(status) AS status\n\
         FROM (VALUES (1, 1250, ' paid '), (2, 99, 'open')) AS t(id, amount_cents, status)\n",
    );
    p.write(
        "models/l.lua",
        "define_model { name = \"s.l\", kind = kind.full(), schema = { { \"d\", \"decimal(10, 1)\" }, { \"t\", \"varchar\" } },\n  query = \"SELECT CAST(@cents_to_dollars(250, 1) AS decimal(10, 1)) AS d, @clean_text(' x ') AS t\" }\n",
    );
    p.write(
        "models/r.rhai",
        "define_model(#{ name: \"s.r\", kind: kind::full(), schema: [[\"d\", \"decimal(10, 2)\"], [\"t\", \"varchar\"]],\n  query: \"SELECT CAST(@cents_to_dollars(@cents_to_dollars(1000000)) AS decimal(10, 2)) AS d, @clean_text('y') AS t\" });\n",
    );
    p.apply("dev");
    assert_eq!(
        p.rows("dev__s.orders"),
        vec![vec![Some("1".into()), Some("12.50".into()), Some("PAID".into())], vec![Some("2".into()), Some("0.99".into()), Some("OPEN".into())]]
    );
    assert_eq!(p.rows("dev__s.l"), vec![vec![Some("2.5".into()), Some("X".into())]]);
    assert_eq!(p.rows("dev__s.r"), vec![vec![Some("100.00".into()), Some("Y".into())]]);
    // The rendered SQL is the macros' output.
    let sql = p.run(&["render", "s.orders", "--json"]).expect_code(0).json()["sql"].as_str().unwrap().to_string();
    assert!(sql.contains("round(amount_cents / 100.0, 2)") && sql.contains("upper(trim(status))") && !sql.contains('@'), "{sql}");
    let sql = p.run(&["render", "s.r", "--json"]).expect_code(0).json()["sql"].as_str().unwrap().to_string();
    assert!(sql.contains("round(round(1000000 / 100.0, 2) / 100.0, 2)"), "{sql}");
}

#[test]
fn lua_and_rhai_pre_and_post_statements_expand_macros_like_sql_statements() {
    let p = project();
    p.write("macros/m.lua", "define_macro(\"twice\", function(x) return \"(\" .. x .. \") * 2\" end)\n");
    p.write(
        "models/l.lua",
        "define_model { name = \"s.l\", kind = kind.full(), schema = { { \"n\", \"integer\" } },\n  post_statements = \"UPDATE @this SET n = @twice(n)\",\n  query = \"SELECT 21 AS n\" }\n",
    );
    p.write(
        "models/r.rhai",
        "define_model(#{ name: \"s.r\", kind: kind::full(), schema: [[\"n\", \"integer\"]],\n  post_statements: [\"UPDATE @this SET n = @twice(@twice(n))\"],\n  query: \"SELECT 5 AS n\" });\n",
    );
    p.apply("dev");
    assert_eq!(p.rows("dev__s.l"), vec![vec![Some("42".into())]]);
    assert_eq!(p.rows("dev__s.r"), vec![vec![Some("20".into())]]);
    // An unknown macro in a statement is a load error at the model, naming the macro.
    p.write("models/l.lua", &p.read("models/l.lua").replace("@twice(n)", "@twise(n)"));
    let e = p.run(&["check"]).expect_code(1).stdout.clone();
    assert!(e.contains("models/l.lua:1") && e.contains("twise"), "{e}");
}

/// A macro whose output ends in a `--` comment: the rest of the calling line (`AND amount_cents >
/// 500`) still applies, in a `.sql` model and a Lua model's query.
#[test]
fn a_macro_output_ending_in_a_line_comment_does_not_swallow_the_calling_line() {
    let p = project();
    p.write("macros/c.lua", "define_macro(\"is_paid\", function(column)\n  return (\"%s = 'paid' -- settled orders only\"):format(column)\nend)\n");
    let orders = "(VALUES (1, 'paid', 100), (2, 'open', 900), (3, 'paid', 700)) AS t(id, status, amount_cents)";
    p.write(
        "models/paid.sql",
        &format!("-- name: s.paid\n-- kind: full\n-- schema: id integer\nSELECT id FROM {orders}\nWHERE @is_paid(status) AND amount_cents > 500\n"),
    );
    p.write(
        "models/l.lua",
        &format!("define_model {{ name = \"s.l\", kind = kind.full(), schema = {{ {{ \"id\", \"integer\" }} }},\n  query = \"SELECT id FROM {orders} WHERE @is_paid(status) AND amount_cents > 500 ORDER BY id\" }}\n"),
    );
    p.apply("dev");
    assert_eq!(p.rows("dev__s.paid"), vec![vec![Some("3".into())]]);
    assert_eq!(p.rows("dev__s.l"), vec![vec![Some("3".into())]]);
}

/// The models whose plan action is a change (not `unchanged`).
fn changed(v: &Value) -> BTreeSet<String> {
    actions(v).iter().filter(|a| a["change"] != "unchanged").map(|a| a["name"].as_str().unwrap().to_string()).collect()
}

#[test]
fn editing_a_macro_rebuilds_exactly_the_callers_whose_rendered_sql_changed() {
    let p = project();
    let macros = |scale: &str, keep: &str| {
        format!(
            "define_macro(\"scaled\", function(c) return c .. \" * {scale}\" end)\n\
             define_macro(\"kept\", function(c) {keep} end)\n"
        )
    };
    p.write("macros/m.lua", &macros("10", "return c .. \" + 1\""));
    p.write("models/a.sql", "-- name: s.a\n-- kind: full\n-- schema: x integer\nSELECT @scaled(2) AS x\n");
    p.write("models/b.lua", "define_model { name = \"s.b\", kind = kind.full(), schema = { { \"x\", \"integer\" } }, query = \"SELECT @scaled(3) AS x\" }\n");
    p.write("models/c.rhai", "define_model(#{ name: \"s.c\", kind: kind::full(), schema: [[\"x\", \"integer\"]], query: \"SELECT @kept(4) AS x\" });\n");
    p.write("models/d.sql", "-- name: s.d\n-- kind: full\n-- schema: x integer\nSELECT 5 AS x\n");
    p.apply("dev");
    assert_eq!(p.rows("dev__s.a"), vec![vec![Some("20".into())]]);
    // `scaled` now renders another SQL; `kept` is written differently but renders the same.
    p.write("macros/m.lua", &macros("100", "local plus = \" + \"\n  return c .. plus .. \"1\""));
    let v = p.plan("dev");
    assert_eq!(changed(&v), set(&["s.a", "s.b"]), "{v:#}");
    p.apply("dev");
    assert_eq!(p.rows("dev__s.a"), vec![vec![Some("200".into())]]);
    assert_eq!(p.rows("dev__s.b"), vec![vec![Some("300".into())]]);
    assert_eq!(p.rows("dev__s.c"), vec![vec![Some("5".into())]]);
    // An edit that changes no caller's output changes nothing.
    p.write("macros/m.lua", &format!("-- a comment\n{}", macros("100", "return c .. ' + 1'")));
    assert!(changed(&p.plan("dev")).is_empty());
}

const POSITIVE_LUA: &str = r#"define_audit {
  name = "positive",
  params = { "column" },
  query = function(self, args)
    return ("SELECT * FROM %s WHERE %s <= 0"):format(self, args.column)
  end,
}
"#;

#[test]
fn a_lua_audit_serves_a_rhai_model_and_a_sql_model() {
    let p = project();
    p.write("audits/positive.lua", POSITIVE_LUA);
    let rhai = |from: i32| {
        format!(
            "define_model(#{{ name: \"r.m\", kind: kind::full(), schema: [[\"x\", \"integer\"]], audits: [audit(\"positive\", \"x\"), audit(\"not_null\", \"x\")],\n  query: \"SELECT CAST(i AS INTEGER) AS x FROM generate_series({from}, 3) AS g(i)\" }});\n"
        )
    };
    let sql = |from: i32| {
        format!(
            "-- name: q.m\n-- kind: full\n-- schema: x integer\n-- audits: positive(x), not_null(x), unique(x), accepted_range(column = x, min = -100, blocking = false)\nSELECT CAST(i AS INTEGER) AS x FROM generate_series({from}, 3) AS g(i)\n"
        )
    };
    p.write("models/r.rhai", &rhai(1));
    p.write("models/q.sql", &sql(1));
    let v = p.apply("dev");
    let audits = v["audits"].as_array().unwrap();
    let ran: BTreeSet<String> =
        audits.iter().map(|a| format!("{} {} {}", a["model"].as_str().unwrap(), a["audit"].as_str().unwrap(), a["violations"])).collect();
    for expected in
        ["r.m positive(x) 0", "r.m not_null(x) 0", "q.m positive(x) 0", "q.m not_null(x) 0", "q.m unique(x) 0", "q.m accepted_range(x, min = -100) 0"]
    {
        assert!(ran.contains(expected), "{expected} in {ran:?}");
    }
    // Violating rows: the apply fails naming the audit and the model, and promotes nothing.
    p.write("models/r.rhai", &rhai(-1));
    let run = p.run(&["apply", "dev", "--yes"]);
    run.expect_code(1);
    assert!(run.stderr.contains("audit `positive(x)` on model `r.m`") && run.stderr.contains("2 violating rows"), "{}", run.stderr);
    p.write("models/r.rhai", &rhai(1));
    p.write("models/q.sql", &sql(0));
    let run = p.run(&["apply", "dev", "--yes"]);
    run.expect_code(1);
    assert!(run.stderr.contains("audit `positive(x)` on model `q.m`") && run.stderr.contains("1 violating row"), "{}", run.stderr);
    assert_eq!(p.rows("dev__q.m").len(), 3, "the served data is the clean version");
}

#[test]
fn a_sql_audit_file_serves_a_lua_model_and_a_rhai_model() {
    let p = project();
    p.write(
        "audits/at_most.sql",
        "-- name: at_most\n-- params: column, limit\n-- scope: whole\n-- description: rows above the limit\nSELECT *\nFROM @this_model\nWHERE @column > @limit\n",
    );
    let lua = |to: i32| {
        format!(
            "define_model {{ name = \"l.m\", kind = kind.full(), schema = {{ {{ \"x\", \"integer\" }} }}, audits = {{ audit.at_most(\"x\", 10) }},\n  query = \"SELECT CAST(i AS INTEGER) AS x FROM generate_series(1, {to}) AS g(i)\" }}\n"
        )
    };
    p.write("models/l.lua", &lua(10));
    p.write(
        "models/r.rhai",
        "define_model(#{ name: \"r.m\", kind: kind::full(), schema: [[\"x\", \"integer\"]], audits: [audit(\"at_most\", #{ column: \"x\", limit: 2, blocking: false })],\n  query: \"SELECT CAST(i AS INTEGER) AS x FROM generate_series(1, 3) AS g(i)\" });\n",
    );
    let v = p.apply("dev");
    let by = |model: &str| v["audits"].as_array().unwrap().iter().find(|a| a["model"] == model).unwrap().clone();
    assert_eq!((by("l.m")["audit"].as_str(), by("l.m")["violations"].as_u64(), by("l.m")["scope"].as_str()), (Some("at_most(x, 10)"), Some(0), Some("whole")));
    assert_eq!((by("r.m")["violations"].as_u64(), by("r.m")["blocking"].as_bool()), (Some(1), Some(false)));
    p.write("models/l.lua", &lua(12));
    let run = p.run(&["apply", "dev", "--yes"]);
    run.expect_code(1);
    assert!(run.stderr.contains("audit `at_most(x, 10)` on model `l.m`") && run.stderr.contains("2 violating rows"), "{}", run.stderr);
}

#[test]
fn load_errors_name_the_calling_file_and_line_and_the_macro() {
    let p = project();
    p.write("audits/positive.lua", POSITIVE_LUA);
    p.write(
        "macros/money.lua",
        &format!(
            "{LUA_MACROS}define_macro(\"explode\", function(c)\n  error(\"cannot explode \" .. c)\nend)\ndefine_macro(\"number\", function() return 42 end)\n"
        ),
    );
    p.write("macros/text.rhai", RHAI_MACROS);
    p.write("models/ok.sql", "-- name: s.ok\n-- kind: full\n-- schema: x integer\nSELECT 1 AS x\n");
    p.write(
        "models/bad.sql",
        "-- name: s.bad\n-- kind: full\n-- schema: a decimal, b varchar, c integer, d integer, e integer\n-- audits: postive(a)\n\
         SELECT @cent_to_dollars(x) AS a,\n  @explode(y) AS b,\n  @clean_text(p, q) AS c, @number(1) AS d,\n  @number() AS e\nFROM t\n",
    );
    p.write(
        "models/bad.lua",
        "local x = 1\ndefine_model { name = \"s.badl\", kind = kind.full(), schema = { { \"x\", \"varchar\" } }, query = \"SELECT @clean_txt(x) AS x\" }\n",
    );
    let run = p.run(&["plan", "dev"]);
    run.expect_code(1);
    let err = &run.stderr;
    for expected in [
        "models/bad.sql:4: model `s.bad`: unknown audit `postive`",
        "did you mean `positive`?",
        "models/bad.sql:5: model `s.bad`: unknown macro `@cent_to_dollars`",
        "did you mean `@cents_to_dollars`?",
        "models/bad.sql:6: model `s.bad`: macro `@explode` (macros/money.lua:6) failed: macros/money.lua:7: cannot explode y",
        "models/bad.sql:7: model `s.bad`: macro `@clean_text` (macros/text.rhai:2) takes 1 argument, got 2",
        "models/bad.sql:7: model `s.bad`: macro `@number` (macros/money.lua:9) takes 0 arguments, got 1",
        "models/bad.sql:8: model `s.bad`: macro `@number` (macros/money.lua:9) must return a string of SQL, got integer",
        "models/bad.lua:2: model `s.badl`: unknown macro `@clean_txt`",
        "did you mean `@clean_text`?",
    ] {
        assert!(err.contains(expected), "`{expected}` in:\n{err}");
    }
}

#[test]
fn macro_definitions_are_checked() {
    let p = project();
    p.write("macros/a.lua", "define_macro(\"ref\", function(x) return x end)\ndefine_macro(\"twice\", function(x) return x end)\n");
    p.write("macros/b.rhai", "define_macro(\"twice\", |x| x);\n");
    p.write("models/m.lua", "define_macro(\"late\", function(x) return x end)\n");
    p.write("models/ok.sql", "-- name: s.ok\n-- kind: full\n-- schema: x integer\nSELECT 1 AS x\n");
    let run = p.run(&["plan", "dev"]);
    run.expect_code(1);
    let err = &run.stderr;
    for expected in [
        "macros/a.lua:1: `@ref` is reserved by efmesh: a macro cannot be named `ref`",
        "macros/b.rhai:1: macro `twice` is already defined (defined at macros/a.lua:2)",
        "models/m.lua:1: runtime error: `define_macro` belongs in macro files",
    ] {
        assert!(err.contains(expected), "`{expected}` in:\n{err}");
    }
}

/// The README's jaffle-style example, as written there: a `.sql` staging model using a Lua
/// macro, built-in audits and a `.sql` audit file.
#[test]
fn the_readme_staging_example_builds_and_its_audits_fire() {
    let p = project();
    let readme = fs_err::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let block = |first_line: &str| -> String {
        let start = readme
            .find(&format!("```{}\n{first_line}\n", if first_line.starts_with("-- macros") { "lua" } else { "sql" }))
            .unwrap_or_else(|| panic!("no README block {first_line}"));
        let body = &readme[start..];
        let body = &body[body.find('\n').unwrap() + 1..];
        body[..body.find("```").unwrap()].to_string()
    };
    p.write("macros/money.lua", &block("-- macros/money.lua"));
    p.write("audits/positive.sql", &block("-- audits/positive.sql"));
    p.write("models/staging/stg_payments.sql", &block("-- models/staging/stg_payments.sql"));
    p.write(
        "models/raw.sql",
        "-- name: raw.payments\n-- kind: external(path = data/payments.csv)\n-- schema: id integer, order_id integer, payment_method varchar, amount integer\n",
    );
    p.write("data/payments.csv", "id,order_id,payment_method,amount\n1,1,credit_card,1000\n2,2,coupon,250\n");
    let v = p.apply("dev");
    assert_eq!(v["audits"].as_array().unwrap().len(), 4, "{v:#}");
    assert_eq!(
        p.rows("dev__stg.payments"),
        vec![
            vec![Some("1".into()), Some("1".into()), Some("credit_card".into()), Some("10.00".into())],
            vec![Some("2".into()), Some("2".into()), Some("coupon".into()), Some("2.50".into())]
        ]
    );
    p.write("data/payments.csv", "id,order_id,payment_method,amount\n1,1,credit_card,1000\n2,2,coupon,-250\n");
    let run = p.run(&["audit", "dev"]);
    run.expect_code(1);
    assert!(run.stdout.contains("positive(amount)") && run.stdout.contains("1 violating row"), "{}", run.stdout);
}

#[test]
fn a_file_a_macro_loads_only_when_called_is_an_input_of_its_callers() {
    // A Lua macro `require`s its helper inside its function, a Rhai one `import`s inside its
    // function: the files are read when a model calls them, and are inputs of that model's
    // file all the same (its load cache entry, the project cache).
    let p = project();
    p.write("macros/m.lua", "define_macro(\"fn_lua\", function(c) local h = require(\"lib.h\"); return h.f .. \"(\" .. c .. \")\" end)\n");
    p.write("lib/h.lua", "return { f = \"upper\" }\n");
    p.write("macros/r.rhai", "fn imp(c) { import \"lib/rh\" as rh; `${rh::f()}(${c})` }\ndefine_macro(\"fn_rhai\", Fn(\"imp\"));\n");
    p.write("lib/rh.rhai", "fn f() { \"upper\" }\n");
    p.write("models/t.sql", "-- name: s.t\n-- kind: full\n-- schema: a varchar, b varchar\nSELECT @fn_lua('x') AS a, @fn_rhai('y') AS b\n");
    p.write("models/u.lua", "define_model { name = \"s.u\", kind = kind.full(), schema = { { \"a\", \"varchar\" } }, query = \"SELECT @fn_lua('z') AS a\" }\n");
    p.apply("dev");
    assert_eq!(p.rows("dev__s.t"), vec![vec![Some("X".to_string()), Some("Y".to_string())]]);
    // Each helper edited alone: the callers change (the caches say so, no `.efmesh` removed).
    p.write("lib/h.lua", "return { f = \"lower\" }\n");
    let plan = p.plan("dev");
    assert_eq!((action(&plan, "s.t")["change"].as_str(), action(&plan, "s.u")["change"].as_str()), (Some("breaking"), Some("breaking")), "{plan:#}");
    p.apply("dev");
    p.write("lib/rh.rhai", "fn f() { \"lower\" }\n");
    let plan = p.plan("dev");
    assert_eq!((action(&plan, "s.t")["change"].as_str(), action(&plan, "s.u")["change"].as_str()), (Some("breaking"), Some("unchanged")), "{plan:#}");
    p.apply("dev");
    assert_eq!(p.rows("dev__s.t"), vec![vec![Some("x".to_string()), Some("y".to_string())]]);
    assert_eq!(p.rows("dev__s.u"), vec![vec![Some("z".to_string())]]);
}

#[test]
fn a_macro_keeping_state_between_calls_is_refused_naming_it() {
    // A counter: its SQL would depend on which files were evaluated before the caller (a comment
    // edit re-evaluating one file alone would change its data). Lua and Rhai alike: the first
    // call's write is refused, naming what it wrote.
    let p = project();
    p.write("macros/m.lua", "local n = 0\ndefine_macro(\"seq\", function() n = n + 1; return tostring(n) end)\n");
    p.write("macros/r.rhai", "let n = [0];\ndefine_macro(\"rseq\", |c| { n[0] += 1; `${c} + ${n[0]}` });\n");
    p.write("models/t1.sql", "-- name: s.t1\n-- kind: full\n-- schema: x integer\nSELECT @seq() AS x\n");
    p.write("models/t2.sql", "-- name: s.t2\n-- kind: full\n-- schema: x integer\nSELECT @rseq(1) AS x\n");
    let run = p.run(&["plan", "dev"]);
    run.expect_code(1);
    for expected in [
        "models/t1.sql:4: model `s.t1`: macro `@seq` (macros/m.lua:2) writes state that outlives the call (`n`)",
        "models/t2.sql:4: model `s.t2`: macro `@rseq` (macros/r.rhai:2) writes state that outlives the call (`n`)",
        "a macro must be a pure function of its arguments",
    ] {
        assert!(run.stderr.contains(expected), "`{expected}` in:\n{}", run.stderr);
    }
}

/// One macro wrote a table of its file that another one read (`@set(7)` in one model, `@get()`
/// in another): calling each twice saw nothing, and `s.y` got 7 or 1 depending on whether the
/// macro interpreter served `s.x` first — on the load cache (a comment edit of `y.sql` alone
/// re-planned it as breaking with 1) and on thread timing. Now the write is a load error at the
/// call naming the macro, its file:line and what it wrote, on any number of threads; a macro
/// reading the same table (and building tables of its own) loads, and gives the same SQL
/// whether its file is evaluated alone or not.
#[test]
fn a_macro_writing_state_another_macro_reads_is_a_load_error_on_any_number_of_threads() {
    let p = project();
    p.write(
        "macros/state.lua",
        "local shared = { v = \"1\" }\ndefine_macro(\"set\", function(x) shared.v = x; return \"0\" end)\ndefine_macro(\"get\", function() return shared.v end)\n",
    );
    p.write("macros/state.rhai", "let state = [\"1\"];\ndefine_macro(\"rset\", |x| { state[0] = x; \"0\" });\ndefine_macro(\"rget\", || state[0]);\n");
    p.write("models/src.sql", "-- name: s.src\n-- kind: full\n-- schema: id integer\nSELECT 1 AS id\n");
    let model = |name: &str, column: &str, call: &str| {
        format!("-- name: s.{name}\n-- kind: full\n-- schema: id integer, {column} integer\n-- refs: s.src\nSELECT id, {call} AS {column} FROM @ref(s.src)\n")
    };
    p.write("models/x.sql", &model("x", "z", "@set(7)"));
    p.write("models/y.sql", &model("y", "v", "@get()"));
    p.write("models/rx.sql", &model("rx", "z", "@rset(8)"));
    p.write("models/ry.sql", &model("ry", "v", "@rget()"));
    check_fails_on_any_threads(
        &p,
        &[
            "models/x.sql:5: model `s.x`: macro `@set` (macros/state.lua:2) writes state that outlives the call (`shared.v`): a macro must be a pure function of its arguments",
            "models/rx.sql:5: model `s.rx`: macro `@rset` (macros/state.rhai:2) writes state that outlives the call (`state`)",
        ],
        &["models/y.sql", "models/ry.sql"],
    );
    // Reading the file's table, building and changing tables of its own: no state kept.
    p.write(
        "macros/state.lua",
        "local shared = { v = \"1\" }\ndefine_macro(\"set\", function(x) local mine = { v = x }; mine.v = mine.v .. \"\"; return \"0\" end)\ndefine_macro(\"get\", function() return shared.v end)\n",
    );
    p.write(
        "macros/state.rhai",
        "let state = [\"1\"];\ndefine_macro(\"rset\", |x| { let mine = state; mine[0] = x; \"0\" });\ndefine_macro(\"rget\", || state[0]);\n",
    );
    p.apply("dev");
    assert_eq!(p.rows("dev__s.y"), vec![vec![Some("1".into()), Some("1".into())]]);
    assert_eq!(p.rows("dev__s.ry"), vec![vec![Some("1".into()), Some("1".into())]]);
    // A comment edit re-evaluates `y.sql` alone (the load cache): the same SQL.
    p.write("models/y.sql", &format!("{}-- a comment\n", model("y", "v", "@get()")));
    assert!(changed(&p.plan("dev")).is_empty());
}

/// `efmesh check` of `p` on one and on two load threads (what a load computes must not depend on
/// them, SPEC §4 invariant 34): exit 1 saying every `expected`; a line naming one of
/// `not_blamed` is only the refusal of a request made after a write (the macro interpreter
/// answers nothing more once one of its calls wrote state), listed after every other error.
#[track_caller]
fn check_fails_on_any_threads(p: &Project, expected: &[&str], not_blamed: &[&str]) {
    for threads in ["1", "2"] {
        let said = check_on(p, threads);
        for e in expected {
            assert!(said.contains(e), "{threads} threads: `{e}` in:\n{said}");
        }
        let lines: Vec<&str> = said.lines().filter(|l| l.starts_with("models/") || l.starts_with("macros/")).collect();
        let refusals = lines.iter().position(|l| l.contains(NOT_RUN)).unwrap_or(lines.len());
        assert!(lines[refusals..].iter().all(|l| l.contains(NOT_RUN)), "{threads} threads: refusals come last: {said}");
        for n in not_blamed {
            assert!(said.lines().filter(|l| l.contains(n)).all(|l| l.contains(NOT_RUN)), "{threads} threads: `{n}` is not blamed: {said}");
        }
    }
}

/// What a request the macro interpreter refused after a write says, after its subject.
const NOT_RUN: &str = "was not run: earlier in this load";

/// `efmesh check` of `p` on `threads` load threads, which must fail: what it said.
#[track_caller]
fn check_on(p: &Project, threads: &str) -> String {
    let out = p.command(&["check"]).env("EFMESH_LOAD_THREADS", threads).output().expect("spawn efmesh");
    let run = Run::from_output(out, format!("EFMESH_LOAD_THREADS={threads} efmesh check"));
    run.expect_code(1);
    format!("{}{}", run.stdout, run.stderr)
}

/// `efmesh render <model>` on one load thread (files evaluated in path order), which must
/// succeed: the SQL.
#[track_caller]
fn rendered_on_one_thread(p: &Project, model: &str) -> String {
    let out = p.command(&["render", model]).env("EFMESH_LOAD_THREADS", "1").output().expect("spawn efmesh");
    let run = Run::from_output(out, format!("EFMESH_LOAD_THREADS=1 efmesh render {model}"));
    run.expect_code(0);
    run.stdout
}

/// A macro that wrote state and then raised an error left the write behind: the error was
/// reported as `failed: boom`, the changed state became what later calls were checked against,
/// and `s.b`, evaluated after it, was cached with `'polluted'` — served so by every later load
/// once `s.a` was fixed, until the caches were deleted (`'orig'`). Lua and Rhai alike. Now the
/// write is the error, whatever the call did after it, and the interpreter answers nothing more
/// in that load: `s.b` has an error (a refusal naming the write), so it is not cached, and the
/// next load gives `'orig'` — on one thread (`s.b` after the write) and on two.
#[test]
fn a_macro_writing_state_then_raising_is_the_write_and_nothing_served_after_it_is_cached() {
    let p = project();
    p.write(
        "macros/m.lua",
        "local shared = { v = \"orig\" }\ndefine_macro(\"m\", function(x)\n  if x == \"boom\" then shared.v = \"polluted\"; error(\"boom\") end\n  return \"'\" .. shared.v .. \"'\"\nend)\n",
    );
    p.write(
        "macros/r.rhai",
        "let st = #{ v: \"orig\" };\ndefine_macro(\"rm\", |x| {\n  if x == \"boom\" { st.v = \"polluted\"; throw \"boom\"; }\n  \"'\" + st.v + \"'\"\n});\n",
    );
    let model = |name: &str, call: &str| format!("-- name: s.{name}\n-- kind: full\n-- schema: t varchar\nSELECT {call} AS t\n");
    p.write("models/a.sql", &model("a", "@m(boom)"));
    p.write("models/b.sql", &model("b", "@m(ok)"));
    p.write("models/ra.sql", &model("ra", "@rm(boom)"));
    p.write("models/rb.sql", &model("rb", "@rm(ok)"));
    let writes = [
        "models/a.sql:4: model `s.a`: macro `@m` (macros/m.lua:2) writes state that outlives the call (`shared.v`): a macro must be a pure function of its arguments",
        "models/ra.sql:4: model `s.ra`: macro `@rm` (macros/r.rhai:2) writes state that outlives the call (`st`)",
    ];
    // One thread: `b.sql` comes after `a.sql`, `rb.sql` after `ra.sql`: refused, naming the write.
    let said = check_on(&p, "1");
    for (at, refusal) in [
        (
            "models/b.sql:4: model `s.b`: ",
            "macro `@m` was not run: earlier in this load macro `@m` (macros/m.lua:2) wrote state that outlives its call (`shared.v`)",
        ),
        (
            "models/rb.sql:4: model `s.rb`: ",
            "macro `@rm` was not run: earlier in this load macro `@rm` (macros/r.rhai:2) wrote state that outlives its call (`st`)",
        ),
    ] {
        assert!(said.contains(&format!("{at}{refusal}")), "`{at}{refusal}` in:\n{said}");
    }
    assert!(!said.contains(") failed:"), "the write is the error, not the error raised after it: {said}");
    check_fails_on_any_threads(&p, &writes, &["models/b.sql", "models/rb.sql"]);
    // The calls fixed: nothing computed from the changed state was cached (`s.b`, `s.rb`: `'orig'`).
    p.write("models/a.sql", &model("a", "@m(fine)"));
    p.write("models/ra.sql", &model("ra", "@rm(fine)"));
    for m in ["s.b", "s.rb"] {
        let sql = rendered(&p, m);
        assert!(sql.contains("SELECT 'orig' AS t"), "{m}: {sql}");
    }
}

/// An iterator made at the top of a macro file (`gmatch`'s, `pairs`'s: efmesh's own functions
/// and C functions were not followed by the state check) advanced at each call: three models
/// calling `@tag()` got `'a'`, `'b'`, `'c'` by load order, and editing one alone gave it `'a'`
/// (the first call twice saw `'a'` twice: the sequence starts with two equal values). Now a
/// macro reaching such a function is refused before its call, naming it, at every call, on any
/// number of threads and after an edit of one model alone; made inside the call, it loads, and
/// every model gets `'a'`.
#[test]
fn a_macro_reaching_an_iterator_made_outside_it_is_refused_naming_it() {
    let p = project();
    let tag = |n: u32| format!("-- name: s.m{n}\n-- kind: full\n-- schema: t varchar\nSELECT @tag() AS t\n");
    for n in 1..=3 {
        p.write(&format!("models/m{n}.sql"), &tag(n));
    }
    for (source, iterator) in [
        ("local it = (\"a a b c d e f g h\"):gmatch(\"%a\")\ndefine_macro(\"tag\", function() return \"'\" .. it() .. \"'\" end)\n", "gmatch"),
        ("local it = pairs({ \"a\", \"a\", \"b\", \"c\" })\ndefine_macro(\"tag\", function() local _, v = it(); return \"'\" .. v .. \"'\" end)\n", "pairs"),
    ] {
        p.write("macros/m.lua", source);
        let refused = |n: u32| {
            format!(
                "models/m{n}.sql:4: model `s.m{n}`: macro `@tag` (macros/m.lua:2) reaches `it`, a function made by a library call outside it (an iterator of `string.gmatch` or `pairs`) or a coroutine"
            )
        };
        let all: Vec<String> = (1..=3).map(refused).collect();
        check_fails_on_any_threads(&p, &all.iter().map(String::as_str).collect::<Vec<_>>(), &[]);
        // An edit of one model alone (the others failed: nothing was cached): refused the same.
        p.write("models/m3.sql", &format!("{}-- {iterator}\n", tag(3)));
        let said = check_on(&p, "1");
        assert!(all.iter().all(|e| said.contains(e.as_str())), "{iterator}: {said}");
        p.write("models/m3.sql", &tag(3));
    }
    // Made inside the call: every model gets the first word, also after an edit of one alone.
    p.write(
        "macros/m.lua",
        "define_macro(\"tag\", function()\n  local it = (\"a a b c\"):gmatch(\"%a\")\n  local step = pairs({ \"\" })\n  local _, v = step()\n  return \"'\" .. it() .. v .. \"'\"\nend)\n",
    );
    for n in 1..=3 {
        assert!(rendered_on_one_thread(&p, &format!("s.m{n}")).contains("SELECT 'a' AS t"));
    }
    p.write("models/m3.sql", &format!("{}-- edited\n", tag(3)));
    assert!(rendered_on_one_thread(&p, "s.m3").contains("SELECT 'a' AS t"));
}

/// `next(t, k)` kept the sorted keys of a table from one call to the next (efmesh's own code,
/// which the state check does not follow): a macro call writing a key and removing it again
/// (no write left) had `next` sort the keys with it, and a later call adding another key walked
/// the stale order — `'b'` on a cold load of both models, `'b,c'` after an edit of the walking
/// model alone (the load cache). Now a walk's sorted keys are kept only along the walk, and
/// dropped before every call: `'b,c'` both ways.
#[test]
fn next_walks_the_keys_a_table_holds_whatever_an_earlier_call_walked() {
    let p = project();
    p.write(
        "macros/m.lua",
        "local t = { a = 1, b = 2 }\ndefine_macro(\"m\", function(x)\n  if x == \"prime\" then t.z = 1; next(t, \"a\"); t.z = nil; return \"0\" end\n  \
         t.c = 1\n  local o = {}\n  local k = next(t, \"a\")\n  while k do o[#o + 1] = k; k = next(t, k) end\n  t.c = nil\n  \
         return \"'\" .. table.concat(o, \",\") .. \"'\"\nend)\n",
    );
    p.write("models/m1.sql", "-- name: s.m1\n-- kind: full\n-- schema: t varchar\nSELECT @m(prime) AS t\n");
    let walk = "-- name: s.m2\n-- kind: full\n-- schema: t varchar\nSELECT @m(walk) AS t\n";
    p.write("models/m2.sql", walk);
    // One thread: `m1.sql` (the priming call) is served first.
    assert!(rendered_on_one_thread(&p, "s.m2").contains("SELECT 'b,c' AS t"));
    p.write("models/m2.sql", &format!("{walk}-- edited\n"));
    assert!(rendered_on_one_thread(&p, "s.m2").contains("SELECT 'b,c' AS t"));
}

/// An audit body of the macro files reaches their state as their macros do: one writing what a
/// macro reads is a load error naming the audit, its definition's file:line and what it wrote
/// (the write went unchecked before: the macro answered `2` after the audit's use was served and
/// `1` after a comment edit of its own model alone).
#[test]
fn an_audit_body_writing_state_a_macro_reads_is_a_load_error() {
    let p = project();
    p.write(
        "macros/aud.lua",
        "local shared = { v = \"1\" }\ndefine_audit { name = \"sneaky\", params = { \"column\" },\n  query = function(self, args) shared.v = \"2\"\n    return (\"SELECT * FROM %s WHERE %s IS NULL\"):format(self, args.column) end }\ndefine_macro(\"getv\", function() return shared.v end)\n",
    );
    p.write(
        "macros/aud.rhai",
        "let state = [\"1\"];\ndefine_audit(#{ name: \"rsneaky\", params: [\"column\"], query: |rel, args| { state[0] = \"2\"; `SELECT * FROM ${rel} WHERE ${args.column} IS NULL` } });\ndefine_macro(\"rgetv\", || state[0]);\n",
    );
    p.write("models/a1.sql", "-- name: s.a1\n-- kind: full\n-- schema: x integer\n-- audits: sneaky(x)\nSELECT 1 AS x\n");
    p.write("models/a2.sql", "-- name: s.a2\n-- kind: full\n-- schema: x integer\n-- audits: rsneaky(x)\nSELECT 1 AS x\n");
    p.write("models/a3.sql", "-- name: s.a3\n-- kind: full\n-- schema: y integer\nSELECT @getv() AS y\n");
    p.write("models/a4.sql", "-- name: s.a4\n-- kind: full\n-- schema: y integer\nSELECT @rgetv() AS y\n");
    check_fails_on_any_threads(
        &p,
        &[
            "audit `sneaky` (macros/aud.lua:2) writes state that outlives the call (`shared.v`)",
            "audit `rsneaky` (macros/aud.rhai:2) writes state that outlives the call (`state`)",
        ],
        &["models/a3.sql", "models/a4.sql"],
    );
    // An audit body building its own tables and reading the file's: the macros answer `1`.
    p.write(
        "macros/aud.lua",
        "local shared = { v = \"1\" }\ndefine_audit { name = \"sneaky\", params = { \"column\" },\n  query = function(self, args) local mine = { v = shared.v }; mine.v = \"2\"\n    return (\"SELECT * FROM %s WHERE %s IS NULL\"):format(self, args.column) end }\ndefine_macro(\"getv\", function() return shared.v end)\n",
    );
    p.write(
        "macros/aud.rhai",
        "let state = [\"1\"];\ndefine_audit(#{ name: \"rsneaky\", params: [\"column\"], query: |rel, args| { let mine = state; mine[0] = \"2\"; `SELECT * FROM ${rel} WHERE ${args.column} IS NULL` } });\ndefine_macro(\"rgetv\", || state[0]);\n",
    );
    p.apply("dev");
    assert_eq!(p.rows("dev__s.a3"), vec![vec![Some("1".into())]]);
    assert_eq!(p.rows("dev__s.a4"), vec![vec![Some("1".into())]]);
}

/// A macro's mistakes are load errors at the call saying what went wrong, within bounds: a
/// table raised (`failed: table` before), extra values returned or an extra argument to
/// `define_macro` (ignored silently before), a NUL byte in its SQL (`check` passed with a
/// warning and `apply` failed with the engine's "nul byte found in provided data"), and a
/// megabyte of output (pasted whole into each error quoting a name from it).
#[test]
fn a_macros_mistakes_are_load_errors_saying_what_within_bounds() {
    let p = project();
    p.write(
        "macros/m.lua",
        "define_macro(\"boom\", function(x)\n  error({ code = 1, why = \"bad \" .. x, list = { 1, 2 } })\nend)\n\
         define_macro(\"two\", function(x) return x, \"x\" end)\n\
         define_macro(\"nul\", function(x) return x .. \"\\0\" end)\n",
    );
    p.write("macros/extra.lua", "define_macro(\"three\", function(x) return x end, 3)\n");
    for m in ["boom", "two", "nul"] {
        p.write(&format!("models/{m}.sql"), &format!("-- name: s.{m}\n-- kind: full\n-- schema: v integer\nSELECT @{m}(1) AS v\n"));
    }
    let run = p.run(&["check"]);
    run.expect_code(1);
    let said = format!("{}{}", run.stdout, run.stderr);
    for expected in [
        "models/boom.sql:4: model `s.boom`: macro `@boom` (macros/m.lua:1) failed: macros/m.lua:2: {code = 1, list = {1, 2}, why = \"bad 1\"}",
        "models/two.sql:4: model `s.two`: macro `@two` (macros/m.lua:4) returned 2 values: a macro returns one string of SQL",
        "models/nul.sql:4: model `s.nul`: macro `@nul` (macros/m.lua:5) returned SQL holding a NUL byte (`\\0`, at byte 1 of `1\\0`): no engine reads it",
        "macros/extra.lua:1: runtime error: `define_macro` takes a name and a function, e.g. `define_macro(\"cents_to_dollars\", function(column) … end)`, got 3 arguments",
    ] {
        assert!(said.contains(expected), "`{expected}` in:\n{said}");
    }
    assert!(!said.contains('\0'), "{said}");
    // A megabyte of SQL: each error quoting a name from it quotes a bounded excerpt and its length.
    for f in ["macros/extra.lua", "models/boom.sql", "models/two.sql", "models/nul.sql"] {
        p.remove(f);
    }
    p.write("macros/m.lua", "define_macro(\"big\", function(x) return x .. \" + \" .. (\"x\"):rep(1024 * 1024) end)\n");
    p.write("models/big.sql", "-- name: s.big\n-- kind: full\n-- schema: v integer\nSELECT @big(1) AS v\n");
    for args in [&["check"][..], &["apply", "dev", "--yes"]] {
        let run = p.run(args);
        run.expect_code(1);
        let said = format!("{}{}", run.stdout, run.stderr);
        assert!(said.len() < 64 * 1024, "{args:?}: {} bytes said", said.len());
        assert!(said.contains("models/big.sql") && said.contains("bytes)") && !said.contains(&"x".repeat(2000)), "{args:?}: {said}");
    }
}

#[test]
fn a_macro_returning_a_call_of_another_macro_is_a_load_error_not_sql_the_engine_reads_otherwise() {
    // Not expanded again: `@greatest(v, -100)` left in the SQL is DuckDB's `abs(greatest(…))`,
    // which served 7 where the query meant -7 (exit 0).
    let p = project();
    p.write(
        "macros/m.lua",
        "define_macro(\"greatest\", function(a, b) return (\"greatest(%s, %s)\"):format(a, b) end)\n\
         define_macro(\"clamp\", function(v) return (\"@greatest(%s, -100)\"):format(v) end)\n",
    );
    p.write(
        "models/l.lua",
        "define_model { name = \"s.l\", kind = kind.full(), schema = { { \"x\", \"integer\" } },\n  query = \"SELECT @clamp(-7) AS x\" }\n",
    );
    for args in [&["check"][..], &["apply", "dev", "--yes"]] {
        let r = p.run(args);
        r.expect_code(1);
        let said = format!("{}{}", r.stdout, r.stderr);
        assert!(
            said.contains("models/l.lua:1") && said.contains("macro `@clamp` returned a macro call `@greatest(…)`, which is not expanded again"),
            "{args:?}: {said}"
        );
    }
    // As an argument it is expanded first: fine.
    p.write(
        "macros/m.lua",
        "define_macro(\"greatest\", function(a, b) return (\"greatest(%s, %s)\"):format(a, b) end)\ndefine_macro(\"clamp\", function(v) return v end)\n",
    );
    p.write(
        "models/l.lua",
        "define_model { name = \"s.l\", kind = kind.full(), schema = { { \"x\", \"integer\" } },\n  query = \"SELECT @clamp(@greatest(-7, -100)) AS x\" }\n",
    );
    p.apply("dev");
    assert_eq!(p.rows("dev__s.l"), vec![vec![Some("-7".into())]]);
}

/// `ref()` (or `cols()`) called inside a macro's function ran in the interpreter of the macro
/// files: its marker was resolved against the calling model's own references, so a memoised
/// `refs[n] = refs[n] or ref(n)` (passing the purity check) made `@src(s.o)` read the caller's
/// first reference — render, graph and data wrong, exit 0. Refused in Lua and Rhai, naming the
/// macro's file:line and the calling model's.
#[test]
fn ref_and_cols_inside_a_lua_or_rhai_macro_are_load_errors_at_the_call_and_the_macro() {
    let p = project();
    p.write(
        "macros/src.lua",
        "local refs = {}\ndefine_macro(\"src\", function(name)\n  refs[name] = refs[name] or ref(name)\n  return refs[name]\nend)\n\
         define_macro(\"some\", function(name)\n  return cols(name, \"id\")\nend)\n",
    );
    p.write("macros/r.rhai", "define_macro(\"rsrc\", |name| ref(name));\n");
    p.write("models/raw.sql", "-- name: s.raw\n-- kind: full\n-- schema: id integer\nSELECT 1 AS id\n");
    p.write("models/o.sql", "-- name: s.o\n-- kind: full\n-- schema: id integer\nSELECT 2 AS id\n");
    let model = |name: &str, select: &str| format!("-- name: s.{name}\n-- kind: full\n-- schema: id integer\n-- refs: s.raw, s.o\n{select}\n");
    p.write("models/x.sql", &model("x", "SELECT r.id FROM @ref(s.raw) AS r JOIN @src(s.o) AS o USING (id) JOIN @ref(s.o) AS p USING (id)"));
    p.write("models/y.sql", &model("y", "SELECT r.id FROM @ref(s.raw) AS r JOIN @rsrc(s.o) AS o USING (id) JOIN @ref(s.o) AS p USING (id)"));
    p.write("models/z.sql", &model("z", "SELECT r.id, @some(s.o) FROM @ref(s.raw) AS r JOIN @ref(s.o) AS p USING (id)"));
    let r = p.run(&["check"]);
    r.expect_code(1);
    let said = format!("{}{}", r.stdout, r.stderr);
    for (at, want) in [
        (
            "models/x.sql:5:",
            "model `s.x`: macro `@src` (macros/src.lua:2) failed: macros/src.lua:3: `ref()` is not available in macros: pass `@ref(model)` as an argument instead",
        ),
        ("models/y.sql:5:", "macro `@rsrc` (macros/r.rhai:1) failed:"),
        ("models/y.sql:5:", "`ref()` is not available in macros: pass `@ref(model)` as an argument instead"),
        ("models/z.sql:5:", "model `s.z`: macro `@some` (macros/src.lua:6) failed: macros/src.lua:7: `cols()` is not available in macros"),
    ] {
        assert!(said.lines().any(|l| l.starts_with(at) && l.contains(want)), "missing `{at} … {want}` in:\n{said}");
    }
    // Passed as an argument, the reference is the caller's own and reads the model it names.
    p.write("macros/src.lua", "define_macro(\"src\", function(rel) return rel end)\ndefine_macro(\"some\", function(c) return c end)\n");
    p.write("macros/r.rhai", "define_macro(\"rsrc\", |rel| rel);\n");
    p.write("models/x.sql", &model("x", "SELECT p.id FROM @ref(s.raw) AS r, @src(@ref(s.o)) AS p"));
    p.remove("models/y.sql");
    p.remove("models/z.sql");
    p.apply("dev");
    assert_eq!(p.rows("dev__s.x"), vec![vec![Some("2".into())]]);
    // A reference made at the top of a macro file (outside the macro's function, Lua or Rhai)
    // or forged, returned by the macro: refused at the call, never read as the caller's own.
    p.write("macros/src.lua", "local o = ref(\"s.o\")\ndefine_macro(\"src\", function(rel) return o end)\ndefine_macro(\"forged\", function(rel) return string.char(1) .. \"0\" .. string.char(2) end)\n");
    p.write("macros/r.rhai", "let o = ref(\"s.o\");\ndefine_macro(\"rsrc\", |rel| o);\n");
    for (m, call) in [("x", "@src(s.o)"), ("y", "@rsrc(s.o)"), ("z", "@forged(s.o)")] {
        p.write(&format!("models/{m}.sql"), &model(m, &format!("SELECT o.id FROM @ref(s.raw) AS r, {call} AS o, @ref(s.o) AS p")));
    }
    let r = p.run(&["check"]);
    r.expect_code(1);
    let said = format!("{}{}", r.stdout, r.stderr);
    for at in ["models/x.sql:5:", "models/y.sql:5:", "models/z.sql:5:"] {
        assert!(
            said.lines().any(|l| l.starts_with(at) && l.contains("returned a reference to a model it was not given as an argument")),
            "missing {at} in:\n{said}"
        );
    }
}
