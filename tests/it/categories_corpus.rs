//! Golden corpus of change categories (issue #4), driven end to end through the binary.
//!
//! Every case starts from the same small project (plus the case's own `before` texts), applies it
//! to `dev`, edits one or more files, then checks:
//! - `plan dev --json [args]`: the category of every model (models a case does not list must be
//!   `unchanged`), `explain` on every changed action, the expected diverged paths, `reusedFrom`
//!   exactly on the versions that are not built;
//! - `apply dev --yes --json [args]`: the same categories, `built` equal to the case's build set,
//!   the physical relations created equal to those of the built versions, the unbuilt ones still
//!   served from their old relation;
//! - rows: every served model's view in `dev` returns what its query, rendered against `dev`
//!   (`efmesh render --env dev`), returns now, unless the case lists it as legitimately stale
//!   (an operator's choice, or rows outside a shortened schedule);
//! - a plan right after the apply has no changes.
//!
//! The project (raw SQL models, one Lua model):
//!
//! ```text
//! src.events (external CSV) ─┬─ s.parent (full, joins src.regions) ── s.child (full) ── s.grandchild (view)
//! src.regions (external CSV) ┘
//! src.events ── s.daily (incremental_by_time_range, day) ── s.daily_total (view)
//! u.other (full, Lua, unrelated)
//! ```
//!
//! Each case is its own `#[test]` (`categories_corpus::case::<name>`), so a failure names it.

use crate::common::*;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

pub const CONFIG: &str = "[project]\nmodels = [\"models/**/*.{lua,sql}\"]\n\n[engine]\npath = \"efmesh.duckdb\"\n\n[state]\npath = \"efmesh.state.sqlite\"\n";

pub const EVENTS_CSV: &str = "id,event_at,region,amount\n\
1,2026-01-01 00:00:00,north,100\n\
2,2026-01-01 14:00:00,north,150\n\
3,2026-01-01 16:45:00,south,90\n\
4,2026-01-02 00:00:00,south,20\n\
5,2026-01-02 09:10:00,north,120\n\
6,2026-01-05 23:59:59,east,75\n\
7,2026-01-06 00:00:00,east,5\n\
8,2026-02-09 23:00:00,west,42\n\
9,2026-02-10 00:00:00,west,1000\n";

pub const REGIONS_CSV: &str = "region,zone\nnorth,cold\nsouth,warm\neast,mild\n";

pub const EVENTS: &str = "\
-- name: src.events
-- kind: external(path = data/events.csv)
-- schema: id bigint, event_at timestamp, region varchar, amount bigint
";

pub const REGIONS: &str = "\
-- name: src.regions
-- kind: external(path = data/regions.csv)
-- schema: region varchar, zone varchar
";

pub const PARENT: &str = "\
-- name: s.parent
-- kind: full
-- schema: id bigint, region varchar, zone varchar, amount bigint, currency varchar
-- grain: id
-- refs: src.events, src.regions
-- description: Events with their zone
SELECT e.id, e.region, r.zone, e.amount, 'eur' AS currency
FROM @ref(src.events) AS e
LEFT JOIN @ref(src.regions) AS r ON r.region = e.region
WHERE e.amount > 10
";

pub const CHILD: &str = "\
-- name: s.child
-- kind: full
-- schema: region varchar, total bigint, n bigint
-- grain: region
-- refs: s.parent
SELECT region, CAST(sum(amount) AS BIGINT) AS total, count(*) AS n
FROM @ref(s.parent)
GROUP BY region
";

pub const GRANDCHILD: &str = "\
-- name: s.grandchild
-- kind: view
-- schema: region varchar, total bigint, share double
-- refs: s.child
SELECT region, total, total / sum(total) OVER () AS share
FROM @ref(s.child)
";

pub const DAILY: &str = "\
-- name: s.daily
-- kind: incremental_by_time_range(time_column = day, start = '2026-01-01', grain = day, batch_size = 50, lookback = 0)
-- schema: day timestamp, region varchar, revenue bigint, first_at timestamp
-- refs: src.events
SELECT CAST(date_trunc('day', event_at) AS TIMESTAMP) AS day, region,
       CAST(sum(amount) AS BIGINT) AS revenue, CAST(min(event_at) AS TIMESTAMP) AS first_at
FROM @ref(src.events)
WHERE event_at >= @start AND event_at < @end
GROUP BY ALL
";

pub const DAILY_TOTAL: &str = "\
-- name: s.daily_total
-- kind: view
-- schema: region varchar, revenue bigint
-- refs: s.daily
SELECT region, CAST(sum(revenue) AS BIGINT) AS revenue FROM @ref(s.daily) GROUP BY region
";

pub const OTHER: &str = r#"define_model {
  name = "u.other",
  kind = kind.full(),
  schema = { { "x", "integer" }, { "label", "varchar" } },
  query = "SELECT CAST(range AS INTEGER) AS x, 'n' || range AS label FROM range(3)",
}
"#;

/// The base project's model files.
pub const BASE: &[(&str, &str)] = &[
    ("models/events.sql", EVENTS),
    ("models/regions.sql", REGIONS),
    ("models/parent.sql", PARENT),
    ("models/child.sql", CHILD),
    ("models/grandchild.sql", GRANDCHILD),
    ("models/daily.sql", DAILY),
    ("models/daily_total.sql", DAILY_TOTAL),
    ("models/other.lua", OTHER),
];

/// Every model of the base project.
pub const MODELS: &[&str] = &["src.events", "src.regions", "s.parent", "s.child", "s.grandchild", "s.daily", "s.daily_total", "u.other"];

/// The base project (not applied yet).
pub fn base_project() -> Project {
    let p = Project::new();
    p.write("efmesh.toml", CONFIG);
    p.write("data/events.csv", EVENTS_CSV);
    p.write("data/regions.csv", REGIONS_CSV);
    for (f, t) in BASE {
        p.write(f, t);
    }
    p
}

/// `base` with every `(from, to)` replaced once; panics when `from` does not occur exactly once,
/// so an edit can never silently do nothing.
pub fn sub(base: &str, edits: &[(&str, &str)]) -> String {
    let mut s = base.to_string();
    for (from, to) in edits {
        assert_eq!(s.matches(from).count(), 1, "`{from}` must occur exactly once in:\n{s}");
        s = s.replacen(from, to, 1);
    }
    s
}

/// A file's text before the edit.
#[derive(Clone, Copy)]
pub enum Before {
    /// The base project's text.
    Base,
    /// This text.
    Text(&'static str),
}

/// A file's text after the edit.
#[derive(Clone, Copy)]
pub enum After {
    /// Unchanged (the file only needed a custom `before`).
    Same,
    /// This text.
    Text(&'static str),
    /// The `before` text with these replacements.
    Sub(&'static [(&'static str, &'static str)]),
}

/// One file of a case.
#[derive(Clone, Copy)]
pub struct Edit {
    pub file: &'static str,
    pub before: Before,
    pub after: After,
}

/// One corpus case.
pub struct Case {
    /// The edited files.
    pub edits: &'static [Edit],
    /// Extra arguments for both `plan` and `apply` (`--reclassify …`).
    pub args: &'static [&'static str],
    /// Expected category of every model that is not `unchanged`.
    pub expect: &'static [(&'static str, &'static str)],
    /// Models the apply builds or backfills (`built` of the apply JSON).
    pub built: &'static [&'static str],
    /// `(model, text)`: some diverged path of the model's `explain` contains `text`.
    pub diverged: &'static [(&'static str, &'static str)],
    /// Models whose served rows may legitimately differ from a fresh computation.
    pub stale: &'static [&'static str],
    /// `(model, category)`: the action's `reclassifiedFrom`.
    pub reclassified: &'static [(&'static str, &'static str)],
}

const fn edit(file: &'static str, after: After) -> Edit {
    Edit { file, before: Before::Base, after }
}

const NONE: &[&str] = &[];
const NO_PATHS: &[(&str, &str)] = &[];

/// The default case: nothing expected to change. Cases override what they need.
const CASE: Case = Case { edits: &[], args: NONE, expect: NO_PATHS, built: NONE, diverged: NO_PATHS, stale: NONE, reclassified: NO_PATHS };

// Shorthands for the files.
const P: &str = "models/parent.sql";
const C: &str = "models/child.sql";
const G: &str = "models/grandchild.sql";
const D: &str = "models/daily.sql";
const EV: &str = "models/events.sql";
const O: &str = "models/other.lua";

const P_SCHEMA: &str = "-- schema: id bigint, region varchar, zone varchar, amount bigint, currency varchar\n";
const P_SELECT: &str = "SELECT e.id, e.region, r.zone, e.amount, 'eur' AS currency\n";
const C_SCHEMA: &str = "-- schema: region varchar, total bigint, n bigint\n";
const C_SELECT: &str = "SELECT region, CAST(sum(amount) AS BIGINT) AS total, count(*) AS n\n";
const D_KIND: &str = "-- kind: incremental_by_time_range(time_column = day, start = '2026-01-01', grain = day, batch_size = 50, lookback = 0)\n";

/// A parent whose body reads a CTE (for the CTE case).
const PARENT_CTE: &str = "\
-- name: s.parent
-- kind: full
-- schema: id bigint, region varchar, zone varchar, amount bigint, currency varchar
-- grain: id
-- refs: src.events, src.regions
WITH ev AS (SELECT id, region, amount FROM @ref(src.events))
SELECT ev.id, ev.region, r.zone, ev.amount, 'eur' AS currency
FROM ev
LEFT JOIN @ref(src.regions) AS r ON r.region = ev.region
WHERE ev.amount > 10
";

/// A child grouping with `GROUP BY ALL` (no grain: the case adds a grouping column).
const CHILD_GROUP_BY_ALL: &str = "\
-- name: s.child
-- kind: full
-- schema: region varchar, total bigint, n bigint
-- refs: s.parent
SELECT region, CAST(sum(amount) AS BIGINT) AS total, count(*) AS n
FROM @ref(s.parent)
GROUP BY ALL
";

/// A child keeping the top two regions by the 2nd output column (positional ORDER BY).
const CHILD_TOP2: &str = "\
-- name: s.child
-- kind: full
-- schema: region varchar, total bigint, n bigint
-- refs: s.parent
SELECT region, CAST(sum(amount) AS BIGINT) AS total, count(*) AS n
FROM @ref(s.parent)
GROUP BY region
ORDER BY 2 DESC
LIMIT 2
";

/// A DISTINCT child and a grandchild counting its rows.
const CHILD_DISTINCT: &str = "\
-- name: s.child
-- kind: full
-- schema: region varchar, currency varchar
-- refs: s.parent
SELECT DISTINCT region, currency
FROM @ref(s.parent)
";
const GRANDCHILD_COUNT: &str = "\
-- name: s.grandchild
-- kind: view
-- schema: k bigint
-- refs: s.child
SELECT count(*) AS k FROM @ref(s.child)
";

/// An unrelated model whose body is a UNION.
const OTHER_UNION: &str = r#"define_model {
  name = "u.other",
  kind = kind.full(),
  schema = { { "x", "integer" } },
  query = "SELECT 1 AS x UNION ALL SELECT 2 AS x",
}
"#;

macro_rules! corpus {
    ($($name:ident: $case:expr,)*) => {
        /// Every case, by name.
        pub const CASES: &[(&str, Case)] = &[$((stringify!($name), $case),)*];
        mod case {
            $(
                #[test]
                fn $name() {
                    super::run(stringify!($name));
                }
            )*
        }
    };
}

corpus! {
    // ---- formatting only -------------------------------------------------------------------
    reformat_parent: Case {
        edits: &[edit(P, After::Text("\
-- name:   s.parent
-- kind:   full
-- schema: id bigint, region varchar,
--         zone varchar,   amount bigint, currency varchar
-- grain:  id
-- refs:   src.regions, src.events
-- description: Events with their zone
select  e.\"id\", e.region, /* block comment */ r.zone , e.amount,
        'eur' currency   -- implicit alias
from @ref(src.events) e
  left outer join @ref(src.regions) r
    on (r.region = e.region)
where (e.amount > 10)
"))],
        ..CASE
    },
    reformat_child_cast_style: Case {
        edits: &[edit(C, After::Sub(&[(C_SELECT, "SELECT region, sum(amount)::BIGINT AS total, COUNT(*) AS n\n")]))],
        ..CASE
    },
    reformat_lua_model: Case {
        edits: &[edit(O, After::Text(r#"local q = "SELECT CAST(range AS INTEGER) AS x, " .. "'n' || range AS label " .. [[
  FROM   range(3)]]
return define_model {
  name = "u.other", kind = kind.full,
  schema = { { "x", "integer" }, { "label", "varchar" } },
  query = function() return q end,
}
"#))],
        ..CASE
    },

    // Declared types are compared as the fingerprint normalises them (case, whitespace): a
    // re-spelling is no change at all, not even `metadata`.
    type_spelling_only: Case {
        edits: &[edit(P, After::Sub(&[(P_SCHEMA, "-- schema: id BIGINT, region VARCHAR, zone Varchar, amount BIGINT, currency VARCHAR\n")]))],
        ..CASE
    },
    // The same normalisation in categorisation: an added column plus a re-spelled type is
    // non-breaking, and the children are reused.
    type_spelling_and_added_column: Case {
        edits: &[edit(P, After::Sub(&[
            (P_SCHEMA, "-- schema: id BIGINT, region VARCHAR, zone VARCHAR, amount BIGINT, currency VARCHAR, score BIGINT\n"),
            (P_SELECT, "SELECT e.id, e.region, r.zone, e.amount, 'eur' AS currency, e.id * 10 AS score\n"),
        ]))],
        expect: &[("s.parent", "non-breaking"), ("s.child", "indirect"), ("s.grandchild", "indirect")],
        built: &["s.parent"],
        ..CASE
    },

    // ---- added columns: non-breaking, descendants keep their tables ------------------------
    add_column_at_end: Case {
        edits: &[edit(P, After::Sub(&[
            (P_SCHEMA, "-- schema: id bigint, region varchar, zone varchar, amount bigint, currency varchar, score bigint\n"),
            (P_SELECT, "SELECT e.id, e.region, r.zone, e.amount, 'eur' AS currency, e.id * 10 AS score\n"),
        ]))],
        expect: &[("s.parent", "non-breaking"), ("s.child", "indirect"), ("s.grandchild", "indirect")],
        built: &["s.parent"],
        diverged: &[("s.parent", "projection[5] (added)")],
        ..CASE
    },
    add_column_in_middle: Case {
        edits: &[edit(P, After::Sub(&[
            (P_SCHEMA, "-- schema: id bigint, region varchar, region_uc varchar, zone varchar, amount bigint, currency varchar\n"),
            (P_SELECT, "SELECT e.id, e.region, upper(e.region) AS region_uc, r.zone, e.amount, 'eur' AS currency\n"),
        ]))],
        expect: &[("s.parent", "non-breaking"), ("s.child", "indirect"), ("s.grandchild", "indirect")],
        built: &["s.parent"],
        diverged: &[("s.parent", "projection[2] (added)")],
        ..CASE
    },
    add_column_first: Case {
        edits: &[edit(P, After::Sub(&[
            (P_SCHEMA, "-- schema: at timestamp, id bigint, region varchar, zone varchar, amount bigint, currency varchar\n"),
            (P_SELECT, "SELECT e.event_at AS at, e.id, e.region, r.zone, e.amount, 'eur' AS currency\n"),
        ]))],
        expect: &[("s.parent", "non-breaking"), ("s.child", "indirect"), ("s.grandchild", "indirect")],
        built: &["s.parent"],
        diverged: &[("s.parent", "projection[0] (added)")],
        ..CASE
    },
    add_two_columns: Case {
        edits: &[edit(P, After::Sub(&[
            (P_SCHEMA, "-- schema: id bigint, k1 integer, region varchar, zone varchar, amount bigint, currency varchar, k2 varchar\n"),
            (P_SELECT, "SELECT e.id, 1 AS k1, e.region, r.zone, e.amount, 'eur' AS currency, 'two' AS k2\n"),
        ]))],
        expect: &[("s.parent", "non-breaking"), ("s.child", "indirect"), ("s.grandchild", "indirect")],
        built: &["s.parent"],
        diverged: &[("s.parent", "projection[1] (added)"), ("s.parent", "projection[6] (added)")],
        ..CASE
    },
    child_add_aggregate_column: Case {
        edits: &[edit(C, After::Sub(&[
            (C_SCHEMA, "-- schema: region varchar, total bigint, n bigint, top bigint\n"),
            (C_SELECT, "SELECT region, CAST(sum(amount) AS BIGINT) AS total, count(*) AS n, max(amount) AS top\n"),
        ]))],
        expect: &[("s.child", "non-breaking"), ("s.grandchild", "indirect")],
        // The view over the child's new table is a new view (SPEC §4, invariant 18).
        built: &["s.child", "s.grandchild"],
        diverged: &[("s.child", "projection[3] (added)")],
        ..CASE
    },
    child_add_window_column: Case {
        edits: &[edit(C, After::Sub(&[
            (C_SCHEMA, "-- schema: region varchar, total bigint, n bigint, rnk bigint\n"),
            (C_SELECT, "SELECT region, CAST(sum(amount) AS BIGINT) AS total, count(*) AS n, rank() OVER (ORDER BY sum(amount) DESC) AS rnk\n"),
        ]))],
        expect: &[("s.child", "non-breaking"), ("s.grandchild", "indirect")],
        built: &["s.child", "s.grandchild"],
        ..CASE
    },
    leaf_view_add_column: Case {
        edits: &[edit(G, After::Sub(&[
            ("-- schema: region varchar, total bigint, share double\n", "-- schema: region varchar, total bigint, share double, big boolean\n"),
            ("AS share\n", "AS share, total > 100 AS big\n"),
        ]))],
        expect: &[("s.grandchild", "non-breaking")],
        built: &["s.grandchild"],
        diverged: &[("s.grandchild", "projection[3] (added)")],
        ..CASE
    },
    time_range_add_column: Case {
        edits: &[edit(D, After::Sub(&[
            ("first_at timestamp\n", "first_at timestamp, n bigint\n"),
            ("AS first_at\n", "AS first_at, count(*) AS n\n"),
        ]))],
        expect: &[("s.daily", "non-breaking"), ("s.daily_total", "indirect")],
        built: &["s.daily", "s.daily_total"],
        diverged: &[("s.daily", "projection[4] (added)")],
        ..CASE
    },
    parent_and_child_add_columns: Case {
        edits: &[
            edit(P, After::Sub(&[
                (P_SCHEMA, "-- schema: id bigint, region varchar, zone varchar, amount bigint, currency varchar, score bigint\n"),
                (P_SELECT, "SELECT e.id, e.region, r.zone, e.amount, 'eur' AS currency, e.id * 10 AS score\n"),
            ])),
            edit(C, After::Sub(&[
                (C_SCHEMA, "-- schema: region varchar, total bigint, n bigint, top_score bigint\n"),
                (C_SELECT, "SELECT region, CAST(sum(amount) AS BIGINT) AS total, count(*) AS n, max(score) AS top_score\n"),
            ])),
        ],
        expect: &[("s.parent", "non-breaking"), ("s.child", "non-breaking"), ("s.grandchild", "indirect")],
        built: &["s.parent", "s.child", "s.grandchild"],
        ..CASE
    },
    // A `*` reader of a parent that gains a column is rebuilt (its shape would change), and meets
    // the contract like a fresh build would: see `categories::star_reader_*`.

    // ---- removed / renamed / retyped / reordered: breaking ---------------------------------
    remove_column: Case {
        edits: &[edit(P, After::Sub(&[
            (P_SCHEMA, "-- schema: id bigint, region varchar, amount bigint, currency varchar\n"),
            (P_SELECT, "SELECT e.id, e.region, e.amount, 'eur' AS currency\n"),
        ]))],
        expect: &[("s.parent", "breaking"), ("s.child", "indirect"), ("s.grandchild", "indirect")],
        // Column impact: `s.child` reads only `region` and `amount`, so it keeps its table and
        // `s.grandchild` its view (the rows check below compares them with their queries).
        built: &["s.parent"],
        diverged: &[("s.parent", "projection[2] (removed)"), ("s.parent", "schema.zone (removed)")],
        ..CASE
    },
    remove_last_column: Case {
        edits: &[edit(P, After::Sub(&[
            (P_SCHEMA, "-- schema: id bigint, region varchar, zone varchar, amount bigint\n"),
            (P_SELECT, "SELECT e.id, e.region, r.zone, e.amount\n"),
        ]))],
        expect: &[("s.parent", "breaking"), ("s.child", "indirect"), ("s.grandchild", "indirect")],
        // Column impact: `s.child` reads only `region` and `amount`, so it keeps its table and
        // `s.grandchild` its view (the rows check below compares them with their queries).
        built: &["s.parent"],
        diverged: &[("s.parent", "schema.currency (removed)")],
        ..CASE
    },
    rename_column: Case {
        edits: &[edit(P, After::Sub(&[
            (P_SCHEMA, "-- schema: id bigint, region varchar, area varchar, amount bigint, currency varchar\n"),
            (P_SELECT, "SELECT e.id, e.region, r.zone AS area, e.amount, 'eur' AS currency\n"),
        ]))],
        expect: &[("s.parent", "breaking"), ("s.child", "indirect"), ("s.grandchild", "indirect")],
        // Column impact: `s.child` reads only `region` and `amount`, so it keeps its table and
        // `s.grandchild` its view (the rows check below compares them with their queries).
        built: &["s.parent"],
        diverged: &[("s.parent", "schema.zone (removed)"), ("s.parent", "schema.area (added)")],
        ..CASE
    },
    retype_column: Case {
        edits: &[edit(P, After::Sub(&[
            (P_SCHEMA, "-- schema: id bigint, region varchar, zone varchar, amount double, currency varchar\n"),
            (P_SELECT, "SELECT e.id, e.region, r.zone, CAST(e.amount AS DOUBLE) AS amount, 'eur' AS currency\n"),
        ]))],
        expect: &[("s.parent", "breaking"), ("s.child", "indirect"), ("s.grandchild", "indirect")],
        built: &["s.parent", "s.child", "s.grandchild"],
        diverged: &[("s.parent", "schema.amount (type bigint → double)")],
        ..CASE
    },
    reorder_columns: Case {
        edits: &[edit(P, After::Sub(&[
            (P_SCHEMA, "-- schema: id bigint, zone varchar, region varchar, amount bigint, currency varchar\n"),
            (P_SELECT, "SELECT e.id, r.zone, e.region, e.amount, 'eur' AS currency\n"),
        ]))],
        expect: &[("s.parent", "breaking"), ("s.child", "indirect"), ("s.grandchild", "indirect")],
        built: &["s.parent", "s.child", "s.grandchild"],
        ..CASE
    },

    // ---- query changes: breaking -----------------------------------------------------------
    changed_where: Case {
        edits: &[edit(P, After::Sub(&[("WHERE e.amount > 10\n", "WHERE e.amount > 50\n")]))],
        expect: &[("s.parent", "breaking"), ("s.child", "indirect"), ("s.grandchild", "indirect")],
        built: &["s.parent", "s.child", "s.grandchild"],
        diverged: &[("s.parent", "where")],
        ..CASE
    },
    changed_literal: Case {
        edits: &[edit(P, After::Sub(&[("'eur' AS currency", "'usd' AS currency")]))],
        expect: &[("s.parent", "breaking"), ("s.child", "indirect"), ("s.grandchild", "indirect")],
        // Column impact: `s.child` reads only `region` and `amount`, so it keeps its table and
        // `s.grandchild` its view (the rows check below compares them with their queries).
        built: &["s.parent"],
        diverged: &[("s.parent", "projection[4]")],
        ..CASE
    },
    // A column changed to DuckDB's `regexp_split_to_table`, a macro over `unnest`, multiplies the
    // rows though `s.child` reads no changed column: no column impact, the children rebuild.
    changed_item_to_set_returning_macro: Case {
        edits: &[edit(P, After::Sub(&[("'eur' AS currency", "regexp_split_to_table('eur;usd', ';') AS currency")]))],
        expect: &[("s.parent", "breaking"), ("s.child", "indirect"), ("s.grandchild", "indirect")],
        built: &["s.parent", "s.child", "s.grandchild"],
        diverged: &[("s.parent", "projection[4]")],
        ..CASE
    },
    changed_join_type: Case {
        edits: &[edit(P, After::Sub(&[("LEFT JOIN", "INNER JOIN")]))],
        expect: &[("s.parent", "breaking"), ("s.child", "indirect"), ("s.grandchild", "indirect")],
        built: &["s.parent", "s.child", "s.grandchild"],
        diverged: &[("s.parent", "from[0]")],
        ..CASE
    },
    changed_join_condition: Case {
        edits: &[edit(P, After::Sub(&[("ON r.region = e.region", "ON r.region = e.region AND r.zone <> 'cold'")]))],
        expect: &[("s.parent", "breaking"), ("s.child", "indirect"), ("s.grandchild", "indirect")],
        built: &["s.parent", "s.child", "s.grandchild"],
        diverged: &[("s.parent", "from[0]")],
        ..CASE
    },
    added_column_and_changed_where: Case {
        edits: &[edit(P, After::Sub(&[
            (P_SCHEMA, "-- schema: id bigint, region varchar, zone varchar, amount bigint, currency varchar, score bigint\n"),
            (P_SELECT, "SELECT e.id, e.region, r.zone, e.amount, 'eur' AS currency, e.id * 10 AS score\n"),
            ("WHERE e.amount > 10\n", "WHERE e.amount > 50\n"),
        ]))],
        expect: &[("s.parent", "breaking"), ("s.child", "indirect"), ("s.grandchild", "indirect")],
        built: &["s.parent", "s.child", "s.grandchild"],
        diverged: &[("s.parent", "where")],
        ..CASE
    },
    added_cte_column_used_only_by_new_output: Case {
        // The rule only lets the top-level projection differ: a CTE that gains a column is a
        // change of `with`, hence breaking (conservative: non-breaking cannot be proven).
        edits: &[Edit {
            file: P,
            before: Before::Text(PARENT_CTE),
            after: After::Sub(&[
                ("-- schema: id bigint, region varchar, zone varchar, amount bigint, currency varchar\n",
                 "-- schema: id bigint, region varchar, zone varchar, amount bigint, currency varchar, at timestamp\n"),
                ("SELECT id, region, amount FROM", "SELECT id, region, amount, event_at FROM"),
                ("'eur' AS currency\n", "'eur' AS currency, ev.event_at AS at\n"),
            ]),
        }],
        expect: &[("s.parent", "breaking"), ("s.child", "indirect"), ("s.grandchild", "indirect")],
        built: &["s.parent", "s.child", "s.grandchild"],
        diverged: &[("s.parent", "with")],
        ..CASE
    },
    union_body_add_column: Case {
        // Only a plain SELECT's projection can be proven non-breaking; a UNION is breaking.
        edits: &[Edit {
            file: O,
            before: Before::Text(OTHER_UNION),
            after: After::Sub(&[
                (r#"{ { "x", "integer" } }"#, r#"{ { "x", "integer" }, { "y", "varchar" } }"#),
                ("SELECT 1 AS x UNION ALL SELECT 2 AS x", "SELECT 1 AS x, 'a' AS y UNION ALL SELECT 2 AS x, 'b' AS y"),
            ]),
        }],
        expect: &[("u.other", "breaking")],
        built: &["u.other"],
        ..CASE
    },
    unrelated_model_change: Case {
        edits: &[edit(O, After::Sub(&[("FROM range(3)", "FROM range(4)")]))],
        expect: &[("u.other", "breaking")],
        built: &["u.other"],
        ..CASE
    },

    // ---- additions that change existing rows: must not be non-breaking ---------------------
    // With `GROUP BY ALL` a new non-aggregated output column is a new grouping key: the existing
    // rows split, so s.child is breaking and s.grandchild rebuilt.
    group_by_all_added_dimension: Case {
        edits: &[Edit {
            file: C,
            before: Before::Text(CHILD_GROUP_BY_ALL),
            after: After::Sub(&[
                ("-- schema: region varchar, total bigint, n bigint\n", "-- schema: region varchar, total bigint, n bigint, big boolean\n"),
                ("count(*) AS n\n", "count(*) AS n, amount > 100 AS big\n"),
            ]),
        }],
        expect: &[("s.child", "breaking"), ("s.grandchild", "indirect")],
        built: &["s.child", "s.grandchild"],
        ..CASE
    },
    // Under DISTINCT a new output column changes which rows are distinct: s.child breaking,
    // s.grandchild (a count of s.child's rows) rebuilt.
    distinct_added_column: Case {
        edits: &[
            Edit { file: G, before: Before::Text(GRANDCHILD_COUNT), after: After::Same },
            Edit {
                file: C,
                before: Before::Text(CHILD_DISTINCT),
                after: After::Sub(&[
                    ("-- schema: region varchar, currency varchar\n", "-- schema: region varchar, currency varchar, big boolean\n"),
                    ("SELECT DISTINCT region, currency\n", "SELECT DISTINCT region, currency, amount > 100 AS big\n"),
                ]),
            },
        ],
        expect: &[("s.child", "breaking"), ("s.grandchild", "indirect")],
        built: &["s.child", "s.grandchild"],
        ..CASE
    },
    // A set-returning function in a new column multiplies the rows: s.child breaking,
    // s.grandchild rebuilt.
    unnest_added_column: Case {
        edits: &[edit(C, After::Sub(&[
            (C_SCHEMA, "-- schema: region varchar, total bigint, n bigint, k integer\n"),
            (C_SELECT, "SELECT region, CAST(sum(amount) AS BIGINT) AS total, count(*) AS n, unnest([1, 2]) AS k\n"),
        ]))],
        expect: &[("s.child", "breaking"), ("s.grandchild", "indirect")],
        built: &["s.child", "s.grandchild"],
        ..CASE
    },
    // So does a new column calling DuckDB's `regexp_split_to_table` (a macro over `unnest`).
    regexp_split_to_table_added_column: Case {
        edits: &[edit(C, After::Sub(&[
            (C_SCHEMA, "-- schema: region varchar, total bigint, n bigint, part varchar\n"),
            (C_SELECT, "SELECT region, CAST(sum(amount) AS BIGINT) AS total, count(*) AS n, regexp_split_to_table(region, 'o') AS part\n"),
        ]))],
        expect: &[("s.child", "breaking"), ("s.grandchild", "indirect")],
        built: &["s.child", "s.grandchild"],
        ..CASE
    },
    // `ORDER BY 2 … LIMIT 2` is positional: a column inserted before position 2 changes the
    // ordering key, hence which rows survive the LIMIT: s.child breaking, s.grandchild rebuilt.
    positional_order_by_added_column: Case {
        edits: &[Edit {
            file: C,
            before: Before::Text(CHILD_TOP2),
            after: After::Sub(&[
                ("-- schema: region varchar, total bigint, n bigint\n", "-- schema: region varchar, first_id bigint, total bigint, n bigint\n"),
                ("SELECT region, CAST", "SELECT region, min(id) AS first_id, CAST"),
            ]),
        }],
        expect: &[("s.child", "breaking"), ("s.grandchild", "indirect")],
        built: &["s.child", "s.grandchild"],
        ..CASE
    },
    // s.child's own change is non-breaking, but its parent broke, so s.child's existing columns'
    // data changed too: s.grandchild (indirect) is rebuilt, not reused.
    breaking_parent_and_non_breaking_child: Case {
        edits: &[
            edit(P, After::Sub(&[("WHERE e.amount > 10\n", "WHERE e.amount > 100\n")])),
            edit(C, After::Sub(&[
                (C_SCHEMA, "-- schema: region varchar, total bigint, n bigint, top bigint\n"),
                (C_SELECT, "SELECT region, CAST(sum(amount) AS BIGINT) AS total, count(*) AS n, max(amount) AS top\n"),
            ])),
        ],
        expect: &[("s.parent", "breaking"), ("s.child", "non-breaking"), ("s.grandchild", "indirect")],
        built: &["s.parent", "s.child", "s.grandchild"],
        ..CASE
    },

    // ---- metadata: no build -----------------------------------------------------------------
    description_only: Case {
        edits: &[edit(P, After::Sub(&[("-- description: Events with their zone\n", "-- description: Every event over 10, with its zone\n")]))],
        expect: &[("s.parent", "metadata")],
        diverged: &[("s.parent", "description")],
        ..CASE
    },
    description_added: Case {
        edits: &[edit(C, After::Sub(&[("-- refs: s.parent\n", "-- refs: s.parent\n-- description: Totals per region\n")]))],
        expect: &[("s.child", "metadata")],
        diverged: &[("s.child", "description")],
        ..CASE
    },
    description_on_lua_model: Case {
        edits: &[edit(O, After::Sub(&[("  kind = kind.full(),\n", "  kind = kind.full(),\n  description = \"three rows\",\n")]))],
        expect: &[("u.other", "metadata")],
        ..CASE
    },
    audit_only_edit: Case {
        // Audits are metadata (issue #6): attaching them never rebuilds.
        edits: &[edit(O, After::Sub(&[("  kind = kind.full(),\n", "  kind = kind.full(),\n  audits = { audit.not_null(\"x\"), audit.unique { \"x\", blocking = false } },\n")]))],
        expect: &[("u.other", "metadata")],
        diverged: &[("u.other", "audits")],
        ..CASE
    },
    batch_size_only: Case {
        edits: &[edit(D, After::Sub(&[("batch_size = 50", "batch_size = 7")]))],
        expect: &[("s.daily", "metadata")],
        diverged: &[("s.daily", "schedule")],
        ..CASE
    },
    lookback_only: Case {
        edits: &[edit(D, After::Sub(&[("lookback = 0", "lookback = 3")]))],
        expect: &[("s.daily", "metadata")],
        diverged: &[("s.daily", "schedule")],
        ..CASE
    },
    start_later: Case {
        // Rows before the new start stay in the table and are still served (nothing deletes
        // them), so s.daily and s.daily_total differ from a fresh computation from the new start.
        edits: &[edit(D, After::Sub(&[("start = '2026-01-01'", "start = '2026-01-03'")]))],
        expect: &[("s.daily", "metadata")],
        stale: &["s.daily", "s.daily_total"],
        ..CASE
    },
    start_earlier: Case {
        // Metadata, but two new intervals are due: backfilled into the same table.
        edits: &[edit(D, After::Sub(&[("start = '2026-01-01'", "start = '2025-12-30'")]))],
        expect: &[("s.daily", "metadata")],
        // The view downstream of the new intervals is re-created with them (SPEC invariant 33).
        built: &["s.daily", "s.daily_total"],
        ..CASE
    },
    end_only: Case {
        edits: &[edit(D, After::Sub(&[("lookback = 0)", "lookback = 0, end = '2026-03-01')")]))],
        expect: &[("s.daily", "metadata")],
        ..CASE
    },
    external_description_only: Case {
        // An external's metadata is recorded with the environment's pointer, as any model's:
        // a description added is a `metadata` change (nothing built), as in sqlmesh.
        edits: &[edit(EV, After::Sub(&[("-- schema:", "-- description: raw events\n-- schema:")]))],
        expect: &[("src.events", "metadata")],
        diverged: &[("src.events", "description")],
        ..CASE
    },

    // ---- kinds, grains, time columns, sources: breaking ------------------------------------
    kind_full_to_view: Case {
        edits: &[edit(C, After::Sub(&[("-- kind: full\n", "-- kind: view\n")]))],
        expect: &[("s.child", "breaking"), ("s.grandchild", "indirect")],
        built: &["s.child", "s.grandchild"],
        diverged: &[("s.child", "kind")],
        ..CASE
    },
    kind_view_to_full: Case {
        edits: &[edit(G, After::Sub(&[("-- kind: view\n", "-- kind: full\n")]))],
        expect: &[("s.grandchild", "breaking")],
        built: &["s.grandchild"],
        diverged: &[("s.grandchild", "kind")],
        ..CASE
    },
    kind_full_to_embedded: Case {
        edits: &[edit(C, After::Sub(&[("-- kind: full\n", "-- kind: embedded\n")]))],
        expect: &[("s.child", "breaking"), ("s.grandchild", "indirect")],
        // An embedded version is registered, not built.
        built: &["s.grandchild"],
        diverged: &[("s.child", "kind")],
        ..CASE
    },
    time_column_change: Case {
        edits: &[edit(D, After::Sub(&[("time_column = day", "time_column = first_at")]))],
        expect: &[("s.daily", "breaking"), ("s.daily_total", "indirect")],
        built: &["s.daily", "s.daily_total"],
        diverged: &[("s.daily", "kind")],
        ..CASE
    },
    time_grain_day_to_hour: Case {
        edits: &[edit(D, After::Sub(&[(D_KIND, "-- kind: incremental_by_time_range(time_column = day, start = '2026-01-01', grain = hour, batch_size = 1000, lookback = 0)\n")]))],
        expect: &[("s.daily", "breaking"), ("s.daily_total", "indirect")],
        built: &["s.daily", "s.daily_total"],
        diverged: &[("s.daily", "kind")],
        ..CASE
    },
    model_grain_change: Case {
        edits: &[edit(C, After::Sub(&[("-- grain: region\n", "-- grain: region, n\n")]))],
        expect: &[("s.child", "breaking"), ("s.grandchild", "indirect")],
        built: &["s.child", "s.grandchild"],
        diverged: &[("s.child", "grain")],
        ..CASE
    },
    model_grain_removed: Case {
        edits: &[edit(P, After::Sub(&[("-- grain: id\n", "")]))],
        expect: &[("s.parent", "breaking"), ("s.child", "indirect"), ("s.grandchild", "indirect")],
        built: &["s.parent", "s.child", "s.grandchild"],
        diverged: &[("s.parent", "grain")],
        ..CASE
    },
    external_path_change: Case {
        edits: &[edit(EV, After::Sub(&[("path = data/events.csv", "path = data/events_copy.csv")]))],
        expect: &[
            ("src.events", "breaking"),
            ("s.parent", "indirect"), ("s.child", "indirect"), ("s.grandchild", "indirect"),
            ("s.daily", "indirect"), ("s.daily_total", "indirect"),
        ],
        built: &["s.parent", "s.child", "s.grandchild", "s.daily", "s.daily_total"],
        diverged: &[("src.events", "source")],
        ..CASE
    },
    external_column_added: Case {
        edits: &[
            edit(REGIONS_FILE, After::Sub(&[("zone varchar", "zone varchar, zone_id integer")])),
            edit("data/regions.csv", After::Text("region,zone,zone_id\nnorth,cold,1\nsouth,warm,2\neast,mild,3\n")),
        ],
        expect: &[("src.regions", "breaking"), ("s.parent", "indirect"), ("s.child", "indirect"), ("s.grandchild", "indirect")],
        built: &["s.parent", "s.child", "s.grandchild"],
        ..CASE
    },

    // ---- the operator's verdict -------------------------------------------------------------
    reclassify_non_breaking_as_breaking: Case {
        edits: &[edit(P, After::Sub(&[
            (P_SCHEMA, "-- schema: id bigint, region varchar, zone varchar, amount bigint, currency varchar, score bigint\n"),
            (P_SELECT, "SELECT e.id, e.region, r.zone, e.amount, 'eur' AS currency, e.id * 10 AS score\n"),
        ]))],
        args: &["--reclassify", "s.parent=breaking"],
        expect: &[("s.parent", "breaking"), ("s.child", "indirect"), ("s.grandchild", "indirect")],
        built: &["s.parent", "s.child", "s.grandchild"],
        reclassified: &[("s.parent", "non-breaking")],
        ..CASE
    },
    reclassify_where_change_as_non_breaking: Case {
        // Allowed (no column dropped): the operator vouches that existing rows do not change,
        // so the descendants keep their tables even though they are now stale.
        edits: &[edit(P, After::Sub(&[("WHERE e.amount > 10\n", "WHERE e.amount > 50\n")]))],
        args: &["--reclassify", "s.parent=non-breaking"],
        expect: &[("s.parent", "non-breaking"), ("s.child", "indirect"), ("s.grandchild", "indirect")],
        built: &["s.parent"],
        stale: &["s.child", "s.grandchild"],
        reclassified: &[("s.parent", "breaking")],
        ..CASE
    },
}

const REGIONS_FILE: &str = "models/regions.sql";

/// The corpus must stay a corpus.
#[test]
fn corpus_has_at_least_30_cases_and_covers_every_category() {
    assert!(CASES.len() >= 30, "{} cases", CASES.len());
    let seen: BTreeSet<&str> = CASES.iter().flat_map(|(_, c)| c.expect.iter().map(|(_, cat)| *cat)).collect();
    for cat in ["breaking", "non-breaking", "indirect", "metadata"] {
        assert!(seen.contains(cat), "no case expects `{cat}`");
    }
    assert!(CASES.iter().any(|(_, c)| c.expect.is_empty()), "no case where everything stays unchanged");
}

fn text_of(edit: &Edit, base: &BTreeMap<&str, &str>) -> (String, Option<String>) {
    let before = match edit.before {
        Before::Base => base.get(edit.file).unwrap_or_else(|| panic!("no base file {}", edit.file)).to_string(),
        Before::Text(t) => t.to_string(),
    };
    let after = match edit.after {
        After::Same => None,
        After::Text(t) => Some(t.to_string()),
        After::Sub(s) => Some(sub(&before, s)),
    };
    (before, after)
}

/// One read-only look at a project's DuckDB file (one connection for many queries; drop it
/// before running the binary again).
pub struct Db(efmesh::engine::duckdb::DuckDb);

impl Db {
    /// Opens `p`'s DuckDB file.
    pub fn open(p: &Project) -> Db {
        Db(efmesh::engine::duckdb::DuckDb::open(&p.engine_path(), &efmesh::config::EngineSection::default()).expect("open duckdb"))
    }

    /// Runs `sql`.
    #[track_caller]
    pub fn query(&mut self, sql: &str) -> Rows {
        use efmesh::engine::Engine;
        self.0.query(sql).unwrap_or_else(|e| panic!("{e}\n{sql}"))
    }

    /// Every row of `relation`, each value as text, sorted.
    #[track_caller]
    pub fn rows(&mut self, relation: &str) -> Rows {
        let mut r = self.query(&format!("SELECT CAST(COLUMNS(*) AS VARCHAR) FROM {relation}"));
        r.sort();
        r
    }

    /// The served (env view) columns of `model` in `env`, in order.
    pub fn view_columns(&mut self, env: &str, model: &str) -> Vec<String> {
        let (schema, table) = model.split_once('.').expect("schema.table");
        let schema = if env == "prod" { schema.to_string() } else { format!("{env}__{schema}") };
        self.query(&format!(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = '{schema}' AND table_name = '{table}' ORDER BY ordinal_position"
        ))
        .into_iter()
        .map(|r| r[0].clone().expect("name"))
        .collect()
    }

    /// Names of the relations in `_efmesh` but the use records' table and the environment records.
    pub fn physical_tables(&mut self) -> BTreeSet<String> {
        self.query(&format!(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = '_efmesh' AND table_name <> '{}'",
            efmesh::engine::USES_TABLE
        ))
        .into_iter()
        .map(|r| r[0].clone().expect("name"))
        .filter(|name| !efmesh::ownership::is_env_record(name))
        .collect()
    }
}

/// `efmesh render <model> --env <env>` of several models at once (processes run concurrently).
pub fn render_all(p: &Project, env: &str, models: &[String]) -> BTreeMap<String, String> {
    let children: Vec<(String, std::process::Child)> =
        models.iter().map(|m| (m.clone(), p.command(&["render", m, "--env", env, "--json"]).spawn().expect("spawn render"))).collect();
    children
        .into_iter()
        .map(|(m, c)| {
            let out = c.wait_with_output().expect("render");
            assert!(out.status.success(), "render {m}: {}", String::from_utf8_lossy(&out.stderr));
            let v: Value = serde_json::from_slice(&out.stdout).expect("render json");
            (m, v["sql"].as_str().expect("sql").to_string())
        })
        .collect()
}

/// Asserts every served model of `plan` (except `stale`) serves in `env` what its query returns
/// now: its body rendered against `env`'s views, projected on the served columns. Time-range
/// bounds are the whole window `[2026-01-01, 2026-02-10)` of the base project.
#[track_caller]
pub fn assert_views_match_queries(p: &Project, env: &str, plan: &Value, stale: &[&str]) {
    let models: Vec<String> = served_models(plan).into_iter().filter(|m| !stale.contains(&m.as_str())).collect();
    let sqls = render_all(p, env, &models);
    let mut db = Db::open(p);
    for m in &models {
        let served = db.rows(&env_view(env, m));
        assert!(!served.is_empty(), "`{m}` serves no rows in `{env}`: the comparison would prove nothing");
        let sql = sqls[m].replace("$start", "TIMESTAMP '2026-01-01 00:00:00'").replace("$end", "TIMESTAMP '2026-02-10 00:00:00'");
        let cols: Vec<String> = db.view_columns(env, m).iter().map(|c| format!("\"{c}\"")).collect();
        let want = db.rows(&format!("(SELECT {} FROM (\n{sql}\n) AS _q) AS _r", cols.join(", ")));
        assert_eq!(served, want, "`{m}` in `{env}` serves rows (left) that its query no longer returns (right)");
    }
}

fn categories(v: &Value) -> BTreeMap<String, String> {
    actions(v).iter().map(|a| (a["name"].as_str().unwrap().to_string(), a["change"].as_str().unwrap().to_string())).collect()
}

fn run(name: &str) {
    let case = &CASES.iter().find(|(n, _)| *n == name).expect("case").1;
    let mut base: BTreeMap<&str, &str> = BASE.iter().copied().collect();
    base.insert("data/events.csv", EVENTS_CSV);
    base.insert("data/regions.csv", REGIONS_CSV);
    let p = base_project();
    p.write("data/events_copy.csv", EVENTS_CSV);
    let texts: Vec<(String, Option<String>)> = case.edits.iter().map(|e| text_of(e, &base)).collect();
    for (e, (before, _)) in case.edits.iter().zip(&texts) {
        p.write(e.file, before);
    }
    let first = p.apply("dev");
    assert!(actions(&first).iter().all(|a| a["change"] == "added"), "{first:#}");
    let physical_before: BTreeMap<String, Option<String>> =
        actions(&first).iter().map(|a| (a["name"].as_str().unwrap().to_string(), a["physical"].as_str().map(str::to_string))).collect();
    let tables_before = Db::open(&p).physical_tables();
    for (e, (_, after)) in case.edits.iter().zip(&texts) {
        if let Some(a) = after {
            p.write(e.file, a);
        }
    }

    // The expected categories: listed ones, `unchanged` for the rest.
    let mut want: BTreeMap<String, String> = MODELS.iter().map(|m| (m.to_string(), "unchanged".to_string())).collect();
    for (m, c) in case.expect {
        assert!(want.contains_key(*m), "unknown model {m} in the case");
        want.insert(m.to_string(), c.to_string());
    }

    // --- plan
    let mut args = vec!["plan", "dev", "--json"];
    args.extend_from_slice(case.args);
    let plan = p.run(&args).expect_code(0).json();
    assert_eq!(categories(&plan), want, "categories of `{name}`\n{plan:#}");
    assert_eq!(plan["hasChanges"], Value::Bool(!case.expect.is_empty() || !case.built.is_empty()), "{plan:#}");
    for a in actions(&plan) {
        let change = a["change"].as_str().unwrap();
        let has_explain = a.get("explain").is_some_and(|e| e["reason"].as_str().is_some_and(|r| !r.is_empty()));
        assert_eq!(has_explain, !matches!(change, "added" | "unchanged"), "explain of {a:#}");
        if change == "indirect" {
            assert!(!a["explain"]["cascadeFrom"].as_array().is_none_or(Vec::is_empty), "an indirect change names its parent: {a:#}");
            // Reused exactly when not rebuilt.
            // (An embedded model's new version is registered, not built.)
            assert_eq!(a.get("reusedFrom").is_some(), a["build"] == Value::Bool(false) && a.get("register").is_none(), "{a:#}");
        }
        if change == "metadata" || change == "unchanged" {
            assert_eq!(a["build"], Value::Bool(false), "{a:#}");
        }
    }
    for (m, path) in case.diverged {
        let d = &action(&plan, m)["explain"]["diverged"];
        let paths: Vec<&str> = d.as_array().map(|v| v.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
        assert!(paths.iter().any(|x| x.contains(path)), "`{m}`: no diverged path contains `{path}`: {paths:?}");
    }
    for a in actions(&plan) {
        let m = a["name"].as_str().unwrap();
        let want = case.reclassified.iter().find(|(n, _)| *n == m).map(|(_, c)| Value::from(*c));
        assert_eq!(a.get("reclassifiedFrom").cloned(), want, "reclassifiedFrom of {a:#}");
    }

    // --- apply
    let mut args = vec!["apply", "dev", "--yes", "--json"];
    args.extend_from_slice(case.args);
    let applied = p.run(&args).expect_code(0).json();
    assert_eq!(categories(&applied), want, "apply's categories of `{name}`");
    assert_eq!(string_set(&applied["built"]), set(case.built), "built by `{name}`\n{:#}", applied["plan"]);
    // Only the built versions got new physical relations; everything else is served from the
    // relation it had.
    let tables_after = Db::open(&p).physical_tables();
    let new_tables: BTreeSet<String> = tables_after.difference(&tables_before).cloned().collect();
    let built_physicals: BTreeSet<String> = actions(&applied)
        .iter()
        .filter(|a| a["build"] == Value::Bool(true))
        .filter_map(|a| a["physical"].as_str())
        .map(|s| s.rsplit('.').next().unwrap().trim_matches('"').to_string())
        .collect();
    assert_eq!(new_tables, built_physicals, "new physical relations of `{name}`");
    for a in actions(&applied) {
        let m = a["name"].as_str().unwrap();
        if a["build"] == Value::Bool(false) && a["kind"] != "external" && a["kind"] != "embedded" {
            assert_eq!(a["physical"].as_str().map(str::to_string), physical_before[m], "`{m}` is not built, so it keeps its relation");
        }
    }

    // --- rows
    assert_views_match_queries(&p, "dev", &applied, case.stale);

    // --- converged
    let mut args = vec!["plan", "dev", "--json"];
    args.extend_from_slice(case.args);
    let again = p.run(&args).expect_code(0).json();
    assert_eq!(again["hasChanges"], Value::Bool(false), "plan after the apply of `{name}`\n{again:#}");
}
